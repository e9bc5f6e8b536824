//! Packed weight panels: packing round-trips, the SIMD panel kernel is bit-identical to the
//! scalar spec, and the packed product matches the GGUF-layout product of the same matrix.

use kestrel_kernels::cpu::gemm::{matmul_with, GemmKernels, MatRef, Scratch};
use kestrel_kernels::cpu::packed::{
    can_share_input, matmul_packed, matmul_packed_many, matmul_packed_many_with,
    matmul_packed_segments, matmul_packed_with, panel_kernel, panel_kernels, panel_spec,
    tiles_spec, worth_packing, PackedMatrix, PanelFn, PANEL,
};
use kestrel_kernels::cpu::{Isa, ThreadPool};
use kestrel_kernels::quant::{self, DType};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const KINDS: [DType; 5] = [
    DType::Q4_0,
    DType::Q4_1,
    DType::Q8_0,
    DType::Q4_K,
    DType::Q6_K,
];

/// `cols` for the 32-value block kinds; for the K-quants, whole super-blocks of 256 (at least
/// two).
fn width(dtype: DType, cols: usize) -> usize {
    if matches!(dtype, DType::Q4_K | DType::Q6_K) {
        cols.div_ceil(256).max(2) * 256
    } else {
        cols
    }
}

/// A `rows × cols` matrix of `dtype` quantized from random values (some rows scaled up, so
/// block scales vary widely).
fn quantized(dtype: DType, rows: usize, cols: usize, rng: &mut ChaCha8Rng) -> Vec<u8> {
    let x: Vec<f32> = (0..rows * cols)
        .map(|i| {
            rng.gen_range(-1.0f32..1.0)
                * if (i / cols).is_multiple_of(5) {
                    8.0
                } else {
                    1.0
                }
        })
        .collect();
    match dtype {
        DType::Q4_0 => bytemuck::cast_slice(&quant::q4_0::quantize_ref(&x)).to_vec(),
        DType::Q4_1 => bytemuck::cast_slice(&quant::q4_1::quantize_ref(&x)).to_vec(),
        DType::Q8_0 => bytemuck::cast_slice(&quant::q8_0::quantize_ref(&x)).to_vec(),
        DType::Q4_K => bytemuck::cast_slice(&quant::q4_k::quantize_ref(&x)).to_vec(),
        DType::Q6_K => bytemuck::cast_slice(&quant::q6_k::quantize_ref(&x)).to_vec(),
        _ => unreachable!("only the packed kinds"),
    }
}

fn random_x(m: usize, cols: usize, rng: &mut ChaCha8Rng) -> Vec<f32> {
    (0..m * cols).map(|_| rng.gen_range(-2.0f32..2.0)).collect()
}

#[test]
fn unpacking_a_row_gives_back_its_gguf_bytes() {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    for dtype in KINDS {
        let (rows, cols) = (48, width(dtype, 96));
        let data = quantized(dtype, rows, cols, &mut rng);
        let packed = PackedMatrix::pack(dtype, rows, cols, &data).unwrap();
        let rb = dtype.row_bytes(cols).unwrap();
        let mut row = vec![0u8; rb];
        let (mut deq, mut want) = (vec![0.0f32; cols], vec![0.0f32; cols]);
        for r in 0..rows {
            packed.unpack_row(r, &mut row);
            assert_eq!(row, data[r * rb..(r + 1) * rb], "{dtype} row {r}");
            packed.dequantize_row(r, &mut deq);
            quant::dequantize_row(dtype, &data[r * rb..(r + 1) * rb], &mut want);
            assert_eq!(deq, want, "{dtype} row {r} dequantized");
        }
    }
}

