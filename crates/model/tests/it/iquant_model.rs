//! A model whose matrices are low-bit i-quants runs through the forward pass: a tiny
//! synthetic Llama GGUF (hidden 256, one layer; tokenizer and other metadata from the
//! tiny-mixtral fixture, dense here) with every linear weight, output head included, in one
//! of IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M or MXFP4, against the same model
//! with those weights dequantized by the reference to F32.
//!
//! Tolerance: the quantized model multiplies 8-bit quantized activations (Q8_K, or Q8_0 for
//! MXFP4) where the F32 model multiplies `f32` activations, which moves each product by up
//! to about 0.4% of the activation row's largest magnitude. Over the whole model that keeps
//! every logit within `0.04 * max |logit|` of the F32 model's (measured on this host:
//! 0.013-0.020 by type, max |logit| 14-17); the argmax must agree wherever the F32
//! top-1/top-2 margin exceeds twice the tolerance. The logits must not be bit-identical
//! either: that would mean the weights were not multiplied in their own type.

use std::path::PathBuf;

use half::f16;
use kestrel_kernels::quant::dequantize_row;
use kestrel_kernels::DType;
use kestrel_model::weights::gguf::{GgufFile, GgufWriter, MetaValue};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::common::{argmax, fixtures, load, runner, teacher_forced_logits};

const HIDDEN: usize = 256;
const FFN: usize = 512;
const HEADS: usize = 4;
const KV_HEADS: usize = 2;
const HEAD_DIM: usize = HIDDEN / HEADS;
const TOL: f32 = 0.04;

/// Metadata keys replaced or dropped from the tiny-mixtral fixture.
const REPLACED: [&str; 7] = [
    "llama.block_count",
    "llama.embedding_length",
    "llama.feed_forward_length",
    "llama.rope.dimension_count",
    "llama.expert_count",
    "llama.expert_used_count",
    "general.file_type",
];

/// The byte range of each block's scale field for random blocks with a chosen scale.
fn set_scale(dtype: DType, block: &mut [u8], scale: f32) {
    match dtype {
        // An E8M0 exponent: the power of two nearest `scale`.
        DType::MXFP4 => block[0] = (scale.log2().round() as i32 + 128).clamp(1, 254) as u8,
        // The f16 super-scale's nibbles are the top nibbles of the four u16 scale words.
        DType::IQ1_M => {
            let bits = f16::from_f32(scale).to_bits();
            for k in 0..4 {
                let at = 48 + 2 * k;
                let w = u16::from_le_bytes([block[at], block[at + 1]]);
                let w = (w & 0x0FFF) | ((bits >> (4 * k)) & 0xF) << 12;
                block[at..at + 2].copy_from_slice(&w.to_le_bytes());
            }
        }
        _ => block[..2].copy_from_slice(&f16::from_f32(scale).to_le_bytes()),
    }
}

/// A random `[rows, cols]` matrix of `dtype`: random block bytes (every bit pattern is a valid
/// block), each block's scale set so its values have an RMS of `rms`.
fn random_matrix(
    dtype: DType,
    rows: usize,
    cols: usize,
    rms: f32,
    rng: &mut ChaCha8Rng,
) -> Vec<u8> {
    let (bs, bb) = (dtype.block_size(), dtype.block_bytes());
    let mut bytes = vec![0u8; rows * cols / bs * bb];
    rng.fill(bytes.as_mut_slice());
    let mut vals = vec![0f32; bs];
    for block in bytes.chunks_exact_mut(bb) {
        set_scale(dtype, block, 1.0);
        dequantize_row(dtype, block, &mut vals);
        let r = (vals.iter().map(|v| v * v).sum::<f32>() / bs as f32).sqrt();
        set_scale(dtype, block, if r > 0.0 { rms / r } else { 1.0 });
    }
    bytes
}

