//! Sampled speculative decoding keeps the model's distribution: over many seeds, the tokens a
//! verification step yields are drawn with the model's own probabilities, at the first position
//! (where the proposal is kept or replaced) and at the second (given the first proposal kept).
//!
//! SmolLM2 at temperature 1 with no truncation, two proposals: the model's likeliest token
//! and, after it, its likeliest again. The reference probabilities come from plain one-token
//! decoding in another context (softmax in f64). Each position's token counts are compared
//! with Pearson's chi-square over the tokens expected at least 5 times (the rest pooled) at a
//! false-alarm rate near 1e-6, and the first proposal's count alone within 5 standard
//! deviations: an acceptance rule that keeps proposals more (or less) often than the model
//! would sample them fails both.

use tessera_llama::sampling::{SamplerChain, SamplingParams};
use tessera_llama::{ContextParams, Generator, LlamaContext, LoadParams, Model};

/// Verification steps (one per seed).
const SEEDS: u32 = 1500;
const PROMPT: &str = "The three things I like most about the city are";

fn params() -> ContextParams {
    ContextParams { n_ctx: 256, n_threads: 2, ..Default::default() }
}

/// Probabilities (f64 softmax at temperature 1) of the token after `prefix` and `tail`.
fn probs(ctx: &mut LlamaContext, prefix: &[u32], tail: &[u32]) -> Vec<f64> {
    let mut sampler = SamplerChain::greedy();
    let mut g = Generator::new(ctx, &mut sampler, 0, 0);
    g.prompt(prefix).unwrap();
    for &t in tail {
        g.feed(t).unwrap();
    }
    let l = g.context().logits_ith(0).unwrap();
    let max = l.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x)) as f64;
    let e: Vec<f64> = l.iter().map(|&x| (x as f64 - max).exp()).collect();
    let sum: f64 = e.iter().sum();
    e.into_iter().map(|x| x / sum).collect()
}

fn argmax(p: &[f64]) -> u32 {
    (0..p.len()).max_by(|&a, &b| p[a].total_cmp(&p[b])).unwrap() as u32
}

/// The chi-square quantile at standard-normal `z` (Wilson and Hilferty).
fn chi2_quantile(df: f64, z: f64) -> f64 {
    let a = 2.0 / (9.0 * df);
    df * (1.0 - a + z * a.sqrt()).powi(3)
}

/// Checks `counts` (token → times drawn, `n` draws) against `p`, and the count of `proposal`
/// alone.
fn check_counts(what: &str, counts: &[u32], n: u32, p: &[f64], proposal: u32) {
    let n = n as f64;
    let (mut chi2, mut df) = (0.0, 0.0);
    let (mut pool_got, mut pool_want) = (0.0, 0.0);
    for (t, (&c, &pt)) in counts.iter().zip(p).enumerate() {
        let want = n * pt;
        if want >= 5.0 {
            chi2 += (c as f64 - want).powi(2) / want;
            df += 1.0;
        } else {
            pool_got += c as f64;
            pool_want += want;
        }
        if t as u32 == proposal {
            let sd = (n * pt * (1.0 - pt)).sqrt();
            assert!(
                (c as f64 - want).abs() <= 5.0 * sd,
                "{what}: the proposal was kept {c} times in {n}, the model samples it {want:.1} \
                 times (sd {sd:.1})"
            );
        }
    }
    if pool_want >= 5.0 {
        chi2 += (pool_got - pool_want).powi(2) / pool_want;
        df += 1.0;
    }
    // Bins minus one degree of freedom (the counts sum to n).
    let df = (df - 1.0f64).max(1.0);
    let limit = chi2_quantile(df, 4.75);
    eprintln!("{what}: chi-square {chi2:.1} over {df} degrees of freedom (limit {limit:.1})");
    assert!(
        chi2 <= limit,
        "{what}: token frequencies differ from the model's probabilities (chi-square {chi2:.1} > \
         {limit:.1} at {df} degrees of freedom)"
    );
}

#[test]
fn sampled_speculation_draws_from_the_models_distribution() {
    let path = tessera_models::ensure(&tessera_models::SMOLLM2).expect("fetching the model");
    let model = Model::load_with(&path, &LoadParams::new(tessera_backend_cpu::CpuDevice::shared()))
        .unwrap();
    let all = model.vocab.tokenize(PROMPT, true, true);
    let (prefix, tok) = (&all[..all.len() - 1], all[all.len() - 1]);

    let mut refc = LlamaContext::new(&model, params()).unwrap();
    let p1 = probs(&mut refc, prefix, &[tok]);
    let d1 = argmax(&p1);
    refc.kv_cache_mut().seq_rm(None, 0, -1);
    let p2 = probs(&mut refc, prefix, &[tok, d1]);
    let d2 = argmax(&p2);
    eprintln!(
        "proposals {d1} (p {:.3}), {d2} (p {:.3} after it)",
        p1[d1 as usize], p2[d2 as usize]
    );
    // The test needs both outcomes at the first position often enough to see a bias.
    assert!((0.1..0.9).contains(&p1[d1 as usize]), "the prompt's first distribution is too peaked");

    let mut ctx = LlamaContext::new(&model, params()).unwrap();
    let mut seeded = SamplerChain::greedy();
    Generator::new(&mut ctx, &mut seeded, 0, 0).prompt(prefix).unwrap();
    let n_vocab = p1.len();
    let (mut first, mut second) = (vec![0u32; n_vocab], vec![0u32; n_vocab]);
    let mut n_second = 0;
    for seed in 0..SEEDS {
        let sp = SamplingParams {
            temp: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed: seed + 1,
            ..Default::default()
        };
        let mut chain = SamplerChain::from_params(&sp);
        let mut g = Generator::new(&mut ctx, &mut chain, 0, prefix.len());
        let got = g.speculate(tok, &[d1, d2]).unwrap();
        g.rewind(prefix.len());
        first[got[0] as usize] += 1;
        if got[0] == d1 {
            n_second += 1;
            second[got[1] as usize] += 1;
        } else {
            assert_eq!(got.len(), 1, "a rejected first proposal ends the step");
        }
    }
    check_counts("first position", &first, SEEDS, &p1, d1);
    assert!(n_second >= 100, "too few kept first proposals ({n_second}) to test the second");
    check_counts("second position, first kept", &second, n_second, &p2, d2);
}
