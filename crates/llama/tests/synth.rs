//! The synthetic qwen3 and gpt2 models (random weights, written by tessera_llama::synth)
//! against llama.cpp's outputs on the same files (fixtures/synth, made by
//! tools/make_synth_refs.sh), with the same three checks as the real models.

mod common;

use sha2::{Digest, Sha256};
use std::path::Path;
use tessera_llama::Model;

fn check_synth(stem: &str, flash_attn: bool) {
    let (_, spec, vocab) =
        tessera_llama::synth::test_models().into_iter().find(|m| m.0 == stem).unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/synth");
    let vocab = tessera_models::fixtures::vocab(vocab).unwrap();
    let v = tessera_gguf::GgufFile::open(&vocab).expect("vocabulary fixture");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("{stem}.gguf"));
    tessera_llama::synth::write_random_model(&spec, v.metadata(), &path).unwrap();
    // The file must be the one the references were made from.
    let sums = std::fs::read_to_string(fixtures.join("SHA256SUMS")).expect("SHA256SUMS");
    let want = sums
        .lines()
        .find(|l| l.ends_with(&format!("{stem}.gguf")))
        .and_then(|l| l.split_whitespace().next())
        .expect("a hash for the model");
    let got = format!("{:x}", Sha256::digest(std::fs::read(&path).unwrap()));
    assert_eq!(got, want, "{stem}: the writer no longer reproduces the file the references used");
    let model = Model::load(&path, tessera_backend_cpu::CpuDevice::shared()).unwrap();
    let spreads = [fixtures.join("reproduction.json")];
    let agreement = fixtures.join("self_agreement.json");
    common::check(&model, stem, &fixtures, &agreement, &spreads, flash_attn, &[]);
}

#[test]
fn synthetic_qwen3_matches_llama_cpp_flash() {
    check_synth("synth-qwen3-q8_0", true);
}

#[test]
fn synthetic_qwen3_matches_llama_cpp_softmax() {
    check_synth("synth-qwen3-q8_0", false);
}

#[test]
fn synthetic_gpt2_matches_llama_cpp_flash() {
    check_synth("synth-gpt2-f16", true);
}

#[test]
fn synthetic_gpt2_matches_llama_cpp_softmax() {
    check_synth("synth-gpt2-f16", false);
}

/// A reproducible vector of `n` logit-like values (mean about -2, a few large ones).
fn pseudo_logits(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 40) as f32 / (1u64 << 24) as f32
    };
    (0..n)
        .map(|_| {
            let g = (0..4).map(|_| next()).sum::<f32>() - 2.0;
            let spike = if next() < 0.001 { 12.0 * next() } else { 0.0 };
            3.0 * g - 2.0 + spike
        })
        .collect()
}

fn full_nmse(a: &[f32], b: &[f32]) -> f64 {
    let num: f64 = a.iter().zip(b).map(|(&x, &y)| (f64::from(x) - f64::from(y)).powi(2)).sum();
    num / b.iter().map(|&y| f64::from(y).powi(2)).sum::<f64>()
}

