//! `tessera bench`: llama-bench's tests and table. `pp N`: one batch of N tokens into an
//! empty cache; `tg N`: N single-token decodes; each repeated `-r` times after a warm-up run,
//! reported as mean ± standard deviation of tokens per second, in llama-bench's markdown
//! columns (or JSON), so the two tools' tables can be laid side by side.
//!
//! `-d D` (llama-bench's `--n-depth`) fills the cache with D tokens before each run, untimed,
//! so a test measures decoding or a prompt at that context depth (`tg128 @ d4096`).
//!
//! `-npl P` (llama-batched-bench's flag) runs the generation tests with P sequences decoding
//! together, each step one batch of P tokens (one per sequence), as `tessera serve` decodes
//! its slots; the row reports the aggregate tokens per second of all P sequences.

use crate::common;
use anyhow::{anyhow, Result};
use clap::Args;
use std::path::PathBuf;
use std::time::Instant;
use tessera_llama::{Batch, ContextParams, LlamaContext, Model};

/// Options of `tessera bench` (named as llama-bench's).
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Model file (GGUF); default: SmolLM2-135M-Instruct.
    #[arg(short = 'm', long)]
    model: Option<PathBuf>,
    /// Prompt-processing sizes (comma-separated; 0 skips).
    #[arg(short = 'p', long = "n-prompt", value_delimiter = ',', default_value = "512")]
    n_prompt: Vec<usize>,
    /// Generation lengths (comma-separated; 0 skips).
    #[arg(short = 'n', long = "n-gen", value_delimiter = ',', default_value = "128")]
    n_gen: Vec<usize>,
    /// Context depths (comma-separated, llama-bench's `-d`): tokens already in the cache,
    /// evaluated untimed before each run.
    #[arg(short = 'd', long = "n-depth", value_delimiter = ',', default_value = "0")]
    n_depth: Vec<usize>,
    /// Sequences decoding together in the generation tests (comma-separated; llama-batched-bench's
    /// `-npl`): each step decodes one token of every sequence in one batch; t/s is the
    /// aggregate of all of them.
    #[arg(long = "npl", value_delimiter = ',', default_value = "1")]
    n_parallel: Vec<usize>,
    /// Repetitions of each test.
    #[arg(short = 'r', long, default_value_t = 5)]
    repetitions: usize,
    /// Threads (comma-separated list allowed).
    #[arg(short = 't', long, value_delimiter = ',')]
    threads: Vec<usize>,
    /// Flash attention, as llama-bench's `-fa`: 0 or 1 (`on`/`off` are taken too).
    #[arg(long = "flash-attn", default_value = "1", value_parser = parse_fa)]
    flash_attn: u8,
    /// Keep the weights llama.cpp would repack (Q4_0, Q4_K, IQ4_NL on AVX2) on the plain
    /// kernels, as llama.cpp's `--no-repack` (`-nr`); by default their products follow
    /// llama.cpp's repacked kernels' arithmetic, as llama.cpp does by default.
    #[arg(long = "no-repack")]
    no_repack: bool,
    /// Device placement (`-ngl`, `--device`, `-ts`, `-ot`).
    #[command(flatten)]
    offload: common::OffloadArgs,
    /// Batch-invariant kernels (`tessera serve --deterministic`), to measure what the mode
    /// costs.
    #[arg(long)]
    deterministic: bool,
    /// K cache types (comma-separated: one row set per type, llama-bench's `-ctk`).
    #[arg(long = "cache-type-k", value_delimiter = ',', default_value = "f16")]
    cache_type_k: Vec<String>,
    /// V cache types (comma-separated, llama-bench's `-ctv`; a quantized V needs `-fa 1`).
    #[arg(long = "cache-type-v", value_delimiter = ',', default_value = "f16")]
    cache_type_v: Vec<String>,
    /// Output format.
    #[arg(short = 'o', long, default_value = "md", value_parser = ["md", "json"])]
    output: String,
}

