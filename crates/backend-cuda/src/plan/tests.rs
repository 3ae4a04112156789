//! The plan as tables: every weight type × columns × device × allowed paths, the refusals, and
//! `TESSERA_CUDA_PATHS`.

use super::*;
use tessera_tensor::DType::{self, *};

const SM90: Capability = Capability { arch: 90, cublas: true };

/// The value of `#define NAME value` in the kernel file that defines entry point `entry`.
fn kernel_define(entry: &str, name: &str) -> usize {
    let k = crate::kernels::find(entry).unwrap_or_else(|| panic!("a file defines {entry}"));
    k.src
        .lines()
        .find_map(|l| l.strip_prefix(&format!("#define {name} "))?.trim().parse().ok())
        .unwrap_or_else(|| panic!("#define {name} in {}", k.name))
}

fn product(w: DType, cols: usize) -> (Context, TensorId) {
    let mut ctx = Context::new();
    let a = ctx.new_tensor(w, &[256, 8]).unwrap();
    let x = ctx.new_tensor(F32, &[256, cols]).unwrap();
    let y = ctx.mul_mat(a, x).unwrap();
    (ctx, y)
}

fn path(w: DType, cols: usize, cap: Capability, paths: Paths) -> Option<MatmulPath> {
    let (ctx, y) = product(w, cols);
    match plan_node(&ctx, y, cap, paths).ok()?.kernel {
        Kernel::MulMat(p) => Some(p),
        k => panic!("MUL_MAT planned as {k:?}"),
    }
}

/// 1-8 columns take the int8 kernel where the type has it, one F16 column the F16 kernel;
/// batches up to `MMQ_MAX_COLUMNS` the int8 tensor-core kernel on sm_80+ (any batch without
/// cuBLAS or with `-gemm`), larger ones and the float types cuBLAS (the generic kernel without
/// cuBLAS or with `-gemm`); an old device or the generic setting take the generic kernel; types
/// without a dequantizer are refused.
#[test]
fn matmul_paths_by_type_columns_and_device() {
    use MatmulPath::*;
    // (type, 1 column, 2-8 columns, 1 column on sm_52 without dp4a)
    type Row = (DType, Option<MatmulPath>, Option<MatmulPath>, Option<MatmulPath>);
    let table: &[Row] = &[
        (F32, Some(Mmv), Some(Mmv), Some(Mmv)),
        (F16, Some(Mmv), Some(Mmv), Some(Mmv)),
        (BF16, Some(Mmv), Some(Mmv), Some(Mmv)),
        (Q4_0, Some(Mmvq), Some(Mmvq), Some(Generic)),
        (Q4_1, Some(Mmvq), Some(Mmvq), Some(Generic)),
        (Q5_0, Some(Mmvq), Some(Mmvq), Some(Generic)),
        (Q5_1, Some(Mmvq), Some(Mmvq), Some(Generic)),
        (Q8_0, Some(Mmvq), Some(Mmvq), Some(Generic)),
        (Q2_K, Some(Mmvq), Some(Mmvq), Some(Generic)),
        (Q3_K, Some(Mmvq), Some(Mmvq), Some(Generic)),
        (Q4_K, Some(Mmvq), Some(Mmvq), Some(Generic)),
        (Q5_K, Some(Mmvq), Some(Mmvq), Some(Generic)),
        (Q6_K, Some(Mmvq), Some(Mmvq), Some(Generic)),
        (IQ4_NL, Some(Mmvq), Some(Mmvq), Some(Generic)),
        (IQ4_XS, Some(Mmvq), Some(Mmvq), Some(Generic)),
        (MXFP4, Some(Mmvq), Some(Mmvq), Some(Generic)),
        (IQ2_XXS, None, None, None),
        (TQ2_0, None, None, None),
    ];
    for &(w, one, few, old) in table {
        assert_eq!(path(w, 1, SM90, Paths::all()), one, "{w} x 1 column");
        for cols in [2, 8] {
            assert_eq!(path(w, cols, SM90, Paths::all()), few, "{w} x {cols} columns");
        }
        let generic = one.map(|_| Generic);
        let no_blas = Capability { cublas: false, ..SM90 };
        let no_gemm = Paths::parse("-gemm").unwrap();
        let no_mmq = Paths::parse("-mmq").unwrap();
        let sm75 = Capability { arch: 75, cublas: true };
        // The int8 types take MMQ for small batches (any batch without cuBLAS), cuBLAS above.
        let int8 = few == Some(Mmvq);
        let mmq_or = |other: Option<MatmulPath>| if int8 { Some(Mmq) } else { other };
        for cols in [9, 64, MMQ_MAX_COLUMNS] {
            assert_eq!(
                path(w, cols, SM90, Paths::all()),
                mmq_or(one.map(|_| Gemm)),
                "{w} x {cols}"
            );
            assert_eq!(path(w, cols, SM90, no_mmq), one.map(|_| Gemm), "{w} x {cols}, -mmq");
            assert_eq!(path(w, cols, sm75, Paths::all()), one.map(|_| Gemm), "{w} x {cols}, sm_75");
            assert_eq!(
                path(w, cols, no_blas, Paths::all()),
                mmq_or(generic),
                "{w} x {cols}, no cuBLAS"
            );
            assert_eq!(path(w, cols, SM90, no_gemm), mmq_or(generic), "{w} x {cols}, -gemm");
        }
        let big = MMQ_MAX_COLUMNS + 1;
        assert_eq!(path(w, big, SM90, Paths::all()), one.map(|_| Gemm), "{w} x {big}");
        assert_eq!(path(w, big, no_blas, Paths::all()), mmq_or(generic), "{w} x {big}, no cuBLAS");
        assert_eq!(path(w, big, SM90, no_mmq), one.map(|_| Gemm), "{w} x {big}, -mmq");
        assert_eq!(path(w, 1, SM90, Paths::generic()), generic, "{w}, generic only");
        assert_eq!(
            path(w, 1, Capability { arch: 52, cublas: true }, Paths::all()),
            old,
            "{w} on sm_52"
        );
        for p in [one, few, old, mmq_or(None)].into_iter().flatten() {
            assert!(possible_paths(w).contains(&p), "{w}: {p} not among the possible paths");
        }
    }
}

