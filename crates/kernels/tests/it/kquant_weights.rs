//! Q2_K / Q3_K / Q4_K / Q5_K / Q6_K / IQ4_XS (the Q8_K-activation types): every ISA variant against the scalar reference (the spec), the
//! reference dot against an f64 dot of the dequantized rows, and quantizer round-trip error.
//!
//! Tolerances:
//! * `dequantize`: bit-identical (every variant does the same f32 operations).
//! * `vec_dot`: `|simd - ref| <= 1e-6 * M`, where `M = Σ_i |a_i| * (|scale term_i| + |min
//!   term_i|)` is the sum of the magnitudes of everything added; the variants keep integer
//!   sums exact and differ only in the order of f32 additions.
//! * reference vs f64 dot of the dequantized rows: the same `1e-6 * M`.
//! * quantize round trip (Gaussian data): relative RMS error below a per-type bound.

use bytemuck::{Pod, Zeroable};
use half::f16;
use kestrel_kernels::cpu::Isa;
use kestrel_kernels::quant::q8_k::{self, BlockQ8K, QK_K};
use kestrel_kernels::quant::{iq4_xs, q2_k, q3_k, q4_k, q5_k, q6_k};
use kestrel_kernels::{ActFormat, DType, TypeKernels};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

trait KQuant {
    type Block: Pod + std::fmt::Debug;
    const DTYPE: DType;
    /// Bound on the relative RMS round-trip error of `quantize_ref` on Gaussian data.
    const RMSE_BOUND: f64;
    fn kernels(isa: Isa) -> TypeKernels;
    fn dequantize_ref(src: &[Self::Block], dst: &mut [f32]);
    fn vec_dot_ref(w: &[Self::Block], a: &[BlockQ8K]) -> f32;
    fn quantize_ref(src: &[f32]) -> Vec<Self::Block>;
    /// Replace the super-scales (`dmin` ignored by Q6_K).
    fn with_scales(b: Self::Block, d: f16, dmin: f16) -> Self::Block;
    /// A block whose dequantized values are the per-element `|scale term| + |min term|`.
    fn magnitude_block(b: Self::Block) -> Self::Block;
}

/// Declares the marker type of a Q8_K-activation type whose reference functions live in
/// `$module`. `two_scales`: blocks carry a super-scale `d` and a super-min `dmin` (the
/// magnitude block makes both terms positive); `one_scale`: only `d`, one term per element.
macro_rules! kquant {
    ($name:ident, $module:ident, $block:ident, $dtype:expr, $rmse:expr, two_scales) => {
        kquant!(@impl $name, $module, $block, $dtype, $rmse,
            fn with_scales(b: Self::Block, d: f16, dmin: f16) -> Self::Block {
                Self::Block { d, dmin, ..b }
            }
            fn magnitude_block(b: Self::Block) -> Self::Block {
                Self::Block {
                    d: abs(b.d),
                    dmin: -abs(b.dmin),
                    ..b
                }
            }
        );
    };
    ($name:ident, $module:ident, $block:ident, $dtype:expr, $rmse:expr, one_scale) => {
        kquant!(@impl $name, $module, $block, $dtype, $rmse,
            fn with_scales(b: Self::Block, d: f16, _dmin: f16) -> Self::Block {
                Self::Block { d, ..b }
            }
            fn magnitude_block(b: Self::Block) -> Self::Block {
                b // one term per element: the magnitude is |dequantized value|
            }
        );
    };
    (@impl $name:ident, $module:ident, $block:ident, $dtype:expr, $rmse:expr, $($scales:tt)*) => {
        struct $name;
        impl KQuant for $name {
            type Block = $module::$block;
            const DTYPE: DType = $dtype;
            const RMSE_BOUND: f64 = $rmse;
            fn kernels(isa: Isa) -> TypeKernels {
                $module::kernels(isa)
            }
            fn dequantize_ref(src: &[Self::Block], dst: &mut [f32]) {
                $module::dequantize_ref(src, dst)
            }
            fn vec_dot_ref(w: &[Self::Block], a: &[BlockQ8K]) -> f32 {
                $module::vec_dot_ref(w, a)
            }
            fn quantize_ref(src: &[f32]) -> Vec<Self::Block> {
                $module::quantize_ref(src)
            }
            $($scales)*
        }
    };
}

