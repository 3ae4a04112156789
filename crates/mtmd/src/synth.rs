//! Random-weight mmproj files of a projector's real layout, for tests and benchmarks (no real
//! vision model can be downloaded in CI): the keys and tensors llama.cpp's loader reads, F32
//! weights from a seeded generator, so a test and a reference tool given the same spec write
//! the same bytes.

use crate::{MtmdError, Projector, Result};
use std::path::Path;
use tessera_gguf::{Array, GgufWriter, Value};
use tessera_tensor::DType;

/// The shape of a random mmproj file.
#[derive(Debug, Clone, PartialEq)]
pub struct RandomMmproj {
    /// The projector's layout.
    pub projector: Projector,
    /// `clip.vision.image_size`.
    pub image_size: usize,
    /// `clip.vision.patch_size`.
    pub patch_size: usize,
    /// Width of the tower.
    pub n_embd: usize,
    /// Feed-forward width.
    pub n_ff: usize,
    /// Blocks.
    pub n_layer: usize,
    /// Attention heads.
    pub n_head: usize,
    /// Patches merged per side (`clip.vision.projector.scale_factor`).
    pub n_merge: usize,
    /// Width of the embeddings (the language model's).
    pub n_mmproj_embd: usize,
    /// Seed of the weights.
    pub seed: u64,
    /// `clip.vision.preproc_image_size` (the longest side before tiling; 0: no key).
    pub longest_edge: usize,
    /// Qwen2.5-VL's `clip.vision.n_wa_pattern` (every n-th block attends globally).
    pub n_wa_pattern: usize,
}

impl RandomMmproj {
    /// A small Gemma 3 projector: 64-pixel images of 8-pixel patches, 2 × 2 pooling (16 tokens
    /// an image), for a language model `n_mmproj_embd` wide.
    pub fn tiny_gemma3(n_mmproj_embd: usize) -> Self {
        RandomMmproj {
            projector: Projector::Gemma3,
            image_size: 64,
            patch_size: 8,
            n_embd: 64,
            n_ff: 128,
            n_layer: 2,
            n_head: 4,
            n_merge: 2,
            n_mmproj_embd,
            seed: 1,
            longest_edge: 0,
            n_wa_pattern: 0,
        }
    }

    /// A small Qwen2.5-VL projector: 8-pixel patches, 64 wide, 2 blocks (the first attending
    /// within windows of 7 × 7 merged tokens, the second globally), SwiGLU, the 2 × 2 merger,
    /// for a language model `n_mmproj_embd` wide.
    pub fn tiny_qwen25vl(n_mmproj_embd: usize) -> Self {
        RandomMmproj {
            projector: Projector::Qwen25Vl,
            n_wa_pattern: 2,
            seed: 3,
            ..RandomMmproj::tiny_gemma3(n_mmproj_embd)
        }
    }

    /// A small Idefics3 (SmolVLM) projector: 64-pixel tiles of 8-pixel patches, a 2 × 2 pixel
    /// shuffle (16 tokens a tile), images resized to 128 pixels on their longest side (up to
    /// 2 × 2 tiles and the overview), for a language model `n_mmproj_embd` wide.
    pub fn tiny_idefics3(n_mmproj_embd: usize) -> Self {
        RandomMmproj {
            projector: Projector::Idefics3,
            longest_edge: 128,
            seed: 2,
            ..RandomMmproj::tiny_gemma3(n_mmproj_embd)
        }
    }
}

/// xorshift64* floats in [-scale, scale).
struct Rng(u64);

impl Rng {
    fn next(&mut self, scale: f32) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let r = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 40;
        (r as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
    }
}