/// Turning one path off leaves the others.
#[test]
fn single_paths_off() {
    let no_mmvq = Paths::parse("-mmvq").unwrap();
    assert_eq!(path(Q8_0, 1, SM90, no_mmvq), Some(MatmulPath::Generic));
    assert_eq!(path(Q4_K, 1, SM90, no_mmvq), Some(MatmulPath::Generic));
    assert_eq!(path(Q4_1, 1, SM90, no_mmvq), Some(MatmulPath::Generic));
    assert_eq!(path(F16, 1, SM90, Paths::parse("mmv").unwrap()), Some(MatmulPath::Mmv));
    assert_eq!(path(Q4_K, 1, SM90, Paths::parse("mmv").unwrap()), Some(MatmulPath::Generic));
    assert_eq!(path(F16, 1, SM90, no_mmvq), Some(MatmulPath::Mmv));
}

/// A column view is still one contiguous column; a weight stack and F16 rows with gaps take
/// the generic kernel.
#[test]
fn strided_products_stay_generic() {
    let mut ctx = Context::new();
    let a = ctx.new_tensor(Q8_0, &[256, 8]).unwrap();
    let x = ctx.new_tensor(F32, &[512, 2]).unwrap();
    let col = ctx.view(x, &[256, 1], &[4 * 512], 0).unwrap();
    let y = ctx.mul_mat(a, col).unwrap();
    let p = plan_node(&ctx, y, SM90, Paths::all()).unwrap();
    assert_eq!(p.kernel, Kernel::MulMat(MatmulPath::Mmvq), "a column view is contiguous");
    let stack = ctx.new_tensor(Q8_0, &[256, 8, 2]).unwrap();
    let x3 = ctx.new_tensor(F32, &[256, 1, 2]).unwrap();
    let y = ctx.mul_mat(stack, x3).unwrap();
    assert_eq!(
        plan_node(&ctx, y, SM90, Paths::all()).unwrap().kernel,
        Kernel::MulMat(MatmulPath::Generic)
    );
    // F16 rows 1024 bytes apart holding 256 values: the float kernels take the row stride.
    let f = ctx.new_tensor(F16, &[512, 8]).unwrap();
    let fv = ctx.view(f, &[256, 8], &[1024], 0).unwrap();
    let x1 = ctx.new_tensor(F32, &[256, 1]).unwrap();
    let y = ctx.mul_mat(fv, x1).unwrap();
    assert_eq!(
        plan_node(&ctx, y, SM90, Paths::all()).unwrap().kernel,
        Kernel::MulMat(MatmulPath::Mmv)
    );
}

