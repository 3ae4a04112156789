//! llama-perplexity's KL-divergence files and statistics, so Tessera and llama.cpp can be
//! compared in either direction (`--kl-divergence-base FILE` writes one, `--kl-divergence`
//! reads one).
//!
//! File: `"_logits_"`, `n_ctx` (i32), `n_vocab` (i32), `n_chunk` (i32), the `n_ctx · n_chunk`
//! evaluated tokens (i32), then per chunk, for each of its last `n_ctx - 1 - n_ctx/2` positions,
//! `nv = 2·⌈n_vocab/2⌉ + 4` u16: two f32 (`scale`, `min_log_prob`) and the log-probabilities
//! quantized to 16 bits over the top 16 nats (`nearest_int((logit - min_logit)/scale)`).

use anyhow::{bail, Context as _, Result};
use std::io::{Read, Write};

/// u16 slots per position.
pub fn row_len(n_vocab: usize) -> usize {
    2 * n_vocab.div_ceil(2) + 4
}

/// ggml's `nearest_int` (round half to even through the 1.5·2²³ trick).
fn nearest_int(v: f32) -> i32 {
    let x = v + 12_582_912.0;
    (x.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

/// `Σ exp(l - max)` in f64 with f32 exponentials, and the maximum and its index.
fn softmax_parts(logits: &[f32]) -> (f32, usize, f64) {
    let (mut max, mut imax) = (logits[0], 0);
    for (i, &l) in logits.iter().enumerate().skip(1) {
        if l > max {
            (max, imax) = (l, i);
        }
    }
    let sum: f64 = logits.iter().map(|&l| f64::from((l - max).exp())).sum();
    (max, imax, sum)
}

/// Encodes one position's log-probabilities into `out` (`row_len` u16) and returns the
/// negative log-likelihood of `tok` (llama-perplexity's writing `log_softmax`).
pub fn encode(logits: &[f32], tok: usize, out: &mut [u16]) -> f64 {
    let (max, _, sum) = softmax_parts(logits);
    let min = logits.iter().copied().fold(logits[0], f32::min).max(max - 16.0);
    let log_sum = sum.ln() as f32;
    let min_log_prob = min - max - log_sum;
    let scale = (max - min) / 65535.0;
    let (head, q) = out.split_at_mut(4);
    let s = scale.to_le_bytes();
    let m = min_log_prob.to_le_bytes();
    head[0] = u16::from_le_bytes([s[0], s[1]]);
    head[1] = u16::from_le_bytes([s[2], s[3]]);
    head[2] = u16::from_le_bytes([m[0], m[1]]);
    head[3] = u16::from_le_bytes([m[2], m[3]]);
    if scale != 0.0 {
        let inv = 1.0 / scale;
        for (o, &l) in q.iter_mut().zip(logits) {
            *o = if l > min { nearest_int(inv * (l - min)) as u16 } else { 0 };
        }
    } else {
        q.iter_mut().for_each(|o| *o = 0);
    }
    f64::from(max + log_sum - logits[tok])
}

/// Running sums of a comparison (`kl_divergence_result`).
#[derive(Debug, Default, Clone)]
pub struct Kld {
    sum_nll: f64,
    sum_nll2: f64,
    sum_nll_base: f64,
    sum_nll_base2: f64,
    sum_nll_nll_base: f64,
    sum_kld: f64,
    sum_kld2: f64,
    sum_p_diff: f64,
    sum_p_diff2: f64,
    sum_p_diff4: f64,
    max_p_diff: f32,
    n_same_top: usize,
    count: usize,
    kld_values: Vec<f32>,
    p_diff_values: Vec<f32>,
}

impl Kld {
    /// Adds one position: this model's `logits`, the base's encoded row, the next token.
    pub fn add(&mut self, logits: &[f32], base: &[u16], tok: usize) {
        let (max, imax, sum) = softmax_parts(logits);
        let log_sum = sum.ln() as f32;
        let f = |i: usize| {
            f32::from_le_bytes([
                base[i] as u8,
                (base[i] >> 8) as u8,
                base[i + 1] as u8,
                (base[i + 1] >> 8) as u8,
            ])
        };
        let (scale, min_log_prob) = (f(0), f(2));
        let q = &base[4..];
        let nll = max + log_sum - logits[tok];
        self.sum_nll += f64::from(nll);
        self.sum_nll2 += f64::from(nll * nll);
        let nll_base = -(scale * f32::from(q[tok]) + min_log_prob);
        self.sum_nll_base += f64::from(nll_base);
        self.sum_nll_base2 += f64::from(nll_base * nll_base);
        self.sum_nll_nll_base += f64::from(nll * nll_base);
        let lse = max + log_sum;
        let (mut kl, mut imax_base, mut pmax) = (0f64, 0usize, 0f32);
        for (i, (&qi, &l)) in q.iter().zip(logits).enumerate() {
            let pb = scale * f32::from(qi) + min_log_prob;
            if i == 0 || pb > pmax {
                (pmax, imax_base) = (pb, i);
            }
            if pb > -16.0 {
                kl += f64::from(pb.exp() * (pb - l + lse));
            }
        }
        self.sum_kld += kl;
        self.sum_kld2 += kl * kl;
        self.count += 1;
        if imax == imax_base {
            self.n_same_top += 1;
        }
        let p_diff = (-nll).exp() - (-nll_base).exp();
        self.sum_p_diff += f64::from(p_diff);
        let d2 = f64::from(p_diff) * f64::from(p_diff);
        self.sum_p_diff2 += d2;
        self.sum_p_diff4 += d2 * d2;
        self.max_p_diff = self.max_p_diff.max(p_diff.abs());
        self.kld_values.push(kl as f32);
        self.p_diff_values.push(p_diff);
    }

    /// Mean KL divergence.
    #[cfg(test)]
    pub fn mean_kld(&self) -> f64 {
        self.sum_kld / self.count.max(1) as f64
    }

    /// Fraction of positions with the same top token.
    pub fn same_top(&self) -> f64 {
        self.n_same_top as f64 / self.count.max(1) as f64
    }

    /// Means and uncertainties of ln PPL(Q), ln PPL(base), and their covariance.
    fn log_ppls(&self) -> ((f64, f64), (f64, f64), f64) {
        let n = self.count;
        let lp = mu(self.sum_nll, self.sum_nll2, n);
        let lb = mu(self.sum_nll_base, self.sum_nll_base2, n);
        let cov = if n < 10 {
            0.0
        } else {
            (self.sum_nll_nll_base / n as f64 - lp.0 * lb.0) / (n - 1) as f64
        };
        (lp, lb, cov)
    }

    /// One line of the per-chunk table.
    pub fn chunk_line(&self, chunk: usize) -> String {
        let (lp, lb, cov) = self.log_ppls();
        let ratio_u = (lp.1 * lp.1 + lb.1 * lb.1 - 2.0 * cov).max(0.0).sqrt();
        let kl = mu(self.sum_kld, self.sum_kld2, self.count);
        let rms = mu(self.sum_p_diff2, self.sum_p_diff4, self.count);
        let (p, dp) = self.top();
        format!(
            "{chunk:4}    {:8.4} ± {:10.4}    {:10.5} ± {:10.5}    {:10.5} ± {:10.5}    {:.3} ± {:.3} %    {:.3} ± {:.3} %",
            lp.0.exp(),
            lp.0.exp() * lp.1,
            lp.0 - lb.0,
            ratio_u,
            kl.0,
            kl.1,
            100.0 * rms.0.sqrt(),
            100.0 * 0.5 / rms.0.sqrt().max(f64::MIN_POSITIVE) * rms.1,
            100.0 * p,
            100.0 * dp
        )
    }

    fn top(&self) -> (f64, f64) {
        let p = self.same_top();
        (p, (p * (1.0 - p) / (self.count.max(2) - 1) as f64).sqrt())
    }

    /// llama-perplexity's closing statistics blocks.
    pub fn report(&self) -> String {
        let n = self.count;
        let (lp, lb, cov) = self.log_ppls();
        let cor = cov / (lp.1 * lb.1);
        let (ppl, ppl_b) = (lp.0.exp(), lb.0.exp());
        let (ppl_u, ppl_bu) = (ppl * lp.1, ppl_b * lb.1);
        let ratio = lp.0 - lb.0;
        let ratio_u = (lp.1 * lp.1 + lb.1 * lb.1 - 2.0 * cov).max(0.0).sqrt();
        let ppl_cov = ppl * ppl_b * cov;
        let diff_u = (ppl_u * ppl_u + ppl_bu * ppl_bu - 2.0 * ppl_cov).max(0.0).sqrt();
        let mut s = String::new();
        let mut w = |l: String| {
            s.push_str(&l);
            s.push('\n');
        };
        w("====== Perplexity statistics ======".into());
        w(format!("Mean PPL(Q)                   : {ppl:10.6} ± {ppl_u:10.6}"));
        w(format!("Mean PPL(base)                : {ppl_b:10.6} ± {ppl_bu:10.6}"));
        w(format!("Cor(ln(PPL(Q)), ln(PPL(base))): {:6.2}%", 100.0 * cor));
        w(format!("Mean ln(PPL(Q)/PPL(base))     : {ratio:10.6} ± {ratio_u:10.6}"));
        w(format!(
            "Mean PPL(Q)/PPL(base)         : {:10.6} ± {:10.6}",
            ratio.exp(),
            ratio.exp() * ratio_u
        ));
        w(format!("Mean PPL(Q)-PPL(base)         : {:10.6} ± {:10.6}", ppl - ppl_b, diff_u));
        w(String::new());
        let kl = mu(self.sum_kld, self.sum_kld2, n);
        let mut k = self.kld_values.clone();
        k.sort_by(f32::total_cmp);
        w("====== KL divergence statistics ======".into());
        w(format!("Mean    KLD: {:10.6} ± {:10.6}", kl.0, kl.1));
        w(format!("Maximum KLD: {:10.6}", k.last().copied().unwrap_or(0.0)));
        for (label, f) in [("99.9%", 0.999), ("99.0%", 0.99), ("95.0%", 0.95), ("90.0%", 0.9)] {
            w(format!("{label}   KLD: {:10.6}", percentile(&k, f)));
        }
        w(format!("Median  KLD: {:10.6}", percentile(&k, 0.5)));
        for (label, f) in [("10.0%", 0.1), (" 5.0%", 0.05), (" 1.0%", 0.01), (" 0.1%", 0.001)] {
            w(format!("{label}   KLD: {:10.6}", percentile(&k, f)));
        }
        w(format!("Minimum KLD: {:10.6}", k.first().copied().unwrap_or(0.0)));
        w(String::new());
        let dp = mu(self.sum_p_diff, self.sum_p_diff2, n);
        let mut d = self.p_diff_values.clone();
        d.sort_by(f32::total_cmp);
        w("====== Token probability statistics ======".into());
        w(format!("Mean    Δp: {:6.3} ± {:5.3} %", 100.0 * dp.0, 100.0 * dp.1));
        w(format!("Maximum Δp: {:6.3}%", 100.0 * d.last().copied().unwrap_or(0.0)));
        for (label, f) in
            [("99.9%", 0.999), ("99.0%", 0.99), ("95.0%", 0.95), ("90.0%", 0.9), ("75.0%", 0.75)]
        {
            w(format!("{label}   Δp: {:6.3}%", 100.0 * percentile(&d, f)));
        }
        w(format!("Median  Δp: {:6.3}%", 100.0 * percentile(&d, 0.5)));
        for (label, f) in
            [("25.0%", 0.25), ("10.0%", 0.1), (" 5.0%", 0.05), (" 1.0%", 0.01), (" 0.1%", 0.001)]
        {
            w(format!("{label}   Δp: {:6.3}%", 100.0 * percentile(&d, f)));
        }
        w(format!("Minimum Δp: {:6.3}%", 100.0 * d.first().copied().unwrap_or(0.0)));
        let rms = mu(self.sum_p_diff2, self.sum_p_diff4, n);
        let r = rms.0.sqrt();
        w(format!(
            "RMS Δp    : {:6.3} ± {:5.3} %",
            100.0 * r,
            100.0 * 0.5 / r.max(f64::MIN_POSITIVE) * rms.1
        ));
        let (p, dpt) = self.top();
        w(format!("Same top p: {:6.3} ± {:5.3} %", 100.0 * p, 100.0 * dpt));
        s
    }
}

/// llama-perplexity's `mean_and_uncertainty`.
fn mu(sum: f64, sum2: f64, count: usize) -> (f64, f64) {
    if count < 1 {
        return (0.0, 0.0);
    }
    let f = sum / count as f64;
    let df = sum2 / count as f64 - f * f;
    (f, if df > 0.0 && count > 10 { (df / (count - 1) as f64).sqrt() } else { 0.0 })
}

/// Linear interpolation between sorted values, as llama-perplexity's `percentile`.
fn percentile(v: &[f32], fraction: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    if fraction <= 0.0 {
        return f64::from(v[0]);
    }
    if fraction >= 1.0 {
        return f64::from(v[v.len() - 1]);
    }
    let p = fraction * (v.len() - 1) as f64;
    let ip = p as usize;
    let t = p - ip as f64;
    (1.0 - t) * f64::from(v[ip]) + t * f64::from(v[(ip + 1).min(v.len() - 1)])
}

/// A base file opened for reading.
pub struct BaseReader {
    r: std::io::BufReader<std::fs::File>,
    /// Tokens per chunk.
    pub n_ctx: usize,
    /// Vocabulary size.
    pub n_vocab: usize,
    /// Chunks.
    pub n_chunk: usize,
    /// The evaluated tokens.
    pub tokens: Vec<u32>,
}

fn read_i32(r: &mut impl Read) -> std::io::Result<i32> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b)?;
    Ok(i32::from_le_bytes(b))
}

