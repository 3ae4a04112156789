//! The sampler flags of `tessera run`, named and defaulted as llama.cpp's common sampling
//! flags: the chain's steps (penalties, DRY, top-n-σ, top-k, typical, top-p, min-p, XTC,
//! temperature with its dynamic range), mirostat, `--logit-bias`, `--samplers` and
//! `--sampling-seq` to order the chain, and the seed.

use anyhow::{anyhow, bail, Result};
use clap::Args;
use tessera_llama::sampling::{
    order_from_chars, order_from_names, SamplerChain, SamplingParams, Step, DEFAULT_ORDER,
    DEFAULT_SEED,
};
use tessera_llama::Vocab;

/// Sampling options (llama.cpp's names and defaults).
#[derive(Args, Debug, Clone)]
pub struct SamplingArgs {
    /// Temperature (0 or below: greedy).
    #[arg(long, default_value_t = 0.8, allow_negative_numbers = true)]
    pub temp: f32,
    /// Top-k (0: off).
    #[arg(long = "top-k", default_value_t = 40)]
    top_k: usize,
    /// Top-p (1: off).
    #[arg(long = "top-p", default_value_t = 0.95)]
    top_p: f32,
    /// Min-p (0: off).
    #[arg(long = "min-p", default_value_t = 0.05)]
    min_p: f32,
    /// Locally typical sampling's p (1: off).
    #[arg(long = "typical", visible_alias = "typical-p", default_value_t = 1.0)]
    typical: f32,
    /// Top-n-σ: keep the tokens within n standard deviations of the top logit (-1: off).
    #[arg(long = "top-n-sigma", visible_alias = "top-nsigma", default_value_t = -1.0, allow_negative_numbers = true)]
    top_n_sigma: f32,
    /// XTC's chance per token of excluding the top choices (0: off).
    #[arg(long = "xtc-probability", default_value_t = 0.0)]
    xtc_probability: f32,
    /// XTC's threshold: tokens at least this likely are top choices (above 0.5: off).
    #[arg(long = "xtc-threshold", default_value_t = 0.1)]
    xtc_threshold: f32,
    /// Candidates the samplers always keep (0: none).
    #[arg(long = "min-keep", default_value_t = 0)]
    min_keep: usize,
    /// Dynamic temperature's range: the temperature goes from temp - range to temp + range
    /// with the candidates' entropy (0: off).
    #[arg(long = "dynatemp-range", default_value_t = 0.0)]
    dynatemp_range: f32,
    /// Dynamic temperature's exponent.
    #[arg(long = "dynatemp-exp", default_value_t = 1.0)]
    dynatemp_exp: f32,
    /// Repetition penalty (1: off).
    #[arg(long = "repeat-penalty", default_value_t = 1.0)]
    repeat_penalty: f32,
    /// Tokens the penalties look back on (0: off).
    #[arg(long = "repeat-last-n", default_value_t = 64)]
    repeat_last_n: usize,
    /// Frequency penalty.
    #[arg(long = "frequency-penalty", default_value_t = 0.0, allow_negative_numbers = true)]
    frequency_penalty: f32,
    /// Presence penalty.
    #[arg(long = "presence-penalty", default_value_t = 0.0, allow_negative_numbers = true)]
    presence_penalty: f32,
    /// DRY's multiplier (0: off).
    #[arg(long = "dry-multiplier", default_value_t = 0.0)]
    dry_multiplier: f32,
    /// DRY's base (values below 1 keep the default 1.75, as llama.cpp's).
    #[arg(long = "dry-base", default_value_t = 1.75)]
    dry_base: f32,
    /// Repetitions DRY lets pass before it penalizes.
    #[arg(long = "dry-allowed-length", default_value_t = 2)]
    dry_allowed_length: i32,
    /// Tokens DRY looks back over (0: off).
    #[arg(long = "dry-penalty-last-n", default_value_t = 64)]
    dry_penalty_last_n: u32,
    /// A DRY sequence breaker (repeat the flag for several; the first replaces the defaults
    /// "\n", ":", "\"", "*"; "none": no breakers).
    #[arg(long = "dry-sequence-breaker", value_name = "STRING")]
    dry_sequence_breaker: Vec<String>,
    /// Mirostat (0: off, 1: Mirostat, 2: Mirostat 2.0; top-k, top-p, typical and the rest
    /// of the chain are then not used, as in llama.cpp).
    #[arg(long = "mirostat", default_value_t = 0)]
    mirostat: u8,
    /// Mirostat's learning rate (eta).
    #[arg(long = "mirostat-lr", default_value_t = 0.1)]
    mirostat_lr: f32,
    /// Mirostat's target entropy (tau).
    #[arg(long = "mirostat-ent", default_value_t = 5.0)]
    mirostat_ent: f32,
    /// A bias on one token's logit, `TOKEN_ID+BIAS` or `TOKEN_ID-BIAS` (`15043+1`;
    /// repeatable; `-inf` bans).
    #[arg(short = 'l', long = "logit-bias", value_name = "TOKEN_ID(+/-)BIAS")]
    logit_bias: Vec<String>,
    /// The chain's steps in order, names separated by ';' (default
    /// "penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature").
    #[arg(long = "samplers", value_name = "SAMPLERS")]
    samplers: Option<String>,
    /// The chain's steps in order as one letter each (`edskypmxt`).
    #[arg(long = "sampling-seq", visible_alias = "sampler-seq", conflicts_with = "samplers")]
    sampling_seq: Option<String>,
    /// RNG seed (-1 or none: random).
    #[arg(short = 's', long, allow_negative_numbers = true)]
    seed: Option<i64>,
}