/// The plan says yes to the weight types with a dequantizer and to the quantizable
/// destinations, no to the rest (so the scheduler keeps those on the CPU), with a reason.
#[test]
fn refusals_follow_the_kernels() {
    let mut ctx = Context::new();
    let x = ctx.new_tensor(F32, &[256, 4]).unwrap();
    for (d, want) in [(F16, true), (Q8_0, true), (Q5_1, true), (Q4_K, false), (IQ4_NL, false)] {
        let dst = ctx.new_tensor(d, &[256, 4]).unwrap();
        let c = ctx.cpy(x, dst).unwrap();
        assert_eq!(plan_node(&ctx, c, SM90, Paths::all()).is_ok(), want, "CPY F32 -> {d}");
    }
    let m = ctx.argmax(x).unwrap();
    assert_eq!(plan_node(&ctx, m, SM90, Paths::all()).unwrap().kernel, Kernel::Argmax);
    let h = ctx.hadamard(x).unwrap();
    assert_eq!(plan_node(&ctx, h, SM90, Paths::all()).unwrap().kernel, Kernel::Hadamard);
    let wide = ctx.new_tensor(F32, &[2048, 2]).unwrap();
    let h = ctx.hadamard(wide).unwrap();
    assert!(
        plan_node(&ctx, h, SM90, Paths::all()).is_err(),
        "rows over HADAMARD_MAX stay on the CPU"
    );
    let v = ctx.new_tensor(F32, &[8]).unwrap();
    assert_eq!(plan_node(&ctx, v, SM90, Paths::all()).unwrap().kernel, Kernel::Nothing);
    let (ctx, y) = product(IQ2_XXS, 1);
    let why = plan_node(&ctx, y, SM90, Paths::all()).unwrap_err();
    assert!(why.contains("iq2_xxs") && why.contains("MUL_MAT"), "{why}");
}

#[test]
fn paths_parse_and_refuse() {
    assert_eq!(Paths::parse("").unwrap(), Paths::all());
    assert_eq!(Paths::parse("generic").unwrap().describe(), "generic");
    assert_eq!(Paths::parse("mmvq,mmv").unwrap().describe(), "mmvq,mmv");
    assert_eq!(
        Paths::parse("-mmvq").unwrap().describe(),
        "mmv,graphs,fused,fattn-vec,gemm,fattn-tile,mmq,fattn-mma,fattn-mma-dec,mmvq-split,pdl"
    );
    assert!(Paths::parse("mmvq,-mmv").is_err());
    let e = Paths::parse("mmvx").unwrap_err().to_string();
    assert!(e.contains("'mmvx'"), "{e}");
}

