//! The sampling fields of a generation request: OpenAI's (`temperature`, `top_p`, `seed`,
//! `logit_bias`, the penalties) and llama-server's (`top_k`, `min_p`, `typical_p`,
//! `repeat_last_n`, `samplers`, `min_keep`, `top_n_sigma`, `xtc_*`, `dynatemp_*`, `dry_*`,
//! `mirostat*`).
//!
//! Every field has llama-server's effect or is refused with a 400 that names it (values out
//! of range are refused, where llama-server would clamp some). `seed` is llama-server's: `-1`
//! (and 4294967295, `LLAMA_DEFAULT_SEED`) draws a random seed, other values outside 0..2^32
//! are refused rather than wrapped; `dry_base` below 1 keeps the default, as llama-server's;
//! `dry_penalty_last_n` and `repeat_last_n` of `-1` mean the context's size.

use crate::error::ApiError;
use crate::json::{opt_int, opt_num, type_name};
use serde_json::{Map, Value};
use tessera_llama::sampling::{
    order_from_chars, order_from_names, SamplerChain, SamplingParams, Step, DEFAULT_ORDER,
    DEFAULT_SEED,
};
use tessera_llama::Vocab;

/// What a `logit_bias` entry names: a token id, or a text whose every token gets the bias.
#[derive(Debug, Clone, PartialEq)]
pub enum BiasTarget {
    /// A token id (checked against the vocabulary when the request is started).
    Token(u64),
    /// A text, tokenized without special tokens (llama-server's string keys).
    Text(String),
}

/// One `logit_bias` entry as sent.
#[derive(Debug, Clone, PartialEq)]
pub struct BiasEntry {
    /// Where it was in the request (`logit_bias.15043`, `logit_bias[2]`).
    pub param: String,
    /// The token or text.
    pub target: BiasTarget,
    /// Added to the logit; −∞ bans (`false`).
    pub bias: f32,
}

/// Sampling settings of one request (OpenAI's and llama-server's fields).
#[derive(Debug, Clone, PartialEq)]
pub struct Sampling {
    /// 0 is greedy.
    pub temperature: f32,
    /// Nucleus sampling.
    pub top_p: f32,
    /// llama-server's `top_k` (0: off).
    pub top_k: usize,
    /// llama-server's `min_p`.
    pub min_p: f32,
    /// llama-server's `typical_p` (1: off).
    pub typical_p: f32,
    /// Random seed ([`DEFAULT_SEED`]: a random one, as `-1`).
    pub seed: u32,
    /// OpenAI's presence penalty.
    pub presence_penalty: f32,
    /// OpenAI's frequency penalty.
    pub frequency_penalty: f32,
    /// llama-server's repeat penalty (1: off).
    pub repeat_penalty: f32,
    /// Tokens the penalties look back over (`-1`: the context's size, 0: off).
    pub repeat_last_n: i64,
    /// The order of the chain's steps (`samplers`).
    pub order: Vec<Step>,
    /// `logit_bias`, as sent.
    pub logit_bias: Vec<BiasEntry>,
    /// The rest of llama.cpp's chain (`min_keep`, top-n-σ, XTC, dynamic temperature, DRY,
    /// mirostat), as its parameters; `dry_penalty_last_n` there is `-1` for the context.
    pub more: SamplingParams,
}

impl Default for Sampling {
    fn default() -> Self {
        // llama-server's defaults.
        Sampling {
            temperature: 0.8,
            top_p: 0.95,
            top_k: 40,
            min_p: 0.05,
            typical_p: 1.0,
            seed: DEFAULT_SEED,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            order: DEFAULT_ORDER.to_vec(),
            logit_bias: Vec::new(),
            more: SamplingParams::default(),
        }
    }
}

