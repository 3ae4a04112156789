//! mmproj files: a random Gemma 3 projector loads with its hyperparameters, and every kind of
//! bad file is refused at load with the key, tensor or type named.

use std::path::{Path, PathBuf};
use tessera_gguf::{GgufFile, GgufWriter, Value};
use tessera_mtmd::synth::{write_random_mmproj, RandomMmproj};
use tessera_mtmd::{FfnAct, Mmproj, MtmdError, Projector};

fn good(dir: &Path) -> PathBuf {
    let path = dir.join("mmproj.gguf");
    write_random_mmproj(&RandomMmproj::tiny_gemma3(96), &path).unwrap();
    path
}

/// `good`'s file rewritten by `edit` (metadata) without the tensor `drop`, with `reshape`.
fn variant(
    dir: &Path,
    name: &str,
    edit: impl FnOnce(&mut tessera_gguf::Metadata),
    drop: Option<&str>,
) -> PathBuf {
    let mut f = GgufFile::read(good(dir)).unwrap();
    edit(f.metadata_mut());
    let mut w = GgufWriter::new();
    for (k, v) in f.metadata().iter() {
        w.add(k, v.clone()).unwrap();
    }
    for t in f.tensors() {
        if Some(t.name.as_str()) != drop {
            w.add_tensor(&t.name, t.dtype, t.shape(), f.tensor_data(t)).unwrap();
        }
    }
    let path = dir.join(name);
    w.write_file(&path).unwrap();
    path
}

fn set(md: &mut tessera_gguf::Metadata, key: &str, v: Value) {
    md.remove(key);
    md.push(key, v);
}

fn refused(path: &Path) -> String {
    match Mmproj::load(path) {
        Ok(_) => panic!("{} loaded", path.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_random_gemma3_projector_loads() {
    let dir = tempfile::tempdir().unwrap();
    let m = Mmproj::load(good(dir.path())).unwrap();
    assert_eq!(m.projector, Projector::Gemma3);
    let h = &m.hparams;
    assert_eq!((h.image_size, h.patch_size, h.n_embd, h.n_ff), (64, 8, 64, 128));
    assert_eq!((h.n_layer, h.n_head, h.n_merge), (2, 4, 2));
    assert_eq!((h.image_mean, h.image_std), ([0.5; 3], [0.5; 3]));
    assert_eq!(h.ffn_act, FfnAct::Gelu);
    assert_eq!(m.n_mmproj_embd, 96);
    assert_eq!(h.n_output_tokens(), 16);
}

#[test]
fn bad_files_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let e =
        refused(&variant(d, "llm.gguf", |m| set(m, "general.architecture", "llama".into()), None));
    assert!(e.contains("'llama'") && e.contains("--mmproj"), "{e}");
    let e =
        refused(&variant(d, "px.gguf", |m| set(m, "clip.projector_type", "pixtral".into()), None));
    assert!(e.contains("'pixtral' is not implemented"), "{e}");
    let e = refused(&variant(
        d,
        "au.gguf",
        |m| set(m, "clip.has_vision_encoder", Value::Bool(false)),
        None,
    ));
    assert!(e.contains("no vision encoder"), "{e}");
    let e =
        refused(&variant(d, "ps.gguf", |m| set(m, "clip.vision.patch_size", Value::U32(7)), None));
    assert!(e.contains("clip.vision.patch_size") && e.contains("does not divide"), "{e}");
    let e =
        refused(&variant(d, "z.gguf", |m| set(m, "clip.vision.block_count", Value::U32(0)), None));
    assert!(e.contains("clip.vision.block_count") && e.contains("outside"), "{e}");
    let std0 = Value::Array(tessera_gguf::Array::F32(vec![0.5, 0.0, 0.5]));
    let e = refused(&variant(d, "s.gguf", |m| set(m, "clip.vision.image_std", std0), None));
    assert!(e.contains("clip.vision.image_std"), "{e}");
    let e = refused(&variant(
        d,
        "nk.gguf",
        |m| {
            m.remove("clip.vision.embedding_length");
        },
        None,
    ));
    assert!(e.contains("clip.vision.embedding_length"), "{e}");
    let e = refused(&variant(d, "mt.gguf", |_| {}, Some("v.blk.1.ffn_down.weight")));
    assert!(e.contains("'v.blk.1.ffn_down.weight': missing"), "{e}");
    // One block more than the file has: its tensors are missing.
    let e =
        refused(&variant(d, "nl.gguf", |m| set(m, "clip.vision.block_count", Value::U32(3)), None));
    assert!(e.contains("v.blk.2."), "{e}");
    // A wider tower than the tensors: a shape mismatch named.
    let e = refused(&variant(
        d,
        "w.gguf",
        |m| set(m, "clip.vision.embedding_length", Value::U32(128)),
        None,
    ));
    assert!(e.contains("v.patch_embd.weight") && e.contains("shape"), "{e}");
    assert!(matches!(Mmproj::load(d.join("absent.gguf")), Err(MtmdError::Gguf { .. })));
    // llama.cpp's default feed-forward (neither GELU nor SiLU said): the quick GELU, refused.
    let e = refused(&variant(
        d,
        "q.gguf",
        |m| {
            m.remove("clip.use_gelu");
        },
        None,
    ));
    assert!(e.contains("quick-GELU"), "{e}");
}

/// The other families load with their own keys and tensors; what they lack is named.
#[test]
fn idefics3_and_qwen25vl_projectors_load() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("i.gguf");
    write_random_mmproj(&RandomMmproj::tiny_idefics3(576), &path).unwrap();
    let m = Mmproj::load(&path).unwrap();
    assert_eq!(
        (m.projector, m.n_mmproj_embd, m.hparams.longest_edge),
        (Projector::Idefics3, 576, 128)
    );
    let path = dir.path().join("q.gguf");
    write_random_mmproj(&RandomMmproj::tiny_qwen25vl(256), &path).unwrap();
    let m = Mmproj::load(&path).unwrap();
    let h = &m.hparams;
    assert_eq!((m.projector, m.n_mmproj_embd, h.n_wa_pattern), (Projector::Qwen25Vl, 256, 2));
    assert_eq!((h.min_pixels, h.max_pixels), (8 * 256, 4096 * 256), "8 to 4096 tokens of 16 x 16");
    assert_eq!(h.merged_grid(208, 16), (13, 1));
    // Without its second patch kernel, or its window pattern: named.
    let mut f = GgufFile::read(&path).unwrap();
    f.metadata_mut().remove("clip.vision.n_wa_pattern");
    let mut w = GgufWriter::new();
    for (k, v) in f.metadata().iter() {
        w.add(k, v.clone()).unwrap();
    }
    for t in f.tensors().iter().filter(|t| t.name != "v.patch_embd.weight.1") {
        w.add_tensor(&t.name, t.dtype, t.shape(), f.tensor_data(t)).unwrap();
    }
    let bad = dir.path().join("bad.gguf");
    w.write_file(&bad).unwrap();
    assert!(refused(&bad).contains("clip.vision.n_wa_pattern"));
    let mut w = GgufWriter::new();
    for (k, v) in GgufFile::read(&path).unwrap().metadata().iter() {
        w.add(k, v.clone()).unwrap();
    }
    let g = GgufFile::read(&path).unwrap();
    for t in g.tensors().iter().filter(|t| t.name != "v.patch_embd.weight.1") {
        w.add_tensor(&t.name, t.dtype, t.shape(), g.tensor_data(t)).unwrap();
    }
    w.write_file(&bad).unwrap();
    assert!(refused(&bad).contains("'v.patch_embd.weight.1': missing"));
}
