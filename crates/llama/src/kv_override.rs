//! llama.cpp's `--override-kv KEY=TYPE:VALUE`: metadata values replaced before the model is
//! read (`tokenizer.ggml.add_bos_token=bool:false`, `llama.context_length=int:8192`). Types
//! are `int`, `float`, `bool` and `str` (at most 127 bytes, as llama.cpp's). An override of a
//! key the file has keeps that key's GGUF type (an `int` into a `UINT32` key is range-checked);
//! a type that does not fit the key (`bool` for an integer) is an error naming both, as
//! llama.cpp's loader refuses it. A key the file lacks is added (`int` as `UINT32` when it
//! fits, else `INT64`; `float` as `FLOAT32`).

use crate::{LlamaError, Result};
use tessera_gguf::{Metadata, Value};

/// One override, parsed from `KEY=TYPE:VALUE`.
#[derive(Debug, Clone, PartialEq)]
pub struct KvOverride {
    /// The metadata key.
    pub key: String,
    /// The value.
    pub value: OverrideValue,
}

/// An override's value.
#[derive(Debug, Clone, PartialEq)]
pub enum OverrideValue {
    /// `int:N`.
    Int(i64),
    /// `float:X`.
    Float(f64),
    /// `bool:true|false`.
    Bool(bool),
    /// `str:TEXT`.
    Str(String),
}

fn setting(reason: String) -> LlamaError {
    LlamaError::Setting { flag: "--override-kv".into(), reason }
}

impl std::str::FromStr for KvOverride {
    type Err = LlamaError;

    /// `KEY=TYPE:VALUE`; a malformed one is an error naming it.
    fn from_str(s: &str) -> Result<Self> {
        let bad = |why: &str| {
            setting(format!("'{s}': {why} (KEY=TYPE:VALUE, TYPE int, float, bool or str)"))
        };
        let (key, rest) = s.split_once('=').ok_or_else(|| bad("no '='"))?;
        if key.is_empty() {
            return Err(bad("no key"));
        }
        let (ty, v) = rest.split_once(':').ok_or_else(|| bad("no ':' after the type"))?;
        let value = match ty {
            "int" => OverrideValue::Int(v.parse().map_err(|_| bad("not an integer"))?),
            "float" => {
                let x: f64 = v.parse().map_err(|_| bad("not a number"))?;
                if !x.is_finite() {
                    return Err(bad("not a finite number"));
                }
                OverrideValue::Float(x)
            }
            "bool" => match v {
                "true" => OverrideValue::Bool(true),
                "false" => OverrideValue::Bool(false),
                _ => return Err(bad("a bool is true or false")),
            },
            "str" if v.len() > 127 => return Err(bad("a str override is at most 127 bytes")),
            "str" => OverrideValue::Str(v.to_string()),
            _ => return Err(bad("unknown type")),
        };
        Ok(KvOverride { key: key.to_string(), value })
    }
}

impl KvOverride {
    /// Applies the override to `md` (module docs).
    pub fn apply(&self, md: &mut Metadata) -> Result<()> {
        let key = &self.key;
        let mismatch = |have: &Value| {
            setting(format!(
                "{key}: the file's value is {}, which a {} override cannot replace",
                have.type_name(),
                match self.value {
                    OverrideValue::Int(_) => "int",
                    OverrideValue::Float(_) => "float",
                    OverrideValue::Bool(_) => "bool",
                    OverrideValue::Str(_) => "str",
                }
            ))
        };
        let range = |n: i64, ty: &str| setting(format!("{key}: {n} does not fit the key's {ty}"));
        let new = match (&self.value, md.get(key)) {
            (OverrideValue::Int(n), Some(have)) => {
                let n = *n;
                match have {
                    Value::U8(_) => Value::U8(u8::try_from(n).map_err(|_| range(n, "UINT8"))?),
                    Value::I8(_) => Value::I8(i8::try_from(n).map_err(|_| range(n, "INT8"))?),
                    Value::U16(_) => Value::U16(u16::try_from(n).map_err(|_| range(n, "UINT16"))?),
                    Value::I16(_) => Value::I16(i16::try_from(n).map_err(|_| range(n, "INT16"))?),
                    Value::U32(_) => Value::U32(u32::try_from(n).map_err(|_| range(n, "UINT32"))?),
                    Value::I32(_) => Value::I32(i32::try_from(n).map_err(|_| range(n, "INT32"))?),
                    Value::U64(_) => Value::U64(u64::try_from(n).map_err(|_| range(n, "UINT64"))?),
                    Value::I64(_) => Value::I64(n),
                    other => return Err(mismatch(other)),
                }
            }
            (OverrideValue::Int(n), None) => match u32::try_from(*n) {
                Ok(v) => Value::U32(v),
                Err(_) => Value::I64(*n),
            },
            (OverrideValue::Float(x), Some(Value::F64(_))) => Value::F64(*x),
            (OverrideValue::Float(x), Some(Value::F32(_)) | None) => Value::F32(*x as f32),
            (OverrideValue::Bool(b), Some(Value::Bool(_)) | None) => Value::Bool(*b),
            (OverrideValue::Str(s), Some(Value::String(_)) | None) => {
                Value::String(s.as_bytes().to_vec())
            }
            (_, Some(other)) => return Err(mismatch(other)),
        };
        tracing::info!(key = %key, value = ?self.value, "metadata overridden (--override-kv)");
        md.push(key.clone(), new);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_apply() {
        let mut md = Metadata::default();
        md.push("a.n", Value::U32(4));
        md.push("a.flag", Value::Bool(true));
        md.push("a.x", Value::F32(1.0));
        let o = |s: &str| s.parse::<KvOverride>();
        o("a.n=int:9").unwrap().apply(&mut md).unwrap();
        assert_eq!(md.get("a.n"), Some(&Value::U32(9)));
        o("a.flag=bool:false").unwrap().apply(&mut md).unwrap();
        assert_eq!(md.get("a.flag"), Some(&Value::Bool(false)));
        o("a.x=float:0.5").unwrap().apply(&mut md).unwrap();
        assert_eq!(md.get("a.x"), Some(&Value::F32(0.5)));
        o("a.new=str:hi").unwrap().apply(&mut md).unwrap();
        assert_eq!(md.get("a.new"), Some(&Value::String(b"hi".to_vec())));
        assert!(o("a.n=int:-1").unwrap().apply(&mut md).is_err(), "UINT32 range");
        assert!(o("a.n=bool:true").unwrap().apply(&mut md).is_err(), "type mismatch");
        for bad in
            ["a.n", "a.n=9", "=int:1", "a.n=int:x", "a.n=bool:yes", "a.n=list:1", "a.x=float:nan"]
        {
            assert!(o(bad).is_err(), "{bad}");
        }
    }
}
