//! Writes the tests' random Gemma 3 mmproj file (`RandomMmproj::tiny_gemma3(N)`), for the
//! reference tools that run llama.cpp's libmtmd on the same file.
//!
//! `cargo run -p tessera-mtmd --example write_mmproj -- OUT.gguf [N_MMPROJ_EMBD]`

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(out) = args.next() else {
        eprintln!("usage: write_mmproj OUT.gguf [N_MMPROJ_EMBD (default 96)]");
        std::process::exit(2);
    };
    let n: usize = args.next().map_or(96, |s| s.parse().expect("N_MMPROJ_EMBD: a number"));
    let spec = tessera_mtmd::synth::RandomMmproj::tiny_gemma3(n);
    match tessera_mtmd::synth::write_random_mmproj(&spec, std::path::Path::new(&out)) {
        Ok(bytes) => println!("{out}: {bytes} bytes ({spec:?})"),
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
}