impl SamplingArgs {
    /// llama.cpp's sampling parameters of these flags.
    pub fn params(&self) -> Result<SamplingParams> {
        let seed = match self.seed {
            None | Some(-1) => DEFAULT_SEED,
            Some(s) => u32::try_from(s).map_err(|_| {
                anyhow!("--seed {s}: give 0 to {} (or -1 for a random seed)", u32::MAX)
            })?,
        };
        if self.mirostat > 2 {
            bail!("--mirostat {}: give 0 (off), 1 or 2", self.mirostat);
        }
        let defaults = SamplingParams::default();
        let breakers = match self.dry_sequence_breaker.as_slice() {
            [] => defaults.dry_sequence_breakers.clone(),
            given => given.iter().filter(|b| *b != "none").cloned().collect(),
        };
        Ok(SamplingParams {
            temp: self.temp,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            typical_p: self.typical,
            repeat_penalty: self.repeat_penalty,
            repeat_last_n: self.repeat_last_n,
            frequency_penalty: self.frequency_penalty,
            presence_penalty: self.presence_penalty,
            seed,
            min_keep: self.min_keep,
            dynatemp_range: self.dynatemp_range,
            dynatemp_exponent: self.dynatemp_exp,
            xtc_probability: self.xtc_probability,
            xtc_threshold: self.xtc_threshold,
            top_n_sigma: self.top_n_sigma,
            dry_multiplier: self.dry_multiplier,
            dry_base: if self.dry_base >= 1.0 { self.dry_base } else { defaults.dry_base },
            dry_allowed_length: self.dry_allowed_length,
            dry_penalty_last_n: i32::try_from(self.dry_penalty_last_n).unwrap_or(i32::MAX),
            dry_sequence_breakers: breakers,
            mirostat: self.mirostat,
            mirostat_tau: self.mirostat_ent,
            mirostat_eta: self.mirostat_lr,
        })
    }

    /// The chain's order (`--samplers` or `--sampling-seq`, else llama.cpp's default).
    pub fn order(&self) -> Result<Vec<Step>> {
        let order = match (&self.samplers, &self.sampling_seq) {
            (Some(names), _) => order_from_names(names.split(';').filter(|s| !s.is_empty()))
                .map_err(|e| anyhow!("--samplers: {e}"))?,
            (None, Some(seq)) => {
                order_from_chars(seq).map_err(|e| anyhow!("--sampling-seq: {e}"))?
            }
            (None, None) => DEFAULT_ORDER.to_vec(),
        };
        Ok(order)
    }

    /// `--logit-bias` as (token, bias) pairs, each id checked against `vocab`.
    pub fn bias(&self, vocab: &Vocab) -> Result<Vec<(u32, f32)>> {
        self.logit_bias.iter().map(|s| parse_bias(s, vocab.n_tokens())).collect()
    }

    /// The chain of these flags over `vocab`.
    pub fn chain(&self, vocab: &Vocab) -> Result<SamplerChain> {
        let params = self.params()?;
        let chain =
            SamplerChain::for_params(&params, &self.order()?, &self.bias(vocab)?, Some(vocab))
                .map_err(|e| anyhow!(e))?;
        Ok(chain)
    }
}

/// One `--logit-bias` value: `TOKEN_ID+BIAS` or `TOKEN_ID-BIAS`.
fn parse_bias(s: &str, n_vocab: usize) -> Result<(u32, f32)> {
    let bad = || anyhow!("--logit-bias {s:?}: expected TOKEN_ID+BIAS or TOKEN_ID-BIAS (15043+1)");
    let at = s.find(['+', '-']).filter(|&i| i > 0).ok_or_else(bad)?;
    let id: u32 = s[..at].trim().parse().map_err(|_| bad())?;
    let magnitude: f32 = s[at + 1..].trim().parse().map_err(|_| bad())?;
    if !magnitude.is_finite() && magnitude != f32::INFINITY {
        return Err(bad());
    }
    if id as usize >= n_vocab {
        bail!("--logit-bias {s:?}: token {id} is not below the vocabulary's {n_vocab}");
    }
    Ok((id, if &s[at..=at] == "-" { -magnitude } else { magnitude }))
}

#[cfg(test)]
mod tests {
    use super::parse_bias;

    #[test]
    fn logit_bias_values() {
        assert_eq!(parse_bias("15+1", 100).unwrap(), (15, 1.0));
        assert_eq!(parse_bias("15-2.5", 100).unwrap(), (15, -2.5));
        assert_eq!(parse_bias("7-inf", 100).unwrap(), (7, f32::NEG_INFINITY));
        for bad in ["15", "+1", "x+1", "15+x", "15*2", "150+1", "15+nan"] {
            assert!(parse_bias(bad, 100).is_err(), "{bad}");
        }
    }
}
