//! BPE pre-tokenizers: splitting text into words before merging, as llama.cpp's
//! `unicode_regex_split` does for each `tokenizer.ggml.pre`.
//!
//! A pre-tokenizer is a list of regexes applied in turn; each one refines the current chunks
//! into its matches and the gaps between them. llama.cpp runs the GPT-2 and Llama-3 regexes
//! (which need a `(?!\S)` lookahead) through hand-written splitters; this module does the same
//! (and runs Qwen2's list, which differs from Llama-3's only in single digits, through the
//! Llama-3 splitter). Every other regex is run by the `regex` crate (`fancy-regex` for the
//! GPT-4o regex's lookarounds, which llama.cpp's `std::regex` supports) with llama.cpp's trick:
//! when it uses `\p{..}` classes, non-ASCII code points are first collapsed to one placeholder
//! per category and the classes rewritten to match the placeholder plus their ASCII members,
//! exactly as llama.cpp collapses them for `std::regex`. Offsets are counted in code points.

use crate::unicode::{self, CptFlags};
use crate::{Result, VocabError};
use regex::Regex;

/// The pre-tokenizer family of a BPE vocabulary: which regex list splits the text.
///
/// Several `tokenizer.ggml.pre` names share one family (listed on each variant).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PreType {
    /// No pre-tokenizer type in the file, or `default` (also SPM and WPM vocabularies).
    Default,
    /// Llama 3 (`llama-bpe`, `llama3`, `falcon3`, `pixtral`, `dbrx`, `smaug-bpe`, ...).
    Llama3,
    /// Qwen2 / Qwen2.5 / Qwen3 (`qwen2`, `deepseek-r1-qwen`, `stablelm2`, `megrez`, ...).
    Qwen2,
    /// The GPT-2 regex alone (`gpt-2`, `mpt`, `olmo`, `phi-2`, `jais`, ...).
    Gpt2,
    /// Every digit split off, then GPT-2 (`starcoder`, `refact`, `smollm`, `command-r`, ...).
    Starcoder,
    /// DeepSeek LLM.
    DeepseekLlm,
    /// DeepSeek Coder.
    DeepseekCoder,
    /// Falcon.
    Falcon,
    /// GPT-4o's o200k regex (`gpt-4o`: gpt-oss; `llama4`, `kanana2`, `talkie`).
    Gpt4o,
}

/// Per-name tokenizer flags that llama.cpp sets together with the pre-tokenizer type.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PreFlags {
    pub(crate) pre_type: PreType,
    pub(crate) ignore_merges: bool,
    pub(crate) clean_spaces: bool,
    pub(crate) add_bos: Option<bool>,
    pub(crate) add_sep: bool,
}

impl PreType {
    /// The family of a `tokenizer.ggml.pre` value (for BPE vocabularies), with llama.cpp's
    /// per-name flags; `None` for names this crate does not implement.
    pub(crate) fn from_name(name: &str) -> Option<PreFlags> {
        let f = |pre_type, clean_spaces| PreFlags {
            pre_type,
            ignore_merges: false,
            clean_spaces,
            add_bos: None,
            add_sep: false,
        };
        Some(match name {
            "" | "default" => f(PreType::Default, true),
            "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral"
            | "midm-2.0" | "lfm2" | "jina-v5-nano" => {
                PreFlags { ignore_merges: true, add_bos: Some(true), ..f(PreType::Llama3, true) }
            }
            "dbrx" | "smaug-bpe" => f(PreType::Llama3, true),
            "deepseek-llm" => f(PreType::DeepseekLlm, false),
            "deepseek-coder" => f(PreType::DeepseekCoder, false),
            "falcon" => f(PreType::Falcon, true),
            "mpt" | "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es"
            | "jina-v2-de" | "a.x-4.0" | "mellum" | "modern-bert" | "olmo" | "jais" | "exaone4" => {
                f(PreType::Gpt2, true)
            }
            "trillion" | "granite-docling" => f(PreType::Gpt2, false),
            "jina-v1-en" | "jina-v2-code" | "roberta-bpe" => {
                PreFlags { add_sep: true, ..f(PreType::Gpt2, true) }
            }
            "starcoder" | "refact" | "codeshell" | "exaone" | "minerva-7b" | "mellum2" => {
                f(PreType::Starcoder, true)
            }
            "smollm" | "command-r" => f(PreType::Starcoder, false),
            "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "hunyuan" | "solar-open"
            | "grok-2" => f(PreType::Qwen2, false),
            "megrez" | "stablelm2" => f(PreType::Qwen2, true),
            "gpt-4o" | "llama4" | "kanana2" | "talkie" => f(PreType::Gpt4o, false),
            _ => return None,
        })
    }
}

