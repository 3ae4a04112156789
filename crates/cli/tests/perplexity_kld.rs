//! `tessera perplexity` end to end on the default model: a KL-divergence base file written by
//! one run and read by another, in llama-perplexity's format.

use std::process::Command;

fn tessera() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tessera"))
}

/// Runs tessera and returns stdout, failing with its stderr.
fn run(args: &[&str]) -> String {
    let out = tessera().args(args).output().expect("running tessera");
    assert!(out.status.success(), "tessera {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf-8")
}

fn value(report: &str, label: &str) -> f64 {
    let line = report
        .lines()
        .find(|l| l.starts_with(label))
        .unwrap_or_else(|| panic!("no '{label}' in\n{report}"));
    let rest = line[label.len()..].trim_start_matches([' ', ':']);
    rest.split_whitespace().next().unwrap().trim_end_matches('%').parse().unwrap()
}

#[test]
fn kl_divergence_base_round_trips_and_compares_attention_paths() {
    let model = tessera_models::ensure(&tessera_models::SMOLLM2).expect("model");
    let model = model.to_str().unwrap();
    let text = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/ARCHITECTURE.md");
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("base.kld");
    let base = base.to_str().unwrap();
    let ppl = run(&[
        "perplexity",
        "-m",
        model,
        "-f",
        text,
        "-c",
        "128",
        "--chunks",
        "4",
        "-t",
        "2",
        "--kl-divergence-base",
        base,
    ]);
    assert!(ppl.contains("Final estimate: PPL = "), "{ppl}");
    // `--kl-divergence` against the base file, with the flash-attention setting given.
    let compare_with = |fa: &str, more: &[&str]| {
        let mut args = vec![
            "perplexity",
            "-m",
            model,
            "--kl-divergence-base",
            base,
            "--kl-divergence",
            "-t",
            "2",
            "-fa",
            fa,
        ];
        args.extend_from_slice(more);
        run(&args)
    };
    let compare = |fa: &str| compare_with(fa, &[]);
    // The same model and path against its own file: only the 16-bit log-probabilities differ.
    let same = compare("on");
    assert!(value(&same, "Mean    KLD:") < 1e-4, "{same}");
    assert_eq!(value(&same, "Same top p:"), 100.0, "{same}");
    // The other attention path: close, as llama.cpp's own fa-on vs fa-off.
    let other = compare("off");
    assert!(value(&other, "Mean    KLD:") < 0.02, "{other}");
    assert!(value(&other, "Same top p:") > 90.0, "{other}");
    // Micro-batches of 16 tokens (llama-perplexity's -ub; -ub 1 makes every token a decoding
    // step): close, not equal, since flash attention's one-row kernel (a micro-batch's rows
    // over the cells of earlier ones) keeps its sums in f16 as llama.cpp's does: about fa-on
    // vs fa-off's distance on this model (0.005).
    let split = compare_with("on", &["-ub", "16"]);
    assert!(value(&split, "Mean    KLD:") < 0.02, "{split}");
    assert!(value(&split, "Same top p:") > 90.0, "{split}");
    let out = tessera()
        .args(["perplexity", "-m", model, "--kl-divergence-base", base, "--kl-divergence"])
        .args(["-ub", "0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("-ub 0: a micro-batch takes 1 to"), "{err}");
}

#[test]
fn a_bad_base_file_is_a_one_line_error() {
    let model = tessera_models::ensure(&tessera_models::SMOLLM2).expect("model");
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.kld");
    std::fs::write(&bad, b"GGUF and then some").unwrap();
    let out = tessera()
        .args([
            "perplexity",
            "-m",
            model.to_str().unwrap(),
            "--kl-divergence-base",
            bad.to_str().unwrap(),
            "--kl-divergence",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("_logits_"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// Repacked weights (llama.cpp's default) against `--no-repack` on a model that has some
/// (Qwen2.5's Q4_K FFN weights): as close as llama.cpp's own two layouts (its repack on vs off
/// on Gemma-3, AVX2: mean KLD 0.0061, same top 95.4%).
#[test]
fn repacked_and_plain_weights_agree_as_llama_cpps_do() {
    let model = tessera_models::ensure(&tessera_models::QWEN25_CODER).expect("model");
    let model = model.to_str().unwrap();
    let text = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/ARCHITECTURE.md");
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("plain.kld");
    let base = base.to_str().unwrap();
    let common = ["perplexity", "-m", model, "-t", "2", "--kl-divergence-base", base];
    let mut args = common.to_vec();
    args.extend(["-f", text, "-c", "128", "--chunks", "2", "--no-repack"]);
    run(&args);
    let mut args = common.to_vec();
    args.push("--kl-divergence");
    let report = run(&args);
    let kld = value(&report, "Mean    KLD:");
    assert!(kld < 0.0061, "{report}");
    assert!(value(&report, "Same top p:") > 90.0, "{report}");
}
