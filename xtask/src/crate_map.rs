//! The crate map of docs/ARCHITECTURE.md, checked against `cargo metadata`: the fenced block
//! after the `crate-map` marker lists every workspace crate with its normal dependencies among
//! the workspace's crates, one `crate: dep, dep` line each (`-` for none). `cargo xtask ci`
//! fails when the two differ; `cargo xtask crate-map` prints the block to paste.

use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// The marker line that precedes the checked block.
const MARKER: &str = "<!-- crate-map: checked by `cargo xtask ci` against `cargo metadata` -->";

type Map = BTreeMap<String, Vec<String>>;

/// Every workspace crate and its normal (non-dev, non-build) dependencies on other workspace
/// crates, sorted, from `cargo metadata`.
fn from_cargo(root: &Path) -> Result<Map> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(root)
        .output()
        .context("running cargo metadata")?;
    if !out.status.success() {
        bail!("cargo metadata failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let packages = v["packages"].as_array().context("cargo metadata: no packages")?;
    let names: Vec<&str> = packages.iter().filter_map(|p| p["name"].as_str()).collect();
    let mut map = Map::new();
    for p in packages {
        let name = p["name"].as_str().context("a package without a name")?;
        let mut deps: Vec<String> = p["dependencies"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|d| d["kind"].is_null())
            .filter_map(|d| d["name"].as_str())
            .filter(|d| names.contains(d))
            .map(String::from)
            .collect();
        deps.sort();
        deps.dedup();
        map.insert(name.to_string(), deps);
    }
    Ok(map)
}

/// The text of the fenced block after [`MARKER`] in `doc`.
fn block(doc: &str) -> Result<&str> {
    let after = doc.split_once(MARKER).context("docs/ARCHITECTURE.md: no crate-map marker")?.1;
    Ok(after
        .split_once("```")
        .and_then(|(_, rest)| rest.split_once("```"))
        .context("docs/ARCHITECTURE.md: no fenced block after the crate-map marker")?
        .0)
}

/// The map the block after [`MARKER`] in `doc` lists.
fn from_doc(doc: &str) -> Result<Map> {
    let block = block(doc)?;
    let mut map = Map::new();
    for line in block.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (name, deps) = line.split_once(':').with_context(|| {
            format!("docs/ARCHITECTURE.md crate map: '{line}' is not `crate: deps`")
        })?;
        let mut deps: Vec<String> = match deps.trim() {
            "-" => Vec::new(),
            d => d.split(',').map(|s| s.trim().to_string()).collect(),
        };
        deps.sort();
        map.insert(name.trim().to_string(), deps);
    }
    Ok(map)
}

/// The block's lines for `map`, the crates in the order given (then any others).
fn render(map: &Map, order: &[String]) -> String {
    let mut names: Vec<&String> = order.iter().filter(|n| map.contains_key(*n)).collect();
    names.extend(map.keys().filter(|n| !order.contains(n)));
    let width = names.iter().map(|n| n.len()).max().unwrap_or(0) + 1;
    let mut s = String::new();
    for n in names {
        let deps = &map[n];
        let d = if deps.is_empty() { "-".to_string() } else { deps.join(", ") };
        s.push_str(&format!("{:width$} {d}\n", format!("{n}:")));
    }
    s
}

/// Fails when the documented crate map differs from `cargo metadata`, naming each difference.
pub fn check(root: &Path) -> Result<()> {
    let doc = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md"))?;
    let (documented, actual) = (from_doc(&doc)?, from_cargo(root)?);
    if documented == actual {
        return Ok(());
    }
    let mut diff = Vec::new();
    for (name, deps) in &actual {
        match documented.get(name) {
            None => diff.push(format!("{name}: missing from the map")),
            Some(d) if d != deps => diff.push(format!(
                "{name}: documented [{}], cargo [{}]",
                d.join(", "),
                deps.join(", ")
            )),
            Some(_) => {}
        }
    }
    diff.extend(
        documented
            .keys()
            .filter(|n| !actual.contains_key(*n))
            .map(|n| format!("{n}: not a workspace crate")),
    );
    bail!(
        "docs/ARCHITECTURE.md's crate map differs from cargo metadata (`cargo xtask crate-map` prints the current one):\n  {}",
        diff.join("\n  ")
    )
}

/// Prints the current crate map block, in the documented order where there is one.
pub fn print(root: &Path) -> Result<()> {
    let doc = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md")).unwrap_or_default();
    let doc_order: Vec<String> = block(&doc)
        .map(|b| {
            b.lines().filter_map(|l| l.split_once(':').map(|(n, _)| n.trim().to_string())).collect()
        })
        .unwrap_or_default();
    print!("{}", render(&from_cargo(root)?, &doc_order));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
    }

    #[test]
    fn the_documented_map_is_cargos() {
        check(&root()).unwrap();
    }

    #[test]
    fn a_missing_edge_is_a_difference() {
        let doc = std::fs::read_to_string(root().join("docs/ARCHITECTURE.md")).unwrap();
        let changed =
            doc.replacen("tessera-vocab:        tessera-gguf", "tessera-vocab:        -", 1);
        assert_ne!(changed, doc, "the map lists tessera-vocab's dependency");
        assert_ne!(from_doc(&changed).unwrap(), from_cargo(&root()).unwrap());
        let map = from_doc(&doc).unwrap();
        let order: Vec<String> = map.keys().cloned().collect();
        assert_eq!(
            from_doc(&format!("{MARKER}\n```\n{}```\n", render(&map, &order))).unwrap(),
            map
        );
    }
}
