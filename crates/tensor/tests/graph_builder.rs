//! The graph builder: shapes and types as ggml computes them, typed errors for bad operands, and
//! the execution order and use counts of `ggml_build_forward_expand`.

use tessera_tensor::graph::{
    Context, Flags, GluOp, Graph, Op, RopeMode, RopeParams, TensorId, UnaryOp,
};
use tessera_tensor::{DType, TensorError};

#[test]
fn seed_001_matmul_shapes() {
    // 4x2 · 3x2: A has 4 rows of 2, B has 3 rows of 2; ggml's result is 4 x 3 (ne = [4, 3]).
    let mut c = Context::new();
    let a = c.new_tensor(DType::F32, &[2, 4]).unwrap();
    let b = c.new_tensor(DType::F32, &[2, 3]).unwrap();
    let r = c.mul_mat(a, b).unwrap();
    assert_eq!(c.get(r).ne, [4, 3, 1, 1]);
    assert_eq!(c.get(r).dtype, DType::F32);
    let g = Graph::build(&c, &[r]);
    assert_eq!(g.nodes(), &[r]);
    assert_eq!(g.leafs(), &[a, b]);
}

#[test]
fn mul_mat_broadcasts_for_gqa_and_rejects_mismatch() {
    let mut c = Context::new();
    let k = c.new_tensor(DType::F16, &[64, 10, 2]).unwrap();
    let q = c.new_tensor(DType::F32, &[64, 5, 8]).unwrap();
    let kq = c.mul_mat(k, q).unwrap();
    assert_eq!(c.get(kq).ne, [10, 5, 8, 1]);
    let bad = c.new_tensor(DType::F32, &[64, 5, 3]).unwrap();
    assert!(matches!(c.mul_mat(k, bad), Err(TensorError::Shape { op: "MUL_MAT", .. })));
    let w = c.new_tensor(DType::Q4_K, &[256, 4]).unwrap();
    let x = c.new_tensor(DType::F32, &[128, 1]).unwrap();
    let e = c.mul_mat(w, x).unwrap_err().to_string();
    assert!(e.contains("MUL_MAT") && e.contains("256") && e.contains("128"), "{e}");
    let t = c.transpose(w).unwrap();
    assert!(c.mul_mat(t, x).is_err());
}

#[test]
fn views_share_storage_and_check_bounds() {
    let mut c = Context::new();
    let a = c.new_tensor(DType::F32, &[8, 6]).unwrap();
    let v = c.view(a, &[4, 6], &[32], 16).unwrap();
    let t = c.get(v);
    assert_eq!((t.view_src, t.view_offs, t.nb), (Some(a), 16, [4, 32, 192, 192]));
    assert!(!t.is_contiguous());
    let vv = c.view(v, &[2, 3], &[64], 4).unwrap();
    assert_eq!((c.get(vv).view_src, c.get(vv).view_offs), (Some(a), 20));
    assert!(c.view(a, &[8, 7], &[32], 0).is_err());
    let r = c.reshape(a, &[4, 12]).unwrap();
    assert!(c.get(r).is_contiguous());
    assert!(c.reshape(v, &[24]).is_err());
    assert!(c.reshape(a, &[5, 10]).is_err());
    let p = c.permute(a, [1, 0, 2, 3]).unwrap();
    assert_eq!(c.get(p).ne, [6, 8, 1, 1]);
    assert!(c.get(p).is_transposed());
    assert!(c.permute(a, [0, 0, 1, 2]).is_err());
    let cont = c.cont(p, None).unwrap();
    assert!(c.get(cont).is_contiguous() && c.get(cont).view_src.is_none());
}

