//! Samplers (llama.cpp's `llama-sampler.cpp` and `common/sampling.cpp`): a chain of steps over
//! the candidate tokens, ending with greedy or a seeded random draw.
//!
//! The draw is llama.cpp's: probabilities from a float softmax summed in double, one
//! `std::uniform_real_distribution<double>` value from `std::mt19937(seed)` (two 32-bit
//! outputs, libstdc++'s `generate_canonical`), and the first candidate whose running sum
//! reaches `r * sum`. So a seed gives the same tokens as llama.cpp given the same logits.

/// One candidate token.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenData {
    /// Token id.
    pub id: u32,
    /// Logit.
    pub logit: f32,
    /// Probability (set by steps that compute one).
    pub p: f32,
}

/// The candidates a chain works on (`llama_token_data_array`).
#[derive(Debug, Clone, Default)]
pub struct Candidates {
    /// The candidates.
    pub data: Vec<TokenData>,
    /// Whether `data` is sorted by descending logit.
    pub sorted: bool,
    /// The chosen index, once a final step picked one.
    pub selected: Option<usize>,
}

impl Candidates {
    /// Every token of the vocabulary with its logit.
    pub fn from_logits(logits: &[f32]) -> Self {
        let data = logits
            .iter()
            .enumerate()
            .map(|(i, &l)| TokenData { id: i as u32, logit: l, p: 0.0 })
            .collect();
        Candidates { data, sorted: false, selected: None }
    }

    fn sort(&mut self) {
        if !self.sorted {
            // Stable: ties keep the lower token id first.
            self.data.sort_by(|a, b| b.logit.total_cmp(&a.logit));
            self.sorted = true;
        }
    }

    /// Keeps the `k` largest logits, sorted: what a stable sort then truncating to `k` keeps,
    /// in the same order (ties in their current order), without sorting the whole vocabulary
    /// (a selection of the k-th largest, then a sort of `k`).
    fn top_k(&mut self, k: usize) {
        if self.sorted || k == 0 || k >= self.data.len() {
            self.sort();
            self.data.truncate(k);
            return;
        }
        let mut keys: Vec<f32> = self.data.iter().map(|d| d.logit).collect();
        let kth = *keys.select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a)).1;
        let greater = self.data.iter().filter(|d| d.logit.total_cmp(&kth).is_gt()).count();
        let mut ties = k - greater;
        self.data.retain(|d| match d.logit.total_cmp(&kth) {
            std::cmp::Ordering::Greater => true,
            std::cmp::Ordering::Equal if ties > 0 => {
                ties -= 1;
                true
            }
            _ => false,
        });
        self.sorted = false;
        self.sort();
    }

    /// Sorts (if asked) and sets `p` to the softmax of the logits (`llama_sampler_softmax_impl`).
    fn softmax(&mut self, sort: bool) {
        if sort {
            self.sort();
        }
        let max = if self.sorted {
            self.data.first().map_or(0.0, |d| d.logit)
        } else {
            self.data.iter().map(|d| d.logit).fold(f32::NEG_INFINITY, f32::max)
        };
        let mut sum = 0f32;
        for d in &mut self.data {
            d.p = (d.logit - max).exp();
            sum += d.p;
        }
        for d in &mut self.data {
            d.p /= sum;
        }
    }
}

/// The 32-bit Mersenne Twister, `std::mt19937`.
#[derive(Debug, Clone)]
pub struct Mt19937 {
    state: [u32; 624],
    index: usize,
}

impl Mt19937 {
    /// Seeded as `std::mt19937(seed)`.
    pub fn new(seed: u32) -> Self {
        let mut state = [0u32; 624];
        state[0] = seed;
        for i in 1..624 {
            state[i] = 1_812_433_253u32
                .wrapping_mul(state[i - 1] ^ (state[i - 1] >> 30))
                .wrapping_add(i as u32);
        }
        Mt19937 { state, index: 624 }
    }

