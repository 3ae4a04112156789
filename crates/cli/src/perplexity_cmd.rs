//! `tessera perplexity`: llama-perplexity's default measurement. The text is tokenized with
//! BOS, cut into chunks of `n_ctx` tokens; each chunk is evaluated from an empty cache (its
//! first token replaced by BOS when the vocabulary adds one), and the negative log-likelihood
//! of every token of the chunk's second half is accumulated (in f64). Prints the running
//! `[i]ppl` values and the final estimate with its standard error, as llama.cpp does.

use crate::common;
use crate::kld;
use anyhow::{anyhow, bail, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;
use tessera_llama::{Batch, ContextParams, LlamaContext, Model};

/// Options of `tessera perplexity` (named as llama-perplexity's).
#[derive(Args, Debug)]
pub struct PerplexityArgs {
    /// Model file (GGUF); default: SmolLM2-135M-Instruct.
    #[arg(short = 'm', long)]
    model: Option<PathBuf>,
    /// Text file (not needed with --kl-divergence: the tokens come from the base file).
    #[arg(short = 'f', long)]
    file: Option<PathBuf>,
    /// llama-perplexity's log-probability file: written (with -f), or read as the base of a
    /// KL-divergence comparison (with --kl-divergence).
    #[arg(long = "kl-divergence-base")]
    kl_divergence_base: Option<PathBuf>,
    /// Compare with the --kl-divergence-base file: KL divergence, Δp, same top token.
    #[arg(long = "kl-divergence")]
    kl_divergence: bool,
    /// Tokens per chunk.
    #[arg(short = 'c', long = "ctx-size", default_value_t = 512)]
    ctx_size: usize,
    /// Tokens per micro-batch (llama-perplexity's `-ub`; default: the whole chunk): smaller
    /// splits each chunk's evaluation, `-ub 1` runs every token as a decoding step (the
    /// decode kernels' KL divergence against a base file).
    #[arg(long = "ubatch-size")]
    ubatch_size: Option<usize>,
    /// Threads (default: all cores).
    #[arg(short = 't', long)]
    threads: Option<usize>,
    /// Chunks to evaluate (-1: all).
    #[arg(long = "chunks", default_value_t = -1, allow_negative_numbers = true)]
    chunks: i64,
    /// Flash attention on or off.
    #[arg(long = "flash-attn", default_value = "auto", value_parser = ["on", "off", "auto"])]
    flash_attn: String,
    /// Keep the weights llama.cpp would repack (Q4_0, Q4_K, IQ4_NL on AVX2) on the plain
    /// kernels, as llama.cpp's `--no-repack` (`-nr`); by default their products follow
    /// llama.cpp's repacked kernels' arithmetic, as llama.cpp does by default.
    #[arg(long = "no-repack")]
    no_repack: bool,
    /// Device placement (`-ngl`, `--device`, `-ts`, `-ot`).
    #[command(flatten)]
    offload: common::OffloadArgs,
    /// The KV cache's types (`-ctk`, `-ctv`).
    #[command(flatten)]
    cache: common::CacheArgs,
    /// LoRA adapters (`--lora`, `--lora-scaled`).
    #[command(flatten)]
    lora: crate::lora_args::LoraArgs,
}

/// `-log softmax(logits)[target]` in f64.
pub fn nll(logits: &[f32], target: u32) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| f64::from(l - max).exp()).sum();
    -(f64::from(logits[target as usize] - max) - sum.ln())
}

/// A context for chunks of `n_ctx` tokens, each evaluated in one micro-batch.
fn chunk_context<'m>(
    model: &'m Model,
    n_ctx: usize,
    a: &PerplexityArgs,
) -> Result<LlamaContext<'m>> {
    let flash_attn = a.flash_attn != "off";
    let (type_k, type_v) = a.cache.types(flash_attn)?;
    let n_ubatch = match a.ubatch_size {
        None => n_ctx,
        Some(u) if (1..=n_ctx).contains(&u) => u,
        Some(u) => bail!("-ub {u}: a micro-batch takes 1 to the chunk's {n_ctx} tokens"),
    };
    let params = ContextParams {
        n_ctx,
        n_ubatch,
        n_threads: common::threads(a.threads),
        flash_attn,
        type_k,
        type_v,
        ..Default::default()
    };
    let mut ctx = LlamaContext::new(model, params).map_err(common::explain)?;
    ctx.set_loras(a.lora.load(model)?).map_err(common::explain)?;
    Ok(ctx)
}

