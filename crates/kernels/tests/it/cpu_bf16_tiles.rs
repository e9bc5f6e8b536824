//! BF16 weights on AMX-BF16 tiles and AVX512-BF16 dot products against their spec
//! (`matmul_bf16_ref`: activations split into bf16 hi + lo parts, exact products summed in
//! `f64`).
//!
//! Tolerance ([`tolerance`], with `S = Σ_k |w x|` per output, `u = 2⁻²⁴`):
//! - AMX: the tile unit sums the exact products in `f32`, one pair of products at a time per
//!   accumulator (hi and lo parts in turn), so an output's error is at most about `(K + 32)
//!   · 2u · S`.
//! - AVX512-BF16: `vdpbf16ps` adds each product to its lane's accumulator with one
//!   nearest-even rounding, flushing denormal operands, products and sums to zero; a lane
//!   sums `K / 8` products, then 4 rounds add the lanes, so (the module doc of `bf16_tiles`
//!   derives it) `|y − spec| ≤ (K/8 + 6) u S + 2⁻¹²⁶ (Σ_k 2(|w| + |x|) + 3K)`.
//!
//! A wrong element, row or pair order, or a lost lo part, gives errors of the order of `2⁻⁹
//! S` or more.
//!
//! A kernel this CPU lacks is named on stderr as not run; the reference is checked anyway.

use kestrel_kernels::cpu::bf16_tiles::{
    matmul_bf16_ref, matmul_bf16_tiles, matmul_bf16_with, split_bf16, takes, Bf16Kernel, MIN_ROWS,
};
use kestrel_kernels::cpu::gemm::{matmul, MatRef, Scratch};
use kestrel_kernels::cpu::ThreadPool;
use kestrel_kernels::quant::DType;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn bf16_matrix(rows: usize, cols: usize, rng: &mut ChaCha8Rng) -> (Vec<u8>, Vec<f32>) {
    let w: Vec<f32> = (0..rows * cols)
        .map(|i| rng.gen_range(-1.0f32..1.0) * if i % 7 == 0 { 16.0 } else { 1.0 })
        .map(|v| half::bf16::from_f32(v).to_f32())
        .collect();
    let bytes = w
        .iter()
        .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
        .collect();
    (bytes, w)
}

/// `Σ|w x|` per output, for the tolerance.
fn magnitudes(w: &[f32], x: &[f32], rows: usize, cols: usize, m: usize) -> Vec<f64> {
    let mut out = vec![0.0; m * rows];
    for j in 0..m {
        for r in 0..rows {
            out[j * rows + r] = (0..cols)
                .map(|k| (w[r * cols + k] as f64 * x[j * cols + k] as f64).abs())
                .sum();
        }
    }
    out
}

/// `Σ_k (|w| + |x|)` per output, for the flush-to-zero term of the AVX512-BF16 bound.
fn sums(w: &[f32], x: &[f32], rows: usize, cols: usize, m: usize) -> Vec<f64> {
    let mut out = vec![0.0; m * rows];
    for j in 0..m {
        for r in 0..rows {
            out[j * rows + r] = (0..cols)
                .map(|k| (w[r * cols + k] as f64).abs() + (x[j * cols + k] as f64).abs())
                .sum();
        }
    }
    out
}

/// The largest error `kernel` may make on an output of a `cols`-long product with `Σ|w x| =
/// mag` and `Σ(|w| + |x|) = sum` (see the module doc).
fn tolerance(kernel: Bf16Kernel, cols: usize, mag: f64, sum: f64) -> f64 {
    let u = (2.0f64).powi(-24);
    match kernel {
        Bf16Kernel::Amx => (cols as f64 + 32.0) * 2.0 * u * mag,
        Bf16Kernel::Avx512Bf16 => {
            let flushed = (2.0f64).powi(-126) * (2.0 * sum + 3.0 * cols as f64);
            (cols as f64 / 8.0 + 6.0) * u * mag + flushed
        }
    }
}

