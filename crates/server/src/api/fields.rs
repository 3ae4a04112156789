//! The fields each endpoint knows. A field outside its endpoint's list is refused with a 400
//! that names it (OpenAI's and Anthropic's rule; llama-server ignores such fields), so a
//! misspelling (`max_tokenz`) or a feature Tessera lacks is never silently ignored; and the
//! known fields Tessera has no effect for (`other_fields`) are refused unless off.
//! docs/SERVING.md lists the rules.

use crate::error::ApiError;
use crate::json::{opt_bool, opt_int, type_name};
use serde_json::{Map, Value};

/// The generation fields every text endpoint shares (OpenAI's and llama-server's).
const GENERATION: &[&str] = &[
    "model",
    "stream",
    "stream_options",
    "max_tokens",
    "max_completion_tokens",
    "n_predict",
    "n",
    "stop",
    "logprobs",
    "n_probs",
    "ignore_eos",
    "grammar",
    "json_schema",
    "response_format",
    "thinking_budget_tokens",
    "cache_prompt",
    "n_keep",
    "n_discard",
    "id_slot",
    "return_tokens",
    "post_sampling_probs",
    "timings_per_token",
    "n_indent",
    "t_max_predict_ms",
    "lora",
    "user",
    "speculative.type",
    "speculative.n_max",
    "speculative.n_min",
    "speculative.p_min",
    "speculative.ngram_size_n",
    "speculative.ngram_size_m",
    "speculative.ngram_min_hits",
    // Sampling (crate::api::sampling).
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "typical_p",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "repeat_penalty",
    "repeat_last_n",
    "samplers",
    "logit_bias",
    "mirostat",
    "mirostat_tau",
    "mirostat_eta",
    "dry_multiplier",
    "dry_base",
    "dry_allowed_length",
    "dry_penalty_last_n",
    "dry_sequence_breakers",
    "xtc_probability",
    "xtc_threshold",
    "top_n_sigma",
    "dynatemp_range",
    "dynatemp_exponent",
    "min_keep",
];

/// `/v1/chat/completions` and `/apply-template`, beyond [`GENERATION`].
pub const CHAT: &[&str] = &[
    "messages",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "chat_template_kwargs",
    "top_logprobs",
];

/// `/v1/completions` and `/completion`, beyond [`GENERATION`] (`echo`, `suffix`, `best_of`
/// and `top_logprobs` are refused there unless off, by name).
pub const COMPLETION: &[&str] = &["prompt", "echo", "suffix", "best_of", "top_logprobs"];

/// `/infill`, beyond [`GENERATION`].
pub const INFILL: &[&str] = &["input_prefix", "input_suffix", "input_extra", "prompt"];

/// Anthropic's `/v1/messages` (its own names; the body is then read as a chat).
pub const ANTHROPIC: &[&str] = &[
    "model",
    "messages",
    "system",
    "max_tokens",
    "metadata",
    "stop_sequences",
    "stream",
    "temperature",
    "top_p",
    "top_k",
    "tools",
    "tool_choice",
    "thinking",
];

/// OpenAI's `/v1/responses`.
pub const RESPONSES: &[&str] = &[
    "model",
    "input",
    "instructions",
    "max_output_tokens",
    "temperature",
    "top_p",
    "stream",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "text",
    "reasoning",
    "previous_response_id",
    "metadata",
    "store",
    "user",
];

/// `/v1/embeddings` and llama-server's `/embedding(s)`.
pub const EMBEDDINGS: &[&str] =
    &["model", "input", "content", "encoding_format", "dimensions", "embd_normalize", "user"];

/// Refuses the first field of `o` that is neither in `known` nor, when `generation`, one of
/// the shared generation fields.
pub fn check(o: &Map<String, Value>, known: &[&str], generation: bool) -> Result<(), ApiError> {
    let listed = |k: &str| known.contains(&k) || (generation && GENERATION.contains(&k));
    match o.keys().find(|k| !listed(k)) {
        None => Ok(()),
        Some(k) => {
            let shown: String = k.chars().take(64).flat_map(char::escape_default).collect();
            Err(ApiError::field(
                &shown,
                format!(
                    "unknown field '{shown}' (tessera serve refuses fields it does not know, as \
                     OpenAI does; see docs/SERVING.md)"
                ),
            ))
        }
    }
}

