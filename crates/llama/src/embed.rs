//! Sentence embeddings (llama.cpp's `embeddings = true` contexts): the final-norm hidden
//! states of a sequence's tokens, pooled into one vector, and normalized as llama.cpp's
//! `common_embd_normalize` does.
//!
//! A context made with [`ContextParams::embeddings`](crate::ContextParams::embeddings) skips
//! the LM head and keeps, for every token flagged in the batch, its row of the output norm
//! (`result_norm`, llama.cpp's `t_embd`). Pooling is done here on the host, in f32, over those
//! rows: the same values llama.cpp's pooling graph computes (a mean is a sum then a scale there
//! too), with summation order the only difference.

use crate::{LlamaError, Result};

/// How a sequence's token rows become one vector (llama.cpp's `llama_pooling_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooling {
    /// No pooling: one vector per token.
    None,
    /// The mean of the token rows.
    Mean,
    /// The first token's row (BERT's `[CLS]`).
    Cls,
    /// The last token's row (decoder models trained for embeddings, e.g. Qwen3-Embedding).
    Last,
    /// A reranker's score head: not supported by Tessera.
    Rank,
}

impl Pooling {
    /// The value of the `{arch}.pooling_type` key (0 none, 1 mean, 2 cls, 3 last, 4 rank).
    pub fn from_gguf(v: u64) -> Option<Pooling> {
        Some(match v {
            0 => Pooling::None,
            1 => Pooling::Mean,
            2 => Pooling::Cls,
            3 => Pooling::Last,
            4 => Pooling::Rank,
            _ => return None,
        })
    }

    /// The name llama.cpp's `--pooling` takes.
    pub fn name(self) -> &'static str {
        match self {
            Pooling::None => "none",
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
            Pooling::Last => "last",
            Pooling::Rank => "rank",
        }
    }

    /// Parses `--pooling`'s value.
    pub fn parse(s: &str) -> Result<Pooling> {
        Ok(match s {
            "none" => Pooling::None,
            "mean" => Pooling::Mean,
            "cls" => Pooling::Cls,
            "last" => Pooling::Last,
            "rank" => Pooling::Rank,
            _ => {
                return Err(LlamaError::Setting {
                    flag: format!("--pooling {s}"),
                    reason: "expected none, mean, cls, last or rank".into(),
                })
            }
        })
    }

    /// Which of a sequence's `n` tokens must produce a row (all of them for mean and none).
    pub fn wants_row(self, i: usize, n: usize) -> bool {
        match self {
            Pooling::Cls => i == 0,
            Pooling::Last => i + 1 == n,
            _ => true,
        }
    }

    /// Pools the rows (`n_embd` values each) a sequence produced, in token order, as
    /// [`wants_row`](Self::wants_row) asked for them; `None` (and `Rank`) return them all.
    pub fn pool(self, rows: &[f32], n_embd: usize) -> Vec<f32> {
        let n = rows.len() / n_embd.max(1);
        match self {
            Pooling::Mean if n > 0 => {
                let mut sum = vec![0f32; n_embd];
                for row in rows.chunks_exact(n_embd) {
                    for (s, &x) in sum.iter_mut().zip(row) {
                        *s += x;
                    }
                }
                let inv = 1.0 / n as f32;
                sum.iter_mut().for_each(|s| *s *= inv);
                sum
            }
            Pooling::Cls => rows[..n_embd.min(rows.len())].to_vec(),
            Pooling::Last => rows[rows.len().saturating_sub(n_embd)..].to_vec(),
            _ => rows.to_vec(),
        }
    }
}

impl std::fmt::Display for Pooling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Scales `v` as llama.cpp's `common_embd_normalize(v, norm)`: -1 leaves it, 0 scales the
/// largest magnitude to 32760 (int16 range), 1 divides by the sum of magnitudes, 2 by the
/// Euclidean norm (the default of llama-server's embeddings), `p > 2` by the p-norm. A zero
/// vector stays zero.
pub fn normalize(v: &mut [f32], norm: i32) {
    let sum: f64 = match norm {
        n if n < 0 => return,
        0 => v.iter().fold(0f64, |m, &x| m.max(f64::from(x.abs()))) / 32760.0,
        1 => v.iter().map(|&x| f64::from(x.abs())).sum(),
        2 => v.iter().map(|&x| f64::from(x) * f64::from(x)).sum::<f64>().sqrt(),
        p => v.iter().map(|&x| f64::from(x.abs()).powi(p)).sum::<f64>().powf(1.0 / f64::from(p)),
    };
    let scale = if sum > 0.0 { (1.0 / sum) as f32 } else { 0.0 };
    v.iter_mut().for_each(|x| *x *= scale);
}

/// Cosine similarity of two vectors (0 when either is zero).
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let (mut ab, mut aa, mut bb) = (0f64, 0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        ab += f64::from(x) * f64::from(y);
        aa += f64::from(x) * f64::from(x);
        bb += f64::from(y) * f64::from(y);
    }
    if aa == 0.0 || bb == 0.0 {
        0.0
    } else {
        (ab / (aa.sqrt() * bb.sqrt())) as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pooling_picks_and_averages_rows() {
        let rows = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        assert_eq!(Pooling::Mean.pool(&rows, 2), vec![3.0, 4.0]);
        assert_eq!(Pooling::Cls.pool(&rows[..2], 2), vec![1.0, 2.0]);
        assert_eq!(Pooling::Last.pool(&rows[4..], 2), vec![5.0, 6.0]);
        assert_eq!(Pooling::None.pool(&rows, 2), rows.to_vec());
        assert!(Pooling::Cls.wants_row(0, 3) && !Pooling::Cls.wants_row(1, 3));
        assert!(Pooling::Last.wants_row(2, 3) && !Pooling::Last.wants_row(1, 3));
        assert!((0..3).all(|i| Pooling::Mean.wants_row(i, 3)));
    }

    #[test]
    fn names_round_trip_and_bad_names_are_refused() {
        for p in [Pooling::None, Pooling::Mean, Pooling::Cls, Pooling::Last, Pooling::Rank] {
            assert_eq!(Pooling::parse(p.name()).unwrap(), p);
        }
        assert_eq!(Pooling::from_gguf(3), Some(Pooling::Last));
        assert_eq!(Pooling::from_gguf(9), None);
        assert!(Pooling::parse("max").unwrap_err().to_string().contains("--pooling max"));
    }

    #[test]
    fn normalizations_match_llama_cpp() {
        let mut v = [3.0f32, -4.0];
        normalize(&mut v, 2);
        assert_eq!(v, [0.6, -0.8]);
        let mut v = [3.0f32, -4.0];
        normalize(&mut v, 1);
        assert!((v[0] - 3.0 / 7.0).abs() < 1e-7 && (v[1] + 4.0 / 7.0).abs() < 1e-7);
        let mut v = [3.0f32, -4.0];
        normalize(&mut v, 0);
        assert!((v[1] + 32760.0).abs() < 1e-2);
        let mut v = [3.0f32, -4.0];
        normalize(&mut v, -1);
        assert_eq!(v, [3.0, -4.0]);
        let mut z = [0.0f32; 3];
        normalize(&mut z, 2);
        assert_eq!(z, [0.0; 3]);
        assert!((cosine(&[1.0, 0.0], &[1.0, 1.0]) - std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-6);
    }
}
