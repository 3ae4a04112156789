//! `tessera`: the command line of the Tessera stack.
//!
//! Subcommands mirror llama.cpp's tools so people can switch: `tessera run` is llama-cli,
//! `bench` llama-bench, `perplexity` llama-perplexity, `quantize` llama-quantize, `tokenize` llama-tokenize, `gguf`
//! gguf-dump. Logs go to stderr through `tracing` (`RUST_LOG=info` for more). llama.cpp's
//! multi-letter flags (`-cnv`, `-sys`, `-fa`, `-nr`) are accepted as they are.

mod bench_cmd;
mod common;
mod conversation;
mod devices;
mod generate_loop;
mod gguf_cmd;
mod grammar_args;
mod kld;
mod lora_args;
mod mtmd_args;
mod perplexity_cmd;
mod quantize_cmd;
mod run_cmd;
mod sampling_args;
mod serve_cmd;
mod serve_vision;
mod spec_args;
mod tokenize_cmd;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "tessera", about = "Run and inspect GGUF models (a Rust ggml/llama.cpp)")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate text from a prompt (like llama-cli / llama-simple).
    Run(run_cmd::RunArgs),
    /// Serve the model over an OpenAI-compatible HTTP API with continuous batching (like
    /// llama-server).
    Serve(serve_cmd::ServeArgs),
    /// Measure prompt processing and generation speed (like llama-bench).
    Bench(bench_cmd::BenchArgs),
    /// Measure perplexity on a text file (like llama-perplexity).
    Perplexity(perplexity_cmd::PerplexityArgs),
    /// Re-encode a model's weights to another type (like llama-quantize).
    Quantize(quantize_cmd::QuantizeArgs),
    /// Show how a text is tokenized (like llama-tokenize).
    Tokenize(tokenize_cmd::TokenizeArgs),
    /// Print a GGUF file's metadata and tensor table (like gguf-dump).
    Gguf {
        /// The GGUF file.
        file: PathBuf,
        /// Print JSON (every value in full) instead of the table.
        #[arg(long)]
        json: bool,
        /// Show at most this many elements of each array in the table view.
        #[arg(long, default_value_t = 8)]
        array_items: usize,
    },
}

/// llama.cpp's multi-letter single-dash flags, spelled as clap's long options, so that
/// commands copied from llama.cpp's documentation work as they are.
const LLAMA_CPP_FLAGS: &[(&str, &str)] = &[
    ("-cnv", "--conversation"),
    ("-no-cnv", "--no-conversation"),
    ("-sys", "--system-prompt"),
    ("-fa", "--flash-attn"),
    ("-nr", "--no-repack"),
    ("-ngl", "--n-gpu-layers"),
    ("-dev", "--device"),
    ("-ts", "--tensor-split"),
    ("-ot", "--override-tensor"),
    ("-cmoe", "--cpu-moe"),
    ("-ncmoe", "--n-cpu-moe"),
    ("-np", "--parallel"),
    ("-cram", "--cache-ram"),
    ("-rea", "--reasoning"),
    ("-to", "--timeout"),
    ("-ctk", "--cache-type-k"),
    ("-ctv", "--cache-type-v"),
    ("-jf", "--json-schema-file"),
    ("-md", "--spec-draft-model"),
    ("-ngld", "--spec-draft-ngl"),
    ("-devd", "--spec-draft-device"),
    ("-mm", "--mmproj"),
    ("-ub", "--ubatch-size"),
];

/// The arguments with llama.cpp's multi-letter flags rewritten (`-cnv` is not `-c nv`), and
/// `run` put in where flags come without a subcommand (`tessera -m M -p hi`, as llama-cli).
fn normalize_args(args: impl IntoIterator<Item = std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let mut out: Vec<std::ffi::OsString> = args
        .into_iter()
        .map(|a| match LLAMA_CPP_FLAGS.iter().find(|(short, _)| a == *short) {
            Some((_, long)) => (*long).into(),
            None => a,
        })
        .collect();
    let own = ["-h", "--help", "-V", "--version"];
    if out
        .get(1)
        .is_some_and(|a| a.to_str().is_some_and(|a| a.starts_with('-') && !own.contains(&a)))
    {
        out.insert(1, "run".into());
    }
    out
}

