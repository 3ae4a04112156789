//! The chain's steps, each as llama.cpp's `llama-sampler.cpp` has it.

use super::{resolve_seed, Candidates, Mt19937, Sampler, TokenData};

/// Picks the first candidate of largest logit (`llama_sampler_init_greedy`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Greedy;

impl Sampler for Greedy {
    fn name(&self) -> &'static str {
        "greedy"
    }
    fn apply(&mut self, cur: &mut Candidates) {
        let mut best = 0;
        for (i, d) in cur.data.iter().enumerate() {
            if d.logit > cur.data[best].logit {
                best = i;
            }
        }
        cur.selected = (!cur.data.is_empty()).then_some(best);
    }
}

/// Divides logits by a temperature; at or below 0 keeps only the first largest (greedy).
#[derive(Debug, Clone, Copy)]
pub struct Temperature(pub f32);

impl Sampler for Temperature {
    fn name(&self) -> &'static str {
        "temp"
    }
    fn apply(&mut self, cur: &mut Candidates) {
        if self.0 <= 0.0 {
            let mut max_i = 0;
            for i in 1..cur.data.len() {
                if cur.data[i].logit > cur.data[max_i].logit {
                    cur.data[max_i].logit = f32::NEG_INFINITY;
                    max_i = i;
                } else {
                    cur.data[i].logit = f32::NEG_INFINITY;
                }
            }
            return;
        }
        for d in &mut cur.data {
            d.logit /= self.0;
        }
    }
}

/// Keeps the `k` largest logits (0 = off).
#[derive(Debug, Clone, Copy)]
pub struct TopK(pub usize);

impl Sampler for TopK {
    fn name(&self) -> &'static str {
        "top-k"
    }
    fn apply(&mut self, cur: &mut Candidates) {
        if self.0 == 0 {
            return;
        }
        cur.top_k(self.0);
    }
}

/// Keeps the smallest prefix of the sorted candidates whose probability reaches `p`.
#[derive(Debug, Clone, Copy)]
pub struct TopP {
    /// Probability mass to keep (1 = off).
    pub p: f32,
    /// Candidates always kept.
    pub min_keep: usize,
}

impl Sampler for TopP {
    fn name(&self) -> &'static str {
        "top-p"
    }
    fn apply(&mut self, cur: &mut Candidates) {
        if self.p >= 1.0 {
            return;
        }
        cur.softmax(true);
        let mut cum = 0f32;
        let mut last = cur.data.len();
        for (i, d) in cur.data.iter().enumerate() {
            cum += d.p;
            if cum >= self.p && i + 1 >= self.min_keep {
                last = i + 1;
                break;
            }
        }
        cur.data.truncate(last);
    }
}

/// Keeps candidates whose probability is at least `p` times the largest.
#[derive(Debug, Clone, Copy)]
pub struct MinP {
    /// Ratio to the top probability (0 = off).
    pub p: f32,
    /// Candidates always kept.
    pub min_keep: usize,
}

impl Sampler for MinP {
    fn name(&self) -> &'static str {
        "min-p"
    }
    fn apply(&mut self, cur: &mut Candidates) {
        if self.p <= 0.0 || cur.data.is_empty() {
            return;
        }
        let max = cur.data.iter().map(|d| d.logit).fold(f32::NEG_INFINITY, f32::max);
        let min_logit = max + self.p.ln();
        if !cur.sorted {
            let kept: Vec<TokenData> =
                cur.data.iter().copied().filter(|d| d.logit >= min_logit).collect();
            if kept.len() >= self.min_keep {
                cur.data = kept;
                return;
            }
            cur.sort();
        }
        let mut n = cur.data.len();
        for (i, d) in cur.data.iter().enumerate().skip(1) {
            if d.logit < min_logit && i >= self.min_keep {
                n = i;
                break;
            }
        }
        cur.data.truncate(n);
    }
}

/// Locally typical sampling (`llama_sampler_typical`).
#[derive(Debug, Clone, Copy)]
pub struct Typical {
    /// Mass to keep (1 = off).
    pub p: f32,
    /// Candidates always kept.
    pub min_keep: usize,
}