/// Reads the sampling fields of request `o`; those it does not give take `d` (the server's
/// defaults: llama-server's, or `tessera serve`'s sampling flags).
pub fn parse(o: &Map<String, Value>, d: &Sampling) -> Result<Sampling, ApiError> {
    let f32_of = |key: &str, min: f64, max: f64, dflt: f32| {
        opt_num(o, key, min, max).map(|v| v.map_or(dflt, |x| x as f32))
    };
    let s = Sampling {
        temperature: f32_of("temperature", 0.0, 2.0, d.temperature)?,
        top_p: f32_of("top_p", 0.0, 1.0, d.top_p)?,
        top_k: opt_int(o, "top_k", 0, 1 << 20)?.map_or(d.top_k, |x| x as usize),
        min_p: f32_of("min_p", 0.0, 1.0, d.min_p)?,
        typical_p: f32_of("typical_p", 0.0, 1.0, d.typical_p)?,
        seed: seed(o)?.unwrap_or(d.seed),
        presence_penalty: f32_of("presence_penalty", -2.0, 2.0, d.presence_penalty)?,
        frequency_penalty: f32_of("frequency_penalty", -2.0, 2.0, d.frequency_penalty)?,
        repeat_penalty: f32_of("repeat_penalty", 0.0, 10.0, d.repeat_penalty)?,
        repeat_last_n: opt_int(o, "repeat_last_n", -1, 1 << 30)?.unwrap_or(d.repeat_last_n),
        order: order(o)?.unwrap_or_else(|| d.order.clone()),
        logit_bias: logit_bias(o)?.unwrap_or_else(|| d.logit_bias.clone()),
        more: more(o, &d.more)?,
    };
    Ok(s)
}

/// llama-server's `seed`: `-1` or `LLAMA_DEFAULT_SEED` draw a random seed; 0 to 2^32 − 2 are
/// kept; anything else is refused (llama-server would wrap it).
fn seed(o: &Map<String, Value>) -> Result<Option<u32>, ApiError> {
    match opt_int(o, "seed", -1, i64::from(u32::MAX))
        .map_err(|e| ApiError::field("seed", format!("{} (-1 draws a random seed)", e.message)))?
    {
        None => Ok(None),
        Some(-1) => Ok(Some(DEFAULT_SEED)),
        Some(s) => Ok(Some(s as u32)),
    }
}

/// llama-server's `samplers`: an array of names (`["top_k", "temperature"]`) or a string of
/// one-letter codes (`"kt"`).
fn order(o: &Map<String, Value>) -> Result<Option<Vec<Step>>, ApiError> {
    let order = match o.get("samplers") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(s)) => {
            order_from_chars(s).map_err(|e| ApiError::field("samplers", e))?
        }
        Some(Value::Array(a)) => {
            let mut names = Vec::with_capacity(a.len());
            for (i, v) in a.iter().enumerate() {
                match v {
                    Value::String(s) => names.push(s.as_str()),
                    other => {
                        return Err(ApiError::field(
                            &format!("samplers[{i}]"),
                            format!("expected a sampler name, got {}", type_name(other)),
                        ))
                    }
                }
            }
            order_from_names(names).map_err(|e| ApiError::field("samplers", e))?
        }
        Some(other) => {
            return Err(ApiError::field(
                "samplers",
                format!(
                    "expected an array of names or a string of letters, got {}",
                    type_name(other)
                ),
            ))
        }
    };
    if let Some(s) = order.iter().find(|s| matches!(s, Step::Infill | Step::AdaptiveP)) {
        return Err(ApiError::field(
            "samplers",
            format!("the '{}' sampler is not available in tessera serve yet", s.name()),
        ));
    }
    Ok(Some(order))
}

/// OpenAI's `{"15043": -100}` or llama-server's `[[15043, -1.5], ["Hello", false]]`; a key
/// that is not a number is a text. Values are numbers, or `false` to ban.
fn logit_bias(o: &Map<String, Value>) -> Result<Option<Vec<BiasEntry>>, ApiError> {
    let value = |param: &str, v: &Value| -> Result<f32, ApiError> {
        match v {
            Value::Bool(false) => Ok(f32::NEG_INFINITY),
            Value::Number(n) => match n.as_f64().map(|x| x as f32) {
                Some(x) if x.is_finite() => Ok(x),
                _ => Err(ApiError::field(param, format!("{n} is not a finite bias"))),
            },
            other => Err(ApiError::field(
                param,
                format!("expected a number or false, got {}", type_name(other)),
            )),
        }
    };
    let target = |param: &str, v: &Value| -> Result<BiasTarget, ApiError> {
        match v {
            Value::Number(n) => n
                .as_u64()
                .map(BiasTarget::Token)
                .ok_or_else(|| ApiError::field(param, format!("{n} is not a token id"))),
            Value::String(s) if !s.is_empty() => Ok(BiasTarget::Text(s.clone())),
            other => Err(ApiError::field(
                param,
                format!("expected a token id or a non-empty text, got {}", type_name(other)),
            )),
        }
    };
    let mut out = Vec::new();
    match o.get("logit_bias") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(m)) => {
            for (k, v) in m {
                let param = format!("logit_bias.{k}");
                let target = match k.parse::<i64>() {
                    Ok(id) if id >= 0 => BiasTarget::Token(id as u64),
                    Ok(id) => {
                        return Err(ApiError::field(&param, format!("{id} is not a token id")))
                    }
                    Err(_) => target(&param, &Value::String(k.clone()))?,
                };
                out.push(BiasEntry { bias: value(&param, v)?, target, param });
            }
        }
        Some(Value::Array(a)) => {
            for (i, e) in a.iter().enumerate() {
                let param = format!("logit_bias[{i}]");
                let Some([t, v]) = e.as_array().map(Vec::as_slice) else {
                    return Err(ApiError::field(&param, "expected a [token, bias] pair"));
                };
                out.push(BiasEntry {
                    target: target(&format!("{param}[0]"), t)?,
                    bias: value(&format!("{param}[1]"), v)?,
                    param,
                });
            }
        }
        Some(other) => {
            return Err(ApiError::field(
                "logit_bias",
                format!("expected an object or an array of pairs, got {}", type_name(other)),
            ))
        }
    }
    Ok(Some(out))
}

