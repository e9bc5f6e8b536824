//! Shared helpers for tokenizer tests: an in-memory GGUF metadata map, an adapter over the real
//! GGUF reader, and the golden fixture.

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::PathBuf;

use kestrel_model::tokenizer::GgufMetadata;
use kestrel_model::weights::gguf::{GgufFile, MetaArray, MetaValue};

/// One metadata value of the in-memory map.
#[derive(Debug, Clone)]
pub enum Val {
    Str(String),
    Strs(Vec<String>),
    U32(u32),
    I32s(Vec<i32>),
    F32s(Vec<f32>),
    Bool(bool),
}

/// GGUF metadata held in a map, for tests that need no file.
#[derive(Debug, Clone, Default)]
pub struct MapMeta(pub HashMap<String, Val>);

impl MapMeta {
    pub fn set(&mut self, key: &str, v: Val) -> &mut Self {
        self.0.insert(key.to_string(), v);
        self
    }

    pub fn remove(&mut self, key: &str) -> &mut Self {
        self.0.remove(key);
        self
    }
}

impl GgufMetadata for MapMeta {
    fn get_str(&self, key: &str) -> Option<&str> {
        match self.0.get(key)? {
            Val::Str(s) => Some(s),
            _ => None,
        }
    }
    fn get_str_array(&self, key: &str) -> Option<Vec<&str>> {
        match self.0.get(key)? {
            Val::Strs(v) => Some(v.iter().map(String::as_str).collect()),
            _ => None,
        }
    }
    fn get_u32(&self, key: &str) -> Option<u32> {
        match self.0.get(key)? {
            Val::U32(v) => Some(*v),
            _ => None,
        }
    }
    fn get_i32_array(&self, key: &str) -> Option<Vec<i32>> {
        match self.0.get(key)? {
            Val::I32s(v) => Some(v.clone()),
            _ => None,
        }
    }
    fn get_f32_array(&self, key: &str) -> Option<Vec<f32>> {
        match self.0.get(key)? {
            Val::F32s(v) => Some(v.clone()),
            _ => None,
        }
    }
    fn get_bool(&self, key: &str) -> Option<bool> {
        match self.0.get(key)? {
            Val::Bool(v) => Some(*v),
            _ => None,
        }
    }
}

/// [`GgufMetadata`] over the crate's GGUF reader.
pub struct FileMeta<'a>(pub &'a GgufFile);

impl GgufMetadata for FileMeta<'_> {
    fn get_str(&self, key: &str) -> Option<&str> {
        self.0.get(key)?.as_str()
    }
    fn get_str_array(&self, key: &str) -> Option<Vec<&str>> {
        match self.0.get(key)? {
            MetaValue::Array(MetaArray::String(v)) => Some(v.iter().map(String::as_str).collect()),
            _ => None,
        }
    }
    fn get_u32(&self, key: &str) -> Option<u32> {
        self.0.get(key)?.as_u32()
    }
    fn get_i32_array(&self, key: &str) -> Option<Vec<i32>> {
        match self.0.get(key)? {
            MetaValue::Array(MetaArray::I32(v)) => Some(v.clone()),
            _ => None,
        }
    }
    fn get_f32_array(&self, key: &str) -> Option<Vec<f32>> {
        match self.0.get(key)? {
            MetaValue::Array(MetaArray::F32(v)) => Some(v.clone()),
            _ => None,
        }
    }
    fn get_bool(&self, key: &str) -> Option<bool> {
        self.0.get(key)?.as_bool()
    }
}

/// The default model's path; panics with a clear message when the variable is unset.
pub fn default_model_path() -> PathBuf {
    let path = std::env::var_os("KESTREL_DEFAULT_MODEL").unwrap_or_else(|| {
        panic!("KESTREL_DEFAULT_MODEL is not set: point it at SmolLM2-135M-Instruct.Q4_1.gguf")
    });
    let path = PathBuf::from(path);
    assert!(
        path.is_file(),
        "KESTREL_DEFAULT_MODEL={} is not a file",
        path.display()
    );
    path
}

/// The golden fixture written by scripts/gen_tokenizer_goldens.py.
pub fn fixture() -> serde_json::Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/tokenizer/smollm2.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).expect("fixture is JSON")
}

/// GPT-2's byte → printable character table (bytes that are printable map to themselves, the
/// rest to U+0100 upwards in byte order).
pub fn byte_chars() -> Vec<char> {
    let printable =
        |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
    let mut next = 256u32;
    (0u32..256)
        .map(|b| {
            if printable(b) {
                char::from_u32(b).expect("latin-1 is valid")
            } else {
                let c = char::from_u32(next).expect("below the surrogates");
                next += 1;
                c
            }
        })
        .collect()
}
