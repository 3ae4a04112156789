//! Times the vision encoder on one image in one process (after a first, warming encode):
//! `cargo run --release -p tessera-mtmd --example encode_bench -- MMPROJ IMAGE [REPS] [THREADS]`.

use std::sync::Arc;
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 2 {
        eprintln!("usage: encode_bench MMPROJ IMAGE [REPS (3)] [THREADS (2)]");
        std::process::exit(2);
    }
    let reps: usize = args.get(2).map_or(3, |s| s.parse().expect("REPS"));
    let threads: usize = args.get(3).map_or(2, |s| s.parse().expect("THREADS"));
    let mmproj = Arc::new(tessera_mtmd::Mmproj::load(&args[0]).expect("mmproj"));
    let img = tessera_mtmd::Bitmap::open(args[1].as_ref(), Default::default()).expect("image");
    let entries = tessera_mtmd::preprocess(&mmproj, &img).entries;
    let cpu = tessera_backend_cpu::CpuBackend::new(threads);
    let mut enc = tessera_mtmd::Encoder::new(mmproj.clone(), vec![Box::new(cpu)]).expect("encoder");
    for rep in 0..=reps {
        let t = Instant::now();
        for e in &entries {
            enc.encode(e).expect("encode");
        }
        let ms = t.elapsed().as_secs_f64() * 1e3;
        println!("{} {ms:.1} ms", if rep == 0 { "warm-up" } else { "encode" });
    }
}