/// The sampled references (tests/common/logits_sample.rs) against the full NMSE check they
/// stand in for: the file round-trips, the allowance is the full vectors' NMSE, the estimate
/// is close to the full NMSE for an error spread over the vocabulary, the lower bound never
/// exceeds it, and an error confined to one entry outside the sample fails the lower bound.
#[test]
fn sampled_reference_logits_stand_in_for_the_full_vector() {
    use common::logits_sample::LogitsSample;
    for n in [3000, 49_152, 151_936, 262_144] {
        let v = pseudo_logits(n, n as u64);
        let noise = pseudo_logits(n, 7 + n as u64);
        let other: Vec<f32> = v.iter().zip(&noise).map(|(&x, &e)| x + 0.02 * (e + 2.0)).collect();
        let s = LogitsSample::from_full(&v, &other);
        assert_eq!(LogitsSample::parse(&s.to_bytes(), "test"), s);
        assert_eq!(s.other_nmse, full_nmse(&other, &v));
        assert_eq!((s.nmse_estimate(&v), s.nmse_lower_bound(&v)), (0.0, 0.0));
        let noise = pseudo_logits(n, 99 + n as u64);
        let got: Vec<f32> = v.iter().zip(&noise).map(|(&x, &e)| x + 0.05 * (e + 2.0)).collect();
        let (exact, est, low) =
            (full_nmse(&got, &v), s.nmse_estimate(&got), s.nmse_lower_bound(&got));
        // (Up to the order of summation: with stride 1 both are the full NMSE.)
        assert!(low <= exact * (1.0 + 1e-12), "{n}: lower bound {low:e} above {exact:e}");
        if n <= 4096 {
            assert!((est - exact).abs() <= 1e-12 * exact, "{n}: {est:e} vs {exact:e}");
        } else {
            assert!((est / exact - 1.0).abs() < 0.1, "{n}: {est:e} vs {exact:e}");
        }
        // One entry far off, outside the top entries and the sample (with stride 1 every
        // entry is sampled): the estimate cannot see it, the lower bound must.
        let unsampled = |i: &usize| i % s.stride != 0 && s.top.iter().all(|t| t.0 as usize != *i);
        let Some(i) = (0..n).rev().find(unsampled) else {
            assert_eq!(s.stride, 1);
            continue;
        };
        let mut bad = v.clone();
        bad[i] = s.top[0].1 + 1000.0;
        assert!(full_nmse(&bad, &v) > 1e-3);
        assert!(s.nmse_estimate(&bad) < 1e-6);
        assert!(s.nmse_lower_bound(&bad) > 1e-3, "{n}: {:e}", s.nmse_lower_bound(&bad));
    }
}

/// Every stored reference's logits file parses, and both attention paths of a prompt cover
/// the same vocabulary.
#[test]
fn stored_reference_logits_files_parse() {
    use common::logits_sample::LogitsSample;
    let synth = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/synth");
    let mut roots = vec![synth];
    for e in std::fs::read_dir(common::refs_dir()).unwrap() {
        let p = e.unwrap().path();
        if p.join("fa-on").is_dir() {
            roots.push(p);
        }
    }
    let mut n = 0;
    for root in roots {
        for model in std::fs::read_dir(root.join("fa-on")).unwrap() {
            let model = model.unwrap().file_name();
            for prompt in common::prompts() {
                let file = format!("{prompt}.logits.sample");
                let on = LogitsSample::read(&root.join("fa-on").join(&model).join(&file));
                let off = LogitsSample::read(&root.join("fa-off").join(&model).join(&file));
                assert_eq!(on.n_vocab, off.n_vocab);
                n += 2;
            }
        }
    }
    assert_eq!(n, 4 * 2 * 3 * 3 + 2 * 2 * 3, "reference logits files");
}

/// The synthetic qwen3 model, written to a temporary directory (kept alive with it).
fn synth_qwen3() -> (tempfile::TempDir, Model) {
    let (_, spec, vocab) = tessera_llama::synth::test_models()
        .into_iter()
        .find(|m| m.0 == "synth-qwen3-q8_0")
        .unwrap();
    let vocab = tessera_models::fixtures::vocab(vocab).unwrap();
    let v = tessera_gguf::GgufFile::open(&vocab).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    tessera_llama::synth::write_random_model(&spec, v.metadata(), &path).unwrap();
    let model = Model::load(&path, tessera_backend_cpu::CpuDevice::shared()).unwrap();
    (dir, model)
}

/// `seq_rm` reads a negative end as "to the end" and a negative start as 0, as llama.cpp's
/// `llama_memory_seq_rm`: a caller dropping the cells after a kept prefix with `-1` (the
/// conversation's prompt cache) must not leave them to be attended.
#[test]
fn seq_rm_takes_negative_bounds_as_open() {
    let (_dir, model) = synth_qwen3();
    let mut ctx = tessera_llama::LlamaContext::new(
        &model,
        tessera_llama::ContextParams { n_ctx: 256, n_threads: 1, ..Default::default() },
    )
    .unwrap();
    ctx.decode(&tessera_llama::Batch::from_tokens(&[1, 2, 3, 4, 5, 6, 7, 8], 0, 0)).unwrap();
    assert_eq!(ctx.kv_cache().used(), 8);
    ctx.kv_cache_mut().seq_rm(Some(0), 3, -1);
    assert_eq!(ctx.kv_cache().used(), 3);
    assert_eq!(ctx.kv_cache().seq_pos_max(0), Some(2));
    ctx.kv_cache_mut().seq_rm(None, -1, -1);
    assert_eq!(ctx.kv_cache().used(), 0);
}