#[test]
fn attention_block_shapes() {
    let mut c = Context::new();
    let (hd, nh, nkv, nt, ctx_len) = (64, 8, 2, 5, 32);
    let q = c.new_tensor(DType::F32, &[hd, nh, nt]).unwrap();
    let pos = c.new_tensor(DType::I32, &[nt]).unwrap();
    let qr = c.rope(q, pos, None, RopeParams::new(hd, RopeMode::Neox, 10000.0)).unwrap();
    assert_eq!(c.get(qr).ne, [hd, nh, nt, 1]);
    let qp = c.permute(qr, [0, 2, 1, 3]).unwrap();
    let k = c.new_tensor(DType::F16, &[hd, ctx_len, nkv]).unwrap();
    let v = c.new_tensor(DType::F16, &[hd, ctx_len, nkv]).unwrap();
    let mask = c.new_tensor(DType::F16, &[ctx_len, nt]).unwrap();
    // qp is a permuted view [hd, nt, nh]: heads 8 % 2 == 0.
    let fa = c.flash_attn_ext(qp, k, v, Some(mask), 0.125, 0.0, 0.0).unwrap();
    assert_eq!(c.get(fa).ne, [hd, nh, nt, 1]);
    let big_q = c.new_tensor(DType::F32, &[hd, nt, 3]).unwrap();
    assert!(
        c.flash_attn_ext(big_q, k, v, Some(mask), 0.125, 0.0, 0.0).is_err(),
        "3 heads over 2 kv heads"
    );
    let kq = c.mul_mat(k, qp).unwrap();
    let sm = c.soft_max(kq, Some(mask), 0.125, 0.0).unwrap();
    assert_eq!(c.get(sm).ne, [ctx_len, nt, nh, 1]);
    let small_mask = c.new_tensor(DType::F16, &[ctx_len, nt - 1]).unwrap();
    assert!(c.soft_max(kq, Some(small_mask), 1.0, 0.0).is_err());
    let bad_pos = c.new_tensor(DType::F32, &[nt]).unwrap();
    assert!(matches!(
        c.rope(q, bad_pos, None, RopeParams::new(hd, RopeMode::Norm, 1e4)),
        Err(TensorError::OpType { .. })
    ));
}

#[test]
fn ffn_and_misc_shapes() {
    let mut c = Context::new();
    let x = c.new_tensor(DType::F32, &[16, 3]).unwrap();
    let g = c.glu(x, GluOp::SwiGlu, false).unwrap();
    assert_eq!(c.get(g).ne, [8, 3, 1, 1]);
    let y = c.new_tensor(DType::F32, &[16, 3]).unwrap();
    let gs = c.glu_split(x, y, GluOp::GeGlu).unwrap();
    assert_eq!(c.get(gs).ne, [16, 3, 1, 1]);
    let s = c.unary(gs, UnaryOp::Gelu).unwrap();
    let w = c.new_tensor(DType::F32, &[16]).unwrap();
    let m = c.mul(s, w).unwrap();
    let bad = c.new_tensor(DType::F32, &[5]).unwrap();
    assert!(c.add(m, bad).is_err());
    let cat = c.concat(x, y, 1).unwrap();
    assert_eq!(c.get(cat).ne, [16, 6, 1, 1]);
    let sr = c.sum_rows(cat).unwrap();
    assert_eq!(c.get(sr).ne, [1, 6, 1, 1]);
    let am = c.argmax(cat).unwrap();
    assert_eq!((c.get(am).ne, c.get(am).dtype), ([6, 1, 1, 1], DType::I32));
    let emb = c.new_tensor(DType::Q8_0, &[64, 100]).unwrap();
    let ids = c.new_tensor(DType::I32, &[7]).unwrap();
    let rows = c.get_rows(emb, ids).unwrap();
    assert_eq!((c.get(rows).ne, c.get(rows).dtype), ([64, 7, 1, 1], DType::F32));
    let cache = c.new_tensor(DType::F16, &[16, 10]).unwrap();
    let idx = c.new_tensor(DType::I64, &[3]).unwrap();
    let src = c.new_tensor(DType::F32, &[16, 3]).unwrap();
    let sr = c.set_rows(cache, src, idx).unwrap();
    assert_eq!(c.get(sr).view_src, Some(cache));
    let dst = c.new_tensor(DType::Q4_0, &[32, 3]).unwrap();
    assert!(c.cpy(x, dst).is_err(), "element counts differ");
    let x96 = c.new_tensor(DType::F32, &[96]).unwrap();
    let cp = c.cpy(x96, dst).unwrap();
    assert_eq!(c.get(cp).op, Op::Cpy);
    assert!(c.new_tensor(DType::Q4_0, &[33]).is_err());
}

