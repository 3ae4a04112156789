//! `tessera run`: llama-cli / llama-simple: tokenize a prompt (optionally through the model's
//! chat template), decode it, sample and stream tokens, then print the speeds; or, with `-cnv`
//! (or `--chat` without `-p`), a conversation in the terminal (crate::conversation).

use crate::common::{self, Streamer};
use crate::conversation;
use anyhow::{bail, Result};
use clap::Args;
use std::path::PathBuf;
use std::time::Instant;
use tessera_llama::sampling::{SamplerChain, SamplingParams};
use tessera_llama::{Batch, ContextParams, LlamaContext};

/// Options of `tessera run` (named as llama.cpp's).
#[derive(Args, Debug)]
pub struct RunArgs {
    /// Model file (GGUF); default: SmolLM2-135M-Instruct, fetched on first use.
    #[arg(short = 'm', long)]
    model: Option<PathBuf>,
    /// Prompt (default "Once upon a time"); with -cnv, the system prompt, as llama-cli.
    #[arg(short = 'p', long)]
    prompt: Option<String>,
    /// Tokens to generate (-1: until end of generation or the context is full); default 128,
    /// and -1 for each reply in conversation mode.
    #[arg(short = 'n', long = "n-predict", allow_negative_numbers = true)]
    n_predict: Option<i64>,
    /// Context size (KV cells).
    #[arg(short = 'c', long = "ctx-size", default_value_t = 4096)]
    ctx_size: usize,
    /// Threads (default: all cores).
    #[arg(short = 't', long)]
    threads: Option<usize>,
    /// Temperature (0: greedy).
    #[arg(long, default_value_t = 0.8)]
    temp: f32,
    /// Top-k (0: off).
    #[arg(long = "top-k", default_value_t = 40)]
    top_k: usize,
    /// Top-p (1: off).
    #[arg(long = "top-p", default_value_t = 0.95)]
    top_p: f32,
    /// Min-p (0: off).
    #[arg(long = "min-p", default_value_t = 0.05)]
    min_p: f32,
    /// Typical-p (1: off).
    #[arg(long = "typical", default_value_t = 1.0)]
    typical: f32,
    /// Repetition penalty (1: off).
    #[arg(long = "repeat-penalty", default_value_t = 1.0)]
    repeat_penalty: f32,
    /// Tokens the penalties look back on.
    #[arg(long = "repeat-last-n", default_value_t = 64)]
    repeat_last_n: usize,
    /// Frequency penalty.
    #[arg(long = "frequency-penalty", default_value_t = 0.0)]
    frequency_penalty: f32,
    /// Presence penalty.
    #[arg(long = "presence-penalty", default_value_t = 0.0)]
    presence_penalty: f32,
    /// RNG seed (default: random).
    #[arg(short = 's', long)]
    seed: Option<u32>,
    /// Wrap the prompt in the model's chat template as a user message; without -p, start a
    /// conversation (as -cnv).
    #[arg(long)]
    chat: bool,
    /// Conversation mode (llama-cli's -cnv): chat turn by turn in the terminal, the history
    /// kept in the KV cache; Ctrl-C stops a reply, /exit or Ctrl-D ends.
    #[arg(long = "conversation", visible_alias = "cnv")]
    conversation: bool,
    /// System prompt of the conversation (llama-cli's -sys).
    #[arg(long = "system-prompt", visible_alias = "sys")]
    system_prompt: Option<String>,
    /// Keep the weights llama.cpp would repack (Q4_0, Q4_K, IQ4_NL on AVX2) on the plain
    /// kernels, as llama.cpp's `--no-repack` (`-nr`); by default their products follow
    /// llama.cpp's repacked kernels' arithmetic, as llama.cpp does by default.
    #[arg(long = "no-repack")]
    no_repack: bool,
    /// Device placement (`-ngl`, `--device`, `-ts`, `-ot`).
    #[command(flatten)]
    offload: common::OffloadArgs,
    /// Print what runs (CPU, SIMD level, kernel family, threads, backends and graph splits)
    /// and the sampler chain.
    #[arg(short = 'v', long)]
    verbose: bool,
    /// Write the prompt's graph as Graphviz DOT, nodes coloured by the backend the scheduler
    /// put them on.
    #[arg(long = "sched-dot", value_name = "FILE")]
    sched_dot: Option<std::path::PathBuf>,
    /// Flash attention on or off (llama.cpp's -fa).
    #[arg(long = "flash-attn", short = 'f', default_value = "on", value_parser = ["on", "off"])]
    flash_attn: String,
}

