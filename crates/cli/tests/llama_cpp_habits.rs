//! Command lines copied from llama.cpp's documentation work as its users expect, on the
//! default model (SmolLM2-135M-Instruct): the prompt file, escapes, llama.cpp's flags, the
//! context size, a closed pipe, bench rows as they finish, errors that name the flag, and the
//! server's request log and second signal.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn model() -> String {
    tessera_models::ensure(&tessera_models::SMOLLM2).expect("model").to_str().unwrap().to_string()
}

fn tessera(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tessera")).args(args).output().expect("running tessera")
}

fn ok(args: &[&str]) -> (String, String) {
    let out = tessera(args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "tessera {args:?}: {err}");
    (String::from_utf8(out.stdout).expect("utf-8"), err)
}

fn fails(args: &[&str]) -> String {
    let out = tessera(args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "tessera {args:?} should fail cleanly: {err}");
    assert!(!err.contains("panicked"), "{err}");
    err
}

/// `tessera ARGS` with `input` on its standard input, which must succeed: (stdout, stderr).
fn piped(args: &[&str], input: &str) -> (String, String) {
    let out = common::piped_output(args, &[], input);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "tessera {args:?}: {err}");
    (String::from_utf8(out.stdout).expect("utf-8"), err)
}

const GREEDY: [&str; 6] = ["-n", "8", "--temp", "0", "-t", "2"];

#[test]
fn the_prompt_comes_from_a_file_and_escapes_are_processed() {
    let m = model();
    let mut args = vec!["run", "-m", &m, "-p", "The capital of France is"];
    args.extend(GREEDY);
    let (want, _) = ok(&args);
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("prompt.txt");
    std::fs::write(&f, "The capital of France is").unwrap();
    let mut args = vec!["run", "-m", &m, "-f", f.to_str().unwrap()];
    args.extend(GREEDY);
    assert_eq!(ok(&args).0, want, "-f gives what -p gives");
    // Flags with no subcommand run, as llama-cli's.
    let mut args = vec!["-m", &m, "-p", "The capital of France is"];
    args.extend(GREEDY);
    assert_eq!(ok(&args).0, want);
    // Escapes: on by default (llama.cpp's --escape), off with --no-escape.
    let (out, _) = ok(&["run", "-m", &m, "-p", r"one\ntwo", "-n", "1", "--temp", "0"]);
    assert!(out.starts_with("one\ntwo"), "{out:?}");
    let (out, _) =
        ok(&["run", "-m", &m, "-p", r"one\ntwo", "-n", "1", "--temp", "0", "--no-escape"]);
    assert!(out.starts_with(r"one\ntwo"), "{out:?}");
    // A missing prompt file is named.
    let err = fails(&["run", "-m", &m, "-f", "/nonexistent/p.txt"]);
    assert!(err.contains("/nonexistent/p.txt"), "{err}");
}

#[test]
fn llama_cpp_flags_are_taken() {
    let m = model();
    let (out, err) = ok(&[
        "run",
        "-m",
        &m,
        "-p",
        "Hello",
        "-n",
        "6",
        "--seed",
        "-1",
        "--temp",
        "-1",
        "-no-cnv",
        "-e",
        "--ignore-eos",
        "--jinja",
        "-fa",
        "auto",
        "--log-disable",
        "--no-display-prompt",
        "-t",
        "2",
    ]);
    assert!(!out.starts_with("Hello"), "--no-display-prompt: {out:?}");
    assert!(!out.trim().is_empty(), "--ignore-eos generates");
    assert!(err.trim().is_empty(), "--log-disable: {err:?}");
    // --chat echoes the prompt as llama.cpp does: no template markers.
    let (out, _) = ok(&["run", "-m", &m, "--chat", "-p", "Hi", "-n", "2", "--temp", "0"]);
    assert!(!out.contains("<|im_start|>") && out.contains("Hi"), "{out:?}");
}

#[test]
fn the_context_size_is_said_and_zero_means_the_training_context() {
    let m = model();
    let (_, err) = ok(&["run", "-m", &m, "-p", "Hi", "-n", "1", "-c", "0", "-v", "-t", "2"]);
    assert!(err.contains("context: 8192 cells (the model was trained on 8192)"), "{err}");
    let (_, err) = ok(&["run", "-m", &m, "-p", "Hi", "-n", "1", "-c", "9000", "-t", "2"]);
    assert!(err.contains("larger than the model's training context (8192)"), "{err}");
}

#[test]
fn a_closed_pipe_ends_the_program_quietly() {
    let m = model();
    for args in [
        vec!["run", "-m", &m, "-p", "Once", "-n", "400", "--ignore-eos", "-t", "2"],
        vec!["tokenize", "-m", &m, "-p", &"word ".repeat(20000)],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tessera"))
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = child.stdout.take().unwrap();
        let mut buf = [0u8; 8];
        out.read_exact(&mut buf).unwrap();
        drop(out); // as `| head -c 8` does
        let status = child.wait().unwrap();
        let mut err = String::new();
        child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        assert!(!err.contains("panicked"), "{}: {err}", args[0]);
        assert_ne!(status.code(), Some(101), "{}: {status}", args[0]);
    }
}

