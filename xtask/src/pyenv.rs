//! The Python environment `cargo xtask ci` makes for itself: a virtual environment under
//! `target/pyenv` with the pinned packages of `tools/requirements-ci.txt`, so a fresh clone
//! needs nothing but `python3` (with its standard `venv` module). Packages installed on the
//! machine are not seen (no system site-packages), so what CI tests is what the file pins.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Creates (once) and updates the environment; returns its python executable. The
/// requirements file is copied in after a successful install, so an edited pin reinstalls.
pub fn ensure(root: &Path) -> Result<PathBuf> {
    let req = root.join("tools/requirements-ci.txt");
    let dir = root.join("target/pyenv");
    let python = dir.join("bin/python");
    let stamp = dir.join("requirements-ci.txt");
    let wanted = std::fs::read_to_string(&req).with_context(|| format!("{}", req.display()))?;
    if python.exists() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(&wanted) {
        return Ok(python);
    }
    let system = std::env::var("PYTHON3").unwrap_or_else(|_| "python3".into());
    eprintln!("==> {system} -m venv {}", dir.display());
    let st =
        Command::new(&system).args(["-m", "venv", "--clear"]).arg(&dir).status().with_context(
            || format!("running {system}: install Python 3 (with its venv module)"),
        )?;
    if !st.success() {
        bail!("`{system} -m venv` failed: on Debian, `apt-get install python3-venv`");
    }
    eprintln!("==> pip install -r {}", req.display());
    let st = Command::new(&python)
        .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-r"])
        .arg(&req)
        .status()
        .context("running pip in the new environment")?;
    if !st.success() {
        bail!("pip could not install {}", req.display());
    }
    std::fs::write(&stamp, wanted)?;
    Ok(python)
}

/// `PATH` with the environment's `bin` first, so tests that run `python3` get it too.
pub fn path_with(python: &Path) -> Result<std::ffi::OsString> {
    let bin = python.parent().context("python has a folder")?.to_path_buf();
    let old = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs = vec![bin];
    dirs.extend(std::env::split_paths(&old));
    Ok(std::env::join_paths(dirs)?)
}
