//! matmul against a naive f32 product of dequantized weights with quantized-then-dequantized
//! activations, for every dtype whose kernels exist and every available ISA.

use kestrel_kernels::cpu::gemm::{matmul, matmul_with, GemmKernels, MatRef, Scratch};
use kestrel_kernels::cpu::{Isa, ThreadPool};
use kestrel_kernels::quant::{ActFormat, DType, TypeKernels};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The GGUF formats (Kestrel's own types are covered by `toolkit_quant.rs`).
const DTYPES: [DType; 15] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
    DType::Q2_K,
    DType::Q3_K,
    DType::Q4_K,
    DType::Q5_K,
    DType::Q6_K,
    DType::IQ4_NL,
    DType::IQ4_XS,
];

/// Dequantize an activation row in format `act` (block layouts from `quant::ActFormat`).
fn dequantize_act(act: ActFormat, bytes: &[u8], n: usize) -> Vec<f32> {
    let f16 = |b: &[u8]| half::f16::from_le_bytes([b[0], b[1]]).to_f32();
    let mut out = Vec::with_capacity(n);
    match act {
        ActFormat::F32 => out.extend(
            bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes(b.try_into().unwrap())),
        ),
        ActFormat::Q8_0 | ActFormat::Q8_1 => {
            let (bb, qoff) = if act == ActFormat::Q8_0 {
                (34, 2)
            } else {
                (36, 4)
            };
            for blk in bytes.chunks_exact(bb) {
                let d = f16(&blk[0..2]);
                out.extend(blk[qoff..qoff + 32].iter().map(|&q| d * q as i8 as f32));
            }
        }
        ActFormat::I8Row => {
            let d = f32::from_le_bytes(bytes[0..4].try_into().unwrap());
            out.extend(bytes[4..].iter().map(|&q| d * q as i8 as f32));
        }
        ActFormat::Q8K => {
            for blk in bytes.chunks_exact(292) {
                let d = f32::from_le_bytes(blk[0..4].try_into().unwrap());
                out.extend(blk[4..260].iter().map(|&q| d * q as i8 as f32));
            }
        }
    }
    assert_eq!(out.len(), n);
    out
}

/// Random weights in `dtype`: quantize random f32 rows when the type has a quantizer-free
/// layout we can build (float types), else random blocks decoded through dequantize.
fn random_weights(dtype: DType, rows: usize, cols: usize, rng: &mut ChaCha8Rng) -> Vec<u8> {
    let row_bytes = dtype.row_bytes(cols).unwrap();
    let mut data = vec![0u8; rows * row_bytes];
    match dtype {
        DType::F32 => data
            .chunks_exact_mut(4)
            .for_each(|c| c.copy_from_slice(&rng.gen_range(-1.0f32..1.0).to_le_bytes())),
        DType::F16 => data.chunks_exact_mut(2).for_each(|c| {
            c.copy_from_slice(&half::f16::from_f32(rng.gen_range(-1.0..1.0)).to_le_bytes())
        }),
        DType::BF16 => data.chunks_exact_mut(2).for_each(|c| {
            c.copy_from_slice(&half::bf16::from_f32(rng.gen_range(-1.0..1.0)).to_le_bytes())
        }),
        _ => {
            // Random bytes, then overwrite every f16 scale field with a small finite value so
            // that blocks decode to moderate numbers.
            rng.fill(&mut data[..]);
            sanitize_scales(dtype, &mut data, rng);
        }
    }
    data
}

/// Byte offsets of the f16 scale fields within a block of each quantized type.
fn scale_fields(dtype: DType) -> &'static [usize] {
    match dtype {
        DType::Q4_0 | DType::Q5_0 | DType::Q8_0 | DType::IQ4_NL | DType::IQ4_XS => &[0],
        DType::Q4_1 | DType::Q5_1 => &[0, 2],
        DType::Q4_K | DType::Q5_K => &[0, 2],
        DType::Q2_K => &[80, 82],
        DType::Q3_K => &[108],
        DType::Q6_K => &[208],
        _ => &[],
    }
}

fn sanitize_scales(dtype: DType, data: &mut [u8], rng: &mut ChaCha8Rng) {
    for blk in data.chunks_exact_mut(dtype.block_bytes()) {
        for &off in scale_fields(dtype) {
            let s = half::f16::from_f32(rng.gen_range(0.001f32..0.02));
            blk[off..off + 2].copy_from_slice(&s.to_le_bytes());
        }
    }
}

