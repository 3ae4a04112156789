//! Every rule ggml's reader enforces, each broken on purpose: a typed error, never a panic.

use tessera_gguf::{Gguf, GgufError};

/// Raw GGUF bytes built field by field, so any field can be made wrong.
#[derive(Default)]
struct Raw(Vec<u8>);

impl Raw {
    fn header(version: u32, n_tensors: i64, n_kv: i64) -> Raw {
        let mut r = Raw(b"GGUF".to_vec());
        r.u32(version).i64(n_tensors).i64(n_kv);
        r
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend(v.to_le_bytes());
        self
    }
    fn i32(&mut self, v: i32) -> &mut Self {
        self.0.extend(v.to_le_bytes());
        self
    }
    fn i64(&mut self, v: i64) -> &mut Self {
        self.0.extend(v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend(v.to_le_bytes());
        self
    }
    fn str(&mut self, s: &str) -> &mut Self {
        self.u64(s.len() as u64);
        self.0.extend(s.as_bytes());
        self
    }
    fn kv_u32(&mut self, k: &str, v: u32) -> &mut Self {
        self.str(k).i32(4).u32(v)
    }
    fn tensor(&mut self, name: &str, ne: &[i64], ty: i32, offset: u64) -> &mut Self {
        self.str(name).u32(ne.len() as u32);
        for d in ne {
            self.i64(*d);
        }
        self.i32(ty).u64(offset)
    }
    fn pad_data(&mut self, align: usize, data_len: usize) -> &mut Self {
        while self.0.len() % align != 0 {
            self.0.push(0);
        }
        self.0.extend(std::iter::repeat_n(0u8, data_len));
        self
    }
    fn parse(&self) -> Result<Gguf<Vec<u8>>, GgufError> {
        Gguf::from_bytes(self.0.clone())
    }
}

fn err(r: &Raw) -> GgufError {
    r.parse().expect_err("must be rejected")
}

#[test]
fn a_minimal_valid_file_parses() {
    let mut r = Raw::header(3, 1, 1);
    r.kv_u32("a", 1).tensor("t", &[4, 2], 0, 0).pad_data(32, 32);
    let g = r.parse().unwrap();
    assert_eq!(g.tensors()[0].n_bytes, 32);
    assert_eq!(g.data_offset() % 32, 0);
    // v2 has the same layout.
    let mut r = Raw::header(2, 0, 0);
    r.0.truncate(r.0.len());
    assert!(r.parse().is_ok());
}

#[test]
fn bad_magic_and_versions() {
    let mut r = Raw::header(3, 0, 0);
    r.0[0] = b'X';
    assert!(matches!(err(&r), GgufError::BadMagic { .. }));
    for v in [0u32, 1, 4, 0x0300_0000] {
        assert!(
            matches!(err(&Raw::header(v, 0, 0)), GgufError::UnsupportedVersion { version } if version == v)
        );
    }
    let e = err(&Raw::header(1, 0, 0)).to_string();
    assert!(e.contains("v1"), "{e}");
}

#[test]
fn truncated_everywhere() {
    let mut r = Raw::header(3, 1, 1);
    r.kv_u32("key", 1).tensor("t", &[4], 0, 0).pad_data(32, 16);
    let full = r.0.clone();
    for cut in 0..full.len() - 1 {
        let res = Gguf::from_bytes(full[..cut].to_vec());
        assert!(res.is_err(), "cut at {cut} accepted");
    }
}

#[test]
fn negative_and_huge_counts() {
    assert!(matches!(err(&Raw::header(3, -1, 0)), GgufError::BadCount { .. }));
    assert!(matches!(err(&Raw::header(3, 0, -1)), GgufError::BadCount { .. }));
    assert!(matches!(err(&Raw::header(3, i64::MAX, 0)), GgufError::BadCount { .. }));
    assert!(matches!(err(&Raw::header(3, 0, i64::MAX)), GgufError::BadCount { .. }));
    let mut r = Raw::header(3, 0, 1);
    r.str("arr").i32(9).i32(4).u64(u64::MAX);
    assert!(matches!(err(&r), GgufError::BadCount { .. }));
    let mut r = Raw::header(3, 0, 1);
    r.str("arr").i32(9).i32(8).u64(1 << 40);
    assert!(matches!(err(&r), GgufError::BadCount { .. }));
}

#[test]
fn string_lengths() {
    let mut r = Raw::header(3, 0, 1);
    r.u64(1 << 31).0.extend([b'k'; 16]);
    assert!(matches!(err(&r), GgufError::StringTooLong { .. }));
    let mut r = Raw::header(3, 0, 1);
    r.u64(100).0.extend([b'k'; 16]);
    assert!(matches!(err(&r), GgufError::Truncated { .. }));
}

#[test]
fn keys_empty_duplicate_and_value_types() {
    let mut r = Raw::header(3, 0, 1);
    r.kv_u32("", 1);
    assert!(matches!(err(&r), GgufError::EmptyKey { .. }));
    let mut r = Raw::header(3, 0, 2);
    r.kv_u32("k", 1).kv_u32("k", 2);
    assert!(matches!(err(&r), GgufError::DuplicateKey { key } if key == "k"));
    for ty in [-1, 13, 100] {
        let mut r = Raw::header(3, 0, 1);
        r.str("k").i32(ty).u32(0);
        assert!(matches!(err(&r), GgufError::BadValueType { nested: false, .. }));
    }
    let mut r = Raw::header(3, 0, 1);
    r.str("k").i32(9).i32(9).u64(0);
    assert!(matches!(err(&r), GgufError::BadValueType { nested: true, .. }));
    // Every valid scalar type reads.
    for (ty, size) in
        [(0, 1), (1, 1), (2, 2), (3, 2), (4, 4), (5, 4), (6, 4), (7, 1), (10, 8), (11, 8), (12, 8)]
    {
        let mut r = Raw::header(3, 0, 1);
        r.str("k").i32(ty);
        r.0.extend(std::iter::repeat_n(1u8, size));
        assert!(r.parse().is_ok(), "type {ty}");
    }
}

#[test]
fn alignment_rules() {
    let mut r = Raw::header(3, 0, 1);
    r.kv_u32("general.alignment", 48);
    assert!(matches!(err(&r), GgufError::BadAlignment { .. }));
    let mut r = Raw::header(3, 0, 1);
    r.kv_u32("general.alignment", 0);
    assert!(matches!(err(&r), GgufError::BadAlignment { .. }));
    let mut r = Raw::header(3, 0, 1);
    r.str("general.alignment").i32(5).i32(64);
    assert!(matches!(err(&r), GgufError::BadAlignment { .. }));
    let mut r = Raw::header(3, 1, 1);
    r.kv_u32("general.alignment", 64).tensor("t", &[4], 0, 0).pad_data(64, 16);
    let g = r.parse().unwrap();
    assert_eq!(g.data_offset() % 64, 0);
    assert_eq!(g.alignment(), 64);
}

#[test]
fn tensor_infos() {
    let one = |name: &str, ne: &[i64], ty: i32, off: u64, data: usize| {
        let mut r = Raw::header(3, 1, 0);
        r.tensor(name, ne, ty, off).pad_data(32, data);
        r
    };
    let long = "x".repeat(64);
    assert!(matches!(err(&one(&long, &[4], 0, 0, 16)), GgufError::NameTooLong { len: 64, .. }));
    assert!(one(&"x".repeat(63), &[4], 0, 0, 16).parse().is_ok());
    assert!(matches!(err(&one("t", &[1, 1, 1, 1, 1], 0, 0, 16)), GgufError::BadShape { .. }));
    assert!(matches!(err(&one("t", &[4, -1], 0, 0, 16)), GgufError::BadShape { .. }));
    assert!(matches!(err(&one("t", &[1 << 40, 1 << 40], 0, 0, 16)), GgufError::BadShape { .. }));
    assert!(matches!(err(&one("t", &[33], 2, 0, 64)), GgufError::BadShape { .. }));
    assert!(matches!(err(&one("t", &[4], 4, 0, 64)), GgufError::BadType { .. }));
    assert!(matches!(err(&one("t", &[4], 43, 0, 64)), GgufError::BadType { .. }));
    assert!(matches!(err(&one("t", &[4], -1, 0, 64)), GgufError::BadType { .. }));
    assert!(matches!(err(&one("t", &[4], 0, 32, 64)), GgufError::BadOffset { .. }));
    assert!(matches!(err(&one("t", &[4], 0, 0, 8)), GgufError::DataPastEnd { .. }));
    assert!(one("t", &[0, 5], 0, 0, 0).parse().is_ok());

    let mut r = Raw::header(3, 2, 0);
    r.tensor("t", &[4], 0, 0).tensor("t", &[4], 0, 32).pad_data(32, 64);
    assert!(matches!(err(&r), GgufError::DuplicateTensor { .. }));
    // Second tensor must start at the padded end of the first (16 bytes -> 32).
    let mut r = Raw::header(3, 2, 0);
    r.tensor("a", &[4], 0, 0).tensor("b", &[4], 0, 16).pad_data(32, 64);
    assert!(matches!(err(&r), GgufError::BadOffset { expected: 32, .. }));
    let mut r = Raw::header(3, 2, 0);
    r.tensor("a", &[4], 0, 0).tensor("b", &[4], 0, 32).pad_data(32, 64);
    assert!(r.parse().is_ok());
}

#[test]
fn errors_name_the_file_key_and_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.gguf");
    let mut r = Raw::header(3, 1, 0);
    r.tensor("blk.0.attn_q.weight", &[33], 2, 0).pad_data(32, 64);
    std::fs::write(&p, &r.0).unwrap();
    let e = tessera_gguf::GgufFile::open(&p).unwrap_err().to_string();
    assert!(e.contains("bad.gguf") && e.contains("blk.0.attn_q.weight"), "{e}");
    let e = tessera_gguf::GgufFile::open(dir.path().join("missing.gguf")).unwrap_err().to_string();
    assert!(e.contains("missing.gguf"), "{e}");

    let mut r = Raw::header(3, 0, 1);
    r.kv_u32("llama.block_count", 3);
    let g = r.parse().unwrap();
    let e = g.metadata().get_f32("llama.block_count").unwrap_err().to_string();
    assert!(
        e.contains("llama.block_count") && e.contains("UINT32") && e.contains("FLOAT32"),
        "{e}"
    );
    let e = g.metadata().get_str("general.name").unwrap_err().to_string();
    assert!(e.contains("general.name"), "{e}");
}
