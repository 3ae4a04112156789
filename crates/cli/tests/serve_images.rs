//! `tessera serve --mmproj` as a llama-server user drives it: Gemma-3-270M with the random
//! Gemma 3 projector of its width (crates/mtmd's synth), asked through `/completion`'s
//! `multimodal_data` and the official `openai` and `anthropic` clients (`tests/py/
//! serve_images.py`). The server's greedy answer to an image prompt is `tessera run`'s on the
//! same image and text (which the image_prompt tests hold to llama.cpp's); the same image again
//! is reused from the slot's cache, another one is not; bad images, remote URLs and a marker
//! count that does not match get named 400s.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

fn images() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../mtmd/tests/fixtures/images")
}

/// A running `tessera serve`, killed when dropped.
struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `tessera serve ARGS --port 0`; returns it and its base URL.
fn serve(args: &[&str]) -> (Serve, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["serve", "--port", "0"])
        .args(args)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    let url = loop {
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0, "serve ended before listening");
        if let Some(rest) = line.split("listening on ").nth(1) {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    // Keep reading its log so it never blocks on a full pipe.
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    (Serve(child), url)
}

#[test]
fn images_through_the_server_answer_as_run_does() {
    let model = tessera_models::ensure(&tessera_models::GEMMA3).expect("fetching the model");
    let m = model.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mm = dir.path().join("mmproj.gguf");
    let spec = tessera_mtmd::synth::RandomMmproj::tiny_gemma3(640);
    tessera_mtmd::synth::write_random_mmproj(&spec, &mm).unwrap();
    let mm = mm.to_str().unwrap();
    let image = images().join("rgb_37x23.png");
    let other = images().join("wide_200x20.png");
    let (image, other) = (image.to_str().unwrap(), other.to_str().unwrap());
    let prompt = "Describe the image:";
    let run = common::piped_output(
        &[
            "run", "-m", m, "--mmproj", mm, "--image", image, "-p", prompt, "-n", "8", "--temp",
            "0", "-t", "2", "-no-cnv",
        ],
        &[],
        "",
    );
    let out = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    // After the echoed prompt, less the newline run ends with.
    let want = out.split(prompt).nth(1).expect("the prompt echoed");
    let want = want.strip_suffix('\n').unwrap_or(want).to_string();
    // Gemma-3-270M is a base model without a chat template: Gemma 3's turns.
    let tpl = dir.path().join("gemma3.jinja");
    std::fs::write(
        &tpl,
        "{% for m in messages %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' else \
         m['role'] }}\n{{ m['content'] | trim }}<end_of_turn>\n{% endfor %}{% if \
         add_generation_prompt %}<start_of_turn>model\n{% endif %}",
    )
    .unwrap();
    let (_srv, url) = serve(&[
        "-m",
        m,
        "--mmproj",
        mm,
        "-np",
        "2",
        "-c",
        "1024",
        "-t",
        "2",
        "--chat-template-file",
        tpl.to_str().unwrap(),
    ]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/serve_images.py");
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let res = Command::new(&python)
        .arg(&script)
        .args([url.as_str(), image, other, prompt, want.as_str()])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {python}: {e}"));
    assert!(
        res.status.success(),
        "{} failed:\n{}{}",
        script.display(),
        String::from_utf8_lossy(&res.stdout),
        String::from_utf8_lossy(&res.stderr)
    );
}

#[test]
fn a_server_without_a_projector_names_the_missing_flag() {
    let model = tessera_models::ensure(&tessera_models::SMOLLM2).expect("fetching the model");
    let (_srv, url) = serve(&["-m", model.to_str().unwrap(), "-np", "1", "-c", "256", "-t", "2"]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/serve_images.py");
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let res = Command::new(&python).arg(&script).args([url.as_str(), "--no-vision"]).output();
    let res = res.unwrap_or_else(|e| panic!("cannot run {python}: {e}"));
    assert!(
        res.status.success(),
        "{}{}",
        String::from_utf8_lossy(&res.stdout),
        String::from_utf8_lossy(&res.stderr)
    );
}

/// A JSON POST over a fresh connection (`Connection: close`, the body read to the end).
fn post(url: &str, path: &str, body: &serde_json::Value) -> serde_json::Value {
    use std::io::{Read, Write};
    let addr = url.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    let b = body.to_string();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: \
         {}\r\nConnection: close\r\n\r\n{b}",
        b.len()
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let (head, body) = resp.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{resp}");
    serde_json::from_str(body).unwrap()
}

/// Qwen2.5-VL through the server (M-RoPE: an image takes fewer positions than cells): the
/// random Qwen2-VL language model with the random Qwen2.5-VL projector of its width answers a
/// `/completion` image prompt as `tessera run` does, and again from the cache (the image's
/// cells reused at their grid positions), and after the same image with other text; `run -cnv`
/// takes it with `/image` and goes on for a second turn.
#[test]
fn a_qwen25vl_image_prompt_is_served_as_run_answers_it() {
    let (stem, spec, vocab) = tessera_llama::synth::family_models()
        .into_iter()
        .find(|m| m.0 == "synth-qwen2vl-q8_0")
        .unwrap();
    let v = tessera_gguf::GgufFile::open(tessera_models::fixtures::vocab(vocab).unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let lm = dir.path().join(format!("{stem}.gguf"));
    tessera_llama::synth::write_random_model(&spec, v.metadata(), &lm).unwrap();
    let mm = dir.path().join("qwen-mmproj.gguf");
    let mspec = tessera_mtmd::synth::RandomMmproj::tiny_qwen25vl(spec.n_embd);
    tessera_mtmd::synth::write_random_mmproj(&mspec, &mm).unwrap();
    let (lm, mm) = (lm.to_str().unwrap(), mm.to_str().unwrap());
    let image = images().join("wide_200x20.png");
    let image = image.to_str().unwrap();
    let prompt = "<__media__>Describe the image:";
    let run = common::piped_output(
        &[
            "run", "-m", lm, "--mmproj", mm, "--image", image, "-p", prompt, "-n", "8", "--temp",
            "0", "-t", "2", "-no-cnv",
        ],
        &[],
        "",
    );
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let out = String::from_utf8_lossy(&run.stdout).into_owned();
    let want = out.split("Describe the image:").nth(1).expect("the prompt echoed");
    let want = want.strip_suffix('\n').unwrap_or(want).to_string();
    let (_srv, url) = serve(&["-m", lm, "--mmproj", mm, "-np", "2", "-c", "512", "-t", "2"]);
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(std::fs::read(image).unwrap());
    let ask = |text: &str| {
        serde_json::json!({
            "prompt": {"prompt_string": text, "multimodal_data": [b64]},
            "n_predict": 8, "temperature": 0,
        })
    };
    let first = post(&url, "/completion", &ask(prompt));
    assert_eq!(first["content"], want.as_str(), "{first}");
    let n_prompt = first["tokens_evaluated"].as_u64().unwrap();
    let again = post(&url, "/completion", &ask(prompt));
    assert_eq!(again["content"], want.as_str());
    assert_eq!(again["timings"]["cache_n"].as_u64(), Some(n_prompt - 1), "{again}");
    let other = post(&url, "/completion", &ask("<__media__>Describe the image in words:"));
    // The image (13 x 1 merged tokens after <|vision_start|>'s pieces) came from the cache.
    assert!(other["timings"]["cache_n"].as_u64().unwrap() > 13, "{other}");
    // A conversation with the image (`/image`), and a second turn after it: positions go on
    // from the image's grid.
    let input = format!("/image {image}\nWhat is in this picture?\nAnd now?\n");
    let conv = common::piped_output(
        &["run", "-m", lm, "--mmproj", mm, "-cnv", "-n", "6", "--temp", "0", "-t", "2"],
        &[],
        &input,
    );
    let text = String::from_utf8_lossy(&conv.stdout);
    let err = String::from_utf8_lossy(&conv.stderr);
    assert!(conv.status.success(), "{text}{err}");
    assert!(err.contains("[turn 2:") && !err.contains("error"), "{text}{err}");
}
