//! `quantize`: every method on the tiny F32 fixture (loads, generates, stays within each
//! format's error bound of the source), and the K-quants on a real 1536-wide matrix.

use crate::common;

use common::*;
use kestrel_kernels::quant::dequantize_row;
use kestrel_kernels::DType;
use kestrel_model::weights::gguf::GgufFile;
use kestrel_model::weights::TensorSource;
use kestrel_quant::convert::{write_file, ModelSource};
use kestrel_quant::quantize::{quantize_model, QuantMethod};

/// Largest allowed |dequantized - source| in a block of 32, as a fraction of the block's
/// largest magnitude (half a quantization step, or a whole one where the format clamps, plus
/// f16 scale rounding).
fn bound(dtype: DType) -> f32 {
    match dtype {
        DType::Q8_0 => 0.5 / 127.0 + 1e-3,
        DType::Q4_0 => 1.0 / 8.0 + 2e-3,
        DType::Q4_1 => 1.0 / 15.0 + 2e-3,
        DType::Q5_0 => 1.0 / 16.0 + 2e-3,
        DType::Q6_K => 0.05,
        DType::Q4_K => 0.2,
        DType::F16 => 1e-3,
        DType::F32 => 0.0,
        other => panic!("no bound for {other}"),
    }
}

/// Every block of 32 of `got` is within `bound(dtype)` of `want`.
fn check_within_bound(name: &str, dtype: DType, want: &[f32], got: &[f32]) {
    for (i, (w, g)) in want.chunks(32).zip(got.chunks(32)).enumerate() {
        let amax = w.iter().fold(0f32, |m, v| m.max(v.abs()));
        let err = w.iter().zip(g).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(
            err <= bound(dtype) * amax + 1e-7,
            "{name} ({dtype}) block {i}: error {err} > bound for amax {amax}"
        );
    }
}

#[test]
fn every_method_on_tiny_loads_generates_and_is_within_bounds() {
    let src_dir = fixtures().join("tiny-llama-f32");
    let source = ModelSource::open(&src_dir).expect("HF source");
    let dir = std::env::temp_dir().join(format!("kestrel-quantize-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for method in [
        QuantMethod::Q8_0,
        QuantMethod::Q4_0,
        QuantMethod::Q4_1,
        QuantMethod::Q4_K,
        QuantMethod::Q6_K,
    ] {
        let mut plans = Vec::new();
        let writer =
            quantize_model(&source, method, &mut |p| plans.push(p.clone())).expect("quantizes");
        let path = dir.join(format!("{method:?}.gguf"));
        write_file(&writer, &path).unwrap();
        let file = GgufFile::open(&path).expect("output parses");
        assert_eq!(
            file.get_u32("general.file_type").unwrap(),
            method.file_type()
        );
        for (t, plan) in source.tensors.iter().zip(&plans) {
            let view = file.tensor(&t.name).expect("tensor written");
            assert_eq!(view.dtype, plan.to);
            if t.shape().len() == 1 {
                assert_eq!(view.dtype, DType::F32, "{}: 1-D tensors stay F32", t.name);
            }
            let want = t.to_f32().unwrap();
            let mut got = vec![0.0; want.len()];
            dequantize_row(view.dtype, &view.data, &mut got);
            check_within_bound(&t.name, view.dtype, &want, &got);
        }
        // 64- and 128-wide rows: K-quants (256) do not fit and fall back.
        let ffn_type = file.tensor("blk.0.ffn_up.weight").unwrap().dtype;
        let expected = match method {
            QuantMethod::Q4_K => DType::Q5_0,
            QuantMethod::Q6_K => DType::Q8_0,
            m => m.dtype(&Default::default(), 128),
        };
        assert_eq!(ffn_type, expected, "{method:?}");
        let loaded = load(&path);
        let prompt = loaded.tokenizer.encode("Once upon a time", true).unwrap();
        let mut r = runner(loaded, 64);
        let (logits, vocab) = teacher_forced_logits(&mut r, &prompt);
        assert!(
            logits.iter().all(|v| v.is_finite()),
            "{method:?}: logits are finite"
        );
        assert!((argmax(&logits[logits.len() - vocab..]) as usize) < vocab);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn k_quants_of_a_real_matrix_are_within_bounds() {
    let file = GgufFile::open(&default_model_path()).expect("default model opens");
    let view = file.tensor("blk.0.ffn_down.weight").expect("ffn_down");
    assert_eq!(view.shape, vec![576, 1536]);
    let mut src = vec![0.0; view.n_elements()];
    dequantize_row(view.dtype, &view.data, &mut src);
    let toolkit = [
        DType::INT8,
        DType::INT4_G128,
        DType::INT4_G32,
        DType::NF4,
        DType::NF4_DQ,
    ];
    for dtype in [DType::Q4_K, DType::Q6_K, DType::Q8_0]
        .into_iter()
        .chain(toolkit)
    {
        let bytes = kestrel_quant::quantize::encode_rows(dtype, &src, 1536);
        let row_bytes = dtype.row_bytes(1536).unwrap();
        assert_eq!(bytes.len(), 576 * row_bytes);
        let mut back = vec![0.0; src.len()];
        for (b, out) in bytes
            .chunks_exact(row_bytes)
            .zip(back.chunks_exact_mut(1536))
        {
            dequantize_row(dtype, b, out);
        }
        if !toolkit.contains(&dtype) {
            check_within_bound("blk.0.ffn_down.weight", dtype, &src, &back);
        }
        let rmse = (src
            .iter()
            .zip(&back)
            .map(|(a, b)| (a - b).powi(2))
            .sum::<f32>()
            / src.len() as f32)
            .sqrt();
        let rms = (src.iter().map(|a| a * a).sum::<f32>() / src.len() as f32).sqrt();
        eprintln!("{dtype}: relative RMSE {:.4}", rmse / rms);
        assert!(
            rmse / rms
                < match dtype {
                    DType::Q4_K | DType::INT4_G128 | DType::NF4 | DType::NF4_DQ => 0.12,
                    DType::INT4_G32 => 0.1,
                    _ => 0.05,
                },
            "{dtype}: relative RMSE {}",
            rmse / rms
        );
    }
}
