//! `cargo xtask`: the project's automation, in Rust so it runs wherever cargo does.
//!
//! - `cargo xtask ci`: what CI runs, set-up included: the test data checked against its sums,
//!   the git-tracked tree checked to stay under 24 MiB, docs/ARCHITECTURE.md's crate map
//!   checked against `cargo metadata`,
//!   a Python environment of its own (target/pyenv, pinned by tools/requirements-ci.txt),
//!   format check, clippy with warnings denied, the real models fetched and verified, the whole
//!   test suite, the model tests again at the lower x86 classes this CPU can stand in for
//!   (`TESSERA_SIMD=avx2`; AVX-512 without VNNI and BF16), then the kernel test matrix. A fresh
//!   clone needs only Rust and python3.
//! - `cargo xtask bench-model SHAPE TYPE OUT`: a random-weight model of a benchmark shape
//!   (`llama-3.2-1b`, `llama-3.1-8b`, `llama-tiny`, `qwen3-30b-a3b-4l`; llama 3's vocabulary)
//!   with its weights of TYPE (`f16`,
//!   `q4_0`, `q8_0`, ...), written by the project's writer; `tessera quantize` makes the mixes
//!   (Q4_K_M) from an f16 one.
//! - `cargo xtask testdata [check | sums | import DIR | size]`: the fixtures under testdata/
//!   (testdata/README.md says where each came from); `size`: the tracked tree's 24 MiB limit.
//! - `cargo xtask models [NAME...]`: fetch, assemble and checksum the real models into the cache
//!   (`TESSERA_MODELS`, default under the user's cache directory) and print their paths.
//! - `cargo xtask synth-models DIR`: writes the random-weight models the tests compare with
//!   llama.cpp: qwen3 and gpt2 (crates/llama/tools/make_synth_refs.sh makes their references),
//!   gemma2 and phi3 (tools/make_family_refs.py), qwen3moe in F16 (tools/make_moe_refs.py).
//! - `cargo xtask crate-map`: prints docs/ARCHITECTURE.md's crate map as `cargo metadata` has it.
//! - `cargo xtask test-matrix [--ops REGEX] [--threads 1,2,3] [--simd scalar,avx2,avx512]`: every
//!   op x type x shape case of tessera-testmatrix on the CPU backend, for each thread count and
//!   SIMD level, against the float64 reference; prints the table, fails on any failure. Built in
//!   release (the matrix runs kernels, not the harness, and must stay fast on CI's 2 cores).
//! - `cargo xtask gpu-bundle`: tessera-backend-cuda's test binaries (feature `cuda`, release)
//!   and the `tessera` binary copied into `.gpu/` (git-ignored) with `.gpu/run.sh`, which runs
//!   them all with `REQUIRE_CUDA=1` (nothing may skip): the one device call that reproduces
//!   the GPU results is `bash .gpu/run.sh` with `.gpu` carried.

mod crate_map;
mod pyenv;
mod testdata;

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// The repository root (xtask lives one level below it).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask has a parent").to_path_buf()
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("ci") => ci(),
        Some("models") => models(&args[1..]),
        Some("test-matrix") => test_matrix(&args[1..]),
        Some("synth-models") => synth_models(&args[1..]),
        Some("crate-map") => crate_map::print(&root()),
        Some("testdata") => testdata::command(&root(), &args[1..]),
        Some("bench-model") => bench_model(&args[1..]),
        Some("gpu-bundle") => gpu_bundle(),
        _ => {
            eprintln!(
                "usage: cargo xtask <ci | models [smollm2|qwen2.5-coder|gemma3]... | test-matrix \
                 [--ops REGEX] [--threads 1,2,3] [--simd scalar,avx2,avx512] | synth-models \
                 [DIR] | bench-model SHAPE TYPE OUT | testdata [check|sums|import DIR|size] | \
                 crate-map | gpu-bundle>"
            );
            std::process::exit(2)
        }
    }
}

