//! Property tests: random valid files round-trip exactly, and 100,000 random mutations of valid
//! files (bit flips, truncations, splices, extreme field values) give an error or a valid file,
//! never a panic.

use proptest::prelude::*;
use tessera_gguf::{Array, Gguf, GgufWriter, Value};
use tessera_tensor::DType;

fn value() -> impl Strategy<Value = Value> {
    let float = prop::num::f32::NORMAL | prop::num::f32::ZERO;
    let string = prop::collection::vec(any::<u8>(), 0..12);
    prop_oneof![
        any::<u8>().prop_map(Value::U8),
        any::<i8>().prop_map(Value::I8),
        any::<u16>().prop_map(Value::U16),
        any::<i16>().prop_map(Value::I16),
        any::<u32>().prop_map(Value::U32),
        any::<i32>().prop_map(Value::I32),
        float.prop_map(Value::F32),
        any::<bool>().prop_map(Value::Bool),
        string.clone().prop_map(Value::String),
        any::<u64>().prop_map(Value::U64),
        any::<i64>().prop_map(Value::I64),
        (prop::num::f64::NORMAL | prop::num::f64::ZERO).prop_map(Value::F64),
        prop::collection::vec(any::<i32>(), 0..6).prop_map(|v| Value::Array(Array::I32(v))),
        prop::collection::vec(float, 0..6).prop_map(|v| Value::Array(Array::F32(v))),
        prop::collection::vec(string, 0..6).prop_map(|v| Value::Array(Array::String(v))),
        prop::collection::vec(any::<bool>(), 0..6).prop_map(|v| Value::Array(Array::Bool(v))),
        prop::collection::vec(any::<u64>(), 0..6).prop_map(|v| Value::Array(Array::U64(v))),
    ]
}

const TYPES: [DType; 8] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::I8,
    DType::Q4_0,
    DType::Q8_0,
    DType::Q4_K,
    DType::IQ4_XS,
];

#[derive(Debug, Clone)]
struct Content {
    alignment: Option<u32>,
    kvs: Vec<(String, Value)>,
    tensors: Vec<(DType, Vec<u64>, u64)>,
}

fn content() -> impl Strategy<Value = Content> {
    let kvs = prop::collection::btree_map("[a-z.]{1,12}", value(), 0..8);
    let tensor = (0..TYPES.len(), prop::collection::vec(1u64..4, 0..4), 1u64..3, any::<u64>());
    let tensors = prop::collection::vec(tensor, 0..5);
    (prop::option::of(prop::sample::select(vec![1u32, 8, 16, 64])), kvs, tensors).prop_map(
        |(alignment, kvs, ts)| Content {
            alignment,
            kvs: kvs.into_iter().filter(|(k, _)| k != "general.alignment").collect(),
            tensors: ts
                .into_iter()
                .map(|(ti, mut dims, blocks, seed)| {
                    let dt = TYPES[ti];
                    dims.insert(0, blocks * dt.block_size() as u64);
                    (dt, dims, seed)
                })
                .collect(),
        },
    )
}

fn build(c: &Content) -> Vec<u8> {
    let mut w = GgufWriter::new();
    if let Some(a) = c.alignment {
        w.add("general.alignment", a).unwrap();
    }
    for (k, v) in &c.kvs {
        w.add(k, v.clone()).unwrap();
    }
    for (i, (dt, shape, seed)) in c.tensors.iter().enumerate() {
        let n = dt.row_size(shape[0]).unwrap() * shape[1..].iter().product::<u64>();
        let data: Vec<u8> = (0..n).map(|j| (j.wrapping_mul(*seed | 1) >> 3) as u8).collect();
        w.add_tensor(&format!("tensor.{i}"), *dt, shape, data).unwrap();
    }
    let mut out = Vec::new();
    w.write_to(&mut out).unwrap();
    out
}

/// Whatever the parser accepts must be internally consistent and survive a rewrite.
fn check_accepted(bytes: Vec<u8>) {
    let Ok(g) = Gguf::from_bytes(bytes) else { return };
    for t in g.tensors() {
        assert_eq!(g.tensor_data(t).len() as u64, t.n_bytes);
    }
    let mut again = Vec::new();
    GgufWriter::from_gguf(&g).unwrap().write_to(&mut again).unwrap();
    let g2 = Gguf::from_bytes(again).expect("a rewritten accepted file parses");
    assert_eq!(g2.tensors().len(), g.tensors().len());
    assert_eq!(g2.metadata().len(), g.metadata().len());
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Truncate(usize),
    Splice { from: usize, to: usize, len: usize },
    Field(usize, u64),
    Insert(usize, Vec<u8>),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let extreme = prop::sample::select(vec![
        0u64,
        1,
        0xff,
        1 << 31,
        1 << 32,
        1 << 63,
        u64::MAX,
        u64::MAX - 7,
        64,
        13,
        9,
    ]);
    prop_oneof![
        (any::<usize>(), 0u8..8).prop_map(|(p, b)| Mutation::Flip(p, b)),
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), any::<usize>(), 0usize..64).prop_map(|(from, to, len)| Mutation::Splice {
            from,
            to,
            len
        }),
        (any::<usize>(), extreme).prop_map(|(p, v)| Mutation::Field(p, v)),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(p, b)| Mutation::Insert(p, b)),
    ]
}

fn apply(bytes: &mut Vec<u8>, m: &Mutation) {
    if bytes.is_empty() {
        return;
    }
    let n = bytes.len();
    match m {
        Mutation::Flip(p, b) => bytes[p % n] ^= 1 << b,
        Mutation::Truncate(p) => bytes.truncate(p % n),
        Mutation::Splice { from, to, len } => {
            let (from, to) = (from % n, to % n);
            let len = (*len).min(n - from).min(n - to);
            let chunk = bytes[from..from + len].to_vec();
            bytes[to..to + len].copy_from_slice(&chunk);
        }
        Mutation::Field(p, v) => {
            let p = p % n;
            let len = 8.min(n - p);
            bytes[p..p + len].copy_from_slice(&v.to_le_bytes()[..len]);
        }
        Mutation::Insert(p, b) => {
            let p = p % n;
            bytes.splice(p..p, b.iter().copied());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn valid_files_round_trip(c in content()) {
        let bytes = build(&c);
        let g = Gguf::from_bytes(bytes.clone()).unwrap();
        let kvs: Vec<_> = g.metadata().iter().filter(|(k, _)| *k != "general.alignment").map(|(k, v)| (k.to_string(), v.clone())).collect();
        prop_assert_eq!(&kvs, &c.kvs);
        prop_assert_eq!(g.tensors().len(), c.tensors.len());
        for (t, (dt, shape, _)) in g.tensors().iter().zip(&c.tensors) {
            prop_assert_eq!(t.dtype, *dt);
            prop_assert_eq!(t.shape(), &shape[..]);
            prop_assert_eq!(t.data_offset % g.alignment(), 0);
        }
        let mut again = Vec::new();
        GgufWriter::from_gguf(&g).unwrap().write_to(&mut again).unwrap();
        prop_assert!(again == bytes);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 100_000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn mutated_files_never_panic(c in content(), ms in prop::collection::vec(mutation(), 1..4)) {
        let mut bytes = build(&c);
        for m in &ms {
            apply(&mut bytes, m);
        }
        check_accepted(bytes);
    }
}