impl Sampler for Typical {
    fn name(&self) -> &'static str {
        "typical"
    }
    fn apply(&mut self, cur: &mut Candidates) {
        if self.p >= 1.0 {
            return;
        }
        cur.softmax(true);
        let entropy: f32 =
            -cur.data.iter().filter(|d| d.p > 0.0).map(|d| d.p * d.p.ln()).sum::<f32>();
        let shifted: Vec<f32> = cur.data.iter().map(|d| (-d.p.ln() - entropy).abs()).collect();
        let mut idx: Vec<usize> = (0..cur.data.len()).collect();
        idx.sort_by(|&a, &b| shifted[a].total_cmp(&shifted[b]));
        let mut cum = 0f32;
        let mut last = idx.len();
        for (i, &j) in idx.iter().enumerate() {
            cum += cur.data[j].p;
            if cum > self.p && i + 1 >= self.min_keep {
                last = i + 1;
                break;
            }
        }
        cur.data = idx[..last].iter().map(|&j| cur.data[j]).collect();
        cur.sorted = false;
    }
}

/// Repetition, frequency and presence penalties over the last `last_n` accepted tokens.
#[derive(Debug, Clone)]
pub struct Penalties {
    /// History length (0 = off).
    pub last_n: usize,
    /// Repetition penalty (1 = off).
    pub repeat: f32,
    /// Frequency penalty.
    pub freq: f32,
    /// Presence penalty.
    pub present: f32,
    history: std::collections::VecDeque<u32>,
}

impl Penalties {
    /// A penalty step with an empty history.
    pub fn new(last_n: usize, repeat: f32, freq: f32, present: f32) -> Self {
        Penalties { last_n, repeat, freq, present, history: Default::default() }
    }
}

impl Sampler for Penalties {
    fn name(&self) -> &'static str {
        "penalties"
    }
    fn apply(&mut self, cur: &mut Candidates) {
        if self.last_n == 0 || (self.repeat == 1.0 && self.freq == 0.0 && self.present == 0.0) {
            return;
        }
        let mut counts = std::collections::HashMap::<u32, u32>::new();
        for &t in &self.history {
            *counts.entry(t).or_default() += 1;
        }
        for d in &mut cur.data {
            let Some(&c) = counts.get(&d.id) else { continue };
            if d.logit <= 0.0 {
                d.logit *= self.repeat;
            } else {
                d.logit /= self.repeat;
            }
            d.logit -= c as f32 * self.freq + self.present;
        }
        cur.sorted = false;
    }
    fn accept(&mut self, token: u32) {
        if self.last_n == 0 {
            return;
        }
        if self.history.len() == self.last_n {
            self.history.pop_front();
        }
        self.history.push_back(token);
    }
}

/// The seeded random draw (`llama_sampler_dist`).
#[derive(Debug, Clone)]
pub struct Dist {
    rng: Mt19937,
    seed: u32,
}

impl Dist {
    /// Seeded like llama.cpp: [`DEFAULT_SEED`] draws a random seed.
    pub fn new(seed: u32) -> Self {
        let seed = resolve_seed(seed);
        Dist { rng: Mt19937::new(seed), seed }
    }

    /// The seed in use (the one drawn, for [`DEFAULT_SEED`]).
    pub fn seed(&self) -> u32 {
        self.seed
    }
}

impl Sampler for Dist {
    fn name(&self) -> &'static str {
        "dist"
    }
    fn apply(&mut self, cur: &mut Candidates) {
        if cur.data.is_empty() {
            cur.selected = None;
            return;
        }
        let max = if cur.sorted {
            cur.data[0].logit
        } else {
            cur.data.iter().map(|d| d.logit).fold(f32::NEG_INFINITY, f32::max)
        };
        let mut sum = 0f64;
        for d in &mut cur.data {
            d.p = (d.logit - max).exp();
            sum += f64::from(d.p);
        }
        let target = sum * self.rng.next_f64();
        let mut run = 0f64;
        let mut selected = cur.data.len() - 1;
        for (i, d) in cur.data.iter().enumerate() {
            run += f64::from(d.p);
            if run >= target {
                selected = i;
                break;
            }
        }
        for d in &mut cur.data {
            d.p = (f64::from(d.p) / sum) as f32;
        }
        cur.selected = Some(selected);
    }
}
