//! The steps that adapt to the candidates or to what was drawn before, as llama.cpp b11312's
//! `llama-sampler.cpp` has them: dynamic temperature (`temp-ext`), top-n-σ, XTC ("exclude top
//! choices") and mirostat v1 and v2. Each follows llama.cpp's float and double arithmetic in
//! its order, and draws from its own `std::mt19937` where llama.cpp's does, so a seed gives
//! llama.cpp's tokens.

use super::{resolve_seed, Candidates, Mt19937, Sampler};

/// Temperature, made dynamic by the candidates' entropy when `delta > 0`
/// (`llama_sampler_init_temp_ext`, llama.cpp's `--dynatemp-range`, `--dynatemp-exp`): the
/// temperature goes from `temp - delta` (at entropy 0) to `temp + delta` (at the largest
/// entropy) along `normalized_entropy ^ exponent`. With `delta <= 0` it is the plain
/// temperature step.
#[derive(Debug, Clone, Copy)]
pub struct TempExt {
    /// The middle temperature.
    pub temp: f32,
    /// Half the range (0 = off: the plain temperature).
    pub delta: f32,
    /// How entropy maps to temperature.
    pub exponent: f32,
}

impl Sampler for TempExt {
    fn name(&self) -> &'static str {
        "temp-ext"
    }
    fn apply(&mut self, cur: &mut Candidates) {
        if self.delta <= 0.0 {
            super::Temperature(self.temp).apply(cur);
            return;
        }
        let min_temp = (self.temp - self.delta).max(0.0);
        let max_temp = self.temp + self.delta;
        if cur.data.len() <= 1 {
            return;
        }
        let max_entropy = -(1.0f32 / cur.data.len() as f32).ln();
        cur.softmax(true);
        let mut entropy = 0.0f32;
        for d in &cur.data {
            if d.p > 0.0 {
                entropy -= d.p * d.p.ln();
            }
        }
        let normalized = entropy / max_entropy;
        let dyn_temp = min_temp + (max_temp - min_temp) * normalized.powf(self.exponent);
        super::Temperature(dyn_temp).apply(cur);
        // The probabilities again, in double (as llama.cpp recomputes them).
        let max = f64::from(cur.data[0].logit);
        let mut sum = 0.0f64;
        for d in &mut cur.data {
            let p = (f64::from(d.logit) - max).exp();
            d.p = p as f32;
            sum += p;
        }
        for d in &mut cur.data {
            d.p = (f64::from(d.p) / sum) as f32;
        }
    }
}

/// Top-n-σ (`llama_sampler_init_top_n_sigma`): keeps the candidates whose logit is within `n`
/// standard deviations of the largest (the statistics over the finite logits).
#[derive(Debug, Clone, Copy)]
pub struct TopNSigma(pub f32);

impl Sampler for TopNSigma {
    fn name(&self) -> &'static str {
        "top-n-sigma"
    }
    fn apply(&mut self, cur: &mut Candidates) {
        if self.0 <= 0.0 || cur.data.len() <= 1 {
            return;
        }
        let mut max = cur.data[0].logit;
        let mut sum = 0.0f32;
        let mut count = 0usize;
        for d in &cur.data {
            if d.logit != f32::NEG_INFINITY {
                max = max.max(d.logit);
                sum += d.logit;
                count += 1;
            }
        }
        let mean = if count > 0 { sum / count as f32 } else { 0.0 };
        // `pow(float, 2)` is computed in double, the sum kept in float.
        let mut acc = 0.0f32;
        for d in &cur.data {
            if d.logit != f32::NEG_INFINITY {
                let x = f64::from(d.logit - mean);
                acc = (f64::from(acc) + x * x) as f32;
            }
        }
        let std = if count > 0 { (acc / count as f32).sqrt() } else { 0.0 };
        let cut = max - self.0 * std;
        for d in &mut cur.data {
            if d.logit < cut {
                d.logit = f32::NEG_INFINITY;
            }
        }
    }
}

/// XTC, "exclude top choices" (`llama_sampler_init_xtc`): with chance `probability` per
/// token, drops every candidate at or above `threshold` but the least likely of them, so the
/// reply leaves its most predictable path.
#[derive(Debug, Clone)]
pub struct Xtc {
    /// Chance per token (0 = off).
    pub probability: f32,
    /// Probability at or above which a candidate counts as a top choice (> 0.5 = off).
    pub threshold: f32,
    /// Candidates always kept.
    pub min_keep: usize,
    rng: Mt19937,
}