    /// The next 32-bit output.
    pub fn next_u32(&mut self) -> u32 {
        if self.index >= 624 {
            for i in 0..624 {
                let y = (self.state[i] & 0x8000_0000) | (self.state[(i + 1) % 624] & 0x7fff_ffff);
                let mut v = self.state[(i + 397) % 624] ^ (y >> 1);
                if y & 1 != 0 {
                    v ^= 0x9908_b0df;
                }
                self.state[i] = v;
            }
            self.index = 0;
        }
        let mut y = self.state[self.index];
        self.index += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    /// `std::uniform_real_distribution<double>(0, 1)(*this)` as libstdc++ computes it.
    pub fn next_f64(&mut self) -> f64 {
        let r = 4_294_967_296.0f64;
        let lo = f64::from(self.next_u32());
        let hi = f64::from(self.next_u32());
        let x = (lo + hi * r) / (r * r);
        if x >= 1.0 {
            1.0 - f64::EPSILON / 2.0
        } else {
            x
        }
    }
}

/// One step of a chain.
pub trait Sampler: Send {
    /// Name, as llama.cpp prints it.
    fn name(&self) -> &'static str;
    /// Narrows, reweights or picks from the candidates.
    fn apply(&mut self, cur: &mut Candidates);
    /// Records a token that was chosen (penalty history).
    fn accept(&mut self, _token: u32) {}
}

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
}

impl Dist {
    /// Seeded like llama.cpp.
    pub fn new(seed: u32) -> Self {
        Dist { rng: Mt19937::new(seed) }
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

/// The parameters of llama.cpp's common sampler (`common_params_sampling`), its defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// Temperature (≤ 0: greedy).
    pub temp: f32,
    /// Top-k (0: off).
    pub top_k: usize,
    /// Top-p (1: off).
    pub top_p: f32,
    /// Min-p (0: off).
    pub min_p: f32,
    /// Typical-p (1: off).
    pub typical_p: f32,
    /// Repetition penalty (1: off).
    pub repeat_penalty: f32,
    /// Penalty history length.
    pub repeat_last_n: usize,
    /// Frequency penalty.
    pub frequency_penalty: f32,
    /// Presence penalty.
    pub presence_penalty: f32,
    /// RNG seed.
    pub seed: u32,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temp: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            typical_p: 1.0,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            seed: 0xFFFF_FFFF,
        }
    }
}

/// A chain of samplers; the last one picks the token.
pub struct SamplerChain {
    steps: Vec<Box<dyn Sampler>>,
    /// The chain is exactly [`SamplerChain::greedy`]'s: `sample` takes the argmax of the
    /// logits without building candidates (the same token).
    argmax_only: bool,
}

impl std::fmt::Debug for SamplerChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

impl SamplerChain {
    /// An empty chain.
    pub fn new() -> Self {
        SamplerChain { steps: Vec::new(), argmax_only: false }
    }

    /// Appends a step.
    pub fn push(mut self, s: impl Sampler + 'static) -> Self {
        self.steps.push(Box::new(s));
        self.argmax_only = false;
        self
    }

    /// Plain argmax.
    pub fn greedy() -> Self {
        let mut chain = SamplerChain::new().push(Greedy);
        chain.argmax_only = true;
        chain
    }

    /// llama.cpp's common chain: penalties → top-k → typical → top-p → min-p → temperature →
    /// dist.
    pub fn from_params(p: &SamplingParams) -> Self {
        SamplerChain::new()
            .push(Penalties::new(
                p.repeat_last_n,
                p.repeat_penalty,
                p.frequency_penalty,
                p.presence_penalty,
            ))
            .push(TopK(p.top_k))
            .push(Typical { p: p.typical_p, min_keep: 1 })
            .push(TopP { p: p.top_p, min_keep: 1 })
            .push(MinP { p: p.min_p, min_keep: 1 })
            .push(Temperature(p.temp))
            .push(Dist::new(p.seed))
    }

    /// The steps' names joined by arrows, as llama.cpp prints its chain.
    pub fn describe(&self) -> String {
        self.steps.iter().map(|s| s.name()).collect::<Vec<_>>().join(" -> ")
    }

    /// Runs the chain on `logits` and returns the chosen token (greedy if no step chose).
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        if self.argmax_only {
            // Greedy's rule (the first largest) without a candidate list per token.
            let mut best = 0;
            for (i, &l) in logits.iter().enumerate() {
                if l > logits[best] {
                    best = i;
                }
            }
            return best as u32;
        }
        let mut cur = Candidates::from_logits(logits);
        for s in &mut self.steps {
            s.apply(&mut cur);
        }
        let i = match cur.selected {
            Some(i) => i,
            None => {
                Greedy.apply(&mut cur);
                cur.selected.unwrap_or(0)
            }
        };
        cur.data.get(i).map_or(0, |d| d.id)
    }

    /// Tells every step which token was chosen.
    pub fn accept(&mut self, token: u32) {
        for s in &mut self.steps {
            s.accept(token);
        }
    }
}

impl Default for SamplerChain {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
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
}
