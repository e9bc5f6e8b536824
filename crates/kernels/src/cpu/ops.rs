//! Row-wise element ops: RMS norm, LayerNorm, rotary embedding, SiLU- and GELU-gating, GELU,
//! softmax, residual add.
//!
//! Each op has a scalar `reference` (the spec, written for clarity). The hot ones also have
//! SIMD variants: one lane-structured body (see [`vmath`]) compiled under
//! `#[target_feature]` for AVX2 and AVX-512, chosen at run time through [`OpsKernels`].
//! The public functions ([`rms_norm`], ...) use the kernels for [`Isa::detected`].

use std::sync::OnceLock;

use crate::cpu::Isa;

/// Rotary-embedding pair layout within a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeStyle {
    /// Pairs `(2i, 2i+1)`: GGUF llama-family models (weights permuted at conversion).
    Interleaved,
    /// Pairs `(i, i + head_dim/2)`: Hugging Face checkpoints (GPT-NeoX style).
    Neox,
}

/// Function pointers for the ops that have SIMD variants.
#[derive(Clone, Copy)]
pub struct OpsKernels {
    /// The ISA these were compiled for.
    pub isa: Isa,
    pub rms_norm: fn(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]),
    pub silu_mul: fn(gate: &mut [f32], up: &[f32]),
    pub gelu_tanh_mul: fn(gate: &mut [f32], up: &[f32]),
    pub softmax: fn(x: &mut [f32]),
    pub add_assign: fn(x: &mut [f32], y: &[f32]),
}

impl OpsKernels {
    /// The fastest variants `isa` can run (capped at what this CPU supports).
    pub fn for_isa(isa: Isa) -> OpsKernels {
        let best = Isa::supported();
        match isa.min(best) {
            Isa::Scalar => OpsKernels {
                isa: Isa::Scalar,
                rms_norm: reference::rms_norm,
                silu_mul: reference::silu_mul,
                gelu_tanh_mul: reference::gelu_tanh_mul,
                softmax: reference::softmax,
                add_assign: reference::add_assign,
            },
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => x86::avx2_kernels(),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512Vnni => x86::avx512_kernels(),
            #[cfg(not(target_arch = "x86_64"))]
            _ => Self::for_isa(Isa::Scalar),
        }
    }

    /// The kernels for this CPU, chosen once.
    pub fn detected() -> &'static OpsKernels {
        static K: OnceLock<OpsKernels> = OnceLock::new();
        K.get_or_init(|| OpsKernels::for_isa(Isa::detected()))
    }
}

/// `out = x / sqrt(mean(x²) + eps) * weight`. All slices have the same length.
pub fn rms_norm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    (OpsKernels::detected().rms_norm)(x, weight, eps, out)
}

/// `gate = silu(gate) * up`, where `silu(g) = g / (1 + e^-g)`.
pub fn silu_mul(gate: &mut [f32], up: &[f32]) {
    (OpsKernels::detected().silu_mul)(gate, up)
}

/// `gate = gelu_tanh(gate) * up` (GeGLU), with the tanh approximation of GELU:
/// `gelu_tanh(g) = g/2 · (1 + tanh(√(2/π) · (g + 0.044715·g³)))`.
pub fn gelu_tanh_mul(gate: &mut [f32], up: &[f32]) {
    (OpsKernels::detected().gelu_tanh_mul)(gate, up)
}

/// In-place softmax over the whole slice.
pub fn softmax(x: &mut [f32]) {
    (OpsKernels::detected().softmax)(x)
}

/// `x += y`.
pub fn add_assign(x: &mut [f32], y: &[f32]) {
    (OpsKernels::detected().add_assign)(x, y)
}

/// Rotate, in place, `x.len() / head_dim` heads for position `pos`. `inv_freq` has one entry
/// per rotary pair (any rope scaling already applied): `head_dim / 2` for a fully rotary head,
/// fewer for partial rotary, where only the first `rotary_dim = 2 * inv_freq.len()` values of
/// each head turn and the rest pass through. Pair `i` turns by `pos * inv_freq[i]`, computed
/// in `f32` as Hugging Face does. Cheap (one sin/cos per pair index, shared by all heads), so
/// there is a single implementation.
///
/// ```text
/// Interleaved: (x[2i], x[2i+1])        Neox: (x[i], x[i + rotary_dim/2])
/// (a, b) -> (a·cos − b·sin, a·sin + b·cos)
/// ```
pub fn rope(x: &mut [f32], head_dim: usize, pos: usize, inv_freq: &[f32], style: RopeStyle) {
    rope_scaled(x, head_dim, pos, inv_freq, style, 1.0);
}

