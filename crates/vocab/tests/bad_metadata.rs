//! Bad or hostile metadata gives a typed error naming the key or token, never a panic; and a
//! small hand-built vocabulary of each type tokenizes as expected.

use tessera_gguf::{Array, Metadata, Value};
use tessera_vocab::{Vocab, VocabError, VocabType};

fn strings(items: &[&str]) -> Value {
    Value::Array(Array::String(items.iter().map(|s| s.as_bytes().to_vec()).collect()))
}

/// A tiny byte-level BPE vocabulary: "a", "b", "ab", "Ġ", "Ġab" with merges "a b", "Ġ ab".
fn bpe_meta() -> Metadata {
    let mut m = Metadata::default();
    m.push("tokenizer.ggml.model", "gpt2".into());
    m.push("tokenizer.ggml.pre", "gpt-2".into());
    m.push("tokenizer.ggml.tokens", strings(&["a", "b", "ab", "Ġ", "Ġab", "<|endoftext|>"]));
    m.push("tokenizer.ggml.token_type", Value::Array(Array::I32(vec![1, 1, 1, 1, 1, 3])));
    m.push("tokenizer.ggml.merges", strings(&["a b", "Ġ ab"]));
    m.push("tokenizer.ggml.eos_token_id", Value::U32(5));
    m.push("tokenizer.ggml.bos_token_id", Value::U32(5));
    m
}

/// A tiny SPM vocabulary with byte fallback.
fn spm_meta() -> Metadata {
    let mut m = Metadata::default();
    let mut tokens = vec!["<unk>".to_string(), "<s>".into(), "</s>".into()];
    tokens.extend((0..=255u8).map(|b| format!("<0x{b:02X}>")));
    tokens.extend(["▁".into(), "h".into(), "i".into(), "▁h".into(), "▁hi".into()]);
    let n = tokens.len();
    let mut types = vec![2, 3, 3];
    types.extend(std::iter::repeat_n(6, 256));
    types.extend(std::iter::repeat_n(1, 5));
    let mut scores = vec![0.0f32; n];
    scores[n - 2] = -2.0;
    scores[n - 1] = -1.0;
    m.push("tokenizer.ggml.model", "llama".into());
    m.push(
        "tokenizer.ggml.tokens",
        Value::Array(Array::String(tokens.into_iter().map(String::into_bytes).collect())),
    );
    m.push("tokenizer.ggml.scores", Value::Array(Array::F32(scores)));
    m.push("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
    m
}

#[test]
fn vocab_is_shareable_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Vocab>();
    let debug = format!("{:?}", Vocab::from_metadata(&bpe_meta()).unwrap());
    assert!(debug.contains("n_tokens: 6"), "{debug}");
}

#[test]
fn tiny_vocabularies_work() {
    let bpe = Vocab::from_metadata(&bpe_meta()).unwrap();
    assert_eq!(bpe.vocab_type(), VocabType::Bpe);
    assert_eq!(bpe.tokenize("ab ab", false, false), [2, 4]);
    assert_eq!(bpe.detokenize(&[2, 4], false, false), "ab ab");
    assert!(bpe.is_eog(5));
    assert_eq!(bpe.tokenize("ab<|endoftext|>", false, true), [2, 5]);

    let spm = Vocab::from_metadata(&spm_meta()).unwrap();
    let hi = spm.tokenize("hi é", true, false);
    // BOS, "▁hi", "▁", then é as two byte tokens
    assert_eq!(hi, [1, 263, 259, 3 + 0xC3, 3 + 0xA9]);
    assert_eq!(spm.detokenize(&hi[1..], false, false), "hi é");
    // llama.cpp quirk kept: removing a leading BOS also keeps the space prefix
    assert_eq!(spm.detokenize(&hi, true, false), " hi é");
    assert_eq!(spm.token_to_piece(3 + 0xC3, false), [0xC3]);
}

fn err(m: &Metadata) -> VocabError {
    match Vocab::from_metadata(m) {
        Ok(_) => panic!("bad metadata accepted"),
        Err(e) => {
            println!("{e}");
            e
        }
    }
}

#[test]
fn missing_tokens_key() {
    let mut m = bpe_meta();
    m.remove("tokenizer.ggml.tokens");
    assert!(matches!(err(&m), VocabError::MissingKey { key: "tokenizer.ggml.tokens" }));
    let mut m = bpe_meta();
    m.remove("tokenizer.ggml.model");
    assert!(matches!(err(&m), VocabError::MissingKey { key: "tokenizer.ggml.model" }));
    let mut m = bpe_meta();
    m.remove("tokenizer.ggml.merges");
    assert!(matches!(err(&m), VocabError::MissingKey { key: "tokenizer.ggml.merges" }));
    let mut m = bpe_meta();
    m.push("tokenizer.ggml.tokens", strings(&[]));
    assert!(matches!(err(&m), VocabError::BadTokenCount { count: 0, .. }));
}

