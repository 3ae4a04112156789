//! llama.cpp's configurable sampler order (`--samplers`, llama-server's `samplers`): the
//! names and one-letter codes of `common_sampler_type`, and which of them Tessera has.

/// A step of the common sampler chain, in llama.cpp's naming (`common_sampler_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Repetition, frequency and presence penalties (`penalties`, `e`).
    Penalties,
    /// DRY, "don't repeat yourself" (`dry`, `d`).
    Dry,
    /// Top-n-sigma (`top_n_sigma`, `s`).
    TopNSigma,
    /// Top-k (`top_k`, `k`).
    TopK,
    /// Locally typical sampling (`typ_p`, `y`).
    Typical,
    /// Top-p (`top_p`, `p`).
    TopP,
    /// Min-p (`min_p`, `m`).
    MinP,
    /// Exclude top choices (`xtc`, `x`).
    Xtc,
    /// Temperature (`temperature`, `t`).
    Temperature,
    /// Fill-in-the-middle's end-of-text handling (`infill`, `i`).
    Infill,
    /// Adaptive probability (`adaptive_p`, `a`).
    AdaptiveP,
}

/// llama.cpp's default order (`common_params_sampling::samplers`).
pub const DEFAULT_ORDER: [Step; 9] = [
    Step::Penalties,
    Step::Dry,
    Step::TopNSigma,
    Step::TopK,
    Step::Typical,
    Step::TopP,
    Step::MinP,
    Step::Xtc,
    Step::Temperature,
];

const TABLE: [(Step, &str, char); 11] = [
    (Step::Penalties, "penalties", 'e'),
    (Step::Dry, "dry", 'd'),
    (Step::TopNSigma, "top_n_sigma", 's'),
    (Step::TopK, "top_k", 'k'),
    (Step::Typical, "typ_p", 'y'),
    (Step::TopP, "top_p", 'p'),
    (Step::MinP, "min_p", 'm'),
    (Step::Xtc, "xtc", 'x'),
    (Step::Temperature, "temperature", 't'),
    (Step::Infill, "infill", 'i'),
    (Step::AdaptiveP, "adaptive_p", 'a'),
];

impl Step {
    /// llama.cpp's name (`common_sampler_type_to_str`).
    pub fn name(self) -> &'static str {
        TABLE.iter().find(|r| r.0 == self).map_or("?", |r| r.1)
    }

    /// The step named `name` (llama-server's `samplers` array, `--samplers a;b`).
    pub fn from_name(name: &str) -> Option<Step> {
        TABLE.iter().find(|r| r.1 == name).map(|r| r.0)
    }

    /// The step of one-letter code `c` (`--sampling-seq`, a `samplers` string).
    pub fn from_char(c: char) -> Option<Step> {
        TABLE.iter().find(|r| r.2 == c).map(|r| r.0)
    }
}

/// Parses an order given by names; an unknown name is the error, naming it.
pub fn order_from_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<Vec<Step>, String> {
    names
        .into_iter()
        .map(|n| {
            Step::from_name(n).ok_or_else(|| {
                format!(
                    "unknown sampler '{n}' (one of {})",
                    TABLE.iter().map(|r| r.1).collect::<Vec<_>>().join(", ")
                )
            })
        })
        .collect()
}

/// Parses an order given as one-letter codes (`"kfypmxt"` style); an unknown letter is the
/// error, naming it.
pub fn order_from_chars(chars: &str) -> Result<Vec<Step>, String> {
    chars
        .chars()
        .map(|c| {
            Step::from_char(c).ok_or_else(|| {
                format!(
                    "unknown sampler letter '{c}' (one of {})",
                    TABLE
                        .iter()
                        .map(|r| format!("{} = {}", r.2, r.1))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })
        })
        .collect()
}