/// [`rope`] with the rotated values multiplied by `scale` (YaRN's and LongRoPE's attention
/// factor, which Hugging Face applies to cos and sin: `(a, b) -> (a·c − b·s, a·s + b·c)` with
/// `c = scale·cos`, `s = scale·sin`). Values past the rotary part are not scaled.
pub fn rope_scaled(
    x: &mut [f32],
    head_dim: usize,
    pos: usize,
    inv_freq: &[f32],
    style: RopeStyle,
    scale: f32,
) {
    assert!(
        head_dim.is_multiple_of(2) && head_dim > 0,
        "rope: head_dim {head_dim} must be even"
    );
    assert_eq!(
        x.len() % head_dim,
        0,
        "rope: x.len() is not a multiple of head_dim"
    );
    assert!(
        !inv_freq.is_empty() && inv_freq.len() <= head_dim / 2,
        "rope: inv_freq must have 1..=head_dim/2 entries"
    );
    let half = inv_freq.len();
    for (i, &f) in inv_freq.iter().enumerate() {
        let (sin, cos) = (pos as f32 * f).sin_cos();
        let (sin, cos) = (sin * scale, cos * scale);
        let (ia, ib) = match style {
            RopeStyle::Interleaved => (2 * i, 2 * i + 1),
            RopeStyle::Neox => (i, i + half),
        };
        for head in x.chunks_exact_mut(head_dim) {
            let (a, b) = (head[ia], head[ib]);
            head[ia] = a * cos - b * sin;
            head[ib] = a * sin + b * cos;
        }
    }
}

/// LayerNorm of one row: `out = (x − mean) / sqrt(var + eps) · weight + bias`, `var` the
/// biased variance (as `torch.nn.LayerNorm`), accumulated in `f64`. A few flops per element
/// next to the matrix products around it, so there is a single (scalar) implementation.
pub fn layer_norm(x: &[f32], weight: &[f32], bias: &[f32], eps: f32, out: &mut [f32]) {
    check_len3(x.len(), weight.len(), out.len());
    assert_eq!(bias.len(), x.len(), "layer_norm: bias length");
    let n = x.len().max(1) as f64;
    let mean = x.iter().map(|&v| v as f64).sum::<f64>() / n;
    let var = x.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n;
    let inv = 1.0 / (var + eps as f64).sqrt();
    for (((o, &v), &w), &b) in out.iter_mut().zip(x).zip(weight).zip(bias) {
        *o = ((v as f64 - mean) * inv) as f32 * w + b;
    }
}

/// GELU, tanh approximation, in place: `x · ½ · (1 + tanh(√(2/π) · (x + 0.044715 x³)))`
/// (BLOOM's `bloom_gelu_forward`, PyTorch's `gelu(approximate="tanh")`). Single implementation.
pub fn gelu_tanh(x: &mut [f32]) {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    for v in x.iter_mut() {
        let u = *v;
        *v = u * 0.5 * (1.0 + (SQRT_2_OVER_PI * u * (1.0 + 0.044_715 * u * u)).tanh());
    }
}

/// The scalar specs.
pub mod reference {
    /// See [`super::rms_norm`]. Accumulates in `f64`.
    pub fn rms_norm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
        super::check_len3(x.len(), weight.len(), out.len());
        let ss: f64 = x.iter().map(|&v| v as f64 * v as f64).sum();
        let inv = 1.0 / (ss / x.len().max(1) as f64 + eps as f64).sqrt();
        for ((o, &v), &w) in out.iter_mut().zip(x).zip(weight) {
            *o = (v as f64 * inv) as f32 * w;
        }
    }

    /// See [`super::silu_mul`].
    pub fn silu_mul(gate: &mut [f32], up: &[f32]) {
        assert_eq!(gate.len(), up.len(), "silu_mul: length mismatch");
        for (g, &u) in gate.iter_mut().zip(up) {
            *g = *g / (1.0 + (-*g).exp()) * u;
        }
    }

    /// See [`super::gelu_tanh_mul`]. The formula itself, with `tanh` in `f64`.
    pub fn gelu_tanh_mul(gate: &mut [f32], up: &[f32]) {
        assert_eq!(gate.len(), up.len(), "gelu_tanh_mul: length mismatch");
        for (g, &u) in gate.iter_mut().zip(up) {
            let x = f64::from(*g);
            let inner = super::GELU_SQRT_2_OVER_PI * (x + super::GELU_KAPPA * x * x * x);
            *g = (0.5 * x * (1.0 + inner.tanh())) as f32 * u;
        }
    }

    /// See [`super::softmax`].
    pub fn softmax(x: &mut [f32]) {
        let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0.0f64;
        for v in x.iter_mut() {
            *v = (*v - max).exp();
            sum += *v as f64;
        }
        let inv = (1.0 / sum) as f32;
        x.iter_mut().for_each(|v| *v *= inv);
    }

    /// See [`super::add_assign`].
    pub fn add_assign(x: &mut [f32], y: &[f32]) {
        assert_eq!(x.len(), y.len(), "add_assign: length mismatch");
        x.iter_mut().zip(y).for_each(|(a, &b)| *a += b);
    }
}

