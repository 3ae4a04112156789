//! A parsed GGUF file over its bytes: a memory mapping, or any byte buffer.

use crate::read::{parse_header, Header};
use crate::{GgufError, Metadata, Result, TensorInfo};
use memmap2::{Mmap, MmapMut};
use std::io::Read;
use std::path::Path;

/// A GGUF file: its header, parsed and checked, over the file's bytes `D`. Tensor data is handed
/// out as slices of those bytes, never copied.
#[derive(Debug)]
pub struct Gguf<D: AsRef<[u8]>> {
    data: D,
    header: Header,
}

/// A GGUF file on disk, memory-mapped.
pub type GgufFile = Gguf<Mmap>;

impl Gguf<Mmap> {
    /// Opens and memory-maps `path` and checks its header. Errors name the file.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile> {
        let path = path.as_ref();
        let io = |source| GgufError::Io { path: path.to_path_buf(), source };
        let file = std::fs::File::open(path).map_err(io)?;
        // SAFETY: the mapping is read-only and private to this value. Like every mmap-based
        // loader (ggml's included) we rely on the file not being truncated or rewritten by another
        // process while it is mapped; all bounds are checked against the mapping's length.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        Gguf::from_bytes(map).map_err(|e| e.in_file(path))
    }

    /// Reads `path` whole into memory (llama.cpp's `--no-mmap`: nothing is read from the file
    /// afterwards, so its pages do not come and go with the page cache) and checks its header.
    /// The bytes live in an anonymous mapping, so [`Gguf::lock`] works on them as on a file's.
    pub fn read(path: impl AsRef<Path>) -> Result<GgufFile> {
        let path = path.as_ref();
        let io = |source| GgufError::Io { path: path.to_path_buf(), source };
        let mut file = std::fs::File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        let len = usize::try_from(len).map_err(|_| {
            io(std::io::Error::new(std::io::ErrorKind::InvalidData, "larger than memory"))
        })?;
        let mut bytes = MmapMut::map_anon(len.max(1)).map_err(io)?;
        file.read_exact(&mut bytes[..len]).map_err(io)?;
        let map = bytes.make_read_only().map_err(io)?;
        Gguf::from_bytes(map).map_err(|e| e.in_file(path))
    }

    /// Locks the file's bytes in RAM (llama.cpp's `--mlock`: `mlock(2)`), so the weights are
    /// never paged out; fails where the limit on locked memory is too low (`ulimit -l`).
    pub fn lock(&self) -> std::io::Result<()> {
        self.data.lock()
    }
}

impl<D: AsRef<[u8]>> Gguf<D> {
    /// Parses and checks the GGUF bytes `data` (a whole file).
    pub fn from_bytes(data: D) -> Result<Self> {
        let header = parse_header(data.as_ref())?;
        Ok(Gguf { data, header })
    }

    /// The GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.header.version
    }

    /// The data alignment.
    pub fn alignment(&self) -> u64 {
        self.header.alignment
    }

    /// Absolute offset of the data section.
    pub fn data_offset(&self) -> u64 {
        self.header.data_offset
    }

    /// The metadata.
    pub fn metadata(&self) -> &Metadata {
        &self.header.metadata
    }

    /// The metadata, to change before the file is read as a model (llama.cpp's
    /// `--override-kv`); the tensor table and data are not affected.
    pub fn metadata_mut(&mut self) -> &mut Metadata {
        &mut self.header.metadata
    }

    /// The tensor table, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.header.tensors
    }

    /// The tensor called `name`, or [`GgufError::TensorMissing`].
    pub fn tensor(&self, name: &str) -> Result<&TensorInfo> {
        self.header
            .tensors
            .iter()
            .find(|t| t.name == name)
            .ok_or_else(|| GgufError::TensorMissing { name: name.to_string() })
    }

    /// The bytes of a tensor of this file (zero-copy).
    ///
    /// # Panics
    /// If `info` does not come from this file's table (its range was checked at parse time).
    pub fn tensor_data(&self, info: &TensorInfo) -> &[u8] {
        let start = info.data_offset as usize;
        &self.data.as_ref()[start..start + info.n_bytes as usize]
    }

    /// The whole file's bytes.
    pub fn bytes(&self) -> &[u8] {
        self.data.as_ref()
    }

    /// The parsed header.
    pub fn header(&self) -> &Header {
        &self.header
    }
}