/// One step of a pre-tokenizer.
#[derive(Debug)]
enum Splitter {
    /// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)`.
    Gpt2,
    /// Llama 3's regex, with `\p{N}{1,max_digits}`.
    Llama3 { max_digits: usize },
    /// Any other regex; `collapsed` when it used `\p{..}` classes.
    Regex { re: Regex, collapsed: bool },
    /// A regex with lookarounds, run by `fancy-regex` (backtracking, leftmost-first like
    /// `std::regex`'s ECMAScript grammar); `collapsed` as above.
    Fancy { re: fancy_regex::Regex, collapsed: bool },
}

/// A compiled pre-tokenizer.
#[derive(Debug)]
pub(crate) struct PreTokenizer {
    splitters: Vec<Splitter>,
}

const PUNCT_SYMBOLS: &str = r"[\p{P}\$\+<=>\^~\|]+";
/// The regex llama.cpp runs for GPT-4o's pre-tokenizer (`LLAMA_VOCAB_PRE_TYPE_GPT4O`): the
/// tokenizer's own with its letter-case classes written as lookaheads on `\p{L}`.
const GPT4O: &str = concat!(
    r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+",
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?",
    r"|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*",
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?",
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
);
const DIGITS_3: &str = "[0-9][0-9][0-9]";
const DEEPSEEK_CJK: &str = "[\u{4E00}-\u{9FA5}\u{0800}-\u{4E00}\u{AC00}-\u{D7FF}]+";

