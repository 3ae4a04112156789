//! The samplers against their definitions.

use super::*;

#[test]
fn mt19937_matches_the_standard() {
    // The C++ standard requires the 10000th output of mt19937 seeded 5489 to be 4123659995.
    let mut g = Mt19937::new(5489);
    let mut v = 0;
    for _ in 0..10000 {
        v = g.next_u32();
    }
    assert_eq!(v, 4_123_659_995);
}

#[test]
fn greedy_and_zero_temperature_pick_the_first_maximum() {
    let logits = [0.5, 2.0, -1.0, 2.0];
    assert_eq!(SamplerChain::greedy().sample(&logits), 1);
    let p = SamplingParams { temp: 0.0, ..Default::default() };
    assert_eq!(SamplerChain::from_params(&p).sample(&logits), 1);
}

/// Top-k by selection keeps what sorting the whole list and truncating keeps, in the same
/// order, ties (many equal logits, NaN, infinities) included.
#[test]
fn top_k_selection_matches_sort_and_truncate() {
    let mut seed = 0x9e37_79b9u32;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        seed
    };
    for case in 0..200 {
        let n = 1 + (next() % 300) as usize;
        let logits: Vec<f32> = (0..n)
            .map(|_| match next() % 10 {
                0 => f32::NEG_INFINITY,
                1 => 1.5,
                2 if case % 7 == 0 => f32::NAN,
                _ => (next() % 16) as f32 / 4.0,
            })
            .collect();
        for k in [1, 2, 5, 40, n.saturating_sub(1).max(1), n, n + 3] {
            let mut want = Candidates::from_logits(&logits);
            want.sort();
            want.data.truncate(k);
            let mut got = Candidates::from_logits(&logits);
            got.top_k(k);
            let ids = |c: &Candidates| c.data.iter().map(|d| d.id).collect::<Vec<_>>();
            assert_eq!(ids(&got), ids(&want), "n={n} k={k}");
            assert!(got.sorted);
        }
    }
}

/// `SamplerChain::greedy`'s argmax shortcut picks what the candidate path picks (ties,
/// infinities, NaN, empty logits).
#[test]
fn greedy_shortcut_matches_the_candidate_path() {
    let cases: [&[f32]; 6] = [
        &[0.5, 2.0, -1.0, 2.0],
        &[f32::NAN, 1.0, 3.0],
        &[1.0, f32::NAN, 3.0, 3.0],
        &[f32::NEG_INFINITY, f32::NEG_INFINITY],
        &[-2.0, f32::INFINITY, -1.0],
        &[],
    ];
    for logits in cases {
        let want = SamplerChain::new().push(Greedy).sample(logits);
        assert_eq!(SamplerChain::greedy().sample(logits), want, "{logits:?}");
    }
}

#[test]
fn top_k_one_is_greedy_and_dist_is_seeded() {
    let logits: Vec<f32> = (0..100).map(|i| ((i * 37 % 100) as f32) / 10.0).collect();
    let p = SamplingParams { top_k: 1, ..Default::default() };
    assert_eq!(SamplerChain::from_params(&p).sample(&logits), 27);
    let p = SamplingParams {
        seed: 42,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        temp: 1.0,
        ..Default::default()
    };
    let a: Vec<u32> = {
        let mut c = SamplerChain::from_params(&p);
        (0..20).map(|_| c.sample(&logits)).collect()
    };
    let b: Vec<u32> = {
        let mut c = SamplerChain::from_params(&p);
        (0..20).map(|_| c.sample(&logits)).collect()
    };
    assert_eq!(a, b);
    assert!(a.iter().collect::<std::collections::HashSet<_>>().len() > 1, "{a:?}");
}

#[test]
fn penalties_push_seen_tokens_down() {
    let mut p = Penalties::new(64, 2.0, 0.5, 1.0);
    p.accept(0);
    p.accept(0);
    let mut c = Candidates::from_logits(&[4.0, -1.0]);
    p.apply(&mut c);
    assert_eq!(c.data[0].logit, 4.0 / 2.0 - 2.0 * 0.5 - 1.0);
    assert_eq!(c.data[1].logit, -1.0);
}