impl BaseReader {
    /// Opens and checks a base file's header.
    pub fn open(path: &std::path::Path) -> Result<BaseReader> {
        let f = std::fs::File::open(path).with_context(|| format!("{}", path.display()))?;
        let len = f.metadata()?.len();
        let mut r = std::io::BufReader::new(f);
        let mut magic = [0u8; 8];
        r.read_exact(&mut magic).with_context(|| format!("{}: too short", path.display()))?;
        if &magic != b"_logits_" {
            bail!(
                "{}: not a llama-perplexity log-probability file (no _logits_ header)",
                path.display()
            );
        }
        let (n_ctx, n_vocab, n_chunk) = (read_i32(&mut r)?, read_i32(&mut r)?, read_i32(&mut r)?);
        if n_ctx < 8 || n_vocab < 1 || n_chunk < 1 {
            bail!(
                "{}: bad header (n_ctx {n_ctx}, n_vocab {n_vocab}, n_chunk {n_chunk})",
                path.display()
            );
        }
        let (n_ctx, n_vocab, n_chunk) = (n_ctx as usize, n_vocab as usize, n_chunk as usize);
        let per_chunk = (n_ctx - 1 - n_ctx / 2) as u64 * row_len(n_vocab) as u64 * 2;
        let need = 20 + 4 * (n_ctx * n_chunk) as u64 + per_chunk * n_chunk as u64;
        if len < need {
            bail!("{}: {len} bytes, the header promises {need}", path.display());
        }
        let mut tokens = Vec::with_capacity(n_ctx * n_chunk);
        for _ in 0..n_ctx * n_chunk {
            let t = read_i32(&mut r)?;
            if t < 0 || t as usize >= n_vocab {
                bail!("{}: token {t} outside the vocabulary of {n_vocab}", path.display());
            }
            tokens.push(t as u32);
        }
        Ok(BaseReader { r, n_ctx, n_vocab, n_chunk, tokens })
    }

