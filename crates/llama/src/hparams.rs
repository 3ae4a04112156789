//! Hyperparameters from the `{arch}.*` metadata keys (llama.cpp's `llama_hparams`).

use crate::{LlamaError, Result};
use tessera_gguf::{Metadata, Value};

/// A model's hyperparameters. Per-layer values (head counts, FFN width) are vectors of
/// `n_layer` entries: GGUF stores either one number or an array.
#[derive(Debug, Clone, PartialEq)]
pub struct HParams {
    /// `general.architecture`.
    pub arch: String,
    /// Training context length.
    pub n_ctx_train: usize,
    /// Embedding width.
    pub n_embd: usize,
    /// Number of blocks.
    pub n_layer: usize,
    /// Query heads per layer.
    pub n_head: Vec<usize>,
    /// Key/value heads per layer.
    pub n_head_kv: Vec<usize>,
    /// FFN width per layer.
    pub n_ff: Vec<usize>,
    /// Key head size (`attention.key_length`, default `n_embd / n_head`).
    pub head_dim_k: usize,
    /// Value head size.
    pub head_dim_v: usize,
    /// Vocabulary size (from the embedding matrix when `vocab_size` is absent).
    pub n_vocab: usize,
    /// Rotated dimensions per head.
    pub n_rot: usize,
    /// RoPE base.
    pub rope_freq_base: f32,
    /// RoPE base of sliding-window layers.
    pub rope_freq_base_swa: f32,
    /// RoPE frequency scale (1 / linear scaling factor).
    pub rope_freq_scale: f32,
    /// YaRN extrapolation mix (0 unless the scaling type is yarn).
    pub yarn_ext_factor: f32,
    /// RoPE magnitude scale (llama.cpp's `cparams.yarn_attn_factor`): with YaRN, the mscale
    /// `1 + 0.1 ln(factor)` times its reciprocal (ggml's kernel applies the mscale again), times
    /// `rope.scaling.attn_factor`.
    pub yarn_attn_factor: f32,
    /// Context the RoPE scaling was trained from.
    pub n_ctx_orig: usize,
    /// RMS norm epsilon.
    pub rms_eps: f32,
    /// LayerNorm epsilon.
    pub norm_eps: f32,
    /// Sliding window (0 = none).
    pub n_swa: usize,
    /// Every `swa_pattern`-th layer is global (dense); the others slide.
    pub swa_pattern: usize,
    /// Final logit soft-capping (0 = off).
    pub final_logit_softcap: f32,
    /// Attention logit soft-capping (0 = off).
    pub attn_logit_softcap: f32,
    /// Multiplier of Q before attention (Gemma); 0 = use `1/sqrt(head_dim)` as the KQ scale.
    pub attention_scale: f32,
    /// Experts per mixture-of-experts layer (`expert_count`; 0: a dense model).
    pub n_expert: usize,
    /// Experts each token is routed to (`expert_used_count`).
    pub n_expert_used: usize,
    /// FFN width of one expert (`expert_feed_forward_length`; 0 when absent, where an
    /// architecture derives it).
    pub n_ff_exp: usize,
    /// The pooling an embedding model was trained with (`{arch}.pooling_type`; `None` when
    /// absent, as for generative models).
    pub pooling: crate::embed::Pooling,
    /// M-RoPE's sections (`rope.dimension_sections`, Qwen2-VL's language model): RoPE pairs
    /// turned by four positions a token (time, height, width, extra); `None`: one position.
    pub rope_sections: Option<[i32; 4]>,
}

fn key(arch: &str, k: &str) -> String {
    format!("{arch}.{k}")
}

fn bad(key: &str, reason: impl Into<String>) -> LlamaError {
    LlamaError::BadValue { key: key.to_string(), reason: reason.into() }
}

/// An unsigned count, or `default` when the key is absent.
fn uint_or(md: &Metadata, k: &str, default: Option<usize>) -> Result<usize> {
    match (md.get(k), default) {
        (None, Some(d)) => Ok(d),
        _ => {
            let v = md.get_uint(k)?;
            usize::try_from(v).map_err(|_| bad(k, format!("{v} is too large")))
        }
    }
}

