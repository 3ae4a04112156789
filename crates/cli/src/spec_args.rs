//! llama.cpp's speculative decoding flags, under their current names: `--spec-type`
//! (`draft-simple`, the default with a draft model, or `ngram-simple`), `-md` /
//! `--spec-draft-model`, `--spec-draft-n-max`/`-n-min`/`-p-min`, `-ngld`, `-devd`,
//! `--spec-ngram-simple-size-n`/`-m`. The flags llama.cpp removed (`--draft-max`,
//! `--draft-min`) are refused with its replacement named, as llama.cpp refuses them.

use anyhow::{bail, Result};
use std::path::PathBuf;
use tessera_llama::speculative::{check_vocabs, DraftModel, NgramSimple, Speculator};
use tessera_llama::{ContextParams, LlamaContext, Model};

/// Speculative decoding.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct SpecArgs {
    /// Speculation: none, draft-simple (a draft model, the default with -md) or ngram-simple
    /// (proposals from the text's own n-grams).
    #[arg(long = "spec-type", value_name = "TYPE")]
    pub spec_type: Option<String>,
    /// A draft model with the model's vocabulary (llama.cpp's -md).
    #[arg(long = "spec-draft-model", visible_alias = "model-draft", value_name = "FNAME")]
    pub draft_model: Option<PathBuf>,
    /// Most tokens the draft proposes per step.
    #[arg(long = "spec-draft-n-max", default_value_t = 3, value_name = "N")]
    pub draft_n_max: usize,
    /// Fewer proposals than this are dropped.
    #[arg(long = "spec-draft-n-min", default_value_t = 0, value_name = "N")]
    pub draft_n_min: usize,
    /// The draft stops proposing where its top probability falls below P.
    #[arg(long = "spec-draft-p-min", visible_alias = "draft-p-min", default_value_t = 0.0)]
    pub draft_p_min: f32,
    /// Layers of the draft model on the accelerators (llama.cpp's -ngld).
    #[arg(long = "spec-draft-ngl", visible_alias = "gpu-layers-draft", value_name = "N")]
    pub draft_ngl: Option<usize>,
    /// Devices for the draft model, comma-separated (llama.cpp's -devd).
    #[arg(long = "spec-draft-device", visible_alias = "device-draft", value_delimiter = ',')]
    pub draft_device: Vec<String>,
    /// The n-gram ngram-simple looks up.
    #[arg(long = "spec-ngram-simple-size-n", default_value_t = 12, value_name = "N")]
    pub ngram_n: usize,
    /// Most tokens ngram-simple proposes.
    #[arg(long = "spec-ngram-simple-size-m", default_value_t = 48, value_name = "N")]
    pub ngram_m: usize,
    /// Removed from llama.cpp (use --spec-draft-n-max); refused.
    #[arg(long = "draft-max", visible_alias = "draft", hide = true, value_name = "N")]
    pub removed_max: Option<String>,
    /// Removed from llama.cpp (use --spec-draft-n-min); refused.
    #[arg(long = "draft-min", hide = true, value_name = "N")]
    pub removed_min: Option<String>,
}

/// The speculation types llama.cpp has that Tessera does not.
const OTHER_TYPES: [&str; 8] = [
    "draft-eagle3",
    "draft-mtp",
    "draft-dflash",
    "draft-dspark",
    "ngram-map-k",
    "ngram-map-k4v",
    "ngram-mod",
    "ngram-cache",
];

/// What the flags ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecKind {
    /// No speculation.
    None,
    /// A draft model.
    Draft,
    /// N-gram lookup.
    Ngram,
}

