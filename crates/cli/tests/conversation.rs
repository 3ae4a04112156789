//! `tessera run -cnv` through a pseudo-terminal, as a person uses it: two turns where the second
//! reply needs the first, with only the second turn's own tokens evaluated (the history stays in
//! the KV cache); Ctrl-C stops a reply and keeps the session; `/exit` ends it with status 0.
//! On Qwen2.5-Coder-0.5B-Instruct (greedy), the smallest of the real models with a chat template
//! that answers from the conversation.

use regex::Regex;
use rexpect::reader::Options;
use rexpect::session::{spawn_with_options, PtySession};
use std::process::Command;

const TIMEOUT_MS: u64 = 180_000;

fn start(model: &str, n_predict: &str) -> PtySession {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tessera"));
    // A terminal with line editing (CI may have no TERM at all).
    cmd.env("TERM", "xterm");
    cmd.args(["run", "-m", model, "-cnv", "--temp", "0", "-n", n_predict, "-t", "2", "-c", "1024"]);
    spawn_with_options(
        cmd,
        Options::new().timeout_ms(Some(TIMEOUT_MS)).strip_ansi_escape_codes(true),
    )
    .expect("starting tessera in a pseudo-terminal")
}

/// Sends a message and returns (reply text, prompt tokens evaluated, tokens generated, context used).
fn turn(p: &mut PtySession, n: usize, message: &str) -> (String, usize, usize, usize) {
    p.exp_string("> ").expect("the prompt");
    p.send_line(message).expect("typing");
    let pat = format!(
        r"\[turn {n}: (\d+) new prompt tokens evaluated, (\d+) generated \([0-9.]+ t/s\), (\d+)/1024 context used[^\]]*\]"
    );
    let (before, stats) = p.exp_regex(&pat).unwrap_or_else(|e| panic!("turn {n}: {e}"));
    let c = Regex::new(&pat).unwrap().captures(&stats).unwrap();
    let num = |i: usize| c[i].parse::<usize>().unwrap();
    // The terminal echoes the typed line first; the reply follows it.
    let text = before.replace("\r\n", "\n");
    let reply = text.split_once(message).map_or(text.as_str(), |(_, r)| r).trim().to_string();
    (reply, num(1), num(2), num(3))
}

fn qwen() -> String {
    let p = tessera_models::ensure(&tessera_models::QWEN25_CODER).expect("model");
    p.to_str().unwrap().to_string()
}

#[test]
fn the_second_turn_sees_the_first_and_evaluates_only_its_own_tokens() {
    let model_path = qwen();
    let mut p = start(&model_path, "24");
    let first = "My name is Alice.";
    let second = "What is my name?";
    let (reply1, eval1, gen1, used1) = turn(&mut p, 1, first);
    assert_eq!(used1, eval1 + gen1, "turn 1: {reply1:?}");
    let (reply2, eval2, gen2, used2) = turn(&mut p, 2, second);
    assert!(reply2.contains("Alice"), "the second reply does not see the first: {reply2:?}");
    assert_eq!(used2, used1 + eval2 + gen2);

    // What evaluating the whole conversation again would cost: its full rendering.
    let model =
        tessera_llama::Model::load(&model_path, tessera_backend_cpu::CpuDevice::shared()).unwrap();
    let tpl = model.chat_template.as_deref().unwrap();
    let msgs = [("user", first), ("assistant", reply1.as_str()), ("user", second)];
    let full = tessera_llama::chat::apply(tpl, &msgs, true, &model.vocab).unwrap();
    let n_full = model.vocab.tokenize(&full, true, true).len();
    // Only the new turn (and the end-of-turn marker of the first reply) was evaluated.
    assert_eq!(eval2, n_full - used1, "turn 2 evaluated {eval2} of {n_full} tokens");
    assert!(eval2 < n_full / 2, "turn 2 re-evaluated the history: {eval2} of {n_full}");

    p.exp_string("> ").unwrap();
    p.send_line("/exit").unwrap();
    p.exp_eof().unwrap();
    let status = p.process_mut().wait().unwrap();
    assert!(matches!(status, rexpect::process::WaitStatus::Exited(_, 0)), "exit status {status:?}");
}

#[test]
fn ctrl_c_stops_a_reply_and_keeps_the_session() {
    let mut p = start(&qwen(), "400");
    p.exp_string("> ").unwrap();
    p.send_line("Count from 1 to 300, one number per line.").unwrap();
    // Wait until the reply is streaming, then interrupt it.
    p.exp_regex(r"\n\s*1\d\r?\n").expect("the reply streams numbers");
    p.send_control('c').unwrap();
    let (_, line) = p.exp_regex(r"\[turn 1: [^\]]*\]").unwrap();
    assert!(line.contains("stopped by Ctrl-C"), "{line}");
    let gen: usize =
        Regex::new(r"(\d+) generated").unwrap().captures(&line).unwrap()[1].parse().unwrap();
    assert!(gen < 400, "{line}");
    // The session goes on: another turn is answered.
    p.exp_string("> ").unwrap();
    p.send_line("Thanks.").unwrap();
    p.exp_regex(r"\[turn 2: ").unwrap();
    // Ctrl-D ends it.
    p.exp_string("> ").unwrap();
    p.send_control('d').unwrap();
    p.exp_eof().unwrap();
}

/// The conversation's commands and line editing: `/help` lists them; `/regen` asks the last
/// question again (greedy, so the same reply: the KV cache dropped the old one exactly);
/// `/clear` forgets the conversation; the Up arrow brings back the last message.
#[test]
fn commands_and_history_work_at_the_prompt() {
    let mut p = start(&qwen(), "24");
    p.exp_string("> ").unwrap();
    p.send_line("/help").unwrap();
    p.exp_string("/regen").expect("/help lists the commands");
    let (reply1, _, _, used1) = turn(&mut p, 1, "My name is Alice. Say hello to me.");
    p.exp_string("> ").unwrap();
    p.send_line("/regen").unwrap();
    let pat = r"\[turn 2: (\d+) new prompt tokens evaluated, (\d+) generated \([0-9.]+ t/s\), (\d+)/1024 context used[^\]]*\]";
    let (before, stats) = p.exp_regex(pat).expect("/regen answers again");
    let c = Regex::new(pat).unwrap().captures(&stats).unwrap();
    assert_eq!(c[3].parse::<usize>().unwrap(), used1, "the old reply's cells were dropped");
    let again = before.replace("\r\n", "\n");
    assert!(again.trim().ends_with(reply1.trim()), "greedy regen differs: {again:?} vs {reply1:?}");
    p.exp_string("> ").unwrap();
    p.send_line("/clear").unwrap();
    p.exp_string("[conversation cleared]").unwrap();
    // Up arrow, Enter: the last message (the one /regen re-asked) is sent again, to a
    // conversation that starts over.
    p.exp_string("> ").unwrap();
    p.send("\x1b[A").unwrap();
    p.flush().unwrap();
    p.exp_string("Say hello to me.").expect("Up shows the last message");
    p.send("\r").unwrap();
    p.flush().unwrap();
    let (_, stats) = p.exp_regex(r"\[turn 1: [^\]]*\]").expect("history recalls the message");
    let used: usize =
        Regex::new(r"(\d+)/1024").unwrap().captures(&stats).unwrap()[1].parse().unwrap();
    assert_eq!(used, used1, "after /clear the same question costs the same: {stats}");
    p.exp_string("> ").unwrap();
    p.send_line("/exit").unwrap();
    p.exp_eof().unwrap();
}