#[test]
fn a_packed_group_holds_the_same_panels_as_each_matrix_packed_alone() {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    for dtype in KINDS {
        // Large enough (3 × ~1.2 MB for Q8_0) to be packed on several threads, in one buffer
        // that crosses huge-page boundaries.
        let (rows, cols) = (1024, width(dtype, 1152));
        let mats: Vec<Vec<u8>> = (0..3)
            .map(|_| quantized(dtype, rows, cols, &mut rng))
            .collect();
        let views: Vec<&[u8]> = mats.iter().map(|m| &m[..]).collect();
        let group = PackedMatrix::pack_group(dtype, rows, cols, &views).unwrap();
        assert_eq!(group.len(), 3);
        let rb = dtype.row_bytes(cols).unwrap();
        let (mut got, mut want) = (vec![0u8; rb], vec![0u8; rb]);
        for (g, data) in group.iter().zip(&mats) {
            let alone = PackedMatrix::pack(dtype, rows, cols, data).unwrap();
            assert_eq!(g.n_bytes(), alone.n_bytes());
            for r in (0..rows).step_by(7) {
                g.unpack_row(r, &mut got);
                alone.unpack_row(r, &mut want);
                assert_eq!(got, want, "{dtype} row {r}");
                assert_eq!(got, data[r * rb..(r + 1) * rb], "{dtype} row {r}");
            }
        }
        let bad: Vec<&[u8]> = vec![&mats[0], &mats[1][..rb * (rows - 16)]];
        assert!(
            PackedMatrix::pack_group(dtype, rows, cols, &bad).is_none(),
            "a member of the wrong size refuses the group"
        );
    }
}

#[test]
fn packing_refuses_partial_panels_and_other_types() {
    let data = vec![0u8; 8 * DType::Q4_0.row_bytes(64).unwrap()];
    assert!(PackedMatrix::pack(DType::Q4_0, 8, 64, &data).is_none());
    assert!(!worth_packing(DType::Q4_0, 8));
    assert!(!worth_packing(DType::Q5_K, 256));
    assert!(worth_packing(DType::Q6_K, 256) == (Isa::detected() >= Isa::Avx2));
    let f32_data = vec![0u8; 16 * 64 * 4];
    assert!(PackedMatrix::pack(DType::F32, 16, 64, &f32_data).is_none());
    // Wrong byte count.
    assert!(PackedMatrix::pack(DType::Q8_0, 16, 64, &data).is_none());
}

/// A packed `rows × cols` matrix of `dtype` with random values.
fn random_packed(dtype: DType, rows: usize, cols: usize, rng: &mut ChaCha8Rng) -> PackedMatrix {
    let data = quantized(dtype, rows, cols, rng);
    PackedMatrix::pack(dtype, rows, cols, &data).unwrap()
}

/// `x (m rows) · Wᵀ` with `kernel`.
fn product(pool: &ThreadPool, kernel: PanelFn, w: &PackedMatrix, x: &[f32], m: usize) -> Vec<f32> {
    let mut y = vec![0.0; m * w.rows()];
    matmul_packed_with(pool, kernel, w, x, m, &mut y, &mut Scratch::default());
    y
}

/// Every row count 1..=20 (all kernel widths, partial tiles) plus one past the activation chunk.
const ROW_COUNTS: [usize; 6] = [1, 3, 8, 13, 20, 70];

#[test]
fn simd_panel_kernel_is_bit_identical_to_the_scalar_spec() {
    let pool = ThreadPool::new(2);
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    for dtype in KINDS {
        let cols = width(dtype, 160);
        let packed = random_packed(dtype, 64, cols, &mut rng);
        for m in ROW_COUNTS.into_iter().chain(1..=9) {
            let x = random_x(m, cols, &mut rng);
            for v in panel_kernels() {
                let want = product(&pool, v.spec, &packed, &x, m);
                let got = product(&pool, v.kernel, &packed, &x, m);
                assert_eq!(got, want, "{dtype} {} m={m}", v.name);
            }
        }
    }
}

/// Long K-quant rows (9 super-blocks): the AMX kernel streams one group of rows through a
/// ring of unpacked minima that wraps around, and shares chunks among the groups
/// of more rows; every variant still equals its spec.
#[test]
fn k_quant_kernels_on_long_rows_are_bit_identical_to_their_spec() {
    let pool = ThreadPool::new(2);
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    for dtype in [DType::Q4_K, DType::Q6_K] {
        let cols = 9 * 256;
        let packed = random_packed(dtype, 32, cols, &mut rng);
        for m in [4, 13, 16, 17, 40] {
            let x = random_x(m, cols, &mut rng);
            for v in panel_kernels() {
                let want = product(&pool, v.spec, &packed, &x, m);
                let got = product(&pool, v.kernel, &packed, &x, m);
                assert_eq!(got, want, "{dtype} {} m={m}", v.name);
            }
        }
    }
}