impl Xtc {
    /// An XTC step drawing from `std::mt19937(seed)` ([`super::DEFAULT_SEED`]: a random seed).
    pub fn new(probability: f32, threshold: f32, min_keep: usize, seed: u32) -> Self {
        Xtc { probability, threshold, min_keep, rng: Mt19937::new(resolve_seed(seed)) }
    }
}

impl Sampler for Xtc {
    fn name(&self) -> &'static str {
        "xtc"
    }
    fn apply(&mut self, cur: &mut Candidates) {
        if self.probability <= 0.0 || self.threshold > 0.5 || cur.data.len() < 2 {
            return;
        }
        if self.rng.next_f32() > self.probability {
            return;
        }
        cur.softmax(true);
        let mut pos_last = 0;
        for (i, d) in cur.data.iter().enumerate() {
            if d.p >= self.threshold {
                pos_last = i;
            } else {
                break;
            }
        }
        if cur.data.len() - pos_last >= self.min_keep && pos_last > 0 {
            cur.data.drain(..pos_last);
        }
    }
}

/// Mirostat 1.0 (`llama_sampler_init_mirostat`, `--mirostat 1`): estimates the Zipf exponent
/// from the `m` most likely candidates, keeps the top `k` that target surprise `mu` implies,
/// draws, and moves `mu` toward `tau` by `eta`. A final step: it picks the token.
#[derive(Debug, Clone)]
pub struct Mirostat {
    /// Tokens in the vocabulary.
    pub n_vocab: usize,
    /// Target surprise (entropy), `--mirostat-ent`.
    pub tau: f32,
    /// Learning rate, `--mirostat-lr`.
    pub eta: f32,
    /// Candidates the exponent is estimated from (llama.cpp's common chain: 100).
    pub m: usize,
    mu: f32,
    rng: Mt19937,
}

impl Mirostat {
    /// Mirostat 1.0 seeded like llama.cpp (`mu` starts at `2 tau`).
    pub fn new(n_vocab: usize, seed: u32, tau: f32, eta: f32, m: usize) -> Self {
        Mirostat { n_vocab, tau, eta, m, mu: 2.0 * tau, rng: Mt19937::new(resolve_seed(seed)) }
    }
}

impl Sampler for Mirostat {
    fn name(&self) -> &'static str {
        "mirostat"
    }
    fn apply(&mut self, cur: &mut Candidates) {
        if cur.data.is_empty() {
            return;
        }
        cur.softmax(true);
        let (mut sum_ti_bi, mut sum_ti_sq) = (0.0f32, 0.0f32);
        let mut i = 0;
        while i + 1 < self.m && i + 1 < cur.data.len() {
            let t_i = ((i + 2) as f32 / (i + 1) as f32).ln();
            let b_i = (cur.data[i].p / cur.data[i + 1].p).ln();
            sum_ti_bi += t_i * b_i;
            sum_ti_sq += t_i * t_i;
            i += 1;
        }
        let s_hat = sum_ti_bi / sum_ti_sq;
        let epsilon_hat = s_hat - 1.0;
        let k = ((epsilon_hat * 2.0f32.powf(self.mu))
            / (1.0 - (self.n_vocab as f32).powf(-epsilon_hat)))
        .powf(1.0 / s_hat);
        cur.top_k(c_int(k).max(1) as usize);
        cur.softmax(true);
        let idx = discrete(cur, &mut self.rng);
        cur.selected = Some(idx);
        let observed = -cur.data[idx].p.log2();
        self.mu -= self.eta * (observed - self.tau);
    }
}

/// Mirostat 2.0 (`llama_sampler_init_mirostat_v2`, `--mirostat 2`): keeps the candidates whose
/// surprise is at most `mu` (at least one), draws, and moves `mu` toward `tau` by `eta`. A
/// final step.
#[derive(Debug, Clone)]
pub struct MirostatV2 {
    /// Target surprise, `--mirostat-ent`.
    pub tau: f32,
    /// Learning rate, `--mirostat-lr`.
    pub eta: f32,
    mu: f32,
    rng: Mt19937,
}

impl MirostatV2 {
    /// Mirostat 2.0 seeded like llama.cpp (`mu` starts at `2 tau`).
    pub fn new(seed: u32, tau: f32, eta: f32) -> Self {
        MirostatV2 { tau, eta, mu: 2.0 * tau, rng: Mt19937::new(resolve_seed(seed)) }
    }
}