/// DeepSeek LLM's cased-letter class, code point by code point as llama.cpp lists it.
fn deepseek_llm_letters() -> String {
    const RANGES: &[(u32, u32)] = &[
        (0x41, 0x5A),
        (0x61, 0x7A),
        (0xB5, 0xB5),
        (0xC0, 0xD6),
        (0xD8, 0xF6),
        (0xF8, 0x1BA),
        (0x1BC, 0x1BF),
        (0x1C4, 0x293),
        (0x295, 0x2AF),
        (0x370, 0x373),
        (0x376, 0x377),
        (0x37B, 0x37D),
        (0x37F, 0x37F),
        (0x386, 0x386),
        (0x388, 0x38A),
        (0x38C, 0x38C),
        (0x38E, 0x3A1),
        (0x3A3, 0x3F5),
        (0x3F7, 0x481),
        (0x48A, 0x52F),
        (0x531, 0x556),
        (0x10A0, 0x10C5),
        (0x13A0, 0x13F5),
        (0x13F8, 0x13FD),
        (0x1C90, 0x1CBA),
        (0x1CBD, 0x1CBF),
        (0x1D00, 0x1D2B),
        (0x1D6B, 0x1D77),
        (0x1D79, 0x1D9A),
        (0x1E00, 0x1F15),
        (0x1F18, 0x1F1D),
        (0x1F20, 0x1F45),
        (0x1F48, 0x1F4D),
        (0x1F50, 0x1F57),
        (0x1F59, 0x1F59),
        (0x1F5B, 0x1F5B),
        (0x1F5D, 0x1F5D),
        (0x1F5F, 0x1F7D),
        (0x1F80, 0x1FB4),
        (0x1FB6, 0x1FBC),
        (0x1FBE, 0x1FBE),
        (0x1FC2, 0x1FC4),
        (0x1FC6, 0x1FCC),
        (0x1FD0, 0x1FD3),
        (0x1FD6, 0x1FDB),
        (0x1FE0, 0x1FEC),
        (0x1FF2, 0x1FF4),
        (0x1FF6, 0x1FFC),
        (0x2102, 0x2102),
        (0x2107, 0x2107),
        (0x210A, 0x2113),
        (0x2115, 0x2115),
        (0x2119, 0x211D),
        (0x2124, 0x2124),
        (0x2126, 0x2126),
        (0x2128, 0x2128),
        (0x212A, 0x212D),
        (0x212F, 0x2134),
        (0x2139, 0x2139),
        (0x213C, 0x213F),
        (0x2145, 0x2149),
        (0x214E, 0x214E),
        (0x2183, 0x2184),
        (0x2C00, 0x2C7B),
        (0x2C7E, 0x2CE4),
        (0x2CEB, 0x2CEE),
        (0x2CF2, 0x2CF3),
        (0xA640, 0xA66D),
        (0xA680, 0xA69B),
        (0xA722, 0xA76F),
        (0xA771, 0xA787),
        (0xA78B, 0xA78E),
        (0xAB70, 0xABBF),
        (0xFB00, 0xFB06),
        (0xFB13, 0xFB17),
        (0xFF21, 0xFF3A),
        (0xFF41, 0xFF5A),
        (0x10400, 0x1044F),
        (0x104B0, 0x104D3),
        (0x104D8, 0x104FB),
        (0x10C80, 0x10CB2),
        (0x10CC0, 0x10CF2),
        (0x118A0, 0x118DF),
        (0x1E900, 0x1E943),
    ];
    let mut s = String::from(r"\s?[");
    for &(a, b) in RANGES {
        s.push_str(&format!(r"\x{{{a:X}}}-\x{{{b:X}}}"));
    }
    s.push_str("]+");
    s
}

impl PreTokenizer {
    /// Compiles the regex list of `pre_type` (llama.cpp's `llm_tokenizer_bpe` table).
    pub(crate) fn new(pre_type: PreType) -> Result<PreTokenizer> {
        let re = |p: &str| compile(p);
        let splitters = match pre_type {
            PreType::Llama3 => vec![Splitter::Llama3 { max_digits: 3 }],
            PreType::Qwen2 => vec![Splitter::Llama3 { max_digits: 1 }],
            PreType::Gpt2 => vec![Splitter::Gpt2],
            PreType::Starcoder => vec![re(r"\p{N}")?, Splitter::Gpt2],
            PreType::Falcon => vec![re(PUNCT_SYMBOLS)?, Splitter::Gpt2, re(DIGITS_3)?],
            PreType::Gpt4o => vec![re(GPT4O)?],
            PreType::Default => {
                vec![re(PUNCT_SYMBOLS)?, Splitter::Gpt2, re(r"\p{N}+")?, re(DIGITS_3)?]
            }
            PreType::DeepseekLlm => vec![
                re(r"[\r\n]")?,
                re(&deepseek_llm_letters())?,
                re("\\s?[!-/:-~\u{FF01}-\u{FF0F}\u{FF1A}-\u{FF5E}\u{2018}-\u{201F}\u{3000}-\u{3002}]+")?,
                re(r"\s+$")?,
                re(DEEPSEEK_CJK)?,
                re(r"\p{N}+")?,
            ],
            PreType::DeepseekCoder => vec![
                re(r"[\r\n]")?,
                re(r"\s?\p{L}+")?,
                re(r"\s?\p{P}+")?,
                re(DEEPSEEK_CJK)?,
                re(r"\p{N}")?,
            ],
        };
        Ok(PreTokenizer { splitters })
    }