/// Writes a random mmproj file of `spec` to `path`; returns its size in bytes.
pub fn write_random_mmproj(spec: &RandomMmproj, path: &Path) -> Result<u64> {
    let g = |e: tessera_gguf::GgufError| MtmdError::Gguf {
        path: path.display().to_string(),
        source: e,
    };
    let mut w = GgufWriter::new();
    let u = |v: usize| Value::U32(v as u32);
    w.add("general.architecture", "clip").map_err(g)?;
    w.add("general.name", "tessera random mmproj").map_err(g)?;
    w.add("clip.has_vision_encoder", Value::Bool(true)).map_err(g)?;
    w.add("clip.projector_type", spec.projector.name()).map_err(g)?;
    let qwen = spec.projector == Projector::Qwen25Vl;
    w.add(if qwen { "clip.use_silu" } else { "clip.use_gelu" }, Value::Bool(true)).map_err(g)?;
    if qwen {
        w.add("clip.vision.spatial_merge_size", u(spec.n_merge)).map_err(g)?;
        w.add("clip.vision.n_wa_pattern", u(spec.n_wa_pattern)).map_err(g)?;
    }
    w.add("clip.vision.image_size", u(spec.image_size)).map_err(g)?;
    w.add("clip.vision.patch_size", u(spec.patch_size)).map_err(g)?;
    w.add("clip.vision.embedding_length", u(spec.n_embd)).map_err(g)?;
    w.add("clip.vision.feed_forward_length", u(spec.n_ff)).map_err(g)?;
    w.add("clip.vision.block_count", u(spec.n_layer)).map_err(g)?;
    w.add("clip.vision.attention.head_count", u(spec.n_head)).map_err(g)?;
    w.add("clip.vision.attention.layer_norm_epsilon", Value::F32(1e-6)).map_err(g)?;
    w.add("clip.vision.projection_dim", u(spec.n_mmproj_embd)).map_err(g)?;
    w.add("clip.vision.projector.scale_factor", u(spec.n_merge)).map_err(g)?;
    if spec.longest_edge > 0 {
        w.add("clip.vision.preproc_image_size", u(spec.longest_edge)).map_err(g)?;
    }
    w.add("clip.vision.image_mean", Value::Array(Array::F32(vec![0.5, 0.5, 0.5]))).map_err(g)?;
    w.add("clip.vision.image_std", Value::Array(Array::F32(vec![0.5, 0.5, 0.5]))).map_err(g)?;
    let mut rng = Rng(spec.seed.max(1));
    let side = spec.image_size / spec.patch_size;
    let tensors = if qwen { qwen25vl_tensors(spec) } else { siglip_tensors(spec, side) };
    let mut blobs = Vec::with_capacity(tensors.len());
    for (_, shape, base, scale) in &tensors {
        let n: usize = shape.iter().product();
        let bytes: Vec<u8> = (0..n).flat_map(|_| (base + rng.next(*scale)).to_le_bytes()).collect();
        blobs.push(bytes);
    }
    for ((name, shape, _, _), bytes) in tensors.iter().zip(blobs) {
        let shape: Vec<u64> = shape.iter().map(|&x| x as u64).collect();
        w.add_tensor(name, DType::F32, &shape, bytes).map_err(g)?;
    }
    w.write_file(path).map_err(g)
}

/// A tensor to write: name, shape, mean and spread of its values.
type Spec = (String, Vec<usize>, f32, f32);

/// Qwen2.5-VL's tensors (see `Mmproj`'s checks): no patch bias or positions, RMS norms,
/// SwiGLU with biases, the merger 4·d → 4·d → the language model's width.
fn qwen25vl_tensors(spec: &RandomMmproj) -> Vec<Spec> {
    let (d, ff, p) = (spec.n_embd, spec.n_ff, spec.patch_size);
    let mut t: Vec<Spec> = vec![
        ("v.patch_embd.weight".into(), vec![p, p, 3, d], 0.0, 0.1),
        ("v.patch_embd.weight.1".into(), vec![p, p, 3, d], 0.0, 0.1),
    ];
    for il in 0..spec.n_layer {
        for n in ["attn_q", "attn_k", "attn_v", "attn_out"] {
            t.push((format!("v.blk.{il}.{n}.weight"), vec![d, d], 0.0, 0.15));
            t.push((format!("v.blk.{il}.{n}.bias"), vec![d], 0.0, 0.05));
        }
        for n in ["ln1", "ln2"] {
            t.push((format!("v.blk.{il}.{n}.weight"), vec![d], 1.0, 0.1));
        }
        for (n, a, b) in [("ffn_up", d, ff), ("ffn_gate", d, ff), ("ffn_down", ff, d)] {
            t.push((format!("v.blk.{il}.{n}.weight"), vec![a, b], 0.0, 0.12));
            t.push((format!("v.blk.{il}.{n}.bias"), vec![b], 0.0, 0.05));
        }
    }
    t.push(("v.post_ln.weight".into(), vec![d], 1.0, 0.1));
    t.push(("mm.0.weight".into(), vec![4 * d, 4 * d], 0.0, 0.08));
    t.push(("mm.0.bias".into(), vec![4 * d], 0.0, 0.05));
    t.push(("mm.2.weight".into(), vec![4 * d, spec.n_mmproj_embd], 0.0, 0.08));
    t.push(("mm.2.bias".into(), vec![spec.n_mmproj_embd], 0.0, 0.05));
    t
}

