//! The low-bit i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M with Q8_K
//! activations; MXFP4 with Q8_0 activations): every ISA variant against the scalar reference
//! (the spec), and the reference dot against an f64 dot of the dequantized rows. The
//! reference dequantization itself is checked against gguf-py in `dequant_reference.rs`.
//!
//! Tolerances:
//! * `dequantize`: bit-identical across variants.
//! * `vec_dot`: `|simd - ref| <= 1e-6 * M`, `M = Σ_i |w_i a_i|` (dequantized weights and
//!   activations): the variants keep the integer sums exact and differ only in the order of
//!   the `f32` additions.
//! * reference vs f64 dot of the dequantized rows: the same `1e-6 * M`.
//! * multi-row (tile) kernels: each result within `1e-6 * M` of the reference dot of its pair.

use bytemuck::{Pod, Zeroable};
use half::f16;
use kestrel_kernels::cpu::Isa;
use kestrel_kernels::quant::act::quantize_q8_0_ref;
use kestrel_kernels::quant::q8_0::{self, BlockQ8_0};
use kestrel_kernels::quant::q8_k::{self, BlockQ8K, QK_K};
use kestrel_kernels::quant::TILE;
use kestrel_kernels::quant::{iq1_m, iq1_s, iq2_s, iq2_xs, iq2_xxs, iq3_s, iq3_xxs, mxfp4};
use kestrel_kernels::{ActFormat, DType, TypeKernels};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// One i-quant weight format under test.
trait IQuant {
    type Block: Pod + std::fmt::Debug;
    type Act: Pod;
    const DTYPE: DType;
    const ACT: ActFormat;
    /// Elements per block.
    const QK: usize;
    fn kernels(isa: Isa) -> TypeKernels;
    fn dequantize_ref(src: &[Self::Block], dst: &mut [f32]);
    fn vec_dot_ref(w: &[Self::Block], a: &[Self::Act]) -> f32;
    fn quantize_act(x: &[f32]) -> Vec<Self::Act>;
    fn dequantize_act(a: &[Self::Act]) -> Vec<f32>;
    /// `b` with its super-scale set to `d` (MXFP4: to the nearest power of two).
    fn with_scale(b: Self::Block, d: f16) -> Self::Block;
}

/// Declares the marker type of a Q8_K-activation i-quant whose block has an `f16` field `d`.
macro_rules! q8k_iquant {
    ($name:ident, $module:ident, $block:ident, $dtype:expr) => {
        struct $name;
        impl IQuant for $name {
            type Block = $module::$block;
            type Act = BlockQ8K;
            const DTYPE: DType = $dtype;
            const ACT: ActFormat = ActFormat::Q8K;
            const QK: usize = QK_K;
            fn kernels(isa: Isa) -> TypeKernels {
                $module::kernels(isa)
            }
            fn dequantize_ref(src: &[Self::Block], dst: &mut [f32]) {
                $module::dequantize_ref(src, dst)
            }
            fn vec_dot_ref(w: &[Self::Block], a: &[BlockQ8K]) -> f32 {
                $module::vec_dot_ref(w, a)
            }
            fn quantize_act(x: &[f32]) -> Vec<BlockQ8K> {
                q8_k::quantize_ref(x)
            }
            fn dequantize_act(a: &[BlockQ8K]) -> Vec<f32> {
                let mut y = vec![0f32; a.len() * QK_K];
                q8_k::dequantize_ref(a, &mut y);
                y
            }
            fn with_scale(b: Self::Block, d: f16) -> Self::Block {
                Self::Block { d, ..b }
            }
        }
    };
}

q8k_iquant!(Iq2Xxs, iq2_xxs, BlockIq2Xxs, DType::IQ2_XXS);
q8k_iquant!(Iq2Xs, iq2_xs, BlockIq2Xs, DType::IQ2_XS);
q8k_iquant!(Iq2S, iq2_s, BlockIq2S, DType::IQ2_S);
q8k_iquant!(Iq3Xxs, iq3_xxs, BlockIq3Xxs, DType::IQ3_XXS);
q8k_iquant!(Iq3S, iq3_s, BlockIq3S, DType::IQ3_S);
q8k_iquant!(Iq1S, iq1_s, BlockIq1S, DType::IQ1_S);

