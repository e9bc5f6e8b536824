//! Every ops variant (each `Isa::available()`) against the scalar reference, and rope
//! against its definition.

use kestrel_kernels::cpu::ops::{self, reference, OpsKernels, RopeStyle};
use kestrel_kernels::cpu::Isa;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const LENS: [usize; 7] = [1, 7, 16, 33, 64, 576, 1537];

fn random(rng: &mut ChaCha8Rng, n: usize, scale: f32) -> Vec<f32> {
    (0..n).map(|_| rng.gen_range(-scale..scale)).collect()
}

/// `|a − b| ≤ atol + rtol·|b|` elementwise.
fn assert_close(a: &[f32], b: &[f32], atol: f32, rtol: f32, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: length");
    for (i, (&x, &y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= atol + rtol * y.abs(),
            "{what}[{i}]: {x} vs reference {y}"
        );
    }
}

#[test]
fn rms_norm_variants_match_reference() {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    for isa in Isa::available() {
        let k = OpsKernels::for_isa(isa);
        assert_eq!(k.isa, isa);
        for n in LENS {
            let x = random(&mut rng, n, 3.0);
            let w = random(&mut rng, n, 2.0);
            let (mut got, mut want) = (vec![0.0; n], vec![0.0; n]);
            (k.rms_norm)(&x, &w, 1e-5, &mut got);
            reference::rms_norm(&x, &w, 1e-5, &mut want);
            assert_close(&got, &want, 1e-6, 1e-5, &format!("rms_norm {isa:?} n={n}"));
        }
    }
}

#[test]
fn silu_mul_variants_match_reference() {
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    for isa in Isa::available() {
        let k = OpsKernels::for_isa(isa);
        for n in LENS {
            let mut g = random(&mut rng, n, 20.0);
            g[0] = -100.0; // exp overflow/underflow ends
            if n > 1 {
                g[1] = 95.0;
            }
            let u = random(&mut rng, n, 2.0);
            let mut want = g.clone();
            reference::silu_mul(&mut want, &u);
            (k.silu_mul)(&mut g, &u);
            assert_close(&g, &want, 1e-6, 2e-6, &format!("silu_mul {isa:?} n={n}"));
        }
    }
}

#[test]
fn gelu_tanh_mul_variants_match_reference() {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    for isa in Isa::available() {
        let k = OpsKernels::for_isa(isa);
        for n in LENS {
            let mut g = random(&mut rng, n, 8.0);
            g[0] = -100.0; // exp overflow/underflow ends
            if n > 1 {
                g[1] = 95.0;
            }
            let u = random(&mut rng, n, 2.0);
            let mut want = g.clone();
            reference::gelu_tanh_mul(&mut want, &u);
            (k.gelu_tanh_mul)(&mut g, &u);
            assert_close(
                &g,
                &want,
                1e-6,
                4e-6,
                &format!("gelu_tanh_mul {isa:?} n={n}"),
            );
        }
    }
}

/// The reference against PyTorch's `gelu(x, approximate="tanh")` at a few points (values
/// computed with torch 2.x in float64).
#[test]
fn gelu_tanh_reference_matches_torch_values() {
    let x = [-3.0f32, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0];
    let torch: [f64; 7] = [
        -0.003_637_392_1,
        -0.158_808_009_9,
        -0.154_285_990_2,
        0.0,
        0.345_714_009_8,
        0.841_191_990_6,
        2.996_362_607_9,
    ];
    let mut g = x;
    reference::gelu_tanh_mul(&mut g, &[1.0; 7]);
    assert_close(
        &g,
        &torch.map(|v| v as f32),
        1e-7,
        1e-6,
        "gelu_tanh reference",
    );
}

#[test]
fn softmax_variants_match_reference() {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    for isa in Isa::available() {
        let k = OpsKernels::for_isa(isa);
        for n in LENS {
            let mut x = random(&mut rng, n, 30.0);
            if n > 2 {
                x[2] = f32::NEG_INFINITY; // masked entry
            }
            let mut want = x.clone();
            reference::softmax(&mut want);
            (k.softmax)(&mut x);
            assert_close(&x, &want, 1e-7, 2e-6, &format!("softmax {isa:?} n={n}"));
            let sum: f32 = x.iter().sum();
            assert!(
                (sum - 1.0).abs() < 1e-5,
                "softmax {isa:?} n={n} sums to {sum}"
            );
        }
    }
}

