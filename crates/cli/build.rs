//! Records the git commit the binary is built from (`tessera --version`), or `unknown` outside
//! a git checkout (a crate tarball), with `-dirty` when the tree has uncommitted changes.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    let suffix = if dirty && commit != "unknown" { "-dirty" } else { "" };
    println!("cargo:rustc-env=TESSERA_GIT_COMMIT={commit}{suffix}");
    // Rebuild when HEAD moves or the index changes (a commit, a checkout).
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        for f in ["HEAD", "index"] {
            println!("cargo:rerun-if-changed={dir}/{f}");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
