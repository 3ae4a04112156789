//! Reading a request's JSON: the body as an object, and optional fields of a type and range,
//! each error a 400 that names its field.

use crate::error::ApiError;
use serde_json::{Map, Value};

/// Field `key` as a number in `[min, max]`; `None` when absent or null.
pub(crate) fn opt_num(
    o: &Map<String, Value>,
    key: &str,
    min: f64,
    max: f64,
) -> Result<Option<f64>, ApiError> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => {
            let x = n.as_f64().unwrap_or(f64::NAN);
            if !(min..=max).contains(&x) {
                return Err(ApiError::field(key, format!("{x} is out of range [{min}, {max}]")));
            }
            Ok(Some(x))
        }
        Some(other) => {
            Err(ApiError::field(key, format!("expected a number, got {}", type_name(other))))
        }
    }
}

/// Field `key` as an integer in `[min, max]`; `None` when absent or null.
pub(crate) fn opt_int(
    o: &Map<String, Value>,
    key: &str,
    min: i64,
    max: i64,
) -> Result<Option<i64>, ApiError> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => match n.as_i64() {
            Some(x) if (min..=max).contains(&x) => Ok(Some(x)),
            Some(x) => Err(ApiError::field(key, format!("{x} is out of range [{min}, {max}]"))),
            None => Err(ApiError::field(key, format!("expected an integer, got {n}"))),
        },
        Some(other) => {
            Err(ApiError::field(key, format!("expected an integer, got {}", type_name(other))))
        }
    }
}

/// Field `key` as a boolean; `None` when absent or null.
pub(crate) fn opt_bool(o: &Map<String, Value>, key: &str) -> Result<Option<bool>, ApiError> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(other) => {
            Err(ApiError::field(key, format!("expected a boolean, got {}", type_name(other))))
        }
    }
}

/// How an error names a value's JSON type ("a string", "an array").
pub(crate) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The token ids of array `a` (field `at`), each below `n_vocab`; the error names the entry.
pub(crate) fn token_ids(a: &[Value], at: &str, n_vocab: usize) -> Result<Vec<u32>, ApiError> {
    a.iter()
        .enumerate()
        .map(|(i, t)| match t.as_u64() {
            Some(id) if (id as usize) < n_vocab => Ok(id as u32),
            _ => Err(ApiError::field(
                &format!("{at}[{i}]"),
                format!("{t} is not a token id below {n_vocab}"),
            )),
        })
        .collect()
}

/// Parses a request body into a JSON object.
pub fn parse_body(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::new(400, "invalid_request_error", format!("invalid JSON body: {e}"))
    })?;
    match v {
        Value::Object(o) => Ok(o),
        other => Err(ApiError::new(
            400,
            "invalid_request_error",
            format!("the body must be a JSON object, not {}", type_name(&other)),
        )),
    }
}