/// Every kernel gives a row the same result alone as among many rows (the AMX kernel sends
/// calls of few rows to a VNNI kernel on its own spec): a sequence's logits do not depend on
/// what else is in the batch, and speculative decoding's verify batch picks exactly what
/// plain decoding picks.
#[test]
fn a_row_gets_the_same_result_alone_and_in_a_batch() {
    let pool = ThreadPool::new(2);
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    for dtype in KINDS {
        let (rows, cols) = (32, width(dtype, 256));
        let packed = random_packed(dtype, rows, cols, &mut rng);
        let m = 37;
        let x = random_x(m, cols, &mut rng);
        for v in panel_kernels() {
            let batch = product(&pool, v.kernel, &packed, &x, m);
            for j in [0, 5, 17, 36] {
                let alone = product(&pool, v.kernel, &packed, &x[j * cols..(j + 1) * cols], 1);
                assert_eq!(
                    alone,
                    batch[j * rows..(j + 1) * rows],
                    "{dtype} {} row {j}",
                    v.name
                );
            }
        }
    }
}

/// Q6_K at the edges of its integer ranges: every quant 0 or 63 (signed −32 or 31), sub-block
/// scales −128 or 127, activations at ±127. The AVX2 kernel's path for many rows adds four
/// products of up to `255 · 32` in `i16` and the AVX-512 one starts each sub-block from
/// `−32` times the activation sum; every kernel still equals its spec bit for bit, and the
/// packed product the GGUF-layout one.
#[test]
fn q6_k_at_the_edges_of_its_ranges_is_exact() {
    let pool = ThreadPool::new(2);
    let (rows, cols) = (32, 3 * 256);
    let mut data = Vec::new();
    for r in 0..rows {
        for b in 0..cols / 256 {
            let quants = if (r + b) % 2 == 0 { 0x00 } else { 0xFF };
            data.extend(std::iter::repeat_n(quants, 128 + 64));
            let scale: i8 = if (r / 2 + b) % 2 == 0 { -128 } else { 127 };
            data.extend(std::iter::repeat_n(scale as u8, 16));
            data.extend(half::f16::from_f32(1.0 / 64.0).to_le_bytes());
        }
    }
    let packed = PackedMatrix::pack(DType::Q6_K, rows, cols, &data).unwrap();
    let w = MatRef {
        dtype: DType::Q6_K,
        rows,
        cols,
        data: &data,
    };
    let kernels = GemmKernels::for_isa(DType::Q6_K, Isa::Scalar);
    for m in [1, 2, 9, 16] {
        // Rows of all +1, all −1, and signs flipping every 16 values: every activation quant
        // is ±127.
        let x: Vec<f32> = (0..m * cols)
            .map(|i| match (i / cols) % 3 {
                0 => 1.0,
                1 => -1.0,
                _ if (i % cols / 16) % 2 == 0 => 1.0,
                _ => -1.0,
            })
            .collect();
        for v in panel_kernels() {
            let want = product(&pool, v.spec, &packed, &x, m);
            let got = product(&pool, v.kernel, &packed, &x, m);
            assert_eq!(got, want, "{} m={m}", v.name);
        }
        let mut want = vec![0.0; m * rows];
        let mut scratch = Scratch::default();
        matmul_with(&pool, &kernels, w, &x, m, &mut want, &mut scratch);
        let got = product(&pool, panel_kernel(Isa::detected()), &packed, &x, m);
        let scale = want.iter().fold(0.0f32, |a, v| a.max(v.abs()));
        assert!(scale > 0.0);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!((g - w).abs() <= 1e-5 * scale, "m={m} [{i}]: {g} vs {w}");
        }
    }
}

/// The AMX kernel's spec sums whole K-quant super-blocks in `i32` and rounds once, the main
/// spec rounds per sub-block: both stay within a few `f32` roundings of the exact product.
#[test]
fn the_tile_spec_agrees_with_the_panel_spec_to_rounding() {
    let pool = ThreadPool::new(2);
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    for dtype in KINDS {
        let cols = width(dtype, 512);
        let packed = random_packed(dtype, 32, cols, &mut rng);
        let m = 5;
        let x = random_x(m, cols, &mut rng);
        let a = product(&pool, panel_spec(), &packed, &x, m);
        let b = product(&pool, tiles_spec(), &packed, &x, m);
        let scale = a.iter().fold(0.0f32, |s, v| s.max(v.abs()));
        for (i, (p, q)) in a.iter().zip(&b).enumerate() {
            assert!(
                (p - q).abs() <= 1e-5 * scale,
                "{dtype} output {i}: {p} vs {q} (largest {scale})"
            );
        }
        let differ = a.iter().zip(&b).filter(|(p, q)| p != q).count();
        if dtype.block_size() == 32 {
            assert_eq!(
                differ, 0,
                "{dtype}: the two specs are one for 32-value blocks"
            );
        }
    }
}

