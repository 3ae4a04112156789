//! `tessera perplexity`: llama-perplexity's default measurement. The text is tokenized with
//! BOS, cut into chunks of `n_ctx` tokens; each chunk is evaluated from an empty cache (its
//! first token replaced by BOS when the vocabulary adds one), and the negative log-likelihood
//! of every token of the chunk's second half is accumulated (in f64). Prints the running
//! `[i]ppl` values and the final estimate with its standard error, as llama.cpp does.

use crate::common;
use anyhow::{anyhow, bail, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use std::time::Instant;
use tessera_llama::{Batch, ContextParams, LlamaContext};

/// Options of `tessera perplexity` (named as llama-perplexity's).
#[derive(Args, Debug)]
pub struct PerplexityArgs {
    /// Model file (GGUF); default: SmolLM2-135M-Instruct.
    #[arg(short = 'm', long)]
    model: Option<PathBuf>,
    /// Text file.
    #[arg(short = 'f', long)]
    file: PathBuf,
    /// Tokens per chunk.
    #[arg(short = 'c', long = "ctx-size", default_value_t = 512)]
    ctx_size: usize,
    /// Threads (default: all cores).
    #[arg(short = 't', long)]
    threads: Option<usize>,
    /// Chunks to evaluate (-1: all).
    #[arg(long = "chunks", default_value_t = -1, allow_negative_numbers = true)]
    chunks: i64,
    /// Flash attention on or off.
    #[arg(long = "flash-attn", short = 'F', default_value = "on", value_parser = ["on", "off"])]
    flash_attn: String,
}

/// `-log softmax(logits)[target]` in f64.
pub fn nll(logits: &[f32], target: u32) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| f64::from(l - max).exp()).sum();
    -(f64::from(logits[target as usize] - max) - sum.ln())
}

/// Runs the command.
pub fn run(a: PerplexityArgs) -> Result<()> {
    let path = common::resolve_model(a.model.as_deref())?;
    let model = common::load(&path)?;
    let text =
        std::fs::read_to_string(&a.file).map_err(|e| anyhow!("{}: {e}", a.file.display()))?;
    let mut tokens = model.vocab.tokenize(&text, true, false);
    let n_ctx = a.ctx_size;
    if n_ctx < 8 {
        bail!("-c {n_ctx}: a chunk needs at least 8 tokens");
    }
    let n_chunk_max = tokens.len() / n_ctx;
    if n_chunk_max == 0 {
        bail!(
            "{}: {} tokens, fewer than one chunk of {n_ctx} (use a smaller -c)",
            a.file.display(),
            tokens.len()
        );
    }
    let n_chunk = if a.chunks < 0 { n_chunk_max } else { (a.chunks as usize).min(n_chunk_max) };
    let params = ContextParams {
        n_ctx,
        n_ubatch: n_ctx,
        n_threads: common::threads(a.threads),
        flash_attn: a.flash_attn == "on",
        ..Default::default()
    };
    let mut ctx = LlamaContext::new(&model, params).map_err(|e| anyhow!("{e}"))?;
    let add_bos = model.vocab.add_bos();
    let bos = model.vocab.bos();
    eprintln!("perplexity: {} tokens, {n_chunk} chunks of {n_ctx}", tokens.len());
    let bar = ProgressBar::new(n_chunk as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} chunks {elapsed_precise} (eta {eta})")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let first = n_ctx / 2;
    let (mut sum, mut sum2, mut count) = (0f64, 0f64, 0usize);
    let t0 = Instant::now();
    let mut line = String::new();
    for i in 0..n_chunk {
        let start = i * n_ctx;
        let chunk = &mut tokens[start..start + n_ctx];
        let saved = chunk[0];
        if add_bos {
            if let Some(b) = bos {
                chunk[0] = b;
            }
        }
        let mut batch = Batch::new();
        for (j, &t) in chunk.iter().enumerate() {
            batch.add(t, j as i32, 0, j >= first);
        }
        chunk[0] = saved;
        ctx.kv_cache_mut().clear();
        ctx.decode(&batch).map_err(|e| anyhow!("{e}"))?;
        for j in first..n_ctx - 1 {
            let l = ctx.logits_ith(j).expect("logits requested");
            let v = nll(l, tokens[start + j + 1]);
            sum += v;
            sum2 += v * v;
            count += 1;
        }
        line.push_str(&format!("[{}]{:.4},", i + 1, (sum / count as f64).exp()));
        bar.inc(1);
    }
    bar.finish_and_clear();
    println!("{line}");
    let mean = sum / count as f64;
    let var = (sum2 / count as f64 - mean * mean).max(0.0);
    let unc = (var / (count as f64 - 1.0).max(1.0)).sqrt();
    let ppl = mean.exp();
    println!("Final estimate: PPL = {ppl:.4} +/- {:.5}", ppl * unc);
    eprintln!(
        "perplexity: {:.2} s, {:.2} tokens per second",
        t0.elapsed().as_secs_f64(),
        (n_chunk * n_ctx) as f64 / t0.elapsed().as_secs_f64()
    );
    Ok(())
}