#[test]
fn graph_order_dedup_and_use_counts() {
    let mut c = Context::new();
    let a = c.new_tensor(DType::F32, &[4]).unwrap();
    let w = c.new_tensor(DType::F32, &[4]).unwrap();
    c.set_flags(w, Flags::PARAM);
    let b = c.add(a, w).unwrap();
    let d = c.mul(b, b).unwrap();
    let e = c.add(d, a).unwrap();
    c.set_output(e);
    let unused = c.scale(a, 2.0, 0.0).unwrap();
    let g = Graph::build(&c, &[e, e]);
    // PARAM tensors count as nodes, as in ggml.
    assert_eq!(g.nodes(), &[w, b, d, e]);
    assert_eq!(g.leafs(), &[a]);
    assert_eq!((g.use_count(a), g.use_count(b), g.use_count(d), g.use_count(e)), (2, 2, 1, 0));
    assert!(!g.contains(unused));
    let dot = g.to_dot(&c);
    assert!(dot.starts_with("digraph") && dot.contains("MUL") && dot.contains("->"));
    // Every node comes after its sources.
    let pos = |id| g.nodes().iter().position(|&n| n == id);
    for &n in g.nodes() {
        for s in c.get(n).sources() {
            if let (Some(ps), Some(pn)) = (pos(s), pos(n)) {
                assert!(ps < pn);
            }
        }
    }
}

#[test]
fn deep_chains_do_not_overflow_the_stack() {
    let mut c = Context::new();
    let mut x = c.new_tensor(DType::F32, &[4]).unwrap();
    for _ in 0..100_000 {
        x = c.scale(x, 1.0, 0.0).unwrap();
    }
    let g = Graph::build(&c, &[x]);
    assert_eq!(g.nodes().len(), 100_000);
}

/// Q, K and V of one input, each read by its own chain: the plain order puts each product
/// before its reader; pinned, they follow one another. The same nodes either way, and a
/// pin the outputs do not need stays out.
#[test]
fn pinned_products_follow_one_another() {
    let mut ctx = Context::new();
    let x = ctx.new_tensor(DType::F32, &[32, 1]).unwrap();
    let w: Vec<TensorId> = (0..4).map(|_| ctx.new_tensor(DType::F32, &[32, 32]).unwrap()).collect();
    let p: Vec<TensorId> = w.iter().map(|&w| ctx.mul_mat(w, x).unwrap()).collect();
    let q = ctx.scale(p[0], 2.0, 0.0).unwrap();
    let k = ctx.scale(p[1], 3.0, 0.0).unwrap();
    let qk = ctx.add(q, k).unwrap();
    let out = ctx.add(qk, p[2]).unwrap();
    let position = |g: &Graph, id: TensorId| g.nodes().iter().position(|&n| n == id).unwrap();
    let plain = Graph::build_with_pins(&ctx, &[], &[out]);
    assert_eq!(position(&plain, p[1]), position(&plain, p[0]) + 2, "{:?}", plain.nodes());
    let pinned = Graph::build_with_pins(&ctx, &p, &[out]);
    let at: Vec<usize> = p[..3].iter().map(|&id| position(&pinned, id)).collect();
    assert_eq!(at, [at[0], at[0] + 1, at[0] + 2], "{:?}", pinned.nodes());
    assert!(!pinned.nodes().contains(&p[3]), "an unneeded pin computed");
    let mut a = plain.nodes().to_vec();
    let mut b = pinned.nodes().to_vec();
    a.sort_by_key(|t| t.index());
    b.sort_by_key(|t| t.index());
    assert_eq!(a, b);
}
