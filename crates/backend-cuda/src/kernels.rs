//! The CUDA kernel sources, embedded in the binary, and the entry points each defines.
//!
//! The list is made by the build script from `kernels/` (every `.cu` file is a module, every
//! `.cuh` a header prepended to all of them), and each module's entry points are read from its
//! text: `extern "C" __global__ void NAME(`, or `PREFIX##T(` in a `#define MACRO(T, ...)` body
//! with one entry point per `MACRO(x, ...)` line. Nothing is listed by hand, so no file or entry
//! point can be left out; `tests/nvrtc.rs` compiles every module and finds every name in its
//! CUBIN.

/// Every file under `kernels/`: (file name, text), sorted by name.
pub const FILES: &[(&str, &str)] = include!(concat!(env!("OUT_DIR"), "/kernel_files.rs"));

/// The headers prepended to every module, in this order: the prelude (types, half conversion,
/// reductions), the tensor descriptor and element access, the int8 dot products, the attention
/// kernels' online softmax.
pub const HEADERS: &[&str] = &["prelude.cuh", "types.cuh", "vecdotq.cuh", "attn.cuh"];

/// One `.cu` file.
#[derive(Debug, Clone, Copy)]
pub struct KernelSource {
    /// The file's name (`ops.cu`).
    pub name: &'static str,
    /// Its text.
    pub src: &'static str,
}

fn file(name: &str) -> &'static str {
    FILES.iter().find(|(n, _)| *n == name).map(|(_, s)| *s).expect("a header of kernels/")
}

impl KernelSource {
    /// The text NVRTC compiles: the headers, then the file.
    pub fn full_source(&self) -> String {
        let mut s = String::new();
        for h in HEADERS {
            s.push_str(&format!("#line 1 \"{h}\"\n{}\n", file(h)));
        }
        s.push_str(&format!("#line 1 \"{}\"\n{}", self.name, self.src));
        s
    }

    /// The `__global__` functions the file defines (see the module docs).
    pub fn entry_points(&self) -> Vec<String> {
        entry_points(self.src)
    }
}

/// Every kernel module (the `.cu` files).
pub fn all() -> Vec<KernelSource> {
    FILES
        .iter()
        .filter(|(n, _)| n.ends_with(".cu"))
        .map(|&(name, src)| KernelSource { name, src })
        .collect()
}

/// The kernel module defining `entry`, if any.
pub fn find(entry: &str) -> Option<KernelSource> {
    all().into_iter().find(|k| k.entry_points().iter().any(|e| e == entry))
}

const GLOBAL: &str = "extern \"C\" __global__ void ";

fn ident(s: &str) -> &str {
    let end = s.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(s.len());
    &s[..end]
}

/// The entry points of kernel source `src`.
pub fn entry_points(src: &str) -> Vec<String> {
    let mut out = Vec::new();
    // Macros that define kernels: name -> the name prefixes they paste their first argument to.
    let mut macros: Vec<(String, Vec<String>)> = Vec::new();
    let mut current: Option<(String, Vec<String>)> = None;
    for line in src.lines() {
        let t = line.trim_start();
        if let Some(rest) = t.strip_prefix("#define ") {
            current = Some((ident(rest).to_string(), Vec::new()));
        }
        let in_macro = current.is_some();
        let mut rest = line;
        while let Some(at) = rest.find(GLOBAL) {
            rest = &rest[at + GLOBAL.len()..];
            let name = ident(rest);
            if in_macro && rest[name.len()..].starts_with("##") {
                current.as_mut().expect("in a macro").1.push(name.to_string());
            } else if !in_macro {
                out.push(name.to_string());
            }
        }
        if in_macro && !line.trim_end().ends_with('\\') {
            let m = current.take().expect("in a macro");
            if !m.1.is_empty() {
                macros.push(m);
            }
        }
        if !in_macro {
            for (name, prefixes) in &macros {
                if let Some(args) = t.strip_prefix(name.as_str()).and_then(|r| r.strip_prefix('('))
                {
                    let arg = ident(args.trim_start());
                    out.extend(prefixes.iter().map(|p| format!("{p}{arg}")));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Entry point names are unique across modules and every module defines at least one.
    #[test]
    fn entry_points_are_unique_and_every_module_has_some() {
        let mut seen = std::collections::HashSet::new();
        for k in all() {
            let eps = k.entry_points();
            assert!(!eps.is_empty(), "{}: no entry points found", k.name);
            for e in eps {
                assert!(seen.insert(e.clone()), "{e} defined twice");
                assert_eq!(find(&e).map(|f| f.name), Some(k.name));
            }
        }
        for h in HEADERS {
            assert!(FILES.iter().any(|(n, _)| n == h), "header {h} missing");
        }
    }

    /// The parser finds plain and macro-made kernels, and only those.
    #[test]
    fn entry_points_are_read_from_the_text() {
        let src = "extern \"C\" __global__ void plain(int x) {}\n\
                   __device__ void helper() {}\n\
                   #define MK(T, N) \\\n    extern \"C\" __global__ void pre_##T(int x) {} \\\n    extern \"C\" __global__ void other_##T() {}\n\
                   MK(a, 1)\nMK(b, 2)\n";
        assert_eq!(
            entry_points(src),
            ["plain", "pre_a", "other_a", "pre_b", "other_b"].map(String::from).to_vec()
        );
    }

    /// Every `.cu` file under kernels/ on disk is in the embedded list (the build script reads
    /// the folder; this catches a stale build).
    #[test]
    fn every_file_on_disk_is_embedded() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels");
        for e in std::fs::read_dir(dir).unwrap() {
            let name = e.unwrap().file_name().into_string().unwrap();
            assert!(FILES.iter().any(|(n, _)| *n == name), "{name} not embedded");
        }
    }
}