/// llama.cpp's `cparams.yarn_attn_factor` (for architectures without a YaRN log multiplier):
/// with YaRN on, `get_mscale(factor, 1)` times the reciprocal of the mscale ggml's RoPE applies
/// itself, in f32 as there; then `rope.scaling.attn_factor`.
fn yarn_attn_factor(ext_factor: f32, freq_scale: f32, rope_attn_factor: f32) -> f32 {
    let mut f = 1.0f32;
    if ext_factor != 0.0 {
        let factor = 1.0 / freq_scale;
        f = if factor <= 1.0 { 1.0 } else { 0.1 * factor.ln() + 1.0 };
        f *= 1.0 / (1.0 + 0.1 * factor.ln());
    }
    f * rope_attn_factor
}

fn f32_or(md: &Metadata, k: &str, default: f32) -> Result<f32> {
    if md.get(k).is_none() {
        return Ok(default);
    }
    Ok(md.get_f32(k)?)
}

/// `rope.dimension_sections`: up to four non-negative integers (llama.cpp reads four, the
/// missing ones 0), one of the first three positive.
fn rope_sections(md: &Metadata, k: &str) -> Result<Option<[i32; 4]>> {
    if md.get(k).is_none() {
        return Ok(None);
    }
    let a = md.get_array(k)?;
    if a.len() > 4 {
        return Err(bad(k, format!("{} entries, at most 4", a.len())));
    }
    let mut s = [0i32; 4];
    for (i, v) in s.iter_mut().enumerate().take(a.len()) {
        let x = a.get(i).and_then(|v| v.as_integer()).ok_or_else(|| bad(k, "not integers"))?;
        *v = i32::try_from(x)
            .ok()
            .filter(|&x| (0..=4096).contains(&x))
            .ok_or_else(|| bad(k, format!("entry {i} is {x}")))?;
    }
    if s[..3].iter().all(|&x| x == 0) {
        return Err(bad(k, "the first three sections are all 0"));
    }
    Ok(Some(s))
}

/// A per-layer value: one number for every layer, or an array of `n_layer`.
fn per_layer(md: &Metadata, k: &str, n_layer: usize, default: Option<usize>) -> Result<Vec<usize>> {
    match md.get(k) {
        Some(Value::Array(_)) => {
            let a = md.get_array(k)?;
            if a.len() != n_layer {
                return Err(bad(k, format!("{} entries for {n_layer} layers", a.len())));
            }
            let mut out = Vec::with_capacity(n_layer);
            for i in 0..a.len() {
                let v =
                    a.get(i).and_then(|v| v.as_integer()).ok_or_else(|| bad(k, "not integers"))?;
                out.push(usize::try_from(v).map_err(|_| bad(k, format!("entry {i} is {v}")))?);
            }
            Ok(out)
        }
        _ => Ok(vec![uint_or(md, k, default)?; n_layer]),
    }
}