fn tiles_available() -> bool {
    if Bf16Kernel::detected().is_some() {
        return true;
    }
    eprintln!("no AMX-BF16 or AVX512-BF16 on this CPU (or capped): bf16 products not run");
    false
}

/// The kernels to test, naming on stderr those this CPU lacks.
fn kernels() -> Vec<Bf16Kernel> {
    let have = Bf16Kernel::available();
    for k in [Bf16Kernel::Amx, Bf16Kernel::Avx512Bf16] {
        if !have.contains(&k) {
            eprintln!("{k:?} not on this CPU: its products not run");
        }
    }
    have
}

#[test]
fn reference_splits_activations_into_two_bf16() {
    let (rows, cols, m) = (3, 64, 2);
    let mut rng = ChaCha8Rng::seed_from_u64(40);
    let (data, wf) = bf16_matrix(rows, cols, &mut rng);
    // 1 + 2⁻⁹ + 2⁻²⁰: hi = 1 (bf16 keeps 8 bits), lo = bf16(2⁻⁹ + 2⁻²⁰) = 2⁻⁹; the products
    // see 1 + 2⁻⁹.
    let v = 1.0 + 1.0 / 512.0 + 1.0 / (1u32 << 20) as f32;
    assert_eq!(split_bf16(v), (1.0, 1.0 / 512.0));
    let x = vec![v; m * cols];
    let mut y = vec![0.0; m * rows];
    let w = MatRef {
        dtype: DType::BF16,
        rows,
        cols,
        data: &data,
    };
    matmul_bf16_ref(w, &x, m, &mut y);
    for j in 0..m {
        for r in 0..rows {
            let sum: f64 = wf[r * cols..(r + 1) * cols].iter().map(|&v| v as f64).sum();
            let want = sum * (1.0 + 1.0 / 512.0);
            assert_eq!(y[j * rows + r], want as f32, "y[{j}][{r}]");
        }
    }
    assert_eq!(
        split_bf16(1.0 + 3.0 / 256.0),
        (1.0 + 1.0 / 64.0, -1.0 / 256.0),
        "ties to even"
    );
    let (hi, lo) = split_bf16(f32::NAN);
    assert!(hi.is_nan() && lo == 0.0);
    assert_eq!(split_bf16(f32::INFINITY), (f32::INFINITY, 0.0));
}

/// Every panel and group shape: rows in whole and partial panels of 32, activation rows in
/// one or two tiles of a group, several groups, short and long K.
#[test]
fn tiles_match_reference() {
    let mut rng = ChaCha8Rng::seed_from_u64(41);
    let pools = [ThreadPool::new(1), ThreadPool::new(3)];
    let mut scratch = Scratch::default();
    for (rows, cols) in [
        (32, 32),
        (7, 64),
        (45, 576),
        (96, 96),
        (130, 1536),
        (33, 2048),
    ] {
        let (data, wf) = bf16_matrix(rows, cols, &mut rng);
        let w = MatRef {
            dtype: DType::BF16,
            rows,
            cols,
            data: &data,
        };
        for m in [MIN_ROWS, 17, 32, 33, 70] {
            assert_eq!(takes(&w, m), Bf16Kernel::detected().is_some());
            let x: Vec<f32> = (0..m * cols).map(|_| rng.gen_range(-2.0f32..2.0)).collect();
            let mut want = vec![0.0; m * rows];
            matmul_bf16_ref(w, &x, m, &mut want);
            let mag = magnitudes(&wf, &x, rows, cols, m);
            let sum = sums(&wf, &x, rows, cols, m);
            for (pool, kernel) in pools
                .iter()
                .flat_map(|p| kernels().into_iter().map(move |k| (p, k)))
            {
                let mut y = vec![f32::NAN; m * rows];
                matmul_bf16_with(pool, kernel, w, &x, m, &mut y, &mut scratch);
                let at = format!(
                    "{kernel:?} {rows}x{cols} m={m} threads={}",
                    pool.n_threads()
                );
                assert_within_bound(&at, kernel, cols, rows, &y, &want, &mag, &sum);
            }
        }
    }
}