/// Decoding attention takes the split path (one chunk per 1024 cells, at most 32) with scratch
/// for the chunks' partials; prompts and the generic setting take the generic kernel.
#[test]
fn attention_paths() {
    let attn_ctx = |n_q: usize, n_kv: usize| {
        let mut ctx = Context::new();
        let q = ctx.new_tensor(F32, &[128, n_q, 8, 1]).unwrap();
        let k = ctx.new_tensor(F16, &[128, n_kv, 2, 1]).unwrap();
        let v = ctx.new_tensor(F16, &[128, n_kv, 2, 1]).unwrap();
        let m = ctx.new_tensor(F16, &[n_kv, n_q.next_multiple_of(64), 1, 1]).unwrap();
        let y = ctx.flash_attn_ext(q, k, v, Some(m), 0.125, 0.0, 0.0).unwrap();
        (ctx, y)
    };
    let plan_node_with =
        |(ctx, y): &(Context, TensorId), paths: Paths| plan_node(ctx, *y, SM90, paths).unwrap();
    let attn = |n_q: usize, n_kv: usize, paths: Paths| plan_node_with(&attn_ctx(n_q, n_kv), paths);
    // Decoding over an F16 cache: the tensor-core kernel, a block per 64 cells of a KV head.
    let p = attn(1, 64, Paths::all());
    assert_eq!((p.kernel, p.scratch), (Kernel::FlashAttn(AttnPath::MmaDec { splits: 1 }), 0));
    let p = attn(1, 4096, Paths::all());
    assert_eq!(p.kernel, Kernel::FlashAttn(AttnPath::MmaDec { splits: 64 }));
    assert_eq!(p.scratch, 8 * 64 * (128 + 2) * 4);
    let p = attn(1, 1 << 20, Paths::all());
    assert_eq!(p.kernel, Kernel::FlashAttn(AttnPath::MmaDec { splits: 128 }));
    // 4 heads a KV head x 8 rows: two blocks of 16 rows a KV head.
    let p = attn(8, 4096, Paths::all());
    assert_eq!(p.kernel, Kernel::FlashAttn(AttnPath::MmaDec { splits: 64 }));
    // Without it, the SIMT flash decoding.
    let all = Paths::parse("-fattn-mma-dec").unwrap();
    let p = plan_node_with(&attn_ctx(1, 256), all);
    assert_eq!((p.kernel, p.scratch), (Kernel::FlashAttn(AttnPath::Vec { splits: 1 }), 0));
    let p = plan_node_with(&attn_ctx(1, 4096), all);
    assert_eq!(p.kernel, Kernel::FlashAttn(AttnPath::Vec { splits: 4 }));
    assert_eq!(p.scratch, 8 * 4 * (128 + 2) * 4);
    let p = plan_node_with(&attn_ctx(1, 1 << 20), all);
    assert_eq!(p.kernel, Kernel::FlashAttn(AttnPath::Vec { splits: 32 }));
    // Prompts: the tensor-core kernel (F16 cache, head size 128 fits); without it the tiled
    // one; without both the generic one.
    assert_eq!(attn(9, 4096, Paths::all()).kernel, Kernel::FlashAttn(AttnPath::Mma));
    let no_mma = Paths::parse("-fattn-mma").unwrap();
    assert_eq!(attn(9, 4096, no_mma).kernel, Kernel::FlashAttn(AttnPath::Tile));
    let neither = Paths::parse("-fattn-tile,-fattn-mma").unwrap();
    assert_eq!(attn(9, 4096, neither).kernel, Kernel::FlashAttn(AttnPath::Generic));
    assert_eq!(attn(1, 4096, Paths::generic()).kernel, Kernel::FlashAttn(AttnPath::Generic));
    // Gemma's 256-wide heads do not fit the tiles.
    let mut ctx = Context::new();
    let q = ctx.new_tensor(F32, &[256, 32, 4, 1]).unwrap();
    let k = ctx.new_tensor(F16, &[256, 64, 1, 1]).unwrap();
    let v = ctx.new_tensor(F16, &[256, 64, 1, 1]).unwrap();
    let y = ctx.flash_attn_ext(q, k, v, None, 0.0625, 0.0, 0.0).unwrap();
    let p = plan_node(&ctx, y, SM90, Paths::all()).unwrap();
    assert_eq!(p.kernel, Kernel::FlashAttn(AttnPath::Generic));
}

#[test]
fn the_vision_encoders_convolution_and_pooling_plan() {
    let mut ctx = Context::new();
    let kernel = ctx.new_tensor(F16, &[8, 8, 3, 64]).unwrap();
    let img = ctx.new_tensor(F32, &[64, 64, 3, 1]).unwrap();
    let cols = ctx.im2col(kernel, img, [8, 8], [0, 0], [1, 1], true, F32).unwrap();
    assert_eq!(plan_node(&ctx, cols, SM90, Paths::all()).unwrap().kernel, Kernel::Im2Col);
    let x = ctx.new_tensor(F32, &[8, 8, 64, 1]).unwrap();
    let p = ctx.pool_2d(x, tessera_tensor::graph::PoolOp::Avg, [2, 2], [2, 2], [0, 0]).unwrap();
    assert_eq!(plan_node(&ctx, p, SM90, Paths::all()).unwrap().kernel, Kernel::Pool2d);
}

