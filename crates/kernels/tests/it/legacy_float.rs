//! F32, F16 and BF16: every ISA variant against the scalar reference.
//!
//! Tolerances: `dequantize` is bit-exact (every conversion to `f32` is exact). `vec_dot`: the
//! reference sums exact products in `f64`; a SIMD variant's `f32` sum differs by at most
//! `(n/8 + 32) eps sum|w_i a_i|` (its longest addition chain is n/32 + log2(lanes) + tail long,
//! so this is a safe worst-case bound).

use half::{bf16, f16};
use kestrel_kernels::cpu::Isa;
use kestrel_kernels::quant::{float, ActFormat, DType, TypeKernels};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn encode(dtype: DType, x: &[f32]) -> Vec<u8> {
    match dtype {
        DType::F32 => x.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::F16 => x
            .iter()
            .flat_map(|v| f16::from_f32(*v).to_le_bytes())
            .collect(),
        _ => x
            .iter()
            .flat_map(|v| bf16::from_f32(*v).to_le_bytes())
            .collect(),
    }
}

fn rows(rng: &mut ChaCha8Rng, n: usize) -> Vec<(&'static str, Vec<f32>)> {
    vec![
        (
            "uniform",
            (0..n).map(|_| rng.gen_range(-1.0f32..1.0)).collect(),
        ),
        ("zeros", vec![0.0; n]),
        (
            "extreme",
            (0..n)
                .map(|i| {
                    if i % 5 == 0 {
                        6.0e4
                    } else {
                        rng.gen_range(-1e-4f32..1e-4)
                    }
                })
                .collect(),
        ),
        (
            "tiny",
            (0..n).map(|_| rng.gen_range(-1e-6f32..1e-6)).collect(),
        ),
    ]
}

