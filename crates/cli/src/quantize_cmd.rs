//! `tessera quantize`: llama-quantize without an importance matrix.

use anyhow::{anyhow, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use tessera_llama::quantize::{quantize_file, FileType, FILE_TYPES};

/// Options of `tessera quantize` (as llama-quantize's).
#[derive(Args, Debug)]
pub struct QuantizeArgs {
    /// Input model (GGUF).
    input: PathBuf,
    /// Output file.
    output: PathBuf,
    /// Target type: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K_S/M/L, Q4_K_S/M, Q5_K_S/M, Q6_K,
    /// IQ4_NL, IQ4_XS, TQ1_0, TQ2_0, MXFP4_MOE, F16, BF16, F32 (or llama.cpp's numeric id).
    #[arg(value_name = "TYPE")]
    ftype: String,
    /// Every weight to the type itself: no per-tensor mix (llama-quantize --pure).
    #[arg(long)]
    pure: bool,
}

/// Runs the command.
pub fn run(a: QuantizeArgs) -> Result<()> {
    let ft = FileType::parse(&a.ftype).ok_or_else(|| {
        anyhow!(
            "unknown type '{}' (one of: {})",
            a.ftype,
            FILE_TYPES.iter().map(|f| f.name).collect::<Vec<_>>().join(", ")
        )
    })?;
    crate::common::check_model_path(&a.input)?;
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} tensors {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let s = quantize_file(&a.input, &a.output, ft, a.pure, |i, n, name| {
        bar.set_length(n as u64);
        bar.set_position(i as u64);
        bar.set_message(name.to_string());
    })
    .map_err(crate::common::explain)?;
    bar.finish_and_clear();
    eprintln!(
        "{}: {} tensors ({} re-encoded), {:.2} MiB -> {:.2} MiB as {}",
        a.output.display(),
        s.n_tensors,
        s.n_quantized,
        s.bytes_in as f64 / 1048576.0,
        s.bytes_out as f64 / 1048576.0,
        ft.name
    );
    Ok(())
}