/// `√(2/π)` and the cubic coefficient of the tanh approximation of GELU.
const GELU_SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
const GELU_KAPPA: f64 = 0.044_715;

fn check_len3(a: usize, b: usize, c: usize) {
    assert!(
        a == b && b == c,
        "rms_norm: lengths differ (x {a}, weight {b}, out {c})"
    );
}

/// Lane-structured vector math: loops over `[f32; L]` chunks that LLVM turns into SIMD when
/// compiled inside a `#[target_feature]` function. `F` selects fused multiply-add (only
/// instantiate `F = true` where FMA is enabled, or `mul_add` becomes a library call).
/// Shared by the ops here and by attention.
pub(crate) mod vmath {
    #[inline(always)]
    pub fn fma<const F: bool>(a: f32, b: f32, c: f32) -> f32 {
        if F {
            a.mul_add(b, c)
        } else {
            a * b + c
        }
    }

    /// A chunk as an array, so LLVM sees the lane count (chunks always have `L` elements).
    #[inline(always)]
    fn lanes<const L: usize>(c: &[f32]) -> &[f32; L] {
        c.try_into().expect("chunks_exact yields L elements")
    }

    #[inline(always)]
    fn lanes_mut<const L: usize>(c: &mut [f32]) -> &mut [f32; L] {
        c.try_into().expect("chunks_exact_mut yields L elements")
    }

    /// `Σ a[i]·b[i]` (equal lengths).
    #[inline(always)]
    pub fn dot<const F: bool, const L: usize>(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let mut acc = [0.0f32; L];
        let (ac, bc) = (a[..n].chunks_exact(L), b[..n].chunks_exact(L));
        let (ar, br) = (ac.remainder(), bc.remainder());
        for (x, y) in ac.map(lanes::<L>).zip(bc.map(lanes::<L>)) {
            for l in 0..L {
                acc[l] = fma::<F>(x[l], y[l], acc[l]);
            }
        }
        let mut s = hsum(acc);
        for (x, y) in ar.iter().zip(br) {
            s = fma::<F>(*x, *y, s);
        }
        s
    }

    /// `y += a·x`.
    #[inline(always)]
    pub fn axpy<const F: bool>(y: &mut [f32], a: f32, x: &[f32]) {
        for (v, &u) in y.iter_mut().zip(x) {
            *v = fma::<F>(a, u, *v);
        }
    }

    /// `y *= a`.
    #[inline(always)]
    pub fn scale(y: &mut [f32], a: f32) {
        y.iter_mut().for_each(|v| *v *= a);
    }

    #[inline(always)]
    pub fn hsum<const L: usize>(acc: [f32; L]) -> f32 {
        let mut acc = acc;
        let mut w = L;
        while w > 1 {
            w /= 2;
            for l in 0..w {
                acc[l] += acc[l + w];
            }
        }
        acc[0]
    }

    #[inline(always)]
    pub fn max<const L: usize>(x: &[f32]) -> f32 {
        let mut acc = [f32::NEG_INFINITY; L];
        let chunks = x.chunks_exact(L);
        let mut m = chunks
            .remainder()
            .iter()
            .copied()
            .fold(f32::NEG_INFINITY, f32::max);
        for c in chunks.map(lanes::<L>) {
            for l in 0..L {
                acc[l] = if c[l] > acc[l] { c[l] } else { acc[l] };
            }
        }
        for v in acc {
            m = m.max(v);
        }
        m
    }

