//! The writer: the same bytes as the `gguf` Python package's `GGUFWriter` for the same content.
//!
//! Layout: header (magic, version, u64 tensor count, u64 key/value count), key/value pairs,
//! tensor infos (offsets packed in order, each tensor padded to the alignment), zero padding to
//! the alignment, then each tensor's bytes followed by zero padding to the alignment.

use crate::read::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT, MAX_DIMS, MAX_NAME};
use crate::value::{Array, Value};
use crate::{Gguf, GgufError, Metadata, Result};
use std::borrow::Cow;
use std::io::Write;
use std::path::Path;
use tessera_tensor::DType;

struct PendingTensor<'a> {
    name: String,
    shape: Vec<u64>,
    dtype: DType,
    data: Cow<'a, [u8]>,
}

/// Builds a GGUF file: metadata and tensors in the order they are added. Tensor data may be
/// borrowed (e.g. from another file's mapping), so rewriting a model copies no weights in memory.
#[derive(Default)]
pub struct GgufWriter<'a> {
    version: Option<u32>,
    metadata: Metadata,
    tensors: Vec<PendingTensor<'a>>,
}

impl<'a> GgufWriter<'a> {
    /// An empty GGUF v3 file.
    pub fn new() -> Self {
        Self::default()
    }

    /// A writer holding everything in `file` (version, metadata, tensors borrowed from its
    /// bytes): writing it out reproduces the file.
    pub fn from_gguf<D: AsRef<[u8]>>(file: &'a Gguf<D>) -> Result<Self> {
        let mut w = GgufWriter {
            version: Some(file.version()),
            metadata: file.metadata().clone(),
            tensors: vec![],
        };
        for t in file.tensors() {
            w.add_tensor(&t.name, t.dtype, t.shape(), file.tensor_data(t))?;
        }
        Ok(w)
    }

    /// Sets the version written (2 or 3; default 3).
    pub fn set_version(&mut self, version: u32) -> Result<()> {
        if !(2..=3).contains(&version) {
            return Err(GgufError::UnsupportedVersion { version });
        }
        self.version = Some(version);
        Ok(())
    }

    /// The metadata so far.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// Adds a metadata pair; a key already present is an error, as in gguf-py.
    pub fn add(&mut self, key: &str, value: impl Into<Value>) -> Result<()> {
        if key.is_empty() {
            return Err(GgufError::EmptyKey { index: self.metadata.len() as u64 });
        }
        if self.metadata.get(key).is_some() {
            return Err(GgufError::DuplicateKey { key: key.to_string() });
        }
        let value = value.into();
        if key == ALIGNMENT_KEY && !matches!(value, Value::U32(a) if a.is_power_of_two()) {
            return Err(GgufError::BadAlignment {
                reason: format!("{value:?} is not a UINT32 power of two"),
            });
        }
        self.metadata.push(key, value);
        Ok(())
    }

    /// Adds a tensor with `shape` in ggml order (`shape[0]` is the row length).
    pub fn add_tensor(
        &mut self,
        name: &str,
        dtype: DType,
        shape: &[u64],
        data: impl Into<Cow<'a, [u8]>>,
    ) -> Result<()> {
        if name.len() >= MAX_NAME {
            return Err(GgufError::NameTooLong {
                index: self.tensors.len() as u64,
                len: name.len() as u64,
            });
        }
        if self.tensors.iter().any(|t| t.name == name) {
            return Err(GgufError::DuplicateTensor { name: name.to_string() });
        }
        let bad = |reason: String| GgufError::BadShape { name: name.to_string(), reason };
        if shape.len() > MAX_DIMS {
            return Err(bad(format!("{} dimensions, ggml allows at most {MAX_DIMS}", shape.len())));
        }
        let row =
            dtype.row_size(shape.first().copied().unwrap_or(1)).map_err(|e| bad(e.to_string()))?;
        let expected = shape
            .iter()
            .skip(1)
            .try_fold(row, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| bad("size in bytes overflows".into()))?;
        let data = data.into();
        if data.len() as u64 != expected {
            return Err(GgufError::DataSize {
                name: name.to_string(),
                expected,
                actual: data.len() as u64,
            });
        }
        self.tensors.push(PendingTensor {
            name: name.to_string(),
            shape: shape.to_vec(),
            dtype,
            data,
        });
        Ok(())
    }

    fn alignment(&self) -> u64 {
        match self.metadata.get(ALIGNMENT_KEY) {
            Some(Value::U32(a)) => *a as u64,
            _ => DEFAULT_ALIGNMENT,
        }
    }

    /// Writes the file to `out`; returns the number of bytes written.
    pub fn write_to(&self, out: &mut impl Write) -> Result<u64> {
        let mut w = Counting { out, n: 0 };
        self.write_all(&mut w)
            .map_err(|source| GgufError::Io { path: "<output>".into(), source })?;
        Ok(w.n)
    }

    /// Writes the file to `path`.
    pub fn write_file(&self, path: impl AsRef<Path>) -> Result<u64> {
        let path = path.as_ref();
        let io = |source| GgufError::Io { path: path.to_path_buf(), source };
        let file = std::fs::File::create(path).map_err(io)?;
        let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
        let mut w = Counting { out: &mut out, n: 0 };
        self.write_all(&mut w).map_err(io)?;
        let n = w.n;
        out.flush().map_err(io)?;
        Ok(n)
    }