#[test]
fn wrong_types() {
    let mut m = bpe_meta();
    m.push("tokenizer.ggml.tokens", Value::U32(3));
    assert!(matches!(err(&m), VocabError::WrongType { key: "tokenizer.ggml.tokens", .. }));
    let mut m = bpe_meta();
    m.push("tokenizer.ggml.token_type", Value::Array(Array::F32(vec![1.0; 6])));
    assert!(matches!(err(&m), VocabError::WrongType { key: "tokenizer.ggml.token_type", .. }));
    let mut m = bpe_meta();
    m.push("tokenizer.ggml.add_bos_token", Value::U8(1));
    assert!(matches!(err(&m), VocabError::WrongType { key: "tokenizer.ggml.add_bos_token", .. }));
    let mut m = bpe_meta();
    m.push("tokenizer.ggml.model", Value::String(vec![0xFF, 0xFE]));
    assert!(matches!(err(&m), VocabError::NotUtf8 { key: "tokenizer.ggml.model" }));
}

#[test]
fn scores_of_wrong_length() {
    let mut m = spm_meta();
    m.push("tokenizer.ggml.scores", Value::Array(Array::F32(vec![0.0; 10])));
    assert!(matches!(
        err(&m),
        VocabError::LengthMismatch { key: "tokenizer.ggml.scores", len: 10, .. }
    ));
    let mut m = spm_meta();
    m.push("tokenizer.ggml.token_type", Value::Array(Array::I32(vec![1; 3])));
    assert!(matches!(
        err(&m),
        VocabError::LengthMismatch { key: "tokenizer.ggml.token_type", len: 3, .. }
    ));
}

#[test]
fn merges_referencing_unknown_tokens() {
    let mut m = bpe_meta();
    m.push("tokenizer.ggml.merges", strings(&["a b", "x y"]));
    assert!(matches!(err(&m), VocabError::BadMerge { index: 1, .. }));
    let mut m = bpe_meta();
    m.push("tokenizer.ggml.merges", strings(&["ab"]));
    assert!(matches!(err(&m), VocabError::BadMerge { index: 0, .. }));
}

#[test]
fn out_of_range_special_ids() {
    let mut m = bpe_meta();
    m.push("tokenizer.ggml.eos_token_id", Value::U32(6));
    assert!(matches!(
        err(&m),
        VocabError::TokenIdOutOfRange { key: "tokenizer.ggml.eos_token_id", id: 6, n_tokens: 6 }
    ));
    let mut m = bpe_meta();
    m.push("tokenizer.ggml.padding_token_id", Value::I32(-1));
    assert!(matches!(
        err(&m),
        VocabError::TokenIdOutOfRange { key: "tokenizer.ggml.padding_token_id", id: -1, .. }
    ));
}

#[test]
fn other_inconsistencies() {
    let mut m = bpe_meta();
    m.push("tokenizer.ggml.tokens", strings(&["a", "b", "ab", "Ġ", "a", "c"]));
    assert!(matches!(err(&m), VocabError::DuplicateToken { first: 0, second: 4, .. }));
    let mut m = bpe_meta();
    m.push("tokenizer.ggml.model", "t5".into());
    assert!(matches!(err(&m), VocabError::UnsupportedModel { .. }));
    let mut m = bpe_meta();
    m.push("tokenizer.ggml.pre", "no-such-pre".into());
    assert!(matches!(err(&m), VocabError::UnsupportedPre { .. }));
    // WPM adds [SEP] by default, but this vocabulary has no separator token
    let mut m = bpe_meta();
    m.push("tokenizer.ggml.model", "bert".into());
    m.push("tokenizer.ggml.add_bos_token", Value::Bool(false));
    assert!(matches!(
        err(&m),
        VocabError::MissingSpecialToken { flag_key: "tokenizer.ggml.add_sep_token", .. }
    ));
}

#[test]
fn hostile_text_never_panics() {
    let bpe = Vocab::from_metadata(&bpe_meta()).unwrap();
    let spm = Vocab::from_metadata(&spm_meta()).unwrap();
    let texts = [
        "",
        " ",
        "\u{0}",
        "\u{FFFD}\u{10FFFF}",
        "  \n\r\n\t x",
        "<|endoftext|><|endoftext|>",
        "'s'S'LL",
    ];
    for v in [&bpe, &spm] {
        for t in texts {
            for (a, p) in [(false, false), (true, true)] {
                let ids = v.tokenize(t, a, p);
                let _ = v.detokenize(&ids, a, p);
            }
        }
        assert!(v.token_to_piece(u32::MAX, true).is_empty());
        assert_eq!(v.token_text(u32::MAX), None);
        let _ = v.detokenize(&[u32::MAX, 0, 1], true, true);
    }
}
