//! [`UnknownFields`]: the top-level request fields a wire type does not know, found the same
//! way for every route.
//!
//! Serde's derive hands a struct's field names to the deserializer
//! (`deserialize_struct(name, FIELDS, visitor)`); [`field_names`] asks a probe deserializer for
//! them once per type, and [`UnknownFields::of`] compares a parsed body's keys with them. The
//! [`crate::extract::Wire`] extractor then either ignores the fields with a warning naming them
//! (the default, as vLLM does, so newer or vendor fields keep working) or refuses the request
//! (`--strict-api`).

use std::fmt;

use serde::de::{self, Deserialize, Visitor};

/// The top-level keys of a body that its wire type does not declare, sorted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnknownFields(pub Vec<String>);

impl UnknownFields {
    /// The keys of `body` (a JSON object) that `T` does not declare; empty when `body` is not
    /// an object or `T` is not a plain struct.
    pub fn of<'de, T: Deserialize<'de>>(body: &serde_json::Value) -> UnknownFields {
        let (Some(map), Some(known)) = (body.as_object(), field_names::<T>()) else {
            return UnknownFields::default();
        };
        let mut unknown: Vec<String> = map
            .keys()
            .filter(|k| !known.contains(&k.as_str()))
            .cloned()
            .collect();
        unknown.sort();
        UnknownFields(unknown)
    }

    /// Whether every field was known.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for UnknownFields {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<String> = self.0.iter().map(|k| format!("`{k}`")).collect();
        f.write_str(&names.join(", "))
    }
}

/// The field names serde's derive declares for struct `T` (`None` for anything that does not
/// deserialize as a struct, such as an enum or a flattened struct).
pub fn field_names<'de, T: Deserialize<'de>>() -> Option<&'static [&'static str]> {
    match T::deserialize(FieldProbe) {
        Err(Probe::Fields(fields)) => Some(fields),
        _ => None,
    }
}

/// The probe's only outcomes: the struct's fields, or "not a struct".
#[derive(Debug)]
enum Probe {
    Fields(&'static [&'static str]),
    NotAStruct,
}

impl fmt::Display for Probe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("field probe")
    }
}

impl std::error::Error for Probe {}

impl de::Error for Probe {
    fn custom<M: fmt::Display>(_msg: M) -> Self {
        Probe::NotAStruct
    }
}

/// A deserializer that yields no data: it stops at the first call, reporting the fields of
/// `deserialize_struct`.
struct FieldProbe;

impl<'de> de::Deserializer<'de> for FieldProbe {
    type Error = Probe;

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Probe> {
        Err(Probe::NotAStruct)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Probe> {
        Err(Probe::Fields(fields))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct Body {
        prompt: String,
        #[serde(default)]
        n: Option<i64>,
    }

    #[test]
    fn finds_the_keys_a_struct_does_not_declare() {
        assert_eq!(field_names::<Body>(), Some(&["prompt", "n"][..]));
        let body = json!({"prompt": "hi", "frob": 1, "n": 2, "vendor_x": true});
        let unknown = UnknownFields::of::<Body>(&body);
        assert_eq!(unknown.0, vec!["frob".to_string(), "vendor_x".to_string()]);
        assert_eq!(unknown.to_string(), "`frob`, `vendor_x`");
        assert!(UnknownFields::of::<Body>(&json!({"prompt": "x"})).is_empty());
        assert!(UnknownFields::of::<Body>(&json!([1, 2])).is_empty());
        assert_eq!(field_names::<String>(), None);
    }
}