/// Naive y = x·Wᵀ in f64 from dequantized weights and activations.
fn naive(k: &GemmKernels, w: &MatRef<'_>, x: &[f32], m: usize) -> Vec<f32> {
    let tk: &TypeKernels = &k.weights;
    let row_bytes = w.dtype.row_bytes(w.cols).unwrap();
    let wf: Vec<Vec<f32>> = (0..w.rows)
        .map(|r| {
            let mut d = vec![0.0; w.cols];
            (tk.dequantize)(&w.data[r * row_bytes..(r + 1) * row_bytes], &mut d);
            d
        })
        .collect();
    let mut y = vec![0.0; m * w.rows];
    for j in 0..m {
        let xr = &x[j * w.cols..(j + 1) * w.cols];
        let xa = match k.quantize {
            Some(q) => {
                let mut bytes = vec![0u8; tk.act.row_bytes(w.cols)];
                q(xr, &mut bytes);
                dequantize_act(tk.act, &bytes, w.cols)
            }
            None => xr.to_vec(),
        };
        for r in 0..w.rows {
            y[j * w.rows + r] = wf[r]
                .iter()
                .zip(&xa)
                .map(|(&a, &b)| a as f64 * b as f64)
                .sum::<f64>() as f32;
        }
    }
    y
}

fn check_dtype(dtype: DType, pool: &ThreadPool, rng: &mut ChaCha8Rng) {
    let bs = dtype.block_size().max(32);
    let cols = bs * 3;
    let rows = 3 * pool.n_threads() * 5 + 2; // not divisible by the thread count
    let data = random_weights(dtype, rows, cols, rng);
    let w = MatRef {
        dtype,
        rows,
        cols,
        data: &data,
    };
    let mut scratch = Scratch::default();
    for isa in Isa::available() {
        let k = GemmKernels::for_isa(dtype, isa);
        for m in [1, 3, 17, 64] {
            let x: Vec<f32> = (0..m * cols).map(|_| rng.gen_range(-2.0..2.0)).collect();
            let want = naive(&k, &w, &x, m);
            let mut y = vec![f32::NAN; m * rows];
            matmul_with(pool, &k, w, &x, m, &mut y, &mut scratch);
            let scale = want.iter().fold(0.0f32, |a, v| a.max(v.abs())).max(1e-3);
            for (i, (&g, &e)) in y.iter().zip(&want).enumerate() {
                assert!(
                    (g - e).abs() <= 1e-4 * scale + 1e-4 * e.abs(),
                    "{dtype} {isa:?} m={m}: y[{i}] = {g}, naive {e} (scale {scale})"
                );
            }
        }
    }
}

#[test]
fn matmul_matches_naive_for_every_dtype_and_isa() {
    let mut rng = ChaCha8Rng::seed_from_u64(21);
    let pool = ThreadPool::new(3);
    for dtype in DTYPES {
        check_dtype(dtype, &pool, &mut rng);
    }
}

#[test]
fn public_matmul_uses_detected_kernels() {
    let mut rng = ChaCha8Rng::seed_from_u64(22);
    let (rows, cols, m) = (7, 64, 3);
    let wf: Vec<f32> = (0..rows * cols).map(|_| rng.gen_range(-1.0..1.0)).collect();
    let data: Vec<u8> = wf.iter().flat_map(|v| v.to_le_bytes()).collect();
    let x: Vec<f32> = (0..m * cols).map(|_| rng.gen_range(-1.0..1.0)).collect();
    let mut y = vec![0.0; m * rows];
    let w = MatRef {
        dtype: DType::F32,
        rows,
        cols,
        data: &data,
    };
    matmul(
        ThreadPool::global(),
        w,
        &x,
        m,
        &mut y,
        &mut Scratch::default(),
    );
    for j in 0..m {
        for r in 0..rows {
            let e: f32 = (0..cols).map(|c| x[j * cols + c] * wf[r * cols + c]).sum();
            assert!((y[j * rows + r] - e).abs() < 1e-4, "y[{j}][{r}]");
        }
    }
}

#[test]
#[should_panic(expected = "y must be m × rows")]
fn rejects_wrong_output_size() {
    let data = vec![0u8; 4 * 32 * 4];
    let w = MatRef {
        dtype: DType::F32,
        rows: 4,
        cols: 32,
        data: &data,
    };
    let k = GemmKernels::for_isa(DType::F32, Isa::Scalar);
    matmul_with(
        &ThreadPool::new(1),
        &k,
        w,
        &[0.0; 32],
        1,
        &mut [0.0; 3],
        &mut Scratch::default(),
    );
}