#[test]
fn top_p_and_min_p_keep_the_head() {
    let mut c = Candidates::from_logits(&[0.0, 3.0, 1.0, 2.0]);
    TopP { p: 0.9, min_keep: 1 }.apply(&mut c);
    assert_eq!(c.data.iter().map(|d| d.id).collect::<Vec<_>>(), [1, 3, 2]);
    let mut c = Candidates::from_logits(&[0.0, 3.0, 1.0, 2.0]);
    MinP { p: 0.3, min_keep: 1 }.apply(&mut c);
    assert_eq!(c.data.iter().map(|d| d.id).collect::<Vec<_>>(), [1, 3]);
}

/// llama.cpp's default order builds the same chain as before the order existed, and the
/// greedy shortcut is taken exactly where the full chain reduces to the argmax.
#[test]
fn orders_and_the_greedy_shortcut() {
    let chain = SamplerChain::from_params(&SamplingParams { seed: 1, ..Default::default() });
    assert_eq!(chain.describe(), "penalties -> top-k -> typical -> top-p -> min-p -> temp -> dist");
    assert_eq!(chain.seed(), Some(1));
    let greedy = SamplingParams { temp: 0.0, ..Default::default() };
    assert!(greedy.is_greedy(&DEFAULT_ORDER));
    assert!(!greedy.is_greedy(&[Step::TopK]), "no temperature step: sampled at 1");
    let penalised = SamplingParams { temp: 0.0, repeat_penalty: 2.0, ..Default::default() };
    assert!(!penalised.is_greedy(&DEFAULT_ORDER));
    // Temperature 0 with a repetition penalty: llama.cpp penalises, then keeps the largest.
    let logits = [3.0f32, 2.0, 1.0];
    let mut c = SamplerChain::for_params(&penalised, &DEFAULT_ORDER, &[], None).unwrap();
    c.accept(0);
    assert_eq!(c.sample(&logits), 1, "3 / 2 < 2: the penalised token loses the argmax");
    let order = order_from_names(["top_k", "temperature"]).unwrap();
    assert_eq!(order, order_from_chars("kt").unwrap());
    let c = SamplerChain::ordered(&SamplingParams::default(), &order, &[], None).unwrap();
    assert_eq!(c.describe(), "top-k -> temp -> dist");
    assert!(order_from_names(["top_k", "topk"]).unwrap_err().contains("'topk'"));
    assert!(order_from_chars("kq").unwrap_err().contains("'q'"));
    let e =
        SamplerChain::ordered(&SamplingParams::default(), &[Step::Infill], &[], None).unwrap_err();
    assert!(e.contains("infill"), "{e}");
}

/// A bias moves a token; −∞ bans the greedy choice; tokens named twice get both amounts.
#[test]
fn logit_bias_moves_and_bans() {
    let logits = [1.0f32, 5.0, 2.0];
    let greedy = SamplingParams { temp: 0.0, ..Default::default() };
    let pick = |bias: &[(u32, f32)]| {
        SamplerChain::for_params(&greedy, &DEFAULT_ORDER, bias, None).unwrap().sample(&logits)
    };
    assert_eq!(pick(&[]), 1);
    assert_eq!(pick(&[(1, f32::NEG_INFINITY)]), 2);
    assert_eq!(pick(&[(0, 3.0), (0, 1.5)]), 0);
    assert_eq!(pick(&[(0, 3.0)]), 1, "1 + 3 < 5");
    let mut c = Candidates::from_logits(&logits);
    c.data.reverse();
    LogitBias { bias: vec![(0, 10.0)] }.apply(&mut c);
    assert_eq!(c.data.iter().find(|d| d.id == 0).unwrap().logit, 11.0, "found after a reorder");
}

/// llama.cpp's `LLAMA_DEFAULT_SEED` draws a seed; any other seed is kept.
#[test]
fn the_default_seed_is_random() {
    assert_eq!(Dist::new(7).seed(), 7);
    let a = Dist::new(DEFAULT_SEED).seed();
    let b = Dist::new(DEFAULT_SEED).seed();
    assert_ne!(a, DEFAULT_SEED);
    assert_ne!(a, b, "two draws in a row gave the same seed");
}
