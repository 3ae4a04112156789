//! Samplers (llama.cpp's `llama-sampler.cpp` and `common/sampling.cpp`): a chain of steps over
//! the candidate tokens, ending with greedy or a seeded random draw.
//!
//! The draw is llama.cpp's: probabilities from a float softmax summed in double, one
//! `std::uniform_real_distribution<double>` value from `std::mt19937(seed)` (two 32-bit
//! outputs, libstdc++'s `generate_canonical`), and the first candidate whose running sum
//! reaches `r * sum`. So a seed gives the same tokens as llama.cpp given the same logits.
//! A seed of [`DEFAULT_SEED`] (llama.cpp's `LLAMA_DEFAULT_SEED`, what `-1` becomes) draws a
//! random one, as llama.cpp's.
//!
//! A sequence's whole sampling step (bans, a grammar's mask, forced tokens, the chain, the
//! history) is [`SeqSampler`], which `tessera run` and the server's slots share.
//!
//! The chain's order is llama.cpp's configurable one ([`Step`], [`DEFAULT_ORDER`]), after its
//! [`LogitBias`] step.

mod adaptive;
mod bias;
mod dry;
mod order;
mod seq;
mod steps;

pub use adaptive::{Mirostat, MirostatV2, TempExt, TopNSigma, Xtc};
pub use bias::LogitBias;
pub use dry::Dry;
pub use order::{order_from_chars, order_from_names, Step, DEFAULT_ORDER};
pub use seq::{NoMask, Sampled, SeqSampler, TokenMask};
pub use steps::{Dist, Greedy, MinP, Penalties, Temperature, TopK, TopP, Typical};
use tessera_vocab::Vocab;

/// llama.cpp's `LLAMA_DEFAULT_SEED`: a [`Dist`] given this seed draws a random one.
pub const DEFAULT_SEED: u32 = u32::MAX;

/// A seed from the operating system's randomness (the standard library's per-process hash
/// keys, mixed with the clock and a counter), never [`DEFAULT_SEED`].
pub fn random_seed() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    h.write_u128(now.map_or(0, |d| d.as_nanos()));
    let v = h.finish();
    let s = (v ^ (v >> 32)) as u32;
    if s == DEFAULT_SEED {
        0
    } else {
        s
    }
}

/// `seed`, or a random one for [`DEFAULT_SEED`] (llama.cpp's `get_rng_seed`).
pub fn resolve_seed(seed: u32) -> u32 {
    if seed == DEFAULT_SEED {
        random_seed()
    } else {
        seed
    }
}

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
    /// Scratch of `top_k`, kept with the candidates between tokens.
    keys: Vec<f32>,
}

impl Candidates {
    /// Every token of the vocabulary with its logit.
    pub fn from_logits(logits: &[f32]) -> Self {
        let mut c = Candidates::default();
        c.refill(logits);
        c
    }

    /// Every token of the vocabulary with its logit, in the vectors already held (a chain
    /// keeps its candidates between tokens: no allocation of the vocabulary's size a token).
    pub fn refill(&mut self, logits: &[f32]) {
        self.data.clear();
        self.data.extend(logits.iter().enumerate().map(|(i, &l)| TokenData {
            id: i as u32,
            logit: l,
            p: 0.0,
        }));
        self.sorted = false;
        self.selected = None;
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
        let mut keys = std::mem::take(&mut self.keys);
        keys.clear();
        keys.extend(self.data.iter().map(|d| d.logit));
        let kth = *keys.select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a)).1;
        self.keys = keys;
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

    /// `std::uniform_real_distribution<float>(0, 1)(*this)` as libstdc++ computes it: one
    /// output, rounded to float, over 2^32 (below 1).
    pub fn next_f32(&mut self) -> f32 {
        let x = self.next_u32() as f32 / 4_294_967_296.0f32;
        if x >= 1.0 {
            1.0 - f32::EPSILON / 2.0
        } else {
            x
        }
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
    /// RNG seed ([`DEFAULT_SEED`]: a random one).
    pub seed: u32,
    /// Candidates top-p, min-p, typical and XTC always keep (0: no minimum).
    pub min_keep: usize,
    /// Dynamic temperature's half range (0: off).
    pub dynatemp_range: f32,
    /// Dynamic temperature's exponent.
    pub dynatemp_exponent: f32,
    /// XTC's chance per token (0: off).
    pub xtc_probability: f32,
    /// XTC's threshold (> 0.5: off).
    pub xtc_threshold: f32,
    /// Top-n-σ (≤ 0: off).
    pub top_n_sigma: f32,
    /// DRY's multiplier (0: off).
    pub dry_multiplier: f32,
    /// DRY's base.
    pub dry_base: f32,
    /// Repetitions DRY lets pass.
    pub dry_allowed_length: i32,
    /// Tokens DRY looks back over (0: off).
    pub dry_penalty_last_n: i32,
    /// DRY's sequence breakers.
    pub dry_sequence_breakers: Vec<String>,
    /// Mirostat: 0 off, 1 or 2 (then the chain is temperature and mirostat only, as
    /// llama.cpp's).
    pub mirostat: u8,
    /// Mirostat's target surprise.
    pub mirostat_tau: f32,
    /// Mirostat's learning rate.
    pub mirostat_eta: f32,
}