    /// The lengths of the words of `cpts`, every splitter applied in turn.
    fn chunks(&self, cpts: &[char]) -> Vec<usize> {
        let mut chunks = vec![cpts.len()];
        for splitter in &self.splitters {
            chunks = match splitter {
                Splitter::Gpt2 => split_gpt2(cpts, &chunks),
                Splitter::Llama3 { max_digits } => split_llama3(cpts, &chunks, *max_digits),
                Splitter::Regex { re, collapsed } => split_regex(cpts, &chunks, *collapsed, |t| {
                    re.find_iter(t).map(|m| (m.start(), m.end())).collect()
                }),
                Splitter::Fancy { re, collapsed } => {
                    // Without a backtracking limit (`compile`) no match fails.
                    split_regex(cpts, &chunks, *collapsed, |t| {
                        re.find_iter(t)
                            .map_while(|m| m.ok())
                            .map(|m| (m.start(), m.end()))
                            .collect()
                    })
                }
            };
        }
        chunks
    }

    /// Splits `text` into words, each encoded in the GPT-2 byte alphabet.
    pub(crate) fn split(&self, text: &str) -> Vec<String> {
        let cpts: Vec<char> = text.chars().collect();
        let chunks = self.chunks(&cpts);
        let mut words = Vec::with_capacity(chunks.len());
        let mut start = 0;
        for len in chunks {
            let word: String = cpts[start..start + len].iter().collect();
            words.push(unicode::byte_encode(&word));
            start += len;
        }
        words
    }
}

/// Placeholders that collapsed non-ASCII code points become, one per category.
const COLLAPSED_NUMBER: char = '\u{F0D1}';
const COLLAPSED_LETTER: char = '\u{F0D2}';
const COLLAPSED_PUNCT: char = '\u{F0D3}';
const COLLAPSED_ACCENT: char = '\u{F0D4}';
const COLLAPSED_SYMBOL: char = '\u{F0D5}';
const COLLAPSED_OTHER: char = '\u{F0D0}';

/// The class body that replaces `\p{name}` in a collapsed regex.
fn collapsed_class(name: &str) -> Option<String> {
    let (placeholder, ascii) = match name {
        "N" => (COLLAPSED_NUMBER, "0-9"),
        "L" | "Lu" | "Ll" | "Lt" | "Lm" | "Lo" => (COLLAPSED_LETTER, "A-Za-z"),
        "P" => (COLLAPSED_PUNCT, r"!-#%-*,-/:-;?-@\[-\]_\{\}"),
        "M" => (COLLAPSED_ACCENT, ""),
        "S" => (COLLAPSED_SYMBOL, r"\$\+<->\^`\|"),
        _ => return None,
    };
    Some(format!("{placeholder}{ascii}"))
}

/// Rewrites the `\p{..}` classes of `pattern` for collapsed text; `None` when it has none.
fn collapse_pattern(pattern: &str) -> Option<String> {
    let mut out = String::with_capacity(pattern.len() * 2);
    let mut inside = false;
    let mut used = false;
    let mut prev = '\0';
    let mut rest = pattern;
    while let Some(c) = rest.chars().next() {
        if c == '[' && prev != '\\' {
            inside = true;
        } else if c == ']' && inside && prev != '\\' {
            inside = false;
        } else if let Some(tail) = rest.strip_prefix(r"\p{") {
            if let Some(close) = tail.find('}') {
                if let Some(body) = collapsed_class(&tail[..close]) {
                    if !inside {
                        out.push('[');
                    }
                    out.push_str(&body);
                    if !inside {
                        out.push(']');
                    }
                    used = true;
                    rest = &tail[close + 1..];
                    prev = '}';
                    continue;
                }
            }
        }
        out.push(c);
        prev = c;
        rest = &rest[c.len_utf8()..];
    }
    used.then_some(out)
}

