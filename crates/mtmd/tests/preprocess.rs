//! Decoding and preprocessing against llama.cpp's libmtmd (tests/fixtures/preprocess*.json,
//! made by tools/mtmd_preprocess_ref.py with llama.cpp b11312): for each stored test image
//! (PNG RGB, RGBA, 16-bit grey, tiny, wide; GIF; JPEG colour and grey), the decoded RGB bytes
//! equal stb_image's, and the images each preprocessor makes of it equal libmtmd's bit for
//! bit: Gemma 3's (Pillow-compatible bilinear resize into the padded square,
//! `(x/255 − mean)/std`), and Idefics3's tiles and overview, with the file's longest side
//! (Lanczos, twice, then cut) and without (older files: bicubic, padded, rounded to tiles).
//!
//! JPEG is the exception: decoders differ in their IDCT and chroma upsampling, and the `image`
//! crate's is not stb_image's. Its pixels must be within `JPEG_TOL` levels of stb_image's
//! (stored), and stb_image's own bitmap must preprocess to libmtmd's values exactly.

use sha2::{Digest, Sha256};
use std::path::Path;
use tessera_mtmd::synth::{write_random_mmproj, RandomMmproj};
use tessera_mtmd::{preprocess, Bitmap, ImageLimits, Mmproj};

/// Largest difference allowed between the `image` crate's JPEG pixels and stb_image's, and
/// their largest mean difference.
const JPEG_TOL: (u8, f64) = (8, 1.0);

fn hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn images_decode_and_preprocess_as_libmtmds() {
    check("preprocess.json", &RandomMmproj::tiny_gemma3(96));
}

/// Qwen2.5-VL's images of their own size: the pixel budget and merged-patch rounding
/// (`calc_size_preserved_ratio`), bicubic, padded.
#[test]
fn qwen25vl_dynamic_sizes_are_libmtmds() {
    check("preprocess_qwen25vl.json", &RandomMmproj::tiny_qwen25vl(96));
}

#[test]
fn idefics3_tiles_and_overviews_are_libmtmds() {
    check("preprocess_idefics3.json", &RandomMmproj::tiny_idefics3(96));
    let old = RandomMmproj { longest_edge: 0, ..RandomMmproj::tiny_idefics3(96) };
    check("preprocess_idefics3-old.json", &old);
}

fn check(fixture: &str, spec: &RandomMmproj) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let fx: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join(fixture)).unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mmproj.gguf");
    write_random_mmproj(spec, &path).unwrap();
    let mmproj = Mmproj::load(&path).unwrap();
    let mut failures = Vec::new();
    let cases = fx["cases"].as_array().unwrap();
    assert!(cases.len() >= 9, "the stored images");
    for case in cases {
        let file = case["file"].as_str().unwrap();
        let img = Bitmap::open(&root.join("images").join(file), ImageLimits::default()).unwrap();
        assert!(case["decoded"].as_bool().unwrap(), "{file}: libmtmd could not decode it");
        let size =
            (case["width"].as_u64().unwrap() as usize, case["height"].as_u64().unwrap() as usize);
        assert_eq!((img.width, img.height), size, "{file}");
        let img = if let Some(stb) = case["stb_rgb"].as_str() {
            let want = std::fs::read(root.join(stb)).unwrap();
            assert_eq!(hex(&want), case["rgb_sha256"], "{stb}");
            let diffs: Vec<u8> = img.rgb.iter().zip(&want).map(|(a, b)| a.abs_diff(*b)).collect();
            let max = diffs.iter().copied().max().unwrap();
            let mean = diffs.iter().map(|&d| f64::from(d)).sum::<f64>() / diffs.len() as f64;
            eprintln!("{file}: pixels within {max} of stb_image's (mean {mean:.3})");
            if max > JPEG_TOL.0 || mean > JPEG_TOL.1 {
                failures
                    .push(format!("{file}: pixels up to {max} (mean {mean:.3}) off stb_image's"));
            }
            Bitmap::from_rgb(size.0, size.1, want).unwrap()
        } else if hex(&img.rgb) != case["rgb_sha256"] {
            failures.push(format!("{file}: decoded pixels differ from stb_image's"));
            continue;
        } else {
            img
        };
        let pre = preprocess(&mmproj, &img);
        let grid = case
            .get("grid")
            .map(|g| (g[0].as_u64().unwrap() as usize, g[1].as_u64().unwrap() as usize));
        assert_eq!(pre.grid, grid, "{file}: tiles");
        let entries = pre.entries;
        let want = case["entries"].as_array().unwrap();
        assert_eq!(entries.len(), want.len(), "{file}: entries");
        for (j, (e, w)) in entries.iter().zip(want).enumerate() {
            assert_eq!(
                (e.width, e.height),
                (w["width"].as_u64().unwrap() as usize, w["height"].as_u64().unwrap() as usize),
                "{file} entry {j}"
            );
            let bytes: Vec<u8> = e.data.iter().flat_map(|v| v.to_le_bytes()).collect();
            if hex(&bytes) != w["f32_sha256"] {
                let head: Vec<f64> =
                    w["head"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
                failures.push(format!(
                    "{file} entry {j}: preprocessed values differ (ours start {:?}, libmtmd's {:?})",
                    &e.data[..6],
                    head
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
