//! Activation conversion: f32 rows to the dot types (ggml's `from_float` of F32, F16, BF16,
//! Q8_0, Q8_1 and Q8_K).
//!
//! The scalar level uses ggml's reference quantizers (`quantize_row_q8_0_ref`: `roundf`,
//! multiplier `1/d`), as a ggml build without AVX does. The AVX2 level (also used at AVX-512:
//! the result is the same) follows ggml's x86 `quantize_row_q8_0/q8_1`: `d = amax/127` stored
//! as f16, multiplier `127/amax`, round-half-even (`_mm256_round_ps`), and for Q8_1
//! `s = d·Σq` with the f32 `d`. Q8_K has no SIMD quantizer in ggml's x86 build, so the AVX2
//! version here reproduces the reference bit for bit (`iscale = -127/max` with `max` the first
//! element of largest magnitude, round-half-even, `d = 1/iscale`).

#[cfg(target_arch = "x86_64")]
use super::arch::x86::convert as x86;
use super::FromF32;
use crate::SimdLevel;
use half::f16;
use tessera_tensor::{quant, DType};

/// The f32 → `vdt` conversion at level `simd` (which the CPU must support).
pub(super) fn from_f32(vdt: DType, simd: SimdLevel) -> FromF32 {
    #[cfg(target_arch = "x86_64")]
    if simd >= SimdLevel::Avx2 {
        match vdt {
            DType::F16 => return x86::f16_avx2,
            DType::Q8_0 => return x86::q8_0_avx2,
            DType::Q8_1 => return x86::q8_1_avx2,
            DType::Q8_K => return x86::q8_k_avx2,
            _ => {}
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = simd;
    match vdt {
        DType::F32 => copy_f32,
        DType::F16 => f16_scalar,
        DType::BF16 => bf16_scalar,
        DType::Q8_0 => |x, y, n| {
            // SAFETY: forwarded FromF32 contract.
            unsafe { reference(DType::Q8_0, x, y, n) }
        },
        DType::Q8_1 => |x, y, n| {
            // SAFETY: forwarded FromF32 contract.
            unsafe { reference(DType::Q8_1, x, y, n) }
        },
        DType::Q8_K => |x, y, n| {
            // SAFETY: forwarded FromF32 contract.
            unsafe { reference(DType::Q8_K, x, y, n) }
        },
        other => unreachable!("{other} is not a dot type"),
    }
}

/// Views the `FromF32` arguments as slices: `n` floats and the row of `n` values of `vdt`.
///
/// # Safety
/// The [`FromF32`] contract.
unsafe fn slices<'a>(vdt: DType, x: *const f32, y: *mut u8, n: usize) -> (&'a [f32], &'a mut [u8]) {
    let bytes = vdt.type_size() * (n / vdt.block_size());
    // SAFETY: `x` holds n floats and `y` has room for the converted row; f32 slices need
    // 4-byte alignment, which every f32 source here has (tensor rows, scratch vectors).
    unsafe { (std::slice::from_raw_parts(x, n), std::slice::from_raw_parts_mut(y, bytes)) }
}

/// ggml's reference quantizer of `vdt` (through tessera-tensor, bit-exact with ggml).
///
/// # Safety
/// The [`FromF32`] contract.
unsafe fn reference(vdt: DType, x: *const f32, y: *mut u8, n: usize) {
    // SAFETY: forwarded.
    let (x, y) = unsafe { slices(vdt, x, y, n) };
    quant::quantize_row(vdt, x, y).expect("whole blocks and exact sizes");
}

/// F32 "conversion": a copy.
///
/// # Safety
/// The [`FromF32`] contract.
unsafe fn copy_f32(x: *const f32, y: *mut u8, n: usize) {
    // SAFETY: `x` holds n floats, `y` room for n floats; a work buffer never overlaps src1.
    unsafe { std::ptr::copy_nonoverlapping(x.cast::<u8>(), y, 4 * n) };
}

/// f32 → f16, round to nearest even (as F16C).
///
/// # Safety
/// The [`FromF32`] contract.
unsafe fn f16_scalar(x: *const f32, y: *mut u8, n: usize) {
    for i in 0..n {
        // SAFETY: i < n, within both rows.
        unsafe {
            y.cast::<u16>()
                .add(i)
                .write_unaligned(f16::from_f32(x.add(i).read_unaligned()).to_bits())
        };
    }
}

/// f32 → bf16 as `ggml_compute_fp32_to_bf16` (round to nearest even, NaNs kept quiet).
///
/// # Safety
/// The [`FromF32`] contract.
unsafe fn bf16_scalar(x: *const f32, y: *mut u8, n: usize) {
    for i in 0..n {
        // SAFETY: i < n, within both rows.
        unsafe {
            y.cast::<u16>().add(i).write_unaligned(quant::f32_to_bf16(x.add(i).read_unaligned()))
        };
    }
}