/// The `gemm` path's scratch: F16 copies of the weights (none for contiguous F16 weights) and
/// of the activations, the latter 256-byte aligned; only contiguous 2-D products take it.
#[test]
fn gemm_scratch_and_shapes() {
    let (ctx, y) = product(Q4_0, 16);
    let plan = plan_node(&ctx, y, SM90, Paths::parse("-mmq").unwrap()).unwrap();
    let w = ctx.get(ctx.get(y).src[0].unwrap());
    let s = gemm_scratch(w, 16);
    assert_eq!((s.w_bytes, s.x_offset, s.total), (256 * 8 * 2, 4096, 4096 + 256 * 16 * 2));
    assert_eq!(plan, NodePlan { kernel: Kernel::MulMat(MatmulPath::Gemm), scratch: s.total });
    let (ctx, y) = product(F16, 16);
    let s = gemm_scratch(ctx.get(ctx.get(y).src[0].unwrap()), 16);
    assert_eq!((s.w_bytes, s.x_offset, s.total), (0, 0, 256 * 16 * 2));
    // A batch of matrices (broadcast over dim 2) stays on the generic kernel.
    let mut ctx = Context::new();
    let a = ctx.new_tensor(F16, &[64, 32, 4]).unwrap();
    let x = ctx.new_tensor(F32, &[64, 16, 4]).unwrap();
    let y = ctx.mul_mat(a, x).unwrap();
    let p = plan_node(&ctx, y, SM90, Paths::all()).unwrap();
    assert_eq!(p.kernel, Kernel::MulMat(MatmulPath::Generic));
}

/// The mixture-of-experts ops and attention sinks have CUDA kernels: MUL_MAT_ID of every type
/// the backend reads, ARGSORT (and top-k over it), ADD_ID, SWIGLU_OAI and CLAMP; decoding
/// with sinks takes a prompt kernel (the decode path's merge has no sink term).
#[test]
fn moe_ops_and_sinks_are_planned() {
    let mut ctx = Context::new();
    let experts = ctx.new_tensor(Q4_0, &[64, 16, 4]).unwrap();
    let b = ctx.new_tensor(F32, &[64, 1, 3]).unwrap();
    let ids = ctx.new_tensor(I32, &[2, 3]).unwrap();
    let mm = ctx.mul_mat_id(experts, b, ids).unwrap();
    let bias = ctx.new_tensor(F32, &[16, 4]).unwrap();
    let biased = ctx.add_id(mm, bias, ids).unwrap();
    let logits = ctx.new_tensor(F32, &[4, 3]).unwrap();
    let sorted = ctx.argsort(logits, true).unwrap();
    let up = ctx.new_tensor(F32, &[16, 2, 3]).unwrap();
    let act = ctx.swiglu_oai(biased, up, 1.702, 7.0).unwrap();
    let clamped = ctx.clamp(act, -1.0, 1.0).unwrap();
    let plan = |ctx: &Context, id| plan_node(ctx, id, SM90, Paths::all()).unwrap().kernel;
    assert_eq!(plan(&ctx, mm), Kernel::MulMatId(MoePath::Mmvq));
    let scratch = plan_node(&ctx, mm, SM90, Paths::all()).unwrap().scratch;
    assert_eq!(scratch, 2 * 3 * 36, "Q8_1 of 2 blocks x 1 row x 3 tokens");
    let generic = plan_node(&ctx, mm, SM90, Paths::parse("-mmvq").unwrap()).unwrap();
    assert_eq!(generic.kernel, Kernel::MulMatId(MoePath::Generic));
    // A batch of 9 tokens: the pairs grouped by expert through the tensor cores (Q8_1 of 2
    // blocks x 1 row x 9 tokens, then 2 x 4 + 1 + 18 group ints), MMVQ without them.
    let b9 = ctx.new_tensor(F32, &[64, 1, 9]).unwrap();
    let ids9 = ctx.new_tensor(I32, &[2, 9]).unwrap();
    let batch = ctx.mul_mat_id(experts, b9, ids9).unwrap();
    let p = plan_node(&ctx, batch, SM90, Paths::all()).unwrap();
    assert_eq!(p.kernel, Kernel::MulMatId(MoePath::Mmq));
    assert_eq!(p.scratch, 768 + (2 * 4 + 1 + 18) * 4, "648 bytes of Q8_1, aligned");
    assert_eq!(moe_mmq_scratch(64, 1, 9, 2, 4).groups_offset, 768);
    let no_mmq = plan_node(&ctx, batch, SM90, Paths::parse("-mmq").unwrap()).unwrap();
    assert_eq!(no_mmq.kernel, Kernel::MulMatId(MoePath::Mmvq));
    let sm75 = Capability { arch: 75, cublas: true };
    let old = plan_node(&ctx, batch, sm75, Paths::all()).unwrap();
    assert_eq!(old.kernel, Kernel::MulMatId(MoePath::Mmvq));
    let f16_experts = ctx.new_tensor(F16, &[64, 16, 4]).unwrap();
    let mmf = ctx.mul_mat_id(f16_experts, b, ids).unwrap();
    assert_eq!(plan(&ctx, mmf), Kernel::MulMatId(MoePath::Generic));
    assert_eq!(plan(&ctx, biased), Kernel::AddId);
    assert_eq!(plan(&ctx, sorted), Kernel::Argsort);
    assert_eq!(plan(&ctx, act), Kernel::SwiGluOai);
    assert_eq!(plan(&ctx, clamped), Kernel::Unary);
    let odd = ctx.new_tensor(IQ2_XXS, &[256, 16, 4]).unwrap();
    let b2 = ctx.new_tensor(F32, &[256, 1, 3]).unwrap();
    let mm2 = ctx.mul_mat_id(odd, b2, ids).unwrap();
    assert!(plan_node(&ctx, mm2, SM90, Paths::all()).is_err(), "IQ2_XXS experts");
    // Sinks: decode attention with sinks takes the generic kernel; SOFT_MAX takes them.
    let q = ctx.new_tensor(F32, &[64, 1, 4]).unwrap();
    let k = ctx.new_tensor(F16, &[64, 2048, 2]).unwrap();
    let v = ctx.new_tensor(F16, &[64, 2048, 2]).unwrap();
    let fa = ctx.flash_attn_ext(q, k, v, None, 0.125, 0.0, 0.0).unwrap();
    assert!(matches!(plan(&ctx, fa), Kernel::FlashAttn(AttnPath::MmaDec { .. })));
    let sinks = ctx.new_tensor(F32, &[4]).unwrap();
    ctx.add_sinks(fa, sinks).unwrap();
    assert_eq!(plan(&ctx, fa), Kernel::FlashAttn(AttnPath::Mma));
    let kq = ctx.new_tensor(F32, &[32, 1, 4]).unwrap();
    let sm = ctx.soft_max(kq, None, 1.0, 0.0).unwrap();
    ctx.add_sinks(sm, sinks).unwrap();
    assert_eq!(plan(&ctx, sm), Kernel::SoftMax);
}