#[test]
fn packed_product_matches_the_gguf_layout_product() {
    let pool = ThreadPool::new(2);
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    for dtype in KINDS {
        let (rows, cols) = (PANEL * 6, width(dtype, 256));
        let data = quantized(dtype, rows, cols, &mut rng);
        let packed = PackedMatrix::pack(dtype, rows, cols, &data).unwrap();
        let w = MatRef {
            dtype,
            rows,
            cols,
            data: &data,
        };
        let kernels = GemmKernels::for_isa(dtype, Isa::Scalar);
        for m in ROW_COUNTS {
            let x = random_x(m, cols, &mut rng);
            let mut scratch = Scratch::default();
            let (mut want, mut got) = (vec![0.0; m * rows], vec![0.0; m * rows]);
            matmul_with(&pool, &kernels, w, &x, m, &mut want, &mut scratch);
            matmul_packed(&pool, &packed, &x, m, &mut got, &mut scratch);
            let scale = want.iter().fold(0.0f32, |a, v| a.max(v.abs()));
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                // Same integer block sums; only the f32 summation order of the blocks differs.
                assert!(
                    (g - w).abs() <= 1e-5 * scale,
                    "{dtype} m={m} [{i}]: {g} vs {w}"
                );
            }
        }
    }
}

#[test]
fn products_sharing_an_input_equal_the_separate_products() {
    let pool = ThreadPool::new(2);
    let mut rng = ChaCha8Rng::seed_from_u64(4);
    for dtype in KINDS {
        let cols = width(dtype, 128);
        // Panel counts 5, 1 and 3: the threads' shares straddle the matrices.
        let mats: Vec<PackedMatrix> = [5, 1, 3]
            .iter()
            .map(|p| {
                let data = quantized(dtype, p * PANEL, cols, &mut rng);
                PackedMatrix::pack(dtype, p * PANEL, cols, &data).unwrap()
            })
            .collect();
        for m in ROW_COUNTS {
            let x = random_x(m, cols, &mut rng);
            let mut scratch = Scratch::default();
            let want: Vec<Vec<f32>> = mats
                .iter()
                .map(|w| {
                    let mut y = vec![0.0; m * w.rows()];
                    matmul_packed(&pool, w, &x, m, &mut y, &mut scratch);
                    y
                })
                .collect();
            let mut got: Vec<Vec<f32>> =
                mats.iter().map(|w| vec![f32::NAN; m * w.rows()]).collect();
            let [g0, g1, g2] = &mut got[..] else {
                unreachable!()
            };
            let ws = [&mats[0], &mats[1], &mats[2]];
            matmul_packed_many(&pool, ws, &x, m, [g0, g1, g2], &mut scratch);
            assert_eq!(got, want, "{dtype} m={m}");
        }
    }
}

/// The AMX kernel takes the panels of K-quant products two at a call (across the matrices of
/// a shared-input product, the last one alone when their count is odd) and computes whole
/// groups of 16 rows, the last one padded: for row counts within one call, across calls and
/// with partial last groups, every variant still equals its spec bit for bit.
#[test]
fn paired_panels_across_matrices_are_bit_identical_to_the_spec() {
    let pool = ThreadPool::new(2);
    let mut rng = ChaCha8Rng::seed_from_u64(13);
    for dtype in [DType::Q4_K, DType::Q6_K] {
        let cols = 3 * 256;
        let mats: Vec<PackedMatrix> = [3, 2, 1]
            .iter()
            .map(|&p| random_packed(dtype, p * PANEL, cols, &mut rng))
            .collect();
        for m in [17, 33, 128, 150, 300] {
            let x = random_x(m, cols, &mut rng);
            for v in panel_kernels() {
                let run = |kernel| {
                    let mut ys: Vec<Vec<f32>> =
                        mats.iter().map(|w| vec![f32::NAN; m * w.rows()]).collect();
                    let [y0, y1, y2] = &mut ys[..] else {
                        unreachable!()
                    };
                    let ws = [&mats[0], &mats[1], &mats[2]];
                    let mut scratch = Scratch::default();
                    matmul_packed_many_with(&pool, kernel, ws, &x, m, [y0, y1, y2], &mut scratch);
                    ys
                };
                assert_eq!(run(v.kernel), run(v.spec), "{dtype} {} m={m}", v.name);
            }
        }
    }
}

