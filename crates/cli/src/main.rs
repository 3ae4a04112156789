//! `tessera`: the command line of the Tessera stack.
//!
//! Subcommands mirror llama.cpp's tools so people can switch: `tessera gguf` is gguf-dump.

mod gguf_cmd;

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
    let result = match cli.command {
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
