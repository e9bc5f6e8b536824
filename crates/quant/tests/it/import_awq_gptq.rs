//! Reading AWQ and GPTQ checkpoints into `GroupQuant`: the tiny fixtures written by
//! scripts/goldens/make_awq_gptq_fixtures.py (compared with the weights they were packed from),
//! round trips through an independent test-side packer for the layouts the fixtures do not
//! cover (GPTQ 8-bit, v2 zeros, whole-row groups, no g_idx), and corrupt inputs.

use std::path::{Path, PathBuf};

use half::f16;
use kestrel_model::weights::safetensors::SafetensorsCheckpoint;
use kestrel_model::weights::TensorSource;
use kestrel_quant::import::{
    is_quantized_linear, quant_config, read_linear, ImportError, ImportMethod, QuantConfig,
};
use kestrel_quant::quantize::GroupQuant;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use safetensors::tensor::TensorView as StView;
use safetensors::Dtype;

const LINEARS: [&str; 7] = [
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.o_proj",
    "mlp.gate_proj",
    "mlp.up_proj",
    "mlp.down_proj",
];
const AWQ_ORDER: [usize; 8] = [0, 2, 4, 6, 1, 3, 5, 7];

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(name)
}

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("kestrel-import-{tag}-{}", std::process::id()));
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

/// A tensor to write: name, dtype, shape, little-endian bytes.
type Tensor = (String, Dtype, Vec<usize>, Vec<u8>);

fn i32_tensor(name: &str, shape: &[usize], v: &[u32]) -> Tensor {
    let bytes = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    (name.to_string(), Dtype::I32, shape.to_vec(), bytes)
}

fn f16_tensor(name: &str, shape: &[usize], v: &[f32]) -> Tensor {
    let bytes = v
        .iter()
        .flat_map(|x| f16::from_f32(*x).to_le_bytes())
        .collect();
    (name.to_string(), Dtype::F16, shape.to_vec(), bytes)
}

fn write_model(dir: &Path, tensors: &[Tensor]) {
    let views: Vec<(String, StView)> = tensors
        .iter()
        .map(|(n, d, s, b)| (n.clone(), StView::new(*d, s.clone(), b).unwrap()))
        .collect();
    safetensors::serialize_to_file(views, None, &dir.join("model.safetensors")).unwrap();
}

fn write_config(dir: &Path, file: &str, json: serde_json::Value) {
    std::fs::write(dir.join(file), json.to_string()).unwrap();
}

