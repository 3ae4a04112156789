//! mmproj files: the vision tower and projector of a multimodal model in their own GGUF
//! (`general.architecture` `clip`), as llama.cpp's `clip_model_loader` reads them. Every key is
//! checked for presence, type and range, and every tensor the projector's graph reads for
//! presence and shape, so a bad file fails here, named, and never inside a graph.

use crate::{MtmdError, Projector, Result};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tessera_gguf::{GgufFile, TensorInfo, Value};

/// The vision tower's hyperparameters (`clip.vision.*`).
#[derive(Debug, Clone, PartialEq)]
pub struct VisionHparams {
    /// Square input side the model was trained at (`clip.vision.image_size`).
    pub image_size: usize,
    /// Patch side (`clip.vision.patch_size`).
    pub patch_size: usize,
    /// Width of the tower (`clip.vision.embedding_length`).
    pub n_embd: usize,
    /// Feed-forward width (`clip.vision.feed_forward_length`).
    pub n_ff: usize,
    /// Blocks (`clip.vision.block_count`).
    pub n_layer: usize,
    /// Attention heads (`clip.vision.attention.head_count`).
    pub n_head: usize,
    /// Layer-norm epsilon (`clip.vision.attention.layer_norm_epsilon`).
    pub eps: f32,
    /// Width of the embeddings handed to the language model (`clip.vision.projection_dim`).
    pub projection_dim: usize,
    /// Per-channel mean and standard deviation of the normalisation (`clip.vision.image_mean`,
    /// `clip.vision.image_std`).
    pub image_mean: [f32; 3],
    /// See `image_mean`.
    pub image_std: [f32; 3],
    /// Patches merged per side by the projector (`clip.vision.projector.scale_factor`; Gemma 3
    /// pools 4 × 4 where the file does not say).
    pub n_merge: usize,
    /// The feed-forward activation (`clip.use_gelu`, `clip.use_silu`; llama.cpp's default is
    /// the quick GELU).
    pub ffn_act: FfnAct,
    /// The longest side an image is resized to before it is cut into tiles
    /// (`clip.vision.preproc_image_size`; 0 where the file does not say: llama.cpp's older
    /// slicing, tiles of the rounded size).
    pub longest_edge: usize,
    /// Qwen2.5-VL: every `n_wa_pattern`-th block attends over the whole image, the others
    /// within windows (`clip.vision.n_wa_pattern`; 0 elsewhere).
    pub n_wa_pattern: usize,
    /// The pixel budget of images of dynamic size (Qwen2.5-VL: 8 to 4096 merged tokens'
    /// worth, llama.cpp's defaults); 0 for fixed-size projectors.
    pub min_pixels: usize,
    /// See `min_pixels`.
    pub max_pixels: usize,
}

/// The vision tower's feed-forward activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FfnAct {
    /// `clip.use_gelu`: GELU (tanh approximation, as ggml's).
    Gelu,
    /// `clip.use_silu`.
    Silu,
    /// Neither key: `x·σ(1.702x)`.
    GeluQuick,
}

impl VisionHparams {
    /// The merged token grid (columns, rows) of a `width × height` image of a dynamic-size
    /// projector (each `n_merge × n_merge` patches one token).
    pub fn merged_grid(&self, width: usize, height: usize) -> (usize, usize) {
        let m = self.patch_size * self.n_merge;
        (width / m, height / m)
    }

    /// Patches per side of the input image.
    pub fn patches_per_side(&self) -> usize {
        self.image_size / self.patch_size
    }

    /// Embeddings (tokens) one image of the model's fixed size becomes (a dynamic-size
    /// projector's images make [`VisionHparams::merged_grid`] instead).
    pub fn n_output_tokens(&self) -> usize {
        let side = self.patches_per_side() / self.n_merge;
        side * side
    }
}

/// An mmproj file: its projector, hyperparameters and tensors (checked).
#[derive(Debug)]
pub struct Mmproj {
    path: PathBuf,
    /// The projector type.
    pub projector: Projector,
    /// The vision tower's hyperparameters.
    pub hparams: VisionHparams,
    /// Width of the image embeddings (must be the language model's `n_embd`).
    pub n_mmproj_embd: usize,
    file: Arc<MappedGguf>,
}

/// The parsed file, shared with the buffer its weights are read from in place.
#[derive(Debug)]
pub(crate) struct MappedGguf(pub(crate) GgufFile);

impl AsRef<[u8]> for MappedGguf {
    fn as_ref(&self) -> &[u8] {
        self.0.bytes()
    }
}

