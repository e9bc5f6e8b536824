//! Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and IQ4_NL (the 32-element block types): every ISA variant against the scalar reference, the reference
//! dot product against an `f64` dot of dequantized rows, and quantize -> dequantize error
//! bounds.
//!
//! Tolerances:
//! * `dequantize`: bit-exact on every ISA (the SIMD code does the reference's `f32` ops).
//! * `vec_dot` (SIMD vs reference): `|simd - ref| <= 4 (nb + 16) eps L1`, where `nb` is the
//!   block count and `L1 = sum_b |d_w d_a| sum_j |q_j a_j| + |m s_a|` bounds every partial sum.
//!   Integer block sums are exact on both sides; only the `f32` accumulation order differs.
//! * `vec_dot_ref` vs the exact dot of dequantized rows: the same bound, plus (Q4_1) the exact
//!   effect of `s_a` being rounded to `f16`: `sum_b |m| |d_a sum(a_q) - s_a|`.
//! * Round trip, per element: half a quantization step (a full step where the format clamps
//!   the extreme value), plus the `f16` rounding of `d` (times the largest quant) and of `m`.

use bytemuck::Pod;
use half::f16;
use kestrel_kernels::cpu::Isa;
use kestrel_kernels::quant::act::{self, BlockQ8_1};
use kestrel_kernels::quant::q8_0::BlockQ8_0;
use kestrel_kernels::quant::{
    iq4_nl, q4_0, q4_1, q5_0, q5_1, q8_0, ActFormat, DType, QuantFormat, TypeKernels,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const EPS: f64 = f32::EPSILON as f64;
/// Block counts: single, odd, the SmolLM2 hidden size (18), and larger.
const BLOCKS: [usize; 7] = [1, 2, 3, 7, 18, 48, 97];

/// What these tests need of a legacy format beyond the crate's [`QuantFormat`] (its block,
/// reference functions and variants).
trait Format: QuantFormat {
    /// Per block: (`d_w`, `m`, the 32 integer quants as they enter the dot, centred).
    fn parts(w: &Self::Block) -> (f32, f32, [i32; 32]);
    /// Largest quant magnitude and the clamping slack (in steps) of the rounding.
    const QMAX: f32;
    const CLAMP_STEPS: f32;
    /// The quantization step of a block with these values.
    fn step(x: &[f32]) -> f32;
}

fn act_parts_q8_0(a: &BlockQ8_0) -> (f32, f32, [i8; 32]) {
    (a.d.to_f32(), 0.0, a.qs)
}

fn act_parts_q8_1(a: &BlockQ8_1) -> (f32, f32, [i8; 32]) {
    (a.d.to_f32(), a.s.to_f32(), a.qs)
}

fn nibbles(qs: &[u8; 16], offset: i32) -> [i32; 32] {
    std::array::from_fn(|j| {
        let q = if j < 16 {
            qs[j] & 0x0F
        } else {
            qs[j - 16] >> 4
        };
        q as i32 - offset
    })
}

fn amax(x: &[f32]) -> f32 {
    x.iter().fold(0.0f32, |m, v| m.max(v.abs()))
}

impl Format for q4_0::Q4_0 {
    const QMAX: f32 = 8.0;
    const CLAMP_STEPS: f32 = 1.0;
    fn parts(w: &Self::Block) -> (f32, f32, [i32; 32]) {
        (w.d.to_f32(), 0.0, nibbles(&w.qs, 8))
    }
    fn step(x: &[f32]) -> f32 {
        amax(x) / 8.0
    }
}

impl Format for q4_1::Q4_1 {
    const QMAX: f32 = 15.0;
    const CLAMP_STEPS: f32 = 0.5;
    fn parts(w: &Self::Block) -> (f32, f32, [i32; 32]) {
        (w.d.to_f32(), w.m.to_f32(), nibbles(&w.qs, 0))
    }
    fn step(x: &[f32]) -> f32 {
        let (lo, hi) = x
            .iter()
            .fold((f32::MAX, f32::MIN), |(l, h), &v| (l.min(v), h.max(v)));
        (hi - lo) / 15.0
    }
}

impl Format for q5_0::Q5_0 {
    const QMAX: f32 = 16.0;
    const CLAMP_STEPS: f32 = 1.0;
    fn parts(w: &Self::Block) -> (f32, f32, [i32; 32]) {
        let qh = u32::from_le_bytes(w.qh);
        let mut q = nibbles(&w.qs, 0);
        for (j, q) in q.iter_mut().enumerate() {
            *q += ((qh >> j & 1) << 4) as i32 - 16;
        }
        (w.d.to_f32(), 0.0, q)
    }
    fn step(x: &[f32]) -> f32 {
        amax(x) / 16.0
    }
}

impl Format for q5_1::Q5_1 {
    const QMAX: f32 = 31.0;
    const CLAMP_STEPS: f32 = 0.5;
    fn parts(w: &Self::Block) -> (f32, f32, [i32; 32]) {
        let qh = u32::from_le_bytes(w.qh);
        let mut q = nibbles(&w.qs, 0);
        for (j, q) in q.iter_mut().enumerate() {
            *q += ((qh >> j & 1) << 4) as i32;
        }
        (w.d.to_f32(), w.m.to_f32(), q)
    }
    fn step(x: &[f32]) -> f32 {
        let (lo, hi) = x
            .iter()
            .fold((f32::MAX, f32::MIN), |(l, h), &v| (l.min(v), h.max(v)));
        (hi - lo) / 31.0
    }
}

/// IQ4_NL, in steps of `d = amax / 127`: rounding to the nearest codebook entry is off by
/// at most half the largest gap (24, between 89 and 113), and a value of the sign opposite
/// to the extreme one (which maps to -127) clamps at 113: off by at most 14.
impl Format for iq4_nl::Iq4Nl {
    const QMAX: f32 = 127.0;
    const CLAMP_STEPS: f32 = 14.0;
    fn parts(w: &Self::Block) -> (f32, f32, [i32; 32]) {
        let idx = nibbles(&w.qs, 0);
        (
            w.d.to_f32(),
            0.0,
            idx.map(|i| iq4_nl::CODEBOOK[i as usize] as i32),
        )
    }
    fn step(x: &[f32]) -> f32 {
        amax(x) / 127.0
    }
}

impl Format for q8_0::Q8_0 {
    const QMAX: f32 = 127.0;
    const CLAMP_STEPS: f32 = 0.5;
    fn parts(w: &Self::Block) -> (f32, f32, [i32; 32]) {
        (w.d.to_f32(), 0.0, w.qs.map(|q| q as i32))
    }
    fn step(x: &[f32]) -> f32 {
        amax(x) / 127.0
    }
}

/// `(d_a, s_a, qs)` of an activation block of either format.
fn act_parts<F: Format>(a: &F::Act) -> (f32, f32, [i8; 32]) {
    let bytes = bytemuck::bytes_of(a);
    if bytes.len() == 36 {
        act_parts_q8_1(bytemuck::from_bytes(bytes))
    } else {
        act_parts_q8_0(bytemuck::from_bytes(bytes))
    }
}

/// The `L1` magnitude of the module docs.
fn l1<F: Format>(w: &[F::Block], a: &[F::Act]) -> f64 {
    let mut sum = 0.0;
    for (w, a) in w.iter().zip(a) {
        let (dw, m, q) = F::parts(w);
        let (da, s, aq) = act_parts::<F>(a);
        let qa: f64 = q
            .iter()
            .zip(aq)
            .map(|(&q, a)| (q as f64 * a as f64).abs())
            .sum();
        sum += (dw as f64 * da as f64).abs() * qa;
        if m != 0.0 {
            sum += (m as f64 * s as f64).abs();
        }
    }
    sum
}

/// Random `f32` rows of several shapes, plus edge cases.
fn rows(rng: &mut ChaCha8Rng, n: usize) -> Vec<(String, Vec<f32>)> {
    let mut out = vec![
        (
            "uniform".to_string(),
            (0..n).map(|_| rng.gen_range(-1.0f32..1.0)).collect(),
        ),
        (
            "offset".to_string(),
            (0..n).map(|_| rng.gen_range(-0.2f32..1.5)).collect(),
        ),
        ("zeros".to_string(), vec![0.0; n]),
        ("constant".to_string(), vec![0.75; n]),
    ];
    let spiky = (0..n)
        .map(|i| match i % 11 {
            0 => 3.0e4,
            5 => -6.0e4,
            _ => rng.gen_range(-1.0e-3f32..1.0e-3),
        })
        .collect();
    out.push(("extreme".to_string(), spiky));
    out.push((
        "tiny".to_string(),
        (0..n).map(|_| rng.gen_range(-1.0e-6f32..1.0e-6)).collect(),
    ));
    out
}

/// Random raw weight blocks: arbitrary quant bytes with sane scales.
fn raw_blocks<F: Format>(rng: &mut ChaCha8Rng, nb: usize) -> Vec<F::Block> {
    let size = std::mem::size_of::<F::Block>();
    (0..nb)
        .flat_map(|_| {
            let mut b: Vec<u8> = (0..size).map(|_| rng.gen()).collect();
            b[..2].copy_from_slice(&f16::from_f32(rng.gen_range(-0.1f32..0.1)).to_le_bytes());
            if matches!(F::DTYPE, DType::Q4_1 | DType::Q5_1) {
                b[2..4].copy_from_slice(&f16::from_f32(rng.gen_range(-1.0f32..1.0)).to_le_bytes());
            }
            b
        })
        .collect::<Vec<u8>>()
        .chunks_exact(size)
        .map(bytemuck::pod_read_unaligned)
        .collect()
}

fn kernels_of(dtype: DType, isa: Isa) -> TypeKernels {
    let k = TypeKernels::for_isa(dtype, isa);
    assert_eq!(k.dtype, dtype);
    assert_eq!(k.isa, isa, "{dtype}: expected the {} variant", isa.name());
    k
}

fn check_variants<F: Format>(w: &[F::Block], a: &[F::Act], label: &str) {
    let n = w.len() * 32;
    let (wb, ab): (&[u8], &[u8]) = (bytemuck::cast_slice(w), bytemuck::cast_slice(a));
    let reference = F::vec_dot_ref(w, a);
    let mut deq_ref = vec![0.0f32; n];
    F::dequantize_ref(w, &mut deq_ref);
    let tol = 4.0 * (w.len() as f64 + 16.0) * EPS * l1::<F>(w, a);
    for isa in Isa::available() {
        let k = F::kernels(isa);
        assert_eq!((k.dtype, k.isa), (F::DTYPE, isa));
        let got = (k.vec_dot)(n, wb, ab);
        let err = (got as f64 - reference as f64).abs();
        assert!(
            err <= tol,
            "{} {} {label} n={n}: {got} vs ref {reference} (tol {tol:e})",
            F::DTYPE,
            isa.name()
        );
        let mut deq = vec![f32::NAN; n];
        (k.dequantize)(wb, &mut deq);
        for (j, (x, y)) in deq.iter().zip(&deq_ref).enumerate() {
            assert!(
                x.to_bits() == y.to_bits(),
                "{} {} {label}: dequantize[{j}] {x} vs {y}",
                F::DTYPE,
                isa.name()
            );
        }
    }
}

fn check_ref_against_f64<F: Format>(w: &[F::Block], a: &[F::Act], label: &str) {
    let n = w.len() * 32;
    let mut wf = vec![0.0f32; n];
    F::dequantize_ref(w, &mut wf);
    let mut exact = 0.0f64;
    let mut s_err = 0.0f64;
    for (b, (wb, ab)) in w.iter().zip(a).enumerate() {
        let (da, s, aq) = act_parts::<F>(ab);
        for (j, q) in aq.iter().enumerate() {
            exact += wf[b * 32 + j] as f64 * (*q as f64 * da as f64);
        }
        let (_, m, _) = F::parts(wb);
        if m != 0.0 {
            let sum: f64 = aq.iter().map(|&q| q as f64).sum();
            s_err += (m as f64).abs() * (da as f64 * sum - s as f64).abs();
        }
    }
    let got = F::vec_dot_ref(w, a) as f64;
    let tol = 4.0 * (w.len() as f64 + 16.0) * EPS * l1::<F>(w, a) + s_err;
    assert!(
        (got - exact).abs() <= tol,
        "{} {label}: ref {got} vs dequantized dot {exact} (tol {tol:e})",
        F::DTYPE
    );
}

fn check_round_trip<F: Format>(x: &[f32], label: &str) {
    let w = F::quantize_ref(x);
    let mut y = vec![0.0f32; x.len()];
    F::dequantize_ref(&w, &mut y);
    let ulp16 = |v: f32| (v.abs() * 2.0f32.powi(-11)).max(2.0f32.powi(-25));
    for (b, (xb, yb)) in x.chunks(32).zip(y.chunks(32)).enumerate() {
        let (d, m, _) = F::parts(&w[b]);
        let step = F::step(xb);
        let bound = step * F::CLAMP_STEPS + F::QMAX * ulp16(d) + ulp16(m) + 1e-6 * amax(xb);
        for (j, (u, v)) in xb.iter().zip(yb).enumerate() {
            assert!(
                (u - v).abs() <= bound,
                "{} {label}: block {b}[{j}] {u} -> {v} (bound {bound:e})",
                F::DTYPE
            );
        }
    }
}

fn run_format<F: Format>(seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for nb in BLOCKS {
        let n = nb * 32;
        for (name, x) in rows(&mut rng, n) {
            check_round_trip::<F>(&x, &name);
            let w = F::quantize_ref(&x);
            for (aname, y) in rows(&mut rng, n) {
                let a = F::quantize_act_ref(&y);
                if a.iter().any(|a| !act_parts::<F>(a).1.is_finite()) {
                    // Q8_1's `s = d * sum(q)` overflows f16 once |sum(x)| > 65504: a limit of
                    // the format (shared with GGML), only reachable by the "extreme" rows.
                    assert!(
                        matches!(F::DTYPE, DType::Q4_1 | DType::Q5_1),
                        "{}",
                        F::DTYPE
                    );
                    assert_eq!(aname, "extreme");
                    continue;
                }
                let label = format!("w={name} a={aname}");
                check_variants::<F>(&w, &a, &label);
                check_ref_against_f64::<F>(&w, &a, &label);
            }
        }
        let raw = raw_blocks::<F>(&mut rng, nb);
        let y: Vec<f32> = (0..n).map(|_| rng.gen_range(-3.0f32..3.0)).collect();
        let a = F::quantize_act_ref(&y);
        check_variants::<F>(&raw, &a, "raw blocks");
        check_ref_against_f64::<F>(&raw, &a, "raw blocks");
    }
}

#[test]
fn q4_0_matches_reference() {
    run_format::<q4_0::Q4_0>(40);
}

#[test]
fn q4_1_matches_reference() {
    run_format::<q4_1::Q4_1>(41);
}

#[test]
fn q5_0_matches_reference() {
    run_format::<q5_0::Q5_0>(50);
}

#[test]
fn q5_1_matches_reference() {
    run_format::<q5_1::Q5_1>(51);
}

#[test]
fn iq4_nl_matches_reference() {
    run_format::<iq4_nl::Iq4Nl>(20);
}

#[test]
fn q8_0_matches_reference() {
    run_format::<q8_0::Q8_0>(80);
}

#[test]
fn legacy_kernels_pair_with_their_activation_format() {
    for isa in Isa::available() {
        assert_eq!(TypeKernels::for_isa(DType::Q4_0, isa).act, ActFormat::Q8_0);
        assert_eq!(TypeKernels::for_isa(DType::Q4_1, isa).act, ActFormat::Q8_1);
        assert_eq!(TypeKernels::for_isa(DType::Q5_0, isa).act, ActFormat::Q8_0);
        assert_eq!(TypeKernels::for_isa(DType::Q8_0, isa).act, ActFormat::Q8_0);
        assert_eq!(TypeKernels::for_isa(DType::Q5_1, isa).act, ActFormat::Q8_1);
        assert_eq!(
            TypeKernels::for_isa(DType::IQ4_NL, isa).act,
            ActFormat::Q8_0
        );
    }
}

/// Known blocks, checked by hand against the GGUF layout.
#[test]
fn known_block_layouts() {
    // Q4_0: x[j] = j - 16 for j < 16 and 0 above; max magnitude -16 => d = 2, q = x/2 + 8.
    let x: Vec<f32> = (0..32)
        .map(|j| if j < 16 { j as f32 - 16.0 } else { 0.0 })
        .collect();
    let b = q4_0::quantize_ref(&x)[0];
    assert_eq!(b.d.to_f32(), 2.0);
    assert_eq!(
        b.qs[0], 0x80,
        "element 0 -> q 0 (low nibble), element 16 -> q 8 (high)"
    );
    assert_eq!(b.qs[15] & 0x0F, 8, "x = -1 -> -0.5 + 8.5 = 8");
    // Q5_0: max 16 => d = -1; q(16) = 0, q(-16) = trunc(32.5) -> clamped to 31,
    // q(15) = trunc(1.5) = 1, q(0) = 16.
    let mut x = vec![0.0f32; 32];
    x[0] = 16.0;
    x[1] = -16.0;
    x[31] = 15.0;
    let b = q5_0::quantize_ref(&x)[0];
    let qh = u32::from_le_bytes(b.qh);
    assert_eq!(b.d.to_f32(), -1.0);
    assert_eq!(
        b.qs[0], 0x00,
        "element 0 -> 0, element 16 -> 16 (low bits 0)"
    );
    assert_eq!(b.qs[1] & 0x0F, 15, "element 1 -> 31");
    assert_eq!(b.qs[15] >> 4, 1, "element 31 -> 1");
    assert_eq!(qh & 0b11, 0b10, "fifth bits of elements 0 and 1");
    assert_eq!(qh >> 16 & 1, 1, "element 16 -> 16 has its fifth bit set");
    assert_eq!(qh >> 31, 0);
    // Q4_1: min -1, max 14 => d = 1, m = -1, q = x + 1.
    let x: Vec<f32> = (0..32).map(|j| (j % 16) as f32 - 1.0).collect();
    let b = q4_1::quantize_ref(&x)[0];
    assert_eq!((b.d.to_f32(), b.m.to_f32()), (1.0, -1.0));
    assert_eq!(b.qs[3], 0x33, "x = 2 -> q = 3 in both nibbles");
    // Q8_0: ties round away from zero: amax 127 => d = 1, 2.5 -> 3, -0.5 -> -1.
    let mut x = vec![0.0f32; 32];
    x[0] = 127.0;
    x[1] = 2.5;
    x[2] = -0.5;
    let b = q8_0::quantize_ref(&x)[0];
    assert_eq!(&b.qs[..3], &[127, 3, -1]);
}

/// Random rows of `nb` blocks: weights quantized with `quantize`, activations with `act`.
fn tile_rows<W: Pod, A: Pod>(
    nb: usize,
    rng: &mut ChaCha8Rng,
    quantize: fn(&[f32]) -> Vec<W>,
    act: fn(&[f32]) -> Vec<A>,
) -> (Vec<Vec<W>>, Vec<Vec<A>>) {
    let mut row = || -> Vec<f32> { (0..nb * 32).map(|_| rng.gen_range(-3.0f32..3.0)).collect() };
    let w = (0..4).map(|_| quantize(&row())).collect();
    let a = (0..4).map(|_| act(&row())).collect();
    (w, a)
}

/// Every ISA's tile kernel against `reference` (= `vec_dot_ref`) and against the same ISA's
/// `vec_dot` for each (row, act) pair, including tiles that repeat rows (as gemm pads
/// partial tiles).
fn check_tile_kernel<W: Pod, A: Pod>(
    dtype: DType,
    quantize: fn(&[f32]) -> Vec<W>,
    act: fn(&[f32]) -> Vec<A>,
    reference: fn(&[W], &[A]) -> f32,
) {
    let mut rng = ChaCha8Rng::seed_from_u64(77);
    for isa in Isa::available() {
        let k = kernels_of(dtype, isa);
        let Some(tile) = k.vec_dot_tile else {
            assert_eq!(
                isa,
                Isa::Scalar,
                "{dtype}: {} has no tile kernel",
                isa.name()
            );
            continue;
        };
        for nb in BLOCKS {
            let (w, a) = tile_rows(nb, &mut rng, quantize, act);
            for pattern in [[0, 1, 2, 3], [2, 2, 3, 3]] {
                let wb: [&[u8]; 4] = pattern.map(|r| bytemuck::cast_slice(&w[r]));
                let ab: [&[u8]; 4] = [3, 1, 0, pattern[1]].map(|j| bytemuck::cast_slice(&a[j]));
                let got = tile(nb * 32, wb, ab);
                for (j, &aj) in [3, 1, 0, pattern[1]].iter().enumerate() {
                    for (r, &wr) in pattern.iter().enumerate() {
                        let want = reference(&w[wr], &a[aj]);
                        let single = (k.vec_dot)(nb * 32, wb[r], ab[j]);
                        let tol = 1e-5 * (want.abs() as f64 + nb as f64);
                        assert!(
                            ((got[j][r] - want) as f64).abs() <= tol,
                            "{dtype} {} nb={nb} tile[{j}][{r}] = {}, reference {want}, vec_dot {single}",
                            isa.name(),
                            got[j][r]
                        );
                        assert!(
                            ((got[j][r] - single) as f64).abs() <= tol,
                            "{dtype} {} nb={nb} tile[{j}][{r}] = {}, vec_dot {single}",
                            isa.name(),
                            got[j][r]
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn tile_kernels_match_vec_dot_ref() {
    check_tile_kernel(
        DType::Q4_0,
        q4_0::quantize_ref,
        act::quantize_q8_0_ref,
        q4_0::vec_dot_ref,
    );
    check_tile_kernel(
        DType::Q5_0,
        q5_0::quantize_ref,
        act::quantize_q8_0_ref,
        q5_0::vec_dot_ref,
    );
    check_tile_kernel(
        DType::Q4_1,
        q4_1::quantize_ref,
        act::quantize_q8_1_ref,
        q4_1::vec_dot_ref,
    );
    check_tile_kernel(
        DType::Q8_0,
        q8_0::quantize_ref,
        act::quantize_q8_0_ref,
        q8_0::vec_dot_ref,
    );
    check_tile_kernel(
        DType::IQ4_NL,
        iq4_nl::quantize_ref,
        act::quantize_q8_0_ref,
        iq4_nl::vec_dot_ref,
    );
}