fn compile(pattern: &str) -> Result<Splitter> {
    let (source, collapsed) = match collapse_pattern(pattern) {
        Some(p) => (p, true),
        None => (pattern.to_string(), false),
    };
    let err = |e: String| VocabError::Regex { pattern: pattern.to_string(), message: e };
    if pattern.contains("(?=") || pattern.contains("(?!") {
        // No backtracking limit, as std::regex has none: a limit would end the matches early
        // on a long word. (The lookaheads look one character ahead; a match backtracks at
        // most over its own length.)
        let re = fancy_regex::RegexBuilder::new(&source)
            .backtrack_limit(usize::MAX)
            .build()
            .map_err(|e| err(e.to_string()))?;
        return Ok(Splitter::Fancy { re, collapsed });
    }
    let re = Regex::new(&source).map_err(|e| err(e.to_string()))?;
    Ok(Splitter::Regex { re, collapsed })
}

/// The character a code point stands as in the text a regex runs on.
fn regex_char(c: char, collapsed: bool) -> char {
    if c.is_ascii() {
        return c;
    }
    let f = unicode::flags(c);
    if f.is_whitespace() {
        return '\u{0B}';
    }
    if !collapsed {
        return c;
    }
    match f.category() {
        CptFlags::NUMBER => COLLAPSED_NUMBER,
        CptFlags::LETTER => COLLAPSED_LETTER,
        CptFlags::PUNCTUATION => COLLAPSED_PUNCT,
        CptFlags::ACCENT_MARK => COLLAPSED_ACCENT,
        CptFlags::SYMBOL => COLLAPSED_SYMBOL,
        _ => COLLAPSED_OTHER,
    }
}

/// Refines chunks into regex matches and the gaps between them (`unicode_regex_split_stl`).
/// `find(text)` gives the byte ranges of the regex's matches in order.
fn split_regex(
    cpts: &[char],
    chunks: &[usize],
    collapsed: bool,
    find: impl Fn(&str) -> Vec<(usize, usize)>,
) -> Vec<usize> {
    let mut out = Vec::with_capacity(chunks.len());
    let mut start = 0;
    for &len in chunks {
        let text: String =
            cpts[start..start + len].iter().map(|&c| regex_char(c, collapsed)).collect();
        // Walk matches in order, converting byte offsets to code-point offsets as we go.
        let (mut byte_at, mut cpt_at) = (0usize, 0usize);
        let mut done = 0usize; // code points already emitted
        for (m_begin, m_end) in find(&text) {
            if m_begin == m_end {
                continue;
            }
            cpt_at += text[byte_at..m_begin].chars().count();
            let m_start = cpt_at;
            cpt_at += text[m_begin..m_end].chars().count();
            byte_at = m_end;
            if m_start > done {
                out.push(m_start - done);
            }
            out.push(cpt_at - m_start);
            done = cpt_at;
        }
        if done < len {
            out.push(len - done);
        }
        start += len;
    }
    out
}

/// One chunk being split by a hand-written splitter: code-point access that reads past the
/// chunk's ends as "nothing" (llama.cpp's `OUT_OF_RANGE` and empty flags).
struct Chunk<'a> {
    cpts: &'a [char],
    ini: usize,
    end: usize,
    prev_end: usize,
    out: &'a mut Vec<usize>,
}

