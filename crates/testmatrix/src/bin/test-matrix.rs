//! `test-matrix`: runs the kernel test matrix on the CPU backend for every thread count x SIMD
//! level asked for, prints the table, and exits non-zero on any failure.
//!
//! `cargo xtask test-matrix [--ops REGEX] [--threads 1,2,3] [--simd scalar,avx2,avx512]` builds
//! this in release and runs it. Built with the `cuda` feature, `--backend cuda` runs the same
//! cases on each CUDA GPU instead (`--devices 0,1`); with `REQUIRE_CUDA=1` a missing GPU fails.

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
    /// `cpu`, or `cuda` (with the `cuda` feature).
    #[arg(long, default_value = "cpu")]
    backend: String,
    /// CUDA device ordinals (`--backend cuda`).
    #[arg(long, value_delimiter = ',', default_value = "0")]
    devices: Vec<usize>,
    /// Tensor layouts, comma-separated: `slots` (each tensor its own guarded slot) and
    /// `alloc` (placed by the graph allocator: shared memory and in-place results, as in a
    /// model's graph).
    #[arg(long, value_delimiter = ',', default_value = "slots,alloc", value_parser = ["slots", "alloc"])]
    layouts: Vec<String>,
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

/// The backend of CUDA device `cudaN`; without one, an error (a failure under `REQUIRE_CUDA=1`,
/// else the configuration is reported as skipped).
#[cfg(feature = "cuda")]
fn make_cuda_backend(config: &Config) -> Result<Box<dyn Backend>, String> {
    let ordinal: usize = config
        .variant
        .strip_prefix("cuda")
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("bad CUDA configuration '{}'", config.variant))?;
    match tessera_backend_cuda::CudaDevice::new(ordinal) {
        Ok(d) => Ok(Box::new(d.backend())),
        Err(e) if std::env::var_os("REQUIRE_CUDA").is_some() => {
            panic!("REQUIRE_CUDA is set but CUDA device {ordinal} did not open: {e}")
        }
        Err(e) => Err(format!("no CUDA: {e}")),
    }
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
    if args.backend == "cuda" {
        #[cfg(feature = "cuda")]
        for &d in &args.devices {
            for allocated in args.layouts.iter().map(|l| l == "alloc") {
                let config = Config { threads: 1, variant: format!("cuda{d}"), allocated };
                let run = run_config(&set, &config, &mut make_cuda_backend);
                eprintln!("  {config}: {:.2}s", run.elapsed.as_secs_f64());
                runs.push(run);
            }
        }
        #[cfg(not(feature = "cuda"))]
        {
            eprintln!("test-matrix: built without the `cuda` feature");
            return ExitCode::from(2);
        }
    } else if args.backend != "cpu" {
        eprintln!("test-matrix: unknown backend '{}' (cpu, cuda)", args.backend);
        return ExitCode::from(2);
    }
    for simd in args.simd.iter().filter(|_| args.backend == "cpu") {
        for &threads in &args.threads {
            for allocated in args.layouts.iter().map(|l| l == "alloc") {
                let config = Config { threads, variant: simd.trim().to_lowercase(), allocated };
                let run = run_config(&set, &config, &mut make_backend);
                eprintln!("  {config}: {:.2}s", run.elapsed.as_secs_f64());
                runs.push(run);
            }
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