/// The prompt attention's launch shape and head-size bound are the kernel's own constants.
#[test]
fn attention_tile_constants_match_the_kernel() {
    let define = |name: &str| kernel_define("fattn_tile_op", name);
    assert_eq!(define("FT_ROWS"), ATTN_TILE_ROWS);
    assert_eq!(define("FT_D"), ATTN_TILE_MAX_D);
    assert_eq!(32 * define("FT_WARPS"), ATTN_TILE_THREADS as usize);
}

/// The MMQ launch shape is the kernel's own constants.
#[test]
fn mmq_constants_match_the_kernel() {
    let define = |name: &str| kernel_define("mmq_q4_0", name);
    assert_eq!(define("MMQ_ROWS"), MMQ_ROWS);
    assert_eq!(define("MMQ_COLS"), MMQ_COLS);
    assert_eq!(define("MMQ_THREADS"), MMQ_THREADS as usize);
    assert_eq!(define("MMQ_KB"), MMQ_KB);
    // Four warps of 16 rows each, four 8-column tiles each.
    assert_eq!(MMQ_ROWS, 16 * MMQ_THREADS as usize / 32);
    assert_eq!(MMQ_COLS, 32);
}

/// Split K: small launches (few rows and columns) split into shares of whole passes until the
/// launch has about `MMQ_TARGET_BLOCKS` blocks, never more than `MMQ_MAX_SPLITS` nor more than
/// the passes; large ones stay whole. Every block of K lands in exactly one share.
#[test]
fn mmq_splits_k_for_small_launches() {
    // 8B-shaped products with 16 columns: K 4096 (128 blocks, 16 passes).
    let s = mmq_split(4096, 16, 128);
    assert_eq!((s.splits, s.kper), (8, 16), "64 row blocks x 8 shares = 512");
    assert_eq!(s.scratch, 8 * 4096 * 16 * 4);
    assert_eq!(mmq_split(14336, 16, 128).splits, 3, "224 row blocks");
    assert_eq!(mmq_split(1024, 16, 128).splits, 16, "at most MMQ_MAX_SPLITS");
    // A large batch of a large matrix: one share, no scratch.
    assert_eq!(mmq_split(14336, 128, 128), MmqSplit { splits: 1, kper: 128, scratch: 0 });
    // Short rows: at most one share per pass; a partial last pass.
    assert_eq!(mmq_split(64, 9, 10), MmqSplit { splits: 2, kper: 8, scratch: 2 * 64 * 9 * 4 });
    assert_eq!(mmq_split(64, 9, 8).splits, 1);
    for rows in [16, 64, 70, 1000, 4096, 20000] {
        for cols in [9, 32, 33, 128, 600] {
            for nblocks in [1, 7, 8, 9, 64, 100, 448] {
                let s = mmq_split(rows, cols, nblocks);
                assert!(s.splits >= 1 && s.splits <= MMQ_MAX_SPLITS, "{rows} {cols} {nblocks}");
                assert_eq!(s.kper % MMQ_KB, 0);
                assert!(s.splits * s.kper >= nblocks, "every block in a share");
                assert!((s.splits - 1) * s.kper < nblocks, "no empty share");
            }
        }
    }
}

