//! GgufWriter -> GgufFile round trips: every metadata type, nested arrays, typed getters,
//! tensor layout and TensorSource views.

use crate::gguf_common;

use gguf_common::*;
use kestrel_kernels::DType;
use kestrel_model::weights::gguf::{
    GgufError, GgufWriteError, GgufWriter, MetaArray, MetaValue, OptionalKey,
};
use kestrel_model::weights::TensorSource;

#[test]
fn metadata_of_every_type_round_trips_in_order() {
    let w = sample_writer();
    let f = parse(w.to_bytes().unwrap()).unwrap();
    assert_eq!(f.version(), 3);
    let keys: Vec<&str> = f.metadata().iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys.len(), 19);
    assert_eq!(keys[0], "general.architecture");
    assert_eq!(keys[18], "t.nested");
    assert_eq!(f.get("t.u8"), Some(&MetaValue::U8(200)));
    assert_eq!(f.get("t.i8"), Some(&MetaValue::I8(-100)));
    assert_eq!(f.get("t.u16"), Some(&MetaValue::U16(60000)));
    assert_eq!(f.get("t.i16"), Some(&MetaValue::I16(-30000)));
    assert_eq!(f.get("t.i32"), Some(&MetaValue::I32(-2_000_000_000)));
    assert_eq!(f.get("t.u64"), Some(&MetaValue::U64(u64::MAX)));
    assert_eq!(f.get("t.i64"), Some(&MetaValue::I64(i64::MIN)));
    assert_eq!(f.get("t.f64"), Some(&MetaValue::F64(-2.25)));
    assert_eq!(f.get("t.bool"), Some(&MetaValue::Bool(true)));
    assert_eq!(f.get_str("t.string").unwrap(), "héllo ✓");
    let nested = f.get_array("t.nested").unwrap();
    let MetaArray::Array(inner) = nested else {
        panic!("expected nested array, got {nested:?}")
    };
    assert_eq!(inner[0], MetaArray::U8(vec![1, 2]));
    assert_eq!(
        inner[1],
        MetaArray::Array(vec![MetaArray::String(vec!["deep".into()])])
    );
    assert!(f.get_array("t.arr_empty").unwrap().is_empty());
    assert_eq!(f.get("missing"), None);
}

#[test]
fn typed_getters_convert_and_reject_clearly() {
    let f = parse(sample_bytes()).unwrap();
    assert_eq!(f.get_u32("t.u32").unwrap(), 4_000_000_000);
    assert_eq!(f.get_u32("t.u8").unwrap(), 200);
    assert_eq!(f.get_u64("t.u64").unwrap(), u64::MAX);
    assert_eq!(f.get_i64("t.i32").unwrap(), -2_000_000_000);
    assert_eq!(f.get_f32("t.f32").unwrap(), 1.5);
    assert_eq!(f.get_f32("t.f64").unwrap(), -2.25);
    assert!(f.get_bool("t.bool").unwrap());
    assert_eq!(f.get_str_array("t.arr_str").unwrap(), ["a", "", "ccc"]);
    assert_eq!(f.get_i32_array("t.arr_i32").unwrap(), [-1, 0, 7]);
    assert_eq!(f.get_f32_array("t.arr_f32").unwrap(), [0.5, -0.25]);

    let err = f.get_u32("t.i32").unwrap_err();
    assert!(
        matches!(err, GgufError::WrongType { ref key, .. } if key == "t.i32"),
        "{err}"
    );
    let err = f.get_u32("t.string").unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("t.string") && msg.contains("string") && msg.contains("u32"),
        "{msg}"
    );
    let err = f.get_str_array("t.arr_i32").unwrap_err();
    assert!(err.to_string().contains("array of i32"), "{err}");
    assert!(matches!(
        f.get_f32("t.u32"),
        Err(GgufError::WrongType { .. })
    ));
    assert!(matches!(f.get_str("nope"), Err(GgufError::MissingKey { ref key }) if key == "nope"));
    assert_eq!(f.get_u32("nope").optional().unwrap(), None);
    assert_eq!(f.get_u32("t.u16").optional().unwrap(), Some(60000));
    assert!(f.get_u32("t.string").optional().is_err());
}