fn cargo(args: &[&str]) -> Result<()> {
    let start = Instant::now();
    eprintln!("==> cargo {}", args.join(" "));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo).args(args).status().context("running cargo")?;
    if !status.success() {
        bail!("`cargo {}` failed ({status})", args.join(" "));
    }
    eprintln!("<== cargo {} ({:.0}s)", args[0], start.elapsed().as_secs_f64());
    Ok(())
}

fn ci() -> Result<()> {
    let start = Instant::now();
    let root = root();
    std::env::set_current_dir(&root)?;
    testdata::check(&root.join("testdata"))?;
    testdata::check_tracked_size(&root)?;
    crate_map::check(&root)?;
    // Every child (cargo, the tests, pip for the models) sees this environment's python.
    let python = pyenv::ensure(&root)?;
    std::env::set_var("PATH", pyenv::path_with(&python)?);
    std::env::set_var("PYTHON", &python);
    cargo(&["fmt", "--all", "--", "--check"])?;
    cargo(&["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"])?;
    models(&[])?;
    cargo(&["test", "--workspace", "--no-fail-fast"])?;
    cuda_tests(&python)?;
    avx2_model_tests()?;
    plain_avx512_model_tests()?;
    test_matrix(&[])?;
    eprintln!("xtask ci: all green in {:.0}s", start.elapsed().as_secs_f64());
    Ok(())
}

