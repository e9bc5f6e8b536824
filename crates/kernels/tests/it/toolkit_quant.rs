//! Kestrel's own weight formats: INT8 (W8A8 with `I8Row` activations), INT4_G32/64/128,
//! NF4 and NF4_DQ.
//!
//! * Every ISA variant against the scalar reference: INT8 bit-exact (integer sums, one final
//!   scale); INT4 / NF4 within `4 (n / 32 + 16) eps L1`, where `L1` bounds every partial sum
//!   (integer sub-block sums are exact on both sides; only the `f32` accumulation differs).
//!   Dequantize and the `I8Row` activation quantizer: byte / bit identical.
//! * Round trips within the formats' theoretical bounds (see each test).
//! * Packing: hand-built rows and blocks decode to the values the layouts define.
//! * `matmul` against an `f64` dot of dequantized weights and activations, with the
//!   formats' documented deviations (Q8_1's `f16` `s_a`, NF4's table rounded to 1/127) added to
//!   the tolerance.

use half::f16;
use kestrel_kernels::cpu::gemm::{matmul_with, GemmKernels, MatRef, Scratch};
use kestrel_kernels::cpu::{Isa, ThreadPool};
use kestrel_kernels::quant::act::ActKernels;
use kestrel_kernels::quant::{int4, int8, nf4, ActFormat, DType, TypeKernels, TILE};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const EPS: f64 = f32::EPSILON as f64;
const TOOLKIT: [DType; 6] = [
    DType::INT8,
    DType::INT4_G32,
    DType::INT4_G64,
    DType::INT4_G128,
    DType::NF4,
    DType::NF4_DQ,
];

fn rng(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed)
}

/// Gaussian-ish values (sum of uniforms) with occasional outliers.
fn values(n: usize, rng: &mut ChaCha8Rng) -> Vec<f32> {
    (0..n)
        .map(|_| {
            let g: f32 = (0..4).map(|_| rng.gen_range(-1.0f32..1.0)).sum::<f32>() * 0.5;
            if rng.gen_range(0..50) == 0 {
                g * 8.0
            } else {
                g
            }
        })
        .collect()
}

/// One quantized row of `dtype` from `x`, through the format's own quantizer.
fn quantize_row(dtype: DType, x: &[f32]) -> Vec<u8> {
    let mut out = vec![0u8; dtype.row_bytes(x.len()).expect("whole blocks")];
    match dtype {
        DType::INT8 => int8::quantize_row_ref(x, &mut out),
        DType::INT4_G32 | DType::INT4_G64 | DType::INT4_G128 => {
            out = int4::quantize_row_rtn(dtype.block_size(), x)
        }
        DType::NF4 => out = bytemuck::cast_slice(&nf4::quantize_ref(x)).to_vec(),
        DType::NF4_DQ => nf4::quantize_row_ref(x, &mut out),
        other => panic!("{other} is not a toolkit type"),
    }
    assert_eq!(out.len(), dtype.row_bytes(x.len()).unwrap());
    out
}

fn quantize_act(act: ActFormat, isa: Isa, x: &[f32]) -> Vec<u8> {
    let mut a = vec![0u8; act.row_bytes(x.len())];
    (ActKernels::for_isa(isa).quantize[act as usize])(x, &mut a);
    a
}

/// Dequantized activation row (Q8_0, Q8_1 or I8Row).
fn dequantize_act(act: ActFormat, a: &[u8], n: usize) -> Vec<f32> {
    let h = |b: &[u8]| f16::from_le_bytes([b[0], b[1]]).to_f32();
    match act {
        ActFormat::I8Row => {
            let d = f32::from_le_bytes(a[..4].try_into().unwrap());
            a[4..4 + n].iter().map(|&q| q as i8 as f32 * d).collect()
        }
        ActFormat::Q8_0 | ActFormat::Q8_1 => {
            let (bb, off) = if act == ActFormat::Q8_0 {
                (34, 2)
            } else {
                (36, 4)
            };
            a.chunks_exact(bb)
                .take(n / 32)
                .flat_map(|b| b[off..off + 32].iter().map(move |&q| q as i8 as f32 * h(b)))
                .collect()
        }
        other => panic!("{other:?} is not used by toolkit types"),
    }
}

