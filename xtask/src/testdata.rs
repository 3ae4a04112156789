//! `testdata/`: the fixtures the tests read (README there). `SHA256SUMS` lists every file;
//! `check` compares, `sums` rewrites it after a deliberate change, and `import DIR` copies the
//! tokenizer fixtures and llama.cpp references from a folder laid out as testdata is
//! (`vocab/`, `refs/`) and rewrites the sums: vocabulary files (`*.gguf`) are stored gzipped
//! (`*.gguf.gz`, unpacked for the tests by `tessera_models::fixtures::vocab`), and full logits
//! files (`*.logits.f32`) must have been packed by tools/pack_logits.py first.
//! `size` checks that the git-tracked tree stays under [`MAX_TRACKED`].

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const SUMS: &str = "SHA256SUMS";

/// Every file under `dir` (relative, `/`-separated, sorted), but the sums file itself.
fn files(dir: &Path) -> Result<Vec<String>> {
    fn walk(base: &Path, d: &Path, out: &mut Vec<String>) -> Result<()> {
        for e in std::fs::read_dir(d).with_context(|| format!("reading {}", d.display()))? {
            let p = e?.path();
            if p.is_dir() {
                walk(base, &p, out)?;
            } else {
                let rel = p.strip_prefix(base)?.to_string_lossy().replace('\\', "/");
                if rel != SUMS {
                    out.push(rel);
                }
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out)?;
    out.sort();
    Ok(out)
}

fn digest(path: &Path) -> Result<String> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect())
}

fn actual(dir: &Path) -> Result<BTreeMap<String, String>> {
    files(dir)?
        .into_iter()
        .map(|f| Ok((digest(&dir.join(&f))?, f)))
        .map(|r| r.map(|(d, f)| (f, d)))
        .collect()
}

/// Rewrites `SHA256SUMS` (`sha256sum` format).
pub fn write_sums(dir: &Path) -> Result<()> {
    let text: String = actual(dir)?.iter().map(|(f, d)| format!("{d}  {f}\n")).collect();
    std::fs::write(dir.join(SUMS), text)?;
    Ok(())
}

/// Fails, naming each file, where the tree and `SHA256SUMS` disagree.
pub fn check(dir: &Path) -> Result<()> {
    let path = dir.join(SUMS);
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut listed = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let (d, f) = line
            .split_once("  ")
            .with_context(|| format!("{}:{}: not `DIGEST  FILE`", path.display(), i + 1))?;
        listed.insert(f.to_string(), d.to_string());
    }
    let have = actual(dir)?;
    let mut bad = Vec::new();
    for (f, d) in &listed {
        match have.get(f) {
            None => bad.push(format!("{f}: listed but missing")),
            Some(h) if h != d => bad.push(format!("{f}: changed")),
            Some(_) => {}
        }
    }
    bad.extend(
        have.keys().filter(|f| !listed.contains_key(*f)).map(|f| format!("{f}: not listed")),
    );
    if !bad.is_empty() {
        bail!(
            "{} disagrees with the tree (after a deliberate change: cargo xtask testdata sums):\n  {}",
            path.display(),
            bad.join("\n  ")
        );
    }
    eprintln!("testdata: {} files match {SUMS}", have.len());
    Ok(())
}

/// Copies every file of `from` into `to`, gzipping GGUF files (`x.gguf` becomes `x.gguf.gz`).
fn copy_tree(from: &Path, to: &Path) -> Result<usize> {
    let fs = files(from)?;
    if let Some(f) = fs.iter().find(|f| f.ends_with(".logits.f32")) {
        bail!(
            "{}: full logits files are not stored; pack them first \
             (python3 tools/pack_logits.py SET_DIR, testdata/refs/README.md)",
            from.join(f).display()
        );
    }
    for f in &fs {
        let src = from.join(f);
        let dst: PathBuf = to.join(f);
        std::fs::create_dir_all(dst.parent().context("a parent")?)?;
        if f.ends_with(".gguf") {
            let bytes = std::fs::read(&src).with_context(|| format!("reading {f}"))?;
            let gz = PathBuf::from(format!("{}.gz", dst.display()));
            std::fs::write(&gz, tessera_models::fixtures::gzip(&bytes))
                .with_context(|| format!("writing {}", gz.display()))?;
        } else {
            std::fs::copy(&src, &dst).with_context(|| format!("copying {f}"))?;
        }
    }
    Ok(fs.len())
}

/// The most the git-tracked files may weigh together: 24 MiB. Model weights are fetched
/// (crates/models), vocabularies stored gzipped, llama.cpp's logits as samples
/// (testdata/refs/README.md): what is committed stays small enough to clone anywhere.
pub const MAX_TRACKED: u64 = 24 << 20;

/// Fails, naming the largest files, where the files `git ls-files` lists under `root` weigh
/// more than [`MAX_TRACKED`] together (sizes in the work tree, as `du -b` counts them).
pub fn check_tracked_size(root: &Path) -> Result<()> {
    let out = std::process::Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(root)
        .output()
        .context("running git ls-files")?;
    if !out.status.success() {
        bail!("git ls-files failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    let mut sizes = Vec::new();
    for name in out.stdout.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let name = String::from_utf8_lossy(name).into_owned();
        // A file deleted from the work tree but still tracked weighs nothing here.
        if let Ok(m) = std::fs::symlink_metadata(root.join(&name)) {
            if !m.is_dir() {
                sizes.push((m.len(), name));
            }
        }
    }
    let total: u64 = sizes.iter().map(|s| s.0).sum();
    let mib = |b: u64| b as f64 / f64::from(1u32 << 20);
    if total > MAX_TRACKED {
        sizes.sort_by(|a, b| b.cmp(a));
        let largest: Vec<String> =
            sizes.iter().take(15).map(|(n, f)| format!("{:9.2} MiB  {f}", mib(*n))).collect();
        bail!(
            "the git-tracked files weigh {:.2} MiB together, over the {} MiB limit: store \
             large fixtures compressed or sampled (testdata/README.md), fetch models instead \
             of committing them. Largest:\n  {}",
            mib(total),
            MAX_TRACKED >> 20,
            largest.join("\n  ")
        );
    }
    eprintln!(
        "tracked tree: {} files, {:.2} MiB (limit {} MiB)",
        sizes.len(),
        mib(total),
        MAX_TRACKED >> 20
    );
    Ok(())
}

/// `cargo xtask testdata <check | sums | import DIR | size>`.
pub fn command(root: &Path, args: &[String]) -> Result<()> {
    let dir = root.join("testdata");
    match args.first().map(String::as_str) {
        Some("check") | None => check(&dir),
        Some("sums") => write_sums(&dir),
        Some("size") => check_tracked_size(root),
        Some("import") => {
            let src = PathBuf::from(args.get(1).context("testdata import DIR")?);
            let mut n = 0;
            for sub in ["vocab", "refs"] {
                if src.join(sub).is_dir() {
                    n += copy_tree(&src.join(sub), &dir.join(sub))?;
                }
            }
            if n == 0 {
                bail!("{}: no vocab/ or refs/ folder to import", src.display());
            }
            eprintln!("testdata: {n} files copied from {}", src.display());
            write_sums(&dir)
        }
        Some(other) => {
            bail!("unknown testdata command `{other}`: check, sums, import DIR or size")
        }
    }
}