    /// The constants of [`exp`] (shared with the attention kernel's vector exp): the clamp
    /// range, 1.5·2^23 (adding it rounds to an integer), ln 2 split in two, and the degree-7
    /// Taylor coefficients, highest first.
    pub(crate) const EXP_LO: f32 = -87.3;
    pub(crate) const EXP_HI: f32 = 88.3;
    pub(crate) const EXP_MAGIC: f32 = 12_582_912.0;
    pub(crate) const LN2_HI: f32 = -0.693_145_75;
    pub(crate) const LN2_LO: f32 = -1.428_606_8e-6;
    pub(crate) const EXP_POLY: [f32; 8] = [
        1.0 / 5040.0,
        1.0 / 720.0,
        1.0 / 120.0,
        1.0 / 24.0,
        1.0 / 6.0,
        0.5,
        1.0,
        1.0,
    ];

    /// `e^x` for `x` in about [-87.3, 88.3] (clamped outside), relative error ≈ 2e-7:
    /// `x = n·ln2 + r` with `|r| ≤ ln2/2`, then `2^n · P(r)` with a degree-7 Taylor `P`.
    #[inline(always)]
    pub fn exp<const F: bool>(x: f32) -> f32 {
        let x = x.clamp(EXP_LO, EXP_HI);
        let t = fma::<F>(x, std::f32::consts::LOG2_E, EXP_MAGIC);
        let n_bits = t.to_bits() as i32 - EXP_MAGIC.to_bits() as i32;
        let n = t - EXP_MAGIC;
        let r = fma::<F>(n, LN2_HI, x);
        let r = fma::<F>(n, LN2_LO, r);
        let mut p = EXP_POLY[0];
        for c in &EXP_POLY[1..] {
            p = fma::<F>(p, r, *c);
        }
        let two_n = f32::from_bits(((n_bits + 127) as u32) << 23);
        p * two_n
    }

    /// `x[i] = e^(x[i] − m)`; returns the sum.
    #[inline(always)]
    pub fn exp_sub_sum<const F: bool, const L: usize>(x: &mut [f32], m: f32) -> f32 {
        let mut acc = [0.0f32; L];
        let mut chunks = x.chunks_exact_mut(L);
        for c in (&mut chunks).map(lanes_mut::<L>) {
            for l in 0..L {
                c[l] = exp::<F>(c[l] - m);
                acc[l] += c[l];
            }
        }
        let mut s = hsum(acc);
        for v in chunks.into_remainder() {
            *v = exp::<F>(*v - m);
            s += *v;
        }
        s
    }

    #[inline(always)]
    pub fn rms_norm<const F: bool, const L: usize>(
        x: &[f32],
        w: &[f32],
        eps: f32,
        out: &mut [f32],
    ) {
        super::check_len3(x.len(), w.len(), out.len());
        let ss = dot::<F, L>(x, x);
        let inv = 1.0 / (ss / x.len().max(1) as f32 + eps).sqrt();
        for ((o, &v), &g) in out.iter_mut().zip(x).zip(w) {
            *o = v * inv * g;
        }
    }

    #[inline(always)]
    pub fn silu_mul<const F: bool>(gate: &mut [f32], up: &[f32]) {
        assert_eq!(gate.len(), up.len(), "silu_mul: length mismatch");
        for (g, &u) in gate.iter_mut().zip(up) {
            *g = *g / (1.0 + exp::<F>(-*g)) * u;
        }
    }

    /// `gelu_tanh(g)·u` as `g / (1 + e^(−2y)) · u` with `y = √(2/π)·(g + 0.044715·g³)`, since
    /// `(1 + tanh y) / 2 = 1 / (1 + e^(−2y))`.
    #[inline(always)]
    pub fn gelu_tanh_mul<const F: bool>(gate: &mut [f32], up: &[f32]) {
        assert_eq!(gate.len(), up.len(), "gelu_tanh_mul: length mismatch");
        const C: f32 = super::GELU_SQRT_2_OVER_PI as f32;
        const K: f32 = super::GELU_KAPPA as f32;
        for (g, &u) in gate.iter_mut().zip(up) {
            let x = *g;
            let y = C * fma::<F>(K * x, x * x, x);
            *g = x / (1.0 + exp::<F>(-2.0 * y)) * u;
        }
    }

