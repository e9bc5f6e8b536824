//! Adapters Kestrel refuses, each with its typed error: pickled weights only,
//! `modules_to_save`, unknown target modules, DoRA, a rank that disagrees with the config,
//! shapes that do not fit the base, a GGUF that is not a LoRA adapter, and an adapter for
//! layers the base does not have.

use crate::common;

use std::path::{Path, PathBuf};

use common::*;
use kestrel_model::lora::{LoraAdapter, LoraBase, LoraError, LoraTarget};
use serde_json::Value;

fn base() -> LoraBase {
    load(&fixtures().join("tiny-llama-f32"))
        .model
        .lora_base()
        .clone()
}

fn all7() -> PathBuf {
    fixtures().join("lora/all7")
}

/// A copy of the all7 adapter in a fresh directory, its config changed by `edit`.
fn edited(tag: &str, edit: impl FnOnce(&mut Value)) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kestrel-lora-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    std::fs::copy(
        all7().join("adapter_model.safetensors"),
        dir.join("adapter_model.safetensors"),
    )
    .expect("copy weights");
    let text = std::fs::read_to_string(all7().join("adapter_config.json")).expect("config");
    let mut cfg: Value = serde_json::from_str(&text).expect("json");
    edit(&mut cfg);
    std::fs::write(dir.join("adapter_config.json"), cfg.to_string()).expect("write config");
    dir
}

fn open(path: &Path) -> Result<LoraAdapter, LoraError> {
    LoraAdapter::open("test", path, &base())
}

#[test]
fn the_unedited_copy_loads() {
    let dir = edited("ok", |_| {});
    let a = open(&dir).expect("loads");
    assert_eq!(a.targets().count(), 3 * 7);
}

#[test]
fn pickled_weights_only_ask_for_safetensors() {
    let dir = edited("bin", |_| {});
    std::fs::rename(
        dir.join("adapter_model.safetensors"),
        dir.join("adapter_model.bin"),
    )
    .expect("rename");
    let err = open(&dir).expect_err("refused");
    assert!(matches!(err, LoraError::PickleOnly { .. }), "{err}");
    assert!(err.to_string().contains("safetensors"), "{err}");
}

#[test]
fn modules_to_save_is_refused() {
    let dir = edited("mts", |c| {
        c["modules_to_save"] = serde_json::json!(["lm_head"])
    });
    let err = open(&dir).expect_err("refused");
    assert!(
        matches!(&err, LoraError::ModulesToSave(m) if m == &["lm_head"]),
        "{err}"
    );
}

#[test]
fn unknown_target_modules_are_refused() {
    let dir = edited("target", |c| {
        c["target_modules"] = serde_json::json!(["q_proj", "embed_tokens"])
    });
    let err = open(&dir).expect_err("refused");
    assert!(
        matches!(&err, LoraError::UnknownTarget(m) if m == "embed_tokens"),
        "{err}"
    );
}

#[test]
fn dora_is_refused() {
    let dir = edited("dora", |c| c["use_dora"] = Value::Bool(true));
    assert!(matches!(open(&dir), Err(LoraError::Dora)));
}

#[test]
fn rank_disagreeing_with_the_config_is_refused() {
    let dir = edited("rank", |c| c["r"] = serde_json::json!(4));
    let err = open(&dir).expect_err("refused");
    assert!(
        matches!(
            err,
            LoraError::RankMismatch {
                expected: 4,
                actual: 8,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn per_module_rank_patterns_and_fan_in_fan_out_are_refused() {
    let dir = edited("pattern", |c| {
        c["rank_pattern"] = serde_json::json!({"q_proj": 4})
    });
    assert!(matches!(open(&dir), Err(LoraError::BadConfig(_))));
    let dir = edited("fifo", |c| c["fan_in_fan_out"] = Value::Bool(true));
    assert!(matches!(open(&dir), Err(LoraError::BadConfig(_))));
}

#[test]
fn shapes_that_do_not_fit_the_base_are_refused() {
    let mut other = base();
    other.shapes[1][LoraTarget::Up.index()] = Some((96, 64));
    let err = LoraAdapter::open("test", &all7(), &other).expect_err("refused");
    assert!(
        matches!(&err, LoraError::ShapeMismatch { expected, actual, .. }
            if expected == &[96, 64] && actual == &[128, 64]),
        "{err}"
    );
    let gguf = fixtures().join("lora/all7.gguf");
    let err = LoraAdapter::open("test", &gguf, &other).expect_err("refused");
    assert!(matches!(err, LoraError::ShapeMismatch { .. }), "{err}");
}

#[test]
fn layers_the_base_lacks_are_refused() {
    let mut shallow = base();
    shallow.shapes.truncate(2);
    let err = LoraAdapter::open("test", &all7(), &shallow).expect_err("refused");
    assert!(
        matches!(err, LoraError::NotInBase { layer: 2, .. }),
        "{err}"
    );
}

#[test]
fn a_model_gguf_is_not_an_adapter() {
    let err = open(&fixtures().join("tiny-qwen2.gguf")).expect_err("refused");
    assert!(matches!(err, LoraError::NotAnAdapter(_)), "{err}");
}

#[test]
fn a_missing_directory_is_unreadable_not_a_panic() {
    let err = open(&fixtures().join("lora/does-not-exist")).expect_err("refused");
    assert!(!err.to_string().is_empty());
}

/// A llama.cpp-style adapter GGUF with one A/B pair for layer 0's Q projection (`[8, 64]` and
/// `[64, 8]`), A stored as `a_dtype` with `a_bytes`.
fn adapter_gguf(tag: &str, a_dtype: kestrel_kernels::DType, a_bytes: Vec<u8>) -> PathBuf {
    use kestrel_model::weights::gguf::{GgufWriter, MetaValue};
    let mut w = GgufWriter::new();
    let text = |s: &str| MetaValue::String(s.to_string());
    w.add_metadata("general.architecture", text("llama"))
        .unwrap();
    w.add_metadata("general.type", text("adapter")).unwrap();
    w.add_metadata("adapter.type", text("lora")).unwrap();
    w.add_metadata("adapter.lora.alpha", MetaValue::F32(16.0))
        .unwrap();
    let b: Vec<u8> = vec![0.5f32; 64 * 8]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    w.add_tensor("blk.0.attn_q.weight.lora_a", a_dtype, &[8, 64], a_bytes)
        .unwrap();
    w.add_tensor(
        "blk.0.attn_q.weight.lora_b",
        kestrel_kernels::DType::F32,
        &[64, 8],
        b,
    )
    .unwrap();
    let path = std::env::temp_dir().join(format!("kestrel-lora-{tag}-{}.gguf", std::process::id()));
    let mut out = std::fs::File::create(&path).unwrap();
    w.write(&mut out).unwrap();
    path
}

#[test]
fn quantized_adapter_tensors_are_refused_and_f32_ones_load() {
    use kestrel_kernels::DType;
    let f32_bytes: Vec<u8> = vec![0.25f32; 8 * 64]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let ok = adapter_gguf("f32", DType::F32, f32_bytes);
    let a = open(&ok).expect("an F32 adapter loads");
    let pair = a.pair(0, LoraTarget::Q).expect("layer 0 q");
    assert_eq!(
        (pair.rank(), pair.scale()),
        (8, 2.0),
        "scale = alpha / rank"
    );
    let q8 = DType::Q8_0.row_bytes(64).unwrap() * 8;
    let bad = adapter_gguf("q8", DType::Q8_0, vec![0; q8]);
    let err = open(&bad).expect_err("refused");
    assert!(matches!(err, LoraError::UnsupportedDtype { .. }), "{err}");
}
