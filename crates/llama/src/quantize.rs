//! Model quantization (llama.cpp's `llama_model_quantize` without an importance matrix): every
//! weight matrix re-encoded to the file type's type, with llama.cpp's per-tensor choices for
//! the mixed types (`Q4_K_M`: Q6_K for the output and some `attn_v`/`ffn_down`, ...), its
//! fallbacks for rows that are not a whole number of 256-blocks, and everything else (norms,
//! biases, 1-D tensors, metadata) copied. The quantizers are tessera-tensor's, which write
//! ggml's bytes, so the output loads in llama.cpp.

use crate::{LlamaError, Result};
use std::path::Path;
use tessera_gguf::{GgufFile, GgufWriter, Value};
use tessera_tensor::{quant, DType};

/// A llama.cpp file type (`llama_ftype`): the target of a quantization.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileType {
    /// llama.cpp's name (`Q4_K_M`).
    pub name: &'static str,
    /// `general.file_type` value.
    pub id: u32,
    /// The type most weights get.
    pub base: DType,
}

const fn ft(name: &'static str, id: u32, base: DType) -> FileType {
    FileType { name, id, base }
}

/// The file types Tessera writes (those llama.cpp makes without an importance matrix).
pub const FILE_TYPES: &[FileType] = &[
    ft("F32", 0, DType::F32),
    ft("F16", 1, DType::F16),
    ft("Q4_0", 2, DType::Q4_0),
    ft("Q4_1", 3, DType::Q4_1),
    ft("Q8_0", 7, DType::Q8_0),
    ft("Q5_0", 8, DType::Q5_0),
    ft("Q5_1", 9, DType::Q5_1),
    ft("Q2_K", 10, DType::Q2_K),
    ft("Q3_K_S", 11, DType::Q3_K),
    ft("Q3_K_M", 12, DType::Q3_K),
    ft("Q3_K_L", 13, DType::Q3_K),
    ft("Q4_K_S", 14, DType::Q4_K),
    ft("Q4_K_M", 15, DType::Q4_K),
    ft("Q5_K_S", 16, DType::Q5_K),
    ft("Q5_K_M", 17, DType::Q5_K),
    ft("Q6_K", 18, DType::Q6_K),
    ft("IQ4_NL", 25, DType::IQ4_NL),
    ft("IQ4_XS", 30, DType::IQ4_XS),
    ft("BF16", 32, DType::BF16),
    ft("TQ1_0", 36, DType::TQ1_0),
    ft("TQ2_0", 37, DType::TQ2_0),
    ft("MXFP4_MOE", MXFP4_MOE, DType::MXFP4),
];

/// `LLAMA_FTYPE_MOSTLY_MXFP4_MOE`: expert stacks in MXFP4, every other weight in Q8_0.
const MXFP4_MOE: u32 = 38;

impl FileType {
    /// The file type called `name` (case-insensitive) or with that numeric id.
    pub fn parse(name: &str) -> Option<FileType> {
        let n = name.trim();
        FILE_TYPES
            .iter()
            .copied()
            .find(|f| f.name.eq_ignore_ascii_case(n) || n.parse::<u32>().ok() == Some(f.id))
    }
}