impl Chunk<'_> {
    fn cpt(&self, pos: usize) -> Option<char> {
        (self.ini <= pos && pos < self.end).then(|| self.cpts[pos])
    }
    fn flags(&self, pos: usize) -> CptFlags {
        self.cpt(pos).map_or(CptFlags::NONE, unicode::flags)
    }
    fn is_cr_lf(&self, pos: usize) -> bool {
        matches!(self.cpt(pos), Some('\r' | '\n'))
    }
    /// Ends the current word at `end`.
    fn emit(&mut self, end: usize) {
        if end > self.prev_end {
            self.out.push(end - self.prev_end);
        }
        self.prev_end = end;
    }
    /// Length of the contraction (`'s`, `'t`, `'re`, `'ve`, `'m`, `'ll`, `'d`) at `pos`, if any.
    fn contraction(&self, pos: usize, fold_case: bool) -> Option<usize> {
        if self.cpt(pos) != Some('\'') || pos + 1 >= self.end {
            return None;
        }
        let fold = |c: Option<char>| c.map(|c| if fold_case { unicode::to_lower(c) } else { c });
        let next = fold(self.cpt(pos + 1));
        if matches!(next, Some('s' | 't' | 'm' | 'd')) {
            return Some(2);
        }
        if pos + 2 < self.end {
            let pair = (next, fold(self.cpt(pos + 2)));
            if matches!(
                pair,
                (Some('r'), Some('e')) | (Some('v'), Some('e')) | (Some('l'), Some('l'))
            ) {
                return Some(3);
            }
        }
        None
    }
    /// Number of whitespace code points starting at `pos`.
    fn whitespace_run(&self, pos: usize) -> usize {
        let mut n = 0;
        while self.flags(pos + n).is_whitespace() {
            n += 1;
        }
        n
    }
}

fn not_word(f: CptFlags) -> bool {
    !(f.is_whitespace() || f.is_letter() || f.is_number()) && f.any()
}