/// `(d, z, codes)` of INT4 group `g` of a row.
fn int4_group(row: &[u8], group: usize, g: usize) -> (f32, u8, Vec<u8>) {
    let b = &row[g * (4 + group / 2)..][..4 + group / 2];
    let codes = (0..group)
        .map(|k| {
            let (s, j) = (k / 32, k % 32);
            let byte = b[4 + 16 * s + j % 16];
            if j < 16 {
                byte & 0x0F
            } else {
                byte >> 4
            }
        })
        .collect();
    (f16::from_le_bytes([b[0], b[1]]).to_f32(), b[2], codes)
}

/// An upper bound of the magnitudes summed by any variant of `vec_dot(w, a)` (see the
/// module docs), from the dequantized activations.
fn l1_bound(dtype: DType, w: &[u8], a: &[f32]) -> f64 {
    let n = a.len();
    match dtype {
        DType::INT8 => {
            let mut deq = vec![0.0; n];
            int8::dequantize_ref(w, &mut deq);
            deq.iter().zip(a).map(|(x, y)| (x * y).abs() as f64).sum()
        }
        DType::NF4 | DType::NF4_DQ => {
            // |NF4_I8[q] / 127| <= 1: bound by absmax * |a|.
            let mut deq = vec![0.0; n];
            let k = TypeKernels::for_isa(dtype, Isa::Scalar);
            (k.dequantize)(w, &mut deq);
            let am = nf4_absmaxes(dtype, w, n);
            a.iter()
                .enumerate()
                .map(|(j, y)| (am[j / 64] * y).abs() as f64)
                .sum()
        }
        _ => {
            let g = dtype.block_size();
            (0..n / g)
                .map(|b| {
                    let (d, z, q) = int4_group(w, g, b);
                    (0..g)
                        .map(|k| (d.abs() * (q[k] as f32 + z as f32) * a[b * g + k].abs()) as f64)
                        .sum::<f64>()
                })
                .sum()
        }
    }
}

fn nf4_absmaxes(dtype: DType, w: &[u8], n: usize) -> Vec<f32> {
    let f = |o: usize| f32::from_le_bytes(w[o..o + 4].try_into().unwrap());
    (0..n / 64)
        .map(|b| {
            if dtype == DType::NF4 {
                f(36 * b)
            } else {
                nf4::dq_absmax(w[8 + 33 * b], f(0), f(4))
            }
        })
        .collect()
}

fn check_variants(dtype: DType, n: usize, rng: &mut ChaCha8Rng) {
    let w = quantize_row(dtype, &values(n, rng));
    let reference = TypeKernels::for_isa(dtype, Isa::Scalar);
    let x = values(n, rng);
    let a = quantize_act(reference.act, Isa::Scalar, &x);
    let want = (reference.vec_dot)(n, &w, &a);
    let mut deq_ref = vec![0.0; n];
    (reference.dequantize)(&w, &mut deq_ref);
    let tol = 4.0
        * (n as f64 / 32.0 + 16.0)
        * EPS
        * l1_bound(dtype, &w, &dequantize_act(reference.act, &a, n));
    for isa in Isa::available() {
        let k = TypeKernels::for_isa(dtype, isa);
        assert_eq!(k.act, reference.act);
        assert_eq!(
            quantize_act(k.act, isa, &x),
            a,
            "{dtype} {isa:?}: activation bytes"
        );
        let got = (k.vec_dot)(n, &w, &a);
        if dtype == DType::INT8 {
            assert_eq!(
                got.to_bits(),
                want.to_bits(),
                "{dtype} {isa:?} n={n}: {got} vs {want}"
            );
        }
        assert!(
            ((got - want) as f64).abs() <= tol,
            "{dtype} {isa:?} n={n}: {got} vs reference {want} (tol {tol})"
        );
        let mut deq = vec![f32::NAN; n];
        (k.dequantize)(&w, &mut deq);
        assert_eq!(deq, deq_ref, "{dtype} {isa:?}: dequantize");
    }
}

