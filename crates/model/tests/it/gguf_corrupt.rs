//! Corrupt GGUF files: each defect must produce its specific `GgufError`, never a panic or a
//! huge allocation.

use crate::gguf_common;

use gguf_common::*;
use kestrel_model::weights::gguf::GgufError;

fn err(raw: &Raw) -> GgufError {
    match raw.parse() {
        Ok(f) => panic!("corrupt file parsed: {f:?}"),
        Err(e) => e,
    }
}

#[test]
fn minimal_file_is_valid() {
    let f = minimal_raw().parse().unwrap();
    assert_eq!(f.tensors().len(), 2);
    assert_eq!(f.data_start() % 32, 0);
}

#[test]
fn bad_magic() {
    let mut raw = minimal_raw();
    raw.buf[..4].copy_from_slice(b"GGML");
    assert!(matches!(err(&raw), GgufError::BadMagic { found } if &found == b"GGML"));
}

#[test]
fn unsupported_versions() {
    for version in [0u32, 1, 4, 99] {
        let e = err(&Raw::header(version, 0, 0));
        assert!(
            matches!(e, GgufError::UnsupportedVersion { version: v, hint: "" } if v == version),
            "{e}"
        );
    }
    let e = err(&Raw::header(3u32.swap_bytes(), 0, 0));
    assert!(e.to_string().contains("big-endian"), "{e}");
}

#[test]
fn truncation_at_every_header_boundary_is_reported_where_it_happens() {
    let raw = minimal_raw();
    let header_end = raw.marks[raw.marks.len() - 3]; // after the last tensor info
    for &cut in raw.marks.iter().filter(|&&m| m < header_end) {
        let e = match parse(raw.buf[..cut].to_vec()) {
            Ok(_) => panic!("file cut at {cut} parsed"),
            Err(e) => e,
        };
        match e {
            GgufError::Truncated {
                offset, file_size, ..
            } => {
                assert_eq!((offset, file_size), (cut, cut), "cut at {cut}")
            }
            // A count read just before the cut can no longer fit in what is left.
            GgufError::AbsurdCount { remaining, .. } => {
                assert!(remaining < 2 * 24, "cut at {cut}: {remaining}")
            }
            other => panic!("cut at {cut}: unexpected {other}"),
        }
    }
}

#[test]
fn truncation_at_every_offset_is_an_error() {
    let raw = minimal_raw();
    let data_start = raw.parse().unwrap().data_start();
    for cut in 0..raw.buf.len() {
        match parse(raw.buf[..cut].to_vec()) {
            Ok(_) => panic!("file cut at {cut} parsed"),
            Err(GgufError::TensorOutOfBounds { .. }) => {
                assert!(cut >= data_start - 31, "cut at {cut}")
            }
            Err(GgufError::Truncated { offset, .. }) => assert!(offset <= cut),
            Err(GgufError::AbsurdCount { .. }) => assert!(cut < data_start),
            Err(other) => panic!("cut at {cut}: unexpected {other}"),
        }
    }
}

#[test]
fn truncated_error_names_what_was_being_read() {
    let raw = Raw::header(3, 0, 1)
        .str("general.name")
        .u32(8)
        .u64(3)
        .bytes(b"abc");
    let cut = 24 + 8 + 12 + 4 + 2; // header, key, value type, then 2 bytes into the value's length
    let e = parse(raw.buf[..cut].to_vec()).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("general.name") && msg.contains("length"),
        "{msg}"
    );
}

#[test]
fn absurd_counts_are_rejected_before_allocating() {
    let e = err(&Raw::header(3, u64::MAX, 0));
    assert!(
        matches!(e, GgufError::AbsurdCount { ref what, count: u64::MAX, .. } if what == "tensor count"),
        "{e}"
    );
    let e = err(&Raw::header(3, 0, u64::MAX / 2));
    assert!(
        matches!(e, GgufError::AbsurdCount { ref what, .. } if what.contains("key/value count")),
        "{e}"
    );
    // key length
    let e = err(&Raw::header(3, 0, 1).u64(1 << 62).zeros(32));
    assert!(
        matches!(e, GgufError::AbsurdCount { ref what, .. } if what.contains("key length")),
        "{e}"
    );
    // string value length
    let e = err(&Raw::header(3, 0, 1)
        .str("s")
        .u32(8)
        .u64(1 << 40)
        .bytes(b"abc"));
    assert!(
        matches!(e, GgufError::AbsurdCount { ref what, .. } if what.contains("\"s\" value length")),
        "{e}"
    );
    // array length: 1000 u32 need 4000 bytes, 16 are left
    let e = err(&Raw::header(3, 0, 1)
        .str("a")
        .u32(9)
        .u32(4)
        .u64(1000)
        .zeros(16));
    assert!(
        matches!(e, GgufError::AbsurdCount { ref what, count: 1000, max: 4, .. } if what.contains("array length")),
        "{e}"
    );
    // array of strings: each needs at least 8 bytes
    let e = err(&Raw::header(3, 0, 1).str("a").u32(9).u32(8).u64(3).zeros(16));
    assert!(
        matches!(
            e,
            GgufError::AbsurdCount {
                count: 3,
                max: 2,
                ..
            }
        ),
        "{e}"
    );
    // tensor name length
    let e = err(&Raw::header(3, 1, 0).u64(u64::MAX).zeros(40));
    assert!(
        matches!(e, GgufError::AbsurdCount { ref what, .. } if what.contains("name length")),
        "{e}"
    );
}