/// llama-server's fields for the rest of the chain: `min_keep`, `top_n_sigma`, `xtc_*`,
/// `dynatemp_*`, `dry_*` and `mirostat*`.
fn more(o: &Map<String, Value>, d: &SamplingParams) -> Result<SamplingParams, ApiError> {
    let num = |key: &str, min: f64, max: f64, dflt: f32| {
        opt_num(o, key, min, max).map(|v| v.map_or(dflt, |x| x as f32))
    };
    let big = f64::from(f32::MAX);
    let dry_base = num("dry_base", -big, big, d.dry_base)?;
    Ok(SamplingParams {
        min_keep: opt_int(o, "min_keep", 0, 1 << 20)?.map_or(d.min_keep, |k| k as usize),
        top_n_sigma: num("top_n_sigma", -big, big, d.top_n_sigma)?,
        xtc_probability: num("xtc_probability", 0.0, 1.0, d.xtc_probability)?,
        xtc_threshold: num("xtc_threshold", 0.0, 1.0, d.xtc_threshold)?,
        dynatemp_range: num("dynatemp_range", 0.0, big, d.dynatemp_range)?,
        dynatemp_exponent: num("dynatemp_exponent", -big, big, d.dynatemp_exponent)?,
        dry_multiplier: num("dry_multiplier", 0.0, big, d.dry_multiplier)?,
        dry_base: if dry_base >= 1.0 { dry_base } else { d.dry_base },
        dry_allowed_length: opt_int(o, "dry_allowed_length", 0, i64::from(i32::MAX))?
            .map_or(d.dry_allowed_length, |n| n as i32),
        dry_penalty_last_n: opt_int(o, "dry_penalty_last_n", -1, i64::from(i32::MAX))?
            .map_or(d.dry_penalty_last_n, |n| n as i32),
        dry_sequence_breakers: breakers(o)?.unwrap_or_else(|| d.dry_sequence_breakers.clone()),
        mirostat: opt_int(o, "mirostat", 0, 2)?.map_or(d.mirostat, |m| m as u8),
        mirostat_tau: num("mirostat_tau", -big, big, d.mirostat_tau)?,
        mirostat_eta: num("mirostat_eta", -big, big, d.mirostat_eta)?,
        ..d.clone()
    })
}

/// `dry_sequence_breakers`: a non-empty array of strings (llama-server's rule).
fn breakers(o: &Map<String, Value>) -> Result<Option<Vec<String>>, ApiError> {
    let key = "dry_sequence_breakers";
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(a)) if !a.is_empty() => a
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) => Ok(s.clone()),
                other => Err(ApiError::field(
                    &format!("{key}[{i}]"),
                    format!("expected a string, got {}", type_name(other)),
                )),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(Value::Array(_)) => Err(ApiError::field(key, "must be a non-empty array of strings")),
        Some(other) => Err(ApiError::field(
            key,
            format!("expected a non-empty array of strings, got {}", type_name(other)),
        )),
    }
}