/// The SigLIP tower's tensors and the Gemma 3 or Idefics3 projector's.
fn siglip_tensors(spec: &RandomMmproj, side: usize) -> Vec<Spec> {
    let (d, ff, p) = (spec.n_embd, spec.n_ff, spec.patch_size);
    let mut tensors: Vec<Spec> = vec![
        ("v.patch_embd.weight".into(), vec![p, p, 3, d], 0.0, 0.1),
        ("v.patch_embd.bias".into(), vec![d], 0.0, 0.1),
        ("v.position_embd.weight".into(), vec![d, side * side], 0.0, 0.1),
    ];
    for il in 0..spec.n_layer {
        for t in ["attn_q", "attn_k", "attn_v", "attn_out"] {
            tensors.push((format!("v.blk.{il}.{t}.weight"), vec![d, d], 0.0, 0.15));
            tensors.push((format!("v.blk.{il}.{t}.bias"), vec![d], 0.0, 0.05));
        }
        for n in ["ln1", "ln2"] {
            tensors.push((format!("v.blk.{il}.{n}.weight"), vec![d], 1.0, 0.1));
            tensors.push((format!("v.blk.{il}.{n}.bias"), vec![d], 0.0, 0.05));
        }
        tensors.push((format!("v.blk.{il}.ffn_up.weight"), vec![d, ff], 0.0, 0.15));
        tensors.push((format!("v.blk.{il}.ffn_up.bias"), vec![ff], 0.0, 0.05));
        tensors.push((format!("v.blk.{il}.ffn_down.weight"), vec![ff, d], 0.0, 0.1));
        tensors.push((format!("v.blk.{il}.ffn_down.bias"), vec![d], 0.0, 0.05));
    }
    tensors.push(("v.post_ln.weight".into(), vec![d], 1.0, 0.1));
    tensors.push(("v.post_ln.bias".into(), vec![d], 0.0, 0.05));
    match spec.projector {
        Projector::Gemma3 => {
            tensors.push(("mm.soft_emb_norm.weight".into(), vec![d], 0.0, 0.2));
            tensors.push((
                "mm.input_projection.weight".into(),
                vec![spec.n_mmproj_embd, d],
                0.0,
                0.15,
            ));
        }
        Projector::Idefics3 => {
            let m = spec.n_merge;
            let w = vec![d * m * m, spec.n_mmproj_embd];
            tensors.push(("mm.model.fc.weight".into(), w, 0.0, 0.08));
        }
        Projector::Qwen25Vl => {}
    }
    tensors
}

/// The Idefics3 (SmolVLM) image tokens a test needs for a grid of up to 2 × 2 tiles.
pub const IDEFICS3_TEST_TOKENS: [&str; 6] = [
    "<fake_token_around_image>",
    "<global-img>",
    "<row_1_col_1>",
    "<row_1_col_2>",
    "<row_2_col_1>",
    "<row_2_col_2>",
];

/// Copies the language model at `src` (SmolLM2, whose vocabulary is SmolVLM's without its
/// image tokens) to `dst` with its control tokens 3 to 8 (`<repo_name>` ... `<issue_start>`,
/// unused in a chat) renamed [`IDEFICS3_TEST_TOKENS`]: a language model an Idefics3
/// projector's prompts can be written in, for tests and reference tools. Returns the bytes
/// written.
pub fn with_idefics3_tokens(src: &Path, dst: &Path) -> Result<u64> {
    let g =
        |e: tessera_gguf::GgufError| MtmdError::Gguf { path: src.display().to_string(), source: e };
    let mut file = tessera_gguf::GgufFile::read(src).map_err(g)?;
    let md = file.metadata();
    let types = md.get_i32_array("tokenizer.ggml.token_type").map_err(g)?;
    let mut tokens = md.get_str_array("tokenizer.ggml.tokens").map_err(g)?.to_vec();
    const FIRST: usize = 3;
    for (k, name) in IDEFICS3_TEST_TOKENS.iter().enumerate() {
        if types.get(FIRST + k) != Some(&3) {
            return Err(MtmdError::Prompt {
                reason: format!("{}: token {} is not a control token", src.display(), FIRST + k),
            });
        }
        tokens[FIRST + k] = name.as_bytes().to_vec();
    }
    file.metadata_mut().push("tokenizer.ggml.tokens", Value::Array(Array::String(tokens)));
    let w = GgufWriter::from_gguf(&file).map_err(g)?;
    w.write_file(dst).map_err(|e| MtmdError::Gguf { path: dst.display().to_string(), source: e })
}
