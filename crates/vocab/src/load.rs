//! Building a [`Vocab`] from `tokenizer.ggml.*` metadata (`llama_vocab::impl::load`).
//!
//! Every value is checked before use: the tokens must be a string array, the per-token arrays
//! at least as long, merges must name two tokens, special ids must be in range. Where llama.cpp
//! only warns about a special id out of range, this crate refuses the file (an id past the
//! vocabulary is a broken file; a typed error is more useful than a silently different BOS).

use crate::pretokenize::{PreTokenizer, PreType};
use crate::special::TokenAttr;
use crate::vocab::{Flags, SpecialIds, TokenData, Vocab, VocabType};
use crate::{Result, VocabError};
use std::collections::{BTreeSet, HashMap};
use tessera_gguf::{Array, Metadata, Value};

const KEY_MODEL: &str = "tokenizer.ggml.model";
const KEY_PRE: &str = "tokenizer.ggml.pre";
const KEY_TOKENS: &str = "tokenizer.ggml.tokens";
const KEY_SCORES: &str = "tokenizer.ggml.scores";
const KEY_TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
const KEY_MERGES: &str = "tokenizer.ggml.merges";
const KEY_ADD_PREFIX: &str = "tokenizer.ggml.add_space_prefix";
const KEY_ADD_BOS: &str = "tokenizer.ggml.add_bos_token";
const KEY_ADD_EOS: &str = "tokenizer.ggml.add_eos_token";
const KEY_ADD_SEP: &str = "tokenizer.ggml.add_sep_token";
const KEY_LOWERCASE: &str = "tokenizer.ggml.normalizer.lowercase";
const KEY_STRIP_ACCENTS: &str = "tokenizer.ggml.normalizer.strip_accents";
const KEY_BOS: &str = "tokenizer.ggml.bos_token_id";
const KEY_EOS: &str = "tokenizer.ggml.eos_token_id";
const KEY_SEP: &str = "tokenizer.ggml.seperator_token_id";

/// A typed view of the metadata that turns reader errors into [`VocabError`]s naming the key.
struct Meta<'a>(&'a Metadata);

impl Meta<'_> {
    fn wrong(key: &'static str, expected: &'static str, v: &Value) -> VocabError {
        VocabError::WrongType { key, expected, actual: v.type_name() }
    }
    fn str(&self, key: &'static str) -> Result<Option<&str>> {
        match self.0.get(key) {
            None => Ok(None),
            Some(Value::String(b)) => {
                std::str::from_utf8(b).map(Some).map_err(|_| VocabError::NotUtf8 { key })
            }
            Some(v) => Err(Self::wrong(key, "STRING", v)),
        }
    }
    fn bool(&self, key: &'static str) -> Result<Option<bool>> {
        match self.0.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(Self::wrong(key, "BOOL", v)),
        }
    }
    fn str_array(&self, key: &'static str) -> Result<Option<&[Vec<u8>]>> {
        match self.0.get(key) {
            None => Ok(None),
            Some(Value::Array(Array::String(a))) => Ok(Some(a)),
            Some(v) => Err(Self::wrong(key, "ARRAY[STRING]", v)),
        }
    }
    /// A token id: any integer type, checked against the vocabulary size.
    fn token_id(&self, key: &'static str, n_tokens: usize) -> Result<Option<u32>> {
        let Some(v) = self.0.get(key) else { return Ok(None) };
        let id = v.as_integer().ok_or_else(|| Self::wrong(key, "an integer", v))?;
        match u32::try_from(id) {
            Ok(id) if (id as usize) < n_tokens => Ok(Some(id)),
            _ => Err(VocabError::TokenIdOutOfRange { key, id, n_tokens }),
        }
    }
}

/// Texts llama.cpp takes for an end-of-turn token when the file names none.
const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];
const EOM_TEXTS: &[&str] = &["<|eom_id|>"];
const FIM_PRE_TEXTS: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
];
const FIM_SUF_TEXTS: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
];
const FIM_MID_TEXTS: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
    "<|middle|>",
];
const FIM_PAD_TEXTS: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP_TEXTS: &[&str] =
    &["<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"];