impl HParams {
    /// Reads the hyperparameters of `general.architecture` from `md`; `n_vocab_hint` (the
    /// embedding matrix's row count) stands in for a missing `vocab_size`.
    pub fn from_metadata(md: &Metadata, n_vocab_hint: Option<usize>) -> Result<HParams> {
        let arch = md.get_str("general.architecture")?.to_string();
        let a = arch.as_str();
        let n_layer = uint_or(md, &key(a, "block_count"), None)?;
        let n_embd = uint_or(md, &key(a, "embedding_length"), None)?;
        if n_layer == 0 || n_layer > 4096 || n_embd == 0 || n_embd > 1 << 20 {
            return Err(bad(&key(a, "block_count"), format!("{n_layer} layers of width {n_embd}")));
        }
        let n_head = per_layer(md, &key(a, "attention.head_count"), n_layer, None)?;
        let n_head_kv =
            per_layer(md, &key(a, "attention.head_count_kv"), n_layer, Some(n_head[0]))?;
        let n_expert = uint_or(md, &key(a, "expert_count"), Some(0))?;
        let n_expert_used = uint_or(md, &key(a, "expert_used_count"), Some(0))?;
        if n_expert > 1024 || n_expert_used > n_expert {
            return Err(bad(
                &key(a, "expert_used_count"),
                format!("{n_expert_used} of {n_expert} experts (llama.cpp allows up to 1024)"),
            ));
        }
        let n_groups = uint_or(md, &key(a, "expert_group_count"), Some(0))?;
        if n_groups > 1 {
            return Err(bad(
                &key(a, "expert_group_count"),
                format!(
                    "{n_groups}: grouped expert selection (DeepSeek-V3 style) is not supported"
                ),
            ));
        }
        // A mixture-of-experts file may leave the dense FFN width out (llama.cpp reads it
        // optionally).
        let ff_default = if n_expert > 0 { Some(0) } else { None };
        let n_ff = per_layer(md, &key(a, "feed_forward_length"), n_layer, ff_default)?;
        for (il, (&h, &hkv)) in n_head.iter().zip(&n_head_kv).enumerate() {
            if h == 0 || hkv == 0 || h % hkv != 0 {
                return Err(bad(
                    &key(a, "attention.head_count_kv"),
                    format!("layer {il}: {h} heads cannot share {hkv} KV heads"),
                ));
            }
        }
        let default_hd = n_embd / n_head[0];
        let head_dim_k = uint_or(md, &key(a, "attention.key_length"), Some(default_hd))?;
        let head_dim_v = uint_or(md, &key(a, "attention.value_length"), Some(default_hd))?;
        let n_rot = uint_or(md, &key(a, "rope.dimension_count"), Some(head_dim_k))?;
        if head_dim_k == 0 || n_rot > head_dim_k || n_rot % 2 != 0 {
            return Err(bad(
                &key(a, "rope.dimension_count"),
                format!("{n_rot} for heads of {head_dim_k}"),
            ));
        }
        let n_ctx_train = uint_or(md, &key(a, "context_length"), Some(2048))?;
        let n_vocab = match md.get(&key(a, "vocab_size")) {
            Some(_) => uint_or(md, &key(a, "vocab_size"), None)?,
            None => match (n_vocab_hint, md.get("tokenizer.ggml.tokens")) {
                (Some(n), _) => n,
                (None, Some(_)) => md.get_array("tokenizer.ggml.tokens")?.len(),
                (None, None) => return Err(bad(&key(a, "vocab_size"), "missing")),
            },
        };
        let scaling =
            md.get(&key(a, "rope.scaling.type")).and_then(|v| v.as_str()).unwrap_or("none");
        let factor = f32_or(md, &key(a, "rope.scaling.factor"), 0.0)?;
        let rope_freq_scale = if scaling == "none" || factor == 0.0 { 1.0 } else { 1.0 / factor };
        let n_ctx_orig =
            uint_or(md, &key(a, "rope.scaling.original_context_length"), Some(n_ctx_train))?;
        let is_gemma3 = a == "gemma3";
        let is_gemma2 = a == "gemma2";
        let is_gpt_oss = a == "gpt-oss";
        // Gemma 2 slides every other layer over 4096 cells unless its file says otherwise, and
        // soft-caps at 50 (attention) and 30 (logits) by default, as llama.cpp's hparams.
        let n_swa = uint_or(
            md,
            &key(a, "attention.sliding_window"),
            match (is_gemma2, is_gpt_oss) {
                (true, _) => Some(4096),
                // llama.cpp requires gpt-oss's window.
                (_, true) => None,
                _ => Some(0),
            },
        )?;
        // llama.cpp turns Phi-3's sliding window off (its converters do not mark which layers
        // slide).
        let n_swa = if a == "phi3" { 0 } else { n_swa };
        // Gemma 2 and gpt-oss slide every other layer unless the file says otherwise.
        let swa_pattern = match (is_gemma3, is_gemma2 || is_gpt_oss) {
            (true, _) if n_swa > 0 => 6,
            (_, true) => uint_or(md, &key(a, "attention.sliding_window_pattern"), Some(2))?,
            _ => 1,
        };
        let softcap_defaults = if is_gemma2 { (50.0, 30.0) } else { (0.0, 0.0) };
        let rope_freq_base = f32_or(md, &key(a, "rope.freq_base"), 10000.0)?;
        // Gemma 2's and gpt-oss's sliding layers rotate with the global base unless told
        // otherwise.
        let base_swa_default = if is_gemma2 || is_gpt_oss { rope_freq_base } else { 10000.0 };
        let yarn_ext_factor = if scaling == "yarn" { 1.0 } else { 0.0 };
        let yarn_attn_factor = yarn_attn_factor(
            yarn_ext_factor,
            rope_freq_scale,
            f32_or(md, &key(a, "rope.scaling.attn_factor"), 1.0)?,
        );
        let attention_scale = if is_gemma3 {
            1.0 / (head_dim_k as f32).sqrt()
        } else if is_gemma2 {
            // llama.cpp: Gemma 2 27B (46 layers) scales by the model width per head.
            let d = if n_layer == 46 { n_embd / n_head[0] } else { head_dim_k };
            1.0 / (d as f32).sqrt()
        } else {
            0.0
        };
        let pooling_key = key(a, "pooling_type");
        let pooling = uint_or(md, &pooling_key, Some(0))?;
        let pooling = crate::embed::Pooling::from_gguf(pooling as u64)
            .ok_or_else(|| bad(&pooling_key, format!("{pooling} is not a pooling type (0-4)")))?;
        Ok(HParams {
            n_ctx_train,
            n_embd,
            n_layer,
            n_head,
            n_head_kv,
            n_ff,
            head_dim_k,
            head_dim_v,
            n_vocab,
            n_rot,
            rope_freq_base,
            rope_freq_base_swa: f32_or(md, &key(a, "rope.freq_base_swa"), base_swa_default)?,
            rope_freq_scale,
            yarn_ext_factor,
            yarn_attn_factor,
            n_ctx_orig,
            rms_eps: f32_or(md, &key(a, "attention.layer_norm_rms_epsilon"), 1e-6)?,
            norm_eps: f32_or(md, &key(a, "attention.layer_norm_epsilon"), 1e-5)?,
            n_swa,
            swa_pattern,
            final_logit_softcap: f32_or(
                md,
                &key(a, "final_logit_softcapping"),
                softcap_defaults.1,
            )?,
            attn_logit_softcap: f32_or(md, &key(a, "attn_logit_softcapping"), softcap_defaults.0)?,
            attention_scale,
            n_expert,
            n_expert_used,
            n_ff_exp: uint_or(md, &key(a, "expert_feed_forward_length"), Some(0))?,
            pooling,
            rope_sections: rope_sections(md, &key(a, "rope.dimension_sections"))?,
            arch,
        })
    }

    /// Positions a token carries: 4 with M-RoPE ([`HParams::rope_sections`]), else 1.
    pub fn n_pos_per_token(&self) -> usize {
        if self.rope_sections.is_some() {
            4
        } else {
            1
        }
    }

    /// K width of one token in layer `il` (all KV heads).
    pub fn n_embd_k_gqa(&self, il: usize) -> usize {
        self.head_dim_k * self.n_head_kv[il]
    }

    /// V width of one token in layer `il`.
    pub fn n_embd_v_gqa(&self, il: usize) -> usize {
        self.head_dim_v * self.n_head_kv[il]
    }

    /// Whether layer `il` uses the sliding window (llama.cpp's `is_swa`: with pattern 6,
    /// layers 0-4 of every 6 slide and the 6th is global).
    pub fn is_swa(&self, il: usize) -> bool {
        self.n_swa > 0 && self.swa_pattern > 1 && il % self.swa_pattern < self.swa_pattern - 1
    }
}
