//! `tessera gguf FILE [--json]`: the metadata and tensor table of a GGUF file.

use anyhow::Result;
use serde_json::{json, Value as Json};
use std::fmt::Write as _;
use std::io::Write;
use std::path::Path;
use tessera_gguf::{GgufFile, TensorInfo, Value};

pub fn run(path: &Path, as_json: bool, array_items: usize) -> Result<()> {
    let file = crate::common::open_gguf(path)?;
    let mut out = std::io::stdout().lock();
    let text = if as_json {
        serde_json::to_string_pretty(&to_json(&file))?
    } else {
        table(&file, array_items)
    };
    // A closed pipe (`tessera gguf f | head`) is not an error worth a message.
    let _ = writeln!(out, "{text}");
    Ok(())
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn value_json(v: &Value) -> Json {
    match v {
        Value::U8(x) => json!(x),
        Value::I8(x) => json!(x),
        Value::U16(x) => json!(x),
        Value::I16(x) => json!(x),
        Value::U32(x) => json!(x),
        Value::I32(x) => json!(x),
        Value::F32(x) => json!(x),
        Value::Bool(x) => json!(x),
        Value::String(s) => json!(lossy(s)),
        Value::U64(x) => json!(x),
        Value::I64(x) => json!(x),
        Value::F64(x) => json!(x),
        Value::Array(a) => {
            Json::Array((0..a.len()).filter_map(|i| a.get(i)).map(|v| value_json(&v)).collect())
        }
    }
}

fn tensor_json(t: &TensorInfo) -> Json {
    json!({
        "name": t.name,
        "type": t.dtype.name(),
        "shape": t.shape(),
        "offset": t.data_offset,
        "n_bytes": t.n_bytes,
    })
}

fn to_json(file: &GgufFile) -> Json {
    let metadata: Vec<Json> = file
        .metadata()
        .iter()
        .map(|(k, v)| json!({ "key": k, "type": v.type_name(), "value": value_json(v) }))
        .collect();
    json!({
        "version": file.version(),
        "alignment": file.alignment(),
        "data_offset": file.data_offset(),
        "metadata": metadata,
        "tensors": file.tensors().iter().map(tensor_json).collect::<Vec<_>>(),
    })
}

fn scalar_text(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{:?}", lossy(s)),
        Value::F32(x) => format!("{x}"),
        Value::F64(x) => format!("{x}"),
        v => value_json(v).to_string(),
    }
}

fn value_text(v: &Value, max_items: usize) -> String {
    match v {
        Value::Array(a) => {
            let shown: Vec<String> = (0..a.len().min(max_items))
                .filter_map(|i| a.get(i))
                .map(|v| scalar_text(&v))
                .collect();
            let more = if a.len() > max_items {
                format!(", ... ({} more)", a.len() - max_items)
            } else {
                String::new()
            };
            format!("[{}{more}]", shown.join(", "))
        }
        v => scalar_text(v),
    }
}

fn array_len(v: &Value) -> usize {
    match v {
        Value::Array(a) => a.len(),
        _ => 1,
    }
}

fn table(file: &GgufFile, max_items: usize) -> String {
    let mut s = String::new();
    let md = file.metadata();
    let _ = writeln!(
        s,
        "* GGUF v{}, alignment {}, data at byte {}",
        file.version(),
        file.alignment(),
        file.data_offset()
    );
    let _ = writeln!(s, "* {} key/value pair(s)", md.len());
    for (i, (k, v)) in md.iter().enumerate() {
        let ty = match v {
            Value::Array(a) => format!("[{}]", a.element_type()),
            v => v.value_type().to_string(),
        };
        let _ = writeln!(
            s,
            "{:6}: {:10} | {:8} | {} = {}",
            i + 1,
            ty,
            array_len(v),
            k,
            value_text(v, max_items)
        );
    }
    let _ = writeln!(s, "* {} tensor(s)", file.tensors().len());
    let _ = writeln!(
        s,
        "{:>6}  {:<32} {:<8} {:>24} {:>12} {:>12}",
        "#", "name", "type", "shape", "offset", "bytes"
    );
    for (i, t) in file.tensors().iter().enumerate() {
        let shape = t.shape().iter().map(u64::to_string).collect::<Vec<_>>().join(" x ");
        let _ = writeln!(
            s,
            "{:6}: {:<32} {:<8} {:>24} {:>12} {:>12}",
            i + 1,
            t.name,
            t.dtype.name(),
            shape,
            t.data_offset,
            t.n_bytes
        );
    }
    let total: u64 = file.tensors().iter().map(|t| t.n_bytes).sum();
    let _ =
        write!(s, "* {} bytes of tensor data ({:.1} MiB)", total, total as f64 / (1 << 20) as f64);
    s
}