kquant!(Q2K, q2_k, BlockQ2K, DType::Q2_K, 0.38, two_scales);
kquant!(Q3K, q3_k, BlockQ3K, DType::Q3_K, 0.185, one_scale);
kquant!(Iq4Xs, iq4_xs, BlockIq4Xs, DType::IQ4_XS, 0.095, one_scale);
kquant!(Q4K, q4_k, BlockQ4K, DType::Q4_K, 0.095, two_scales);
kquant!(Q5K, q5_k, BlockQ5K, DType::Q5_K, 0.048, two_scales);
kquant!(Q6K, q6_k, BlockQ6K, DType::Q6_K, 0.025, one_scale);

fn abs(x: f16) -> f16 {
    f16::from_bits(x.to_bits() & 0x7fff)
}

fn random_blocks<T: KQuant>(rng: &mut ChaCha8Rng, nb: usize) -> Vec<T::Block> {
    (0..nb)
        .map(|_| {
            let mut b = T::Block::zeroed();
            rng.fill(bytemuck::bytes_of_mut(&mut b));
            let d = f16::from_f32(rng.gen_range(-0.1f32..0.1));
            let dmin = f16::from_f32(rng.gen_range(-0.1f32..0.1));
            T::with_scales(b, d, dmin)
        })
        .collect()
}

fn random_acts(rng: &mut ChaCha8Rng, nb: usize) -> Vec<BlockQ8K> {
    let x: Vec<f32> = (0..nb * QK_K)
        .map(|_| rng.gen_range(-4.0f32..4.0))
        .collect();
    q8_k::quantize_ref(&x)
}

fn dequant_f64<T: KQuant>(w: &[T::Block]) -> Vec<f64> {
    let mut y = vec![0f32; w.len() * QK_K];
    T::dequantize_ref(w, &mut y);
    y.into_iter().map(f64::from).collect()
}

fn acts_f64(a: &[BlockQ8K]) -> Vec<f64> {
    let mut y = vec![0f32; a.len() * QK_K];
    q8_k::dequantize_ref(a, &mut y);
    y.into_iter().map(f64::from).collect()
}

/// `M = Σ_i |a_i| * (|scale term_i| + |min term_i|)`.
fn magnitude<T: KQuant>(w: &[T::Block], a: &[BlockQ8K]) -> f64 {
    let mag: Vec<T::Block> = w.iter().map(|b| T::magnitude_block(*b)).collect();
    let m = dequant_f64::<T>(&mag);
    m.iter()
        .zip(acts_f64(a))
        .map(|(m, a)| m.abs() * a.abs())
        .sum()
}

/// Check every available variant against the reference on one (weights, activations) pair.
fn check_variants<T: KQuant>(w: &[T::Block], a: &[BlockQ8K], what: &str) {
    let n = w.len() * QK_K;
    let (wb, ab): (&[u8], &[u8]) = (bytemuck::cast_slice(w), bytemuck::cast_slice(a));
    let want = T::vec_dot_ref(w, a);
    let tol = 1e-6 * magnitude::<T>(w, a) + 1e-30;
    let mut want_deq = vec![0f32; n];
    T::dequantize_ref(w, &mut want_deq);
    for isa in Isa::available() {
        let k = T::kernels(isa);
        assert_eq!(
            (k.dtype, k.isa, k.act),
            (T::DTYPE, isa, ActFormat::Q8K),
            "{what}"
        );
        let got = (k.vec_dot)(n, wb, ab);
        let err = (got as f64 - want as f64).abs();
        assert!(
            err <= tol,
            "{:?} {what} {isa:?}: vec_dot {got} vs ref {want} (tol {tol})",
            T::DTYPE
        );
        let mut deq = vec![f32::NAN; n];
        (k.dequantize)(wb, &mut deq);
        for (i, (g, r)) in deq.iter().zip(&want_deq).enumerate() {
            assert_eq!(
                g.to_bits(),
                r.to_bits(),
                "{:?} {what} {isa:?}: dequantize elem {i}",
                T::DTYPE
            );
        }
    }
}

