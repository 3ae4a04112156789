//! What the model-versus-llama.cpp tests share: loading references made by
//! tools/make_refs.py and the three checks of testdata/refs/README.md.

#![allow(dead_code)]

pub mod logits_sample;
pub mod top;

use logits_sample::LogitsSample;
use serde_json::Value;
use std::path::{Path, PathBuf};
use tessera_llama::{Batch, ContextParams, LlamaContext, Model};

const MARGIN: f64 = 0.1;

pub fn refs_dir() -> PathBuf {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/refs");
    assert!(d.is_dir(), "{} is missing: the reference outputs live in testdata/refs", d.display());
    d
}

/// One set of llama.cpp references (`testdata/refs/<set>`), made by one llama.cpp build
/// (`build.json` names it), and the files that say how far llama.cpp's other builds are from
/// it (`spread/<level>-<what>.json`: last-prompt NMSE and teacher-forced disagreements).
pub struct RefSet {
    /// The set's folder (holds `fa-on/`, `fa-off/`, `self_agreement.json`).
    pub dir: PathBuf,
    /// The spread files the checks allow for.
    pub spreads: Vec<PathBuf>,
}

/// The reference set for Tessera running at SIMD `level` with weights repacked or not: the
/// set made by a llama.cpp build of that level in that weight layout, allowing for the spread
/// of llama.cpp's other builds of that level only; where no set matches (the scalar level,
/// where nothing is repacked), the plain AVX-512 set, allowing for the spread of every other
/// build llama.cpp was measured with (its own cross-level differences).
pub fn ref_set(level: &str, repack: bool) -> RefSet {
    let root = refs_dir();
    let mut sets = Vec::new();
    for e in std::fs::read_dir(&root).expect("testdata/refs") {
        let dir = e.unwrap().path();
        let build = dir.join("build.json");
        if !build.is_file() {
            continue;
        }
        let b: Value = serde_json::from_str(&std::fs::read_to_string(&build).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", build.display()));
        let set_level = b["simd_level"].as_str().expect("build.json: simd_level").to_string();
        let set_repack = b["repack"].as_bool().expect("build.json: repack");
        sets.push((dir, set_level, set_repack));
    }
    sets.sort();
    let exact = sets.iter().find(|(_, l, r)| l == level && *r == repack).cloned();
    let matched = exact.is_some();
    let (dir, set_level, set_repack) = exact
        .or_else(|| sets.iter().find(|(_, l, r)| l == "avx512" && !r).cloned())
        .expect("a plain avx512 reference set");
    let mut spreads: Vec<PathBuf> = std::fs::read_dir(dir.join("spread"))
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    spreads.retain(|p| {
        let name = p.file_name().unwrap().to_str().unwrap();
        name.ends_with(".json") && (!matched || name.starts_with(&format!("{level}-")))
    });
    spreads.sort();
    eprintln!(
        "Tessera at {level}, repack {repack}: references {} (llama.cpp {set_level}, repack \
         {set_repack}{}), allowing for {:?}",
        dir.display(),
        if matched { "" } else { "; no set of this level and layout" },
        spreads.iter().map(|p| p.file_name().unwrap()).collect::<Vec<_>>()
    );
    RefSet { dir, spreads }
}

pub fn prompts() -> Vec<String> {
    let text = std::fs::read_to_string(refs_dir().join("prompts.json")).expect("prompts.json");
    let v: Value = serde_json::from_str(&text).expect("prompts.json is JSON");
    v.as_object().expect("an object").keys().cloned().collect()
}

struct Ref {
    prompt_tokens: Vec<u32>,
    greedy: Vec<u32>,
    margins: Vec<f64>,
    /// The last prompt position's logits, sampled, with the other attention path's NMSE.
    logits: LogitsSample,
}

fn load_ref(root: &Path, mode: &str, model: &str, prompt: &str) -> Ref {
    let dir = root.join(mode).join(model);
    let j: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join(format!("{prompt}.json"))).unwrap())
            .unwrap();
    let ids = |k: &str| {
        j[k].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect::<Vec<_>>()
    };
    Ref {
        prompt_tokens: ids("prompt_tokens"),
        greedy: ids("greedy_tokens"),
        margins: j["greedy_top2_margins"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect(),
        logits: LogitsSample::read(&dir.join(format!("{prompt}.logits.sample"))),
    }
}

/// The teacher-forced disagreements of llama.cpp's other attention path with the reference
/// `key` (`model/prompt/mode`), from `path` (made by tools/llama_cpp_self_agreement.py).
fn self_agreement(path: &Path, key: &str) -> Vec<usize> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let v: Value = serde_json::from_str(&text).expect("self_agreement.json is JSON");
    let steps = v[key].as_array().unwrap_or_else(|| panic!("{}: no entry {key}", path.display()));
    steps.iter().map(|s| s.as_u64().unwrap() as usize).collect()
}

/// How far llama.cpp's other builds, same attention path, are from the stored reference
/// `key`: the largest NMSE of their last-prompt logits and the longest list of teacher-forced
/// disagreements among the `spreads` files (tools/llama_cpp_self_agreement.py
/// --reproduction, run with each build); none without files.
fn reproduction(spreads: &[PathBuf], key: &str) -> (f64, Vec<usize>) {
    let mut worst = (0.0f64, Vec::new());
    for path in spreads {
        let text =
            std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let v: Value = serde_json::from_str(&text).expect("reproduction JSON");
        let e = &v[key];
        let nmse =
            e["nmse"].as_f64().unwrap_or_else(|| panic!("{}: no entry {key}", path.display()));
        let steps: Vec<usize> = e["teacher_forced"]
            .as_array()
            .map_or(Vec::new(), |a| a.iter().map(|s| s.as_u64().unwrap() as usize).collect());
        worst.0 = worst.0.max(nmse);
        if steps.len() > worst.1.len() {
            worst.1 = steps;
        }
    }
    worst
}

fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best as u32
}

/// Runs the three checks for every prompt of `model` (file stem `name`) against the
/// references under `root/{fa-on,fa-off}/name`.
/// `agreement` is llama.cpp's own cross-path disagreement file for these references, `spreads`
/// the files of llama.cpp's other builds against them (see [`reproduction`]).
/// `known_gaps` lists failures (`model/prompt/mode/check` prefixes) that are known and tracked;
/// any other failure fails the test.
pub fn check(
    model: &Model,
    name: &str,
    root: &Path,
    agreement: &Path,
    spreads: &[PathBuf],
    flash_attn: bool,
    known_gaps: &[&str],
) {
    let mode = if flash_attn { "fa-on" } else { "fa-off" };
    let params = ContextParams { n_ctx: 512, n_threads: 2, flash_attn, ..Default::default() };
    let mut report = Vec::new();
    let mut failures: Vec<String> = Vec::new();
    for prompt in prompts() {
        let r = load_ref(root, mode, name, &prompt);
        let n_p = r.prompt_tokens.len();

        // As llama.cpp made the reference: the prompt in one batch, then the reference's greedy
        // tokens one at a time (teacher forcing). While Tessera agrees with every token, this is
        // also its own free-running greedy generation.
        let mut ctx = LlamaContext::new(model, params.clone()).unwrap();
        ctx.decode(&Batch::from_tokens(&r.prompt_tokens, 0, 0)).unwrap();
        // 1: the last prompt position's logits. The reference is stored sampled
        // (logits_sample.rs): its NMSE is estimated from the top entries (exactly) and a
        // strided sample of the rest, and must also hold for the lower bound that charges
        // every entry the file does not hold with its least possible error, so an error
        // confined to a few entries outside the sample shows too.
        let mut logits = ctx.logits_ith(n_p - 1).unwrap().to_vec();
        let err = r.logits.nmse_estimate(&logits);
        let floor = r.logits.nmse_lower_bound(&logits);
        let key = format!("{name}/{prompt}/{mode}");
        // llama.cpp's other path (its NMSE against this reference, computed from the full
        // vectors when the file was packed), or llama.cpp's other builds on the same path
        // where they do not reproduce the stored reference exactly, with 1e-3 as the floor.
        let (here, here_bad) = reproduction(spreads, &key);
        let allowed = r.logits.other_nmse.max(here).max(1e-3);
        if err > allowed {
            failures.push(format!("{key}/logits: NMSE {err:.2e} (estimated) > {allowed:.2e}"));
        }
        if floor > allowed {
            failures.push(format!("{key}/logits: NMSE at least {floor:.2e} > {allowed:.2e}"));
        }
        // 2: steps where llama.cpp is confident but Tessera picks another token: no more than
        // llama.cpp's own other attention path has against the same reference.
        let mut bad = Vec::new();
        let mut first_other = None;
        for (t, (&want, &m)) in r.greedy.iter().zip(&r.margins).enumerate() {
            let got = argmax(&logits);
            if got != want {
                first_other.get_or_insert((t, got));
                if m >= MARGIN {
                    bad.push(t);
                }
            }
            if t + 1 < r.greedy.len() {
                ctx.decode(&Batch::from_tokens(&[want], (n_p + t) as i32, 0)).unwrap();
                logits = ctx.logits_ith(0).unwrap().to_vec();
            }
        }
        // llama.cpp's other path, or its other builds on the same path, whichever disagrees more.
        let mut own = self_agreement(agreement, &key);
        if here_bad.len() > own.len() {
            own = here_bad;
        }
        if bad.len() > own.len() {
            failures.push(format!(
                "{key}/teacher-forced: disagreements at steps {bad:?} (margin >= {MARGIN}); llama.cpp's other attention path: {own:?}"
            ));
        }
        // 3: free-running greedy identical up to the first low-margin step, or the first step
        // where llama.cpp's other path itself picks another token (it could not run further
        // identically either).
        let low = r.margins.iter().position(|&m| m < MARGIN).unwrap_or(r.margins.len());
        let stable = own.first().map_or(low, |&s| s.min(low));
        if let Some((t, got)) = first_other.filter(|&(t, _)| t < stable) {
            failures.push(format!(
                "{key}/free-running: step {t} gave {got}, llama.cpp {}",
                r.greedy[t]
            ));
        }
        report.push(format!(
            "{prompt}: nmse {err:.2e} (estimated; at least {floor:.2e}) (llama.cpp's other builds {here:.2e}, allowed {allowed:.2e}), teacher-forced disagreements {bad:?} (llama.cpp's own: {own:?}), {stable} free-running steps"
        ));
    }
    eprintln!("{name} {mode}:\n  {}", report.join("\n  "));
    let unexpected: Vec<&String> =
        failures.iter().filter(|f| !known_gaps.iter().any(|k| f.starts_with(k))).collect();
    for f in failures.iter().filter(|f| !unexpected.contains(f)) {
        eprintln!("KNOWN GAP (listed in the test, see the issue notes): {f}");
    }
    for k in known_gaps.iter().filter(|k| !failures.iter().any(|f| f.starts_with(*k))) {
        eprintln!("known gap {k} passes now: remove it from the list");
    }
    assert!(unexpected.is_empty(), "{name} {mode}: {unexpected:#?}");
}