#[test]
fn add_assign_variants_are_exact() {
    let mut rng = ChaCha8Rng::seed_from_u64(4);
    for isa in Isa::available() {
        let k = OpsKernels::for_isa(isa);
        for n in LENS {
            let mut x = random(&mut rng, n, 5.0);
            let y = random(&mut rng, n, 5.0);
            let mut want = x.clone();
            reference::add_assign(&mut want, &y);
            (k.add_assign)(&mut x, &y);
            assert_eq!(x, want, "add_assign {isa:?} n={n}");
        }
    }
}

#[test]
fn public_ops_use_a_valid_variant() {
    let x = [1.0f32, -2.0, 3.0, -4.0];
    let w = [1.0f32; 4];
    let mut out = [0.0; 4];
    ops::rms_norm(&x, &w, 0.0, &mut out);
    let rms = (30.0f32 / 4.0).sqrt();
    assert_close(&out, &x.map(|v| v / rms), 1e-6, 1e-6, "rms_norm");
    let mut s = [0.0f32, 0.0f32.ln() /* -inf */, 2.0f32.ln()];
    ops::softmax(&mut s);
    assert_close(&s, &[1.0 / 3.0, 0.0, 2.0 / 3.0], 1e-6, 1e-6, "softmax");
    let mut g = [0.0f32, 1.0];
    ops::silu_mul(&mut g, &[3.0, 2.0]);
    assert_close(
        &g,
        &[0.0, 2.0 / (1.0 + (-1.0f32).exp())],
        1e-6,
        1e-6,
        "silu_mul",
    );
    let mut a = [1.0f32, 2.0];
    ops::add_assign(&mut a, &[0.5, -2.0]);
    assert_eq!(a, [1.5, 0.0]);
}

/// Rope by definition: rotate the pair (a, b) by angle pos·inv_freq[i].
fn rope_definition(x: &[f32], hd: usize, pos: usize, inv: &[f32], style: RopeStyle) -> Vec<f32> {
    let mut y = x.to_vec();
    for h in 0..x.len() / hd {
        for (i, &f) in inv.iter().enumerate() {
            let (ia, ib) = match style {
                RopeStyle::Interleaved => (h * hd + 2 * i, h * hd + 2 * i + 1),
                RopeStyle::Neox => (h * hd + i, h * hd + i + hd / 2),
            };
            let t = (pos as f32 * f) as f64;
            let (a, b) = (x[ia] as f64, x[ib] as f64);
            y[ia] = (a * t.cos() - b * t.sin()) as f32;
            y[ib] = (a * t.sin() + b * t.cos()) as f32;
        }
    }
    y
}

#[test]
fn rope_matches_definition_and_preserves_norm() {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    for (hd, n_heads) in [(64, 9), (128, 3), (2, 1)] {
        let inv: Vec<f32> = (0..hd / 2)
            .map(|i| 10000f32.powf(-2.0 * i as f32 / hd as f32))
            .collect();
        for style in [RopeStyle::Interleaved, RopeStyle::Neox] {
            for pos in [0, 1, 17, 4095] {
                let x = random(&mut rng, hd * n_heads, 2.0);
                let mut got = x.clone();
                ops::rope(&mut got, hd, pos, &inv, style);
                let want = rope_definition(&x, hd, pos, &inv, style);
                assert_close(
                    &got,
                    &want,
                    1e-5,
                    1e-5,
                    &format!("rope {style:?} pos={pos}"),
                );
                let norm = |v: &[f32]| v.iter().map(|a| a * a).sum::<f32>();
                assert!((norm(&got) - norm(&x)).abs() < 1e-3 * norm(&x));
                if pos == 0 {
                    assert_eq!(got, x, "position 0 is the identity");
                }
            }
        }
    }
}

#[test]
fn rope_styles_pair_different_elements() {
    // head_dim 4, one frequency of 90° per position on pair 0, none on pair 1.
    let inv = [std::f32::consts::FRAC_PI_2, 0.0];
    let mut a = [1.0f32, 2.0, 3.0, 4.0];
    ops::rope(&mut a, 4, 1, &inv, RopeStyle::Interleaved);
    assert_close(&a, &[-2.0, 1.0, 3.0, 4.0], 1e-6, 0.0, "interleaved");
    let mut b = [1.0f32, 2.0, 3.0, 4.0];
    ops::rope(&mut b, 4, 1, &inv, RopeStyle::Neox);
    assert_close(&b, &[-3.0, 2.0, 1.0, 4.0], 1e-6, 0.0, "neox");
}