fn dequantized(dtype: DType, bytes: &[u8], cols: usize) -> Vec<u8> {
    let row_bytes = dtype.row_bytes(cols).unwrap();
    let mut out = Vec::with_capacity(bytes.len() / row_bytes * cols * 4);
    let mut row = vec![0f32; cols];
    for src in bytes.chunks_exact(row_bytes) {
        dequantize_row(dtype, src, &mut row);
        out.extend(row.iter().flat_map(|v| v.to_le_bytes()));
    }
    out
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Write the model twice, linear weights as `dtype` and dequantized to F32; their paths.
fn write_models(dtype: DType) -> [PathBuf; 2] {
    let base = GgufFile::open(&fixtures().join("tiny-mixtral.gguf")).expect("fixture opens");
    let vocab = base.get_str_array("tokenizer.ggml.tokens").unwrap().len();
    let mut rng = ChaCha8Rng::seed_from_u64(dtype as u64);
    let mut quant = GgufWriter::new();
    let mut float = GgufWriter::new();
    for w in [&mut quant, &mut float] {
        for (k, v) in base.metadata() {
            if !REPLACED.contains(&k.as_str()) {
                w.add_metadata(k, v.clone()).unwrap();
            }
        }
        for (k, v) in [
            ("llama.block_count", 1),
            ("llama.embedding_length", HIDDEN as u32),
            ("llama.feed_forward_length", FFN as u32),
            ("llama.rope.dimension_count", HEAD_DIM as u32),
        ] {
            w.add_metadata(k, MetaValue::U32(v)).unwrap();
        }
    }
    let mut both = |name: &str, shape: &[usize], dt: DType, bytes: Vec<u8>| {
        let f = if dt == DType::F32 {
            bytes.clone()
        } else {
            dequantized(dt, &bytes, shape[1])
        };
        quant.add_tensor(name, dt, shape, bytes).unwrap();
        float.add_tensor(name, DType::F32, shape, f).unwrap();
    };
    let embd: Vec<f32> = (0..vocab * HIDDEN)
        .map(|_| rng.gen_range(-1.0..1.0))
        .collect();
    both(
        "token_embd.weight",
        &[vocab, HIDDEN],
        DType::F32,
        f32_bytes(&embd),
    );
    for name in [
        "output_norm.weight",
        "blk.0.attn_norm.weight",
        "blk.0.ffn_norm.weight",
    ] {
        both(name, &[HIDDEN], DType::F32, f32_bytes(&[1.0; HIDDEN]));
    }
    let kv = KV_HEADS * HEAD_DIM;
    let s = 1.0 / (HIDDEN as f32).sqrt();
    for (name, rows, cols, rms) in [
        ("blk.0.attn_q.weight", HIDDEN, HIDDEN, s),
        ("blk.0.attn_k.weight", kv, HIDDEN, s),
        ("blk.0.attn_v.weight", kv, HIDDEN, s),
        ("blk.0.attn_output.weight", HIDDEN, HIDDEN, s),
        ("blk.0.ffn_gate.weight", FFN, HIDDEN, s),
        ("blk.0.ffn_up.weight", FFN, HIDDEN, s),
        (
            "blk.0.ffn_down.weight",
            HIDDEN,
            FFN,
            1.0 / (FFN as f32).sqrt(),
        ),
        ("output.weight", vocab, HIDDEN, 4.0 * s),
    ] {
        let bytes = random_matrix(dtype, rows, cols, rms, &mut rng);
        both(name, &[rows, cols], dtype, bytes);
    }
    let dir = std::env::temp_dir();
    let tag = format!("{}-{}", dtype.name().to_lowercase(), std::process::id());
    [(quant, "q"), (float, "f32")].map(|(w, kind)| {
        let path = dir.join(format!("kestrel-iquant-{tag}-{kind}.gguf"));
        let mut out = std::fs::File::create(&path).unwrap();
        w.write(&mut out).unwrap();
        path
    })
}

fn check_type(dtype: DType) {
    let [qpath, fpath] = write_models(dtype);
    compare_models(dtype, &qpath, &fpath);
}

/// Run the quantized and the F32 model on the same tokens (then delete both files) and
/// check the tolerance.
fn compare_models(dtype: DType, qpath: &std::path::Path, fpath: &std::path::Path) {
    let ids: Vec<u32> = vec![1, 17, 42, 99, 200, 5, 300, 77, 150, 9, 250, 33];
    let (ql, vocab) = teacher_forced_logits(&mut runner(load(qpath), 16), &ids);
    let (fl, fvocab) = teacher_forced_logits(&mut runner(load(fpath), 16), &ids);
    let _ = std::fs::remove_file(qpath);
    let _ = std::fs::remove_file(fpath);
    assert_eq!(
        (ql.len(), vocab),
        (fl.len(), fvocab),
        "{dtype}: same logits shape"
    );
    let amax = fl.iter().fold(0f32, |m, v| m.max(v.abs()));
    assert!(amax > 0.1, "{dtype}: non-trivial logits (max {amax})");
    let tol = TOL * amax;
    assert!(ql != fl, "{dtype}: the quantized model ran as F32");
    for (pos, (q, f)) in ql.chunks(vocab).zip(fl.chunks(vocab)).enumerate() {
        let diff = q.iter().zip(f).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(
            diff <= tol,
            "{dtype} position {pos}: max |Δlogit| {diff} > {tol}"
        );
        let mut sorted = f.to_vec();
        sorted.sort_by(|a, b| b.total_cmp(a));
        if sorted[0] - sorted[1] > 2.0 * tol {
            assert_eq!(argmax(q), argmax(f), "{dtype} position {pos}: argmax");
        }
    }
}

macro_rules! model_tests {
    ($($name:ident: $dtype:expr,)*) => {
        $(
            #[test]
            fn $name() {
                check_type($dtype);
            }
        )*
    };
}

model_tests! {
    iq2_xxs_model_matches_dequantized_f32: DType::IQ2_XXS,
    iq2_xs_model_matches_dequantized_f32: DType::IQ2_XS,
    iq2_s_model_matches_dequantized_f32: DType::IQ2_S,
    iq3_xxs_model_matches_dequantized_f32: DType::IQ3_XXS,
    iq3_s_model_matches_dequantized_f32: DType::IQ3_S,
    iq1_s_model_matches_dequantized_f32: DType::IQ1_S,
    iq1_m_model_matches_dequantized_f32: DType::IQ1_M,
    mxfp4_model_matches_dequantized_f32: DType::MXFP4,
}

/// gpt-oss's layout: the experts of a mixture-of-experts model in MXFP4. The tiny-mixtral
/// fixture with its F16 expert tensors quantized to MXFP4 by the reference quantizer runs
/// within the same tolerance of the fixture with those experts dequantized back to F32.
#[test]
fn mxfp4_experts_match_dequantized_f32() {
    let base = GgufFile::open(&fixtures().join("tiny-mixtral.gguf")).expect("fixture opens");
    let mut quant = GgufWriter::new();
    let mut float = GgufWriter::new();
    for w in [&mut quant, &mut float] {
        for (k, v) in base.metadata() {
            w.add_metadata(k, v.clone()).unwrap();
        }
    }
    let mut experts = 0;
    for info in base.tensors() {
        let bytes = base.tensor_data(info).expect("tensor data").to_vec();
        let shape = info.shape();
        if !info.name.ends_with("_exps.weight") {
            quant
                .add_tensor(&info.name, info.dtype, &shape, bytes.clone())
                .unwrap();
            float
                .add_tensor(&info.name, info.dtype, &shape, bytes)
                .unwrap();
            continue;
        }
        experts += 1;
        let mut values = vec![0f32; info.n_elements() as usize];
        dequantize_row(info.dtype, &bytes, &mut values);
        let q: Vec<u8> =
            bytemuck::cast_slice(&kestrel_kernels::quant::mxfp4::quantize_ref(&values)).to_vec();
        let mut back = vec![0f32; values.len()];
        dequantize_row(DType::MXFP4, &q, &mut back);
        quant
            .add_tensor(&info.name, DType::MXFP4, &shape, q)
            .unwrap();
        float
            .add_tensor(&info.name, DType::F32, &shape, f32_bytes(&back))
            .unwrap();
    }
    assert_eq!(experts, 6, "gate, up and down experts of two layers");
    let dir = std::env::temp_dir();
    let [qpath, fpath] = [(quant, "q"), (float, "f32")].map(|(w, kind)| {
        let path = dir.join(format!(
            "kestrel-mxfp4-moe-{}-{kind}.gguf",
            std::process::id()
        ));
        w.write(&mut std::fs::File::create(&path).unwrap()).unwrap();
        path
    });
    compare_models(DType::MXFP4, &qpath, &fpath);
}