/// `GroupQuant::dequantize` rounded to f16 must equal the fixture's f16 expected weights bit for
/// bit (the generator rounds its f32 dequantization the same way).
fn assert_matches_expected(gq: &GroupQuant, expected: &SafetensorsCheckpoint, name: &str) {
    let t = expected.tensor(name).unwrap();
    assert_eq!(t.shape, vec![gq.rows, gq.cols], "{name}");
    let want: Vec<u16> = t
        .data
        .chunks_exact(2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
        .collect();
    let got: Vec<u16> = gq
        .dequantize()
        .iter()
        .map(|&x| f16::from_f32(x).to_bits())
        .collect();
    let bad = want.iter().zip(&got).filter(|(a, b)| a != b).count();
    assert_eq!(bad, 0, "{name}: {bad} of {} values differ", want.len());
}

/// Read every quantized linear of a fixture and compare it with `expected.safetensors`.
fn check_fixture(dir: &Path, cfg: &QuantConfig) -> Vec<GroupQuant> {
    let ckpt = SafetensorsCheckpoint::open(dir).unwrap();
    let expected = SafetensorsCheckpoint::open(&dir.join("expected.safetensors")).unwrap();
    let mut out = Vec::new();
    for layer in 0..3 {
        for linear in LINEARS {
            let prefix = format!("model.layers.{layer}.{linear}");
            assert!(is_quantized_linear(&ckpt, &prefix), "{prefix}");
            let shape = expected.tensor(&format!("{prefix}.weight")).unwrap().shape;
            let gq = read_linear(&ckpt, cfg, &prefix, shape[0], shape[1]).unwrap();
            assert_eq!((gq.bits, gq.group_size), (4, 32), "{prefix}");
            assert_matches_expected(&gq, &expected, &format!("{prefix}.weight"));
            out.push(gq);
        }
    }
    assert!(!is_quantized_linear(&ckpt, "lm_head"));
    let head = ckpt.tensor("lm_head.weight").unwrap();
    assert_eq!(head.dtype, kestrel_kernels::DType::F16);
    out
}

#[test]
fn awq_fixture_matches_expected_weights() {
    let dir = fixture("awq-tiny");
    let cfg = quant_config(&dir).unwrap().unwrap();
    assert_eq!(cfg.method, ImportMethod::Awq);
    assert_eq!(
        (cfg.bits, cfg.group_size, cfg.zero_point_v1),
        (4, Some(32), false)
    );
    for gq in check_fixture(&dir, &cfg) {
        assert!(gq.perm.is_none());
        assert!(
            gq.zeros.iter().any(|&z| z != gq.zeros[0]),
            "zeros should vary (asymmetric)"
        );
    }
}

#[test]
fn gptq_fixture_desc_act_v1_matches_expected_weights() {
    let dir = fixture("gptq-tiny");
    let cfg = quant_config(&dir).unwrap().unwrap();
    assert_eq!(cfg.method, ImportMethod::Gptq);
    assert!(cfg.desc_act && cfg.zero_point_v1 && !cfg.sym);
    let all = check_fixture(&dir, &cfg);
    for gq in &all {
        let perm = gq
            .perm
            .as_ref()
            .expect("desc_act fixture has a permutation");
        let mut sorted = perm.clone();
        sorted.sort_unstable();
        assert!(
            sorted.iter().enumerate().all(|(j, &c)| c as usize == j),
            "perm is a permutation"
        );
        // Stable sort by group: ascending original columns within each stored group.
        for g in perm.chunks(gq.group_size) {
            assert!(g.windows(2).all(|w| w[0] < w[1]));
        }
    }
    // The generator forced zero 0 in layer 0 q_proj, row 0, first group: stored as 15 in v1.
    assert_eq!(all[0].zeros[0], 0);
}

#[test]
fn quantize_config_json_and_legacy_awq_config() {
    let d = TempDir::new("cfgfiles");
    assert!(quant_config(&d.0).unwrap().is_none());
    write_config(
        &d.0,
        "config.json",
        serde_json::json!({"model_type": "llama"}),
    );
    assert!(quant_config(&d.0).unwrap().is_none());
    let legacy_gptq = serde_json::json!({"bits": 8, "group_size": -1, "desc_act": false,
        "sym": true, "damp_percent": 0.01, "true_sequential": true});
    write_config(&d.0, "quantize_config.json", legacy_gptq);
    let cfg = quant_config(&d.0).unwrap().unwrap();
    assert_eq!(cfg.method, ImportMethod::Gptq);
    assert_eq!(
        (cfg.bits, cfg.group_size, cfg.zero_point_v1),
        (8, None, true)
    );
    assert_eq!(cfg.group_size_for(96), 96);

    let e = TempDir::new("cfgawq");
    let legacy_awq =
        serde_json::json!({"zero_point": true, "q_group_size": 128, "w_bit": 4, "version": "GEMM"});
    write_config(&e.0, "quant_config.json", legacy_awq);
    let cfg = quant_config(&e.0).unwrap().unwrap();
    assert_eq!(
        (cfg.method, cfg.bits, cfg.group_size),
        (ImportMethod::Awq, 4, Some(128))
    );

    assert!(quant_config(&fixture("tiny-llama-f32")).unwrap().is_none());
}

/// `quant_config` on a directory whose config.json holds `q` as `quantization_config`.
fn config_error(q: serde_json::Value) -> ImportError {
    let d = TempDir::new("cfgerr");
    write_config(
        &d.0,
        "config.json",
        serde_json::json!({"quantization_config": q}),
    );
    quant_config(&d.0).unwrap_err()
}

#[test]
fn unsupported_configs_are_typed_errors() {
    let e = config_error(serde_json::json!({"quant_method": "gptq", "bits": 3, "group_size": 128}));
    assert!(
        matches!(e, ImportError::UnsupportedBits { bits: 3, .. }),
        "{e}"
    );
    let e = config_error(serde_json::json!({"quant_method": "awq", "bits": 8, "group_size": 128}));
    assert!(
        matches!(e, ImportError::UnsupportedBits { bits: 8, .. }),
        "{e}"
    );
    let awq = |version| {
        serde_json::json!({"quant_method": "awq", "bits": 4, "group_size": 128,
        "version": version, "zero_point": true})
    };
    for v in ["gemv", "gemv_fast", "exllama"] {
        let e = config_error(awq(v));
        assert!(
            matches!(e, ImportError::UnsupportedFormat { ref format, .. } if format == v),
            "{e}"
        );
    }
    let gptq = |fmt| {
        serde_json::json!({"quant_method": "gptq", "bits": 4, "group_size": 128,
        "checkpoint_format": fmt})
    };
    let e = config_error(gptq("marlin"));
    assert!(matches!(e, ImportError::UnsupportedFormat { ref format, .. } if format == "marlin"));
    assert!(!config_error_free(gptq("gptq_v2")).zero_point_v1);
    let e = config_error(serde_json::json!({"quant_method": "bitsandbytes", "bits": 4}));
    assert!(
        matches!(e, ImportError::UnsupportedMethod(ref m) if m == "bitsandbytes"),
        "{e}"
    );
    let e = config_error(serde_json::json!({"quant_method": "gptq", "group_size": 128}));
    assert!(
        matches!(e, ImportError::MissingField { field: "bits", .. }),
        "{e}"
    );
    let e = config_error(serde_json::json!({"quant_method": "gptq", "bits": 4, "group_size": 0}));
    assert!(
        matches!(
            e,
            ImportError::BadField {
                field: "group_size",
                ..
            }
        ),
        "{e}"
    );
    let e = config_error(
        serde_json::json!({"quant_method": "awq", "bits": 4, "group_size": 64,
        "zero_point": false}),
    );
    assert!(
        matches!(
            e,
            ImportError::BadField {
                field: "zero_point",
                ..
            }
        ),
        "{e}"
    );
    let e = config_error(
        serde_json::json!({"quant_method": "gptq", "bits": 4, "group_size": 64,
        "pack_dtype": "int16"}),
    );
    assert!(
        matches!(
            e,
            ImportError::BadField {
                field: "pack_dtype",
                ..
            }
        ),
        "{e}"
    );
}

fn config_error_free(q: serde_json::Value) -> QuantConfig {
    let d = TempDir::new("cfgok");
    write_config(
        &d.0,
        "config.json",
        serde_json::json!({"quantization_config": q}),
    );
    quant_config(&d.0).unwrap().unwrap()
}

/// A random `GroupQuant` whose scales are exact in f16 (so a checkpoint round trip is exact).
fn random_group_quant(
    rng: &mut ChaCha8Rng,
    rows: usize,
    cols: usize,
    bits: u8,
    group: usize,
) -> GroupQuant {
    let groups = cols / group;
    let max = 1u16 << bits;
    GroupQuant {
        rows,
        cols,
        bits,
        group_size: group,
        codes: (0..rows * cols)
            .map(|_| rng.gen_range(0..max) as u8)
            .collect(),
        scales: (0..rows * groups)
            .map(|_| f16::from_f32(rng.gen_range(0.001..0.1)).to_f32())
            .collect(),
        zeros: (0..rows * groups)
            .map(|_| rng.gen_range(0..max) as u8)
            .collect(),
        perm: None,
    }
}

fn transposed<T: Copy>(v: &[T], r: usize, c: usize) -> Vec<T> {
    (0..c)
        .flat_map(|j| (0..r).map(move |i| v[i * c + j]))
        .collect()
}

/// GPTQ packing of `[n][m]` values along n (the first dimension): `[n/p][m]` words.
fn pack_along_rows(v: &[u8], n: usize, m: usize, bits: u8) -> Vec<u32> {
    let p = 32 / bits as usize;
    let mut out = vec![0u32; n / p * m];
    for i in 0..n {
        for j in 0..m {
            out[(i / p) * m + j] |= u32::from(v[i * m + j]) << (bits as usize * (i % p));
        }
    }
    out
}

/// The tensors of a GPTQ linear holding `gq` (identity perm, original column order).
fn gptq_tensors(prefix: &str, gq: &GroupQuant, v1: bool, g_idx: Option<Vec<u32>>) -> Vec<Tensor> {
    let (rows, cols, bits, groups) = (gq.rows, gq.cols, gq.bits, gq.groups());
    let p = 32 / bits as usize;
    let qweight = pack_along_rows(&transposed(&gq.codes, rows, cols), cols, rows, bits);
    let mask = ((1u16 << bits) - 1) as u8;
    let stored: Vec<u8> = gq
        .zeros
        .iter()
        .map(|&z| if v1 { z.wrapping_sub(1) & mask } else { z })
        .collect();
    // zeros [rows][groups] -> [groups][rows], packed along rows == transpose of packing [rows][groups].
    let qz_t = pack_along_rows(&stored, rows, groups, bits);
    let qzeros = transposed(&qz_t, rows / p, groups);
    let mut t = vec![
        i32_tensor(&format!("{prefix}.qweight"), &[cols / p, rows], &qweight),
        i32_tensor(&format!("{prefix}.qzeros"), &[groups, rows / p], &qzeros),
        f16_tensor(
            &format!("{prefix}.scales"),
            &[groups, rows],
            &transposed(&gq.scales, rows, groups),
        ),
    ];
    if let Some(g) = g_idx {
        t.push(i32_tensor(&format!("{prefix}.g_idx"), &[cols], &g));
    }
    t
}

fn gptq_cfg(bits: u8, group: Option<usize>, v1: bool) -> QuantConfig {
    QuantConfig {
        method: ImportMethod::Gptq,
        bits,
        group_size: group,
        desc_act: false,
        sym: false,
        zero_point_v1: v1,
        modules_to_not_convert: Vec::new(),
    }
}

fn open_with(tag: &str, tensors: &[Tensor]) -> (TempDir, SafetensorsCheckpoint) {
    let d = TempDir::new(tag);
    write_model(&d.0, tensors);
    let ckpt = SafetensorsCheckpoint::open(&d.0).unwrap();
    (d, ckpt)
}

#[test]
fn gptq_round_trips_8bit_v2_whole_row_and_4bit_without_g_idx() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let cases = [
        (8u8, None, false, true),
        (4, Some(16), true, false),
        (8, Some(32), true, true),
    ];
    for (bits, group, v1, with_g_idx) in cases {
        let (rows, cols) = (24, 64);
        let gsize = group.unwrap_or(cols);
        let gq = random_group_quant(&mut rng, rows, cols, bits, gsize);
        let g_idx = with_g_idx.then(|| (0..cols as u32).map(|i| i / gsize as u32).collect());
        let (_d, ckpt) = open_with("gptqrt", &gptq_tensors("l", &gq, v1, g_idx));
        let got = read_linear(&ckpt, &gptq_cfg(bits, group, v1), "l", rows, cols).unwrap();
        assert_eq!(
            got, gq,
            "bits {bits} group {group:?} v1 {v1} g_idx {with_g_idx}"
        );
    }
}

