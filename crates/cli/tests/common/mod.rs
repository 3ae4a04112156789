//! What the CLI tests share: running `tessera` with input on a pipe.

use std::process::{Command, Output, Stdio};

/// `tessera ARGS` with `input` on stdin (a conversation fed through a pipe) and `env` set.
pub fn piped_output(args: &[&str], env: &[(&str, &str)], input: &str) -> Output {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running tessera");
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}