impl SamplingParams {
    /// Whether the chain in `order` reduces to the argmax of the logits: temperature at or
    /// below 0 in the order (which keeps only the first largest candidate, and every step
    /// before it keeps that one) and penalties that change nothing.
    pub fn is_greedy(&self, order: &[Step]) -> bool {
        let neutral = self.repeat_last_n == 0
            || (self.repeat_penalty == 1.0
                && self.frequency_penalty == 0.0
                && self.presence_penalty == 0.0);
        let dry_off = self.dry_multiplier == 0.0 || !order.contains(&Step::Dry);
        self.temp <= 0.0
            && self.mirostat == 0
            && self.dynatemp_range <= 0.0
            && order.contains(&Step::Temperature)
            && neutral
            && dry_off
    }
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
            seed: DEFAULT_SEED,
            min_keep: 0,
            dynatemp_range: 0.0,
            dynatemp_exponent: 1.0,
            xtc_probability: 0.0,
            xtc_threshold: 0.1,
            top_n_sigma: -1.0,
            dry_multiplier: 0.0,
            dry_base: 1.75,
            dry_allowed_length: 2,
            dry_penalty_last_n: 64,
            dry_sequence_breakers: ["\n", ":", "\"", "*"].map(String::from).to_vec(),
            mirostat: 0,
            mirostat_tau: 5.0,
            mirostat_eta: 0.1,
        }
    }
}

/// A chain of samplers; the last one picks the token.
pub struct SamplerChain {
    steps: Vec<Box<dyn Sampler>>,
    /// The seed of the chain's random draw, if it has one.
    seed: Option<u32>,
    /// The chain is exactly [`SamplerChain::greedy`]'s: `sample` takes the argmax of the
    /// logits without building candidates (the same token).
    argmax_only: bool,
    /// The candidates' vectors, kept between tokens.
    spare: Candidates,
}

impl std::fmt::Debug for SamplerChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

impl SamplerChain {
    /// An empty chain.
    pub fn new() -> Self {
        SamplerChain {
            steps: Vec::new(),
            seed: None,
            argmax_only: false,
            spare: Candidates::default(),
        }
    }

    /// Appends a step.
    pub fn push(mut self, s: impl Sampler + 'static) -> Self {
        self.steps.push(Box::new(s));
        self.argmax_only = false;
        self
    }

    /// Whether the chain is exactly [`greedy`](Self::greedy)'s: its token is the logits'
    /// argmax, whatever came before (so an argmax computed elsewhere, on the device, is it).
    pub fn is_argmax_only(&self) -> bool {
        self.argmax_only
    }

    /// Plain argmax.
    pub fn greedy() -> Self {
        let mut chain = SamplerChain::new().push(Greedy);
        chain.argmax_only = true;
        chain
    }

    /// llama.cpp's common chain in its default order: penalties → top-k → typical → top-p →
    /// min-p → temperature → dist.
    pub fn from_params(p: &SamplingParams) -> Self {
        Self::ordered(p, &DEFAULT_ORDER, &[], None).expect("the default order has only built steps")
    }