#[test]
fn bench_prints_each_row_as_it_finishes_and_refuses_bad_settings() {
    let m = model();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["bench", "-m", &m, "-p", "8,4096", "-n", "0", "-r", "2", "-t", "2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = loop {
        let l = lines.next().expect("a row").unwrap();
        if l.contains("pp8") {
            break l;
        }
    };
    assert!(first.contains(" ± "), "{first}");
    // The 4096-token test is still running: the first row did not wait for it.
    assert!(child.try_wait().unwrap().is_none(), "bench held its rows to the end");
    child.kill().unwrap();
    let _ = child.wait();

    let err = fails(&["bench", "-m", &m, "-p", "8", "-n", "0", "-r", "0"]);
    assert!(err.contains("-r 0"), "{err}");
    let err = fails(&["bench", "-m", &m, "-p", "100000", "-n", "0"]);
    assert!(err.contains("training context (8192)"), "{err}");
}

#[test]
fn errors_name_the_flag() {
    let m = model();
    let err = fails(&["run", "-m", &m, "-p", "x", "--device", "CUDA0"]);
    assert!(err.contains("--device: no device 'CUDA0' (available: none"), "{err}");
    let err = fails(&["run", "-m", &m, "-p", "x", "-ot", "[=CPU"]);
    assert!(err.contains("--override-tensor") && !err.contains("metadata"), "{err}");
    let err = fails(&["run", "-m", &m, "-p", "x", "--seed", "-5"]);
    assert!(err.contains("--seed -5"), "{err}");
    let err = fails(&["serve", "-m", &m, "-np", "0", "--port", "0"]);
    assert!(err.contains("-np 0"), "{err}");
}