    /// The next chunk's encoded rows (`(n_ctx - 1 - n_ctx/2) · row_len` u16).
    pub fn next_chunk(&mut self) -> Result<Vec<u16>> {
        let n = (self.n_ctx - 1 - self.n_ctx / 2) * row_len(self.n_vocab);
        let mut bytes = vec![0u8; n * 2];
        self.r.read_exact(&mut bytes)?;
        Ok(bytes.chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect())
    }
}

/// Writes a base file's header and tokens.
pub fn write_header(
    w: &mut impl Write,
    n_ctx: usize,
    n_vocab: usize,
    n_chunk: usize,
    tokens: &[u32],
) -> Result<()> {
    w.write_all(b"_logits_")?;
    for v in [n_ctx, n_vocab, n_chunk] {
        w.write_all(&(v as i32).to_le_bytes())?;
    }
    for &t in &tokens[..n_ctx * n_chunk] {
        w.write_all(&(t as i32).to_le_bytes())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_against_its_own_file_has_zero_divergence() {
        let logits: Vec<f32> = (0..101).map(|i| ((i * 7 % 13) as f32) * 0.5 - 2.0).collect();
        let mut row = vec![0u16; row_len(101)];
        let nll = encode(&logits, 3, &mut row);
        let mut k = Kld::default();
        k.add(&logits, &row, 3);
        assert!(k.mean_kld().abs() < 1e-4, "{}", k.mean_kld());
        assert!((k.sum_nll - nll).abs() < 1e-4);
        assert_eq!(k.same_top(), 1.0);
        assert_eq!(nearest_int(2.5), 2);
        assert_eq!(nearest_int(3.5), 4);
    }
}
