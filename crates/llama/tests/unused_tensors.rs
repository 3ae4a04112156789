//! Every tensor of a file is read, or the file is refused: Llama 3's RoPE frequency factors
//! (`rope_freqs.weight`) change the `llama` graph, and a tensor no architecture reads is an
//! error naming it (`--allow-unused-tensors` loads the file anyway, without it), where it was
//! silently ignored before.

use std::path::{Path, PathBuf};
use tessera_gguf::{GgufFile, GgufWriter};
use tessera_llama::synth::{write_random_model, SynthSpec};
use tessera_llama::{Batch, ContextParams, LlamaContext, LlamaError, LoadParams, Model};
use tessera_tensor::DType;

fn spec(arch: &str) -> SynthSpec {
    SynthSpec { n_embd: 128, n_ff: 256, ..SynthSpec::small(arch, DType::F16) }
}

/// A random `arch` model, written to `dir`.
fn base_model(dir: &Path, arch: &str) -> PathBuf {
    let vocab = tessera_models::fixtures::vocab("ggml-vocab-llama-bpe.gguf").unwrap();
    let v = GgufFile::open(&vocab).unwrap();
    let path = dir.join(format!("{arch}.gguf"));
    write_random_model(&spec(arch), v.metadata(), &path).unwrap();
    path
}

/// `src` with one more F32 tensor `name` of `values`.
fn with_tensor(src: &Path, name: &str, values: &[f32], out: &Path) -> PathBuf {
    let file = GgufFile::open(src).unwrap();
    let mut w = GgufWriter::from_gguf(&file).unwrap();
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    w.add_tensor(name, DType::F32, &[values.len() as u64], bytes).unwrap();
    w.write_file(out).unwrap();
    out.to_path_buf()
}

fn load(path: &Path, allow: bool) -> Model {
    let params = LoadParams {
        allow_unused_tensors: allow,
        ..LoadParams::new(tessera_backend_cpu::CpuDevice::shared())
    };
    Model::load_with(path, &params).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The error loading `path` (unused tensors not allowed) gives.
fn load_err(path: &Path) -> LlamaError {
    match Model::load_with(path, &LoadParams::new(tessera_backend_cpu::CpuDevice::shared())) {
        Ok(_) => panic!("{} loaded", path.display()),
        Err(e) => e,
    }
}

/// The last position's logits of a 20-token prompt (positions up to 19: rotations that the
/// frequency factors visibly change).
fn logits(model: &Model) -> Vec<u32> {
    let params = ContextParams { n_ctx: 128, n_threads: 2, ..ContextParams::default() };
    let mut ctx = LlamaContext::new(model, params).unwrap();
    let toks =
        model.vocab.tokenize("one two three four five six seven eight nine ten", true, false);
    ctx.decode(&Batch::from_tokens(&toks, 0, 0)).unwrap();
    ctx.logits_ith(toks.len() - 1).unwrap().iter().map(|x| x.to_bits()).collect()
}

#[test]
fn llama_reads_rope_freqs() {
    let dir = tempfile::tempdir().unwrap();
    let plain = base_model(dir.path(), "llama");
    let n = 128 / 4 / 2; // n_rot / 2
    let ones = with_tensor(&plain, "rope_freqs.weight", &vec![1.0; n], &dir.path().join("1.gguf"));
    let f: Vec<f32> = (0..n).map(|i| 1.0 + (i % 5) as f32).collect();
    let factors = with_tensor(&plain, "rope_freqs.weight", &f, &dir.path().join("f.gguf"));
    let base = logits(&load(&plain, false));
    // Factors of 1 divide nothing: the same bits as the file without the tensor.
    assert!(logits(&load(&ones, false)) == base, "rope_freqs of ones changed logits");
    // Other factors change the rotation, so the logits (the RoPE kernels' handling of the
    // factors is checked against the f64 reference by the test matrix's ROPE ff cases).
    assert!(logits(&load(&factors, false)) != base, "rope_freqs.weight was ignored");
    // The wrong size is a shape error naming the tensor.
    let bad =
        with_tensor(&plain, "rope_freqs.weight", &vec![1.0; n + 1], &dir.path().join("b.gguf"));
    let e = load_err(&bad);
    assert!(e.to_string().contains("rope_freqs.weight"), "{e}");
}

#[test]
fn a_tensor_no_architecture_reads_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    // qwen2 does not read rope_freqs (llama.cpp's qwen2 graph has none).
    let plain = base_model(dir.path(), "qwen2");
    let extra = with_tensor(&plain, "rope_freqs.weight", &[2.0; 16], &dir.path().join("x.gguf"));
    match load_err(&extra) {
        LlamaError::UnusedTensors { arch, names } => {
            assert_eq!(arch, "qwen2");
            assert_eq!(names, ["rope_freqs.weight"]);
        }
        other => panic!("expected UnusedTensors, got {other}"),
    }
    // Allowed: loaded, the tensor ignored (the same logits as without it).
    let got = logits(&load(&extra, true));
    assert!(got == logits(&load(&plain, false)));
    // Any name, in any architecture.
    let llama = base_model(dir.path(), "llama");
    let odd = with_tensor(&llama, "blk.0.attn_sinks", &[0.5; 4], &dir.path().join("o.gguf"));
    let e = load_err(&odd);
    assert!(e.to_string().contains("blk.0.attn_sinks"), "{e}");
}
