//! `tessera run`: llama-cli / llama-simple: tokenize a prompt (optionally through the model's
//! chat template), decode it, sample and stream tokens, then print the speeds; or, with `-cnv`
//! (or `--chat` without `-p`), a conversation in the terminal (crate::conversation).

use crate::common::{self, Streamer};
use crate::conversation;
use crate::grammar_args::GrammarArgs;
use crate::sampling_args::SamplingArgs;
use anyhow::{bail, Result};
use clap::Args;
use std::path::PathBuf;
use std::time::Instant;
use tessera_llama::sampling::{SamplerChain, DEFAULT_SEED};
use tessera_llama::{ContextParams, Generator, LlamaContext};

/// Options of `tessera run` (named as llama.cpp's).
#[derive(Args, Debug)]
pub struct RunArgs {
    /// Model file (GGUF); default: SmolLM2-135M-Instruct, fetched on first use.
    #[arg(short = 'm', long)]
    model: Option<PathBuf>,
    /// Prompt (default "Once upon a time"); with -cnv, the system prompt, as llama-cli.
    #[arg(short = 'p', long)]
    prompt: Option<String>,
    /// Read the prompt from a file (llama.cpp's -f).
    #[arg(short = 'f', long = "file", value_name = "FILE", conflicts_with = "prompt")]
    file: Option<PathBuf>,
    /// Process escapes (\n, \t, \\, \", \xHH ...) in the prompt and system prompt: on by
    /// default, as in llama.cpp; -e is accepted.
    #[arg(short = 'e', long = "escape", overrides_with = "no_escape")]
    escape: bool,
    /// Take the prompt's backslashes literally.
    #[arg(long = "no-escape")]
    no_escape: bool,
    /// Tokens to generate (-1: until end of generation or the context is full); default 128,
    /// and -1 for each reply in conversation mode.
    #[arg(short = 'n', long = "n-predict", allow_negative_numbers = true)]
    n_predict: Option<i64>,
    /// Context size (KV cells); 0: the model's training context.
    #[arg(short = 'c', long = "ctx-size", default_value_t = 4096)]
    ctx_size: usize,
    /// Threads (default: all cores).
    #[arg(short = 't', long)]
    threads: Option<usize>,
    /// The sampler chain's flags (llama.cpp's).
    #[command(flatten)]
    sampling: SamplingArgs,
    /// A grammar or JSON schema the output must follow.
    #[command(flatten)]
    grammar: GrammarArgs,
    /// The KV cache's types (`-ctk`, `-ctv`).
    #[command(flatten)]
    cache: common::CacheArgs,
    /// LoRA adapters (`--lora`, `--lora-scaled`).
    #[command(flatten)]
    lora: crate::lora_args::LoraArgs,
    /// Speculative decoding (`--spec-type`, `-md`, ...).
    #[command(flatten)]
    spec: crate::spec_args::SpecArgs,
    /// Images (`--mmproj`, `--image`).
    #[command(flatten)]
    mtmd: crate::mtmd_args::MtmdArgs,
    /// When the context is full, drop half of what follows the kept tokens and go on
    /// (llama.cpp's context shift; in a conversation, older turns go); without it, generation
    /// stops.
    #[arg(long = "context-shift", overrides_with = "no_context_shift")]
    context_shift: bool,
    /// Stop when the context is full (the default).
    #[arg(long = "no-context-shift")]
    no_context_shift: bool,
    /// Tokens of the prompt a context shift keeps, after the BOS token (-1: the whole
    /// prompt), as llama.cpp's `--keep`.
    #[arg(long = "keep", default_value_t = 0, allow_negative_numbers = true, value_name = "N")]
    keep: i64,
    /// Never end at an end-of-generation token (they are never sampled).
    #[arg(long = "ignore-eos")]
    ignore_eos: bool,
    /// Accepted for llama.cpp's command lines: chat templates always run through Tessera's
    /// Jinja engine.
    #[arg(long)]
    jinja: bool,
    /// Do not echo the prompt before the reply.
    #[arg(long = "no-display-prompt")]
    no_display_prompt: bool,
    /// No log output: neither notes nor the timing lines on stderr.
    #[arg(long = "log-disable")]
    pub log_disable: bool,
    /// Wrap the prompt in the model's chat template as a user message; without -p, start a
    /// conversation (as -cnv).
    #[arg(long)]
    chat: bool,
    /// Conversation mode (llama-cli's -cnv): chat turn by turn in the terminal, the history
    /// kept in the KV cache; Ctrl-C stops a reply, /exit or Ctrl-D ends. The default, as in
    /// llama-cli, when the model has a chat template and stdin is a terminal.
    #[arg(long = "conversation", visible_alias = "cnv")]
    conversation: bool,
    /// Never start a conversation: complete the prompt once (llama-cli's -no-cnv).
    #[arg(long = "no-conversation", conflicts_with = "conversation")]
    no_conversation: bool,
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
    /// Flash attention: on, off or auto (llama.cpp's -fa; auto is on: every model Tessera
    /// runs supports it on every backend).
    #[arg(long = "flash-attn", default_value = "auto", value_parser = ["on", "off", "auto"])]
    flash_attn: String,
}

