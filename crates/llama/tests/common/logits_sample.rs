//! llama.cpp's last-prompt-position logits as the references store them: a `.logits.sample`
//! file (written by tools/pack_logits.py; format and estimator in testdata/refs/README.md,
//! "Logits files") instead of the full vector, which for 262,144-token vocabularies is a
//! megabyte a prompt.
//!
//! The file keeps what check 1 needs: the full vector's exact sum of squares (the NMSE's
//! denominator), the exact NMSE of llama.cpp's other attention path against it (the check's
//! allowance, unchanged), the top 256 entries and the minimum, and every `stride`-th value
//! (about 4,096 of them). [`LogitsSample::nmse_estimate`] estimates the full NMSE of a vector
//! against the reference from those; [`LogitsSample::nmse_lower_bound`] is a value the full
//! NMSE cannot be below, so an error confined to entries the file does not hold still shows.

use std::path::Path;

/// The file's first bytes.
pub const MAGIC: &[u8; 8] = b"TSLOGITS";
/// The format version this reader knows.
pub const VERSION: u32 = 1;
/// Entries kept exactly (the largest values).
pub const TOP: usize = 256;
/// About how many strided values are kept.
pub const SAMPLES: usize = 4096;
const HEAD: usize = 8 + 4 * 4 + 8 + 8 + 4;

/// One reference vector, sampled (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct LogitsSample {
    /// Length of the full vector (the vocabulary).
    pub n_vocab: usize,
    /// Distance between sampled indices: `max(1, n_vocab / 4096)`.
    pub stride: usize,
    /// Sum of the full vector's squares (f64, added in index order).
    pub sum_sq: f64,
    /// NMSE of the other attention path's full vector against this one, as the test computed
    /// it from both vectors (sum of squared differences over [`Self::sum_sq`]).
    pub other_nmse: f64,
    /// The smallest value of the full vector.
    pub min: f32,
    /// The largest entries, (index, value), by value descending, ties by index ascending.
    pub top: Vec<(u32, f32)>,
    /// `v[0], v[stride], v[2 * stride], ...` of the full vector `v`.
    pub sample: Vec<f32>,
}

fn sq(x: f64) -> f64 {
    x * x
}

impl LogitsSample {
    /// Samples the full vector `v`, with `other` the other attention path's (as
    /// tools/pack_logits.py does, bit for bit).
    pub fn from_full(v: &[f32], other: &[f32]) -> Self {
        assert_eq!(v.len(), other.len());
        let n = v.len();
        let stride = (n / SAMPLES).max(1);
        let sum_sq: f64 = v.iter().map(|&x| sq(f64::from(x))).sum();
        let diff: f64 = other.iter().zip(v).map(|(&a, &b)| sq(f64::from(a) - f64::from(b))).sum();
        let mut idx: Vec<u32> = (0..n as u32).collect();
        idx.sort_by(|&a, &b| v[b as usize].total_cmp(&v[a as usize]).then(a.cmp(&b)));
        Self {
            n_vocab: n,
            stride,
            sum_sq,
            other_nmse: diff / sum_sq,
            min: v.iter().copied().fold(f32::INFINITY, f32::min),
            top: idx.iter().take(TOP).map(|&i| (i, v[i as usize])).collect(),
            sample: v.iter().step_by(stride).copied().collect(),
        }
    }

