//! Test helpers for GGUF: a raw byte builder (for hand-made and corrupt files) and a small
//! valid sample file made with `GgufWriter`.
#![allow(dead_code)]

use kestrel_kernels::{DType, SharedBytes};
use kestrel_model::weights::gguf::{GgufError, GgufFile, GgufWriter, MetaArray, MetaValue};

/// Builds GGUF bytes field by field, recording the offset after every field (`marks`).
#[derive(Default, Clone)]
pub struct Raw {
    pub buf: Vec<u8>,
    pub marks: Vec<usize>,
}

impl Raw {
    pub fn new() -> Raw {
        Raw::default()
    }
    pub fn bytes(mut self, b: &[u8]) -> Raw {
        self.buf.extend_from_slice(b);
        self.marks.push(self.buf.len());
        self
    }
    pub fn u32(self, v: u32) -> Raw {
        self.bytes(&v.to_le_bytes())
    }
    pub fn u64(self, v: u64) -> Raw {
        self.bytes(&v.to_le_bytes())
    }
    pub fn str(self, s: &str) -> Raw {
        self.u64(s.len() as u64).bytes(s.as_bytes())
    }
    /// Magic, version, tensor count, kv count.
    pub fn header(version: u32, n_tensors: u64, n_kv: u64) -> Raw {
        Raw::new()
            .bytes(b"GGUF")
            .u32(version)
            .u64(n_tensors)
            .u64(n_kv)
    }
    /// A u32-valued key/value pair.
    pub fn kv_u32(self, key: &str, v: u32) -> Raw {
        self.str(key).u32(4).u32(v)
    }
    /// A tensor info record.
    pub fn tensor(self, name: &str, dims: &[u64], type_id: u32, offset: u64) -> Raw {
        let mut r = self.str(name).u32(dims.len() as u32);
        for &d in dims {
            r = r.u64(d);
        }
        r.u32(type_id).u64(offset)
    }
    /// Zero padding up to a multiple of `align`.
    pub fn pad(mut self, align: usize) -> Raw {
        let n = self.buf.len().next_multiple_of(align);
        self.buf.resize(n, 0);
        self.marks.push(n);
        self
    }
    pub fn zeros(mut self, n: usize) -> Raw {
        self.buf.resize(self.buf.len() + n, 0);
        self.marks.push(self.buf.len());
        self
    }
    pub fn parse(&self) -> Result<GgufFile, GgufError> {
        parse(self.buf.clone())
    }
}

pub fn parse(bytes: Vec<u8>) -> Result<GgufFile, GgufError> {
    GgufFile::from_bytes(SharedBytes::from_vec(bytes))
}

/// Little-endian bytes of `values`.
pub fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// A valid file with one value of every metadata type, nested arrays and three tensors
/// (F32 [2, 3], F16 [4], Q8_0 [2, 32]).
pub fn sample_writer() -> GgufWriter {
    let mut w = GgufWriter::new();
    let meta: Vec<(&str, MetaValue)> = vec![
        ("general.architecture", MetaValue::String("llama".into())),
        ("t.u8", MetaValue::U8(200)),
        ("t.i8", MetaValue::I8(-100)),
        ("t.u16", MetaValue::U16(60000)),
        ("t.i16", MetaValue::I16(-30000)),
        ("t.u32", MetaValue::U32(4_000_000_000)),
        ("t.i32", MetaValue::I32(-2_000_000_000)),
        ("t.f32", MetaValue::F32(1.5)),
        ("t.bool", MetaValue::Bool(true)),
        ("t.string", MetaValue::String("héllo ✓".into())),
        ("t.u64", MetaValue::U64(u64::MAX)),
        ("t.i64", MetaValue::I64(i64::MIN)),
        ("t.f64", MetaValue::F64(-2.25)),
        (
            "t.arr_str",
            MetaValue::Array(MetaArray::String(vec!["a".into(), "".into(), "ccc".into()])),
        ),
        (
            "t.arr_i32",
            MetaValue::Array(MetaArray::I32(vec![-1, 0, 7])),
        ),
        (
            "t.arr_f32",
            MetaValue::Array(MetaArray::F32(vec![0.5, -0.25])),
        ),
        (
            "t.arr_bool",
            MetaValue::Array(MetaArray::Bool(vec![true, false])),
        ),
        ("t.arr_empty", MetaValue::Array(MetaArray::U64(vec![]))),
        (
            "t.nested",
            MetaValue::Array(MetaArray::Array(vec![
                MetaArray::U8(vec![1, 2]),
                MetaArray::Array(vec![MetaArray::String(vec!["deep".into()])]),
            ])),
        ),
    ];
    for (k, v) in meta {
        w.add_metadata(k, v).unwrap();
    }
    w.add_tensor(
        "a.f32",
        DType::F32,
        &[2, 3],
        f32_bytes(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
    )
    .unwrap();
    let f16: Vec<u8> = [1.0f32, -2.0, 0.5, 8.0]
        .iter()
        .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
        .collect();
    w.add_tensor("b.f16", DType::F16, &[4], f16).unwrap();
    let q8: Vec<u8> = (0..68u8).collect();
    w.add_tensor("c.q8_0", DType::Q8_0, &[2, 32], q8).unwrap();
    w
}

pub fn sample_bytes() -> Vec<u8> {
    sample_writer().to_bytes().unwrap()
}

/// A minimal valid file: one u32 key, two F32 tensors of 8 elements, alignment 32.
/// Returns the builder (its marks are the field boundaries).
pub fn minimal_raw() -> Raw {
    Raw::header(3, 2, 1)
        .kv_u32("k", 7)
        .tensor("x", &[8], 0, 0)
        .tensor("y", &[8], 0, 32)
        .pad(32)
        .zeros(64)
}
