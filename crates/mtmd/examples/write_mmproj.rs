//! Writes a random Gemma 3 mmproj file: the tests' (`RandomMmproj::tiny_gemma3(N)`), or one of
//! the shape given, for the reference tools and benchmarks that run llama.cpp's libmtmd on the
//! same file.
//!
//! `cargo run -p tessera-mtmd --example write_mmproj -- OUT.gguf [N_MMPROJ_EMBD
//!   [IMAGE_SIZE PATCH N_EMBD N_FF N_LAYER N_HEAD N_MERGE]]`

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(out) = args.first() else {
        eprintln!(
            "usage: write_mmproj OUT.gguf [N_MMPROJ_EMBD (default 96) [IMAGE_SIZE PATCH N_EMBD \
             N_FF N_LAYER N_HEAD N_MERGE]]"
        );
        std::process::exit(2);
    };
    let num = |i: usize, what: &str| -> usize {
        args[i].parse().unwrap_or_else(|_| panic!("{what}: a number, not '{}'", args[i]))
    };
    let n = if args.len() > 1 { num(1, "N_MMPROJ_EMBD") } else { 96 };
    let mut spec = tessera_mtmd::synth::RandomMmproj::tiny_gemma3(n);
    if args.len() > 2 {
        assert_eq!(args.len(), 9, "the shape takes 7 numbers");
        spec.image_size = num(2, "IMAGE_SIZE");
        spec.patch_size = num(3, "PATCH");
        spec.n_embd = num(4, "N_EMBD");
        spec.n_ff = num(5, "N_FF");
        spec.n_layer = num(6, "N_LAYER");
        spec.n_head = num(7, "N_HEAD");
        spec.n_merge = num(8, "N_MERGE");
    }
    match tessera_mtmd::synth::write_random_mmproj(&spec, std::path::Path::new(out)) {
        Ok(bytes) => println!("{out}: {bytes} bytes ({spec:?})"),
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
}
