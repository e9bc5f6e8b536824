//! GGUF metadata values: [`MetaType`] (the on-disk type ids), [`MetaValue`] (one value) and
//! [`MetaArray`] (a typed, possibly nested array).
//!
//! Arrays are stored per element type (`Vec<u32>`, `Vec<String>`, ...) rather than as a
//! `Vec<MetaValue>`, so a 150k-entry token list costs one `String` per token and nothing more.

/// A GGUF metadata value type, with its on-disk id as discriminant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum MetaType {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    Bool = 7,
    String = 8,
    Array = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12,
}

impl MetaType {
    const ALL: [MetaType; 13] = [
        MetaType::U8,
        MetaType::I8,
        MetaType::U16,
        MetaType::I16,
        MetaType::U32,
        MetaType::I32,
        MetaType::F32,
        MetaType::Bool,
        MetaType::String,
        MetaType::Array,
        MetaType::U64,
        MetaType::I64,
        MetaType::F64,
    ];

    /// The type with on-disk id `id`, or `None` if GGUF defines no such type.
    pub fn from_id(id: u32) -> Option<MetaType> {
        Self::ALL.into_iter().find(|t| *t as u32 == id)
    }

    /// The fewest bytes one value of this type takes on disk (a string is at least its 8-byte
    /// length, an array at least its 4-byte element type and 8-byte count).
    pub const fn min_encoded_size(self) -> usize {
        match self {
            MetaType::U8 | MetaType::I8 | MetaType::Bool => 1,
            MetaType::U16 | MetaType::I16 => 2,
            MetaType::U32 | MetaType::I32 | MetaType::F32 => 4,
            MetaType::U64 | MetaType::I64 | MetaType::F64 | MetaType::String => 8,
            MetaType::Array => 12,
        }
    }

    /// Lower-case type name, as used in error messages.
    pub const fn name(self) -> &'static str {
        match self {
            MetaType::U8 => "u8",
            MetaType::I8 => "i8",
            MetaType::U16 => "u16",
            MetaType::I16 => "i16",
            MetaType::U32 => "u32",
            MetaType::I32 => "i32",
            MetaType::F32 => "f32",
            MetaType::Bool => "bool",
            MetaType::String => "string",
            MetaType::Array => "array",
            MetaType::U64 => "u64",
            MetaType::I64 => "i64",
            MetaType::F64 => "f64",
        }
    }
}

/// One metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(MetaArray),
    U64(u64),
    I64(i64),
    F64(f64),
}

/// A metadata array: all elements share one type; arrays may nest.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaArray {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    String(Vec<String>),
    Array(Vec<MetaArray>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F64(Vec<f64>),
}

impl MetaValue {
    /// This value's type.
    pub fn meta_type(&self) -> MetaType {
        match self {
            MetaValue::U8(_) => MetaType::U8,
            MetaValue::I8(_) => MetaType::I8,
            MetaValue::U16(_) => MetaType::U16,
            MetaValue::I16(_) => MetaType::I16,
            MetaValue::U32(_) => MetaType::U32,
            MetaValue::I32(_) => MetaType::I32,
            MetaValue::F32(_) => MetaType::F32,
            MetaValue::Bool(_) => MetaType::Bool,
            MetaValue::String(_) => MetaType::String,
            MetaValue::Array(_) => MetaType::Array,
            MetaValue::U64(_) => MetaType::U64,
            MetaValue::I64(_) => MetaType::I64,
            MetaValue::F64(_) => MetaType::F64,
        }
    }

    /// The value as an `i128` if it is any integer type (lossless for all of them).
    pub fn as_integer(&self) -> Option<i128> {
        Some(match *self {
            MetaValue::U8(v) => v.into(),
            MetaValue::I8(v) => v.into(),
            MetaValue::U16(v) => v.into(),
            MetaValue::I16(v) => v.into(),
            MetaValue::U32(v) => v.into(),
            MetaValue::I32(v) => v.into(),
            MetaValue::U64(v) => v.into(),
            MetaValue::I64(v) => v.into(),
            _ => return None,
        })
    }

    /// Any integer value that fits in `u32`.
    pub fn as_u32(&self) -> Option<u32> {
        self.as_integer().and_then(|v| u32::try_from(v).ok())
    }

    /// Any integer value that fits in `u64`.
    pub fn as_u64(&self) -> Option<u64> {
        self.as_integer().and_then(|v| u64::try_from(v).ok())
    }

    /// Any integer value that fits in `i64`.
    pub fn as_i64(&self) -> Option<i64> {
        self.as_integer().and_then(|v| i64::try_from(v).ok())
    }

    /// An `f32`, or an `f64` narrowed to `f32`.
    pub fn as_f32(&self) -> Option<f32> {
        match *self {
            MetaValue::F32(v) => Some(v),
            MetaValue::F64(v) => Some(v as f32),
            _ => None,
        }
    }

    /// An `f64`, or an `f32` widened to `f64`.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            MetaValue::F32(v) => Some(v.into()),
            MetaValue::F64(v) => Some(v),
            _ => None,
        }
    }

    /// A `bool` value.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            MetaValue::Bool(v) => Some(v),
            _ => None,
        }
    }

    /// A string value.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            MetaValue::String(s) => Some(s),
            _ => None,
        }
    }

    /// An array value.
    pub fn as_array(&self) -> Option<&MetaArray> {
        match self {
            MetaValue::Array(a) => Some(a),
            _ => None,
        }
    }

    /// A short description of the type, e.g. `"u32"` or `"array of string"`, for errors.
    pub fn type_description(&self) -> String {
        match self {
            MetaValue::Array(a) => format!("array of {}", a.element_type().name()),
            other => other.meta_type().name().to_string(),
        }
    }
}

impl MetaArray {
    /// The type of the elements.
    pub fn element_type(&self) -> MetaType {
        match self {
            MetaArray::U8(_) => MetaType::U8,
            MetaArray::I8(_) => MetaType::I8,
            MetaArray::U16(_) => MetaType::U16,
            MetaArray::I16(_) => MetaType::I16,
            MetaArray::U32(_) => MetaType::U32,
            MetaArray::I32(_) => MetaType::I32,
            MetaArray::F32(_) => MetaType::F32,
            MetaArray::Bool(_) => MetaType::Bool,
            MetaArray::String(_) => MetaType::String,
            MetaArray::Array(_) => MetaType::Array,
            MetaArray::U64(_) => MetaType::U64,
            MetaArray::I64(_) => MetaType::I64,
            MetaArray::F64(_) => MetaType::F64,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            MetaArray::U8(v) => v.len(),
            MetaArray::I8(v) => v.len(),
            MetaArray::U16(v) => v.len(),
            MetaArray::I16(v) => v.len(),
            MetaArray::U32(v) => v.len(),
            MetaArray::I32(v) => v.len(),
            MetaArray::F32(v) => v.len(),
            MetaArray::Bool(v) => v.len(),
            MetaArray::String(v) => v.len(),
            MetaArray::Array(v) => v.len(),
            MetaArray::U64(v) => v.len(),
            MetaArray::I64(v) => v.len(),
            MetaArray::F64(v) => v.len(),
        }
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