/// llama-server's and OpenAI's fields that do not shape sampling: those with no effect in
/// Tessera at the value sent are refused by name; the rest are type-checked.
pub(crate) fn other_fields(o: &Map<String, Value>, chat: bool) -> Result<(), ApiError> {
    let not_here = |key: &str, what: &str| ApiError::field(key, what.to_string());
    match o.get("user") {
        None | Some(Value::Null | Value::String(_)) => {}
        Some(other) => {
            return Err(ApiError::field(
                "user",
                format!("expected a string, got {}", type_name(other)),
            ))
        }
    }
    if opt_int(o, "id_slot", -1, i64::MAX)?.is_some_and(|i| i >= 0) {
        return Err(not_here("id_slot", "choosing a slot is not available in tessera serve yet"));
    }
    if opt_bool(o, "echo")? == Some(true) {
        return Err(not_here("echo", "echoing the prompt is not available in tessera serve yet"));
    }
    match o.get("suffix") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s.is_empty() => {}
        Some(Value::String(_)) => {
            return Err(not_here("suffix", "a suffix needs fill-in-the-middle: use /infill"))
        }
        Some(other) => {
            return Err(ApiError::field(
                "suffix",
                format!("expected a string, got {}", type_name(other)),
            ))
        }
    }
    if opt_int(o, "best_of", 1, i64::MAX)?.is_some_and(|n| n != 1) {
        return Err(not_here("best_of", "only 1 candidate per request is supported"));
    }
    if !chat && o.get("top_logprobs").is_some_and(|v| !v.is_null()) {
        return Err(not_here(
            "top_logprobs",
            "is a chat field: /v1/completions takes \"logprobs\": N (0 to 20)",
        ));
    }
    for (key, what) in [
        ("return_tokens", "returning token ids"),
        ("post_sampling_probs", "probabilities after the sampler chain"),
        ("timings_per_token", "timings in every streamed chunk"),
    ] {
        if opt_bool(o, key)? == Some(true) {
            return Err(not_here(key, &format!("{what} is not available in tessera serve yet")));
        }
    }
    for (key, what) in
        [("n_indent", "indentation of infill replies"), ("t_max_predict_ms", "a time limit")]
    {
        if opt_int(o, key, 0, i64::MAX)?.is_some_and(|n| n > 0) {
            return Err(not_here(key, &format!("{what} is not available in tessera serve yet")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_fields_are_named() {
        let o = json!({"messages": [], "max_tokenz": 5, "temperature": 0});
        let e = check(o.as_object().unwrap(), CHAT, true).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("max_tokenz"));
        assert!(e.message.contains("unknown field 'max_tokenz'"), "{}", e.message);
        let ok = json!({"messages": [], "max_tokens": 5, "logit_bias": {}});
        check(ok.as_object().unwrap(), CHAT, true).unwrap();
        // A generation field is not an Anthropic field.
        let o = json!({"messages": [], "max_tokens": 5, "seed": 1});
        assert_eq!(
            check(o.as_object().unwrap(), ANTHROPIC, false).unwrap_err().param.as_deref(),
            Some("seed")
        );
    }

    /// Every list names each field once, and no endpoint repeats a shared field.
    #[test]
    fn lists_are_sets() {
        for list in [GENERATION, CHAT, COMPLETION, INFILL, ANTHROPIC, RESPONSES, EMBEDDINGS] {
            let set: std::collections::HashSet<_> = list.iter().collect();
            assert_eq!(set.len(), list.len(), "{list:?}");
        }
        for list in [CHAT, COMPLETION, INFILL] {
            assert!(list.iter().all(|k| !GENERATION.contains(k)), "{list:?}");
        }
    }
}