struct Iq1M;
impl IQuant for Iq1M {
    type Block = iq1_m::BlockIq1M;
    type Act = BlockQ8K;
    const DTYPE: DType = DType::IQ1_M;
    const ACT: ActFormat = ActFormat::Q8K;
    const QK: usize = QK_K;
    fn kernels(isa: Isa) -> TypeKernels {
        iq1_m::kernels(isa)
    }
    fn dequantize_ref(src: &[Self::Block], dst: &mut [f32]) {
        iq1_m::dequantize_ref(src, dst)
    }
    fn vec_dot_ref(w: &[Self::Block], a: &[BlockQ8K]) -> f32 {
        iq1_m::vec_dot_ref(w, a)
    }
    fn quantize_act(x: &[f32]) -> Vec<BlockQ8K> {
        q8_k::quantize_ref(x)
    }
    fn dequantize_act(a: &[BlockQ8K]) -> Vec<f32> {
        Iq2Xxs::dequantize_act(a)
    }
    /// The super-scale's 4 nibbles go to the top nibbles of the 4 scale words.
    fn with_scale(mut b: Self::Block, d: f16) -> Self::Block {
        let bits = d.to_bits();
        for (k, s) in b.scales.iter_mut().enumerate() {
            *s = (*s & 0x0FFF) | ((bits >> (4 * k)) & 0xF) << 12;
        }
        b
    }
}

struct Mxfp4;
impl IQuant for Mxfp4 {
    type Block = mxfp4::BlockMxfp4;
    type Act = BlockQ8_0;
    const DTYPE: DType = DType::MXFP4;
    const ACT: ActFormat = ActFormat::Q8_0;
    const QK: usize = 32;
    fn kernels(isa: Isa) -> TypeKernels {
        mxfp4::kernels(isa)
    }
    fn dequantize_ref(src: &[Self::Block], dst: &mut [f32]) {
        mxfp4::dequantize_ref(src, dst)
    }
    fn vec_dot_ref(w: &[Self::Block], a: &[BlockQ8_0]) -> f32 {
        mxfp4::vec_dot_ref(w, a)
    }
    fn quantize_act(x: &[f32]) -> Vec<BlockQ8_0> {
        quantize_q8_0_ref(x)
    }
    fn dequantize_act(a: &[BlockQ8_0]) -> Vec<f32> {
        let mut y = vec![0f32; a.len() * 32];
        q8_0::dequantize_ref(a, &mut y);
        y
    }
    /// The exponent of `|d|` (`d` = 0 gives the smallest scale).
    fn with_scale(b: Self::Block, d: f16) -> Self::Block {
        let e = (d.to_f32().abs().to_bits() >> 23) as u8;
        Self::Block { e, ..b }
    }
}

fn random_blocks<T: IQuant>(rng: &mut ChaCha8Rng, nb: usize) -> Vec<T::Block> {
    (0..nb)
        .map(|_| {
            let mut b = T::Block::zeroed();
            rng.fill(bytemuck::bytes_of_mut(&mut b));
            T::with_scale(b, f16::from_f32(rng.gen_range(-0.1f32..0.1)))
        })
        .collect()
}

fn random_acts<T: IQuant>(rng: &mut ChaCha8Rng, nb: usize) -> Vec<T::Act> {
    let x: Vec<f32> = (0..nb * T::QK)
        .map(|_| rng.gen_range(-4.0f32..4.0))
        .collect();
    T::quantize_act(&x)
}

fn dequant<T: IQuant>(w: &[T::Block]) -> Vec<f32> {
    let mut y = vec![0f32; w.len() * T::QK];
    T::dequantize_ref(w, &mut y);
    y
}

/// `M = Σ_i |w_i a_i|` and the f64 dot of the dequantized rows.
fn dequantized_dot<T: IQuant>(w: &[T::Block], a: &[T::Act]) -> (f64, f64) {
    let (wf, af) = (dequant::<T>(w), T::dequantize_act(a));
    let terms = wf.iter().zip(&af).map(|(&w, &a)| w as f64 * a as f64);
    terms.fold((0.0, 0.0), |(m, s), t| (m + t.abs(), s + t))
}