/// llama.cpp's `use_more_bits`: the first and last eighth of the layers and every third one
/// between get the larger type.
fn use_more_bits(i: usize, n: usize) -> bool {
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

/// Counters of the tensors `llama_tensor_get_type` looks at.
#[derive(Default)]
struct Counters {
    n_attn_v: usize,
    i_attn_v: usize,
    n_ffn_down: usize,
    i_ffn_down: usize,
    /// `{arch}.expert_count`: with experts, a tensor's layer is read from its name, and the
    /// 8-expert (Mixtral) rules apply.
    n_expert: usize,
}

/// The layer of `blk.N.*` (llama.cpp's `layer_info` for models with experts).
fn layer_of(name: &str) -> Option<usize> {
    name.strip_prefix("blk.")?.split('.').next()?.parse().ok()
}

/// The type llama.cpp gives tensor `name` (row length `ne0`, `ne2` matrices) for file type
/// `ft`.
fn tensor_type(
    ft: FileType,
    name: &str,
    (ne0, ne2): (usize, u64),
    has_output: bool,
    c: &mut Counters,
) -> DType {
    let mut t = ft.base;
    let is_k =
        |t: DType| matches!(t, DType::Q2_K | DType::Q3_K | DType::Q4_K | DType::Q5_K | DType::Q6_K);
    let id = ft.id;
    let (q3_k_m, q3_k_l, q4_k_s, q4_k_m, q5_k_s, q5_k_m) =
        (id == 12, id == 13, id == 14, id == 15, id == 16, id == 17);
    if id == MXFP4_MOE {
        // Expert stacks (more than one matrix) in MXFP4, everything else in Q8_0, the output
        // included.
        t = if ne2 > 1 { DType::MXFP4 } else { DType::Q8_0 };
    } else if name == "output.weight" || (!has_output && name == "token_embd.weight") {
        if ne0 % 256 != 0 {
            t = DType::Q8_0;
        } else if t != DType::Q8_0 {
            t = DType::Q6_K;
        }
    } else if name.contains("attn_v.weight") || name.contains("attn_qkv.weight") {
        let i = c.i_attn_v;
        c.i_attn_v += 1;
        t = match id {
            10 => DType::Q3_K,
            12 if i < 2 => DType::Q5_K,
            12 => DType::Q4_K,
            13 => DType::Q5_K,
            15 | 17 if use_more_bits(i, c.n_attn_v) => DType::Q6_K,
            14 if i < 4 => DType::Q5_K,
            _ => t,
        };
        if c.n_expert == 8 {
            // llama.cpp: "for the 8-expert model, bumping this to Q8_0 trades just ~128MB".
            t = DType::Q8_0;
        }
    } else if name.contains("attn_k.weight") && c.n_expert == 8 {
        t = DType::Q8_0;
    } else if name.contains("ffn_down") {
        let i = if c.n_expert > 1 { layer_of(name).unwrap_or(c.i_ffn_down) } else { c.i_ffn_down };
        let n = c.n_ffn_down;
        c.i_ffn_down += 1;
        if id == 10 {
            t = DType::Q3_K;
        } else if q3_k_m {
            t = if i < n / 16 { DType::Q5_K } else { DType::Q4_K };
        } else if q3_k_l {
            t = DType::Q5_K;
        } else if (q4_k_m || q5_k_m) && use_more_bits(i, n) {
            t = DType::Q6_K;
        } else if (q4_k_s || q5_k_s) && i < n / 8 {
            t = if q4_k_s { DType::Q5_K } else { DType::Q6_K };
        }
    } else if name.contains("attn_output.weight") {
        if c.n_expert == 8 {
            // Q2_K, IQ3_XS, IQ3_XXS, Q3_K_S, Q3_K_M, IQ4_NL, Q4_K_S, Q4_K_M, IQ3_S, IQ3_M, IQ4_XS.
            if matches!(id, 10 | 22 | 23 | 11 | 12 | 25 | 14 | 15 | 26 | 27 | 30) {
                t = DType::Q5_K;
            }
        } else if id == 10 {
            t = DType::Q3_K;
        } else if q3_k_m {
            t = DType::Q4_K;
        } else if q3_k_l {
            t = DType::Q5_K;
        }
    }
    // Rows that are not whole 256-blocks cannot take a K-quant: llama.cpp's fallbacks.
    if (is_k(t) || t == DType::IQ4_XS) && ne0 % 256 != 0 {
        t = match t {
            DType::Q2_K | DType::Q3_K | DType::IQ4_XS => DType::IQ4_NL,
            DType::Q4_K => DType::Q5_0,
            DType::Q5_K => DType::Q5_1,
            _ => DType::Q8_0,
        };
    }
    if ne0 % t.block_size() != 0 {
        t = DType::F16;
    }
    t
}

/// Whether a tensor is re-encoded at all (llama.cpp quantizes 2-D+ weights except norms and a
/// few special tensors).
fn quantizable(name: &str, n_dims: u32) -> bool {
    n_dims >= 2
        && name.ends_with("weight")
        && !name.contains("_norm.weight")
        && !name.contains("position_embd")
        && !name.contains("ffn_gate_inp")
}

/// Re-encodes `data` (rows of `ne0` values of type `from`) as `to`, the rows shared among the
/// CPU's threads (as llama-quantize's `nthread`); each row is encoded alone, so the bytes do
/// not depend on the thread count.
fn requantize(from: DType, data: &[u8], to: DType, ne0: usize) -> Result<Vec<u8>> {
    let row_in = from.type_size() * ne0 / from.block_size();
    let n_rows = data.len() / row_in.max(1);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(n_rows.max(1));
    let per = n_rows.div_ceil(threads).max(1);
    let parts: Vec<Result<Vec<u8>>> = std::thread::scope(|s| {
        let handles: Vec<_> = data
            .chunks(per * row_in)
            .map(|chunk| {
                s.spawn(move || -> Result<Vec<u8>> {
                    let f = quant::dequantize(from, chunk)?;
                    let mut out = Vec::with_capacity(to.type_size() * f.len() / to.block_size());
                    for row in f.chunks(ne0) {
                        out.extend(quant::quantize(to, row)?);
                    }
                    Ok(out)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a quantizing thread panicked")).collect()
    });
    let mut out = Vec::new();
    for p in parts {
        out.extend(p?);
    }
    Ok(out)
}

/// What [`quantize_file`] did.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Tensors written, re-encoded, and bytes before and after.
    pub n_tensors: usize,
    /// Tensors re-encoded.
    pub n_quantized: usize,
    /// Input tensor bytes.
    pub bytes_in: usize,
    /// Output tensor bytes.
    pub bytes_out: usize,
}

/// Re-encodes the model at `input` to file type `ft` (every quantizable weight to `ft`'s base
/// type when `pure`), writing `output`. `progress(i, n, name)` is called per tensor.
pub fn quantize_file(
    input: &Path,
    output: &Path,
    ft: FileType,
    pure: bool,
    mut progress: impl FnMut(usize, usize, &str),
) -> Result<Summary> {
    let gguf = GgufFile::open(input)
        .map_err(|source| LlamaError::Gguf { path: input.display().to_string(), source })?;
    let mut w = GgufWriter::new();
    for (k, v) in gguf.metadata().iter() {
        match k {
            "general.file_type" | "general.quantization_version" => {}
            _ => w.add(k, v.clone())?,
        }
    }
    w.add("general.quantization_version", Value::U32(2))?;
    w.add("general.file_type", Value::U32(ft.id))?;
    let has_output = gguf.tensors().iter().any(|t| t.name == "output.weight");
    // llama.cpp counts ffn_down layers as the block count (its tensors, in files without one).
    let arch = gguf.metadata().get_str("general.architecture").unwrap_or("").to_string();
    let md_uint =
        |k: &str| gguf.metadata().get(&format!("{arch}.{k}")).and_then(|v| v.as_integer());
    let n_ffn_down = match md_uint("block_count") {
        Some(n) => usize::try_from(n).unwrap_or(0),
        None => gguf.tensors().iter().filter(|t| t.name.contains("ffn_down.weight")).count(),
    };
    let mut c = Counters {
        n_attn_v: gguf.tensors().iter().filter(|t| t.name.contains("attn_v.weight")).count(),
        n_ffn_down,
        n_expert: md_uint("expert_count").map_or(0, |n| usize::try_from(n).unwrap_or(0)),
        ..Default::default()
    };
    // Fused models: attn_qkv is counted and typed as attn_v (what llama.cpp's output shows).
    c.n_attn_v += gguf.tensors().iter().filter(|t| t.name.contains("attn_qkv.weight")).count();
    let mut summary = Summary::default();
    let n = gguf.tensors().len();
    for (i, info) in gguf.tensors().iter().enumerate() {
        progress(i, n, &info.name);
        let data = gguf.tensor_data(info);
        let ne0 = info.ne[0] as usize;
        let target = if !quantizable(&info.name, info.n_dims) || ft.base == info.dtype && pure {
            info.dtype
        } else if pure {
            if ne0 % ft.base.block_size() == 0 {
                ft.base
            } else {
                DType::F16
            }
        } else if ft.base.is_quantized() {
            tensor_type(ft, &info.name, (ne0, info.ne[2]), has_output, &mut c)
        } else {
            ft.base
        };
        let bytes = if target == info.dtype || !quantizable(&info.name, info.n_dims) {
            data.to_vec()
        } else {
            summary.n_quantized += 1;
            requantize(info.dtype, data, target, ne0)?
        };
        let target = if quantizable(&info.name, info.n_dims) { target } else { info.dtype };
        summary.n_tensors += 1;
        summary.bytes_in += data.len();
        summary.bytes_out += bytes.len();
        w.add_tensor(&info.name, target, info.shape(), bytes)?;
    }
    w.write_file(output)
        .map_err(|source| LlamaError::Gguf { path: output.display().to_string(), source })?;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q4_k_m_mixes_as_llama_cpp() {
        let ft = FileType::parse("q4_k_m").unwrap();
        let mut c = Counters { n_attn_v: 24, n_ffn_down: 24, ..Default::default() };
        // Qwen2.5-0.5B's shapes: rows of 896 fall back from Q4_K to Q5_0, output gets Q6_K
        // unless its rows are not 256-multiples (then Q8_0), as in the published file.
        assert_eq!(tensor_type(ft, "blk.0.attn_q.weight", (896, 1), true, &mut c), DType::Q5_0);
        assert_eq!(tensor_type(ft, "output.weight", (896, 1), true, &mut c), DType::Q8_0);
        let downs: Vec<DType> = (0..24)
            .map(|i| tensor_type(ft, &format!("blk.{i}.ffn_down.weight"), (4864, 1), true, &mut c))
            .collect();
        // The counter follows file order (blk.0, blk.1, blk.10, ...), as llama.cpp's does.
        assert_eq!(downs[0], DType::Q6_K);
        assert_eq!(downs[3], DType::Q4_K);
        assert_eq!(downs[5], DType::Q6_K);
        assert_eq!(downs[23], DType::Q6_K);
        assert_eq!(FileType::parse("15").unwrap().name, "Q4_K_M");
    }

    #[test]
    fn mxfp4_moe_mixes_as_llama_cpp() {
        let ft = FileType::parse("mxfp4_moe").unwrap();
        let mut c = Counters::default();
        let mut t = |name: &str, ne: (usize, u64)| tensor_type(ft, name, ne, true, &mut c);
        assert_eq!(t("blk.0.ffn_up_exps.weight", (2880, 32)), DType::MXFP4);
        assert_eq!(t("blk.0.attn_q.weight", (2880, 1)), DType::Q8_0);
        assert_eq!(t("output.weight", (2880, 1)), DType::Q8_0);
        // llama.cpp's fallback: rows that are not whole 32-blocks stay F16.
        assert_eq!(t("blk.0.ffn_up_exps.weight", (2890, 32)), DType::F16);
    }
}
