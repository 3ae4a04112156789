//! Key/value metadata in file order, with typed accessors whose errors name the key.

use crate::value::{Array, Value};
use crate::{GgufError, Result};
use std::collections::HashMap;

/// Metadata key/value pairs, in file order, looked up by key in O(1).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metadata {
    pairs: Vec<(String, Value)>,
    index: HashMap<String, usize>,
}

impl Metadata {
    /// Adds a pair at the end, replacing the value if the key is already there (in place).
    pub fn push(&mut self, key: impl Into<String>, value: Value) {
        let key = key.into();
        match self.index.get(&key) {
            Some(&i) => self.pairs[i].1 = value,
            None => {
                self.index.insert(key.clone(), self.pairs.len());
                self.pairs.push((key, value));
            }
        }
    }

    /// Removes a key, keeping the others in order.
    pub fn remove(&mut self, key: &str) -> Option<Value> {
        let i = self.index.remove(key)?;
        let (_, v) = self.pairs.remove(i);
        for j in self.index.values_mut() {
            if *j > i {
                *j -= 1;
            }
        }
        Some(v)
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.index.get(key).map(|&i| &self.pairs[i].1)
    }

    /// Pairs in file order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.pairs.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Number of pairs.
    pub fn len(&self) -> usize {
        self.pairs.len()
    }

    /// Whether there are no pairs.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// The value of `key`, or [`GgufError::KeyMissing`].
    pub fn require(&self, key: &str) -> Result<&Value> {
        self.get(key).ok_or_else(|| GgufError::KeyMissing { key: key.to_string() })
    }

    fn wrong(key: &str, expected: &str, v: &Value) -> GgufError {
        GgufError::WrongType { key: key.into(), expected: expected.into(), actual: v.type_name() }
    }

    /// A `UINT32` value.
    pub fn get_u32(&self, key: &str) -> Result<u32> {
        match self.require(key)? {
            Value::U32(v) => Ok(*v),
            v => Err(Self::wrong(key, "UINT32", v)),
        }
    }

    /// A `FLOAT32` value.
    pub fn get_f32(&self, key: &str) -> Result<f32> {
        match self.require(key)? {
            Value::F32(v) => Ok(*v),
            v => Err(Self::wrong(key, "FLOAT32", v)),
        }
    }

    /// A `BOOL` value.
    pub fn get_bool(&self, key: &str) -> Result<bool> {
        match self.require(key)? {
            Value::Bool(v) => Ok(*v),
            v => Err(Self::wrong(key, "BOOL", v)),
        }
    }

    /// A `STRING` value that is valid UTF-8.
    pub fn get_str(&self, key: &str) -> Result<&str> {
        match self.require(key)? {
            Value::String(b) => std::str::from_utf8(b)
                .map_err(|_| GgufError::NotUtf8 { what: format!("metadata key '{key}'") }),
            v => Err(Self::wrong(key, "STRING", v)),
        }
    }

    /// Any integer value that fits in a `u64` (llama.cpp reads hyperparameters this leniently).
    pub fn get_uint(&self, key: &str) -> Result<u64> {
        let v = self.require(key)?;
        v.as_integer()
            .and_then(|i| u64::try_from(i).ok())
            .ok_or_else(|| Self::wrong(key, "a non-negative integer", v))
    }

    /// An `ARRAY` value.
    pub fn get_array(&self, key: &str) -> Result<&Array> {
        match self.require(key)? {
            Value::Array(a) => Ok(a),
            v => Err(Self::wrong(key, "ARRAY", v)),
        }
    }

    /// An `ARRAY[FLOAT32]` value.
    pub fn get_f32_array(&self, key: &str) -> Result<&[f32]> {
        match self.require(key)? {
            Value::Array(Array::F32(a)) => Ok(a),
            v => Err(Self::wrong(key, "ARRAY[FLOAT32]", v)),
        }
    }

    /// An `ARRAY[INT32]` value.
    pub fn get_i32_array(&self, key: &str) -> Result<&[i32]> {
        match self.require(key)? {
            Value::Array(Array::I32(a)) => Ok(a),
            v => Err(Self::wrong(key, "ARRAY[INT32]", v)),
        }
    }

    /// An `ARRAY[UINT32]` value.
    pub fn get_u32_array(&self, key: &str) -> Result<&[u32]> {
        match self.require(key)? {
            Value::Array(Array::U32(a)) => Ok(a),
            v => Err(Self::wrong(key, "ARRAY[UINT32]", v)),
        }
    }

    /// An `ARRAY[STRING]` value, as the file's bytes.
    pub fn get_str_array(&self, key: &str) -> Result<&[Vec<u8>]> {
        match self.require(key)? {
            Value::Array(Array::String(a)) => Ok(a),
            v => Err(Self::wrong(key, "ARRAY[STRING]", v)),
        }
    }
}