/// llama.cpp's `string_process_escapes`: `\n`, `\r`, `\t`, `\'`, `\"`, `\\`, `\a`, `\b`,
/// `\f`, `\v`, `\xHH`; any other backslash stays as it is.
pub fn process_escapes(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match it.peek().copied() {
            Some(e @ ('n' | 'r' | 't' | '\'' | '"' | '\\' | 'a' | 'b' | 'f' | 'v')) => {
                it.next();
                out.push(match e {
                    'n' => '\n',
                    'r' => '\r',
                    't' => '\t',
                    'a' => '\x07',
                    'b' => '\x08',
                    'f' => '\x0c',
                    'v' => '\x0b',
                    other => other,
                });
            }
            Some('x') => {
                let hex: String = it.clone().skip(1).take(2).collect();
                match u8::from_str_radix(&hex, 16) {
                    Ok(b) if hex.len() == 2 && b.is_ascii() => {
                        it.nth(2);
                        out.push(b as char);
                    }
                    _ => out.push('\\'),
                }
            }
            _ => out.push('\\'),
        }
    }
    out
}

/// The prompt: `-p`, or the file of `-f` (named in the error if unreadable), escapes
/// processed unless `--no-escape`.
fn prompt_text(a: &RunArgs) -> Result<Option<String>> {
    let raw =
        match (&a.prompt, &a.file) {
            (Some(p), _) => Some(p.clone()),
            (None, Some(f)) => Some(std::fs::read_to_string(f).map_err(|e| {
                anyhow::anyhow!("{}: cannot read the prompt file: {e}", f.display())
            })?),
            (None, None) => None,
        };
    // A file is taken as it is (llama.cpp does not process escapes in -f files either).
    let escape = !a.no_escape && a.file.is_none();
    Ok(raw.map(|p| if escape { process_escapes(&p) } else { p }))
}

