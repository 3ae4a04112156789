//! Writes a random mmproj file: the tests' Gemma 3 one (`RandomMmproj::tiny_gemma3(N)`), or one
//! of the shape given, or with `--idefics3` the tests' Idefics3 one (`tiny_idefics3(N)`), for
//! the reference tools and benchmarks that run llama.cpp's libmtmd on the same file. With
//! `--idefics3-lm SRC DST`, copies a SmolLM2 GGUF with Idefics3's image tokens
//! (`synth::with_idefics3_tokens`).
//!
//! `cargo run -p tessera-mtmd --example write_mmproj -- [--idefics3 | --idefics3-old |
//!   --qwen25vl] OUT.gguf [N_MMPROJ_EMBD
//!   [IMAGE_SIZE PATCH N_EMBD N_FF N_LAYER N_HEAD N_MERGE]]`

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--idefics3-lm") {
        let (src, dst) = (std::path::Path::new(&args[1]), std::path::Path::new(&args[2]));
        match tessera_mtmd::synth::with_idefics3_tokens(src, dst) {
            Ok(bytes) => println!("{}: {bytes} bytes", dst.display()),
            Err(e) => {
                eprintln!("{e}");
                std::process::exit(1);
            }
        }
        return;
    }
    // --idefics3-old: without the longest side (llama.cpp's older files).
    let idefics3 = match args.first().map(String::as_str) {
        Some("--idefics3") => Some(true),
        Some("--idefics3-old") => Some(false),
        _ => None,
    };
    let qwen = args.first().map(String::as_str) == Some("--qwen25vl");
    if idefics3.is_some() || qwen {
        args.remove(0);
    }
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
    let mut spec = match idefics3 {
        Some(edge) => tessera_mtmd::synth::RandomMmproj {
            longest_edge: if edge { 128 } else { 0 },
            ..tessera_mtmd::synth::RandomMmproj::tiny_idefics3(n)
        },
        None if qwen => tessera_mtmd::synth::RandomMmproj::tiny_qwen25vl(n),
        None => tessera_mtmd::synth::RandomMmproj::tiny_gemma3(n),
    };
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