/// llama-bench's `-fa 0|1`, and llama-cli's `on|off|auto`.
fn parse_fa(s: &str) -> Result<u8, String> {
    match s {
        "1" | "on" | "auto" => Ok(1),
        "0" | "off" => Ok(0),
        _ => Err(format!("'{s}': use 0 or 1 (or on, off, auto)")),
    }
}

struct Row {
    test: String,
    threads: usize,
    /// The KV cache's (K, V) types.
    cache: (tessera_llama::DType, tessera_llama::DType),
    n_depth: usize,
    n_prompt: usize,
    n_gen: usize,
    n_parallel: usize,
    samples: Vec<f64>,
}

impl Row {
    fn mean(&self) -> f64 {
        self.samples.iter().sum::<f64>() / self.samples.len() as f64
    }
    fn stdev(&self) -> f64 {
        let n = self.samples.len();
        if n < 2 {
            return 0.0;
        }
        let m = self.mean();
        (self.samples.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
    }
}

/// Deterministic token ids spread over the vocabulary (llama-bench feeds random tokens).
fn tokens(n: usize, n_vocab: usize) -> Vec<u32> {
    let mut s = 0x2545_f491_4f6c_dd1du64;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % n_vocab as u64) as u32
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn run_test(
    model: &Model,
    deterministic: bool,
    threads: usize,
    fa: bool,
    (type_k, type_v): (tessera_llama::DType, tessera_llama::DType),
    n_depth: usize,
    n_prompt: usize,
    n_gen: usize,
    n_parallel: usize,
    reps: usize,
) -> Result<Vec<f64>> {
    let n_ctx = n_depth + n_prompt + n_gen * n_parallel + 1;
    let params = ContextParams {
        n_ctx,
        n_threads: threads,
        flash_attn: fa,
        type_k,
        type_v,
        batch_invariant: deterministic,
        ..Default::default()
    };
    let mut ctx = LlamaContext::new(model, params).map_err(common::explain)?;
    let n_vocab = model.hparams.n_vocab;
    let mut samples = Vec::new();
    for rep in 0..=reps {
        ctx.kv_cache_mut().clear();
        if n_depth > 0 {
            // Untimed (decode splits it into micro-batches as a prompt).
            ctx.decode(&Batch::from_tokens(&tokens(n_depth, n_vocab), 0, 0))
                .map_err(|e| anyhow!("{e}"))?;
        }
        let t = Instant::now();
        if n_prompt > 0 {
            ctx.decode(&Batch::from_tokens(&tokens(n_prompt, n_vocab), n_depth as i32, 0))
                .map_err(|e| anyhow!("{e}"))?;
        }
        let toks = tokens(n_gen * n_parallel, n_vocab);
        for (i, step) in toks.chunks(n_parallel).enumerate() {
            let mut batch = Batch::new();
            for (seq, &tok) in step.iter().enumerate() {
                batch.add(tok, (n_depth + n_prompt + i) as i32, seq as u32, true);
            }
            ctx.decode(&batch).map_err(|e| anyhow!("{e}"))?;
        }
        let dt = t.elapsed().as_secs_f64();
        if rep > 0 {
            // Run 0 warms up caches and the allocator, as llama-bench's warm-up run.
            samples.push((n_prompt + n_gen * n_parallel) as f64 / dt);
        }
    }
    Ok(samples)
}

/// Runs the command.
pub fn run(a: BenchArgs) -> Result<()> {
    let path = common::resolve_model(a.model.as_deref())?;
    let model = common::load(&path, a.no_repack, &a.offload)?;
    if let Some(&np) = a.n_parallel.iter().find(|&&np| np == 0 || np > tessera_llama::MAX_SEQ) {
        return Err(anyhow!("--npl {np}: sequences must be 1..={}", tessera_llama::MAX_SEQ));
    }
    if a.repetitions == 0 {
        return Err(anyhow!("-r 0: each test needs at least one repetition"));
    }
    if a.n_depth.iter().any(|&d| d > 0) && a.n_parallel.iter().any(|&np| np > 1) {
        return Err(anyhow!(
            "-d with --npl above 1: the depth would have to be copied to every sequence, which \
             tessera bench does not do; measure depths with --npl 1"
        ));
    }
    let n_train = model.hparams.n_ctx_train;
    let longest = a.n_depth.iter().max().copied().unwrap_or(0)
        + a.n_prompt.iter().max().copied().unwrap_or(0)
        + a.n_gen.iter().max().copied().unwrap_or(0)
            * a.n_parallel.iter().max().copied().unwrap_or(1);
    if longest > n_train {
        return Err(anyhow!(
            "the longest test needs {longest} context cells, more than the model's training \
             context ({n_train}): lower -d / -p / -n"
        ));
    }
    let threads =
        if a.threads.is_empty() { vec![common::threads(None)] } else { a.threads.clone() };
    // Every (K, V) pair, as llama-bench's parameter lists combine.
    let mut caches = Vec::new();
    for k in &a.cache_type_k {
        for v in &a.cache_type_v {
            caches.push(common::cache_types(k, v, a.flash_attn != 0)?);
        }
    }
    // llama-bench shows the type columns only when a value differs from f16.
    let f16 = tessera_llama::DType::F16;
    let show_types = caches.iter().any(|&(k, v)| k != f16 || v != f16);
    let desc = model_desc(&model);
    let size = common::human_bytes(model.weights.n_bytes());
    let params = format!("{:.2} M", model.n_params() as f64 / 1e6);
    let backend = common::backends(&model);
    let ngl = common::ngl(&model);
    let md = a.output == "md";
    let types = |k: &str, v: &str| {
        if show_types {
            format!(" {k:<6} | {v:<6} |")
        } else {
            String::new()
        }
    };
    let print_row = |r: &Row| {
        println!(
            "| {:<30} | {:>10} | {:>10} | {:<10} | {:>3} | {:>7} |{} {:>2} | {:>15} | {:>20} |",
            desc,
            size,
            params,
            backend,
            ngl,
            r.threads,
            types(r.cache.0.name(), r.cache.1.name()),
            a.flash_attn,
            r.test,
            format!("{:.2} ± {:.2}", r.mean(), r.stdev())
        );
    };
    if md {
        // Rows print as their tests finish, as llama-bench's do.
        println!(
            "| {:<30} | {:>10} | {:>10} | {:<10} | {:>3} | {:>7} |{} {:>2} | {:>15} | {:>20} |",
            "model",
            "size",
            "params",
            "backend",
            "ngl",
            "threads",
            types("type_k", "type_v"),
            "fa",
            "test",
            "t/s"
        );
        let rule = if show_types { format!(" {:-<6} | {:-<6} |", "", "") } else { String::new() };
        println!(
            "| {:-<30} | {:->9}: | {:->9}: | {:-<10} | {:->2}: | {:->6}: |{rule} {:->1}: | {:->14}: | {:->19}: |",
            "", "", "", "", "", "", "", "", ""
        );
    }
    let mut rows = Vec::new();
    let runs = threads
        .iter()
        .flat_map(|t| caches.iter().map(move |c| (t, c)))
        .flat_map(|(t, c)| a.n_depth.iter().map(move |d| (*t, *c, *d)));
    for (t, cache, d) in runs {
        let fa = a.flash_attn != 0;
        // llama-bench's label: `pp512 @ d4096` at a depth.
        let at = if d > 0 { format!(" @ d{d}") } else { String::new() };
        for &p in a.n_prompt.iter().filter(|&&p| p > 0) {
            let samples =
                run_test(&model, a.deterministic, t, fa, cache, d, p, 0, 1, a.repetitions)?;
            let test = format!("pp{p}{at}");
            let (n_depth, n_prompt) = (d, p);
            let row = Row {
                test,
                threads: t,
                cache,
                n_depth,
                n_prompt,
                n_gen: 0,
                n_parallel: 1,
                samples,
            };
            if md {
                print_row(&row);
            }
            rows.push(row);
        }
        for &n in a.n_gen.iter().filter(|&&n| n > 0) {
            for &np in &a.n_parallel {
                let samples =
                    run_test(&model, a.deterministic, t, fa, cache, d, 0, n, np, a.repetitions)?;
                let test = if np == 1 { format!("tg{n}{at}") } else { format!("tg{n} x{np}") };
                let row = Row {
                    test,
                    threads: t,
                    cache,
                    n_depth: d,
                    n_prompt: 0,
                    n_gen: n,
                    n_parallel: np,
                    samples,
                };
                if md {
                    print_row(&row);
                }
                rows.push(row);
            }
        }
    }
    if !md {
        let v: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| {
                serde_json::json!({
                    "model_filename": path.display().to_string(),
                    "model_type": desc,
                    "model_size": model.weights.n_bytes(),
                    "model_n_params": model.n_params(),
                    "backends": common::backends(&model),
                    "n_gpu_layers": common::ngl(&model),
                    "cpu_info": common::cpu_name(),
                    "simd": common::simd_level(),
                    "build_commit": env!("TESSERA_GIT_COMMIT"),
                    "repack": !a.no_repack,
                    "n_repacked": model.n_repacked,
                    "n_threads": r.threads,
                    "flash_attn": a.flash_attn != 0,
                    "type_k": r.cache.0.name(),
                    "type_v": r.cache.1.name(),
                    "deterministic": a.deterministic,
                    "n_depth": r.n_depth,
                    "n_prompt": r.n_prompt,
                    "n_gen": r.n_gen,
                    "n_parallel": r.n_parallel,
                    "avg_ts": r.mean(),
                    "stddev_ts": r.stdev(),
                    "samples_ts": r.samples,
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!();
    println!(
        "build: {} | {} | repacked weights: {}",
        env!("TESSERA_GIT_COMMIT"),
        common::system_info(&model),
        model.n_repacked
    );
    Ok(())
}

/// llama-bench's model column: `arch size-label type`, e.g. `llama 135M Q4_1`.
fn model_desc(model: &Model) -> String {
    let md = model.metadata();
    let label = md
        .get("general.size_label")
        .and_then(|v| v.as_str())
        .map_or_else(|| size_label(model.n_params()), str::to_string);
    let ftype = md
        .get("general.file_type")
        .and_then(|v| v.as_integer())
        .map(|t| file_type_name(t as u32))
        .unwrap_or("?");
    format!("{} {} {}", model.hparams.arch, label, ftype)
}

/// A size label from the parameter count where the file has none (`general.size_label`):
/// whole billions as llama.cpp's type names read (1.24 B -> `1B`, 8.03 B -> `8B`), millions
/// below that (`135M`).
fn size_label(n_params: usize) -> String {
    if n_params >= 1_000_000_000 {
        format!("{}B", n_params / 1_000_000_000)
    } else {
        format!("{}M", n_params.div_ceil(1_000_000))
    }
}

/// llama.cpp's `llama_ftype` names.
fn file_type_name(t: u32) -> &'static str {
    match t {
        0 => "all F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        7 => "Q8_0",
        8 => "Q5_0",
        9 => "Q5_1",
        10 => "Q2_K - Medium",
        11 => "Q3_K - Small",
        12 => "Q3_K - Medium",
        13 => "Q3_K - Large",
        14 => "Q4_K - Small",
        15 => "Q4_K - Medium",
        16 => "Q5_K - Small",
        17 => "Q5_K - Medium",
        18 => "Q6_K",
        32 => "BF16",
        _ => "?",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_labels_read_as_llama_cpps_where_the_file_has_none() {
        assert_eq!(size_label(1_235_814_400), "1B");
        assert_eq!(size_label(8_030_261_248), "8B");
        assert_eq!(size_label(134_515_008), "135M");
    }
}
