//! Reading and writing tensors, views included, in the bytes of their storage: the reference
//! evaluator's memory, and how a backend's output is read back for comparison.
//!
//! Values travel as `f64` in logical order (`i0` fastest, then `i1`, `i2`, `i3`), whatever the
//! strides; quantized rows are dequantized with tessera-tensor's reference dequantizers and
//! written with its reference quantizers.

use std::collections::HashMap;
use tessera_tensor::graph::{Context, TensorDesc, TensorId};
use tessera_tensor::quant::{bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16};
use tessera_tensor::{dequantize_row, quantize_row, DType};

/// The tensor whose storage `id` uses, and the byte offset of `id`'s first element in it.
pub fn storage_of(ctx: &Context, id: TensorId) -> (TensorId, usize) {
    let d = ctx.get(id);
    match d.view_src {
        Some(root) => (root, d.view_offs),
        None => (id, 0),
    }
}

/// Calls `f(row_offset, row_index)` for every row of `d` in logical order; `row_offset` is the
/// byte offset of the row's first element relative to the tensor's first byte.
fn for_each_row(d: &TensorDesc, mut f: impl FnMut(usize, usize)) {
    let mut r = 0;
    for i3 in 0..d.ne[3] {
        for i2 in 0..d.ne[2] {
            for i1 in 0..d.ne[1] {
                f(i1 * d.nb[1] + i2 * d.nb[2] + i3 * d.nb[3], r);
                r += 1;
            }
        }
    }
}

fn le<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    b[at..at + N].try_into().expect("N bytes")
}

/// The values of tensor `d`, whose first byte is `bytes[base]`, in logical order.
///
/// # Panics
/// If the tensor reaches past `bytes` or its type has no dequantizer.
pub fn read_values(d: &TensorDesc, bytes: &[u8], base: usize) -> Vec<f64> {
    let ne0 = d.ne[0];
    let mut out = vec![0f64; d.n_elements()];
    let dt = d.dtype;
    let mut row = vec![0f32; ne0];
    for_each_row(d, |off, r| {
        let dst = &mut out[r * ne0..(r + 1) * ne0];
        let at = base + off;
        if dt.is_quantized() {
            let (bs, ts) = (dt.block_size(), dt.type_size());
            for ib in 0..ne0 / bs {
                let p = at + ib * d.nb[0];
                dequantize_row(dt, &bytes[p..p + ts], &mut row[ib * bs..(ib + 1) * bs])
                    .expect("dequantizable type");
            }
            for (o, &v) in dst.iter_mut().zip(&row) {
                *o = f64::from(v);
            }
            return;
        }
        for (i0, o) in dst.iter_mut().enumerate() {
            let p = at + i0 * d.nb[0];
            *o = match dt {
                DType::F32 => f64::from(f32::from_le_bytes(le(bytes, p))),
                DType::F16 => f64::from(f16_to_f32(u16::from_le_bytes(le(bytes, p)))),
                DType::BF16 => f64::from(bf16_to_f32(u16::from_le_bytes(le(bytes, p)))),
                DType::F64 => f64::from_le_bytes(le(bytes, p)),
                DType::I8 => f64::from(bytes[p] as i8),
                DType::I16 => f64::from(i16::from_le_bytes(le(bytes, p))),
                DType::I32 => f64::from(i32::from_le_bytes(le(bytes, p))),
                DType::I64 => i64::from_le_bytes(le(bytes, p)) as f64,
                other => panic!("cannot read {other}"),
            };
        }
    });
    out
}