/// Runs the command.
pub fn run(mut a: RunArgs) -> Result<()> {
    a.prompt = prompt_text(&a)?;
    if !a.no_escape {
        a.system_prompt = a.system_prompt.as_deref().map(process_escapes);
    }
    let path = common::resolve_model(a.model.as_deref())?;
    let t_load = Instant::now();
    let model = std::sync::Arc::new(common::load(&path, a.no_repack, &a.offload)?);
    let load_ms = t_load.elapsed().as_secs_f64() * 1e3;
    let threads = common::threads(a.threads);
    if a.verbose {
        eprintln!(
            "system: {} | threads: {threads} | repacked weights: {}",
            common::system_info(&model),
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
        // The CPU's matrix-product paths, per weight type: decoding, and a prompt batch.
        let (level, _) = common::simd();
        eprintln!(
            "matmul paths on the CPU ({level}):\n{}",
            common::matmul_paths(&model, level, 512)
        );
    }
    let flash_attn = a.flash_attn != "off";
    let (type_k, type_v) = a.cache.types(flash_attn)?;
    let params = ContextParams {
        n_ctx: a.ctx_size,
        n_threads: threads,
        flash_attn,
        type_k,
        type_v,
        // One sequence: its cells as llama.cpp places them, so a shifted context keeps its bits.
        cell_order: tessera_llama::CellOrder::RingHead,
        ..Default::default()
    };
    // The draft model first: its contexts borrow it for as long as the model's.
    let draft = a.spec.load_draft(&model, a.no_repack)?;
    let mut ctx = LlamaContext::new(&model, params).map_err(common::explain)?;
    let loras = a.lora.load(&model)?;
    if a.verbose {
        for (l, scale) in &loras {
            eprintln!(
                "LoRA adapter {}: scale {scale}, alpha {}, {} weights, {}",
                l.path(),
                l.alpha(),
                l.targets().count(),
                common::human_bytes(l.n_bytes())
            );
        }
    }
    ctx.set_loras(loras).map_err(common::explain)?;
    let n_ctx = ctx.params().n_ctx;
    let n_train = model.hparams.n_ctx_train;
    if a.verbose {
        eprintln!("context: {n_ctx} cells (the model was trained on {n_train})");
        eprintln!("{}", common::kv_cache_line(&model, n_ctx, (type_k, type_v)));
    }
    if n_ctx > n_train && !a.log_disable {
        eprintln!(
            "warning: the context ({n_ctx}) is larger than the model's training context \
             ({n_train}); quality may degrade past it"
        );
    }
    let vision = a.mtmd.load(&model, threads)?;
    if vision.is_some() {
        if a.spec.draft_model.is_some() || a.spec.spec_type.as_deref().is_some_and(|t| t != "none")
        {
            bail!("speculative decoding with images is not supported");
        }
        if a.context_shift && !a.no_context_shift {
            bail!("--context-shift with images is not supported (an image cannot be cut)");
        }
    }
    let sampler = make_sampler(&a, &model.vocab)?;
    let auto_chat = (vision.is_none() || a.prompt.is_none()) && {
        use std::io::IsTerminal;
        !a.no_conversation
            && !a.chat
            && model.chat_template.is_some()
            && std::io::stdin().is_terminal()
    };
    let conversing = a.conversation || (a.chat && a.prompt.is_none()) || auto_chat;
    if conversing {
        let limit = match a.n_predict {
            Some(n) if n >= 0 => n as usize,
            _ => usize::MAX,
        };
        let system = a.system_prompt.as_deref().or(a.prompt.as_deref());
        let spec = a.spec.speculator(draft.as_ref(), ctx.params())?;
        let conv = conversation::Conversation::new(&model, ctx, system, limit)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?
            .with_grammar(a.grammar.compile(&model)?)
            .with_context_shift((a.context_shift && !a.no_context_shift).then_some(a.keep))
            .with_speculator(spec)
            .with_vision(vision);
        return conversation::run(conv, sampler);
    }
    let matcher = a.grammar.matcher(&model)?;
    let spec = a.spec.speculator(draft.as_ref(), ctx.params())?;
    one_shot(a, &path, &model, ctx, Decoding { sampler, matcher, spec, vision }, load_ms)
}

/// The sampler chain of the options over `vocab` (llama.cpp's chain; an argmax where that
/// picks the same), seeded as asked or randomly (`-1`).
fn make_sampler(a: &RunArgs, vocab: &tessera_llama::Vocab) -> Result<SamplerChain> {
    // llama.cpp's chain: at temperature 0 the penalties still apply before the argmax.
    let sampler = a.sampling.chain(vocab)?;
    let seed = sampler.seed().unwrap_or(DEFAULT_SEED);
    tracing::info!(sampler = %sampler.describe(), seed, "sampling");
    if a.verbose {
        eprintln!("sampler: {} (seed {seed})", sampler.describe());
    }
    Ok(sampler)
}

/// How one-shot generation picks its tokens: the sampler chain, a grammar, speculation.
struct Decoding<'m> {
    sampler: SamplerChain,
    matcher: Option<tessera_server::chat::constrain::Matcher>,
    spec: Option<tessera_llama::speculative::Speculator<'m>>,
    vision: Option<crate::mtmd_args::Vision>,
}

