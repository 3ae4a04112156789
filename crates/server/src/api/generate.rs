//! The generating flow every API shares: a request's prompt rendered, tokenized and checked,
//! its job queued on the engine (`start`); the job's events gathered into one reply
//! (`collect`) or, for several prompts, merged into one stream (`merge`); and what a chat
//! reply may hold (`reply_shape`).

use crate::api::request::{GenRequest, Prompt};
use crate::chat::constrain::Constraint;
use crate::chat::prompt::ChatMessage;
use crate::chat::reasoning::ReasoningFormat;
use crate::chat::reply::ReplyShape;
use crate::chat::tools::{Format, Tool, ToolChoice, ToolUse};
use crate::engine::{Event, Finished, Job, Logprob};
use crate::error::ApiError;
use crate::http::AppState;
use crate::vision::{Images, Piece};
use tokio::sync::mpsc;

/// Renders and tokenizes the prompt, checks it fits the context, queues the job; says whether
/// the rendered chat prompt leaves the reply inside `<think>`.
pub(crate) fn start(
    st: &AppState,
    req: &GenRequest,
) -> Result<(mpsc::UnboundedReceiver<Event>, bool), ApiError> {
    let vocab = &st.model.vocab;
    let rendered = match &req.prompt {
        Prompt::Chat(msgs) => Some(render(st, msgs, req.tools.as_ref(), &req.template_kwargs)?),
        _ => None,
    };
    let opened = rendered.as_deref().is_some_and(crate::chat::reasoning::prompt_opens_thinking);
    let field = req.prompt.field();
    let (tokens, images) = if req.images.is_empty() {
        (req.prompt.tokens(vocab, rendered.as_deref())?, Images::default())
    } else {
        let text = match (&req.prompt, rendered.as_deref()) {
            (_, Some(r)) => r,
            (Prompt::Text(t), None) => t.as_str(),
            _ => return Err(ApiError::field(&req.images[0].field, "images need a text prompt")),
        };
        image_tokens(st, req, text, field)?
    };
    if tokens.is_empty() {
        return Err(ApiError::field(field, "the prompt is empty"));
    }
    let limit = st.engine.n_ctx;
    if tokens.len() >= limit {
        let mut e = ApiError::field(
            field,
            format!("the prompt has {} tokens; the context holds {limit} (raise -c)", tokens.len()),
        );
        e.code = Some("context_length_exceeded");
        return Err(e);
    }
    let harmony = harmony_chat(st, req);
    let matcher = match (&req.constraint, forced_call_grammar(st, req, harmony)?) {
        (Some((c, param)), _) => Some(st.constrainer.matcher(c, param)?),
        (None, Some(lark)) => Some(st.constrainer.matcher(&Constraint::Lark(lark), "tools")?),
        (None, None) => None,
    };
    let budget = req.thinking_budget.unwrap_or(st.reasoning_budget);
    if harmony && budget >= 0 {
        return Err(ApiError::field(
            "thinking_budget",
            "a reasoning budget (thinking_budget, --reasoning-budget) is not available for \
             gpt-oss's harmony format yet",
        ));
    }
    // A grammar decides what may be generated; the budget applies to free chat replies.
    let think_budget = (rendered.is_some() && matcher.is_none() && budget >= 0).then(|| {
        let end = format!("{}\n</think>\n\n", st.reasoning_budget_message);
        crate::engine::ThinkBudget::new(budget as usize, opened, vocab.tokenize(&end, false, true))
    });
    let bias = req.sampling.resolve_bias(vocab)?;
    let sampler = req.sampling.chain(st.engine.n_ctx, &bias, vocab)?;
    tracing::debug!(sampler = %sampler.describe(), seed = ?sampler.seed(), "sampling");
    if let Some(t) = req.spec.kind.as_deref().filter(|&t| t != "none") {
        if st.speculative != Some(t) {
            let have = match st.speculative {
                Some(s) => format!("this server speculates with {s}"),
                None => "this server does not speculate (start it with --spec-type or -md)".into(),
            };
            return Err(ApiError::field("speculative.type", format!("{t}: {have}")));
        }
    }
    let lora = match &req.lora {
        Some(v) => st.loras.parse(v, "lora")?,
        None => st.loras.current(),
    };
    let (tx, rx) = mpsc::unbounded_channel();
    st.engine.submit(Job {
        prompt: tokens,
        max_tokens: req.max_tokens,
        sampler,
        cache_prompt: req.cache_prompt,
        stop: req.stop.clone(),
        logprobs: req.logprobs,
        events: tx,
        matcher,
        ignore_eos: req.ignore_eos,
        think_budget,
        preserved: if harmony { crate::chat::harmony::preserved_ids(vocab) } else { Vec::new() },
        lora,
        n_keep: req.n_keep,
        n_discard: req.n_discard,
        spec: req.spec.clone(),
        images,
    })?;
    st.metrics.add_request();
    Ok((rx, opened))
}