/// Runs the command.
pub fn run(a: RunArgs) -> Result<()> {
    let path = common::resolve_model(a.model.as_deref())?;
    let t_load = Instant::now();
    let model = common::load(&path, a.no_repack, &a.offload)?;
    let load_ms = t_load.elapsed().as_secs_f64() * 1e3;
    let threads = common::threads(a.threads);
    if a.verbose {
        eprintln!(
            "system: {} | threads: {threads} | repacked weights: {}",
            common::system_info(),
            model.n_repacked
        );
        let ngl = common::ngl(&model);
        let on_devices: Vec<String> = model
            .devices
            .iter()
            .zip(&model.device_bytes)
            .filter(|(_, &b)| b > 0)
            .map(|(d, &b)| format!("{} {}", d.name(), common::human_bytes(b)))
            .collect();
        for d in &model.devices {
            let memory = match d.memory() {
                (_, 0) => "memory not reported".to_string(),
                (free, total) => format!(
                    "{} free of {}",
                    common::human_bytes(free as usize),
                    common::human_bytes(total as usize)
                ),
            };
            eprintln!("device {}: {} ({memory})", d.name(), d.description());
        }
        eprintln!(
            "backends: {} | layers offloaded: {ngl}/{}{}",
            common::backends(&model),
            model.hparams.n_layer + 1,
            if on_devices.is_empty() {
                String::new()
            } else {
                format!(" | weights on {}", on_devices.join(", "))
            }
        );
    }
    let params = ContextParams {
        n_ctx: a.ctx_size,
        n_threads: threads,
        flash_attn: a.flash_attn == "on",
        ..Default::default()
    };
    let ctx = LlamaContext::new(&model, params).map_err(|e| anyhow::anyhow!("{e}"))?;
    let sampler = make_sampler(&a);
    if a.conversation || (a.chat && a.prompt.is_none()) {
        let limit = match a.n_predict {
            Some(n) if n >= 0 => n as usize,
            _ => usize::MAX,
        };
        let system = a.system_prompt.as_deref().or(a.prompt.as_deref());
        let conv = conversation::Conversation::new(&model, ctx, system, limit)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        return conversation::run(conv, sampler);
    }
    one_shot(a, &path, &model, ctx, sampler, load_ms)
}

/// The sampler chain of the options (greedy at temperature 0), seeded as asked or randomly.
fn make_sampler(a: &RunArgs) -> SamplerChain {
    let seed = a.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos())
    });
    let sp = SamplingParams {
        temp: a.temp,
        top_k: a.top_k,
        top_p: a.top_p,
        min_p: a.min_p,
        typical_p: a.typical,
        repeat_penalty: a.repeat_penalty,
        repeat_last_n: a.repeat_last_n,
        frequency_penalty: a.frequency_penalty,
        presence_penalty: a.presence_penalty,
        seed,
    };
    let sampler =
        if a.temp <= 0.0 { SamplerChain::greedy() } else { SamplerChain::from_params(&sp) };
    tracing::info!(sampler = %sampler.describe(), seed, "sampling");
    if a.verbose {
        eprintln!("sampler: {} (seed {seed})", sampler.describe());
    }
    sampler
}

