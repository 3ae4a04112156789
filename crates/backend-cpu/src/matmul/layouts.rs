//! The byte layouts the kernels (`arch/`) and their drivers (`interleaved.rs`,
//! `kquant_tiled.rs`) share, kept below both so a kernel never imports from the module that
//! calls it: interleaved repacked weights (eight rows per group, [`Shape`]) and the tiled
//! K-quant products' unpacked weight rows and activation bands.

use tessera_tensor::quant::ints::BlockInts;

/// Rows per interleaved group.
pub(in crate::matmul) const GROUP: usize = 8;
/// Bytes of one Q4_0 (and IQ4_NL) block.
pub(in crate::matmul) const QK_BYTES: usize = 18;
/// Bytes of one MXFP4 block.
pub(in crate::matmul) const MXFP4_BYTES: usize = 17;
/// Most activation rows one kernel call takes.
pub(in crate::matmul) const MAX_ROWS: usize = 4;

/// How a type's blocks are interleaved: its `head` scale fields of `field` bytes each (at byte
/// `at` of the file's block) first, each as the eight rows' values in row order, then the rest
/// of each row's block, in order, as 4-byte words, word `w` of row `r` at
/// `8·field·head + 32·w + 4·r`.
#[derive(Clone, Copy)]
pub(in crate::matmul) struct Shape {
    /// Bytes per block.
    pub(in crate::matmul) bytes: usize,
    /// Values per block.
    pub(in crate::matmul) values: usize,
    /// The scale fields.
    pub(in crate::matmul) head: usize,
    /// Bytes per scale field (2: f16; 1: MXFP4's E8M0 exponent).
    pub(in crate::matmul) field: usize,
    /// Where they are in the file's block (Q2_K keeps `d` and `dmin` at its end).
    pub(in crate::matmul) at: usize,
}

impl Shape {
    /// Q4_0 and IQ4_NL: one f16 scale, 16 bytes of nibbles.
    pub(in crate::matmul) const Q4_0: Shape =
        Shape { bytes: QK_BYTES, values: 32, head: 1, field: 2, at: 0 };
    /// MXFP4: one E8M0 exponent, 16 bytes of nibbles.
    pub(in crate::matmul) const MXFP4: Shape =
        Shape { bytes: MXFP4_BYTES, values: 32, head: 1, field: 1, at: 0 };
    /// Q4_K: `d` and `dmin` first.
    pub(in crate::matmul) const Q4_K: Shape =
        Shape { bytes: 144, values: 256, head: 2, field: 2, at: 0 };
    /// Q2_K: `d` and `dmin` at the end of the file's block.
    pub(in crate::matmul) const Q2_K: Shape =
        Shape { bytes: 84, values: 256, head: 2, field: 2, at: 80 };

    /// Bytes of the scale fields of one row's block.
    pub(in crate::matmul) fn head_bytes(self) -> usize {
        self.head * self.field
    }

    /// Bytes of one row's block.
    #[cfg(test)]
    pub(in crate::matmul) fn block_bytes(self) -> usize {
        self.bytes
    }

    /// Values of one row's block.
    #[cfg(test)]
    pub(in crate::matmul) fn block_values(self) -> usize {
        self.values
    }
}

/// Values per K-quant block.
pub(in crate::matmul) const QK: usize = 256;
/// Activation rows per band (lanes of a 512-bit register of i32).
pub(in crate::matmul) const BAND: usize = 16;
/// Weight rows the kernel takes at once.
pub(in crate::matmul) const ROWS: usize = 4;
/// How a K-quant type splits a block: scales per block (8 of 32 values or 16 of 16) and
/// whether it has mins.
#[derive(Clone, Copy)]
pub(in crate::matmul) struct Layout {
    /// Sub-blocks with a scale of their own.
    pub(in crate::matmul) nsub: usize,
    /// Whether the block has mins (`s2`), else a bias correction folded into `s1`.
    pub(in crate::matmul) mins: bool,
    /// IQ4_XS: codes are signed values + 128 (beyond `maddubs`' unsigned range once paired),
    /// so the AVX2 kernel multiplies the signed values by the sign trick and needs no bias
    /// correction (the same integers).
    pub(in crate::matmul) signed: bool,
}

/// A weight row in integer form, block after block.
#[derive(Default)]
pub(in crate::matmul) struct Unpacked {
    /// Unsigned codes, 256 per block, in element order.
    pub(in crate::matmul) codes: Vec<u8>,
    /// `nsub` scales per block.
    pub(in crate::matmul) scales: Vec<i32>,
    /// 8 per block: the correction weights of the 16-value sub-blocks in pairs (two i16 in
    /// one i32): `min` for types with mins, `−bias·scale` otherwise.
    pub(in crate::matmul) corr: Vec<i32>,
    /// `d` per block.
    pub(in crate::matmul) d: Vec<f32>,
    /// `dmin` per block (0 without mins).
    pub(in crate::matmul) dmin: Vec<f32>,
    /// The grid i-quants' integer form of the block being unpacked (kept between blocks:
    /// one 580-byte initialisation per row set, not per block).
    pub(in crate::matmul) ints: BlockInts,
}

/// Sixteen activation rows (a band) repacked for the kernel, block after block.
#[derive(Default)]
pub(in crate::matmul) struct Band {
    /// 64 groups of 64 bytes per block: group `g` holds bytes `4g..4g+4` of each row.
    pub(in crate::matmul) q: Vec<u8>,
    /// 8 pairs of block sums per block, 16 rows each (two i16 in one i32).
    pub(in crate::matmul) bsums: Vec<i32>,
    /// The rows' `d` per block, 16 each.
    pub(in crate::matmul) d: Vec<f32>,
}

/// A band as the kernels read it: a [`Band`]'s vectors, or a region of a work buffer that
/// holds bands repacked once for every thread.
#[derive(Clone, Copy)]
pub(in crate::matmul) struct BandRef<'a> {
    /// As [`Band::q`].
    pub(in crate::matmul) q: &'a [u8],
    /// As [`Band::bsums`].
    pub(in crate::matmul) bsums: &'a [i32],
    /// As [`Band::d`].
    pub(in crate::matmul) d: &'a [f32],
}

impl Band {
    /// The band as the kernels read it.
    pub(in crate::matmul) fn as_ref(&self) -> BandRef<'_> {
        BandRef { q: &self.q, bsums: &self.bsums, d: &self.d }
    }
}

/// `get_scale_min_k4`: scale and min of 32-value sub-block `j` of a Q4_K/Q5_K block.
#[inline]
pub(in crate::matmul) fn scale_min_k4(j: usize, q: &[u8; 12]) -> (i32, i32) {
    let (s, m) = if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    };
    (i32::from(s), i32::from(m))
}
