//! Tensor descriptors: metadata only (ggml's `ggml_tensor` without `data`). Storage is a
//! (buffer, offset) pair that an allocator assigns later.

use super::op::Op;
use crate::DType;

/// Maximum number of dimensions (`GGML_MAX_DIMS`).
pub const MAX_DIMS: usize = 4;
/// Maximum number of sources of one op.
pub const MAX_SRC: usize = 5;
/// Longest tensor name, in bytes (`GGML_MAX_NAME - 1`).
pub const MAX_NAME: usize = 63;

/// A tensor in a [`Context`](super::Context): a small typed index, not a pointer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(pub(crate) u32);

impl TensorId {
    /// The index in the context's arena.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Tensor flags (`GGML_TENSOR_FLAG_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Flags(u8);

impl Flags {
    /// A graph input: allocated first, set by the user before each compute.
    pub const INPUT: Flags = Flags(1);
    /// A graph output: never freed or overwritten by the allocator.
    pub const OUTPUT: Flags = Flags(2);
    /// A trainable parameter (weights).
    pub const PARAM: Flags = Flags(4);

    /// Whether every flag of `other` is set.
    pub fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }
    /// Both sets of flags.
    pub fn union(self, other: Flags) -> Flags {
        Flags(self.0 | other.0)
    }
}

/// One tensor's metadata: type, shape, byte strides, op, sources, view source, flags, name.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorDesc {
    /// Element type.
    pub dtype: DType,
    /// Elements per dimension; `ne[0]` is the row length.
    pub ne: [usize; MAX_DIMS],
    /// Byte strides; `nb[0]` is the type size (block size for quantized types).
    pub nb: [usize; MAX_DIMS],
    /// The op that computes this tensor ([`Op::None`] for leafs).
    pub op: Op,
    /// Sources, in ggml's order; unused slots are `None`.
    pub src: [Option<TensorId>; MAX_SRC],
    /// For views: the tensor whose storage this one shares (never itself a view).
    pub view_src: Option<TensorId>,
    /// For views: byte offset into `view_src`'s storage.
    pub view_offs: usize,
    /// Flags.
    pub flags: Flags,
    /// Name (at most 63 bytes).
    pub name: String,
}

/// Contiguous strides for `ne` of type `dtype` (`nb[1]` = row size).
pub fn contiguous_strides(dtype: DType, ne: &[usize; MAX_DIMS]) -> [usize; MAX_DIMS] {
    let nb0 = dtype.type_size();
    let nb1 = nb0 * (ne[0] / dtype.block_size());
    let nb2 = nb1 * ne[1];
    [nb0, nb1, nb2, nb2 * ne[2]]
}

impl TensorDesc {
    /// Total number of elements.
    pub fn n_elements(&self) -> usize {
        self.ne.iter().product()
    }

    /// Number of rows (`ne[1] * ne[2] * ne[3]`).
    pub fn n_rows(&self) -> usize {
        self.ne[1] * self.ne[2] * self.ne[3]
    }

    /// Bytes spanned by the tensor's data (`ggml_nbytes`): from its first byte to the end of
    /// its last element, following the strides.
    pub fn n_bytes(&self) -> usize {
        if self.ne.contains(&0) {
            return 0;
        }
        let blck = self.dtype.block_size();
        let first = if blck == 1 { self.dtype.type_size() } else { self.ne[0] * self.nb[0] / blck };
        let rest: usize = (1..MAX_DIMS).map(|i| (self.ne[i] - 1) * self.nb[i]).sum();
        first + if blck == 1 { (self.ne[0] - 1) * self.nb[0] } else { 0 } + rest
    }

    /// Row size in bytes for this type and `ne[0]`.
    pub fn row_size(&self) -> usize {
        self.dtype.type_size() * (self.ne[0] / self.dtype.block_size())
    }

    /// Whether elements are densely packed in order (`ggml_is_contiguous`); dimensions of size
    /// 1 may have any stride.
    pub fn is_contiguous(&self) -> bool {
        let blck = self.dtype.block_size();
        let mut next = self.dtype.type_size();
        if self.ne[0] != blck && self.nb[0] != next {
            return false;
        }
        next *= self.ne[0] / blck;
        for i in 1..MAX_DIMS {
            if self.ne[i] != 1 {
                if self.nb[i] != next {
                    return false;
                }
                next *= self.ne[i];
            }
        }
        true
    }

    /// Whether rows are contiguous (`nb[0]` is the type size), though rows may be strided.
    pub fn rows_contiguous(&self) -> bool {
        self.nb[0] == self.dtype.type_size()
    }

    /// Whether dims 0 and 1 are swapped in memory (`ggml_is_transposed`).
    pub fn is_transposed(&self) -> bool {
        self.nb[0] > self.nb[1]
    }

    /// Whether the tensor is a view of another's storage.
    pub fn is_view(&self) -> bool {
        self.view_src.is_some()
    }

    /// The sources that are set, in order.
    pub fn sources(&self) -> impl Iterator<Item = TensorId> + '_ {
        self.src.iter().flatten().copied()
    }

    /// Shape as `[ne0, ne1, ne2, ne3]` text, for errors.
    pub fn shape_str(&self) -> String {
        format!("{:?}", self.ne)
    }
}
