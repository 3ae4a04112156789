//! Speculative decoding keeps the model's own tokens: with batch-invariant arithmetic
//! (`ContextParams::batch_invariant`, the server's `--deterministic`), a verification batch's
//! logits equal one-token steps', so greedy and seeded sampling give exactly plain decoding's
//! tokens whatever is proposed: n-gram proposals (accepted and rejected), a draft model (the
//! model itself, so every proposal is accepted), and hand-made proposals wrong at each position
//! in turn. On the three real models and synthetic architectures (phi3, gpt2, a qwen3 mixture
//! of experts).

use std::path::Path;
use tessera_llama::sampling::{NoMask, SamplerChain, SamplingParams};
use tessera_llama::speculative::{self, DraftModel, NgramSimple, SpecStats, Speculator};
use tessera_llama::{ContextParams, Generator, LlamaContext, LoadParams, Model};

const N: usize = 48;
const PROMPT: &str = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\n\
                      def add(a, b):\n    return a + b\n\ndef sub(a, b):\n";

fn params() -> ContextParams {
    ContextParams { n_ctx: 512, n_threads: 2, batch_invariant: true, ..Default::default() }
}

fn chain(seeded: bool) -> SamplerChain {
    if !seeded {
        return SamplerChain::greedy();
    }
    let p = SamplingParams { temp: 0.8, top_k: 40, seed: 7, ..Default::default() };
    SamplerChain::from_params(&p)
}

/// `N` tokens of plain decoding.
fn plain(model: &Model, prompt: &[u32], seeded: bool) -> Vec<u32> {
    let mut ctx = LlamaContext::new(model, params()).unwrap();
    let mut sampler = chain(seeded);
    let mut g = Generator::new(&mut ctx, &mut sampler, 0, 0);
    g.prompt(prompt).unwrap();
    let mut out = Vec::new();
    while out.len() < N {
        let t = g.sample();
        out.push(t);
        g.feed(t).unwrap();
    }
    out
}

/// `N` tokens through speculation with `spec`.
fn speculative(
    model: &Model,
    prompt: &[u32],
    seeded: bool,
    spec: &mut Speculator,
) -> (Vec<u32>, SpecStats) {
    let mut ctx = LlamaContext::new(model, params()).unwrap();
    let mut sampler = chain(seeded);
    let mut g = Generator::new(&mut ctx, &mut sampler, 0, 0);
    g.prompt(prompt).unwrap();
    let mut history = prompt.to_vec();
    let mut out = Vec::new();
    let mut stats = SpecStats::default();
    let mut tok = g.sample();
    while out.len() < N {
        out.push(tok);
        let n_max = N - out.len();
        let step =
            speculative::step::<NoMask>(Some(spec), &mut g, &history, tok, n_max, None, &mut stats);
        history.push(tok);
        match step.unwrap().unwrap() {
            None => tok = g.sample(),
            Some(got) => {
                for &t in &got[..got.len() - 1] {
                    out.push(t);
                    history.push(t);
                }
                tok = *got.last().unwrap();
            }
        }
    }
    out.truncate(N);
    (out, stats)
}

fn check(model: &Model, what: &str) {
    let prompt = model.vocab.tokenize(PROMPT, true, true);
    for seeded in [false, true] {
        let want = plain(model, &prompt, seeded);
        let how = if seeded { "seeded" } else { "greedy" };
        let mut ngram = Speculator::Ngram(NgramSimple { size_n: 2, size_m: 8 });
        let (got, s) = speculative(model, &prompt, seeded, &mut ngram);
        assert_eq!(got, want, "{what} {how}, ngram-simple ({s:?})");
        eprintln!("{what} {how} ngram-simple: {s:?}");
        let dctx = LlamaContext::new(model, params()).unwrap();
        let mut draft = Speculator::Draft(Box::new(DraftModel::new(dctx, 5, 0, 0.0)));
        let (got, s) = speculative(model, &prompt, seeded, &mut draft);
        assert_eq!(got, want, "{what} {how}, self-draft ({s:?})");
        assert!(s.n_drafted > 0, "{what} {how}: the draft proposed nothing");
        if !seeded {
            assert_eq!(s.n_accepted, s.n_drafted, "{what}: the model rejected its own tokens");
        }
    }
    // Proposals wrong at position j (the greedy continuation with its j-th token replaced):
    // j proposals kept, then the model's own token.
    let want = plain(model, &prompt, false);
    for j in 0..4 {
        let mut ctx = LlamaContext::new(model, params()).unwrap();
        let mut sampler = chain(false);
        let mut g = Generator::new(&mut ctx, &mut sampler, 0, 0);
        g.prompt(&prompt).unwrap();
        let first = g.sample();
        let mut draft = want[1..6].to_vec();
        draft[j] = (draft[j] + 1) % model.hparams.n_vocab as u32;
        let got = g.speculate(first, &draft).unwrap();
        assert_eq!(got, want[1..j + 2].to_vec(), "{what}: rejection at {j}");
        // Decoding goes on from there as plain decoding did.
        let mut tok = *got.last().unwrap();
        let mut rest = got.clone();
        while rest.len() < 10 {
            g.feed(tok).unwrap();
            tok = g.sample();
            rest.push(tok);
        }
        assert_eq!(rest[..], want[1..11], "{what}: after a rejection at {j}");
    }
}

fn load(path: &Path) -> Model {
    Model::load_with(path, &LoadParams::new(tessera_backend_cpu::CpuDevice::shared())).unwrap()
}

#[test]
fn real_models_keep_their_own_tokens() {
    for id in [tessera_models::SMOLLM2, tessera_models::QWEN25_CODER, tessera_models::GEMMA3] {
        let path = tessera_models::ensure(&id).expect("fetching the model");
        check(&load(&path), id.file);
    }
}

#[test]
fn synthetic_architectures_keep_their_own_tokens() {
    let dir = tempfile::tempdir().unwrap();
    for (stem, spec, vocab) in tessera_llama::synth::all_models() {
        let v = tessera_models::fixtures::vocab(vocab).unwrap();
        let v = tessera_gguf::GgufFile::open(&v).unwrap();
        let path = dir.path().join(format!("{stem}.gguf"));
        tessera_llama::synth::write_random_model(&spec, v.metadata(), &path).unwrap();
        check(&load(&path), stem);
    }
}