/// Every available variant against the reference on one (weights, activations) pair.
fn check_variants<T: IQuant>(w: &[T::Block], a: &[T::Act], what: &str) {
    let n = w.len() * T::QK;
    let (wb, ab): (&[u8], &[u8]) = (bytemuck::cast_slice(w), bytemuck::cast_slice(a));
    let want = T::vec_dot_ref(w, a);
    let (m, _) = dequantized_dot::<T>(w, a);
    let tol = 1e-6 * m + 1e-30;
    let want_deq = dequant::<T>(w);
    for isa in Isa::available() {
        let k = T::kernels(isa);
        assert_eq!((k.dtype, k.isa, k.act), (T::DTYPE, isa, T::ACT), "{what}");
        let got = (k.vec_dot)(n, wb, ab);
        assert!(
            (got as f64 - want as f64).abs() <= tol,
            "{:?} {what} {isa:?}: vec_dot {got} vs ref {want} (tol {tol})",
            T::DTYPE
        );
        let mut deq = vec![f32::NAN; n];
        (k.dequantize)(wb, &mut deq);
        for (i, (g, r)) in deq.iter().zip(&want_deq).enumerate() {
            assert_eq!(
                g.to_bits(),
                r.to_bits(),
                "{:?} {what} {isa:?}: elem {i}",
                T::DTYPE
            );
        }
    }
}

fn variants_match_reference<T: IQuant>() {
    let mut rng = ChaCha8Rng::seed_from_u64(T::DTYPE as u64);
    for nb in [1usize, 2, 3, 8, 17] {
        for trial in 0..6 {
            let w = random_blocks::<T>(&mut rng, nb);
            let a = random_acts::<T>(&mut rng, nb);
            check_variants::<T>(&w, &a, &format!("random nb={nb} trial={trial}"));
        }
    }
    // Every bit set (largest grid rows, all signs, largest scales) against saturated
    // activations, and all-zero blocks, which must give exactly 0.
    let mut full = T::Block::zeroed();
    bytemuck::bytes_of_mut(&mut full).fill(0xFF);
    let full = T::with_scale(full, f16::from_f32(0.5));
    let ones = T::quantize_act(&vec![1.0f32; T::QK]);
    check_variants::<T>(&[full], &ones, "all bits set, saturated acts");
    let zeros = vec![T::Block::zeroed(); 2];
    let a = random_acts::<T>(&mut rng, 2);
    check_variants::<T>(&zeros, &a, "zero blocks");
    let w = random_blocks::<T>(&mut rng, 2);
    let za = vec![T::Act::zeroed(); 2];
    for isa in Isa::available() {
        let got = (T::kernels(isa).vec_dot)(
            2 * T::QK,
            bytemuck::cast_slice(&w),
            bytemuck::cast_slice(&za),
        );
        assert_eq!(got, 0.0, "{:?} zero acts {isa:?}", T::DTYPE);
    }
}

fn reference_dot_is_dequantized_dot<T: IQuant>() {
    let mut rng = ChaCha8Rng::seed_from_u64(300 + T::DTYPE as u64);
    for nb in [1usize, 4, 9] {
        let w = random_blocks::<T>(&mut rng, nb);
        let a = random_acts::<T>(&mut rng, nb);
        let (m, want) = dequantized_dot::<T>(&w, &a);
        let got = T::vec_dot_ref(&w, &a) as f64;
        assert!(m > 0.0, "{:?}: nonzero test data", T::DTYPE);
        assert!(
            (got - want).abs() <= 1e-6 * m,
            "{:?} nb={nb}: ref {got} vs dequantized {want} (tol {})",
            T::DTYPE,
            1e-6 * m
        );
    }
}