#[test]
fn unknown_value_types() {
    let e = err(&Raw::header(3, 0, 1).str("k").u32(13).u32(0));
    assert!(
        matches!(e, GgufError::UnknownValueType { id: 13, .. }),
        "{e}"
    );
    let e = err(&Raw::header(3, 0, 1).str("k").u32(9).u32(77).u64(0));
    assert!(
        matches!(e, GgufError::UnknownValueType { id: 77, ref what, .. } if what.contains("element type")),
        "{e}"
    );
}

#[test]
fn invalid_bool_and_utf8() {
    let e = err(&Raw::header(3, 0, 1).str("b").u32(7).bytes(&[2]));
    assert!(matches!(e, GgufError::InvalidBool { byte: 2, .. }), "{e}");
    let e = err(&Raw::header(3, 0, 1)
        .str("b")
        .u32(9)
        .u32(7)
        .u64(2)
        .bytes(&[1, 5]));
    assert!(matches!(e, GgufError::InvalidBool { byte: 5, .. }), "{e}");
    let e = err(&Raw::header(3, 0, 1)
        .u64(2)
        .bytes(&[0xff, 0xfe])
        .u32(4)
        .u32(0));
    assert!(
        matches!(e, GgufError::InvalidUtf8 { ref what, offset: 32 } if what.contains("key")),
        "{e}"
    );
    let e = err(&Raw::header(3, 0, 1).str("s").u32(8).u64(1).bytes(&[0x80]));
    assert!(matches!(e, GgufError::InvalidUtf8 { .. }), "{e}");
}

#[test]
fn deeply_nested_arrays_are_rejected() {
    let mut raw = Raw::header(3, 0, 1).str("n").u32(9);
    for _ in 0..20 {
        raw = raw.u32(9).u64(1);
    }
    let raw = raw.u32(4).u64(0);
    assert!(matches!(
        err(&raw),
        GgufError::NestingTooDeep { max_depth: 8, .. }
    ));
}

#[test]
fn duplicate_keys_and_tensors() {
    let e = err(&Raw::header(3, 0, 2).kv_u32("k", 1).kv_u32("k", 2));
    assert!(
        matches!(e, GgufError::DuplicateKey { ref key } if key == "k"),
        "{e}"
    );
    let raw = Raw::header(3, 2, 0)
        .tensor("t", &[8], 0, 0)
        .tensor("t", &[8], 0, 32)
        .pad(32)
        .zeros(64);
    assert!(matches!(err(&raw), GgufError::DuplicateTensor { ref name } if name == "t"));
}

#[test]
fn bad_alignment() {
    for bad in [0u32, 3, 48] {
        let raw = Raw::header(3, 0, 1).kv_u32("general.alignment", bad);
        assert!(
            matches!(err(&raw), GgufError::BadAlignment { .. }),
            "alignment {bad}"
        );
    }
    let raw = Raw::header(3, 0, 1)
        .str("general.alignment")
        .u32(8)
        .str("32");
    assert!(matches!(err(&raw), GgufError::BadAlignment { .. }));
}

#[test]
fn unknown_tensor_types() {
    for (id, what) in [
        (34u32, "TQ1_0 (ggml type 34)"),
        (28, "F64 (ggml type 28)"),
        (99, "unknown type id 99"),
        (u32::MAX, "unknown type id 4294967295"),
    ] {
        let raw = Raw::header(3, 1, 0)
            .tensor("w", &[256], id, 0)
            .pad(32)
            .zeros(1024);
        let e = err(&raw);
        let msg = e.to_string();
        assert!(
            matches!(e, GgufError::UnknownTensorType { id: i, ref name, .. } if i == id && name == "w"),
            "{msg}"
        );
        assert!(msg.contains(what) && msg.contains("IQ4_XS"), "{msg}");
    }
}

#[test]
fn bad_tensor_dims() {
    let raw = Raw::header(3, 1, 0)
        .tensor("w", &[1, 1, 1, 1, 1], 0, 0)
        .pad(32)
        .zeros(32);
    assert!(matches!(
        err(&raw),
        GgufError::TooManyDims { n_dims: 5, .. }
    ));
    let raw = Raw::header(3, 1, 0)
        .tensor("w", &[1 << 40, 1 << 40], 0, 0)
        .pad(32)
        .zeros(32);
    assert!(matches!(err(&raw), GgufError::DimsOverflow { .. }));
    let raw = Raw::header(3, 1, 0)
        .tensor("w", &[u64::MAX], 0, 0)
        .pad(32)
        .zeros(32);
    assert!(matches!(err(&raw), GgufError::DimsOverflow { .. }));
    // Q4_0 (id 2) rows must be whole 32-element blocks.
    let raw = Raw::header(3, 1, 0)
        .tensor("w", &[33, 2], 2, 0)
        .pad(32)
        .zeros(64);
    let e = err(&raw);
    assert!(
        matches!(
            e,
            GgufError::NotBlockMultiple {
                ne0: 33,
                block_size: 32,
                ..
            }
        ),
        "{e}"
    );
}