/// Writing to a closed pipe (`tessera run ... | head`) ends the program quietly, as it ends
/// C programs like llama-cli, instead of a panic in `print!`. Not for `serve`, whose sockets
/// report a closed peer as an error.
#[cfg(unix)]
fn default_sigpipe() {
    // SAFETY: FFI call setting SIGPIPE's disposition to the default before any thread is
    // started; SIG_DFL is a valid handler value and signal() has no other preconditions.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// What `tessera --version` prints: version, git commit, the SIMD level this CPU runs and the
/// features built in, as `llama-cli --version` prints its build.
fn version_text() -> String {
    let (level, vnni) = common::simd();
    let best = tessera_backend_cpu::SimdLevel::detect();
    let forced =
        if level == best { String::new() } else { format!(" (TESSERA_SIMD; CPU: {best})") };
    let vnni = if vnni { " +VNNI" } else { "" };
    let kernels = if cfg!(target_arch = "x86_64") { "scalar, avx2, avx512" } else { "scalar" };
    format!(
        "{} (commit {})\nSIMD: {level}{vnni}{forced}; kernels built in: {kernels}\n\
         backends: {}\ndevices:\n{}\nbuilt for {}-{}, rustc profile {}",
        env!("CARGO_PKG_VERSION"),
        env!("TESSERA_GIT_COMMIT"),
        if cfg!(feature = "cuda") { "CPU, CUDA" } else { "CPU" },
        devices::describe(&devices::registry()),
        std::env::consts::ARCH,
        std::env::consts::OS,
        if cfg!(debug_assertions) { "debug" } else { "release" },
    )
}

fn main() -> ExitCode {
    let version = version_text();
    let matches = Cli::command()
        .version(env!("CARGO_PKG_VERSION"))
        .long_version(version)
        .get_matches_from(normalize_args(std::env::args_os()));
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    #[cfg(unix)]
    if !matches!(cli.command, Command::Serve(_)) {
        default_sigpipe();
    }
    // The server logs each request by default (an operator's first question); the other
    // commands only warnings. RUST_LOG overrides, --log-disable silences.
    let (default, silent) = match &cli.command {
        Command::Serve(a) => ("warn,tessera_server=info", a.log_disable),
        Command::Run(a) => ("warn", a.log_disable),
        _ => ("warn", false),
    };
    let filter = if silent {
        tracing_subscriber::EnvFilter::new("off")
    } else {
        tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default))
    };
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .init();
    let result = match cli.command {
        Command::Run(a) => run_cmd::run(a),
        Command::Bench(a) => bench_cmd::run(a),
        Command::Serve(a) => serve_cmd::run(a),
        Command::Perplexity(a) => perplexity_cmd::run(a),
        Command::Tokenize(a) => tokenize_cmd::run(a),
        Command::Quantize(a) => quantize_cmd::run(a),
        Command::Gguf { file, json, array_items } => gguf_cmd::run(&file, json, array_items),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama_cpp_flags_become_long_options() {
        let args = ["tessera", "run", "-cnv", "-sys", "be brief", "-c", "512"].map(Into::into);
        let out = normalize_args(args);
        let out: Vec<&str> = out.iter().map(|a| a.to_str().unwrap()).collect();
        assert_eq!(
            out,
            ["tessera", "run", "--conversation", "--system-prompt", "be brief", "-c", "512"]
        );
        let cli = Cli::try_parse_from(normalize_args(
            ["tessera", "run", "-cnv", "-fa", "off"].map(std::ffi::OsString::from),
        ));
        assert!(cli.is_ok());
    }

    #[test]
    fn flags_without_a_subcommand_run() {
        let out = normalize_args(["tessera", "-m", "x.gguf", "-p", "hi"].map(Into::into));
        assert_eq!(out[1], "run");
        let out = normalize_args(["tessera", "--help"].map(Into::into));
        assert_eq!(out.len(), 2);
        let out = normalize_args(["tessera", "bench", "-p", "8"].map(Into::into));
        assert_eq!(out[1], "bench");
    }

    #[test]
    fn llama_cpp_habits_parse() {
        let ok = |args: &[&str]| {
            let mut v = vec!["tessera"];
            v.extend_from_slice(args);
            Cli::try_parse_from(normalize_args(v.into_iter().map(std::ffi::OsString::from)))
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        ok(&["run", "--seed", "-1", "--temp", "-1", "-no-cnv", "-e", "--ignore-eos"]).unwrap();
        ok(&["run", "--jinja", "-fa", "auto", "--log-disable", "--no-display-prompt"]).unwrap();
        ok(&["run", "-f", "prompt.txt", "-c", "0"]).unwrap();
        ok(&["perplexity", "-f", "wiki.txt", "-fa", "on"]).unwrap();
        ok(&["bench", "-fa", "0", "-p", "16"]).unwrap();
        ok(&["serve", "-a", "my-model", "-np", "2", "-fa", "auto", "--log-disable"]).unwrap();
        assert!(ok(&["run", "-p", "a", "-f", "b"]).is_err());
        assert!(ok(&["run", "-cnv", "-no-cnv"]).is_err());
    }
}