fn variants_match_reference_on_random_blocks<T: KQuant>() {
    let mut rng = ChaCha8Rng::seed_from_u64(T::DTYPE as u64);
    for nb in [1usize, 2, 3, 8, 17] {
        for trial in 0..8 {
            let w = random_blocks::<T>(&mut rng, nb);
            let a = random_acts(&mut rng, nb);
            check_variants::<T>(&w, &a, &format!("random nb={nb} trial={trial}"));
        }
    }
}

fn variants_match_reference_on_edge_cases<T: KQuant>() {
    let mut rng = ChaCha8Rng::seed_from_u64(100 + T::DTYPE as u64);
    let zeros_w = vec![T::Block::zeroed(); 3];
    let zeros_a = vec![BlockQ8K::zeroed(); 3];
    let a = random_acts(&mut rng, 3);
    let w = random_blocks::<T>(&mut rng, 3);
    for (name, ww, aa) in [("zero weights", &zeros_w, &a), ("zero acts", &w, &zeros_a)] {
        check_variants::<T>(ww, aa, name);
        for isa in Isa::available() {
            let got = (T::kernels(isa).vec_dot)(
                3 * QK_K,
                bytemuck::cast_slice(ww),
                bytemuck::cast_slice(aa),
            );
            assert_eq!(got, 0.0, "{:?} {name} {isa:?}", T::DTYPE);
        }
    }
    // Every quant bit set with the largest f16 scales; tiny (subnormal) scales; a mix.
    let mut full = T::Block::zeroed();
    bytemuck::bytes_of_mut(&mut full).fill(0xFF);
    let full = T::with_scales(full, f16::MAX, f16::MAX);
    let tiny = T::with_scales(w[0], f16::from_bits(1), f16::from_bits(0x8001));
    let mut alternating = BlockQ8K {
        d: 1e3,
        qs: [127; QK_K],
        bsums: [0; 16],
    };
    for (i, q) in alternating.qs.iter_mut().enumerate() {
        if i % 3 == 0 {
            *q = -127;
        }
    }
    for (g, s) in alternating.bsums.iter_mut().enumerate() {
        *s = alternating.qs[16 * g..16 * g + 16]
            .iter()
            .map(|&q| q as i16)
            .sum();
    }
    let saturated = BlockQ8K {
        d: 1e3,
        qs: [127; QK_K],
        bsums: [127 * 16; 16],
    };
    check_variants::<T>(
        &[full],
        &[saturated],
        "max quants, max scales, saturated acts",
    );
    check_variants::<T>(
        &[full],
        &[alternating],
        "max quants, max scales, alternating acts",
    );
    check_variants::<T>(&[tiny], &a[..1], "subnormal scales");
    let mixed_w = [full, w[1], T::Block::zeroed(), tiny, w[2]];
    let mixed_a = [alternating, a[0], a[1], saturated, zeros_a[0]];
    check_variants::<T>(&mixed_w, &mixed_a, "mixed blocks");
}

fn reference_dot_matches_dequantized<T: KQuant>() {
    let mut rng = ChaCha8Rng::seed_from_u64(300 + T::DTYPE as u64);
    for nb in [1usize, 4, 9] {
        let w = random_blocks::<T>(&mut rng, nb);
        let a = random_acts(&mut rng, nb);
        let want: f64 = dequant_f64::<T>(&w)
            .iter()
            .zip(acts_f64(&a))
            .map(|(w, a)| w * a)
            .sum();
        let got = T::vec_dot_ref(&w, &a) as f64;
        let tol = 1e-6 * magnitude::<T>(&w, &a);
        assert!(
            (got - want).abs() <= tol,
            "{:?} nb={nb}: ref {got} vs dequantized {want} (tol {tol})",
            T::DTYPE
        );
    }
}

