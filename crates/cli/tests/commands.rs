//! The model commands end to end on the default model (SmolLM2-135M-Instruct): `run` gives
//! llama.cpp's greedy continuation, `tokenize` llama.cpp's ids, `bench` llama-bench's JSON
//! fields, and a `quantize`d file runs.

use std::process::Command;

fn tessera(args: &[&str]) -> String {
    let out =
        Command::new(env!("CARGO_BIN_EXE_tessera")).args(args).output().expect("running tessera");
    assert!(out.status.success(), "tessera {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf-8")
}

fn model() -> String {
    tessera_models::ensure(&tessera_models::SMOLLM2).expect("model").to_str().unwrap().to_string()
}

#[test]
fn run_greedy_continues_like_llama_cpp() {
    let m = model();
    let out = tessera(&[
        "run",
        "-m",
        &m,
        "-p",
        "The capital of France is",
        "-n",
        "8",
        "--temp",
        "0",
        "-t",
        "2",
    ]);
    // llama.cpp's greedy tokens for this prompt (testdata/refs) decode to " Paris.\n\nThe United".
    assert!(out.starts_with("The capital of France is Paris.\n\nThe United"), "{out:?}");
}

#[test]
fn tokenize_gives_llama_cpps_ids() {
    let m = model();
    let out = tessera(&["tokenize", "-m", &m, "-p", "The capital of France is", "--ids"]);
    assert_eq!(out.trim(), "[504, 3575, 282, 4649, 314]");
}

#[test]
fn bench_writes_llama_bench_json() {
    let m = model();
    let out =
        tessera(&["bench", "-m", &m, "-p", "32", "-n", "4", "-r", "1", "-t", "2", "-o", "json"]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    let rows = v.as_array().expect("an array of tests");
    assert_eq!(rows.len(), 2);
    for r in rows {
        assert!(r["avg_ts"].as_f64().unwrap() > 0.0, "{r}");
        assert_eq!(r["n_threads"], 2);
        let simd = r["simd"].as_str().expect("the SIMD level");
        assert!(["scalar", "avx2", "avx512"].iter().any(|l| simd.starts_with(l)), "{r}");
        assert!(r["cpu_info"].as_str().is_some_and(|c| !c.is_empty()), "{r}");
    }
    assert_eq!(rows[0]["n_prompt"], 32);
    assert_eq!(rows[1]["n_gen"], 4);
}

#[test]
fn a_quantized_model_runs() {
    let m = model();
    let dir = tempfile::tempdir().unwrap();
    let q = dir.path().join("q8.gguf");
    let q = q.to_str().unwrap();
    tessera(&["quantize", &m, q, "Q8_0"]);
    let out = tessera(&[
        "run",
        "-m",
        q,
        "-p",
        "The capital of France is",
        "-n",
        "3",
        "--temp",
        "0",
        "-t",
        "2",
    ]);
    assert!(out.starts_with("The capital of France is Paris"), "{out:?}");
}

#[test]
fn version_names_the_commit_simd_level_and_features() {
    let out = tessera(&["--version"]);
    assert!(out.starts_with(&format!("tessera {} (commit ", env!("CARGO_PKG_VERSION"))), "{out}");
    let simd = out.lines().find(|l| l.starts_with("SIMD: ")).expect("a SIMD line");
    let level = simd["SIMD: ".len()..].split([' ', ';']).next().unwrap();
    assert!(["scalar", "avx2", "avx512"].contains(&level), "{simd}");
    assert!(out.contains("kernels built in: "), "{out}");
    assert!(out.contains("backends: CPU"), "{out}");
    // The device registry the binary composed: the CPU last, described.
    let devices: Vec<&str> = out
        .lines()
        .skip_while(|l| *l != "devices:")
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .collect();
    assert!(devices.last().is_some_and(|l| l.starts_with("  CPU: ")), "{out}");
    let sim = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .arg("--version")
        .env("TESSERA_SIM_DEVICES", "2")
        .output()
        .unwrap();
    let sim = String::from_utf8_lossy(&sim.stdout);
    assert!(sim.contains("  SIM0: simulated") && sim.contains("  SIM1: "), "{sim}");
    // TESSERA_SIMD lowers the level and says so.
    let forced = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .arg("--version")
        .env("TESSERA_SIMD", "scalar")
        .output()
        .unwrap();
    let forced = String::from_utf8(forced.stdout).unwrap();
    assert!(forced.contains("SIMD: scalar"), "{forced}");
}

#[test]
fn run_verbose_says_which_simd_level_and_kernels_ran() {
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["run", "-m", &model(), "-p", "Hi", "-n", "1", "--temp", "0", "-t", "2", "-v"])
        .env("TESSERA_SIMD", "avx2")
        .output()
        .unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err.lines().find(|l| l.starts_with("system: ")).expect("a system line");
    assert!(line.contains("SIMD: avx2 |") && line.contains("kernels: AVX2"), "{line}");
}

/// `tessera` with extra environment variables; (stdout, stderr).
fn tessera_env(args: &[&str], env: &[(&str, &str)]) -> (String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(args)
        .env_remove("TESSERA_SIM_DEVICES")
        .envs(env.iter().copied())
        .output()
        .expect("running tessera");
    assert!(out.status.success(), "tessera {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    (String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
}

#[test]
fn ngl_offloads_to_a_present_device_and_is_a_noted_no_op_without_one() {
    let m = model();
    // SmolLM2 has 30 layers: -ngl 31 puts them and the output layer on SIM0.
    let args = ["bench", "-m", &m, "-p", "0", "-n", "2", "-r", "1", "-t", "2", "-ngl", "31"];
    let (out, _) =
        tessera_env(&[&args[..], &["-o", "json"]].concat(), &[("TESSERA_SIM_DEVICES", "1")]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v[0]["backends"], "SIM0,CPU", "{v}");
    assert_eq!(v[0]["n_gpu_layers"], 31, "{v}");
    let (table, _) = tessera_env(&args, &[("TESSERA_SIM_DEVICES", "1")]);
    let header = table.lines().next().unwrap();
    assert!(header.contains("| backend    | ngl |"), "{table}");
    assert!(table.contains("| SIM0,CPU   |  31 |"), "{table}");
    // No device present: a note, and the CPU runs everything.
    let (out, err) = tessera_env(&[&args[..], &["-o", "json"]].concat(), &[]);
    assert!(err.contains("-ngl 31 has no effect"), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v[0]["backends"], "CPU");
    assert_eq!(v[0]["n_gpu_layers"], 0);
    // A device that is not there is a clear error.
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["run", "-m", &m, "-n", "1", "--device", "CUDA3"])
        .env_remove("TESSERA_SIM_DEVICES")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no device 'CUDA3'"), "{err}");
}

#[test]
fn serve_answers_and_exits_cleanly_on_sigterm() {
    use std::io::{BufRead, BufReader, Read, Write};
    let m = model();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["serve", "-m", &m, "--port", &port.to_string(), "-np", "1", "-c", "512", "-t", "2"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for "listening".
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("listening") {
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0, "serve ended before listening");
    }
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    assert!(resp.starts_with("HTTP/1.1 200") && resp.contains("\"ok\""), "{resp}");
    let st = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(st.success());
    let status = child.wait().unwrap();
    assert!(status.success(), "exit status after SIGTERM: {status}");
    let mut rest = String::new();
    err.read_to_string(&mut rest).unwrap();
    assert!(rest.contains("stopped"), "{rest}");
}
