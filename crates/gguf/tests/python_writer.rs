//! The writer produces the same bytes as the `gguf` Python package's writer for the same
//! content, and the reader reads back exactly what was written.

mod support;

use tessera_gguf::{Array, Gguf, GgufWriter, Value};
use tessera_tensor::DType;

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The same content as tests/py/write_ref.py, built with GgufWriter; tensor data is taken from
/// the Python-written file (it comes from numpy's random generator).
fn build<'a>(py: &'a Gguf<Vec<u8>>, align: Option<u32>) -> GgufWriter<'a> {
    let mut w = GgufWriter::new();
    w.add("general.architecture", "test").unwrap();
    if let Some(a) = align {
        w.add("general.alignment", a).unwrap();
    }
    w.add("t.u8", 200u8).unwrap();
    w.add("t.i8", -100i8).unwrap();
    w.add("t.u16", 60000u16).unwrap();
    w.add("t.i16", -30000i16).unwrap();
    w.add("t.u32", 4_000_000_000u32).unwrap();
    w.add("t.i32", -2_000_000_000i32).unwrap();
    w.add("t.f32", 0.1f32).unwrap();
    w.add("t.bool", true).unwrap();
    w.add("t.str", "héllo GGUF").unwrap();
    w.add("t.u64", (1u64 << 63) + 5).unwrap();
    w.add("t.i64", -(1i64 << 62)).unwrap();
    w.add("t.f64", std::f64::consts::E).unwrap();
    w.add("t.arr.i32", Array::I32(vec![1, -2, 3])).unwrap();
    w.add("t.arr.f32", Array::F32(vec![0.5, -1.25])).unwrap();
    w.add("t.arr.str", Array::String(vec![b"a".to_vec(), vec![], b"ccc".to_vec()])).unwrap();
    w.add("t.arr.bool", Array::Bool(vec![true, false, true])).unwrap();
    w.add("t.arr.u8", Array::U8(vec![1, 2, 255])).unwrap();
    w.add("t.arr.f64", Array::F64(vec![1.5])).unwrap();
    let data = |name: &str| py.tensor_data(py.tensor(name).unwrap());
    w.add_tensor("a.f32", DType::F32, &[5, 3], data("a.f32")).unwrap();
    w.add_tensor("b.f16", DType::F16, &[7], data("b.f16")).unwrap();
    let ints: Vec<u8> = (0..12i32).flat_map(|x| x.to_le_bytes()).collect();
    assert_eq!(data("c.i32"), &ints[..]);
    w.add_tensor("c.i32", DType::I32, &[3, 2, 2], ints).unwrap();
    w.add_tensor("d.q4_0", DType::Q4_0, &[64, 2], data("d.q4_0")).unwrap();
    w
}

fn check(align: Option<u32>) {
    let dir = support::tmp();
    let path = dir.path().join("ref.gguf");
    let align_arg = align.map(|a| a.to_string()).unwrap_or_default();
    let mut args = vec![path.as_os_str()];
    if align.is_some() {
        args.push(align_arg.as_ref());
    }
    support::python("write_ref.py", &args);
    let py_bytes = support::read(&path);
    let py = Gguf::from_bytes(py_bytes.clone()).unwrap();

    let mut ours = Vec::new();
    build(&py, align).write_to(&mut ours).unwrap();
    assert_eq!(ours.len(), py_bytes.len(), "file length");
    assert!(ours == py_bytes, "GgufWriter bytes differ from gguf-py's");

    // Read back: values as written.
    let md = py.metadata();
    assert_eq!(md.get("t.u64"), Some(&Value::U64((1 << 63) + 5)));
    assert_eq!(md.get_f32("t.f32").unwrap(), 0.1);
    assert_eq!(md.get_str("t.str").unwrap(), "héllo GGUF");
    assert_eq!(md.get_str_array("t.arr.str").unwrap()[2], b"ccc");
    assert_eq!(py.alignment(), align.unwrap_or(32) as u64);
    let a = py.tensor("a.f32").unwrap();
    assert_eq!(a.shape(), &[5, 3]);
    assert_eq!(py.tensor_data(a).len(), 60);
    assert_eq!(py.tensor("c.i32").unwrap().shape(), &[3, 2, 2]);
    assert_eq!(f32_bytes(&[0.0]).len(), 4);

    // A read file written back is byte-identical.
    let mut again = Vec::new();
    GgufWriter::from_gguf(&py).unwrap().write_to(&mut again).unwrap();
    assert!(again == py_bytes);
}

#[test]
fn same_bytes_as_gguf_py_default_alignment() {
    check(None);
}

#[test]
fn same_bytes_as_gguf_py_alignment_64() {
    check(Some(64));
}