/// The low-bit types: rows that are not whole 256-element (32 for MXFP4) blocks, and data
/// shorter than the type and shape need, are typed errors.
#[test]
fn low_bit_tensors_of_the_wrong_size() {
    for (id, block_size, block_bytes) in [
        (16u32, 256usize, 66usize),
        (17, 256, 74),
        (18, 256, 98),
        (19, 256, 50),
        (21, 256, 110),
        (22, 256, 82),
        (29, 256, 56),
        (39, 32, 17),
    ] {
        let ne0 = block_size as u64 + 16;
        let raw = Raw::header(3, 1, 0)
            .tensor("w", &[ne0, 2], id, 0)
            .pad(32)
            .zeros(4 * block_bytes);
        let e = err(&raw);
        assert!(
            matches!(e, GgufError::NotBlockMultiple { ne0: n, block_size: b, .. }
                if n == ne0 && b == block_size),
            "type {id}: {e}"
        );
        let raw = Raw::header(3, 1, 0)
            .tensor("w", &[block_size as u64, 3], id, 0)
            .pad(32)
            .zeros(3 * block_bytes - 1);
        let e = err(&raw);
        assert!(
            matches!(e, GgufError::TensorOutOfBounds { size, .. } if size == 3 * block_bytes as u64),
            "type {id}: {e}"
        );
        let raw = Raw::header(3, 1, 0)
            .tensor("w", &[block_size as u64, 3], id, 0)
            .pad(32)
            .zeros(3 * block_bytes);
        let file = raw.parse().unwrap_or_else(|e| panic!("type {id}: {e}"));
        assert_eq!(file.tensors()[0].size_bytes, 3 * block_bytes as u64);
    }
}

#[test]
fn tensor_data_out_of_bounds() {
    let raw = Raw::header(3, 1, 0)
        .tensor("w", &[16], 0, 0)
        .pad(32)
        .zeros(63);
    let e = err(&raw);
    assert!(
        matches!(e, GgufError::TensorOutOfBounds { size: 64, .. }),
        "{e}"
    );
    let raw = Raw::header(3, 1, 0)
        .tensor("w", &[8], 0, u64::MAX - 31)
        .pad(32)
        .zeros(64);
    assert!(matches!(err(&raw), GgufError::TensorOutOfBounds { .. }));
}

#[test]
fn misaligned_and_overlapping_offsets() {
    let raw = Raw::header(3, 1, 0)
        .tensor("w", &[4], 0, 16)
        .pad(32)
        .zeros(64);
    let e = err(&raw);
    assert!(
        matches!(
            e,
            GgufError::MisalignedOffset {
                offset: 16,
                alignment: 32,
                ..
            }
        ),
        "{e}"
    );
    let raw = Raw::header(3, 2, 0)
        .tensor("a", &[16], 0, 32)
        .tensor("b", &[16], 0, 0)
        .pad(32)
        .zeros(128);
    let e = err(&raw);
    assert!(
        matches!(e, GgufError::OverlappingTensors { ref first, ref second, first_end: 64, second_start: 32 }
            if first == "b" && second == "a"),
        "{e}"
    );
}

#[test]
fn random_byte_mutations_never_panic() {
    use rand::{Rng, SeedableRng};
    let base = sample_bytes();
    let header_len = parse(base.clone()).unwrap().data_start();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0x6767_7566);
    let (mut ok, mut failed) = (0, 0);
    for _ in 0..5000 {
        let mut bytes = base.clone();
        for _ in 0..rng.gen_range(1..=6) {
            let at = rng.gen_range(0..header_len);
            bytes[at] = match rng.gen_range(0..4) {
                0 => rng.gen(),
                1 => 0xff,
                2 => 0,
                _ => bytes[at].wrapping_add(1),
            };
        }
        if rng.gen_bool(0.2) {
            bytes.truncate(rng.gen_range(0..bytes.len()));
        }
        match parse(bytes) {
            Ok(f) => {
                ok += 1;
                for info in f.tensors() {
                    let data = f.tensor_data(info).expect("validated tensor has data");
                    assert_eq!(data.len() as u64, info.size_bytes);
                }
                for (key, value) in f.metadata() {
                    assert!(!value.type_description().is_empty(), "{key}");
                }
            }
            Err(e) => {
                failed += 1;
                assert!(!e.to_string().is_empty());
            }
        }
    }
    assert!(
        failed > 1000 && ok > 10,
        "mutations should both break and spare files: ok {ok}, failed {failed}"
    );
}