    /// The file's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = MAGIC.to_vec();
        for x in [VERSION, self.n_vocab as u32, self.top.len() as u32, self.stride as u32] {
            b.extend(x.to_le_bytes());
        }
        b.extend(self.sum_sq.to_le_bytes());
        b.extend(self.other_nmse.to_le_bytes());
        b.extend(self.min.to_le_bytes());
        for &(i, v) in &self.top {
            b.extend(i.to_le_bytes());
            b.extend(v.to_le_bytes());
        }
        self.sample.iter().for_each(|v| b.extend(v.to_le_bytes()));
        b
    }

    /// Parses a file's bytes; `what` names it in errors.
    pub fn parse(b: &[u8], what: &str) -> Self {
        assert!(b.len() >= HEAD && &b[..8] == MAGIC, "{what}: not a logits sample file");
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap()) as usize;
        let f32_at = |o: usize| f32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        let f64_at = |o: usize| f64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        assert_eq!(u32_at(8), VERSION as usize, "{what}: format version");
        let (n_vocab, n_top, stride) = (u32_at(12), u32_at(16), u32_at(20));
        let n_sample = n_vocab.div_ceil(stride.max(1));
        assert_eq!(b.len(), HEAD + 8 * n_top + 4 * n_sample, "{what}: length");
        let top = (0..n_top)
            .map(|k| (u32_at(HEAD + 8 * k) as u32, f32_at(HEAD + 8 * k + 4)))
            .collect::<Vec<_>>();
        let at = HEAD + 8 * n_top;
        let s = Self {
            n_vocab,
            stride,
            sum_sq: f64_at(24),
            other_nmse: f64_at(32),
            min: f32_at(40),
            top,
            sample: (0..n_sample).map(|k| f32_at(at + 4 * k)).collect(),
        };
        assert!(
            s.stride == (n_vocab / SAMPLES).max(1) && n_top == TOP.min(n_vocab),
            "{what}: stride {} and {n_top} top entries for {n_vocab} values",
            s.stride
        );
        assert!(s.top.iter().all(|&(i, _)| (i as usize) < n_vocab), "{what}: top index");
        assert!(s.top.windows(2).all(|w| w[0].1 >= w[1].1), "{what}: top entries out of order");
        s
    }

    /// Reads a `.logits.sample` file.
    pub fn read(path: &Path) -> Self {
        let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        Self::parse(&b, &path.display().to_string())
    }

    /// Which indices the top entries hold.
    fn in_top(&self) -> Vec<bool> {
        let mut m = vec![false; self.n_vocab];
        self.top.iter().for_each(|&(i, _)| m[i as usize] = true);
        m
    }

    /// (sum of squared differences over the top entries, over the strided entries outside
    /// them, how many of those).
    fn strata(&self, got: &[f32], in_top: &[bool]) -> (f64, f64, usize) {
        assert_eq!(got.len(), self.n_vocab, "vocabulary size");
        let d = |i: usize, want: f32| sq(f64::from(got[i]) - f64::from(want));
        let top: f64 = self.top.iter().map(|&(i, v)| d(i as usize, v)).sum();
        let (mut rest, mut m) = (0.0, 0);
        for (k, &v) in self.sample.iter().enumerate() {
            let i = k * self.stride;
            if !in_top[i] {
                rest += d(i, v);
                m += 1;
            }
        }
        (top, rest, m)
    }

    /// A stratified estimate of the NMSE of `got` against the full reference vector: the
    /// squared differences of the top entries exactly, those of the other entries by the
    /// mean over their strided sample times their number, all over the exact sum of squares.
    /// Equals the full NMSE where the vector has no more than [`SAMPLES`] entries.
    pub fn nmse_estimate(&self, got: &[f32]) -> f64 {
        let (top, rest, m) = self.strata(got, &self.in_top());
        let n_rest = self.n_vocab - self.top.len();
        let rest = if m == 0 { 0.0 } else { rest * n_rest as f64 / m as f64 };
        (top + rest) / self.sum_sq
    }

    /// A value the full NMSE of `got` cannot be below: the stored entries' squared
    /// differences exactly, and for every other entry its squared distance to the interval
    /// its reference value lies in (between the minimum and the smallest top value). A large
    /// error at an entry the file does not hold (a logit Tessera puts far above llama.cpp's
    /// top entries, or far below llama.cpp's smallest) shows here even where the sample
    /// misses it.
    pub fn nmse_lower_bound(&self, got: &[f32]) -> f64 {
        let in_top = self.in_top();
        let (top, rest, _) = self.strata(got, &in_top);
        let (lo, hi) = (f64::from(self.min), f64::from(self.top.last().map_or(self.min, |t| t.1)));
        let unknown: f64 = (0..self.n_vocab)
            .filter(|&i| !in_top[i] && i % self.stride != 0)
            .map(|i| {
                let g = f64::from(got[i]);
                sq((lo - g).max(0.0) + (g - hi).max(0.0))
            })
            .sum();
        (top + rest + unknown) / self.sum_sq
    }
}