/// tessera-backend-cuda with its `cuda` feature (which the workspace build leaves off):
/// clippy, and its tests with NVRTC from the environment's `nvidia-cuda-nvrtc` wheel and
/// `REQUIRE_NVRTC=1`, so every kernel is compiled to CUBIN on this GPU-less machine (the
/// device tests take the no-CUDA error path here).
fn cuda_tests(python: &Path) -> Result<()> {
    let out = Command::new(python)
        .args(["-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
        .output()
        .context("asking the environment's python for its site-packages")?;
    let site = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let lib = site.join("nvidia/cu13/lib");
    if !lib.join("libnvrtc.so.13").exists() {
        bail!(
            "{}: no libnvrtc.so.13 (tools/requirements-ci.txt pins nvidia-cuda-nvrtc)",
            lib.display()
        );
    }
    let flags = ["-p", "tessera-backend-cuda", "--features", "cuda"];
    // The crate and the binaries' `cuda` features (the CLI's registry, the test matrix's
    // backend) in one run.
    cargo(&[
        "clippy",
        "-p",
        "tessera-backend-cuda",
        "-p",
        "tessera-cli",
        "-p",
        "tessera-testmatrix",
        "--features",
        "tessera-backend-cuda/cuda,tessera-cli/cuda,tessera-testmatrix/cuda",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ])?;
    let old = std::env::var_os("LD_LIBRARY_PATH");
    let mut dirs = vec![lib];
    dirs.extend(old.iter().flat_map(std::env::split_paths));
    std::env::set_var("LD_LIBRARY_PATH", std::env::join_paths(dirs)?);
    std::env::set_var("REQUIRE_NVRTC", "1");
    let r = cargo(&[&["test"][..], &flags].concat());
    std::env::remove_var("REQUIRE_NVRTC");
    match old {
        Some(v) => std::env::set_var("LD_LIBRARY_PATH", v),
        None => std::env::remove_var("LD_LIBRARY_PATH"),
    }
    r
}

/// Builds what the GPU machine runs into `.gpu/` (see the crate docs): no Rust there.
fn gpu_bundle() -> Result<()> {
    let root = root();
    std::env::set_current_dir(&root)?;
    let dir = root.join(".gpu");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("tests"))?;
    let cargo_bin = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    eprintln!("==> cargo test -p tessera-backend-cuda --features cuda --release --no-run");
    let out = Command::new(&cargo_bin)
        .args(["test", "-p", "tessera-backend-cuda", "--features", "cuda", "--release"])
        .args(["--no-run", "--message-format=json"])
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("running cargo")?;
    if !out.status.success() {
        bail!("building the CUDA tests failed");
    }
    let mut names = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        // `"executable":"/path"` in cargo's compiler-artifact messages of test targets.
        let Some(at) = line.find("\"executable\":\"") else { continue };
        let rest = &line[at + 14..];
        let Some(end) = rest.find('"') else { continue };
        let exe = PathBuf::from(&rest[..end]);
        let name = exe.file_name().context("test binary name")?.to_string_lossy().into_owned();
        // Test binaries are named `stem-HASH`; keep the stem.
        let stem = name.rsplit_once('-').map_or(name.as_str(), |(s, _)| s).to_string();
        std::fs::copy(&exe, dir.join("tests").join(&stem))?;
        names.push(stem);
    }
    cargo(&["build", "--release", "-p", "tessera-cli", "--features", "cuda"])?;
    std::fs::copy(root.join("target/release/tessera"), dir.join("tessera"))?;
    let tm = ["-p", "tessera-testmatrix", "--features", "cuda", "--bin", "test-matrix"];
    cargo(&[&["build", "--release"][..], &tm].concat())?;
    std::fs::copy(root.join("target/release/test-matrix"), dir.join("test-matrix"))?;
    // A random projector for the image step.
    cargo(&["build", "--release", "-p", "tessera-mtmd", "--example", "write_mmproj"])?;
    std::fs::copy(root.join("target/release/examples/write_mmproj"), dir.join("write_mmproj"))?;
    // Random mixture-of-experts models for the MoE step.
    cargo(&["build", "--release", "-p", "tessera-llama", "--example", "write_synth"])?;
    std::fs::copy(root.join("target/release/examples/write_synth"), dir.join("write_synth"))?;
    // The session's one script: tests, test matrix, models and llama.cpp beside them.
    std::fs::copy(root.join("tools/gpu/check.sh"), dir.join("check.sh"))?;
    let mut script = String::from(
        "#!/usr/bin/env bash\n# Made by `cargo xtask gpu-bundle`: every CUDA test with nothing allowed to skip.\n\
         set -euo pipefail\ncd \"$(dirname \"$0\")\"\nexport REQUIRE_CUDA=1 REQUIRE_NVRTC=1\n\
         nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true\n",
    );
    for n in &names {
        script.push_str(&format!("echo \"== {n}\"\n./tests/{n} --test-threads=1\n"));
    }
    script.push_str("./tessera --version\necho \"gpu bundle: all green\"\n");
    std::fs::write(dir.join("run.sh"), script)?;
    eprintln!(
        "gpu-bundle: {} test binaries, tessera and test-matrix (CUDA) in {}; run `bash .gpu/check.sh` \
         there (everything) or `bash .gpu/run.sh` (the tests alone)",
        names.len(),
        dir.display()
    );
    Ok(())
}

/// On a CPU above AVX2, the model tests again at the AVX2 level (`TESSERA_SIMD=avx2`), against
/// llama.cpp's AVX2 references, so the path most users' CPUs take cannot rot unseen on an
/// AVX-512 CI machine. (The kernel unit tests and the test matrix cover every level anyway.)
fn avx2_model_tests() -> Result<()> {
    use tessera_backend_cpu::SimdLevel;
    if SimdLevel::detect() <= SimdLevel::Avx2 {
        return Ok(());
    }
    eprintln!("==> the model tests again at TESSERA_SIMD=avx2");
    std::env::set_var("TESSERA_SIMD", "avx2");
    let tests = [
        "--test",
        "refs",
        "--test",
        "synth",
        "--test",
        "moe",
        "--test",
        "families",
        "--test",
        "kv_types",
        "--test",
        "lora",
        "--test",
        "context_shift",
        "--test",
        "mrope",
        "--test",
        "long_decode",
        // tessera-mtmd's, in the same build.
        "--test",
        "encode",
        "--test",
        "image_prompt",
    ];
    let r = cargo(&[&["test", "-p", "tessera-llama", "-p", "tessera-mtmd"][..], &tests].concat());
    std::env::remove_var("TESSERA_SIMD");
    r
}