const FIM_SEP_TEXTS: &[&str] = &["<|file_sep|>"];
/// Texts llama.cpp always treats as end of generation.
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

impl Vocab {
    /// Builds the vocabulary from a GGUF file's metadata.
    pub fn from_metadata(meta: &Metadata) -> Result<Vocab> {
        load(&Meta(meta))
    }

    /// Opens a GGUF file and builds the vocabulary from its metadata.
    pub fn from_gguf_path(path: impl AsRef<std::path::Path>) -> Result<Vocab> {
        let path = path.as_ref();
        let file = tessera_gguf::GgufFile::open(path)
            .map_err(|source| VocabError::Gguf { path: path.to_path_buf(), source })?;
        Vocab::from_metadata(file.metadata())
    }
}

fn load(m: &Meta<'_>) -> Result<Vocab> {
    let model = m.str(KEY_MODEL)?.ok_or(VocabError::MissingKey { key: KEY_MODEL })?;
    let pre_name = m.str(KEY_PRE)?.unwrap_or("").to_string();

    // Per-type defaults (ids are checked against the vocabulary size below).
    let mut flags = Flags { lowercase: true, strip_accents: true, ..Flags::default() };
    let mut special = SpecialIds::default();
    let (kind, pre_type) = match model {
        "llama" => {
            special.bos = Some(1);
            special.eos = Some(2);
            special.unk = Some(0);
            flags.add_space_prefix = true;
            flags.add_bos = true;
            (VocabType::Spm, PreType::Default)
        }
        "bert" => {
            special.bos = Some(101);
            special.unk = Some(100);
            special.sep = Some(102);
            special.pad = Some(0);
            special.mask = Some(103);
            flags.add_sep = true;
            flags.add_bos = true;
            flags.clean_spaces = true;
            (VocabType::Wpm, PreType::Default)
        }
        "gpt2" => {
            special.bos = Some(11);
            special.eos = Some(11);
            let pre = crate::pretokenize::PreType::from_name(&pre_name).ok_or_else(|| {
                VocabError::UnsupportedPre { key: KEY_PRE, pre: pre_name.clone() }
            })?;
            flags.ignore_merges = pre.ignore_merges;
            flags.clean_spaces = pre.clean_spaces;
            flags.add_bos = pre.add_bos.unwrap_or(false);
            flags.add_sep = pre.add_sep;
            (VocabType::Bpe, pre.pre_type)
        }
        other => {
            return Err(VocabError::UnsupportedModel { key: KEY_MODEL, model: other.to_string() })
        }
    };
    if let Some(v) = m.bool(KEY_ADD_PREFIX)? {
        flags.add_space_prefix = v;
    }

    // Tokens, scores, types.
    let texts = m.str_array(KEY_TOKENS)?.ok_or(VocabError::MissingKey { key: KEY_TOKENS })?;
    let n = texts.len();
    if n == 0 || n > i32::MAX as usize {
        return Err(VocabError::BadTokenCount { key: KEY_TOKENS, count: n });
    }
    let scores: Option<Vec<f32>> = match m.0.get(KEY_SCORES) {
        None => None,
        Some(Value::Array(Array::F32(a))) => Some(a.clone()),
        Some(Value::Array(Array::I32(a))) => Some(a.iter().map(|&s| s as f32).collect()),
        Some(v) => return Err(Meta::wrong(KEY_SCORES, "ARRAY[FLOAT32] or ARRAY[INT32]", v)),
    };
    let types: Option<&[i32]> = match m.0.get(KEY_TOKEN_TYPE) {
        None => None,
        Some(Value::Array(Array::I32(a))) => Some(a),
        Some(v) => return Err(Meta::wrong(KEY_TOKEN_TYPE, "ARRAY[INT32]", v)),
    };
    for (key, len) in
        [(KEY_SCORES, scores.as_ref().map(Vec::len)), (KEY_TOKEN_TYPE, types.map(<[i32]>::len))]
    {
        if let Some(len) = len.filter(|&len| len < n) {
            return Err(VocabError::LengthMismatch { key, len, n_tokens: n });
        }
    }
    let mut tokens = Vec::with_capacity(n);
    let mut token_to_id = HashMap::with_capacity(n);
    let mut max_token_len = 0;
    for (i, text) in texts.iter().enumerate() {
        let text = if text.is_empty() { format!("[EMPTY_{i}]").into_bytes() } else { text.clone() };
        if let Some(&first) = token_to_id.get(&text) {
            return Err(VocabError::DuplicateToken {
                key: KEY_TOKENS,
                text: String::from_utf8_lossy(&text).into_owned(),
                first,
                second: i as u32,
            });
        }
        max_token_len = max_token_len.max(text.len());
        token_to_id.insert(text.clone(), i as u32);
        tokens.push(TokenData {
            text,
            score: scores.as_ref().map_or(0.0, |s| s[i]),
            attr: types.map_or(TokenAttr::NORMAL, |t| TokenAttr::from_token_type(t[i])),
        });
    }

    // BPE merges, ranked by position; both sides must be tokens.
    let mut merges = HashMap::new();
    if kind == VocabType::Bpe {
        let list = m.str_array(KEY_MERGES)?.ok_or(VocabError::MissingKey { key: KEY_MERGES })?;
        merges.reserve(list.len());
        for (rank, merge) in list.iter().enumerate() {
            let bad = |reason| VocabError::BadMerge {
                key: KEY_MERGES,
                index: rank,
                merge: String::from_utf8_lossy(merge).into_owned(),
                reason,
            };
            let space = merge.iter().skip(1).position(|&b| b == b' ').map(|p| p + 1);
            let Some(space) = space else { return Err(bad("no space between the two parts")) };
            let left =
                token_to_id.get(&merge[..space]).ok_or_else(|| bad("left part is not a token"))?;
            let right = token_to_id
                .get(&merge[space + 1..])
                .ok_or_else(|| bad("right part is not a token"))?;
            let rank = u32::try_from(rank).map_err(|_| bad("too many merges"))?;
            merges.entry((*left, *right)).or_insert(rank);
        }
    }

    // Special ids: defaults past the vocabulary are dropped, ids from the file must fit.
    for slot in [
        &mut special.bos,
        &mut special.eos,
        &mut special.unk,
        &mut special.sep,
        &mut special.pad,
        &mut special.mask,
    ] {
        if slot.is_some_and(|id| id as usize >= n) {
            *slot = None;
        }
    }
    type Slot = fn(&mut SpecialIds) -> &mut Option<u32>;
    let id_keys: [(&'static str, Slot); 17] = [
        (KEY_BOS, |s| &mut s.bos),
        (KEY_EOS, |s| &mut s.eos),
        ("tokenizer.ggml.eot_token_id", |s| &mut s.eot),
        ("tokenizer.ggml.eom_token_id", |s| &mut s.eom),
        ("tokenizer.ggml.unknown_token_id", |s| &mut s.unk),
        (KEY_SEP, |s| &mut s.sep),
        ("tokenizer.ggml.padding_token_id", |s| &mut s.pad),
        ("tokenizer.ggml.mask_token_id", |s| &mut s.mask),
        ("tokenizer.ggml.fim_pre_token_id", |s| &mut s.fim_pre),
        ("tokenizer.ggml.fim_suf_token_id", |s| &mut s.fim_suf),
        ("tokenizer.ggml.fim_mid_token_id", |s| &mut s.fim_mid),
        ("tokenizer.ggml.fim_pad_token_id", |s| &mut s.fim_pad),
        ("tokenizer.ggml.fim_rep_token_id", |s| &mut s.fim_rep),
        ("tokenizer.ggml.fim_sep_token_id", |s| &mut s.fim_sep),
        // deprecated names of the first three FIM ids
        ("tokenizer.ggml.prefix_token_id", |s| &mut s.fim_pre),
        ("tokenizer.ggml.suffix_token_id", |s| &mut s.fim_suf),
        ("tokenizer.ggml.middle_token_id", |s| &mut s.fim_mid),
    ];
    for (key, slot) in id_keys {
        if let Some(id) = m.token_id(key, n)? {
            *slot(&mut special) = Some(id);
        }
    }

    // add_bos / add_eos / add_sep from the file override the defaults.
    if let Some(v) = m.bool(KEY_ADD_BOS)? {
        flags.add_bos = v;
    }
    if let Some(v) = m.bool(KEY_ADD_EOS)? {
        flags.add_eos = v;
    }
    if let Some(v) = m.bool(KEY_ADD_SEP)? {
        flags.add_sep = v;
    }
    for (on, id, flag_key, id_key) in [
        (flags.add_bos, special.bos, KEY_ADD_BOS, KEY_BOS),
        (flags.add_eos, special.eos, KEY_ADD_EOS, KEY_EOS),
        (flags.add_sep, special.sep, KEY_ADD_SEP, KEY_SEP),
    ] {
        if on && id.is_none() {
            return Err(VocabError::MissingSpecialToken { flag_key, id_key });
        }
    }
    if let Some(v) = m.bool(KEY_LOWERCASE)? {
        flags.lowercase = v;
        flags.strip_accents = v;
    }
    if let Some(v) = m.bool(KEY_STRIP_ACCENTS)? {
        flags.strip_accents = v;
    }

    let mut vocab = Vocab {
        kind,
        pre_name,
        pre_type,
        tokens,
        token_to_id,
        max_token_len,
        merges,
        special,
        flags,
        eog: BTreeSet::new(),
        special_cache: Vec::new(),
        pre: match kind {
            VocabType::Bpe => Some(PreTokenizer::new(pre_type)?),
            _ => None,
        },
    };
    detect_special_tokens(&mut vocab);
    build_special_cache(&mut vocab);
    per_model_attributes(&mut vocab, m)?;
    Ok(vocab)
}

impl Vocab {
    fn id_of(&self, text: &str) -> Option<u32> {
        self.token_to_id.get(text.as_bytes()).copied()
    }
    fn set_attr(&mut self, id: u32, attr: TokenAttr, on: bool) {
        if let Some(t) = self.tokens.get_mut(id as usize) {
            t.attr = t.attr.with(attr, on);
        }
    }
    /// The lowest id among tokens with one of `texts` (llama.cpp takes the first it meets in
    /// hash order; the lowest id is the deterministic choice).
    fn first_of(&self, texts: &[&str]) -> Option<u32> {
        texts.iter().filter_map(|t| self.id_of(t)).min()
    }
}

/// EOT / EOM / FIM detection by text, unused-token detection and the EOG set.
fn detect_special_tokens(v: &mut Vocab) {
    let detected = [
        (v.special.eot.is_none(), EOT_TEXTS, 0),
        (v.special.eom.is_none(), EOM_TEXTS, 1),
        (v.special.fim_pre.is_none(), FIM_PRE_TEXTS, 2),
        (v.special.fim_suf.is_none(), FIM_SUF_TEXTS, 3),
        (v.special.fim_mid.is_none(), FIM_MID_TEXTS, 4),
        (v.special.fim_pad.is_none(), FIM_PAD_TEXTS, 5),
        (v.special.fim_rep.is_none(), FIM_REP_TEXTS, 6),
        (v.special.fim_sep.is_none(), FIM_SEP_TEXTS, 7),
    ];
    for (missing, texts, which) in detected {
        if !missing {
            continue;
        }
        if let Some(id) = v.first_of(texts) {
            v.set_attr(id, TokenAttr::CONTROL, true);
            let slot = match which {
                0 => &mut v.special.eot,
                1 => &mut v.special.eom,
                2 => &mut v.special.fim_pre,
                3 => &mut v.special.fim_suf,
                4 => &mut v.special.fim_mid,
                5 => &mut v.special.fim_pad,
                6 => &mut v.special.fim_rep,
                _ => &mut v.special.fim_sep,
            };
            *slot = Some(id);
        }
    }

    // Control tokens named "unused" are unused.
    for t in &mut v.tokens {
        if t.attr.intersects(TokenAttr::CONTROL) && t.text.windows(6).any(|w| w == b"unused") {
            t.attr = t.attr.with(TokenAttr::UNUSED, true);
        }
    }

    let mut eog: BTreeSet<u32> =
        [v.special.fim_pad, v.special.fim_rep, v.special.fim_sep].into_iter().flatten().collect();
    for text in EOG_TEXTS {
        if let Some(id) = v.id_of(text) {
            eog.insert(id);
            v.set_attr(id, TokenAttr::CONTROL, true);
        }
    }
    // gpt-oss: these markers are always rendered.
    for text in ["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"] {
        if let Some(id) = v.id_of(text) {
            v.tokens[id as usize].attr = TokenAttr::USER_DEFINED;
        }
    }
    eog.extend([v.special.eos, v.special.eot, v.special.eom].into_iter().flatten());

    // o200k_harmony / solar-open: "<|end|>" is not EOG when "<|return|>"+"<|call|>" or
    // "<|calls|>"+"<|flush|>" are.
    let in_eog = |text: &str| v.id_of(text).filter(|id| eog.contains(id));
    let has_call = in_eog("<|call|>").is_some() || in_eog("<|calls|>").is_some();
    let (has_return, has_flush) = (in_eog("<|return|>").is_some(), in_eog("<|flush|>").is_some());
    if let Some(end) = in_eog("<|end|>") {
        if has_call && (has_return || has_flush) {
            eog.remove(&end);
            v.tokens[end as usize].attr = TokenAttr::USER_DEFINED;
        }
    }
    // gemma4 / paddleocr: "</s>" is not EOG next to "<|tool_response>".
    let in_eog = |text: &str| v.id_of(text).filter(|id| eog.contains(id));
    if let (Some(_), Some(s)) = (in_eog("<|tool_response>"), in_eog("</s>")) {
        eog.remove(&s);
        v.tokens[s as usize].attr = TokenAttr::NORMAL;
    }
    v.eog = eog;
}

/// CONTROL, USER_DEFINED and UNKNOWN tokens, longest text first (ties: lower id first).
fn build_special_cache(v: &mut Vocab) {
    let special = TokenAttr::CONTROL | TokenAttr::USER_DEFINED | TokenAttr::UNKNOWN;
    let mut cache: Vec<u32> = (0..v.tokens.len() as u32)
        .filter(|&id| v.tokens[id as usize].attr.intersects(special))
        .collect();
    cache.sort_by_key(|&id| std::cmp::Reverse(v.tokens[id as usize].text.len()));
    v.special_cache = cache;
}

/// llama.cpp's per-model token attributes, keyed by model name, pre-tokenizer or architecture.
fn per_model_attributes(v: &mut Vocab, m: &Meta<'_>) -> Result<()> {
    let name = m.str("general.name")?.unwrap_or("").to_lowercase();
    let arch = m.str("general.architecture")?.unwrap_or("");
    let pre = v.pre_name.clone();
    let contains_any = |s: &str, subs: &[&str]| subs.iter().any(|x| s.contains(x));
    if contains_any(&pre, &["jina-v2-de", "jina-v2-es", "jina-v2-code"])
        || contains_any(arch, &["nomic-bert-moe", "jina-bert-v3"])
    {
        if let Some(id) = v.id_of("<mask>") {
            v.set_attr(id, TokenAttr::LSTRIP, true);
        }
    } else if contains_any(&name, &["phi-3", "phi3"]) {
        for id in v.special_cache.clone() {
            v.set_attr(id, TokenAttr::RSTRIP, true);
        }
        if let Some(id) = v.id_of("</s>") {
            v.set_attr(id, TokenAttr::RSTRIP, true);
        }
        for text in ["<unk>", "<s>", "<|endoftext|>"] {
            if let Some(id) = v.id_of(text) {
                v.set_attr(id, TokenAttr::RSTRIP, false);
            }
        }
    } else if name.contains("modern-bert") {
        if let Some(id) = v.id_of("[MASK]") {
            v.set_attr(id, TokenAttr::LSTRIP, true);
        }
    }
    Ok(())
}