impl Sampling {
    /// Server-wide defaults from llama.cpp's sampling parameters (`tessera serve`'s sampling
    /// flags, as llama-server's): the chain's `order` and a logit bias on token ids.
    pub fn from_params(p: &SamplingParams, order: Vec<Step>, bias: &[(u32, f32)]) -> Self {
        Sampling {
            temperature: p.temp,
            top_p: p.top_p,
            top_k: p.top_k,
            min_p: p.min_p,
            typical_p: p.typical_p,
            seed: p.seed,
            presence_penalty: p.presence_penalty,
            frequency_penalty: p.frequency_penalty,
            repeat_penalty: p.repeat_penalty,
            repeat_last_n: p.repeat_last_n as i64,
            order,
            logit_bias: bias
                .iter()
                .map(|&(t, b)| BiasEntry {
                    param: "--logit-bias".into(),
                    target: BiasTarget::Token(u64::from(t)),
                    bias: b,
                })
                .collect(),
            more: p.clone(),
        }
    }

    /// The token-level bias of `logit_bias`: ids checked against the vocabulary, texts
    /// tokenized (every token of the text gets the bias, as llama-server's).
    pub fn resolve_bias(&self, vocab: &Vocab) -> Result<Vec<(u32, f32)>, ApiError> {
        let n_vocab = vocab.n_tokens();
        let mut out = Vec::with_capacity(self.logit_bias.len());
        for e in &self.logit_bias {
            match &e.target {
                BiasTarget::Token(id) if (*id as usize) < n_vocab => out.push((*id as u32, e.bias)),
                BiasTarget::Token(id) => {
                    return Err(ApiError::field(
                        &e.param,
                        format!("{id} is not a token id below {n_vocab}"),
                    ))
                }
                BiasTarget::Text(t) => {
                    out.extend(vocab.tokenize(t, false, false).into_iter().map(|id| (id, e.bias)))
                }
            }
        }
        Ok(out)
    }

