//! llama.cpp's tokenizer test suite (`tests/test-tokenizer-0.cpp`) on the vocabulary-only GGUF
//! files in `testdata/vocab` (stored gzipped, unpacked by `tessera_models::fixtures::vocab`):
//! every test string must give exactly llama.cpp's ids (add_special = false,
//! parse_special = false), and detokenizing them must give the string back wherever the
//! tokenizer is lossless.

use std::path::PathBuf;
use tessera_vocab::{Vocab, VocabType};

/// Strings this crate is known to tokenize differently from llama.cpp: (fixture, test index).
/// Kept explicit and printed, so a gap is visible instead of hidden. Empty when all pass.
const KNOWN_FAILURES: &[(&str, usize)] = &[];

fn vocab_dir() -> PathBuf {
    let dir = tessera_models::fixtures::vocab_dir();
    assert!(
        dir.is_dir(),
        "tokenizer fixtures not found at {}: the repository ships them in testdata/vocab",
        dir.display()
    );
    dir
}

/// The test strings and expected ids of one fixture, split as llama.cpp's test does.
fn read_cases(dir: &std::path::Path, name: &str) -> Vec<(String, Vec<u32>)> {
    read_cases_at(&dir.join(format!("{name}.inp")), &dir.join(format!("{name}.out")), name)
}

/// The test strings of `inp` and the expected ids of `out` (`name` for messages).
fn read_cases_at(
    inp: &std::path::Path,
    out: &std::path::Path,
    name: &str,
) -> Vec<(String, Vec<u32>)> {
    let inp = std::fs::read_to_string(inp).expect("read .inp");
    let out = std::fs::read_to_string(out).expect("read .out");
    const SEP: &str = "\n__ggml_vocab_test__\n";
    let mut inputs = Vec::new();
    let mut rest = inp.as_str();
    while !rest.is_empty() {
        match rest.find(SEP) {
            Some(i) => {
                inputs.push(rest[..i].to_string());
                rest = &rest[i + SEP.len()..];
            }
            None => {
                inputs.push(rest.to_string());
                break;
            }
        }
    }
    let outputs: Vec<Vec<u32>> = out
        .lines()
        .map(|l| l.split_whitespace().map(|t| t.parse().expect("token id")).collect())
        .collect();
    assert_eq!(
        inputs.len(),
        outputs.len(),
        "{name}: .inp and .out have different numbers of tests"
    );
    inputs.into_iter().zip(outputs).collect()
}

/// What detokenizing `ids` must give for `input`: the input itself, through llama.cpp's
/// `clean_spaces` rules where the vocabulary applies them.
fn expected_text(vocab: &Vocab, input: &str) -> Option<String> {
    match vocab.vocab_type() {
        // WordPiece lowercases, strips accents and drops spaces: not invertible.
        VocabType::Wpm => None,
        _ => Some(input.to_string()),
    }
}

fn run_fixture(name: &str) -> (usize, usize, Vec<String>) {
    let dir = vocab_dir();
    let gguf = tessera_models::fixtures::vocab(name).unwrap_or_else(|e| panic!("{name}: {e}"));
    let vocab = Vocab::from_gguf_path(gguf).unwrap_or_else(|e| panic!("{name}: {e}"));
    let cases = read_cases(&dir, name);
    let mut failures = Vec::new();
    let mut passed = 0;
    for (i, (input, expected)) in cases.iter().enumerate() {
        let got = vocab.tokenize(input, false, false);
        let known = KNOWN_FAILURES.contains(&(name, i));
        if &got != expected {
            if known {
                println!("{name} #{i}: known failure {input:?}");
            } else {
                failures.push(format!(
                    "{name} #{i} {input:?}:\n  expected {expected:?}\n  got      {got:?}"
                ));
            }
            continue;
        }
        if known {
            failures.push(format!("{name} #{i} {input:?} is listed as a known failure but passes"));
        }
        if let Some(want) = expected_text(&vocab, input) {
            let text = vocab.detokenize(expected, false, false);
            let want = if clean_spaces_applies(&vocab) { clean(&want) } else { want };
            if text != want {
                failures.push(format!("{name} #{i} {input:?}: detokenized to {text:?}"));
                continue;
            }
        }
        passed += 1;
    }
    (passed, cases.len(), failures)
}

/// Whether the vocabulary applies llama.cpp's `clean_spaces` when detokenizing.
fn clean_spaces_applies(vocab: &Vocab) -> bool {
    // Detokenizing " ," tells: with clean_spaces it loses the space.
    let ids = vocab.tokenize(" ,", false, false);
    vocab.detokenize(&ids, false, false) == ","
}