    /// `x = cap · tanh(x / cap)` (logit soft-capping), with `tanh z = 1 − 2 / (e^(2z) + 1)`
    /// (absolute error ≈ 1e-7 · cap; `e^(2z)` saturates, so large |z| give ±cap).
    #[inline(always)]
    pub fn softcap<const F: bool>(x: &mut [f32], cap: f32) {
        let inv = 1.0 / cap;
        for v in x.iter_mut() {
            let e = exp::<F>(2.0 * *v * inv);
            *v = cap - 2.0 * cap / (e + 1.0);
        }
    }

    #[inline(always)]
    pub fn softmax<const F: bool, const L: usize>(x: &mut [f32]) {
        let m = max::<L>(x);
        let sum = exp_sub_sum::<F, L>(x, m);
        scale(x, 1.0 / sum);
    }

    #[inline(always)]
    pub fn add_assign(x: &mut [f32], y: &[f32]) {
        assert_eq!(x.len(), y.len(), "add_assign: length mismatch");
        x.iter_mut().zip(y).for_each(|(a, &b)| *a += b);
    }
}

/// Defines a safe entry point that calls `$body` compiled with `$features`.
macro_rules! simd_entry {
    ($name:ident, $features:literal, fn($($arg:ident: $ty:ty),*) $(-> $ret:ty)?, $body:expr) => {
        fn $name($($arg: $ty),*) $(-> $ret)? {
            #[target_feature(enable = $features)]
            unsafe fn inner($($arg: $ty),*) $(-> $ret)? {
                $body
            }
            // SAFETY: entry points are only handed out by `for_isa` for ISAs that
            // `Isa::available()` reports, i.e. the CPU supports `$features`.
            unsafe { inner($($arg),*) }
        }
    };
}
pub(crate) use simd_entry;

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{vmath, OpsKernels};
    use crate::cpu::Isa;

    simd_entry!(
        rms_norm_avx2,
        "avx2,fma",
        fn(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]),
        vmath::rms_norm::<true, 16>(x, w, eps, out)
    );
    simd_entry!(
        silu_mul_avx2,
        "avx2,fma",
        fn(g: &mut [f32], u: &[f32]),
        vmath::silu_mul::<true>(g, u)
    );
    simd_entry!(
        gelu_tanh_mul_avx2,
        "avx2,fma",
        fn(g: &mut [f32], u: &[f32]),
        vmath::gelu_tanh_mul::<true>(g, u)
    );
    simd_entry!(
        softmax_avx2,
        "avx2,fma",
        fn(x: &mut [f32]),
        vmath::softmax::<true, 16>(x)
    );
    simd_entry!(
        add_assign_avx2,
        "avx2,fma",
        fn(x: &mut [f32], y: &[f32]),
        vmath::add_assign(x, y)
    );

    simd_entry!(
        rms_norm_avx512,
        "avx512f,avx2,fma",
        fn(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]),
        vmath::rms_norm::<true, 32>(x, w, eps, out)
    );
    simd_entry!(
        silu_mul_avx512,
        "avx512f,avx2,fma",
        fn(g: &mut [f32], u: &[f32]),
        vmath::silu_mul::<true>(g, u)
    );
    simd_entry!(
        gelu_tanh_mul_avx512,
        "avx512f,avx2,fma",
        fn(g: &mut [f32], u: &[f32]),
        vmath::gelu_tanh_mul::<true>(g, u)
    );
    simd_entry!(
        softmax_avx512,
        "avx512f,avx2,fma",
        fn(x: &mut [f32]),
        vmath::softmax::<true, 32>(x)
    );
    simd_entry!(
        add_assign_avx512,
        "avx512f,avx2,fma",
        fn(x: &mut [f32], y: &[f32]),
        vmath::add_assign(x, y)
    );

    pub(super) fn avx2_kernels() -> OpsKernels {
        OpsKernels {
            isa: Isa::Avx2,
            rms_norm: rms_norm_avx2,
            silu_mul: silu_mul_avx2,
            gelu_tanh_mul: gelu_tanh_mul_avx2,
            softmax: softmax_avx2,
            add_assign: add_assign_avx2,
        }
    }

    pub(super) fn avx512_kernels() -> OpsKernels {
        OpsKernels {
            isa: Isa::Avx512Vnni,
            rms_norm: rms_norm_avx512,
            silu_mul: silu_mul_avx512,
            gelu_tanh_mul: gelu_tanh_mul_avx512,
            softmax: softmax_avx512,
            add_assign: add_assign_avx512,
        }
    }
}