fn kquant_round_trip<T: KQuant>() {
    let mut rng = ChaCha8Rng::seed_from_u64(200 + T::DTYPE as u64);
    let nb = 64;
    // Gaussian (Irwin-Hall approximation) with a per-block scale spanning 1e-3..1e2.
    let x: Vec<f32> = (0..nb * QK_K)
        .map(|i| {
            let s = 10f32.powf(-3.0 + 5.0 * (i / QK_K) as f32 / nb as f32);
            let g: f32 = (0..12).map(|_| rng.gen_range(0.0f32..1.0)).sum::<f32>() - 6.0;
            g * s
        })
        .collect();
    let q = T::quantize_ref(&x);
    let y = dequant_f64::<T>(&q);
    for b in 0..nb {
        let xs = &x[b * QK_K..(b + 1) * QK_K];
        let err: f64 = xs
            .iter()
            .zip(&y[b * QK_K..])
            .map(|(&a, &b)| (a as f64 - b).powi(2))
            .sum();
        let pow: f64 = xs.iter().map(|&a| (a as f64).powi(2)).sum();
        let rel = (err / pow).sqrt();
        assert!(
            rel < T::RMSE_BOUND,
            "{:?} block {b}: relative RMSE {rel}",
            T::DTYPE
        );
    }
    // Zeros and constants are represented exactly.
    let mut special = vec![0f32; 2 * QK_K];
    special[QK_K..].fill(-0.75);
    let y = dequant_f64::<T>(&T::quantize_ref(&special));
    for (i, (&a, &b)) in special.iter().zip(&y).enumerate() {
        assert!(
            (a as f64 - b).abs() <= 1e-3 * a.abs() as f64,
            "{:?} elem {i}: {a} -> {b}",
            T::DTYPE
        );
    }
}

macro_rules! kquant_tests {
    ($ty:ty, $variants:ident, $edges:ident, $deq_dot:ident, $round_trip:ident) => {
        #[test]
        fn $variants() {
            variants_match_reference_on_random_blocks::<$ty>();
        }
        #[test]
        fn $edges() {
            variants_match_reference_on_edge_cases::<$ty>();
        }
        #[test]
        fn $deq_dot() {
            reference_dot_matches_dequantized::<$ty>();
        }
        #[test]
        fn $round_trip() {
            kquant_round_trip::<$ty>();
        }
    };
}

kquant_tests!(
    Q2K,
    kquant_q2k_variants_match_ref,
    kquant_q2k_edge_cases,
    kquant_q2k_ref_dot_is_dequant_dot,
    kquant_q2k_round_trip
);
kquant_tests!(
    Q3K,
    kquant_q3k_variants_match_ref,
    kquant_q3k_edge_cases,
    kquant_q3k_ref_dot_is_dequant_dot,
    kquant_q3k_round_trip
);
kquant_tests!(
    Iq4Xs,
    kquant_iq4xs_variants_match_ref,
    kquant_iq4xs_edge_cases,
    kquant_iq4xs_ref_dot_is_dequant_dot,
    kquant_iq4xs_round_trip
);
kquant_tests!(
    Q4K,
    kquant_q4k_variants_match_ref,
    kquant_q4k_edge_cases,
    kquant_q4k_ref_dot_is_dequant_dot,
    kquant_q4k_round_trip
);
kquant_tests!(
    Q5K,
    kquant_q5k_variants_match_ref,
    kquant_q5k_edge_cases,
    kquant_q5k_ref_dot_is_dequant_dot,
    kquant_q5k_round_trip
);
kquant_tests!(
    Q6K,
    kquant_q6k_variants_match_ref,
    kquant_q6k_edge_cases,
    kquant_q6k_ref_dot_is_dequant_dot,
    kquant_q6k_round_trip
);