/// A sequence that shares another's prefix cells (`seq_cp`) continues from them: with
/// batch-invariant kernels, its next token's logits are bit for bit those the first sequence
/// got for the same token at the same position, computed in a batch of eight.
#[test]
fn a_shared_prefix_continues_as_the_original() {
    let (_dir, model) = synth_qwen3();
    let params = tessera_llama::ContextParams {
        n_ctx: 256,
        n_threads: 2,
        batch_invariant: true,
        ..Default::default()
    };
    let mut ctx = tessera_llama::LlamaContext::new(&model, params).unwrap();
    let toks = [11u32, 22, 33, 44, 55, 66, 77, 88];
    let mut batch = tessera_llama::Batch::new();
    for (i, &t) in toks.iter().enumerate() {
        batch.add(t, i as i32, 0, true);
    }
    ctx.decode(&batch).unwrap();
    let want = ctx.logits_ith(5).unwrap().to_vec();
    ctx.kv_cache_mut().seq_cp(0, 1, 0, 5);
    assert_eq!(ctx.kv_cache().seq_cells(1), 5);
    assert_eq!(ctx.kv_cache().used(), 8, "shared, not copied");
    ctx.decode(&tessera_llama::Batch::from_tokens(&[toks[5]], 5, 1)).unwrap();
    let got = ctx.logits_ith(0).unwrap();
    assert!(got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()));
    // Dropping the original leaves the shared cells to the copy.
    ctx.kv_cache_mut().seq_rm(Some(0), -1, -1);
    assert_eq!(ctx.kv_cache().used(), 6);
    assert_eq!(ctx.kv_cache().seq_cells(1), 6);
}

/// A sequence saved to host memory (`seq_save`) and put back later into another sequence
/// (`seq_restore`), after the cache was cleared and refilled, continues bit for bit as the
/// original: with flash attention (V rows) and without (V transposed), from the whole state
/// and from a prefix of it.
#[test]
fn a_saved_sequence_restored_continues_as_the_original() {
    let (_dir, model) = synth_qwen3();
    for flash_attn in [true, false] {
        let params = tessera_llama::ContextParams {
            n_ctx: 256,
            n_threads: 2,
            flash_attn,
            batch_invariant: true,
            ..Default::default()
        };
        let mut ctx = tessera_llama::LlamaContext::new(&model, params).unwrap();
        let toks = [11u32, 22, 33, 44, 55, 66, 77, 88];
        let mut batch = tessera_llama::Batch::new();
        for (i, &t) in toks.iter().enumerate() {
            batch.add(t, i as i32, 0, true);
        }
        ctx.decode(&batch).unwrap();
        let want_end = ctx.logits_ith(7).unwrap().to_vec();
        let want_mid = ctx.logits_ith(5).unwrap().to_vec();
        let state = ctx.seq_save(0, 7).unwrap();
        assert_eq!(state.len(), 7);
        assert!(state.n_bytes() > 0);
        // Other work moves the cells around.
        ctx.kv_cache_mut().clear();
        ctx.decode(&tessera_llama::Batch::from_tokens(&[5, 6, 7], 0, 2)).unwrap();
        ctx.seq_restore(3, &state, i32::MAX).unwrap();
        assert_eq!(ctx.kv_cache().seq_cells(3), 7);
        ctx.decode(&tessera_llama::Batch::from_tokens(&[toks[7]], 7, 3)).unwrap();
        let got = ctx.logits_ith(0).unwrap();
        assert!(
            got.iter().zip(&want_end).all(|(a, b)| a.to_bits() == b.to_bits()),
            "flash_attn {flash_attn}: restored state"
        );
        // Only a prefix of it.
        ctx.seq_restore(4, &state, 5).unwrap();
        assert_eq!(ctx.kv_cache().seq_cells(4), 5);
        ctx.decode(&tessera_llama::Batch::from_tokens(&[toks[5]], 5, 4)).unwrap();
        let got = ctx.logits_ith(0).unwrap();
        assert!(
            got.iter().zip(&want_mid).all(|(a, b)| a.to_bits() == b.to_bits()),
            "flash_attn {flash_attn}: restored prefix"
        );
    }
}