    fn write_all(&self, w: &mut Counting<'_, impl Write>) -> std::io::Result<()> {
        let align = self.alignment();
        w.put(b"GGUF")?;
        w.put(&self.version.unwrap_or(3).to_le_bytes())?;
        w.put(&(self.tensors.len() as u64).to_le_bytes())?;
        w.put(&(self.metadata.len() as u64).to_le_bytes())?;
        for (key, value) in self.metadata.iter() {
            put_string(w, key.as_bytes())?;
            put_value(w, value)?;
        }
        let mut offset = 0u64;
        for t in &self.tensors {
            put_string(w, t.name.as_bytes())?;
            w.put(&(t.shape.len() as u32).to_le_bytes())?;
            for d in &t.shape {
                w.put(&d.to_le_bytes())?;
            }
            w.put(&t.dtype.id().to_le_bytes())?;
            w.put(&offset.to_le_bytes())?;
            offset += pad_len(t.data.len() as u64, align) + t.data.len() as u64;
        }
        w.pad(align)?;
        for t in &self.tensors {
            w.put(&t.data)?;
            w.put(&vec![0u8; pad_len(t.data.len() as u64, align) as usize])?;
        }
        Ok(())
    }
}

fn pad_len(n: u64, align: u64) -> u64 {
    (align - n % align) % align
}

struct Counting<'w, W: Write> {
    out: &'w mut W,
    n: u64,
}

impl<W: Write> Counting<'_, W> {
    fn put(&mut self, b: &[u8]) -> std::io::Result<()> {
        self.out.write_all(b)?;
        self.n += b.len() as u64;
        Ok(())
    }
    fn pad(&mut self, align: u64) -> std::io::Result<()> {
        self.put(&vec![0u8; pad_len(self.n, align) as usize])
    }
}

fn put_string(w: &mut Counting<'_, impl Write>, s: &[u8]) -> std::io::Result<()> {
    w.put(&(s.len() as u64).to_le_bytes())?;
    w.put(s)
}

fn put_value(w: &mut Counting<'_, impl Write>, v: &Value) -> std::io::Result<()> {
    w.put(&(v.value_type() as i32).to_le_bytes())?;
    match v {
        Value::U8(x) => w.put(&[*x]),
        Value::I8(x) => w.put(&x.to_le_bytes()),
        Value::U16(x) => w.put(&x.to_le_bytes()),
        Value::I16(x) => w.put(&x.to_le_bytes()),
        Value::U32(x) => w.put(&x.to_le_bytes()),
        Value::I32(x) => w.put(&x.to_le_bytes()),
        Value::F32(x) => w.put(&x.to_le_bytes()),
        Value::Bool(x) => w.put(&[*x as u8]),
        Value::String(s) => put_string(w, s),
        Value::U64(x) => w.put(&x.to_le_bytes()),
        Value::I64(x) => w.put(&x.to_le_bytes()),
        Value::F64(x) => w.put(&x.to_le_bytes()),
        Value::Array(a) => put_array(w, a),
    }
}

fn put_array(w: &mut Counting<'_, impl Write>, a: &Array) -> std::io::Result<()> {
    w.put(&(a.element_type() as i32).to_le_bytes())?;
    w.put(&(a.len() as u64).to_le_bytes())?;
    fn each<T, const N: usize>(
        w: &mut Counting<'_, impl Write>,
        v: &[T],
        f: fn(&T) -> [u8; N],
    ) -> std::io::Result<()> {
        let bytes: Vec<u8> = v.iter().flat_map(f).collect();
        w.put(&bytes)
    }
    match a {
        Array::U8(v) => w.put(v),
        Array::I8(v) => each(w, v, |x| x.to_le_bytes()),
        Array::U16(v) => each(w, v, |x| x.to_le_bytes()),
        Array::I16(v) => each(w, v, |x| x.to_le_bytes()),
        Array::U32(v) => each(w, v, |x| x.to_le_bytes()),
        Array::I32(v) => each(w, v, |x| x.to_le_bytes()),
        Array::F32(v) => each(w, v, |x| x.to_le_bytes()),
        Array::Bool(v) => each(w, v, |x| [*x as u8]),
        Array::U64(v) => each(w, v, |x| x.to_le_bytes()),
        Array::I64(v) => each(w, v, |x| x.to_le_bytes()),
        Array::F64(v) => each(w, v, |x| x.to_le_bytes()),
        Array::String(v) => v.iter().try_for_each(|s| put_string(w, s)),
    }
}

macro_rules! value_from {
    ($($t:ty => $v:ident),*) => {$(
        impl From<$t> for Value { fn from(x: $t) -> Value { Value::$v(x) } }
    )*};
}
value_from!(u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32, f32 => F32,
    bool => Bool, u64 => U64, i64 => I64, f64 => F64, Array => Array);

impl From<String> for Value {
    fn from(s: String) -> Value {
        Value::String(s.into_bytes())
    }
}
