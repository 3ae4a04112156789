//! `test-matrix`: runs the kernel test matrix on the CPU backend for every thread count x SIMD
//! level asked for, prints the table, and exits non-zero on any failure.
//!
//! `cargo xtask test-matrix [--ops REGEX] [--threads 1,2,3] [--simd scalar,avx2,avx512]` builds
//! this in release and runs it.

use clap::Parser;
use std::process::ExitCode;
use tessera_backend::Backend;
use tessera_backend_cpu::{CpuBackend, SimdLevel};
use tessera_testmatrix::{cases, filter_cases, run_config, Config, PreparedSet, Report};

/// Runs the kernel test matrix on the CPU backend.
#[derive(Parser, Debug)]
#[command(name = "test-matrix")]
struct Args {
    /// Only cases whose op or full name matches this (case-insensitive regex, else substring).
    #[arg(long)]
    ops: Option<String>,
    /// Thread counts, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,3")]
    threads: Vec<usize>,
    /// SIMD levels, comma-separated (levels this CPU lacks are reported as skipped).
    #[arg(long, value_delimiter = ',', default_value = "scalar,avx2,avx512")]
    simd: Vec<String>,
    /// List the cases and exit.
    #[arg(long)]
    list: bool,
    /// How many failures to print in full.
    #[arg(long, default_value_t = 40)]
    max_failures: usize,
}

fn make_backend(config: &Config) -> Result<Box<dyn Backend>, String> {
    let level = SimdLevel::parse(&config.variant)
        .ok_or_else(|| format!("unknown SIMD level '{}'", config.variant))?;
    if !SimdLevel::available().contains(&level) {
        return Err(format!("this CPU has no {}", level.name()));
    }
    let mut b = CpuBackend::new(config.threads);
    b.set_simd_level(level);
    Ok(Box::new(b))
}

fn main() -> ExitCode {
    let args = Args::parse();
    let cases = filter_cases(cases::all(), args.ops.as_deref());
    if args.list {
        for c in &cases {
            println!("{}", c.name());
        }
        return ExitCode::SUCCESS;
    }
    if cases.is_empty() {
        eprintln!("test-matrix: no case matches {:?}", args.ops);
        return ExitCode::from(2);
    }
    let set = PreparedSet::new(&cases);
    eprintln!("test-matrix: {} cases prepared in {:.2}s", cases.len(), set.elapsed.as_secs_f64());
    let mut runs = Vec::new();
    for simd in &args.simd {
        for &threads in &args.threads {
            let config = Config { threads, variant: simd.trim().to_lowercase() };
            let run = run_config(&set, &config, &mut make_backend);
            eprintln!("  {config}: {:.2}s", run.elapsed.as_secs_f64());
            runs.push(run);
        }
    }
    let report = Report { set: &set, runs };
    print!("{}", report.render(args.max_failures));
    if report.failed() > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