#[test]
fn float_variants_match_reference() {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        for n in [1usize, 7, 8, 15, 16, 33, 64, 100, 576, 1000, 1536] {
            for (wname, wx) in rows(&mut rng, n) {
                let w = encode(dtype, &wx);
                let mut wf = vec![0.0f32; n];
                float::dequantize_ref(dtype, &w, &mut wf);
                for (aname, a) in rows(&mut rng, n) {
                    let ab: Vec<u8> = a.iter().flat_map(|v| v.to_le_bytes()).collect();
                    let reference = float::vec_dot_ref(dtype, &w, &a);
                    let l1: f64 = wf
                        .iter()
                        .zip(&a)
                        .map(|(x, y)| (*x as f64 * *y as f64).abs())
                        .sum();
                    let tol = (n as f64 / 8.0 + 32.0) * f32::EPSILON as f64 * l1;
                    for isa in Isa::available() {
                        let k = TypeKernels::for_isa(dtype, isa);
                        assert_eq!((k.dtype, k.isa, k.act), (dtype, isa, ActFormat::F32));
                        let got = (k.vec_dot)(n, &w, &ab);
                        let err = (got as f64 - reference as f64).abs();
                        assert!(
                            err <= tol,
                            "{dtype} {} n={n} w={wname} a={aname}: {got} vs {reference}",
                            isa.name()
                        );
                        let mut deq = vec![f32::NAN; n];
                        (k.dequantize)(&w, &mut deq);
                        assert!(
                            deq.iter().zip(&wf).all(|(x, y)| x.to_bits() == y.to_bits()),
                            "{dtype} {} dequantize",
                            isa.name()
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn float_reference_decodes_exactly() {
    let x = [1.5f32, -2.0, 65504.0, 1.0e-7, 0.0, -0.0, 3.140625];
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let bytes = encode(dtype, &x);
        let mut out = vec![0.0f32; x.len()];
        float::dequantize_ref(dtype, &bytes, &mut out);
        for (v, o) in x.iter().zip(&out) {
            let expect = match dtype {
                DType::F32 => *v,
                DType::F16 => f16::from_f32(*v).to_f32(),
                _ => bf16::from_f32(*v).to_f32(),
            };
            assert_eq!(o.to_bits(), expect.to_bits(), "{dtype}");
        }
        let a = [1.0f32; 7];
        let want: f64 = out.iter().map(|v| *v as f64).sum();
        assert_eq!(float::vec_dot_ref(dtype, &bytes, &a), want as f32);
    }
}

#[test]
fn float_dot_handles_unaligned_rows() {
    let x: Vec<f32> = (0..100).map(|i| i as f32 * 0.25 - 7.0).collect();
    let a: Vec<f32> = (0..100).map(|i| (i as f32).cos()).collect();
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let mut w = vec![0u8; 1];
        w.extend(encode(dtype, &x));
        let mut ab = vec![0u8; 3];
        ab.extend(a.iter().flat_map(|v| v.to_le_bytes()));
        let reference = float::vec_dot_ref(dtype, &w[1..], &a);
        for isa in Isa::available() {
            let got = (TypeKernels::for_isa(dtype, isa).vec_dot)(100, &w[1..], &ab[3..]);
            assert!(
                (got - reference).abs() <= 1e-3,
                "{dtype} {}: {got} vs {reference}",
                isa.name()
            );
        }
    }
}

/// The 4 × 4 tile kernels (products of several rows) and the 4-row decode kernels: every entry
/// against the reference dot of its weight row and activation row, with the row kernels' tolerance; unaligned rows (offset
/// by one byte) and lengths with every tail size.
#[test]
fn float_tiles_match_reference() {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        for n in [1usize, 5, 8, 15, 16, 17, 31, 64, 100, 576, 1000] {
            // Row i of each side: kind i of `rows` (uniform, zeros, extreme, tiny) for the
            // weights, kind 3 - i for the activations.
            let (wx, ax): (Vec<Vec<f32>>, Vec<Vec<f32>>) = (0..4)
                .map(|i| {
                    let mut r = rows(&mut rng, n);
                    let a = std::mem::take(&mut r[3 - i].1);
                    (std::mem::take(&mut r[i].1), a)
                })
                .unzip();
            let w: Vec<Vec<u8>> = wx
                .iter()
                .map(|x| [vec![0u8], encode(dtype, x)].concat())
                .collect();
            let a: Vec<Vec<u8>> = ax
                .iter()
                .map(|x| [vec![0u8], encode(DType::F32, x)].concat())
                .collect();
            let wr: [&[u8]; 4] = std::array::from_fn(|p| &w[p][1..]);
            let ar: [&[u8]; 4] = std::array::from_fn(|q| &a[q][1..]);
            for isa in Isa::available() {
                let k = TypeKernels::for_isa(dtype, isa);
                let Some(tile) = k.vec_dot_tile else {
                    assert_eq!(
                        isa,
                        Isa::Scalar,
                        "{dtype}: SIMD variants have a tile kernel"
                    );
                    continue;
                };
                let rows_fn = k.vec_dot_rows.expect("SIMD variants have a decode kernel");
                let mut got = tile(n, wr, ar).to_vec();
                // The decode kernel's results, one activation row at a time, in the same checks.
                let decoded: Vec<[f32; 4]> = ar.iter().map(|a| rows_fn(n, wr, a)).collect();
                got.extend_from_slice(&decoded);
                for (q, gotq) in got.iter().enumerate() {
                    let q = q % 4;
                    for (p, g) in gotq.iter().enumerate() {
                        let reference = float::vec_dot_ref(dtype, wr[p], &ax[q]);
                        let mut wf = vec![0.0f32; n];
                        float::dequantize_ref(dtype, wr[p], &mut wf);
                        let l1: f64 = wf
                            .iter()
                            .zip(&ax[q])
                            .map(|(x, y)| (*x as f64 * *y as f64).abs())
                            .sum();
                        let tol = (n as f64 / 8.0 + 32.0) * f32::EPSILON as f64 * l1;
                        assert!(
                            (*g as f64 - reference as f64).abs() <= tol,
                            "{dtype} {} n={n} w{p} a{q}: {g} vs {reference}",
                            isa.name()
                        );
                    }
                }
            }
        }
    }
}
