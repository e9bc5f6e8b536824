//! SafetensorsCheckpoint on tiny checkpoints written with the `safetensors` crate.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use kestrel_kernels::DType;
use kestrel_model::weights::safetensors::{SafetensorsCheckpoint, SafetensorsError};
use kestrel_model::weights::TensorSource;
use safetensors::tensor::TensorView as StView;
use safetensors::Dtype;

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("kestrel-st-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Write `tensors` (name, dtype, shape, bytes) as one safetensors file.
fn write(path: &Path, tensors: &[(&str, Dtype, Vec<usize>, Vec<u8>)]) {
    let views: Vec<(String, StView)> = tensors
        .iter()
        .map(|(n, d, s, b)| (n.to_string(), StView::new(*d, s.clone(), b).unwrap()))
        .collect();
    safetensors::serialize_to_file(views, None, path).unwrap();
}

fn write_index(dir: &Path, map: &[(&str, &str)]) {
    let weight_map: HashMap<&str, &str> = map.iter().copied().collect();
    let json = serde_json::json!({"metadata": {"total_size": 0}, "weight_map": weight_map});
    std::fs::write(dir.join("model.safetensors.index.json"), json.to_string()).unwrap();
}

#[test]
fn single_file_with_all_float_types() {
    let dir = TempDir::new("single");
    let bf16: Vec<u8> = [1.0f32, -2.0]
        .iter()
        .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
        .collect();
    let f16: Vec<u8> = [0.5f32, 3.0, 4.0]
        .iter()
        .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
        .collect();
    write(
        &dir.0.join("model.safetensors"),
        &[
            (
                "w.f32",
                Dtype::F32,
                vec![2, 3],
                f32_bytes(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
            ),
            ("w.bf16", Dtype::BF16, vec![2], bf16.clone()),
            ("w.f16", Dtype::F16, vec![3, 1], f16.clone()),
        ],
    );
    let ckpt = SafetensorsCheckpoint::open(&dir.0).unwrap();
    assert_eq!(ckpt.len(), 3);
    let w = ckpt.tensor("w.f32").unwrap();
    assert_eq!((w.dtype, w.shape.clone()), (DType::F32, vec![2, 3]));
    assert_eq!(&w.data[..], &f32_bytes(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])[..]);
    let b = ckpt.tensor("w.bf16").unwrap();
    assert_eq!((b.dtype, &b.data[..]), (DType::BF16, &bf16[..]));
    let h = ckpt.tensor("w.f16").unwrap();
    assert_eq!(
        (h.dtype, h.shape.clone(), &h.data[..]),
        (DType::F16, vec![3, 1], &f16[..])
    );
    assert!(ckpt.tensor("nope").is_none());
    let mut names = ckpt.tensor_names();
    names.sort();
    assert_eq!(names, ["w.bf16", "w.f16", "w.f32"]);
    for name in ckpt.tensor_names() {
        let t = ckpt.tensor(&name).unwrap();
        assert_eq!(t.data.as_ptr() as usize % 4, 0, "{name} is 4-byte aligned");
    }
    // The file itself can be opened directly, too.
    assert_eq!(
        SafetensorsCheckpoint::open(&dir.0.join("model.safetensors"))
            .unwrap()
            .len(),
        3
    );
}

#[test]
fn misaligned_tensors_are_copied_to_aligned_memory() {
    let dir = TempDir::new("misaligned");
    // Hand-made file: a 2-byte F16 tensor first puts the F32 tensor at data offset 2.
    let header = r#"{"a":{"dtype":"F16","shape":[1],"data_offsets":[0,2]},"b":{"dtype":"F32","shape":[2],"data_offsets":[2,10]}}"#;
    let mut header = header.as_bytes().to_vec();
    header.resize(header.len().next_multiple_of(8), b' ');
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend(&header);
    bytes.extend([0x00, 0x3c]);
    bytes.extend(f32_bytes(&[7.0, -1.0]));
    std::fs::write(dir.0.join("model.safetensors"), &bytes).unwrap();
    let ckpt = SafetensorsCheckpoint::open(&dir.0).unwrap();
    let b = ckpt.tensor("b").unwrap();
    assert_eq!(b.data.as_ptr() as usize % 4, 0);
    assert_eq!(&b.data[..], &f32_bytes(&[7.0, -1.0])[..]);
    assert_eq!(ckpt.tensor_names(), ["a", "b"], "file (offset) order");
}

#[test]
fn sharded_checkpoint() {
    let dir = TempDir::new("sharded");
    write(
        &dir.0.join("model-00001-of-00002.safetensors"),
        &[("a", Dtype::F32, vec![2], f32_bytes(&[1.0, 2.0]))],
    );
    write(
        &dir.0.join("model-00002-of-00002.safetensors"),
        &[
            ("b", Dtype::F32, vec![1], f32_bytes(&[3.0])),
            ("c", Dtype::F32, vec![1], f32_bytes(&[4.0])),
        ],
    );
    write_index(
        &dir.0,
        &[
            ("a", "model-00001-of-00002.safetensors"),
            ("b", "model-00002-of-00002.safetensors"),
            ("c", "model-00002-of-00002.safetensors"),
        ],
    );
    let ckpt = SafetensorsCheckpoint::open(&dir.0).unwrap();
    assert_eq!(ckpt.files().len(), 2);
    assert_eq!(ckpt.tensor_names(), ["a", "b", "c"]);
    assert_eq!(&ckpt.tensor("c").unwrap().data[..], &4.0f32.to_le_bytes());

    write_index(
        &dir.0,
        &[
            ("a", "model-00002-of-00002.safetensors"),
            ("b", "model-00002-of-00002.safetensors"),
        ],
    );
    let e = SafetensorsCheckpoint::open(&dir.0).unwrap_err();
    assert!(
        matches!(e, SafetensorsError::MissingTensor { ref name, .. } if name == "a"),
        "{e}"
    );

    write_index(
        &dir.0,
        &[
            ("a", "model-00001-of-00002.safetensors"),
            ("z", "model-00003-of-00003.safetensors"),
        ],
    );
    let e = SafetensorsCheckpoint::open(&dir.0).unwrap_err();
    assert!(matches!(e, SafetensorsError::MissingShard { .. }), "{e}");
    assert!(e.to_string().contains("model-00003-of-00003.safetensors"));

    write_index(&dir.0, &[("a", "../model-00001-of-00002.safetensors")]);
    assert!(matches!(
        SafetensorsCheckpoint::open(&dir.0),
        Err(SafetensorsError::BadShardName { .. })
    ));

    std::fs::write(
        dir.0.join("model.safetensors.index.json"),
        r#"{"weight_map": [1]}"#,
    )
    .unwrap();
    assert!(matches!(
        SafetensorsCheckpoint::open(&dir.0),
        Err(SafetensorsError::BadIndex { .. })
    ));
}

#[test]
fn duplicate_tensor_across_shards() {
    let dir = TempDir::new("dup");
    write(
        &dir.0.join("s1.safetensors"),
        &[("a", Dtype::F32, vec![1], f32_bytes(&[1.0]))],
    );
    write(
        &dir.0.join("s2.safetensors"),
        &[("a", Dtype::F32, vec![1], f32_bytes(&[2.0]))],
    );
    write_index(&dir.0, &[("a", "s1.safetensors"), ("b", "s2.safetensors")]);
    let e = SafetensorsCheckpoint::open(&dir.0).unwrap_err();
    assert!(
        matches!(e, SafetensorsError::DuplicateTensor { ref name, .. } if name == "a"),
        "{e}"
    );
}

#[test]
fn unsupported_dtype_malformed_header_and_missing_files() {
    let dir = TempDir::new("errors");
    let e = SafetensorsCheckpoint::open(&dir.0).unwrap_err();
    assert!(matches!(e, SafetensorsError::NotFound(_)), "{e}");

    write(
        &dir.0.join("model.safetensors"),
        &[("ids", Dtype::I64, vec![2], vec![0; 16])],
    );
    let e = SafetensorsCheckpoint::open(&dir.0).unwrap_err();
    assert!(
        matches!(e, SafetensorsError::UnsupportedDtype { ref name, ref dtype, .. } if name == "ids" && dtype == "I64"),
        "{e}"
    );

    for bad in [
        &b"\x05\x00"[..],
        &b"\xff\xff\xff\xff\xff\xff\xff\x7f{}"[..],
        &b"\x04\x00\x00\x00\x00\x00\x00\x00{x}]"[..],
    ] {
        std::fs::write(dir.0.join("model.safetensors"), bad).unwrap();
        let e = SafetensorsCheckpoint::open(&dir.0).unwrap_err();
        assert!(matches!(e, SafetensorsError::BadHeader { .. }), "{e}");
    }
    // Data shorter than the header says.
    let mut bytes = safetensors::serialize(
        [(
            "a".to_string(),
            StView::new(Dtype::F32, vec![4], &f32_bytes(&[1.0; 4])).unwrap(),
        )],
        None,
    )
    .unwrap();
    bytes.truncate(bytes.len() - 4);
    std::fs::write(dir.0.join("model.safetensors"), &bytes).unwrap();
    assert!(matches!(
        SafetensorsCheckpoint::open(&dir.0),
        Err(SafetensorsError::BadHeader { .. })
    ));
}
