//! Hostile element counts in GGUF metadata: counts that pass the "fits in the bytes left"
//! check at the smallest encoding must not reserve memory ahead of the elements actually read
//! (nested arrays would otherwise reserve at every level), and must end in a typed error.

use crate::gguf_common;

use gguf_common::*;
use kestrel_model::weights::gguf::{GgufError, MetaArray, MetaValue};

const ARRAY: u32 = 9;
const STRING: u32 = 8;

/// `depth` nested arrays, each claiming as many elements as the remaining bytes allow at 12
/// bytes each, over `zeros` zero bytes, which hold far fewer.
fn nested(depth: usize, zeros: usize) -> Raw {
    let claim = (zeros / 12) as u64;
    let mut raw = Raw::header(3, 0, 1).str("k").u32(ARRAY);
    for _ in 0..depth {
        raw = raw.u32(ARRAY).u64(claim);
    }
    raw.u32(STRING).u64(claim).zeros(zeros)
}

#[test]
fn nested_claims_beyond_the_content_are_a_typed_error() {
    let e = nested(7, 1 << 20).parse().unwrap_err();
    assert!(
        matches!(
            e,
            GgufError::Truncated { .. } | GgufError::AbsurdCount { .. }
        ),
        "{e}"
    );
}

#[test]
fn capacity_follows_the_elements_read_not_the_declared_count() {
    // 5000 empty u8 arrays: valid, 12 bytes each.
    let raw = Raw::header(3, 0, 1)
        .str("k")
        .u32(ARRAY)
        .u32(ARRAY)
        .u64(5000)
        .zeros(5000 * 12);
    let file = raw.parse().expect("valid file");
    let Some(MetaValue::Array(MetaArray::Array(items))) = file.get("k") else {
        panic!("not an array of arrays");
    };
    assert_eq!(items.len(), 5000);
    // Reserving the declared count up front would give exactly 5000.
    assert_ne!(items.capacity(), 5000, "reserved from the declared count");
}
