//! `tessera run --mmproj P --image F` as a llama-mtmd-cli user runs it: Gemma-3-270M with the
//! random Gemma 3 projector of its width and a stored test image gives llama.cpp's greedy
//! tokens (crates/mtmd's image_prompt fixture of the SIMD level, made with llama.cpp b11312's
//! mtmd); the image is echoed as `[image]`; and the misuses are named errors.

mod common;

use std::path::Path;
use std::process::Command;

fn mtmd_fixtures() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../mtmd/tests/fixtures")
}

fn run(args: &[&str]) -> (bool, String, String) {
    run_with(args, &[])
}

fn run_with(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn an_image_prompt_generates_llama_cpps_tokens() {
    let level = tessera_backend_cpu::SimdLevel::from_env();
    let fixture = mtmd_fixtures().join(format!("image_prompt_{}.json", level.name()));
    if !fixture.exists() {
        eprintln!("no llama.cpp reference for the {} level", level.name());
        return;
    }
    let fx: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&fixture).unwrap()).unwrap();
    let model = tessera_models::ensure(&tessera_models::GEMMA3).expect("fetching the model");
    let dir = tempfile::tempdir().unwrap();
    let mm = dir.path().join("mmproj.gguf");
    let spec = tessera_mtmd::synth::RandomMmproj::tiny_gemma3(640);
    tessera_mtmd::synth::write_random_mmproj(&spec, &mm).unwrap();
    let image = mtmd_fixtures().join("images").join(fx["image"].as_str().unwrap());
    let (m, mm, image) = (model.to_str().unwrap(), mm.to_str().unwrap(), image.to_str().unwrap());
    let prompt = fx["prompt"].as_str().unwrap();
    let (ok, out, err) = run(&[
        "run", "-m", m, "--mmproj", mm, "--image", image, "-p", prompt, "-n", "10", "--temp", "0",
        "-t", "2", "-no-cnv",
    ]);
    assert!(ok, "{err}");
    let gguf = tessera_gguf::GgufFile::open(model.as_path()).unwrap();
    let vocab = tessera_llama::Vocab::from_metadata(gguf.metadata()).unwrap();
    let greedy: Vec<u32> = fx["steps"].as_array().unwrap()[1..]
        .iter()
        .map(|s| s["token"].as_u64().unwrap() as u32)
        .collect();
    let want: Vec<u8> = greedy.iter().flat_map(|&t| vocab.token_to_piece(t, false)).collect();
    let want = String::from_utf8(want).unwrap();
    assert!(out.contains("[image]"), "{out}");
    assert!(
        out.ends_with(&want) || out.trim_end().ends_with(want.trim_end()),
        "{out:?} does not end with {want:?}"
    );
    assert!(err.contains("image eval time"), "{err}");
    // The model and the encoder on a simulated accelerator (ops it lacks on the CPU): the same
    // tokens.
    let (ok, sim_out, sim_err) = run_with(
        &[
            "run", "-m", m, "--mmproj", mm, "--image", image, "-p", prompt, "-n", "10", "--temp",
            "0", "-t", "2", "-no-cnv", "-ngl", "99",
        ],
        &[("TESSERA_SIM_DEVICES", "1")],
    );
    assert!(ok, "{sim_err}");
    assert!(
        sim_out.trim_end().ends_with(want.trim_end()),
        "{sim_out:?} does not end with {want:?}"
    );
    // Misuses.
    let (ok, _, err) = run(&["run", "-m", m, "--image", image, "-p", "hi", "-no-cnv"]);
    assert!(!ok && err.contains("--mmproj"), "{err}");
    // A projector without images: a text prompt, as llama-mtmd-cli.
    let (ok, _, err) = run(&["run", "-m", m, "--mmproj", mm, "-p", "hi", "-n", "2", "-no-cnv"]);
    assert!(ok && !err.contains("image eval time"), "{err}");
    let (ok, _, err) = run(&[
        "run",
        "-m",
        m,
        "--mmproj",
        mm,
        "--image",
        image,
        "-p",
        "<__media__><__media__>",
        "-no-cnv",
    ]);
    assert!(!ok && err.contains("2 media markers"), "{err}");
    let other = dir.path().join("other.gguf");
    tessera_mtmd::synth::write_random_mmproj(
        &tessera_mtmd::synth::RandomMmproj::tiny_gemma3(96),
        &other,
    )
    .unwrap();
    let (ok, _, err) = run(&[
        "run",
        "-m",
        m,
        "--mmproj",
        other.to_str().unwrap(),
        "--image",
        image,
        "-p",
        "hi",
        "-no-cnv",
    ]);
    assert!(!ok && err.contains("96 wide"), "{err}");
    let (ok, _, err) = run(&["serve", "-m", m, "--mmproj", other.to_str().unwrap()]);
    assert!(!ok && err.contains("96 wide"), "{err}");
    let bad = dir.path().join("bad.png");
    std::fs::write(&bad, b"not an image at all").unwrap();
    let (ok, _, err) = run(&[
        "run",
        "-m",
        m,
        "--mmproj",
        mm,
        "--image",
        bad.to_str().unwrap(),
        "-p",
        "hi",
        "-no-cnv",
    ]);
    assert!(!ok && err.contains("bad.png"), "{err}");
}

/// A conversation fed through a pipe.
fn piped(args: &[&str], input: &str) -> (bool, String, String) {
    let out = common::piped_output(args, &[], input);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_conversation_takes_images_with_slash_image() {
    // SmolLM2 (a chat template) with a random Gemma 3 projector of its width: the mechanics
    // (the projector's type and the model need not be a real pair).
    let model = tessera_models::ensure(&tessera_models::SMOLLM2).expect("fetching the model");
    let dir = tempfile::tempdir().unwrap();
    let mm = dir.path().join("mmproj.gguf");
    let spec = tessera_mtmd::synth::RandomMmproj::tiny_gemma3(576);
    tessera_mtmd::synth::write_random_mmproj(&spec, &mm).unwrap();
    let image = mtmd_fixtures().join("images/rgb_37x23.png");
    let (m, mm, image) = (model.to_str().unwrap(), mm.to_str().unwrap(), image.to_str().unwrap());
    let input = format!(
        "/image {image}\nWhat is this?\n/regen\nAnd now?\n/image {image}\n/image {image}\nTwo more.\n/image /no/such.png\n/exit\n"
    );
    let (ok, _out, err) = piped(
        &["run", "-m", m, "--mmproj", mm, "-cnv", "-n", "4", "--temp", "0", "-t", "2"],
        &input,
    );
    assert!(ok, "{err}");
    assert_eq!(err.matches("(37x23) added to the next message").count(), 3, "{err}");
    // The first turn evaluates the image's 16 positions with its text; the second only its own
    // text; the third two images.
    let turns: Vec<&str> = err.lines().filter(|l| l.starts_with("[turn ")).collect();
    assert_eq!(turns.len(), 3, "{err}");
    assert!(err.contains("/regen is not available once images are in the conversation"), "{err}");
    assert!(err.contains("such.png"), "{err}");
    let evaluated = |l: &str| -> usize {
        l.split(": ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap()
    };
    assert!(evaluated(turns[0]) > 16 && evaluated(turns[1]) < 16, "{turns:?}");
    assert!(evaluated(turns[2]) > 32, "{turns:?}");
    // Without --mmproj, /image is refused by name.
    let (ok, _, err) =
        piped(&["run", "-m", m, "-cnv", "-n", "2", "-t", "2"], &format!("/image {image}\n/exit\n"));
    assert!(ok && err.contains("--mmproj"), "{err}");
}