/// Every variant's multi-row kernel (where it has one): each of the `TILE × TILE` results
/// against the reference dot of its (weight row, activation row) pair, rows all different.
fn tiles_match_reference<T: IQuant>() {
    let mut rng = ChaCha8Rng::seed_from_u64(500 + T::DTYPE as u64);
    for nb in [1usize, 3, 8] {
        let w: Vec<Vec<T::Block>> = (0..TILE)
            .map(|_| random_blocks::<T>(&mut rng, nb))
            .collect();
        let a: Vec<Vec<T::Act>> = (0..TILE).map(|_| random_acts::<T>(&mut rng, nb)).collect();
        let wb: [&[u8]; TILE] = std::array::from_fn(|r| bytemuck::cast_slice(&w[r]));
        let ab: [&[u8]; TILE] = std::array::from_fn(|j| bytemuck::cast_slice(&a[j]));
        let mut tested = 0;
        for isa in Isa::available() {
            let Some(tile) = T::kernels(isa).vec_dot_tile else {
                continue;
            };
            tested += 1;
            let got = tile(nb * T::QK, wb, ab);
            for (j, row) in got.iter().enumerate() {
                for (r, &g) in row.iter().enumerate() {
                    let want = T::vec_dot_ref(&w[r], &a[j]);
                    let tol = 1e-6 * dequantized_dot::<T>(&w[r], &a[j]).0 + 1e-30;
                    assert!(
                        (g as f64 - want as f64).abs() <= tol,
                        "{:?} {isa:?} nb={nb} tile[{j}][{r}]: {g} vs ref {want}",
                        T::DTYPE
                    );
                }
            }
        }
        let simd = Isa::available().into_iter().any(|i| i != Isa::Scalar);
        assert!(
            tested > 0 || !simd,
            "{:?}: the SIMD variants have a tile kernel",
            T::DTYPE
        );
    }
}

macro_rules! iquant_tests {
    ($ty:ty, $variants:ident, $deq_dot:ident) => {
        #[test]
        fn $variants() {
            variants_match_reference::<$ty>();
            tiles_match_reference::<$ty>();
        }
        #[test]
        fn $deq_dot() {
            reference_dot_is_dequantized_dot::<$ty>();
        }
    };
}

iquant_tests!(
    Iq2Xxs,
    iq2_xxs_variants_match_ref,
    iq2_xxs_ref_dot_is_dequant_dot
);
iquant_tests!(
    Iq2Xs,
    iq2_xs_variants_match_ref,
    iq2_xs_ref_dot_is_dequant_dot
);
iquant_tests!(Iq2S, iq2_s_variants_match_ref, iq2_s_ref_dot_is_dequant_dot);
iquant_tests!(
    Iq3Xxs,
    iq3_xxs_variants_match_ref,
    iq3_xxs_ref_dot_is_dequant_dot
);
iquant_tests!(Iq3S, iq3_s_variants_match_ref, iq3_s_ref_dot_is_dequant_dot);
iquant_tests!(Iq1S, iq1_s_variants_match_ref, iq1_s_ref_dot_is_dequant_dot);
iquant_tests!(Iq1M, iq1_m_variants_match_ref, iq1_m_ref_dot_is_dequant_dot);
iquant_tests!(
    Mxfp4,
    mxfp4_variants_match_ref,
    mxfp4_ref_dot_is_dequant_dot
);

/// MXFP4's reference quantizer: Gaussian data round-trips with a bounded relative RMS error,
/// zeros exactly, and values on the E2M1 grid of the block's scale exactly.
#[test]
fn mxfp4_quantize_round_trip() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let x: Vec<f32> = (0..64 * 32)
        .map(|_| (0..12).map(|_| rng.gen_range(0.0f32..1.0)).sum::<f32>() - 6.0)
        .collect();
    let y = dequant::<Mxfp4>(&mxfp4::quantize_ref(&x));
    let err: f64 = x
        .iter()
        .zip(&y)
        .map(|(&a, &b)| (a as f64 - b as f64).powi(2))
        .sum();
    let pow: f64 = x.iter().map(|&a| (a as f64).powi(2)).sum();
    let rel = (err / pow).sqrt();
    assert!(rel < 0.2, "MXFP4 relative RMSE {rel}");
    let exact: Vec<f32> = (0..32)
        .map(|i| [0.0, 0.5, -1.5, 3.0, -6.0, 2.0][i % 6])
        .collect();
    assert_eq!(dequant::<Mxfp4>(&mxfp4::quantize_ref(&exact)), exact);
    assert_eq!(
        dequant::<Mxfp4>(&mxfp4::quantize_ref(&[0.0; 32])),
        vec![0.0; 32]
    );
}