#[test]
fn tensors_are_aligned_and_served_row_major() {
    let f = parse(sample_bytes()).unwrap();
    assert_eq!(f.alignment(), 32);
    assert_eq!(f.data_start() % 32, 0);
    let infos = f.tensors();
    assert_eq!(infos.len(), 3);
    assert_eq!(infos[0].dims, vec![3, 2], "ggml order: ne0 innermost");
    assert_eq!(infos[0].shape(), vec![2, 3]);
    assert_eq!((infos[0].offset, infos[0].size_bytes), (0, 24));
    assert_eq!((infos[1].offset, infos[1].dtype), (32, DType::F16));
    assert_eq!((infos[2].offset, infos[2].size_bytes), (64, 68));
    assert_eq!(f.file_size(), f.data_start() + 64 + 68);

    let a = f.tensor("a.f32").unwrap();
    assert_eq!(a.shape, vec![2, 3]);
    assert_eq!(a.n_elements(), 6);
    assert_eq!(&a.data[..], &f32_bytes(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])[..]);
    let c = f.tensor("c.q8_0").unwrap();
    assert_eq!((c.dtype, c.shape.clone()), (DType::Q8_0, vec![2, 32]));
    assert_eq!(c.data[67], 67);
    assert!(f.tensor("nope").is_none());
    assert_eq!(f.tensor_names(), ["a.f32", "b.f16", "c.q8_0"]);
}

#[test]
fn tensor_data_rejects_foreign_infos() {
    let f = parse(sample_bytes()).unwrap();
    let mut info = f.tensors()[0].clone();
    assert!(f.tensor_data(&info).is_some());
    info.offset += 32;
    assert!(f.tensor_data(&info).is_none());
}

#[test]
fn custom_alignment_is_honoured() {
    let mut w = GgufWriter::new();
    w.add_metadata("general.alignment", MetaValue::U32(64))
        .unwrap();
    w.add_tensor("a", DType::F32, &[3], f32_bytes(&[1.0, 2.0, 3.0]))
        .unwrap();
    w.add_tensor("b", DType::F32, &[1], f32_bytes(&[9.0]))
        .unwrap();
    let f = parse(w.to_bytes().unwrap()).unwrap();
    assert_eq!(f.alignment(), 64);
    assert_eq!(f.data_start() % 64, 0);
    assert_eq!(f.tensors()[1].offset, 64);
    assert_eq!(&f.tensor("b").unwrap().data[..], &9.0f32.to_le_bytes());
}

#[test]
fn version_2_files_parse() {
    let bytes = Raw::header(2, 1, 1)
        .kv_u32("k", 1)
        .tensor("x", &[4], 0, 0)
        .pad(32)
        .zeros(16)
        .buf;
    let f = parse(bytes).unwrap();
    assert_eq!(f.version(), 2);
    assert_eq!(f.tensors()[0].shape(), vec![4]);
}

#[test]
fn file_without_tensors_needs_no_padding() {
    let f = Raw::header(3, 0, 1).kv_u32("k", 5).parse().unwrap();
    assert!(f.tensors().is_empty());
    assert_eq!(f.get_u32("k").unwrap(), 5);
}

#[test]
fn writer_rejects_bad_input() {
    let mut w = GgufWriter::new();
    w.add_metadata("k", MetaValue::U8(1)).unwrap();
    assert!(matches!(
        w.add_metadata("k", MetaValue::U8(2)),
        Err(GgufWriteError::DuplicateKey(_))
    ));
    assert!(matches!(
        w.add_metadata("general.alignment", MetaValue::U32(24)),
        Err(GgufWriteError::BadAlignment(_))
    ));
    let err = w
        .add_tensor("q", DType::Q4_0, &[2, 33], vec![0; 36])
        .unwrap_err();
    assert!(
        matches!(err, GgufWriteError::SizeMismatch { expected: None, .. }),
        "{err}"
    );
    let err = w
        .add_tensor("f", DType::F32, &[2, 2], vec![0; 15])
        .unwrap_err();
    assert!(
        matches!(
            err,
            GgufWriteError::SizeMismatch {
                expected: Some(16),
                got: 15,
                ..
            }
        ),
        "{err}"
    );
    assert!(matches!(
        w.add_tensor("d", DType::F32, &[1, 1, 1, 1, 1], vec![0; 4]),
        Err(GgufWriteError::TooManyDims { n_dims: 5, .. })
    ));
    w.add_tensor("t", DType::F32, &[1], vec![0; 4]).unwrap();
    assert!(matches!(
        w.add_tensor("t", DType::F32, &[1], vec![0; 4]),
        Err(GgufWriteError::DuplicateTensor(_))
    ));
}

#[test]
fn open_reads_from_disk() {
    let dir = std::env::temp_dir().join(format!("kestrel-gguf-open-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sample.gguf");
    std::fs::write(&path, sample_bytes()).unwrap();
    let f = kestrel_model::weights::gguf::GgufFile::open(&path).unwrap();
    assert_eq!(f.tensors().len(), 3);
    let missing = kestrel_model::weights::gguf::GgufFile::open(&dir.join("nope.gguf")).unwrap_err();
    assert!(matches!(missing, GgufError::Io { .. }), "{missing}");
    std::fs::remove_dir_all(&dir).unwrap();
}