/// Every output `y[i]` within `kernel`'s bound of the spec `want[i]` (`mag`, `sum`: the
/// product's magnitudes and signed sums per output); `at` names the case in a failure.
#[allow(clippy::too_many_arguments)]
fn assert_within_bound(
    at: &str,
    kernel: Bf16Kernel,
    cols: usize,
    rows: usize,
    y: &[f32],
    want: &[f32],
    mag: &[f64],
    sum: &[f64],
) {
    for (i, (((&g, &e), &s), &a)) in y.iter().zip(want).zip(mag).zip(sum).enumerate() {
        let tol = tolerance(kernel, cols, s, a);
        assert!(
            ((g - e) as f64).abs() <= tol,
            "{at}: y[{}][{}] = {g:e}, spec {e:e}, bound {tol:e}",
            i / rows,
            i % rows
        );
    }
}

/// Tiny activations (lo parts and products below `f32`'s normal range, which `vdpbf16ps`
/// flushes to zero) and values spread over many binades (cancellation): every kernel stays
/// within its bound, whose flush term is what covers the tiny case.
#[test]
fn tiny_and_spread_values_within_bound() {
    let mut rng = ChaCha8Rng::seed_from_u64(43);
    let pool = ThreadPool::new(2);
    let mut scratch = Scratch::default();
    let (rows, cols, m) = (9, 256, 19);
    let (data, wf) = bf16_matrix(rows, cols, &mut rng);
    let w = MatRef {
        dtype: DType::BF16,
        rows,
        cols,
        data: &data,
    };
    let tiny: Vec<f32> = (0..m * cols)
        .map(|_| rng.gen_range(-1.0f32..1.0) * 1e-37)
        .collect();
    let spread: Vec<f32> = (0..m * cols)
        .map(|i| rng.gen_range(-1.0f32..1.0) * (2.0f32).powi((i % 41) as i32 - 20))
        .collect();
    for x in [tiny, spread] {
        let mut want = vec![0.0; m * rows];
        matmul_bf16_ref(w, &x, m, &mut want);
        let mag = magnitudes(&wf, &x, rows, cols, m);
        let sum = sums(&wf, &x, rows, cols, m);
        for kernel in kernels() {
            let mut y = vec![f32::NAN; m * rows];
            matmul_bf16_with(&pool, kernel, w, &x, m, &mut y, &mut scratch);
            assert_within_bound(
                &format!("{kernel:?}"),
                kernel,
                cols,
                rows,
                &y,
                &want,
                &mag,
                &sum,
            );
        }
    }
}

/// `matmul` sends BF16 products of at least `MIN_ROWS` rows to the tiles (the bf16-rounded
/// spec), fewer rows and other dtypes to the `f32`-activation kernels.
#[test]
fn matmul_routes_bf16_products() {
    let (rows, cols) = (40, 128);
    let mut rng = ChaCha8Rng::seed_from_u64(42);
    let (data, _) = bf16_matrix(rows, cols, &mut rng);
    let w = MatRef {
        dtype: DType::BF16,
        rows,
        cols,
        data: &data,
    };
    assert!(!takes(&w, MIN_ROWS - 1));
    let f32_w = MatRef {
        dtype: DType::F32,
        rows: 1,
        cols: 32,
        data: &[0; 128],
    };
    assert!(!takes(&f32_w, 64));
    let odd = MatRef {
        dtype: DType::BF16,
        rows: 1,
        cols: 48,
        data: &[0; 96],
    };
    assert!(!takes(&odd, 64), "K must be whole 32-element steps");
    if !tiles_available() {
        return;
    }
    let m = 20;
    let x: Vec<f32> = (0..m * cols).map(|_| rng.gen_range(-2.0f32..2.0)).collect();
    let (mut tiles, mut via) = (vec![0.0; m * rows], vec![0.0; m * rows]);
    let pool = ThreadPool::new(2);
    matmul_bf16_tiles(&pool, w, &x, m, &mut tiles, &mut Scratch::default());
    matmul(&pool, w, &x, m, &mut via, &mut Scratch::default());
    assert_eq!(tiles, via, "matmul takes the tile path for {m} rows");
}
