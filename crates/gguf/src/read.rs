//! Parsing a GGUF header from bytes, with every count, length, offset and size checked before
//! it is used, in the same order and by the same rules as ggml's `gguf_init_from_reader`.
//!
//! Architecture invariant: nothing here allocates by a count read from the file until that
//! count has been checked against the bytes left in the file.

use crate::metadata::Metadata;
use crate::value::{Array, Value, ValueType};
use crate::{GgufError, Result, TensorInfo};
use tessera_tensor::DType;

/// `GGUF_MAX_STRING_LENGTH` and `GGUF_MAX_ARRAY_ELEMENTS`.
pub(crate) const MAX_LEN: u64 = 1 << 30;
/// `GGML_MAX_NAME`: tensor names must be shorter.
pub const MAX_NAME: usize = 64;
/// `GGML_MAX_DIMS`.
pub const MAX_DIMS: usize = 4;
/// `GGUF_DEFAULT_ALIGNMENT`.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// The key that sets the alignment.
pub const ALIGNMENT_KEY: &str = "general.alignment";

/// Everything before the tensor data: version, metadata and the tensor table.
#[derive(Debug, Clone)]
pub struct Header {
    /// GGUF version (2 or 3).
    pub version: u32,
    /// Key/value metadata, in file order.
    pub metadata: Metadata,
    /// Tensor infos, in file order.
    pub tensors: Vec<TensorInfo>,
    /// Data alignment (`general.alignment` or 32).
    pub alignment: u64,
    /// Absolute offset of the data section.
    pub data_offset: u64,
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    fn take(&mut self, n: u64, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(GgufError::Truncated {
                what: what(),
                offset: self.pos as u64,
                needed: n,
                remaining: self.remaining(),
            });
        }
        let s = &self.buf[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N]> {
        Ok(self.take(N as u64, what)?.try_into().expect("took N bytes"))
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32> {
        self.array(what).map(u32::from_le_bytes)
    }
    fn i32(&mut self, what: &dyn Fn() -> String) -> Result<i32> {
        self.array(what).map(i32::from_le_bytes)
    }
    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64> {
        self.array(what).map(u64::from_le_bytes)
    }
    fn i64(&mut self, what: &dyn Fn() -> String) -> Result<i64> {
        self.array(what).map(i64::from_le_bytes)
    }

    fn string(&mut self, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        let len = self.u64(&|| format!("length of {}", what()))?;
        if len > MAX_LEN {
            return Err(GgufError::StringTooLong { what: what(), len });
        }
        self.take(len, what)
    }

    /// Checks that `count` elements of at least `min_size` bytes each can fit in what is left.
    fn check_count(&self, count: u64, min_size: usize, offset: u64, what: &str) -> Result<usize> {
        let fits = count.checked_mul(min_size as u64).is_some_and(|b| b <= self.remaining());
        if count > MAX_LEN || !fits {
            return Err(GgufError::BadCount {
                what: what.to_string(),
                count: count.into(),
                offset,
            });
        }
        Ok(count as usize)
    }
}

fn scalar(c: &mut Cursor<'_>, ty: ValueType, what: &dyn Fn() -> String) -> Result<Value> {
    Ok(match ty {
        ValueType::U8 => Value::U8(c.array::<1>(what)?[0]),
        ValueType::I8 => Value::I8(c.array::<1>(what)?[0] as i8),
        ValueType::U16 => Value::U16(u16::from_le_bytes(c.array(what)?)),
        ValueType::I16 => Value::I16(i16::from_le_bytes(c.array(what)?)),
        ValueType::U32 => Value::U32(c.u32(what)?),
        ValueType::I32 => Value::I32(c.i32(what)?),
        ValueType::F32 => Value::F32(f32::from_le_bytes(c.array(what)?)),
        ValueType::Bool => Value::Bool(c.array::<1>(what)?[0] != 0),
        ValueType::String => Value::String(c.string(what)?.to_vec()),
        ValueType::U64 => Value::U64(c.u64(what)?),
        ValueType::I64 => Value::I64(c.i64(what)?),
        ValueType::F64 => Value::F64(f64::from_le_bytes(c.array(what)?)),
        ValueType::Array => unreachable!("arrays are read by `array`"),
    })
}

fn array(c: &mut Cursor<'_>, ty: ValueType, n: usize, what: &dyn Fn() -> String) -> Result<Array> {
    fn fixed<T, const N: usize>(
        c: &mut Cursor<'_>,
        n: usize,
        what: &dyn Fn() -> String,
        f: fn([u8; N]) -> T,
    ) -> Result<Vec<T>> {
        let bytes = c.take((n * N) as u64, what)?;
        Ok(bytes.chunks_exact(N).map(|b| f(b.try_into().expect("N bytes"))).collect())
    }
    Ok(match ty {
        ValueType::U8 => Array::U8(fixed(c, n, what, |b: [u8; 1]| b[0])?),
        ValueType::I8 => Array::I8(fixed(c, n, what, |b: [u8; 1]| b[0] as i8)?),
        ValueType::U16 => Array::U16(fixed(c, n, what, u16::from_le_bytes)?),
        ValueType::I16 => Array::I16(fixed(c, n, what, i16::from_le_bytes)?),
        ValueType::U32 => Array::U32(fixed(c, n, what, u32::from_le_bytes)?),
        ValueType::I32 => Array::I32(fixed(c, n, what, i32::from_le_bytes)?),
        ValueType::F32 => Array::F32(fixed(c, n, what, f32::from_le_bytes)?),
        ValueType::Bool => Array::Bool(fixed(c, n, what, |b: [u8; 1]| b[0] != 0)?),
        ValueType::U64 => Array::U64(fixed(c, n, what, u64::from_le_bytes)?),
        ValueType::I64 => Array::I64(fixed(c, n, what, i64::from_le_bytes)?),
        ValueType::F64 => Array::F64(fixed(c, n, what, f64::from_le_bytes)?),
        ValueType::String => {
            let mut v = Vec::with_capacity(n);
            for i in 0..n {
                v.push(c.string(&|| format!("{}[{i}]", what()))?.to_vec());
            }
            Array::String(v)
        }
        ValueType::Array => unreachable!("nested arrays are rejected before"),
    })
}

fn pad(x: u64, align: u64) -> Option<u64> {
    Some(x.checked_add(align - 1)? / align * align)
}

/// Parses the header of the GGUF bytes `buf` (the whole file), checking every rule ggml checks.
pub fn parse_header(buf: &[u8]) -> Result<Header> {
    let mut c = Cursor { buf, pos: 0 };
    let magic = c.array::<4>(&|| "magic".into())?;
    if &magic != b"GGUF" {
        return Err(GgufError::BadMagic { found: magic });
    }
    let version = c.u32(&|| "version".into())?;
    if version == 0 || version & 0xffff == 0 || version == 1 || version > 3 {
        return Err(GgufError::UnsupportedVersion { version });
    }
    let n_tensors = c.i64(&|| "tensor count".into())?;
    if n_tensors < 0 {
        return Err(GgufError::BadCount {
            what: "tensor".into(),
            count: n_tensors.into(),
            offset: 8,
        });
    }
    let n_kv = c.i64(&|| "key/value count".into())?;
    if n_kv < 0 {
        return Err(GgufError::BadCount {
            what: "key/value".into(),
            count: n_kv.into(),
            offset: 16,
        });
    }
    // Every key/value pair takes at least 8 (key length) + 1 (key) + 4 (type) + 1 bytes.
    let n_kv = c.check_count(n_kv as u64, 14, 16, "key/value")?;

    let mut metadata = Metadata::default();
    for index in 0..n_kv as u64 {
        let key = c.string(&|| format!("key of key/value pair {index}"))?;
        if key.is_empty() {
            return Err(GgufError::EmptyKey { index });
        }
        let key = std::str::from_utf8(key)
            .map_err(|_| GgufError::NotUtf8 { what: format!("key of key/value pair {index}") })?
            .to_string();
        if metadata.get(&key).is_some() {
            return Err(GgufError::DuplicateKey { key });
        }
        let what = || format!("value of '{key}'");
        let type_id = c.i32(&what)?;
        let bad = |type_id, nested| GgufError::BadValueType { key: key.clone(), type_id, nested };
        let ty = ValueType::from_id(type_id).ok_or_else(|| bad(type_id, false))?;
        let value = if ty == ValueType::Array {
            let elem_id = c.i32(&what)?;
            let elem = ValueType::from_id(elem_id).ok_or_else(|| bad(elem_id, false))?;
            if elem == ValueType::Array {
                return Err(bad(elem_id, true));
            }
            let n = c.u64(&what)?;
            let at = c.pos as u64 - 8;
            let n = c.check_count(n, elem.size(), at, &format!("array element of '{key}'"))?;
            Value::Array(array(&mut c, elem, n, &what)?)
        } else {
            scalar(&mut c, ty, &what)?
        };
        metadata.push(key, value);
    }

    let alignment = match metadata.get(ALIGNMENT_KEY) {
        None => DEFAULT_ALIGNMENT,
        Some(Value::U32(a)) if a.is_power_of_two() => *a as u64,
        Some(Value::U32(a)) => {
            return Err(GgufError::BadAlignment { reason: format!("{a} is not a power of two") })
        }
        Some(v) => {
            return Err(GgufError::BadAlignment {
                reason: format!("must be of type UINT32 but is {}", v.type_name()),
            })
        }
    };

    // Every tensor info takes at least 8 (name length) + 4 (n_dims) + 4 (type) + 8 (offset).
    let n_tensors = c.check_count(n_tensors as u64, 24, 8, "tensor")?;
    let mut tensors: Vec<TensorInfo> = Vec::with_capacity(n_tensors);
    let mut names = std::collections::HashSet::with_capacity(n_tensors);
    for index in 0..n_tensors as u64 {
        let name = c.string(&|| format!("name of tensor {index}"))?;
        if name.len() >= MAX_NAME {
            return Err(GgufError::NameTooLong { index, len: name.len() as u64 });
        }
        let name = std::str::from_utf8(name)
            .map_err(|_| GgufError::NotUtf8 { what: format!("name of tensor {index}") })?
            .to_string();
        if !names.insert(name.clone()) {
            return Err(GgufError::DuplicateTensor { name });
        }
        let what = || format!("info of tensor '{name}'");
        let shape_err = |reason: String| GgufError::BadShape { name: name.clone(), reason };
        let n_dims = c.u32(&what)?;
        if n_dims as usize > MAX_DIMS {
            return Err(shape_err(format!("{n_dims} dimensions, ggml allows at most {MAX_DIMS}")));
        }
        let mut ne = [1u64; MAX_DIMS];
        for (j, d) in ne.iter_mut().enumerate().take(n_dims as usize) {
            let v = c.i64(&what)?;
            if v < 0 {
                return Err(shape_err(format!("dimension {j} is negative ({v})")));
            }
            *d = v as u64;
        }
        let n_elements = ne.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d));
        if n_elements.is_none_or(|n| n >= i64::MAX as u64) {
            return Err(shape_err(format!("{ne:?} has too many elements")));
        }
        let type_id = c.i32(&what)?;
        let dtype = u32::try_from(type_id)
            .map_err(|_| tessera_tensor::TensorError::UnknownType { id: type_id as u32 })
            .and_then(DType::from_id)
            .map_err(|source| GgufError::BadType { name: name.clone(), source })?;
        let row = dtype.row_size(ne[0]).map_err(|_| {
            shape_err(format!(
                "{} elements per row is not a multiple of {dtype}'s block size {}",
                ne[0],
                dtype.block_size()
            ))
        })?;
        let n_bytes = [ne[1], ne[2], ne[3]]
            .iter()
            .try_fold(row, |acc, &d| acc.checked_mul(d))
            .filter(|b| *b <= usize::MAX as u64 && *b <= i64::MAX as u64)
            .ok_or_else(|| shape_err("size in bytes overflows".into()))?;
        let offset = c.u64(&what)?;
        tensors.push(TensorInfo { name, n_dims, ne, dtype, offset, n_bytes, data_offset: 0 });
    }

    let end_of_infos = c.pos as u64;
    let data_offset = if n_tensors > 0 {
        pad(end_of_infos, alignment).filter(|&p| p <= buf.len() as u64).ok_or(
            GgufError::Truncated {
                what: "padding before the data section".into(),
                offset: end_of_infos,
                needed: pad(end_of_infos, alignment).unwrap_or(u64::MAX) - end_of_infos,
                remaining: c.remaining(),
            },
        )?
    } else {
        end_of_infos
    };

    let mut expected = 0u64;
    for t in &mut tensors {
        if t.offset != expected {
            return Err(GgufError::BadOffset { name: t.name.clone(), offset: t.offset, expected });
        }
        t.data_offset = data_offset + t.offset;
        let end = t.data_offset.checked_add(t.n_bytes);
        if end.is_none_or(|e| e > buf.len() as u64) {
            return Err(GgufError::DataPastEnd {
                name: t.name.clone(),
                end: end.unwrap_or(u64::MAX),
                file_size: buf.len() as u64,
            });
        }
        expected =
            pad(t.n_bytes, alignment).and_then(|p| expected.checked_add(p)).ok_or_else(|| {
                GgufError::BadShape {
                    name: t.name.clone(),
                    reason: "data section size overflows".into(),
                }
            })?;
    }

    Ok(Header { version, metadata, tensors, alignment, data_offset })
}