/// The tensor-core prompt attention's launch shape and head-size bound are the kernel's own
/// constants; it takes F16 caches on sm_80+ with head sizes a multiple of 16, the tile kernel
/// the rest of the prompts.
#[test]
fn attention_mma_constants_and_choice() {
    let define = |name: &str| kernel_define("fattn_mma_op", name);
    assert_eq!(define("FM_ROWS"), ATTN_MMA_ROWS);
    assert_eq!(define("FM_D"), ATTN_MMA_MAX_D);
    assert_eq!(32 * define("FM_WARPS"), ATTN_MMA_THREADS as usize);
    assert_eq!(ATTN_MMA_ROWS, 16 * define("FM_WARPS"), "16 rows a warp");
    assert_eq!(32 * define("FMD_WARPS"), ATTN_MMA_DEC_THREADS as usize);
    let fa = |d: usize, kv: DType, cap: Capability, paths: Paths| {
        let mut ctx = Context::new();
        let q = ctx.new_tensor(F32, &[d, 40, 4]).unwrap();
        let k = ctx.new_tensor(kv, &[d, 256, 2]).unwrap();
        let v = ctx.new_tensor(kv, &[d, 256, 2]).unwrap();
        let fa = ctx.flash_attn_ext(q, k, v, None, 0.125, 0.0, 0.0).unwrap();
        plan_node(&ctx, fa, cap, paths).unwrap().kernel
    };
    let all = Paths::all();
    assert_eq!(fa(128, F16, SM90, all), Kernel::FlashAttn(AttnPath::Mma));
    assert_eq!(fa(80, F16, SM90, all), Kernel::FlashAttn(AttnPath::Mma));
    assert_eq!(fa(72, F16, SM90, all), Kernel::FlashAttn(AttnPath::Tile), "not a multiple of 16");
    assert_eq!(fa(64, Q8_0, SM90, all), Kernel::FlashAttn(AttnPath::Tile), "quantized cache");
    let sm75 = Capability { arch: 75, cublas: true };
    assert_eq!(fa(64, F16, sm75, all), Kernel::FlashAttn(AttnPath::Tile));
    let no_mma = Paths::parse("-fattn-mma").unwrap();
    assert_eq!(fa(64, F16, SM90, no_mma), Kernel::FlashAttn(AttnPath::Tile));
    assert_eq!(fa(256, F16, SM90, all), Kernel::FlashAttn(AttnPath::Generic), "Gemma's 256");
}

/// MMVQ's warps per row: one unrolled round (32 blocks) a warp at most, powers of two up to a
/// block's eight: 1B Llama's 2048-wide rows on two warps, its 8192-wide down projection on
/// eight, 8B's 4096-wide rows on four, 14336-wide ones on eight (capped).
#[test]
fn mmvq_rows_are_split_over_warps_by_length() {
    let table = [(8, 1), (32, 1), (63, 1), (64, 2), (90, 2), (128, 4), (256, 8), (448, 8)];
    for (nblocks, want) in table {
        assert_eq!(super::mmvq_warps_per_row(nblocks), want, "{nblocks} blocks");
    }
}
