//! llama.cpp's LoRA flags: `--lora FNAME[,FNAME...]` (scale 1) and
//! `--lora-scaled FNAME:SCALE[,...]`, both repeatable; the adapters are applied in that order
//! (every `--lora`, then every `--lora-scaled`).

use anyhow::{bail, Context as _, Result};
use std::path::PathBuf;
use std::sync::Arc;
use tessera_llama::{LoraAdapter, Model};

/// LoRA adapters to apply.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct LoraArgs {
    /// A LoRA adapter (GGUF) applied at scale 1; comma-separated or repeated for several.
    #[arg(long = "lora", value_name = "FNAME", value_delimiter = ',')]
    pub lora: Vec<PathBuf>,
    /// `FNAME:SCALE`: a LoRA adapter at its own scale; comma-separated or repeated.
    #[arg(long = "lora-scaled", value_name = "FNAME:SCALE", value_delimiter = ',')]
    pub lora_scaled: Vec<String>,
}

impl LoraArgs {
    /// The adapters' files and scales, in order.
    pub fn specs(&self) -> Result<Vec<(PathBuf, f32)>> {
        let mut out: Vec<(PathBuf, f32)> = self.lora.iter().map(|p| (p.clone(), 1.0)).collect();
        for item in &self.lora_scaled {
            let Some((file, scale)) = item.rsplit_once(':') else {
                bail!("--lora-scaled {item}: the format is FNAME:SCALE");
            };
            let s: f32 = scale
                .trim()
                .parse()
                .ok()
                .filter(|s: &f32| s.is_finite())
                .with_context(|| format!("--lora-scaled {item}: '{scale}' is not a number"))?;
            out.push((PathBuf::from(file), s));
        }
        Ok(out)
    }

    /// Loads every adapter for `model`, with its scale.
    pub fn load(&self, model: &Model) -> Result<Vec<(Arc<LoraAdapter>, f32)>> {
        self.specs()?
            .into_iter()
            .map(|(path, scale)| {
                crate::common::check_model_path(&path)
                    .with_context(|| format!("LoRA adapter {}", path.display()))?;
                let a = LoraAdapter::load(model, &path).map_err(crate::common::explain)?;
                Ok((Arc::new(a), scale))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaled_specs_parse_and_bad_ones_are_named() {
        let a = LoraArgs {
            lora: vec!["a.gguf".into()],
            lora_scaled: vec!["b.gguf:0.5".into(), "dir:x/c.gguf:-1".into()],
        };
        let s = a.specs().unwrap();
        assert_eq!(s[0], ("a.gguf".into(), 1.0));
        assert_eq!(s[1], ("b.gguf".into(), 0.5));
        assert_eq!(s[2], ("dir:x/c.gguf".into(), -1.0));
        for bad in ["b.gguf", "b.gguf:half", "b.gguf:nan"] {
            let a = LoraArgs { lora: vec![], lora_scaled: vec![bad.into()] };
            let e = a.specs().unwrap_err().to_string();
            assert!(e.contains("--lora-scaled") && e.contains(bad), "{e}");
        }
    }
}
