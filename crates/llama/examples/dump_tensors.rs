//! Writes the named intermediate tensors of one decode, to compare with llama.cpp's bit for bit.
//!
//! ```text
//! cargo run --release -p tessera-llama --example dump_tensors -- \
//!     MODEL.gguf '[tokens...]' FLASH_ATTN(0|1) N_FIRST OUT_DIR
//! ```
//!
//! The first `N_FIRST` tokens are decoded as one batch, the rest as a second one (`N_FIRST` =
//! the number of tokens: a single batch); the tensors of the last batch (`attn_norm-3`,
//! `kqv_out-3`, `l_out-3`, `result_output`, ... as llama.cpp names them) are written to
//! `OUT_DIR/NAME.f32`. `crates/llama/tools/llama_cpp_dump.py` does the same with llama.cpp's
//! eval callback and `compare_dumps.py` reports the first tensor that differs.

use tessera_llama::{Batch, ContextParams, LlamaContext, Model};

/// The per-layer tensor names to keep (llama.cpp's `cb` names).
const LAYER_NAMES: [&str; 18] = [
    "attn_norm",
    "Qcur",
    "Kcur",
    "kq",
    "kq_soft_max",
    "kqv",
    "kqv_out",
    "attn_post_norm",
    "sa_out",
    "ffn_inp",
    "ffn_norm",
    "ffn_up",
    "ffn_gate",
    "ffn_geglu",
    "ffn_swiglu",
    "ffn_out",
    "ffn_post_norm",
    "l_out",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [model, tokens, fa, first, out] = args.as_slice() else {
        return Err("usage: dump_tensors MODEL TOKENS_JSON FLASH_ATTN N_FIRST OUT_DIR".into());
    };
    // REPACK=1: the weights llama.cpp would repack take its repacked arithmetic (its default);
    // otherwise plain, as the references made with use_extra_bufts = False.
    let repack = std::env::var("REPACK").is_ok_and(|v| v == "1");
    let model = Model::load_with(
        model,
        &tessera_llama::LoadParams {
            repack,
            ..tessera_llama::LoadParams::new(tessera_backend_cpu::CpuDevice::shared())
        },
    )?;
    let tokens: Vec<u32> = serde_json::from_str(tokens)?;
    let first: usize = first.parse::<usize>()?.min(tokens.len());
    let params = ContextParams {
        n_ctx: tokens.len().next_multiple_of(256).max(512),
        n_ubatch: 512,
        n_threads: 2,
        flash_attn: fa == "1",
        ..Default::default()
    };
    let mut ctx = LlamaContext::new(&model, params)?;
    let mut names = vec!["result_norm".to_string(), "result_output".to_string()];
    for il in 0..model.hparams.n_layer {
        names.extend(LAYER_NAMES.iter().map(|n| format!("{n}-{il}")));
    }
    ctx.observe(names);
    let n = tokens.len();
    let batches = if first < n { vec![(0, first), (first, n)] } else { vec![(0, n)] };
    for (start, end) in batches {
        let mut batch = Batch::new();
        for (i, &t) in tokens.iter().enumerate().take(end).skip(start) {
            // Logits for the last token only, as llama.cpp's `llama_batch_get_one`: the last
            // layer then computes that row alone there too.
            batch.add(t, i as i32, 0, i + 1 == end);
        }
        ctx.decode(&batch)?;
    }
    std::fs::create_dir_all(out)?;
    for (name, values) in ctx.observed() {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        std::fs::write(std::path::Path::new(out).join(format!("{name}.f32")), bytes)?;
    }
    Ok(())
}
