//! Argmax outputs (`LlamaContext::set_argmax_outputs`): the graph ends on ARGMAX and only the
//! token is read back. Greedy generation through them gives the tokens of greedy generation
//! over the logits, step for step, on a synthetic Llama (CPU); a batch's several outputs each
//! get their row's argmax; no logits are kept; an embeddings context refuses it.

use tessera_llama::sampling::SamplerChain;
use tessera_llama::synth::{write_random_model, SynthSpec};
use tessera_llama::{Batch, ContextParams, Generator, LlamaContext, Model};
use tessera_tensor::DType;

fn model(dir: &std::path::Path) -> Model {
    let vocab = tessera_models::fixtures::vocab("ggml-vocab-llama-bpe.gguf").unwrap();
    let v = tessera_gguf::GgufFile::open(&vocab).unwrap();
    let path = dir.join("llama-q4_0.gguf");
    let spec = SynthSpec { seed: 9, ..SynthSpec::small("llama", DType::Q4_0) };
    write_random_model(&spec, v.metadata(), &path).unwrap();
    Model::load(&path, tessera_backend_cpu::CpuDevice::shared()).unwrap()
}

/// The greedy sampler's token for `logits` (the first largest).
fn first(logits: &[f32]) -> u32 {
    SamplerChain::greedy().sample(logits)
}

#[test]
fn greedy_through_argmax_outputs_gives_the_same_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let model = model(dir.path());
    let params = ContextParams { n_ctx: 256, n_threads: 2, ..Default::default() };
    let prompt = model.vocab.tokenize("The quick brown fox jumps over", true, false);
    let generate = |argmax: bool| {
        let mut ctx = LlamaContext::new(&model, params.clone()).unwrap();
        ctx.set_argmax_outputs(argmax).unwrap();
        let mut chain = SamplerChain::greedy();
        let mut g = Generator::new(&mut ctx, &mut chain, 0, 0);
        g.prompt(&prompt).unwrap();
        let mut out = Vec::new();
        for _ in 0..24 {
            let t = g.sample();
            out.push(t);
            g.feed(t).unwrap();
        }
        out
    };
    let plain = generate(false);
    assert_eq!(generate(true), plain);
    assert!(plain.iter().any(|&t| t != plain[0]), "a degenerate sequence: {plain:?}");

    // A batch with three outputs: each row's argmax, and no logits kept.
    let mut a = LlamaContext::new(&model, params.clone()).unwrap();
    let mut b = LlamaContext::new(&model, params.clone()).unwrap();
    b.set_argmax_outputs(true).unwrap();
    let mut batch = Batch::new();
    for (i, &t) in prompt.iter().enumerate() {
        batch.add(t, i as i32, 0, i % 2 == 0);
    }
    a.decode(&batch).unwrap();
    b.decode(&batch).unwrap();
    let mut outputs = 0;
    for i in 0..prompt.len() {
        let want = a.logits_ith(i).map(first);
        assert_eq!(b.argmax_ith(i), want, "row {i}");
        assert!(b.logits_ith(i).is_none(), "logits kept with argmax outputs");
        outputs += usize::from(want.is_some());
    }
    assert!(outputs >= 3, "{outputs} outputs");
    assert_eq!(a.argmax_ith(0), None, "no argmax without argmax outputs");

    let emb = ContextParams { embeddings: true, ..params };
    let mut e = LlamaContext::new(&model, emb).unwrap();
    assert!(e.set_argmax_outputs(true).is_err(), "an embeddings context has no logits");
}