#[test]
fn every_isa_matches_the_scalar_reference() {
    let mut rng = rng(1);
    for dtype in TOOLKIT {
        let bs = dtype.block_size();
        // Single block, odd block counts, the SmolLM2 sizes 576 and 1536.
        for blocks in [1, 2, 3, 5, 9] {
            check_variants(dtype, blocks * bs, &mut rng);
        }
        for n in [576, 1536].into_iter().filter(|n| n % bs == 0) {
            check_variants(dtype, n, &mut rng);
        }
    }
    check_variants(DType::INT4_G32, 96, &mut rng);
}

#[test]
fn tiles_match_vec_dot() {
    let mut rng = rng(2);
    for dtype in TOOLKIT {
        for isa in Isa::available() {
            let k = TypeKernels::for_isa(dtype, isa);
            let Some(tile) = k.vec_dot_tile else { continue };
            let sizes = [dtype.block_size(), 3 * dtype.block_size(), 576, 1536];
            for n in sizes.into_iter().filter(|n| n % dtype.block_size() == 0) {
                let w: Vec<Vec<u8>> = (0..TILE)
                    .map(|_| quantize_row(dtype, &values(n, &mut rng)))
                    .collect();
                let xs: Vec<Vec<f32>> = (0..TILE).map(|_| values(n, &mut rng)).collect();
                let a: Vec<Vec<u8>> = xs.iter().map(|x| quantize_act(k.act, isa, x)).collect();
                let out = tile(
                    n,
                    std::array::from_fn(|r| &w[r][..]),
                    std::array::from_fn(|j| &a[j][..]),
                );
                for j in 0..TILE {
                    for r in 0..TILE {
                        let want = (k.vec_dot)(n, &w[r], &a[j]);
                        let ad = dequantize_act(k.act, &a[j], n);
                        let tol =
                            4.0 * (n as f64 / 32.0 + 16.0) * EPS * l1_bound(dtype, &w[r], &ad);
                        let got = out[j][r];
                        assert!(
                            ((got - want) as f64).abs() <= tol,
                            "{dtype} {isa:?} n={n} [{j}][{r}]: tile {got}, vec_dot {want}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn int8_round_trip_within_half_a_step() {
    let mut rng = rng(3);
    for n in [32, 576, 1536] {
        let x = values(n, &mut rng);
        let row = quantize_row(DType::INT8, &x);
        let scale = f32::from_le_bytes(row[..4].try_into().unwrap());
        let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        assert_eq!(scale, amax / 127.0);
        assert!(row[4..].iter().all(|&q| q as i8 != i8::MIN));
        let mut y = vec![0.0; n];
        int8::dequantize_ref(&row, &mut y);
        for (a, b) in x.iter().zip(&y) {
            assert!(
                (a - b).abs() <= scale * 0.5 * (1.0 + 1e-5),
                "{a} -> {b}, scale {scale}"
            );
        }
    }
}

#[test]
fn int4_round_trip_within_half_a_step() {
    let mut rng = rng(4);
    for group in [32, 64, 128] {
        let x = values(group * 12, &mut rng);
        let row = int4::quantize_row_rtn(group, &x);
        let mut y = vec![0.0; x.len()];
        (TypeKernels::for_isa(int4::dtype_for_group(group).unwrap(), Isa::Scalar).dequantize)(
            &row, &mut y,
        );
        for (g, chunk) in x.chunks(group).enumerate() {
            let (d16, z, _) = int4_group(&row, group, g);
            let lo = chunk.iter().fold(0.0f32, |m, &v| m.min(v));
            let hi = chunk.iter().fold(0.0f32, |m, &v| m.max(v));
            let d = (hi - lo) / 15.0;
            assert_eq!(d16, f16::from_f32(d).to_f32(), "G{group} group {g}: d");
            assert_eq!(z as f32, (-lo / d16).round().clamp(0.0, 15.0));
            // Half a step, plus what rounding d to f16 moves the grid's ends by.
            let bound = 0.5 * d16 + 15.0 * (d16 - d).abs() + 1e-6;
            for (k, &v) in chunk.iter().enumerate() {
                let e = (v - y[g * group + k]).abs();
                assert!(
                    e <= bound,
                    "G{group} group {g}: {v} -> {}, bound {bound}",
                    y[g * group + k]
                );
            }
        }
    }
}

/// Half the largest gap between neighbouring NF4 table entries.
fn nf4_half_gap() -> f32 {
    nf4::NF4_TABLE
        .windows(2)
        .map(|w| w[1] - w[0])
        .fold(0.0, f32::max)
        / 2.0
}

#[test]
fn nf4_round_trip_within_half_the_largest_gap() {
    let mut rng = rng(5);
    let x = values(64 * 20, &mut rng);
    let blocks = nf4::quantize_ref(&x);
    let mut y = vec![0.0; x.len()];
    nf4::dequantize_ref(bytemuck::cast_slice(&blocks), &mut y);
    for (b, blk) in blocks.iter().enumerate() {
        let amax = x[64 * b..64 * (b + 1)]
            .iter()
            .fold(0.0f32, |m, v| m.max(v.abs()));
        assert_eq!(blk.absmax, amax);
        for j in 0..64 {
            let e = (x[64 * b + j] - y[64 * b + j]).abs();
            assert!(
                e <= nf4_half_gap() * amax * (1.0 + 1e-6),
                "block {b} elem {j}: error {e}"
            );
        }
    }
}

#[test]
fn nf4_dq_round_trip_within_the_double_quantized_bound() {
    let mut rng = rng(6);
    for n in [64, 576, 1536] {
        let x = values(n, &mut rng);
        let row = quantize_row(DType::NF4_DQ, &x);
        let mut y = vec![0.0; n];
        nf4::dequantize_dq_ref(&row, &mut y);
        let am = nf4_absmaxes(DType::NF4_DQ, &row, n);
        for (b, chunk) in x.chunks(64).enumerate() {
            let true_amax = chunk.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            // The dynamic map keeps the absmax within a few percent.
            assert!(
                (am[b] - true_amax).abs() <= 0.05 * true_amax.max(1e-6),
                "block {b}: {} vs {true_amax}",
                am[b]
            );
            for (j, &v) in chunk.iter().enumerate() {
                // Half a gap of the stored scale, plus the clamp when |v| exceeds it.
                let bound = nf4_half_gap() * am[b].abs() + (v.abs() - am[b].abs()).max(0.0);
                let e = (v - y[64 * b + j]).abs();
                assert!(
                    e <= bound * (1.0 + 1e-5) + 1e-7,
                    "n={n} block {b}: {v} -> {}",
                    y[64 * b + j]
                );
            }
        }
    }
}

#[test]
fn int8_packing_matches_the_layout() {
    let codes: Vec<i8> = (0..32).map(|k: i32| (k * 8 - 127) as i8).collect();
    let mut row = vec![0u8; DType::INT8.row_bytes(32).unwrap()];
    int8::encode_row(0.5, &codes, &mut row);
    assert_eq!(row.len(), 36);
    assert_eq!(&row[..4], &0.5f32.to_le_bytes());
    assert_eq!(row[4] as i8, -127);
    assert_eq!(row[35] as i8, 121);
    let mut y = vec![0.0; 32];
    int8::dequantize_ref(&row, &mut y);
    assert_eq!(y[0], -63.5);
    assert_eq!(y[31], 60.5);
    // An activation row with a known integer sum: 1s in the first 4 places.
    let mut a = vec![0u8; ActFormat::I8Row.row_bytes(32)];
    a[..4].copy_from_slice(&2.0f32.to_le_bytes());
    a[4..8].fill(1);
    let want = 0.5 * 2.0 * codes[..4].iter().map(|&c| c as f32).sum::<f32>();
    for isa in Isa::available() {
        assert_eq!(
            (TypeKernels::for_isa(DType::INT8, isa).vec_dot)(32, &row, &a),
            want
        );
    }
}

#[test]
#[should_panic(expected = "-127..=127")]
fn int8_rejects_minus_128() {
    let mut codes = [0i8; 32];
    codes[3] = i8::MIN;
    int8::encode_row(1.0, &codes, &mut [0u8; 36]);
}

#[test]
fn int4_packing_matches_the_layout() {
    let q: Vec<u8> = (0..64).map(|k| (k % 16) as u8).collect();
    let mut blk = vec![0u8; 36];
    int4::encode_block(0.25, 3, &q, &mut blk);
    assert_eq!(&blk[..2], &f16::from_f32(0.25).to_le_bytes());
    assert_eq!((blk[2], blk[3]), (3, 0));
    // Sub-block 0: byte j = q[j] | q[j + 16] << 4; sub-block 1 from byte 20.
    assert_eq!(blk[4], q[0] | q[16] << 4);
    assert_eq!(blk[4 + 15], q[15] | q[31] << 4);
    assert_eq!(blk[20], q[32] | q[48] << 4);
    let mut y = vec![0.0; 64];
    (TypeKernels::for_isa(DType::INT4_G64, Isa::Scalar).dequantize)(&blk, &mut y);
    for (k, v) in y.iter().enumerate() {
        assert_eq!(*v, 0.25 * (q[k] as f32 - 3.0), "element {k}");
    }
    let mut row = vec![0u8; 2 * 20];
    int4::encode_row(32, &[1.0, 2.0], &[0, 15], &[7u8; 64], &mut row);
    assert_eq!(&row[20..24], &[0x00, 0x40, 15, 0]); // f16 2.0 = 0x4000
    assert!(row[24..40].iter().all(|&b| b == 0x77));
    assert_eq!(int4::dtype_for_group(128), Some(DType::INT4_G128));
    assert_eq!(int4::dtype_for_group(96), None);
}

#[test]
fn nf4_packing_matches_the_layout() {
    let q: Vec<u8> = (0..64).map(|k| ((k * 7) % 16) as u8).collect();
    let mut blk = vec![0u8; 36];
    blk[..4].copy_from_slice(&2.0f32.to_le_bytes());
    for s in 0..2 {
        for j in 0..16 {
            blk[4 + 16 * s + j] = q[32 * s + j] | q[32 * s + j + 16] << 4;
        }
    }
    let mut y = vec![0.0; 64];
    nf4::dequantize_ref(&blk, &mut y);
    for k in 0..64 {
        assert_eq!(y[k], nf4::NF4_TABLE[q[k] as usize] * 2.0);
    }
    // The same codes, re-derived by the quantizer from the dequantized values.
    let again = nf4::quantize_ref(&y);
    assert_eq!(bytemuck::cast_slice::<_, u8>(&again), &blk[..]);
    // NF4_DQ: header (c, offset), then [code | 32 nibble bytes]; absmax = map[code] c + offset.
    let mut row = vec![0u8; DType::NF4_DQ.row_bytes(64).unwrap()];
    assert_eq!(row.len(), 8 + 33);
    row[..4].copy_from_slice(&0.5f32.to_le_bytes());
    row[4..8].copy_from_slice(&1.5f32.to_le_bytes());
    row[8] = 255; // map[255] = 1.0: absmax = 0.5 + 1.5 = 2.0
    row[9..].copy_from_slice(&blk[4..]);
    let mut z = vec![0.0; 64];
    nf4::dequantize_dq_ref(&row, &mut z);
    assert_eq!(z, y);
}

#[test]
fn nf4_tables() {
    assert_eq!(nf4::NF4_TABLE[0], -1.0);
    assert_eq!(nf4::NF4_TABLE[1], -0.696_192_8);
    assert_eq!(nf4::NF4_TABLE[7], 0.0);
    assert_eq!(nf4::NF4_TABLE[15], 1.0);
    assert!(nf4::NF4_TABLE.windows(2).all(|w| w[0] < w[1]));
    for (t, i) in nf4::NF4_TABLE.iter().zip(nf4::NF4_I8) {
        assert_eq!((t * 127.0).round() as i8, i);
    }
}

#[test]
fn dynamic_map_is_bitsandbytes_signed_map() {
    let m = nf4::dynamic_map();
    assert_eq!(m.len(), 256);
    assert!(m.windows(2).all(|w| w[0] < w[1]), "sorted, distinct");
    // 127 negatives, 0, 127 positives, 1.
    assert_eq!(m[127], 0.0);
    assert_eq!(m[255], 1.0);
    for i in 0..127 {
        assert_eq!(m[i], -m[254 - i], "symmetric around 0 (entry {i})");
    }
    // Entries derived by hand (relative error: f32 rounding only).
    let close = |v: f32, want: f64| ((v as f64 - want) / want).abs() < 1e-6;
    // i = 0: the one midpoint of linspace(0.1, 1, 2) is 0.55, times 1e-6.
    assert!(close(m[128], 0.55e-6), "{}", m[128]);
    // i = 1: midpoints of [0.1, 0.55, 1.0] are 0.325 and 0.775, times 1e-5.
    assert!(close(m[129], 0.325e-5) && close(m[130], 0.775e-5));
    // i = 6: the largest midpoint of linspace(0.1, 1, 65): (1 - 0.9 / 64 + 1) / 2, times 1.
    assert!(close(m[254], 0.992_968_75), "{}", m[254]);
    // Positives: i = 0 at 128, i = 1 at 129..131, ..., i = 6 (64 midpoints) at 191..255, so
    // entry 200 is the 10th midpoint of i = 6: 0.1 + 9.5 * 0.9 / 64.
    assert!(close(m[200], 0.1 + 9.5 * 0.9 / 64.0), "{}", m[200]);
    // Exact bit patterns of bitsandbytes' map, computed with its definition in torch.
    // Entry 18 is one where torch's fused multiply-add in linspace shows in the last bit.
    let bits = [
        (0, 0xbf7e_3333u32),
        (18, 0xbf3d_6666),
        (128, 0x3513_a3b7),
        (200, 0x3e6f_3333),
    ];
    for (i, b) in bits {
        assert_eq!(m[i].to_bits(), b, "entry {i}: {}", m[i]);
    }
}

#[test]
fn dtype_table_and_row_bytes() {
    for (t, id, name, bs, bb, hdr) in [
        (DType::INT8, 1024, "INT8", 32, 32, 4),
        (DType::INT4_G32, 1025, "INT4_G32", 32, 20, 0),
        (DType::INT4_G64, 1026, "INT4_G64", 64, 36, 0),
        (DType::INT4_G128, 1027, "INT4_G128", 128, 68, 0),
        (DType::NF4, 1028, "NF4", 64, 36, 0),
        (DType::NF4_DQ, 1029, "NF4_DQ", 64, 33, 8),
    ] {
        assert_eq!(DType::from_ggml_id(id), Some(t));
        assert_eq!(t.name(), name);
        assert_eq!(
            (t.block_size(), t.block_bytes(), t.row_header_bytes()),
            (bs, bb, hdr)
        );
        assert!(t.is_kestrel_only() && t.is_quantized());
        assert_eq!(t.row_bytes(bs * 3), Some(hdr + 3 * bb));
        assert_eq!(t.row_bytes(bs + 16), None);
        assert_eq!(TypeKernels::for_isa(t, Isa::Scalar).dtype, t);
    }
    assert_eq!(DType::INT8.row_bytes(576), Some(580));
    assert_eq!(DType::NF4_DQ.row_bytes(1536), Some(8 + 24 * 33));
    assert_eq!(DType::INT4_G32.row_bytes(96), Some(60));
    assert_eq!(DType::INT4_G128.row_bytes(576), None);
    assert_eq!(DType::Q4_1.row_header_bytes(), 0);
    assert!(!DType::Q4_1.is_kestrel_only());
    assert_eq!(DType::NF4.bits_per_weight(), 4.5);
    assert_eq!(DType::INT8.bits_per_weight_for(32), Some(9.0));
    assert_eq!(DType::INT8.bits_per_weight_for(0), None);
    assert_eq!(ActFormat::I8Row.row_bytes(576), 580);
    assert_eq!(ActFormat::Q8_1.row_bytes(64), 72);
}

/// `matmul` against an `f64` product of dequantized weights and activations; the tolerance
/// adds the formats' documented deviations from that product.
fn check_matmul(dtype: DType, rows: usize, cols: usize, pool: &ThreadPool, rng: &mut ChaCha8Rng) {
    let wrows: Vec<Vec<u8>> = (0..rows)
        .map(|_| quantize_row(dtype, &values(cols, rng)))
        .collect();
    let data = wrows.concat();
    let w = MatRef {
        dtype,
        rows,
        cols,
        data: &data,
    };
    for isa in Isa::available() {
        let k = GemmKernels::for_isa(dtype, isa);
        for m in [1, 5] {
            let x: Vec<f32> = (0..m * cols).map(|_| rng.gen_range(-2.0..2.0)).collect();
            let mut y = vec![f32::NAN; m * rows];
            matmul_with(pool, &k, w, &x, m, &mut y, &mut Scratch::default());
            for j in 0..m {
                let a = quantize_act(k.weights.act, isa, &x[j * cols..(j + 1) * cols]);
                let ad = dequantize_act(k.weights.act, &a, cols);
                for (r, wr) in wrows.iter().enumerate() {
                    let mut wd = vec![0.0; cols];
                    (k.weights.dequantize)(wr, &mut wd);
                    let want: f64 = wd.iter().zip(&ad).map(|(p, q)| *p as f64 * *q as f64).sum();
                    let tol =
                        1e-5 * l1_bound(dtype, wr, &ad) + deviation(dtype, wr, &a, &ad) + 1e-6;
                    let got = y[j * rows + r] as f64;
                    assert!(
                        (got - want).abs() <= tol,
                        "{dtype} {isa:?} m={m} y[{j}][{r}] = {got}, naive {want}, tol {tol}"
                    );
                }
            }
        }
    }
}

/// What the kernels compute differently from the dequantized product, by design: INT4 uses
/// Q8_1's `f16` `s_a` for the zero point, NF4 multiplies with the table rounded to 1/127.
fn deviation(dtype: DType, w: &[u8], a: &[u8], ad: &[f32]) -> f64 {
    let n = ad.len();
    match dtype {
        DType::INT4_G32 | DType::INT4_G64 | DType::INT4_G128 => {
            let g = dtype.block_size();
            (0..n / 32)
                .map(|t| {
                    let (d, z, _) = int4_group(w, g, t * 32 / g);
                    let blk = &a[36 * t..36 * (t + 1)];
                    let s = f16::from_le_bytes([blk[2], blk[3]]).to_f32() as f64;
                    let exact: f64 = ad[32 * t..32 * (t + 1)].iter().map(|&v| v as f64).sum();
                    (d as f64 * z as f64 * (s - exact)).abs()
                })
                .sum()
        }
        DType::NF4 | DType::NF4_DQ => {
            let am = nf4_absmaxes(dtype, w, n);
            ad.iter()
                .enumerate()
                .map(|(j, v)| (am[j / 64] * 0.5 / 127.0 * v.abs()) as f64)
                .sum()
        }
        _ => 0.0,
    }
}

#[test]
fn matmul_matches_dequantized_product() {
    let mut rng = rng(7);
    let pool = ThreadPool::new(3);
    for dtype in TOOLKIT {
        let cols = if 576 % dtype.block_size() == 0 {
            576
        } else {
            640
        };
        check_matmul(dtype, 11, cols, &pool, &mut rng);
        check_matmul(dtype, 6, 3 * dtype.block_size(), &pool, &mut rng);
    }
    check_matmul(DType::INT4_G32, 9, 96, &pool, &mut rng);
    check_matmul(DType::INT8, 5, 1536, &pool, &mut rng);
}