/// Segment row counts: empty ones, one row (decode), and more than one activation chunk.
const SEGMENT_ROWS: [usize; 6] = [3, 0, 1, 70, 0, 9];

#[test]
fn segmented_products_equal_each_segments_own_products() {
    let pool = ThreadPool::new(2);
    let mut rng = ChaCha8Rng::seed_from_u64(6);
    for dtype in KINDS {
        let cols = width(dtype, 96);
        // Per segment a gate-like (3 panels) and a down-like (2 panels) matrix.
        let mats: Vec<[PackedMatrix; 2]> = SEGMENT_ROWS
            .iter()
            .map(|_| {
                [3, 2].map(|p| {
                    let data = quantized(dtype, p * PANEL, cols, &mut rng);
                    PackedMatrix::pack(dtype, p * PANEL, cols, &data).unwrap()
                })
            })
            .collect();
        let mut offsets = vec![0];
        for r in SEGMENT_ROWS {
            offsets.push(offsets.last().unwrap() + r);
        }
        let m = *offsets.last().unwrap();
        let x = random_x(m, cols, &mut rng);
        let mut scratch = Scratch::default();
        let mut want = [vec![0.0f32; m * 3 * PANEL], vec![0.0f32; m * 2 * PANEL]];
        for (s, ws) in mats.iter().enumerate() {
            let (lo, hi) = (offsets[s], offsets[s + 1]);
            for (k, w) in ws.iter().enumerate() {
                let r = w.rows();
                let y = &mut want[k][lo * r..hi * r];
                matmul_packed(&pool, w, &x[lo * cols..hi * cols], hi - lo, y, &mut scratch);
            }
        }
        let [mut g0, mut g1] = [vec![f32::NAN; m * 3 * PANEL], vec![f32::NAN; m * 2 * PANEL]];
        let weights = |s: usize| [&mats[s][0], &mats[s][1]];
        let ys = [&mut g0[..], &mut g1[..]];
        matmul_packed_segments(&pool, &weights, &offsets, &x, ys, &mut scratch);
        assert_eq!([g0, g1], want, "{dtype}");
    }
}

#[test]
#[should_panic(expected = "kinds or shapes differ")]
fn segments_with_matrices_of_different_shapes_are_refused() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let pack = |panels: usize, rng: &mut ChaCha8Rng| {
        let data = quantized(DType::Q4_0, panels * PANEL, 64, rng);
        PackedMatrix::pack(DType::Q4_0, panels * PANEL, 64, &data).unwrap()
    };
    let mats = [pack(1, &mut rng), pack(2, &mut rng)];
    let x = vec![0.5f32; 2 * 64];
    let mut y = [0.0f32; 2 * PANEL];
    let weights = |s: usize| [&mats[s]];
    let pool = ThreadPool::new(1);
    matmul_packed_segments(
        &pool,
        &weights,
        &[0, 1, 2],
        &x,
        [&mut y[..]],
        &mut Scratch::default(),
    );
}

#[test]
fn only_matrices_of_one_kind_and_width_share_an_input() {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let pack = |dtype, cols, rng: &mut ChaCha8Rng| {
        PackedMatrix::pack(dtype, PANEL, cols, &quantized(dtype, PANEL, cols, rng)).unwrap()
    };
    let a = pack(DType::Q4_0, 64, &mut rng);
    let b = pack(DType::Q4_0, 64, &mut rng);
    let wide = pack(DType::Q4_0, 96, &mut rng);
    let q8 = pack(DType::Q8_0, 64, &mut rng);
    assert!(can_share_input(&[&a, &b]));
    assert!(!can_share_input(&[&a, &wide]));
    assert!(!can_share_input(&[&a, &q8]));
}