/// llama.cpp's clean_spaces rules applied to an input string (for the round-trip check).
fn clean(s: &str) -> String {
    let mut t: Vec<u8> = Vec::new();
    let b = s.as_bytes();
    for (i, &x) in b.iter().enumerate() {
        if i > 0 && b[i - 1] == b' ' && matches!(x, b'?' | b'!' | b'.' | b',') {
            t.pop();
        }
        t.push(x);
    }
    let mut src = std::mem::take(&mut t);
    let mut i = 0;
    while i < src.len() {
        let x = src[i];
        if i > 0 && x == b'\'' && i + 1 < src.len() && src[i - 1] == b' ' && src[i + 1] == b' ' {
            t.pop();
            i += 1;
            src[i] = 0;
        }
        t.push(x);
        i += 1;
    }
    let src = std::mem::take(&mut t);
    for (i, &x) in src.iter().enumerate() {
        if i > 0 && src[i - 1] == b' ' && x == b'\'' && i + 1 < src.len() {
            let (x1, x2) = (src[i + 1], src.get(i + 2).copied());
            if matches!(x1, b's' | b'm')
                || matches!((x1, x2), (b'r', Some(b'e')) | (b'v', Some(b'e')))
            {
                t.pop();
            }
        }
        t.push(x);
    }
    String::from_utf8(t).expect("utf-8")
}

/// Pre-tokenizers without a vocabulary fixture of their own (`gpt-4o`, gpt-oss's), checked on
/// another byte-level BPE vocabulary with `tokenizer.ggml.pre` replaced: the ids depend on how
/// the pre-tokenizer splits the words. The expected ids are llama.cpp b11312's on the same
/// replacement (`tools/make_pre_refs.py`), in `testdata/vocab/NAME.as-PRE.out`.
#[test]
fn pre_tokenizers_on_another_vocabulary() {
    let dir = vocab_dir();
    let mut failures = Vec::new();
    // GPT-2's vocabulary tells gpt-4o's splits from gpt-2's on 10 of the 46 strings, Llama 3's
    // (whose pre-tokenizer differs from gpt-4o's in letter case and `/` only) on 1.
    for (name, pre) in
        [("ggml-vocab-gpt-2.gguf", "gpt-4o"), ("ggml-vocab-llama-bpe.gguf", "gpt-4o")]
    {
        let path = tessera_models::fixtures::vocab(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        let gguf = tessera_gguf::GgufFile::open(path).expect("open the vocabulary");
        let mut meta = tessera_gguf::Metadata::default();
        for (k, v) in gguf.metadata().iter() {
            meta.push(k, if k == "tokenizer.ggml.pre" { pre.into() } else { v.clone() });
        }
        let vocab = Vocab::from_metadata(&meta).unwrap_or_else(|e| panic!("{name} as {pre}: {e}"));
        let out = dir.join(format!("{name}.as-{pre}.out"));
        let cases = read_cases_at(&dir.join(format!("{name}.inp")), &out, name);
        for (i, (input, expected)) in cases.iter().enumerate() {
            let got = vocab.tokenize(input, false, false);
            if &got != expected {
                failures.push(format!(
                    "{name} as {pre} #{i} {input:?}:\n  expected {expected:?}\n  got      {got:?}"
                ));
            }
        }
        println!("{name} as {pre}: {}/{} checked", cases.len() - failures.len(), cases.len());
    }
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn llama_cpp_tokenizer_fixtures() {
    let dir = vocab_dir();
    // Every `NAME.gguf.gz` with its `NAME.gguf.inp` (sorted).
    let names: Vec<String> = tessera_models::fixtures::vocab_names()
        .expect("list fixtures")
        .into_iter()
        .filter(|n| dir.join(format!("{n}.inp")).exists())
        .collect();
    assert!(!names.is_empty(), "no fixtures in {}", dir.display());
    // And no test strings without their vocabulary.
    let n_inp = std::fs::read_dir(&dir)
        .expect("list fixtures")
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".gguf.inp"))
        .count();
    assert_eq!(names.len(), n_inp, "a NAME.gguf.inp without its NAME.gguf.gz: {names:?}");
    let mut all_failures = Vec::new();
    for name in &names {
        let (passed, total, failures) = run_fixture(name);
        println!("{name}: {passed}/{total} passed");
        all_failures.extend(failures);
    }
    if !KNOWN_FAILURES.is_empty() {
        println!("known failures: {KNOWN_FAILURES:?}");
    }
    assert!(
        all_failures.is_empty(),
        "{} failures:\n{}",
        all_failures.len(),
        all_failures.join("\n")
    );
}
