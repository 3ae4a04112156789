//! The Gemma 3 and Idefics3 vision encoders against llama.cpp's libmtmd (tests/fixtures/encode_LEVEL.json,
//! made by tools/mtmd_preprocess_ref.py: b11312's `clip_image_encode` on the CPU, 2 threads,
//! flash attention on, computing with the level's explicit-flags ggml) of the random
//! `RandomMmproj::tiny_gemma3(96)` and three stored test images: the embeddings equal
//! libmtmd's bit for bit (every node does: patch convolution, LayerNorm, attention, GELU,
//! pooling, projection). At the scalar level there is no reference, and the test says so.

use std::path::Path;
use std::sync::Arc;
use tessera_mtmd::synth::{write_random_mmproj, RandomMmproj};
use tessera_mtmd::{preprocess, Bitmap, Encoder, ImageLimits, Mmproj};

fn from_hex(s: &str) -> Vec<f32> {
    let bytes: Vec<u8> =
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect();
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

#[test]
fn gemma3_embeddings_are_libmtmds() {
    check("encode", &RandomMmproj::tiny_gemma3(96));
}

/// The Idefics3 tower and its pixel shuffle, on every tile and overview of the images.
/// Qwen2.5-VL's tower (two patch kernels, 2-D RoPE, a windowed then a global block, SwiGLU,
/// the merger) on images of their own sizes, one of them two windows wide.
#[test]
fn qwen25vl_embeddings_are_libmtmds() {
    check("encode_qwen25vl", &RandomMmproj::tiny_qwen25vl(96));
}

#[test]
fn idefics3_embeddings_are_libmtmds() {
    check("encode_idefics3", &RandomMmproj::tiny_idefics3(96));
}

fn check(fixture: &str, spec: &RandomMmproj) {
    let level = tessera_backend_cpu::SimdLevel::from_env();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let fixture = root.join(format!("{fixture}_{}.json", level.name()));
    if !fixture.exists() {
        eprintln!("no libmtmd reference for the {} level: nothing to compare", level.name());
        return;
    }
    let fx: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&fixture).unwrap()).unwrap();
    assert_eq!(fx["simd_level"], level.name());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mmproj.gguf");
    write_random_mmproj(spec, &path).unwrap();
    let mmproj = Arc::new(Mmproj::load(&path).unwrap());
    let cpu = tessera_backend_cpu::CpuBackend::new(2);
    let mut enc = Encoder::new(mmproj.clone(), vec![Box::new(cpu)]).unwrap();
    let cases = fx["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 3);
    for case in cases {
        let file = case["file"].as_str().unwrap();
        let img = Bitmap::open(&root.join("images").join(file), ImageLimits::default()).unwrap();
        let entries = preprocess(&mmproj, &img).entries;
        let want = case["embeddings"].as_array().unwrap();
        assert_eq!(entries.len(), want.len(), "{file}");
        for (e, w) in entries.iter().zip(want) {
            let got = enc.encode(e).unwrap();
            let w = from_hex(w.as_str().unwrap());
            assert_eq!(got.len(), w.len(), "{file}: values");
            let max = got.iter().zip(&w).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
            let differ = got.iter().zip(&w).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
            assert_eq!(differ, 0, "{file}: {differ} values differ from libmtmd's (up to {max:e})");
        }
    }
    // A wrongly sized image is an error, not a panic.
    let small = tessera_mtmd::ImageF32 { width: 8, height: 8, data: vec![0.0; 8 * 8 * 3] };
    let e = enc.encode(&small).unwrap_err().to_string();
    assert!(e.contains("8x8") && e.contains("preprocess it first"), "{e}");
}
