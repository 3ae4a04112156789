//! Lists `kernels/*.cu` into `$OUT_DIR/kernel_files.rs`, so every kernel file is embedded and
//! compiled: a new file cannot be left out of the list by hand.

use std::io::Write;
use std::path::Path;

fn main() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("kernels/")
        .map(|e| e.expect("kernels/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "cu" || e == "cuh"))
        .collect();
    files.sort();
    let out = Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR")).join("kernel_files.rs");
    let mut f = std::fs::File::create(out).expect("kernel_files.rs");
    writeln!(f, "&[").unwrap();
    for p in files {
        println!("cargo:rerun-if-changed={}", p.display());
        let name = p.file_name().unwrap().to_str().expect("UTF-8 kernel file name");
        writeln!(f, "    ({name:?}, include_str!({:?})),", p.display().to_string()).unwrap();
    }
    writeln!(f, "]").unwrap();
}
