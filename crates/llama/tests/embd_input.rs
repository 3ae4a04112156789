//! Batches of embeddings instead of tokens (llama.cpp's `batch.embd`, how an image enters a
//! multimodal model): the token embeddings of a prompt, fed back as an embeddings batch, give
//! the token batch's logits bit for bit, also after text in the cache and in several
//! micro-batches; bad embeddings are named errors; without causal attention a token sees the
//! cells after it (the logits change), and switching it back restores the causal ones.

use tessera_llama::{Batch, ContextParams, LlamaContext, LoadParams, Model};

fn params() -> ContextParams {
    ContextParams { n_ctx: 256, n_threads: 2, n_ubatch: 8, ..Default::default() }
}

#[test]
fn embeddings_batches_give_the_token_batches_logits() {
    let path = tessera_models::ensure(&tessera_models::SMOLLM2).expect("fetching the model");
    let model = Model::load_with(&path, &LoadParams::new(tessera_backend_cpu::CpuDevice::shared()))
        .unwrap();
    let n_embd = model.hparams.n_embd;
    let text =
        model.vocab.tokenize("The quick brown fox jumps over the lazy dog, twice.", true, true);
    let (head, tail) = text.split_at(5);
    // The reference: all tokens, the tail's embeddings observed.
    let mut a = LlamaContext::new(&model, params()).unwrap();
    a.decode(&Batch::from_tokens(head, 0, 0)).unwrap();
    a.observe(vec!["inp_embd".into()]);
    let mut batch = Batch::new();
    for (i, &t) in tail.iter().enumerate() {
        batch.add(t, (head.len() + i) as i32, 0, true);
    }
    a.decode(&batch).unwrap();
    // n_ubatch 8: the observed values are the last micro-batch's; take the whole tail's by
    // decoding it again in one micro-batch.
    let mut a1 = LlamaContext::new(&model, ContextParams { n_ubatch: 64, ..params() }).unwrap();
    a1.decode(&Batch::from_tokens(head, 0, 0)).unwrap();
    a1.observe(vec!["inp_embd".into()]);
    a1.decode(&batch).unwrap();
    let embd = a1.observed()["inp_embd"].clone();
    assert_eq!(embd.len(), tail.len() * n_embd);
    // The same through embeddings, in micro-batches of 8.
    let mut b = LlamaContext::new(&model, params()).unwrap();
    b.decode(&Batch::from_tokens(head, 0, 0)).unwrap();
    let mut eb = Batch::from_embeddings(&embd, n_embd, head.len() as i32, 0);
    eb.logits.iter_mut().for_each(|l| *l = true);
    b.decode(&eb).unwrap();
    for i in 0..tail.len() {
        assert_eq!(a.logits_ith(i).unwrap(), b.logits_ith(i).unwrap(), "token {i} of the tail");
    }
    // Bad batches.
    let short = Batch::from_embeddings(&embd[..n_embd * 2], n_embd, 0, 0);
    let mut bad = short.clone();
    bad.embd.pop();
    let e = b.decode(&bad).unwrap_err().to_string();
    assert!(e.contains("embedding values"), "{e}");
    let mut nan = short.clone();
    nan.embd[n_embd + 3] = f32::NAN;
    let e = b.decode(&nan).unwrap_err().to_string();
    assert!(e.contains("not finite") && e.contains("token 1"), "{e}");
    // Non-causal: the first token of a batch sees the ones after it.
    let mut c = LlamaContext::new(&model, ContextParams { n_ubatch: 64, ..params() }).unwrap();
    c.set_causal_attn(false);
    c.decode(&batch_all(&text)).unwrap();
    let non_causal = c.logits_ith(0).unwrap().to_vec();
    let mut d = LlamaContext::new(&model, ContextParams { n_ubatch: 64, ..params() }).unwrap();
    d.decode(&batch_all(&text)).unwrap();
    assert_ne!(non_causal, d.logits_ith(0).unwrap(), "the first token saw nothing more");
    c.set_causal_attn(true);
    c.kv_cache_mut().clear();
    c.decode(&batch_all(&text)).unwrap();
    assert_eq!(c.logits_ith(0).unwrap(), d.logits_ith(0).unwrap());
}

fn batch_all(tokens: &[u32]) -> Batch {
    let mut b = Batch::new();
    for (i, &t) in tokens.iter().enumerate() {
        b.add(t, i as i32, 0, true);
    }
    b
}