impl SpecArgs {
    /// The kind of speculation asked for, checked.
    pub fn kind(&self) -> Result<SpecKind> {
        if self.removed_max.is_some() {
            bail!("--draft-max: the argument has been removed (as in llama.cpp); use --spec-draft-n-max");
        }
        if self.removed_min.is_some() {
            bail!("--draft-min: the argument has been removed (as in llama.cpp); use --spec-draft-n-min");
        }
        let kind = match self.spec_type.as_deref() {
            None | Some("") => match self.draft_model {
                Some(_) => SpecKind::Draft,
                None => SpecKind::None,
            },
            Some("none") => SpecKind::None,
            Some("draft-simple") => SpecKind::Draft,
            Some("ngram-simple") => SpecKind::Ngram,
            Some(t) if OTHER_TYPES.contains(&t) => {
                bail!("--spec-type {t}: not available in Tessera (it has draft-simple and ngram-simple)")
            }
            Some(t) => bail!(
                "--spec-type {t}: unknown (none, draft-simple, ngram-simple; llama.cpp also has {})",
                OTHER_TYPES.join(", ")
            ),
        };
        match kind {
            SpecKind::Draft if self.draft_model.is_none() => {
                bail!("--spec-type draft-simple needs a draft model (-md FILE)")
            }
            SpecKind::Ngram | SpecKind::None if self.draft_model.is_some() => bail!(
                "-md {}: a draft model is used by --spec-type draft-simple only",
                self.draft_model.as_ref().map(|p| p.display().to_string()).unwrap_or_default()
            ),
            SpecKind::Ngram if self.ngram_n == 0 || self.ngram_m == 0 => {
                bail!("--spec-ngram-simple-size-n and -size-m must be at least 1")
            }
            _ => {}
        }
        if !(0.0..=1.0).contains(&self.draft_p_min) {
            bail!("--spec-draft-p-min {}: a probability from 0 to 1", self.draft_p_min);
        }
        Ok(kind)
    }

    /// Loads the draft model, if speculation uses one, checking its vocabulary against
    /// `target`'s.
    pub fn load_draft(&self, target: &Model, no_repack: bool) -> Result<Option<Model>> {
        if self.kind()? != SpecKind::Draft {
            return Ok(None);
        }
        let path = self.draft_model.as_ref().expect("checked by kind");
        let offload = crate::common::OffloadArgs {
            n_gpu_layers: self.draft_ngl,
            device: self.draft_device.clone(),
            ..Default::default()
        };
        let draft = crate::common::load(path, no_repack, &offload)?;
        check_vocabs(&target.vocab, &draft.vocab).map_err(crate::common::explain)?;
        Ok(Some(draft))
    }

    /// The server's speculation (`tessera serve`), its draft model loaded and checked.
    pub fn server_config(
        &self,
        target: &Model,
        no_repack: bool,
    ) -> Result<Option<tessera_server::engine::SpecConfig>> {
        use tessera_server::engine::{SpecConfig, SpecSource};
        let source = match self.kind()? {
            SpecKind::None => return Ok(None),
            SpecKind::Ngram => {
                SpecSource::Ngram(NgramSimple { size_n: self.ngram_n, size_m: self.ngram_m })
            }
            SpecKind::Draft => {
                let draft = self.load_draft(target, no_repack)?.expect("draft-simple loads one");
                SpecSource::Draft(std::sync::Arc::new(draft))
            }
        };
        // ngram-simple proposes up to its m-gram (llama.cpp's n_max for it).
        let n_max = match &source {
            SpecSource::Ngram(g) => g.size_m,
            SpecSource::Draft(_) => self.draft_n_max,
        };
        Ok(Some(SpecConfig { source, n_max, n_min: self.draft_n_min, p_min: self.draft_p_min }))
    }

    /// The proposal source over `draft` (loaded by [`load_draft`](Self::load_draft)), its
    /// context made like the model's (`params`).
    pub fn speculator<'m>(
        &self,
        draft: Option<&'m Model>,
        params: &ContextParams,
    ) -> Result<Option<Speculator<'m>>> {
        Ok(match self.kind()? {
            SpecKind::None => None,
            SpecKind::Ngram => {
                Some(Speculator::Ngram(NgramSimple { size_n: self.ngram_n, size_m: self.ngram_m }))
            }
            SpecKind::Draft => {
                let model = draft.expect("a draft model is loaded for draft-simple");
                let ctx =
                    LlamaContext::new(model, params.clone()).map_err(crate::common::explain)?;
                let d = DraftModel::new(ctx, self.draft_n_max, self.draft_n_min, self.draft_p_min);
                Some(Speculator::Draft(Box::new(d)))
            }
        })
    }
}