#[test]
fn awq_round_trip_whole_row_group() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let (rows, cols) = (16, 40);
    let gq = random_group_quant(&mut rng, rows, cols, 4, cols);
    let pack = |v: &[u8], n: usize| -> Vec<u32> {
        // v is [n][rows]; word c of row i holds outputs 8c + AWQ_ORDER[k] in field k.
        let mut out = vec![0u32; n * rows / 8];
        for i in 0..n {
            for c in 0..rows / 8 {
                for (k, &o) in AWQ_ORDER.iter().enumerate() {
                    out[i * rows / 8 + c] |= u32::from(v[i * rows + 8 * c + o]) << (4 * k);
                }
            }
        }
        out
    };
    let tensors = vec![
        i32_tensor(
            "a.qweight",
            &[cols, rows / 8],
            &pack(&transposed(&gq.codes, rows, cols), cols),
        ),
        i32_tensor("a.qzeros", &[1, rows / 8], &pack(&gq.zeros, 1)),
        f16_tensor("a.scales", &[1, rows], &gq.scales),
    ];
    let (_d, ckpt) = open_with("awqrt", &tensors);
    let mut cfg = gptq_cfg(4, None, false);
    cfg.method = ImportMethod::Awq;
    assert_eq!(read_linear(&ckpt, &cfg, "a", rows, cols).unwrap(), gq);
}

