//! `tessera`: the command line of the Tessera stack.
//!
//! Subcommands mirror llama.cpp's tools so people can switch: `tessera run` is llama-cli,
//! `bench` llama-bench, `perplexity` llama-perplexity, `quantize` llama-quantize, `tokenize` llama-tokenize, `gguf`
//! gguf-dump. Logs go to stderr through `tracing` (`RUST_LOG=info` for more).

mod bench_cmd;
mod common;
mod gguf_cmd;
mod kld;
mod perplexity_cmd;
mod quantize_cmd;
mod run_cmd;
mod tokenize_cmd;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "tessera", version, about = "Run and inspect GGUF models (a Rust ggml/llama.cpp)")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate text from a prompt (like llama-cli / llama-simple).
    Run(run_cmd::RunArgs),
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let result = match cli.command {
        Command::Run(a) => run_cmd::run(a),
        Command::Bench(a) => bench_cmd::run(a),
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