/// On an AVX-512 CPU with VNNI or AVX512_BF16, the model tests again with both hidden
/// (`TESSERA_CPU_HIDE=vnni,bf16`): the paths of AVX-512 CPUs without them (Skylake-SP and the
/// like), against the same AVX-512 references (llama.cpp built without VNNI and BF16 gives
/// their bits; see testdata/refs/README.md).
fn plain_avx512_model_tests() -> Result<()> {
    use tessera_backend_cpu::SimdLevel;
    let extras = tessera_backend_cpu::has_vnni() || tessera_backend_cpu::has_avx512_bf16();
    if SimdLevel::detect() < SimdLevel::Avx512 || !extras {
        return Ok(());
    }
    eprintln!("==> the model tests again at TESSERA_CPU_HIDE=vnni,bf16");
    std::env::set_var("TESSERA_CPU_HIDE", "vnni,bf16");
    let r = cargo(&["test", "-p", "tessera-llama", "--test", "refs", "--test", "synth"]);
    std::env::remove_var("TESSERA_CPU_HIDE");
    r
}

/// Runs the `test-matrix` binary of tessera-testmatrix (feature `cpu`) in release, passing `args`.
fn test_matrix(args: &[String]) -> Result<()> {
    let mut all = vec![
        "run",
        "--release",
        "--package",
        "tessera-testmatrix",
        "--features",
        "cpu",
        "--bin",
        "test-matrix",
        "--",
    ];
    all.extend(args.iter().map(String::as_str));
    cargo(&all)
}

fn synth_models(args: &[String]) -> Result<()> {
    let dir = PathBuf::from(args.first().map_or("target/synth", String::as_str));
    std::fs::create_dir_all(&dir)?;
    for (stem, spec, vocab) in tessera_llama::synth::all_models() {
        let v = tessera_gguf::GgufFile::open(tessera_models::fixtures::vocab(vocab)?)
            .with_context(|| format!("opening the vocabulary {vocab}"))?;
        let path = dir.join(format!("{stem}.gguf"));
        tessera_llama::synth::write_random_model(&spec, v.metadata(), &path)?;
        println!("{}", path.display());
    }
    Ok(())
}

fn bench_model(args: &[String]) -> Result<()> {
    let [shape, dtype, out] = args else {
        bail!(
            "usage: cargo xtask bench-model llama-3.2-1b|llama-3.1-8b|llama-tiny|qwen3-30b-a3b-4l|gpt-oss-20b-4l TYPE OUT.gguf"
        );
    };
    let dt = tessera_tensor::DType::ALL
        .into_iter()
        .find(|t| t.to_string().eq_ignore_ascii_case(dtype))
        .with_context(|| format!("unknown type '{dtype}'"))?;
    let spec = tessera_llama::synth::bench_shape(shape, dt).with_context(|| {
        format!(
            "unknown shape '{shape}' (llama-3.2-1b, llama-3.1-8b, llama-tiny, qwen3-30b-a3b-4l, gpt-oss-20b-4l)"
        )
    })?;
    let vocab = tessera_models::fixtures::vocab("ggml-vocab-llama-bpe.gguf")?;
    let v = tessera_gguf::GgufFile::open(&vocab)?;
    let start = Instant::now();
    let n_vocab = tessera_llama::synth::write_random_model(&spec, v.metadata(), out.as_ref())?;
    eprintln!("{out}: {shape}, {dtype}, vocab {n_vocab}, {:.0}s", start.elapsed().as_secs_f64());
    Ok(())
}

fn models(names: &[String]) -> Result<()> {
    let list = if names.is_empty() {
        tessera_models::ALL.to_vec()
    } else {
        names.iter().map(|n| tessera_models::by_name(n)).collect::<Result<_, _>>()?
    };
    for m in &list {
        let path = tessera_models::ensure(m).with_context(|| format!("fetching {}", m.id))?;
        println!("{:14} {}", m.id, path.display());
    }
    Ok(())
}