/// Runs the command.
pub fn run(a: PerplexityArgs) -> Result<()> {
    let path = common::resolve_model(a.model.as_deref())?;
    let model = common::load(&path, a.no_repack, &a.offload)?;
    if a.kl_divergence {
        return kl_divergence(&a, &model);
    }
    let file = a.file.as_ref().ok_or_else(|| anyhow!("-f FILE is needed (the text to measure)"))?;
    let text = std::fs::read_to_string(file).map_err(|e| anyhow!("{}: {e}", file.display()))?;
    let mut tokens = model.vocab.tokenize(&text, true, false);
    let n_ctx = a.ctx_size;
    if n_ctx < 8 {
        bail!("-c {n_ctx}: a chunk needs at least 8 tokens");
    }
    let n_chunk_max = tokens.len() / n_ctx;
    if n_chunk_max == 0 {
        bail!(
            "{}: {} tokens, fewer than one chunk of {n_ctx} (use a smaller -c)",
            file.display(),
            tokens.len()
        );
    }
    let n_chunk = if a.chunks < 0 { n_chunk_max } else { (a.chunks as usize).min(n_chunk_max) };
    let mut ctx = chunk_context(&model, n_ctx, &a)?;
    let add_bos = model.vocab.add_bos();
    let bos = model.vocab.bos();
    eprintln!("perplexity: {} tokens, {n_chunk} chunks of {n_ctx}", tokens.len());
    let bar = ProgressBar::new(n_chunk as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} chunks {elapsed_precise} (eta {eta})")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let first = n_ctx / 2;
    let mut base_out = match &a.kl_divergence_base {
        Some(p) => {
            let f = std::fs::File::create(p).map_err(|e| anyhow!("{}: {e}", p.display()))?;
            let mut w = std::io::BufWriter::new(f);
            kld::write_header(&mut w, n_ctx, model.hparams.n_vocab, n_chunk, &tokens)?;
            Some((w, vec![0u16; kld::row_len(model.hparams.n_vocab)]))
        }
        None => None,
    };
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
            if let Some((w, row)) = base_out.as_mut() {
                kld::encode(l, tokens[start + j + 1] as usize, row);
                let bytes: Vec<u8> = row.iter().flat_map(|v| v.to_le_bytes()).collect();
                w.write_all(&bytes)?;
            }
            let v = nll(l, tokens[start + j + 1]);
            sum += v;
            sum2 += v * v;
            count += 1;
        }
        line.push_str(&format!("[{}]{:.4},", i + 1, (sum / count as f64).exp()));
        bar.inc(1);
    }
    bar.finish_and_clear();
    if let Some((mut w, _)) = base_out {
        w.flush()?;
    }
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

/// `--kl-divergence`: evaluates the base file's tokens chunk by chunk and compares each
/// position's distribution with the base's, printing llama-perplexity's table and statistics.
fn kl_divergence(a: &PerplexityArgs, model: &Model) -> Result<()> {
    let base_path = a
        .kl_divergence_base
        .as_ref()
        .ok_or_else(|| anyhow!("--kl-divergence needs --kl-divergence-base FILE"))?;
    let mut base = kld::BaseReader::open(base_path)?;
    if base.n_vocab != model.hparams.n_vocab {
        bail!(
            "{}: vocabulary of {} tokens, the model has {}",
            base_path.display(),
            base.n_vocab,
            model.hparams.n_vocab
        );
    }
    let n_ctx = base.n_ctx;
    let mut ctx = chunk_context(model, n_ctx, a)?;
    let (add_bos, bos) = (model.vocab.add_bos(), model.vocab.bos());
    let first = n_ctx / 2;
    let nv = kld::row_len(base.n_vocab);
    let n_chunk = if a.chunks < 0 { base.n_chunk } else { (a.chunks as usize).min(base.n_chunk) };
    let mut k = kld::Kld::default();
    println!("chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              Δp RMS            Same top p");
    for i in 0..n_chunk {
        let rows = base.next_chunk()?;
        let chunk = &base.tokens[i * n_ctx..(i + 1) * n_ctx];
        let mut batch = Batch::new();
        for (j, &t) in chunk.iter().enumerate() {
            let t = match bos {
                Some(b) if j == 0 && add_bos => b,
                _ => t,
            };
            batch.add(t, j as i32, 0, j >= first);
        }
        ctx.kv_cache_mut().clear();
        ctx.decode(&batch).map_err(|e| anyhow!("{e}"))?;
        for j in first..n_ctx - 1 {
            let l = ctx.logits_ith(j).expect("logits requested");
            let r = &rows[(j - first) * nv..(j - first + 1) * nv];
            k.add(l, r, chunk[j + 1] as usize);
        }
        println!("{}", k.chunk_line(i + 1));
    }
    println!();
    print!("{}", k.report());
    Ok(())
}
