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

    /// Each kernel's body (the text between its signature's `{` and the matching `}`), with
    /// its name as written (`mmvq_` for `mmvq_##T`).
    fn bodies(src: &str) -> Vec<(&str, &str)> {
        let mut out = Vec::new();
        let mut rest = src;
        while let Some(at) = rest.find(GLOBAL) {
            rest = &rest[at + GLOBAL.len()..];
            let name = ident(rest);
            let open = rest.find('{').expect("a kernel body");
            let mut depth = 0;
            let close = rest[open..]
                .char_indices()
                .find_map(|(i, c)| {
                    depth += match c {
                        '{' => 1,
                        '}' => -1,
                        _ => 0,
                    };
                    (depth == 0).then_some(open + i)
                })
                .expect("a closed kernel body");
            out.push((name, &rest[open + 1..close]));
            rest = &rest[close..];
        }
        out
    }

    /// Programmatic dependent launch (prelude.cuh's `pdl_start`): the executor may start any
    /// kernel while the previous one runs, so every kernel's first statement is `pdl_start()`,
    /// but for the matrix-vector kernels that prefetch their weight rows first, whose text
    /// before it computes indexes and prefetches only (no indexing, no activation, output or
    /// bias pointer).
    #[test]
    fn every_kernel_waits_for_its_predecessor_first() {
        const PREFETCHING: [&str; 4] = ["mmvq_", "mmvq_glu_", "mmvq_group_", "mmv_"];
        const UNREAD: [&str; 10] = ["yq", "x", "dst", "bias", "d0", "d1", "d2", "b0", "b1", "b2"];
        let mut n = 0;
        for k in all() {
            for (name, body) in bodies(k.src) {
                let at = body
                    .find("pdl_start();")
                    .unwrap_or_else(|| panic!("{}: {name} never calls pdl_start()", k.name));
                let before = body[..at].replace('\\', " ");
                let before = before.trim();
                n += 1;
                if before.is_empty() {
                    continue;
                }
                assert!(
                    PREFETCHING.contains(&name),
                    "{}: {name} does something before pdl_start(): {before}",
                    k.name
                );
                assert!(before.contains("prefetch_l2("), "{}: {name}: {before}", k.name);
                let idents =
                    before.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'));
                for id in idents {
                    assert!(
                        !UNREAD.contains(&id),
                        "{}: {name} names {id} before pdl_start()",
                        k.name
                    );
                }
                assert!(
                    !before.contains('['),
                    "{}: {name} indexes memory before pdl_start()",
                    k.name
                );
            }
        }
        assert!(n >= 47, "{n} kernel bodies found");
        // The parser itself: a body with a nested block, and a kernel that forgot.
        let src =
            "extern \"C\" __global__ void a(int x) {\n    pdl_start();\n    if (x) { x = 1; }\n}\n\
                   extern \"C\" __global__ void b(int x) {\n    x = 2;\n}\n";
        let b = bodies(src);
        assert_eq!(b.len(), 2);
        assert!(b[0].1.trim_start().starts_with("pdl_start();") && b[0].1.contains("x = 1;"));
        assert_eq!((b[1].0, b[1].1.trim()), ("b", "x = 2;"));
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