impl Mmproj {
    /// Opens and checks `path`.
    pub fn load(path: impl AsRef<Path>) -> Result<Mmproj> {
        let path = path.as_ref();
        let what = path.display().to_string();
        let file = GgufFile::open(path)
            .map_err(|source| MtmdError::Gguf { path: what.clone(), source })?;
        let r = Reader { path: &what, file: &file };
        let projector = r.projector()?;
        let hparams = r.hparams(projector)?;
        let n_mmproj_embd = r.check_tensors(projector, &hparams)?;
        let file = Arc::new(MappedGguf(file));
        Ok(Mmproj { path: path.to_path_buf(), projector, hparams, n_mmproj_embd, file })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The parsed file (tensors and their bytes).
    pub fn gguf(&self) -> &GgufFile {
        &self.file.0
    }

    /// The file, for a buffer over its bytes.
    pub(crate) fn mapped(&self) -> Arc<MappedGguf> {
        self.file.clone()
    }
}

/// Reads and checks one file's keys and tensors.
struct Reader<'a> {
    path: &'a str,
    file: &'a GgufFile,
}

impl Reader<'_> {
    fn meta_err(&self, key: &str, reason: impl Into<String>) -> MtmdError {
        MtmdError::Metadata { path: self.path.into(), key: key.into(), reason: reason.into() }
    }

    fn unsupported(&self, reason: impl Into<String>) -> MtmdError {
        MtmdError::Unsupported { path: self.path.into(), reason: reason.into() }
    }

    fn projector(&self) -> Result<Projector> {
        let md = self.file.metadata();
        if let Some(arch) = md.get("general.architecture").and_then(|v| v.as_str()) {
            if arch != "clip" {
                return Err(self.unsupported(format!(
                    "general.architecture is '{arch}': a language model, not an mmproj (clip) \
                     file; give the model with -m and its projector with --mmproj"
                )));
            }
        }
        match md.get("clip.has_vision_encoder") {
            None => {
                return Err(self.unsupported("no clip.has_vision_encoder key: not an mmproj file"))
            }
            Some(v) if !matches!(v, Value::Bool(true)) => {
                return Err(self.unsupported("clip.has_vision_encoder is false: no vision encoder"))
            }
            _ => {}
        }
        let key = if md.get("clip.vision.projector_type").is_some() {
            "clip.vision.projector_type"
        } else {
            "clip.projector_type"
        };
        let name = md.get_str(key).map_err(|e| self.meta_err(key, e.to_string()))?;
        Projector::from_name(name).map_err(|reason| self.unsupported(reason))
    }

    fn uint(&self, key: &str, max: u64) -> Result<usize> {
        let v =
            self.file.metadata().get_uint(key).map_err(|e| self.meta_err(key, e.to_string()))?;
        if v == 0 || v > max {
            return Err(self.meta_err(key, format!("{v} is outside 1..={max}")));
        }
        Ok(v as usize)
    }

    fn triple(&self, key: &str) -> Result<[f32; 3]> {
        let a = self
            .file
            .metadata()
            .get_f32_array(key)
            .map_err(|e| self.meta_err(key, e.to_string()))?;
        match a {
            [x, y, z] if a.iter().all(|v| v.is_finite()) => Ok([*x, *y, *z]),
            _ => Err(self.meta_err(key, format!("needs 3 finite values, has {:?}", a))),
        }
    }

    fn flag(&self, key: &str) -> bool {
        matches!(self.file.metadata().get(key), Some(Value::Bool(true)))
    }

    fn hparams(&self, projector: Projector) -> Result<VisionHparams> {
        let md = self.file.metadata();
        let eps_key = "clip.vision.attention.layer_norm_epsilon";
        let eps = md.get_f32(eps_key).map_err(|e| self.meta_err(eps_key, e.to_string()))?;
        if !(eps.is_finite() && eps > 0.0) {
            return Err(self.meta_err(eps_key, format!("{eps} is not a positive number")));
        }
        let merge_key = "clip.vision.projector.scale_factor";
        let n_merge = if md.get(merge_key).is_some() {
            self.uint(merge_key, 64)?
        } else {
            match projector {
                Projector::Gemma3 => 4,
                // llama.cpp's default (no merge) would fail its pixel shuffle's assert.
                Projector::Idefics3 => {
                    return Err(self.meta_err(merge_key, "missing (idefics3 needs it)"))
                }
                Projector::Qwen25Vl => match md.get("clip.vision.spatial_merge_size") {
                    Some(_) => self.uint("clip.vision.spatial_merge_size", 8)?,
                    None => 2,
                },
            }
        };
        let (gelu, silu) = (self.flag("clip.use_gelu"), self.flag("clip.use_silu"));
        let ffn_act = match (gelu, silu) {
            (true, true) => {
                return Err(
                    self.meta_err("clip.use_silu", "both clip.use_gelu and clip.use_silu are set")
                )
            }
            (true, false) => FfnAct::Gelu,
            (false, true) => FfnAct::Silu,
            (false, false) => FfnAct::GeluQuick,
        };
        if ffn_act == FfnAct::GeluQuick {
            // Refused here, not in a graph: no quick-GELU op yet.
            return Err(self.unsupported(
                "neither clip.use_gelu nor clip.use_silu: the quick-GELU feed-forward \
                 (llama.cpp's default) is not implemented",
            ));
        }
        let h = VisionHparams {
            image_size: self.uint("clip.vision.image_size", 8192)?,
            patch_size: self.uint("clip.vision.patch_size", 1024)?,
            n_embd: self.uint("clip.vision.embedding_length", 1 << 16)?,
            n_ff: self.uint("clip.vision.feed_forward_length", 1 << 18)?,
            n_layer: self.uint("clip.vision.block_count", 1024)?,
            n_head: self.uint("clip.vision.attention.head_count", 1024)?,
            eps,
            projection_dim: self.uint("clip.vision.projection_dim", 1 << 16)?,
            image_mean: self.triple("clip.vision.image_mean")?,
            image_std: self.triple("clip.vision.image_std")?,
            n_merge,
            ffn_act,
            longest_edge: match md.get("clip.vision.preproc_image_size") {
                Some(_) => self.uint("clip.vision.preproc_image_size", 1 << 16)?,
                None => 0,
            },
            n_wa_pattern: match projector {
                Projector::Qwen25Vl => self.uint("clip.vision.n_wa_pattern", 1024)?,
                _ => 0,
            },
            min_pixels: 0,
            max_pixels: 0,
        };
        let mut h = h;
        if projector == Projector::Qwen25Vl {
            // llama.cpp's set_limit_image_tokens(8, 4096).
            let area = (h.patch_size * h.n_merge).pow(2);
            (h.min_pixels, h.max_pixels) = (8 * area, 4096 * area);
            if h.n_merge != 2 {
                return Err(
                    self.meta_err(merge_key, format!("{}: the merger merges 2 × 2", h.n_merge))
                );
            }
        }
        if h.image_std.contains(&0.0) {
            return Err(self.meta_err("clip.vision.image_std", "a standard deviation is 0"));
        }
        if h.image_size % h.patch_size != 0 {
            return Err(self.meta_err(
                "clip.vision.patch_size",
                format!("{} does not divide the image size {}", h.patch_size, h.image_size),
            ));
        }
        if h.patches_per_side() % h.n_merge != 0 {
            return Err(self.meta_err(
                merge_key,
                format!(
                    "{} does not divide the {} patches per side",
                    h.n_merge,
                    h.patches_per_side()
                ),
            ));
        }
        if h.n_embd % h.n_head != 0 {
            return Err(self.meta_err(
                "clip.vision.attention.head_count",
                format!("{} heads do not divide the width {}", h.n_head, h.n_embd),
            ));
        }
        Ok(h)
    }

    /// The tensor `name` with exactly the dimensions `ne` (ggml order).
    fn tensor(&self, name: &str, ne: &[usize]) -> Result<&TensorInfo> {
        let t = self.file.tensor(name).map_err(|_| MtmdError::Tensor {
            path: self.path.into(),
            name: name.into(),
            reason: "missing".into(),
        })?;
        let got: Vec<usize> = t.shape().iter().map(|&d| d as usize).collect();
        if got != ne {
            return Err(MtmdError::Tensor {
                path: self.path.into(),
                name: name.into(),
                reason: format!("shape {got:?}, expected {ne:?}"),
            });
        }
        Ok(t)
    }

    /// Dimension `i` of tensor `name` (present, at least 1), for the shapes that follow it.
    fn dim(&self, name: &str, i: usize) -> Result<usize> {
        let t = self.file.tensor(name).map_err(|_| self.tensor_err(name, "missing"))?;
        match t.ne.get(i).copied().unwrap_or(0) {
            0 => Err(self.tensor_err(name, &format!("no dimension {i}"))),
            n => Ok(n as usize),
        }
    }

    fn tensor_err(&self, name: &str, reason: &str) -> MtmdError {
        MtmdError::Tensor { path: self.path.into(), name: name.into(), reason: reason.into() }
    }

    /// Checks every tensor the projector reads; returns the width of the embeddings it makes
    /// (llama.cpp's `clip_n_mmproj_embd`).
    fn check_tensors(&self, projector: Projector, h: &VisionHparams) -> Result<usize> {
        if projector == Projector::Qwen25Vl {
            return self.check_qwen25vl(h);
        }
        let (d, ff, p) = (h.n_embd, h.n_ff, h.patch_size);
        let n_patches = h.patches_per_side() * h.patches_per_side();
        self.tensor("v.patch_embd.weight", &[p, p, 3, d])?;
        self.tensor("v.patch_embd.bias", &[d])?;
        self.tensor("v.position_embd.weight", &[d, n_patches])?;
        for il in 0..h.n_layer {
            for w in ["attn_q", "attn_k", "attn_v", "attn_out"] {
                self.tensor(&format!("v.blk.{il}.{w}.weight"), &[d, d])?;
                self.tensor(&format!("v.blk.{il}.{w}.bias"), &[d])?;
            }
            for n in ["ln1", "ln2"] {
                self.tensor(&format!("v.blk.{il}.{n}.weight"), &[d])?;
                self.tensor(&format!("v.blk.{il}.{n}.bias"), &[d])?;
            }
            self.tensor(&format!("v.blk.{il}.ffn_up.weight"), &[d, ff])?;
            self.tensor(&format!("v.blk.{il}.ffn_up.bias"), &[ff])?;
            self.tensor(&format!("v.blk.{il}.ffn_down.weight"), &[ff, d])?;
            self.tensor(&format!("v.blk.{il}.ffn_down.bias"), &[d])?;
        }
        self.tensor("v.post_ln.weight", &[d])?;
        self.tensor("v.post_ln.bias", &[d])?;
        match projector {
            Projector::Qwen25Vl => self.check_qwen25vl(h),
            Projector::Gemma3 => {
                self.tensor("mm.soft_emb_norm.weight", &[d])?;
                let n_out = self.dim("mm.input_projection.weight", 0)?;
                self.tensor("mm.input_projection.weight", &[n_out, d])?;
                Ok(n_out)
            }
            Projector::Idefics3 => {
                let n_out = self.dim("mm.model.fc.weight", 1)?;
                self.tensor("mm.model.fc.weight", &[d * h.n_merge * h.n_merge, n_out])?;
                Ok(n_out)
            }
        }
    }

    /// Qwen2.5-VL's tower: two patch convolutions without bias, RMS norms (weights only),
    /// Q/K/V/output with biases, a SwiGLU FFN with biases, the post norm, and the merger
    /// (`mm.0`, GELU, `mm.2`); returns the merger's output width.
    fn check_qwen25vl(&self, h: &VisionHparams) -> Result<usize> {
        let (d, ff, p) = (h.n_embd, h.n_ff, h.patch_size);
        if (d / h.n_head) % 4 != 0 {
            return Err(self.meta_err(
                "clip.vision.attention.head_count",
                format!("heads of {}: the 2-D RoPE needs a multiple of 4", d / h.n_head),
            ));
        }
        self.tensor("v.patch_embd.weight", &[p, p, 3, d])?;
        self.tensor("v.patch_embd.weight.1", &[p, p, 3, d])?;
        for il in 0..h.n_layer {
            for w in ["attn_q", "attn_k", "attn_v", "attn_out"] {
                self.tensor(&format!("v.blk.{il}.{w}.weight"), &[d, d])?;
                self.tensor(&format!("v.blk.{il}.{w}.bias"), &[d])?;
            }
            for n in ["ln1", "ln2"] {
                self.tensor(&format!("v.blk.{il}.{n}.weight"), &[d])?;
            }
            for (w, shape) in [("ffn_up", [d, ff]), ("ffn_gate", [d, ff]), ("ffn_down", [ff, d])] {
                self.tensor(&format!("v.blk.{il}.{w}.weight"), &shape)?;
                self.tensor(&format!("v.blk.{il}.{w}.bias"), &[shape[1]])?;
            }
        }
        self.tensor("v.post_ln.weight", &[d])?;
        let hidden = self.dim("mm.0.weight", 1)?;
        self.tensor("mm.0.weight", &[4 * d, hidden])?;
        self.tensor("mm.0.bias", &[hidden])?;
        let n_out = self.dim("mm.2.weight", 1)?;
        self.tensor("mm.2.weight", &[hidden, n_out])?;
        self.tensor("mm.2.bias", &[n_out])?;
        if h.ffn_act != FfnAct::Silu {
            return Err(self.meta_err("clip.use_silu", "Qwen2.5-VL's feed-forward is SwiGLU"));
        }
        Ok(n_out)
    }
}