/// LayerNorm by hand: `[1, 2, 3, 4]` has mean 2.5 and variance 1.25; torch.nn.LayerNorm's
/// output for weight `w`, bias `b`.
#[test]
fn layer_norm_matches_hand_values() {
    let x = [1.0f32, 2.0, 3.0, 4.0];
    let (w, b) = ([1.0f32, 2.0, 0.5, -1.0], [0.0f32, 0.1, -0.2, 0.3]);
    let mut out = [0.0f32; 4];
    kestrel_kernels::cpu::ops::layer_norm(&x, &w, &b, 1e-5, &mut out);
    let inv = 1.0 / (1.25f64 + 1e-5).sqrt();
    for i in 0..4 {
        let want = ((x[i] as f64 - 2.5) * inv) as f32 * w[i] + b[i];
        assert!((out[i] - want).abs() < 1e-6, "{i}: {} vs {want}", out[i]);
    }
    let torch = [-1.3416355f32, -0.7944236, 0.0236059, -1.0416355];
    for (g, t) in out.iter().zip(torch) {
        assert!((g - t).abs() < 1e-5, "{out:?} vs torch {torch:?}");
    }
}

/// GELU (tanh) at points torch.nn.functional.gelu(x, approximate="tanh") gives.
#[test]
fn gelu_tanh_matches_torch() {
    let mut x = [0.0f32, 1.0, -1.0, 2.5, -3.0, 0.1];
    let want = [0.0f32, 0.841192, -0.158808, 2.4849, -0.003637, 0.053983];
    kestrel_kernels::cpu::ops::gelu_tanh(&mut x);
    for (g, w) in x.iter().zip(want) {
        assert!((g - w).abs() < 2e-4, "{x:?} vs {want:?}");
    }
}

/// Hugging Face's `apply_rotary_pos_emb` on one head with partial rotary: `x_rot = x[..rot]`,
/// `emb = cat(freqs, freqs)`, `x_rot * cos(emb) * s + rotate_half(x_rot) * sin(emb) * s`, where
/// `rotate_half(v) = cat(-v[rot/2..], v[..rot/2])`; `x[rot..]` passes through.
fn hf_partial_neox(x: &[f32], pos: usize, inv: &[f32], scale: f32) -> Vec<f32> {
    let half = inv.len();
    let rot = 2 * half;
    let emb: Vec<f32> = (0..rot).map(|j| pos as f32 * inv[j % half]).collect();
    let rotated_half: Vec<f32> = (0..rot)
        .map(|j| if j < half { -x[j + half] } else { x[j - half] })
        .collect();
    let mut y = x.to_vec();
    for j in 0..rot {
        let (c, s) = (emb[j].cos() * scale, emb[j].sin() * scale);
        y[j] = x[j] * c + rotated_half[j] * s;
    }
    y
}

#[test]
fn rope_partial_rotary_matches_hf_and_passes_the_rest_through() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    // head_dim 16 with 12 rotary dims (Phi-4-mini's 0.75), 32 with 8 (0.25).
    for (hd, rot, n_heads) in [(16, 12, 3), (32, 8, 2)] {
        let inv: Vec<f32> = (0..rot / 2)
            .map(|i| 10000f32.powf(-2.0 * i as f32 / rot as f32))
            .collect();
        for (pos, scale) in [(0, 1.0), (5, 1.0), (300, 1.0), (7, 1.25)] {
            let x = random(&mut rng, hd * n_heads, 2.0);
            let mut got = x.clone();
            ops::rope_scaled(&mut got, hd, pos, &inv, RopeStyle::Neox, scale);
            let want: Vec<f32> = x
                .chunks_exact(hd)
                .flat_map(|h| hf_partial_neox(h, pos, &inv, scale))
                .collect();
            assert_close(
                &got,
                &want,
                1e-5,
                1e-5,
                &format!("hd {hd} rot {rot} pos {pos}"),
            );
            for (h, (g, x)) in got.chunks_exact(hd).zip(x.chunks_exact(hd)).enumerate() {
                assert_eq!(
                    g[rot..],
                    x[rot..],
                    "head {h}: dims past {rot} must pass through"
                );
            }
            if pos != 0 {
                assert_ne!(got[..rot], x[..rot], "the rotary part turns");
            }
        }
    }
}

#[test]
fn rope_scale_multiplies_the_rotated_values_only() {
    let inv = [0.3f32, 0.01];
    let x = [1.0f32, -2.0, 0.5, 4.0, 7.0, 8.0];
    let mut plain = x;
    ops::rope(&mut plain, 6, 3, &inv, RopeStyle::Interleaved);
    let mut scaled = x;
    ops::rope_scaled(&mut scaled, 6, 3, &inv, RopeStyle::Interleaved, 1.5);
    let want: Vec<f32> = plain[..4].iter().map(|v| v * 1.5).collect();
    assert_close(&scaled[..4], &want, 1e-6, 1e-6, "scaled rotary part");
    assert_eq!(scaled[4..], x[4..], "the pass-through part is not scaled");
}