/// One prompt, one streamed continuation, then llama-cli's timing lines.
fn one_shot(
    a: RunArgs,
    path: &std::path::Path,
    model: &tessera_llama::Model,
    mut ctx: LlamaContext<'_>,
    mut sampler: SamplerChain,
    load_ms: f64,
) -> Result<()> {
    let prompt = a.prompt.as_deref().unwrap_or("Once upon a time");
    let text = if a.chat {
        let tpl = model
            .chat_template
            .as_deref()
            .ok_or_else(|| anyhow::anyhow!("{}: the model has no chat template", path.display()))?;
        tessera_llama::chat::apply(tpl, &[("user", prompt)], true, &model.vocab)
            .map_err(|e| anyhow::anyhow!("{e}"))?
    } else {
        prompt.to_string()
    };
    let tokens = model.vocab.tokenize(&text, true, true);
    let n_ctx = ctx.params().n_ctx;
    if tokens.is_empty() {
        bail!("the prompt is empty after tokenization");
    }
    if tokens.len() >= n_ctx {
        bail!(
            "the prompt has {} tokens, more than the context of {n_ctx} can hold (use -c)",
            tokens.len()
        );
    }
    for &t in &tokens {
        sampler.accept(t);
    }

    let mut out = Streamer::default();
    out.push(text.as_bytes());
    let t0 = Instant::now();
    ctx.decode(&Batch::from_tokens(&tokens, 0, 0)).map_err(|e| anyhow::anyhow!("{e}"))?;
    let pp = t0.elapsed().as_secs_f64();
    if let Some((gctx, schedule)) = ctx.last_schedule() {
        if a.verbose {
            let per: Vec<String> = schedule
                .nodes_per_backend(gctx)
                .iter()
                .enumerate()
                .map(|(b, n)| format!("{} {n} nodes", schedule.backend_name(b)))
                .collect();
            eprintln!(
                "\nprompt graph: {} split(s), {} cross-backend copies; {}",
                schedule.n_splits(),
                schedule.n_copies(),
                per.join(", ")
            );
        }
        if let Some(file) = &a.sched_dot {
            std::fs::write(file, schedule.to_dot(gctx))
                .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
        }
    }
    let mut last = tokens.len() - 1;
    let mut pos = tokens.len();
    let n_predict = a.n_predict.unwrap_or(128);
    let limit = if n_predict < 0 { usize::MAX } else { n_predict as usize };
    let t1 = Instant::now();
    let mut n_gen = 0;
    while n_gen < limit && pos < n_ctx {
        let logits = ctx.logits_ith(last).expect("the last token asked for logits");
        let tok = sampler.sample(logits);
        sampler.accept(tok);
        if model.vocab.is_eog(tok) {
            break;
        }
        out.push(&model.vocab.token_to_piece(tok, false));
        n_gen += 1;
        ctx.decode(&Batch::from_tokens(&[tok], pos as i32, 0))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        pos += 1;
        last = 0;
    }
    let tg = t1.elapsed().as_secs_f64();
    out.finish();
    eprintln!();
    eprintln!("load time        = {load_ms:10.2} ms");
    eprintln!(
        "prompt eval time = {:10.2} ms / {:5} tokens ({:8.2} ms per token, {:8.2} tokens per second)",
        pp * 1e3,
        tokens.len(),
        pp * 1e3 / tokens.len() as f64,
        tokens.len() as f64 / pp
    );
    if n_gen > 0 {
        eprintln!(
            "       eval time = {:10.2} ms / {:5} runs   ({:8.2} ms per token, {:8.2} tokens per second)",
            tg * 1e3,
            n_gen,
            tg * 1e3 / n_gen as f64,
            n_gen as f64 / tg
        );
    }
    if a.verbose {
        let (splits, copies) = ctx.last_splits();
        eprintln!("graph splits     = {splits} (last step; {copies} cross-backend copies)");
    }
    Ok(())
}