/// Batch-invariant mode: 80 tokens decoded in one batch (past the 64 rows where llama.cpp's
/// attention takes its tiled algorithm) give every position's logits bit for bit as decoding
/// them in steps of one and of seven does, with flash attention and without.
#[test]
fn batch_invariant_logits_do_not_depend_on_the_batch() {
    let (_dir, model) = synth_qwen3();
    let toks: Vec<u32> = (0..80u32).map(|i| (i * 37 + 11) % 200 + 3).collect();
    for flash_attn in [true, false] {
        let run = |step: usize| -> Vec<Vec<f32>> {
            let params = tessera_llama::ContextParams {
                n_ctx: 256,
                n_threads: 2,
                flash_attn,
                batch_invariant: true,
                ..Default::default()
            };
            let mut ctx = tessera_llama::LlamaContext::new(&model, params).unwrap();
            let mut out = Vec::new();
            for (c, chunk) in toks.chunks(step).enumerate() {
                let mut batch = tessera_llama::Batch::new();
                for (k, &t) in chunk.iter().enumerate() {
                    batch.add(t, (c * step + k) as i32, 0, true);
                }
                ctx.decode(&batch).unwrap();
                out.extend((0..chunk.len()).map(|k| ctx.logits_ith(k).unwrap().to_vec()));
            }
            out
        };
        let whole = run(80);
        for step in [1, 7] {
            let got = run(step);
            for (pos, (a, b)) in whole.iter().zip(&got).enumerate() {
                assert!(
                    a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()),
                    "flash_attn {flash_attn}: position {pos} differs between a batch of 80 and steps of {step}"
                );
            }
        }
    }
}

/// `Generator` gives the tokens of the hand-written loop (decode, sample from the last row,
/// accept, decode the token at the next position), and a banned token is never sampled.
#[test]
fn generator_follows_the_plain_loop_and_bans() {
    use tessera_llama::sampling::SamplerChain;
    use tessera_llama::{Batch, ContextParams, Generator, LlamaContext};
    let (_, spec, vocab) = tessera_llama::synth::test_models()
        .into_iter()
        .find(|m| m.0 == "synth-qwen3-q8_0")
        .unwrap();
    let vocab = tessera_models::fixtures::vocab(vocab).unwrap();
    let v = tessera_gguf::GgufFile::open(&vocab).expect("vocabulary fixture");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    tessera_llama::synth::write_random_model(&spec, v.metadata(), &path).unwrap();
    let model = Model::load(&path, tessera_backend_cpu::CpuDevice::shared()).unwrap();
    let params = || ContextParams { n_ctx: 64, n_threads: 2, ..Default::default() };
    let prompt = [1u32, 5, 9, 14, 3];

    let mut ctx = LlamaContext::new(&model, params()).unwrap();
    let mut sampler = SamplerChain::greedy();
    ctx.decode(&Batch::from_tokens(&prompt, 0, 0)).unwrap();
    let (mut want, mut last, mut pos) = (Vec::new(), prompt.len() - 1, prompt.len());
    for _ in 0..6 {
        let tok = sampler.sample(ctx.logits_ith(last).unwrap());
        want.push(tok);
        ctx.decode(&Batch::from_tokens(&[tok], pos as i32, 0)).unwrap();
        (last, pos) = (0, pos + 1);
    }

    let mut ctx = LlamaContext::new(&model, params()).unwrap();
    let mut sampler = SamplerChain::greedy();
    let mut g = Generator::new(&mut ctx, &mut sampler, 0, 0);
    g.prompt(&prompt).unwrap();
    let mut got = Vec::new();
    for _ in 0..6 {
        let tok = g.sample();
        got.push(tok);
        g.feed(tok).unwrap();
    }
    assert_eq!(got, want);
    assert_eq!(g.pos(), prompt.len() + 6);

    let mut ctx = LlamaContext::new(&model, params()).unwrap();
    let mut sampler = SamplerChain::greedy();
    let mut g = Generator::new(&mut ctx, &mut sampler, 0, 0).ban([want[0]]);
    g.prompt(&prompt).unwrap();
    assert_ne!(g.sample(), want[0], "a banned token was sampled");
    assert!(g.prompt(&[]).is_err(), "an empty prompt is the context's error");
}
