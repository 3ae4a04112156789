//! One entry of the tensor table.

use tessera_tensor::DType;

/// A tensor's entry in the table: name, shape, type and where its data lies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// Name (shorter than 64 bytes).
    pub name: String,
    /// Number of dimensions as stored (0..=4); dimensions past it are 1.
    pub n_dims: u32,
    /// Elements per dimension, ggml order (`ne[0]` is the row length).
    pub ne: [u64; 4],
    /// Element type.
    pub dtype: DType,
    /// Offset of the data relative to the data section, as stored.
    pub offset: u64,
    /// Size of the data in bytes.
    pub n_bytes: u64,
    /// Absolute offset of the data in the file.
    pub data_offset: u64,
}

impl TensorInfo {
    /// The stored dimensions (`ne[..n_dims]`).
    pub fn shape(&self) -> &[u64] {
        &self.ne[..self.n_dims as usize]
    }

    /// Total number of elements.
    pub fn n_elements(&self) -> u64 {
        self.ne.iter().product()
    }

    /// ggml's byte strides `nb`: `nb[0]` is the type size, `nb[1]` the row size.
    pub fn strides(&self) -> [u64; 4] {
        let nb0 = self.dtype.type_size() as u64;
        let nb1 = nb0 * (self.ne[0] / self.dtype.block_size() as u64);
        let nb2 = nb1 * self.ne[1];
        [nb0, nb1, nb2, nb2 * self.ne[2]]
    }
}
