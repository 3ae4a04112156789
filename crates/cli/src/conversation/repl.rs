//! The conversation's terminal side: reading messages (line editing on a terminal, lines from
//! a pipe), the `/` commands, and the line printed after each turn.

use super::{install_interrupt_handler, Conversation};
use crate::common::Streamer;
use anyhow::{anyhow, Result};
use std::io::{BufRead, Write};
use tessera_llama::sampling::SamplerChain;

/// Reads one user message: a line, or several joined where a line ends with `\`. `None` at
/// end of input (Ctrl-D).
fn read_message(input: &mut impl BufRead) -> Result<Option<String>> {
    let mut text = String::new();
    loop {
        let mut line = String::new();
        if input.read_line(&mut line)? == 0 {
            return Ok(if text.is_empty() { None } else { Some(text) });
        }
        let line = line.trim_end_matches(['\n', '\r']);
        if let Some(cont) = line.strip_suffix('\\') {
            text.push_str(cont);
            text.push('\n');
        } else {
            text.push_str(line);
            return Ok(Some(text));
        }
    }
}

/// The commands `/help` lists.
const HELP: &str = "commands:\n  /clear   forget the conversation (the system prompt stays)\n  \
                    /regen   ask for the last reply again\n  /image F add image F to the next message (with --mmproj)\n  /help    this list\n  \
                    /exit    end (also /quit, Ctrl-D, Ctrl-C at the prompt)\n\
                    end a line with \\ to continue the message on the next line";

/// Where messages come from: an editable line on a terminal, plain lines from a pipe.
enum Input {
    Terminal(Box<rustyline::DefaultEditor>),
    Piped(std::io::StdinLock<'static>),
}

impl Input {
    fn open() -> Result<Input> {
        use std::io::IsTerminal;
        if std::io::stdin().is_terminal() {
            let ed = rustyline::DefaultEditor::new()
                .map_err(|e| anyhow!("opening the terminal for line editing: {e}"))?;
            Ok(Input::Terminal(Box::new(ed)))
        } else {
            Ok(Input::Piped(std::io::stdin().lock()))
        }
    }

    /// The next message; `None` at Ctrl-D or Ctrl-C at the prompt.
    fn message(&mut self) -> Result<Option<String>> {
        match self {
            Input::Piped(input) => {
                print!("\n> ");
                std::io::stdout().flush()?;
                read_message(input)
            }
            Input::Terminal(ed) => {
                use rustyline::error::ReadlineError;
                println!();
                let mut text = String::new();
                loop {
                    let prompt = if text.is_empty() { "> " } else { ". " };
                    match ed.readline(prompt) {
                        Ok(line) => {
                            if let Some(cont) = line.strip_suffix('\\') {
                                text.push_str(cont);
                                text.push('\n');
                                continue;
                            }
                            text.push_str(&line);
                            // Messages, not commands, are what Up brings back.
                            if !text.trim().is_empty() && !text.starts_with('/') {
                                let _ = ed.add_history_entry(text.as_str());
                            }
                            return Ok(Some(text));
                        }
                        Err(ReadlineError::Eof | ReadlineError::Interrupted) => return Ok(None),
                        Err(e) => return Err(anyhow!("reading the prompt: {e}")),
                    }
                }
            }
        }
    }
}

/// Runs the conversation loop on stdin/stdout until `/exit`, Ctrl-D or Ctrl-C at the prompt.
pub fn run(mut conv: Conversation<'_>, mut sampler: SamplerChain) -> Result<()> {
    // The editor first: it sets its own SIGINT handler when created (and restores it when
    // dropped); ours must be the one in force while a reply streams.
    let mut input = Input::open()?;
    install_interrupt_handler()?;
    eprintln!(
        "== conversation mode: type a message and press Enter; Ctrl-C stops a reply, \
         /exit or Ctrl-D ends, /help lists the commands =="
    );
    let mut turn = 0;
    loop {
        let Some(mut msg) = input.message()? else {
            println!();
            break;
        };
        let trimmed = msg.trim();
        match trimmed {
            "/exit" | "/quit" => break,
            "" => continue,
            "/help" | "/?" => {
                eprintln!("{HELP}");
                continue;
            }
            "/clear" => {
                conv.clear();
                turn = 0;
                eprintln!("[conversation cleared]");
                continue;
            }
            "/regen" if conv.has_media() => {
                eprintln!("[/regen is not available once images are in the conversation; /clear starts over]");
                continue;
            }
            t if t.starts_with("/image ") => {
                let path = std::path::Path::new(t["/image ".len()..].trim());
                match conv.add_image(path) {
                    Ok((w, h)) => {
                        eprintln!("[image {} ({w}x{h}) added to the next message]", path.display())
                    }
                    Err(e) => eprintln!("error: {e:#}"),
                }
                continue;
            }
            "/regen" => match conv.take_last_turn() {
                Some(q) => msg = q,
                None => {
                    eprintln!("[nothing to regenerate yet]");
                    continue;
                }
            },
            t if t.starts_with('/') && !t.contains(char::is_whitespace) => {
                eprintln!("unknown command {t}; /help lists the commands");
                continue;
            }
            _ => {}
        }
        turn += 1;
        let mut out = Streamer::default();
        match conv.turn(&msg, &mut sampler, &mut out) {
            Ok(s) => {
                let speculated = match s.spec.n_drafted {
                    0 => String::new(),
                    n => format!(", {} of {n} proposals accepted", s.spec.n_accepted),
                };
                let shifted = match s.n_shifts {
                    0 => String::new(),
                    n => format!(", the context shifted {n} time(s)"),
                };
                let why = if s.interrupted {
                    ", stopped by Ctrl-C"
                } else if s.context_full {
                    ", the context is full: /exit and start again with a larger -c"
                } else {
                    ""
                };
                eprintln!(
                    "[turn {turn}: {} new prompt tokens evaluated, {} generated ({:.1} t/s), \
                     {}/{} context used{speculated}{shifted}{why}]",
                    s.n_eval,
                    s.n_gen,
                    s.tokens_per_s,
                    conv.n_past(),
                    conv.n_ctx()
                );
            }
            Err(e) => eprintln!("error: {e:#}"),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_continue_over_lines_ending_in_a_backslash() {
        let mut r = std::io::Cursor::new("one\\\ntwo\nthree\n");
        assert_eq!(read_message(&mut r).unwrap().as_deref(), Some("one\ntwo"));
        assert_eq!(read_message(&mut r).unwrap().as_deref(), Some("three"));
        assert_eq!(read_message(&mut r).unwrap(), None);
    }
}