/// Stores `values` (logical order) into tensor `d`, whose first byte is `bytes[base]`: floats
/// are rounded to the type (through f32, as a backend computing in f32 stores them), integers
/// rounded to nearest, quantized rows quantized with the reference quantizer.
///
/// # Panics
/// If the tensor reaches past `bytes`, its type cannot be written, or a quantized row is not
/// stored contiguously.
pub fn write_values(d: &TensorDesc, bytes: &mut [u8], base: usize, values: &[f64]) {
    assert_eq!(values.len(), d.n_elements(), "value count for {}", d.shape_str());
    let ne0 = d.ne[0];
    let dt = d.dtype;
    let mut qrow = vec![0u8; d.row_size()];
    let mut frow = vec![0f32; ne0];
    for_each_row(d, |off, r| {
        let src = &values[r * ne0..(r + 1) * ne0];
        let at = base + off;
        if dt.is_quantized() {
            assert_eq!(d.nb[0], dt.type_size(), "quantized rows must be contiguous");
            for (f, &v) in frow.iter_mut().zip(src) {
                *f = v as f32;
            }
            quantize_row(dt, &frow, &mut qrow).expect("quantizable type");
            bytes[at..at + qrow.len()].copy_from_slice(&qrow);
            return;
        }
        for (i0, &v) in src.iter().enumerate() {
            let p = at + i0 * d.nb[0];
            match dt {
                DType::F32 => bytes[p..p + 4].copy_from_slice(&(v as f32).to_le_bytes()),
                DType::F16 => bytes[p..p + 2].copy_from_slice(&f32_to_f16(v as f32).to_le_bytes()),
                DType::BF16 => {
                    bytes[p..p + 2].copy_from_slice(&f32_to_bf16(v as f32).to_le_bytes())
                }
                DType::F64 => bytes[p..p + 8].copy_from_slice(&v.to_le_bytes()),
                DType::I32 => bytes[p..p + 4].copy_from_slice(&(v.round() as i32).to_le_bytes()),
                DType::I64 => bytes[p..p + 8].copy_from_slice(&(v.round() as i64).to_le_bytes()),
                other => panic!("cannot write {other}"),
            }
        }
    });
}

/// Byte images of storage roots (tensors that are not views), keyed by tensor id: the reference
/// evaluator's memory.
#[derive(Debug, Clone, Default)]
pub struct Image {
    roots: HashMap<TensorId, Vec<u8>>,
}

impl Image {
    /// No storage yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the bytes of root `id`.
    pub fn insert(&mut self, id: TensorId, bytes: Vec<u8>) {
        self.roots.insert(id, bytes);
    }

    /// The bytes of root `id`.
    pub fn root(&self, id: TensorId) -> Option<&[u8]> {
        self.roots.get(&id).map(Vec::as_slice)
    }

    /// The values of `id` (a root or a view of one), in logical order.
    ///
    /// # Panics
    /// If `id`'s storage is not in the image.
    pub fn read(&self, ctx: &Context, id: TensorId) -> Vec<f64> {
        let (root, base) = storage_of(ctx, id);
        let bytes =
            self.roots.get(&root).unwrap_or_else(|| panic!("no storage for #{}", root.index()));
        read_values(ctx.get(id), bytes, base)
    }

    /// Stores `values` into `id` (a root, created zeroed if new, or a view of an existing root).
    pub fn write(&mut self, ctx: &Context, id: TensorId, values: &[f64]) {
        let (root, base) = storage_of(ctx, id);
        let size = ctx.get(root).n_bytes();
        let bytes = self.roots.entry(root).or_insert_with(|| vec![0; size]);
        write_values(ctx.get(id), bytes, base, values);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_read_and_write_through_strides() {
        let mut ctx = Context::new();
        let a = ctx.new_tensor(DType::F32, &[3, 2]).unwrap();
        let t = ctx.transpose(a).unwrap();
        let mut img = Image::new();
        img.write(&ctx, a, &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        assert_eq!(img.read(&ctx, t), vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
        img.write(&ctx, t, &[10.0, 13.0, 11.0, 14.0, 12.0, 15.0]);
        assert_eq!(img.read(&ctx, a), vec![10.0, 11.0, 12.0, 13.0, 14.0, 15.0]);
    }

    #[test]
    fn quantized_rows_round_trip_through_the_reference_quantizer() {
        let mut ctx = Context::new();
        let a = ctx.new_tensor(DType::Q8_0, &[64, 2]).unwrap();
        let v: Vec<f64> = (0..128).map(|i| f64::from(i - 64) / 64.0).collect();
        let mut img = Image::new();
        img.write(&ctx, a, &v);
        let back = img.read(&ctx, a);
        let err = v.iter().zip(&back).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max);
        assert!(err < 1.0 / 127.0, "max error {err}");
    }
}