#[test]
fn corrupt_gptq_linears_are_typed_errors() {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let (rows, cols, group) = (16, 64, 16);
    let gq = random_group_quant(&mut rng, rows, cols, 4, group);
    let cfg = gptq_cfg(4, Some(group), true);
    let balanced: Vec<u32> = (0..cols as u32).map(|i| i / group as u32).collect();

    // A g_idx whose groups do not hold group_size inputs each.
    let mut lopsided = balanced.clone();
    lopsided[0] = 1;
    let (_d, ckpt) = open_with("gidx", &gptq_tensors("l", &gq, true, Some(lopsided)));
    let e = read_linear(&ckpt, &cfg, "l", rows, cols).unwrap_err();
    assert!(
        matches!(e, ImportError::BadGIdx { ref reason, .. } if reason.contains("group 0 has 15")),
        "{e}"
    );

    let mut outside = balanced.clone();
    outside[5] = 4;
    let (_d, ckpt) = open_with("gidx2", &gptq_tensors("l", &gq, true, Some(outside)));
    let e = read_linear(&ckpt, &cfg, "l", rows, cols).unwrap_err();
    assert!(
        matches!(e, ImportError::BadGIdx { ref reason, .. } if reason.contains("input 5")),
        "{e}"
    );

    // Wrong shapes: the architecture expects another size, or qzeros is truncated.
    let good = gptq_tensors("l", &gq, true, Some(balanced.clone()));
    let (_d, ckpt) = open_with("shape", &good);
    let e = read_linear(&ckpt, &cfg, "l", rows * 2, cols).unwrap_err();
    assert!(
        matches!(e, ImportError::BadShape { ref name, .. } if name == "l.qweight"),
        "{e}"
    );
    let e = read_linear(&ckpt, &cfg, "l", rows, 72).unwrap_err();
    assert!(
        matches!(
            e,
            ImportError::NotMultiple {
                n: 72,
                multiple: 16,
                ..
            }
        ),
        "{e}"
    );
    let e = read_linear(&ckpt, &cfg, "missing", rows, cols).unwrap_err();
    assert!(
        matches!(e, ImportError::MissingTensor(ref n) if n == "missing.qweight"),
        "{e}"
    );
    let mut bits3 = cfg.clone();
    bits3.bits = 3;
    let e = read_linear(&ckpt, &bits3, "l", rows, cols).unwrap_err();
    assert!(
        matches!(e, ImportError::UnsupportedBits { bits: 3, .. }),
        "{e}"
    );

    let mut short = good.clone();
    short[1] = i32_tensor(
        "l.qzeros",
        &[group - 1, rows / 8],
        &vec![0; (group - 1) * rows / 8],
    );
    let (_d, ckpt) = open_with("short", &short);
    let e = read_linear(&ckpt, &cfg, "l", rows, cols).unwrap_err();
    assert!(
        matches!(e, ImportError::BadShape { ref name, .. } if name == "l.qzeros"),
        "{e}"
    );

    let mut no_zeros = good.clone();
    no_zeros.remove(1);
    let (_d, ckpt) = open_with("nozeros", &no_zeros);
    let e = read_linear(&ckpt, &cfg, "l", rows, cols).unwrap_err();
    assert!(
        matches!(e, ImportError::MissingTensor(ref n) if n == "l.qzeros"),
        "{e}"
    );

    let mut float_codes = good;
    float_codes[0].1 = Dtype::F32;
    let (_d, ckpt) = open_with("dtype", &float_codes);
    let e = read_linear(&ckpt, &cfg, "l", rows, cols).unwrap_err();
    assert!(
        matches!(e, ImportError::BadDtype { ref dtype, .. } if dtype == "F32"),
        "{e}"
    );
}

#[test]
fn safetensors_serves_i32_raw_only() {
    let ckpt = SafetensorsCheckpoint::open(&fixture("gptq-tiny")).unwrap();
    let name = "model.layers.0.self_attn.k_proj.qweight";
    let raw = ckpt.raw_tensor(name).unwrap();
    assert_eq!(
        (raw.dtype.as_str(), raw.shape.as_slice()),
        ("I32", &[8usize, 32][..])
    );
    assert_eq!(raw.data.len(), 8 * 32 * 4);
    assert!(ckpt.contains(name) && ckpt.tensor(name).is_none());
    assert!(!ckpt
        .tensor_names()
        .iter()
        .any(|n| n.ends_with(".qweight") || n.ends_with(".g_idx")));
    let scales = ckpt
        .raw_tensor("model.layers.0.self_attn.k_proj.scales")
        .unwrap();
    assert_eq!(scales.dtype, "F16");
    assert!(ckpt
        .tensor("model.layers.0.self_attn.k_proj.scales")
        .is_some());
}