impl Sampler for MirostatV2 {
    fn name(&self) -> &'static str {
        "mirostat-v2"
    }
    fn apply(&mut self, cur: &mut Candidates) {
        if cur.data.is_empty() {
            return;
        }
        cur.softmax(true);
        let keep = cur.data.iter().position(|d| -d.p.log2() > self.mu).unwrap_or(cur.data.len());
        cur.data.truncate(keep.max(1));
        cur.softmax(true);
        let idx = discrete(cur, &mut self.rng);
        cur.selected = Some(idx);
        let observed = -cur.data[idx].p.log2();
        self.mu -= self.eta * (observed - self.tau);
    }
}

/// C++'s `int(x)` on x86-64: truncation, and `INT_MIN` for NaN and out-of-range values
/// (`cvttss2si`), where Rust's `as` saturates.
fn c_int(x: f32) -> i32 {
    if x.is_nan() || !(-2_147_483_648.0..2_147_483_648.0).contains(&x) {
        i32::MIN
    } else {
        x as i32
    }
}

/// `std::discrete_distribution<int>` over the candidates' `p`, drawn once, as libstdc++
/// computes it: the weights as double, normalized by their sum, cumulated with the last set
/// to 1, and the first cumulative weight not below one `generate_canonical<double>` value.
/// Fewer than two weights give index 0 without a draw.
fn discrete(cur: &Candidates, rng: &mut Mt19937) -> usize {
    if cur.data.len() < 2 {
        return 0;
    }
    let sum: f64 = cur.data.iter().fold(0.0, |s, d| s + f64::from(d.p));
    let mut run = 0.0f64;
    let mut cumulative: Vec<f64> = cur
        .data
        .iter()
        .map(|d| {
            run += f64::from(d.p) / sum;
            run
        })
        .collect();
    if let Some(last) = cumulative.last_mut() {
        *last = 1.0;
    }
    let u = rng.next_f64();
    cumulative.partition_point(|&c| c < u)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_int_is_cvttss2si() {
        assert_eq!(c_int(3.9), 3);
        assert_eq!(c_int(-3.9), -3);
        assert_eq!(c_int(f32::NAN), i32::MIN);
        assert_eq!(c_int(f32::INFINITY), i32::MIN);
        assert_eq!(c_int(3e9), i32::MIN);
    }

    #[test]
    fn discrete_cumulates_and_draws_once() {
        let mut c = Candidates::from_logits(&[0.0, 0.0, 0.0, 0.0]);
        for d in &mut c.data {
            d.p = 0.25;
        }
        let (mut a, mut b) = (Mt19937::new(7), Mt19937::new(7));
        let idx = discrete(&c, &mut a);
        let u = b.next_f64();
        assert_eq!(idx, (u * 4.0).floor() as usize);
        assert_eq!(a.next_u32(), b.next_u32(), "one canonical draw: two outputs");
        let one = Candidates::from_logits(&[1.0]);
        assert_eq!(discrete(&one, &mut a), 0);
        assert_eq!(a.next_u32(), b.next_u32(), "no draw for one candidate");
    }

    #[test]
    fn top_n_sigma_keeps_within_the_spread() {
        let mut c = Candidates::from_logits(&[0.0, 1.0, 2.0, 3.0, f32::NEG_INFINITY]);
        TopNSigma(1.0).apply(&mut c);
        let kept: Vec<u32> = c.data.iter().filter(|d| d.logit.is_finite()).map(|d| d.id).collect();
        // mean 1.5, std sqrt(1.25) = 1.118: cut at 1.882.
        assert_eq!(kept, vec![2, 3]);
    }

    #[test]
    fn xtc_drops_the_top_choices_but_the_last() {
        let logits = [5.0f32, 4.9, 4.8, 0.0, -1.0];
        let mut c = Candidates::from_logits(&logits);
        Xtc::new(1.0, 0.1, 1, 3).apply(&mut c);
        assert_eq!(c.data[0].id, 2, "tokens 0 and 1 excluded");
        let mut off = Candidates::from_logits(&logits);
        Xtc::new(1.0, 0.6, 1, 3).apply(&mut off);
        assert_eq!(off.data.len(), 5);
    }

    #[test]
    fn dynamic_temperature_follows_the_entropy() {
        // Uniform candidates: normalized entropy 1, so the temperature is temp + delta.
        let mut c = Candidates::from_logits(&[2.0, 2.0, 2.0, 2.0]);
        TempExt { temp: 1.0, delta: 0.5, exponent: 1.0 }.apply(&mut c);
        assert!(c.data.iter().all(|d| (d.logit - 2.0 / 1.5).abs() < 1e-6));
        assert!(c.data.iter().all(|d| (d.p - 0.25).abs() < 1e-6));
    }
}