    /// llama.cpp's common chain (`common_sampler_init`) with the steps in `order` and a logit
    /// bias first (when `bias` is not empty), ending in the seeded draw; with `mirostat` 1 or
    /// 2, llama.cpp's mirostat chain instead (bias, temperature, mirostat). `vocab` turns
    /// DRY's sequence breakers into tokens and gives mirostat 1 the vocabulary's size (without
    /// it, DRY with breakers is an error). The infill and adaptive-p steps are not built: the
    /// error names them.
    pub fn ordered(
        p: &SamplingParams,
        order: &[Step],
        bias: &[(u32, f32)],
        vocab: Option<&Vocab>,
    ) -> Result<Self, String> {
        let mut chain = SamplerChain::new();
        if !bias.is_empty() {
            chain = chain.push(LogitBias { bias: bias.to_vec() });
        }
        if p.mirostat != 0 {
            let seed = resolve_seed(p.seed);
            chain = chain.push(Temperature(p.temp));
            chain = match p.mirostat {
                1 => {
                    let n_vocab = vocab.ok_or("mirostat 1 needs the vocabulary's size")?.n_tokens();
                    chain.push(Mirostat::new(n_vocab, seed, p.mirostat_tau, p.mirostat_eta, 100))
                }
                2 => chain.push(MirostatV2::new(seed, p.mirostat_tau, p.mirostat_eta)),
                m => return Err(format!("mirostat {m}: give 0 (off), 1 or 2")),
            };
            chain.seed = Some(seed);
            return Ok(chain);
        }
        for &step in order {
            chain = match step {
                Step::Penalties => chain.push(Penalties::new(
                    p.repeat_last_n,
                    p.repeat_penalty,
                    p.frequency_penalty,
                    p.presence_penalty,
                )),
                // Steps that are off are left out (llama.cpp's empty `?dry`, `?xtc`, ...).
                Step::Dry => match dry_step(p, vocab)? {
                    Some(dry) => chain.push(dry),
                    None => chain,
                },
                Step::TopNSigma if p.top_n_sigma > 0.0 => chain.push(TopNSigma(p.top_n_sigma)),
                Step::TopNSigma => chain,
                Step::TopK => chain.push(TopK(p.top_k)),
                Step::Typical => chain.push(Typical { p: p.typical_p, min_keep: p.min_keep }),
                Step::TopP => chain.push(TopP { p: p.top_p, min_keep: p.min_keep }),
                Step::MinP => chain.push(MinP { p: p.min_p, min_keep: p.min_keep }),
                Step::Xtc if p.xtc_probability > 0.0 && p.xtc_threshold <= 0.5 => {
                    chain.push(Xtc::new(p.xtc_probability, p.xtc_threshold, p.min_keep, p.seed))
                }
                Step::Xtc => chain,
                Step::Temperature if p.dynatemp_range > 0.0 => chain.push(TempExt {
                    temp: p.temp,
                    delta: p.dynatemp_range,
                    exponent: p.dynatemp_exponent,
                }),
                Step::Temperature => chain.push(Temperature(p.temp)),
                s => return Err(format!("the '{}' sampler is not available yet", s.name())),
            };
        }
        // Each seeded step resolves the seed itself, as llama.cpp's: with DEFAULT_SEED, XTC
        // and the draw get random seeds of their own.
        let dist = Dist::new(p.seed);
        let seed = dist.seed();
        let mut chain = chain.push(dist);
        chain.seed = Some(seed);
        Ok(chain)
    }

    /// [`SamplerChain::ordered`], or [`SamplerChain::greedy`] where that picks the same tokens
    /// ([`SamplingParams::is_greedy`] and no bias) without building candidates.
    pub fn for_params(
        p: &SamplingParams,
        order: &[Step],
        bias: &[(u32, f32)],
        vocab: Option<&Vocab>,
    ) -> Result<Self, String> {
        if bias.is_empty() && p.is_greedy(order) {
            Ok(SamplerChain::greedy())
        } else {
            Self::ordered(p, order, bias, vocab)
        }
    }

    /// The seed of the chain's random draw (`llama_sampler_get_seed`; `None` for greedy).
    pub fn seed(&self) -> Option<u32> {
        self.seed
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
        let mut cur = std::mem::take(&mut self.spare);
        cur.refill(logits);
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
        let id = cur.data.get(i).map_or(0, |d| d.id);
        self.spare = cur;
        id
    }

    /// Tells every step which token was chosen.
    pub fn accept(&mut self, token: u32) {
        for s in &mut self.steps {
            s.accept(token);
        }
    }
}

/// The DRY step of `p`, `None` when it is off.
fn dry_step(p: &SamplingParams, vocab: Option<&Vocab>) -> Result<Option<Dry>, String> {
    let on = p.dry_multiplier != 0.0 && p.dry_base >= 1.0 && p.dry_penalty_last_n > 0;
    let (m, b, a, n) = (p.dry_multiplier, p.dry_base, p.dry_allowed_length, p.dry_penalty_last_n);
    match vocab {
        _ if !on => Ok(None),
        Some(v) => Ok(Some(Dry::new(m, b, a, n, &p.dry_sequence_breakers, v))),
        None if p.dry_sequence_breakers.iter().any(|s| !s.is_empty()) => {
            Err("DRY's sequence breakers need the vocabulary".into())
        }
        None => Ok(Some(Dry::with_token_breakers(m, b, a, n, &[]))),
    }
}

impl Default for SamplerChain {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests;