#[test]
fn serve_logs_requests_and_a_second_signal_ends_replies_at_once() {
    use std::io::Write;
    let m = model();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["serve", "-m", &m, "--port", "0", "-np", "1", "-c", "2048", "-t", "2"])
        .args(["--shutdown-timeout", "300"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("listening on http://") {
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0, "serve ended before listening");
    }
    let addr = line.split("http://").nth(1).unwrap().split_whitespace().next().unwrap().to_string();
    let body = r#"{"prompt": "hello", "max_tokens": 2}"#;
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    write!(
        s,
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    // A reply that would run to the end of the context, then two signals.
    let body = r#"{"prompt": "Once", "stream": true, "ignore_eos": true}"#;
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    write!(
        s,
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut r = BufReader::new(s);
    let mut l = String::new();
    while !l.starts_with("data: ") {
        l.clear();
        r.read_line(&mut l).unwrap();
    }
    let t = Instant::now();
    let kill = || Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(kill().success());
    std::thread::sleep(Duration::from_millis(300));
    assert!(kill().success());
    let status = child.wait().unwrap();
    assert!(t.elapsed() < Duration::from_secs(30), "the second signal did not end the reply");
    assert!(status.success(), "{status}");
    let mut rest = String::new();
    r.read_to_string(&mut rest).unwrap();
    assert!(rest.contains("shutting down"), "the stream ends with an error event: {rest}");
    let mut log = String::new();
    err.read_to_string(&mut log).unwrap();
    assert!(log.contains("POST /v1/completions 200"), "request log: {log}");
    assert!(!log.contains('\x1b'), "no colour codes when stderr is not a terminal: {log}");
    assert!(log.contains("request done"), "generation log: {log}");
}

#[test]
fn lora_adapters_apply_at_their_scale_and_misfits_are_named() {
    let m = model();
    let dir = tempfile::tempdir().unwrap();
    let adapter = dir.path().join("adapter.gguf");
    let model = tessera_llama::Model::load(&m, tessera_backend_cpu::CpuDevice::shared()).unwrap();
    let spec = tessera_llama::synth::RandomLora {
        targets: vec!["attn_q".into(), "attn_v".into()],
        rank: 8,
        amp: 0.2,
        alpha: Some(8.0),
        task_name: None,
        seed: 0x2545_f491_4f6c_dd1d,
    };
    tessera_llama::synth::write_random_lora(&model, &spec, &adapter).unwrap();
    let a = adapter.to_str().unwrap();
    let mut base = vec!["run", "-m", &m, "-p", "The capital of France is", "--no-display-prompt"];
    base.extend(GREEDY);
    let (plain, _) = ok(&base);
    let zero = format!("{a}:0");
    let (at_zero, _) = ok(&[&base[..], &["--lora-scaled", &zero]].concat());
    assert_eq!(at_zero, plain, "an adapter at scale 0 changed the text");
    let (with, err) = ok(&[&base[..], &["--lora", a, "-v"]].concat());
    assert_ne!(with, plain, "the adapter changed nothing");
    assert!(err.contains("LoRA adapter") && err.contains("60 weights"), "{err}");
    // The model itself given as an adapter; a scale that is not a number.
    let e = fails(&[&base[..], &["--lora", &m]].concat());
    assert!(e.contains("general.type") && e.contains("expected 'adapter'"), "{e}");
    let e = fails(&[&base[..], &["--lora-scaled", a]].concat());
    assert!(e.contains("FNAME:SCALE"), "{e}");
}

#[test]
fn a_full_context_shifts_with_context_shift_and_stops_without() {
    let m = model();
    let base = ["run", "-m", &m, "-p", "Once upon a time", "-no-cnv", "-c", "256", "-n", "300"];
    let args = |extra: &[&'static str]| {
        let mut v: Vec<&str> = base.to_vec();
        v.extend(["--temp", "0", "-t", "2"]);
        v.extend(extra);
        v.into_iter().map(str::to_string).collect::<Vec<String>>()
    };
    let run = |extra: &[&'static str]| {
        let a = args(extra);
        ok(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let runs = |err: &str| -> usize {
        let line = err.lines().find(|l| l.contains("eval time") && l.contains("runs")).unwrap();
        line.split('/').nth(1).unwrap().split_whitespace().next().unwrap().parse().unwrap()
    };
    // Without a shift, generation stops at the context's end (256 cells, 4 of them the prompt).
    let (_, err) = run(&[]);
    assert!(runs(&err) < 256 && !err.contains("context shifts"), "{err}");
    let (_, err) = run(&["--context-shift", "--keep", "-1"]);
    assert_eq!(runs(&err), 300, "{err}");
    assert!(err.contains("context shifts   = 1 (kept the first 4 tokens)"), "{err}");
    // A conversation: the third long reply shifts older turns out instead of ending it.
    let chat = |shift: bool| {
        let mut args = vec!["run", "-m", &m, "-cnv", "-c", "256", "-n", "120", "--temp", "0"];
        args.extend(["-t", "2", "--keep", "-1", "-sys", "You are a storyteller."]);
        if shift {
            args.push("--context-shift");
        }
        let msgs = "Tell me a long story about a dragon.\nTell me another one.\nAnd a third.\n";
        piped(&args, msgs).1
    };
    let err = chat(true);
    assert!(err.contains("[turn 3:") && err.contains("the context shifted"), "{err}");
    assert!(!err.contains("error:"), "{err}");
    let err = chat(false);
    assert!(err.contains("context is full"), "{err}");
}

#[test]
fn speculative_decoding_reports_its_acceptance_and_refuses_misfits() {
    let m = model();
    let prompt = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3, 4, 5,";
    let base = ["run", "-m", &m, "-p", prompt, "-no-cnv", "-n", "40", "--temp", "0", "-t", "2"];
    let with = |extra: &[&str]| -> Vec<String> {
        base.iter().chain(extra).map(|s| s.to_string()).collect()
    };
    let run = |extra: &[&str]| {
        let a = with(extra);
        ok(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let (plain, _) = run(&[]);
    let rate = |err: &str, kind: &str| -> f64 {
        let line = err
            .lines()
            .find(|l| l.starts_with("speculative") && l.contains(kind))
            .unwrap_or_else(|| panic!("no speculative line: {err}"));
        line.split("acceptance ").nth(1).unwrap().split(')').next().unwrap().parse().unwrap()
    };
    let (text, err) = run(&["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "3"]);
    assert!(rate(&err, "ngram-simple") > 0.5, "{err}");
    // A counting prompt: every step's lead is wide, so the text is plain decoding's.
    assert_eq!(text, plain);
    let (text, err) = run(&["-md", &m, "--spec-draft-n-max", "4"]);
    assert!(rate(&err, "draft-simple") > 0.9, "the model rejected its own proposals: {err}");
    assert_eq!(text, plain);
    // In a conversation too: the same replies, proposals counted on the turn line.
    let chat = |extra: &[&str]| {
        let mut args = vec!["run", "-m", &m, "-cnv", "-n", "60", "--temp", "0", "-t", "2"];
        args.extend(extra);
        piped(&args, "Count from 1 to 20.\nCount from 1 to 20 again.\n")
    };
    let (want, _) = chat(&[]);
    let (got, err) = chat(&["-md", &m]);
    assert_eq!(got, want);
    assert!(err.contains("proposals accepted"), "{err}");
    // Misfits are named.
    let fail = |extra: &[&str]| {
        let a = with(extra);
        fails(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let e = fail(&["--draft-max", "4"]);
    assert!(e.contains("--spec-draft-n-max"), "{e}");
    let e = fail(&["--spec-type", "ngram-mod"]);
    assert!(e.contains("ngram-mod") && e.contains("not available"), "{e}");
    let e = fail(&["--spec-type", "draft-simple"]);
    assert!(e.contains("-md"), "{e}");
    let qwen = tessera_models::ensure(&tessera_models::QWEN25_CODER).unwrap();
    let e = fail(&["-md", qwen.to_str().unwrap()]);
    assert!(e.contains("--spec-draft-model") && e.contains("draft"), "{e}");
}