/// One prompt, one streamed continuation, then llama-cli's timing lines.
fn one_shot(
    a: RunArgs,
    path: &std::path::Path,
    model: &tessera_llama::Model,
    mut ctx: LlamaContext<'_>,
    decoding: Decoding<'_>,
    load_ms: f64,
) -> Result<()> {
    let Decoding { mut sampler, mut matcher, mut spec, mut vision } = decoding;
    let n_ctx = ctx.params().n_ctx;
    let prompt = a.prompt.as_deref().unwrap_or("Once upon a time");
    let marked;
    let prompt = match &vision {
        Some(v) => {
            marked = v.with_markers(prompt);
            marked.as_str()
        }
        None => prompt,
    };
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
    let mut out = Streamer::default();
    // With images: everything up to the last text evaluated here (images echoed as [image]).
    let t_media = Instant::now();
    let (n_past, tokens) = match vision.as_mut() {
        Some(v) => {
            let shown = !a.no_display_prompt;
            let e = v.eval(&mut ctx, model, &text, 0, true, &mut |piece| {
                if shown {
                    out.push(piece)
                }
            })?;
            (e.n_past, e.last)
        }
        None => (0, model.vocab.tokenize(&text, true, true)),
    };
    let media_ms = t_media.elapsed().as_secs_f64() * 1e3;
    if tokens.is_empty() {
        bail!("the prompt is empty after tokenization");
    }
    if n_past + tokens.len() >= n_ctx {
        bail!(
            "the prompt has {} tokens, more than the context of {n_ctx} can hold (use -c)",
            n_past + tokens.len()
        );
    }
    if !a.no_display_prompt {
        // As llama.cpp echoes it: the prompt's tokens as text, special tokens (a chat
        // template's markers, BOS) not shown.
        for &t in &tokens {
            out.push(&model.vocab.token_to_piece(t, false));
        }
    }
    // Plain greedy decoding (nothing banned, masked or drafted) takes each token's argmax where
    // the logits are (on a GPU, one token read back instead of a vocabulary of floats).
    if sampler.is_argmax_only() && !a.ignore_eos && matcher.is_none() && spec.is_none() {
        ctx.set_argmax_outputs(true).map_err(|e| anyhow::anyhow!("{e}"))?;
        tracing::debug!("greedy decoding: each token's argmax taken in the graph");
    }
    let mut generator = Generator::new(&mut ctx, &mut sampler, 0, n_past);
    if a.ignore_eos {
        generator = generator.ban(model.vocab.eog_tokens());
    }
    let t0 = Instant::now();
    generator.prompt(&tokens).map_err(|e| anyhow::anyhow!("{e}"))?;
    let pp = t0.elapsed().as_secs_f64();
    if let Some((gctx, schedule)) = generator.context().last_schedule() {
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
    let n_predict = a.n_predict.unwrap_or(128);
    let limit = if n_predict < 0 { usize::MAX } else { n_predict as usize };
    // llama.cpp's n_keep: the whole prompt for -1 (or more than it has), else N after the BOS.
    let n_keep = match usize::try_from(a.keep) {
        Ok(k) if k <= tokens.len() => k + usize::from(model.vocab.add_bos()),
        _ => tokens.len(),
    };
    let shift = a.context_shift && !a.no_context_shift;
    let limits = crate::generate_loop::Limits {
        n_predict: limit,
        n_ctx,
        shift_keep: shift.then_some(n_keep),
        keep_arg: a.keep,
    };
    let t1 = Instant::now();
    let done = crate::generate_loop::generate(
        &mut generator,
        &model.vocab,
        &mut out,
        matcher.as_mut(),
        spec.as_mut(),
        tokens.clone(),
        &limits,
    )?;
    let (n_gen, n_shifts) = (done.n_gen, done.n_shifts);
    let tg = t1.elapsed().as_secs_f64();
    out.finish();
    if a.log_disable {
        return Ok(());
    }
    eprintln!();
    eprintln!("load time        = {load_ms:10.2} ms");
    if vision.is_some() && n_past > 0 {
        // The images encoded and decoded with the text before the prompt's last part.
        eprintln!("image eval time  = {media_ms:10.2} ms / {n_past:5} positions");
    }
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
    if n_shifts > 0 {
        eprintln!("context shifts   = {n_shifts} (kept the first {n_keep} tokens)");
    }
    if let Some(sp) = &spec {
        let s = done.spec;
        eprintln!(
            "speculative      = {}: {} drafted, {} accepted (acceptance {:.3}), {} verification steps",
            sp.name(),
            s.n_drafted,
            s.n_accepted,
            s.acceptance(),
            s.n_steps
        );
    }
    if a.verbose {
        let (splits, copies) = ctx.last_splits();
        eprintln!("graph splits     = {splits} (last step; {copies} cross-backend copies)");
    }
    Ok(())
}