/// The tokens of a prompt with images (`text` holds a marker per image): cut by the server's
/// vision encoder, each image's positions holding placeholder ids; an error names the image
/// at fault.
fn image_tokens(
    st: &AppState,
    req: &GenRequest,
    text: &str,
    field: &str,
) -> Result<(Vec<u32>, Images), ApiError> {
    let Some(vision) = st.vision.as_ref() else {
        return Err(ApiError::field(
            &req.images[0].field,
            "this server does not take images: start it with --mmproj FILE (the model's \
             multimodal projector)",
        ));
    };
    let bytes: Vec<&[u8]> = req.images.iter().map(|i| i.bytes.as_slice()).collect();
    let pieces = vision.tokenize(text, &bytes, true).map_err(|e| {
        let at = e.image.and_then(|i| req.images.get(i)).map_or(field, |i| i.field.as_str());
        ApiError::field(at, e.message)
    })?;
    if matches!(pieces.last(), Some(Piece::Image(_))) {
        return Err(ApiError::field(field, "the prompt must end with text after its last image"));
    }
    let n_images = pieces.iter().filter(|p| matches!(p, Piece::Image(_))).count();
    tracing::debug!(images = n_images, "prompt with images");
    Ok(Images::flatten(pieces))
}

/// With `tool_choice` `required` or a named function: the grammar of a reply that is a call
/// (refused for a harmony template, which has no such grammar here yet).
fn forced_call_grammar(
    st: &AppState,
    req: &GenRequest,
    harmony: bool,
) -> Result<Option<String>, ApiError> {
    let Some(t) = req.tools.as_ref() else { return Ok(None) };
    if !matches!(t.choice, ToolChoice::Required | ToolChoice::Named(_)) {
        return Ok(None);
    }
    if harmony {
        return Err(ApiError::field(
            "tool_choice",
            "forcing a call (required, or a named function) is not available for gpt-oss's \
             harmony format yet; use auto",
        ));
    }
    let Some(tpl) = st.template.as_ref() else { return Ok(None) };
    Ok(Some(crate::chat::tools::grammar(tpl.format, &t.tools, &t.choice, t.parallel)))
}

/// The format of calls a chat request's reply may hold, and its tools (`None` without
/// tools, or with `tool_choice` `none`).
fn tool_format(st: &AppState, req: &GenRequest) -> Option<(Format, Vec<Tool>)> {
    let t = req.tools.as_ref().filter(|t| t.choice != ToolChoice::None)?;
    Some((st.template.as_ref()?.format, t.tools.clone()))
}

/// Whether `req` is a chat rendered by a harmony template (gpt-oss: [`crate::chat::harmony`]).
fn harmony_chat(st: &AppState, req: &GenRequest) -> bool {
    matches!(req.prompt, Prompt::Chat(_)) && st.template.as_ref().is_some_and(|t| t.harmony)
}

/// The server's chat template applied to `msgs` ([`crate::chat::render`]).
pub(crate) fn render(
    st: &AppState,
    msgs: &[ChatMessage],
    tools: Option<&ToolUse>,
    kwargs: &serde_json::Map<String, serde_json::Value>,
) -> Result<String, ApiError> {
    let tpl = st.template.as_ref();
    crate::chat::render(tpl, &st.model.vocab, st.enable_thinking, msgs, tools, kwargs)
}

/// What a chat request's reply may hold (`opened`: from [`start`]).
pub(crate) fn reply_shape(st: &AppState, req: &GenRequest, opened: bool) -> ReplyShape {
    ReplyShape {
        think: st.reasoning_format == ReasoningFormat::Deepseek,
        opened,
        tools: tool_format(st, req),
        harmony: harmony_chat(st, req),
    }
}

/// A finished request, gathered from its events.
pub(crate) struct Outcome {
    pub(crate) text: String,
    pub(crate) logprobs: Vec<Logprob>,
    /// How it ended.
    pub(crate) end: Finished,
}

pub(crate) async fn collect(mut rx: mpsc::UnboundedReceiver<Event>) -> Result<Outcome, ApiError> {
    let mut text = String::new();
    let mut logprobs = Vec::new();
    loop {
        match rx.recv().await {
            Some(Event::Token { text: t, logprob }) => {
                text.push_str(&t);
                logprobs.extend(logprob);
            }
            Some(Event::Done(end)) => return Ok(Outcome { text, logprobs, end }),
            Some(Event::Failed(e)) => return Err(e),
            None => return Err(ApiError::new(500, "server_error", "the engine stopped")),
        }
    }
}

/// The events of several requests on one channel, tagged with their index. A request's
/// forwarder stops (dropping its engine channel, which frees its slot) once the merged
/// receiver is gone.
pub(crate) fn merge(
    rxs: Vec<mpsc::UnboundedReceiver<Event>>,
) -> mpsc::UnboundedReceiver<(usize, Event)> {
    let (tx, rx) = mpsc::unbounded_channel();
    for (i, mut r) in rxs.into_iter().enumerate() {
        let tx = tx.clone();
        tokio::spawn(async move {
            loop {
                let ev = tokio::select! {
                    ev = r.recv() => ev,
                    _ = tx.closed() => return,
                };
                let Some(ev) = ev else { return };
                let last = !matches!(ev, Event::Token { .. });
                if tx.send((i, ev)).is_err() || last {
                    return;
                }
            }
        });
    }
    rx
}
