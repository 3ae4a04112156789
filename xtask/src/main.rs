//! `cargo xtask`: the project's automation, in Rust so it runs wherever cargo does.
//!
//! - `cargo xtask ci`: what CI runs: format check, clippy with warnings denied, the real models
//!   fetched and verified, the whole test suite, then the kernel test matrix.
//! - `cargo xtask models [NAME...]`: fetch, assemble and checksum the real models into the cache
//!   (`TESSERA_MODELS`, default under the user's cache directory) and print their paths.
//! - `cargo xtask synth-models DIR`: writes the random-weight qwen3 and gpt2 models the tests
//!   compare with llama.cpp (crates/llama/tools/make_synth_refs.sh makes their references).
//! - `cargo xtask test-matrix [--ops REGEX] [--threads 1,2,3] [--simd scalar,avx2,avx512]`: every
//!   op x type x shape case of tessera-testmatrix on the CPU backend, for each thread count and
//!   SIMD level, against the float64 reference; prints the table, fails on any failure. Built in
//!   release (the matrix runs kernels, not the harness, and must stay fast on CI's 2 cores).

use anyhow::{bail, Context, Result};
use std::process::Command;
use std::time::Instant;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("ci") => ci(),
        Some("models") => models(&args[1..]),
        Some("test-matrix") => test_matrix(&args[1..]),
        Some("synth-models") => synth_models(&args[1..]),
        _ => {
            eprintln!(
                "usage: cargo xtask <ci | models [smollm2|qwen2.5-coder|gemma3]... | test-matrix \
                 [--ops REGEX] [--threads 1,2,3] [--simd scalar,avx2,avx512]>"
            );
            std::process::exit(2)
        }
    }
}

fn cargo(args: &[&str]) -> Result<()> {
    let start = Instant::now();
    eprintln!("==> cargo {}", args.join(" "));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo).args(args).status().context("running cargo")?;
    if !status.success() {
        bail!("`cargo {}` failed ({status})", args.join(" "));
    }
    eprintln!("<== cargo {} ({:.0}s)", args[0], start.elapsed().as_secs_f64());
    Ok(())
}

fn ci() -> Result<()> {
    let start = Instant::now();
    cargo(&["fmt", "--all", "--", "--check"])?;
    cargo(&["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"])?;
    models(&[])?;
    cargo(&["test", "--workspace", "--no-fail-fast"])?;
    test_matrix(&[])?;
    eprintln!("xtask ci: all green in {:.0}s", start.elapsed().as_secs_f64());
    Ok(())
}

/// Runs the `test-matrix` binary of tessera-testmatrix (feature `cpu`) in release, passing `args`.
fn test_matrix(args: &[String]) -> Result<()> {
    let mut all = vec![
        "run",
        "--release",
        "--package",
        "tessera-testmatrix",
        "--features",
        "cpu",
        "--bin",
        "test-matrix",
        "--",
    ];
    all.extend(args.iter().map(String::as_str));
    cargo(&all)
}

fn synth_models(args: &[String]) -> Result<()> {
    let dir = std::path::PathBuf::from(args.first().map_or("target/synth", String::as_str));
    std::fs::create_dir_all(&dir)?;
    let vocab_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/vocab");
    for (stem, spec, vocab) in tessera_llama::synth::test_models() {
        let v = tessera_gguf::GgufFile::open(vocab_dir.join(vocab))
            .with_context(|| format!("opening the vocabulary {vocab}"))?;
        let path = dir.join(format!("{stem}.gguf"));
        tessera_llama::synth::write_random_model(&spec, v.metadata(), &path)?;
        println!("{}", path.display());
    }
    Ok(())
}

fn models(names: &[String]) -> Result<()> {
    let list = if names.is_empty() {
        tessera_models::ALL.to_vec()
    } else {
        names.iter().map(|n| tessera_models::by_name(n)).collect::<Result<_, _>>()?
    };
    for m in &list {
        let path = tessera_models::ensure(m).with_context(|| format!("fetching {}", m.id))?;
        println!("{:14} {}", m.id, path.display());
    }
    Ok(())
}