    /// The chain this request samples with over `vocab` (context size `n_ctx` for
    /// `repeat_last_n` and `dry_penalty_last_n` of -1), with `bias` first; llama.cpp's chain
    /// reduced to an argmax where it picks the same.
    pub fn chain(
        &self,
        n_ctx: usize,
        bias: &[(u32, f32)],
        vocab: &Vocab,
    ) -> Result<SamplerChain, ApiError> {
        let more = self.more.clone();
        let dry_penalty_last_n = match more.dry_penalty_last_n {
            -1 => i32::try_from(n_ctx).unwrap_or(i32::MAX),
            n => n,
        };
        let params = SamplingParams {
            temp: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            typical_p: self.typical_p,
            repeat_penalty: self.repeat_penalty,
            repeat_last_n: if self.repeat_last_n < 0 { n_ctx } else { self.repeat_last_n as usize },
            frequency_penalty: self.frequency_penalty,
            presence_penalty: self.presence_penalty,
            seed: self.seed,
            dry_penalty_last_n,
            ..more
        };
        SamplerChain::for_params(&params, &self.order, bias, Some(vocab))
            .map_err(|e| ApiError::field("samplers", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse_v(v: Value) -> Result<Sampling, ApiError> {
        parse(v.as_object().unwrap(), &Sampling::default())
    }

    #[test]
    fn seeds_are_llama_servers() {
        assert_eq!(parse_v(json!({})).unwrap().seed, DEFAULT_SEED);
        assert_eq!(parse_v(json!({"seed": -1})).unwrap().seed, DEFAULT_SEED);
        assert_eq!(parse_v(json!({"seed": 4294967295u64})).unwrap().seed, DEFAULT_SEED);
        assert_eq!(parse_v(json!({"seed": 42})).unwrap().seed, 42);
        for bad in [json!(4294967296u64), json!(-2), json!(1.5), json!("7")] {
            let e = parse_v(json!({"seed": bad})).unwrap_err();
            assert_eq!(e.param.as_deref(), Some("seed"), "{bad}: {}", e.message);
        }
    }

    #[test]
    fn logit_bias_forms_and_errors() {
        let s = parse_v(json!({"logit_bias": {"15": -100, "7": false, "Hi": 2}})).unwrap();
        assert_eq!(s.logit_bias.len(), 3);
        assert_eq!(s.logit_bias[0].target, BiasTarget::Token(15));
        assert_eq!(s.logit_bias[1].bias, f32::NEG_INFINITY);
        assert_eq!(s.logit_bias[2].target, BiasTarget::Text("Hi".into()));
        let s = parse_v(json!({"logit_bias": [[3, 1.5], ["x", false]]})).unwrap();
        assert_eq!(s.logit_bias[0].target, BiasTarget::Token(3));
        assert_eq!(s.logit_bias[1].bias, f32::NEG_INFINITY);
        for (bad, param) in [
            (json!({"1": "x"}), "logit_bias.1"),
            (json!({"1": true}), "logit_bias.1"),
            (json!({"-1": 1}), "logit_bias.-1"),
            (json!({"1": 1e300}), "logit_bias.1"),
            (json!([[1]]), "logit_bias[0]"),
            (json!([[-4, 1]]), "logit_bias[0][0]"),
            (json!([[1, "x"]]), "logit_bias[0][1]"),
            (json!(5), "logit_bias"),
        ] {
            let e = parse_v(json!({ "logit_bias": bad })).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(param), "{bad}: {}", e.message);
        }
    }

    #[test]
    fn absent_fields_take_the_servers_defaults() {
        let p = SamplingParams {
            temp: 0.3,
            top_k: 7,
            dry_multiplier: 0.5,
            seed: 9,
            ..Default::default()
        };
        let d = Sampling::from_params(&p, vec![Step::TopK, Step::Temperature], &[(5, -1.0)]);
        let s = parse(&Map::new(), &d).unwrap();
        assert_eq!((s.temperature, s.top_k, s.seed), (0.3, 7, 9));
        assert_eq!(s.more.dry_multiplier, 0.5);
        assert_eq!(s.order, [Step::TopK, Step::Temperature]);
        assert_eq!(s.logit_bias.len(), 1);
        let o = json!({"temperature": 1.0, "seed": -1, "logit_bias": {}, "dry_multiplier": 0});
        let s = parse(o.as_object().unwrap(), &d).unwrap();
        assert_eq!((s.temperature, s.top_k, s.seed), (1.0, 7, DEFAULT_SEED));
        assert!(s.logit_bias.is_empty() && s.more.dry_multiplier == 0.0);
    }

    #[test]
    fn chain_fields_are_read_and_checked() {
        let s = parse_v(json!({
            "mirostat": 2, "mirostat_tau": 4.0, "mirostat_eta": 0.2,
            "dry_multiplier": 0.8, "dry_base": 0.5, "dry_allowed_length": 3,
            "dry_penalty_last_n": -1, "dry_sequence_breakers": ["\n", "##"],
            "xtc_probability": 0.5, "xtc_threshold": 0.2, "top_n_sigma": 1.5,
            "dynatemp_range": 0.3, "dynatemp_exponent": 2.0, "min_keep": 5,
        }))
        .unwrap();
        let m = &s.more;
        assert_eq!((m.mirostat, m.mirostat_tau, m.mirostat_eta), (2, 4.0, 0.2));
        assert_eq!((m.dry_multiplier, m.dry_base, m.dry_allowed_length), (0.8, 1.75, 3));
        assert_eq!(m.dry_penalty_last_n, -1);
        assert_eq!(m.dry_sequence_breakers, ["\n", "##"]);
        assert_eq!((m.xtc_probability, m.xtc_threshold, m.top_n_sigma), (0.5, 0.2, 1.5));
        assert_eq!((m.dynatemp_range, m.dynatemp_exponent, m.min_keep), (0.3, 2.0, 5));
        for (bad, param) in [
            (json!({"mirostat": 3}), "mirostat"),
            (json!({"mirostat": "2"}), "mirostat"),
            (json!({"dry_multiplier": -1}), "dry_multiplier"),
            (json!({"xtc_probability": 1.5}), "xtc_probability"),
            (json!({"dry_penalty_last_n": -2}), "dry_penalty_last_n"),
            (json!({"min_keep": -1}), "min_keep"),
            (json!({"dry_sequence_breakers": [1]}), "dry_sequence_breakers[0]"),
            (json!({"dry_sequence_breakers": []}), "dry_sequence_breakers"),
            (json!({"dry_sequence_breakers": "\n"}), "dry_sequence_breakers"),
            (json!({"typical_p": "0.5"}), "typical_p"),
            (json!({"samplers": ["top_k", "nope"]}), "samplers"),
            (json!({"samplers": "kq"}), "samplers"),
            (json!({"samplers": ["infill"]}), "samplers"),
            (json!({"samplers": [1]}), "samplers[0]"),
        ] {
            let e = parse_v(bad.clone()).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(param), "{bad}: {}", e.message);
        }
        let s = parse_v(json!({"samplers": "kt", "typical_p": 0.5})).unwrap();
        assert_eq!(s.order, [Step::TopK, Step::Temperature]);
        assert_eq!(s.typical_p, 0.5);
    }
}