/// Runs `body` over each chunk; `body` splits one chunk and returns when it is consumed.
fn each_chunk(cpts: &[char], chunks: &[usize], mut body: impl FnMut(&mut Chunk<'_>)) -> Vec<usize> {
    let mut out = Vec::with_capacity(chunks.len() * 4);
    let mut start = 0;
    for &len in chunks {
        let mut chunk =
            Chunk { cpts, ini: start, end: start + len, prev_end: start, out: &mut out };
        body(&mut chunk);
        start += len;
    }
    out
}

/// The GPT-2 regex, hand-written (`unicode_regex_split_custom_gpt2`).
fn split_gpt2(cpts: &[char], chunks: &[usize]) -> Vec<usize> {
    each_chunk(cpts, chunks, |ch| {
        let mut pos = ch.ini;
        while pos < ch.end {
            let c = ch.cpt(pos);
            if let Some(n) = ch.contraction(pos, false) {
                pos += n;
                ch.emit(pos);
                continue;
            }
            let space = c == Some(' ');
            let f2 = if space { ch.flags(pos + 1) } else { ch.flags(pos) };
            // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`
            let class: Option<fn(CptFlags) -> bool> = if f2.is_letter() {
                Some(CptFlags::is_letter)
            } else if f2.is_number() {
                Some(CptFlags::is_number)
            } else if not_word(f2) {
                Some(not_word)
            } else {
                None
            };
            if let Some(class) = class {
                pos += usize::from(space);
                while class(ch.flags(pos)) {
                    pos += 1;
                }
                ch.emit(pos);
                continue;
            }
            let n = ch.whitespace_run(pos);
            if n > 1 && ch.cpt(pos + n).is_some() {
                // `\s+(?!\S)`: leave the last space to the next word
                pos += n - 1;
            } else if n > 0 {
                pos += n;
            } else {
                pos += 1;
            }
            ch.emit(pos);
        }
    })
}

/// The Llama-3 regex, hand-written (`unicode_regex_split_custom_llama3`); `max_digits` 1 gives
/// Qwen2's regex.
fn split_llama3(cpts: &[char], chunks: &[usize], max_digits: usize) -> Vec<usize> {
    each_chunk(cpts, chunks, |ch| {
        let mut pos = ch.ini;
        while pos < ch.end {
            let c = ch.cpt(pos);
            let f = ch.flags(pos);
            if let Some(n) = ch.contraction(pos, true) {
                pos += n;
                ch.emit(pos);
                continue;
            }
            // `[^\r\n\p{L}\p{N}]?\p{L}+`
            if !(ch.is_cr_lf(pos) || f.is_number())
                && (f.is_letter() || ch.flags(pos + 1).is_letter())
            {
                pos += 1;
                while ch.flags(pos).is_letter() {
                    pos += 1;
                }
                ch.emit(pos);
                continue;
            }
            // `\p{N}{1,max_digits}`
            if f.is_number() {
                let mut ini = pos;
                while ch.flags(pos).is_number() {
                    pos += 1;
                    if pos - ini >= max_digits {
                        ch.emit(pos);
                        ini = pos;
                    }
                }
                ch.emit(pos);
                continue;
            }
            // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
            let space = c == Some(' ');
            let mut f2 = if space { ch.flags(pos + 1) } else { f };
            if !(f2.is_whitespace() || f2.is_letter() || f2.is_number()) && f.any() {
                pos += usize::from(space);
                while not_word(f2) {
                    pos += 1;
                    f2 = ch.flags(pos);
                }
                while ch.is_cr_lf(pos) {
                    pos += 1;
                }
                ch.emit(pos);
                continue;
            }
            let n = ch.whitespace_run(pos);
            let last_cr_lf = (pos..pos + n).rev().find(|&p| ch.is_cr_lf(p));
            if let Some(p) = last_cr_lf {
                // `\s*[\r\n]+`
                pos = p + 1;
            } else if n > 1 && ch.cpt(pos + n).is_some() {
                // `\s+(?!\S)`
                pos += n - 1;
            } else if n > 0 {
                pos += n;
            } else {
                pos += 1;
            }
            ch.emit(pos);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(pre: PreType, text: &str) -> Vec<String> {
        let p = PreTokenizer::new(pre).unwrap();
        let cpts: Vec<char> = text.chars().collect();
        let mut start = 0;
        p.chunks(&cpts)
            .into_iter()
            .map(|n| {
                start += n;
                cpts[start - n..start].iter().collect()
            })
            .collect()
    }

    #[test]
    fn every_pre_type_compiles() {
        for t in [
            PreType::Default,
            PreType::Llama3,
            PreType::Qwen2,
            PreType::Gpt2,
            PreType::Starcoder,
            PreType::DeepseekLlm,
            PreType::DeepseekCoder,
            PreType::Falcon,
            PreType::Gpt4o,
        ] {
            PreTokenizer::new(t).unwrap();
        }
    }

    #[test]
    fn gpt2_words() {
        assert_eq!(
            words(PreType::Gpt2, "Hello world's  end 123!"),
            ["Hello", " world", "'s", " ", " end", " 123", "!"]
        );
    }

    #[test]
    fn llama3_words() {
        assert_eq!(
            words(PreType::Llama3, "I'M 12345 ok\n\n  x"),
            ["I", "'M", " ", "123", "45", " ok", "\n\n", " ", " x"]
        );
        assert_eq!(words(PreType::Qwen2, "a 123"), ["a", " ", "1", "2", "3"]);
    }

    #[test]
    fn gpt4o_words() {
        // Letter case splits words; digits go in threes; `/` stays with the punctuation.
        assert_eq!(
            words(PreType::Gpt4o, "helloWorld HTTPServer 12345 a/b\n"),
            ["hello", "World", " HTTPServer", " ", "123", "45", " a", "/b", "\n"]
        );
        // A long word is one match, however long: no backtracking limit cuts it.
        let long = "x".repeat(50_000);
        assert_eq!(words(PreType::Gpt4o, &format!("{long} y")), [long.clone(), " y".into()]);
    }

    #[test]
    fn collapsed_regex() {
        assert_eq!(words(PreType::Starcoder, "x٣4"), ["x", "٣", "4"]);
        assert_eq!(collapse_pattern(r"[^\s\p{L}]").as_deref(), Some("[^\\s\u{F0D2}A-Za-z]"));
        assert_eq!(collapse_pattern(r"[0-9]"), None);
    }
}
