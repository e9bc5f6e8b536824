//! Q8_0 and Q8_1 activation quantizers: every ISA variant is byte-identical to the reference
//! (the SIMD code performs the reference's `f32` operations, including round-half-away).

use kestrel_kernels::cpu::Isa;
use kestrel_kernels::quant::act;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn inputs(rng: &mut ChaCha8Rng, n: usize) -> Vec<(&'static str, Vec<f32>)> {
    // amax 127 => d = 1, id = 1: every x.5 is an exact tie.
    let ties = (0..n)
        .map(|i| {
            if i % 32 == 0 {
                127.0
            } else {
                (i % 64) as f32 - 31.5
            }
        })
        .collect();
    vec![
        (
            "uniform",
            (0..n).map(|_| rng.gen_range(-1.0f32..1.0)).collect(),
        ),
        (
            "wide",
            (0..n)
                .map(|_| rng.gen_range(-50.0f32..50.0) * rng.gen_range(0.0f32..1.0).powi(4))
                .collect(),
        ),
        ("zeros", vec![0.0; n]),
        ("ties", ties),
        (
            "huge",
            (0..n)
                .map(|i| {
                    if i % 7 == 0 {
                        -1.0e6
                    } else {
                        rng.gen_range(-1.0f32..1.0)
                    }
                })
                .collect(),
        ),
        (
            "tiny",
            (0..n).map(|_| rng.gen_range(-1.0e-7f32..1.0e-7)).collect(),
        ),
    ]
}

#[test]
fn act_quantizers_match_reference_bytes() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    for nb in [1usize, 3, 18, 48] {
        let n = nb * 32;
        for (name, x) in inputs(&mut rng, n) {
            let r0: Vec<u8> = bytemuck::cast_slice(&act::quantize_q8_0_ref(&x)).to_vec();
            let r1: Vec<u8> = bytemuck::cast_slice(&act::quantize_q8_1_ref(&x)).to_vec();
            for isa in Isa::available() {
                let mut d0 = vec![0xAAu8; n / 32 * 34];
                act::quantize_q8_0_for(isa)(&x, &mut d0);
                assert_eq!(d0, r0, "Q8_0 {} {name} n={n}", isa.name());
                let mut d1 = vec![0xAAu8; n / 32 * 36];
                act::quantize_q8_1_for(isa)(&x, &mut d1);
                assert_eq!(d1, r1, "Q8_1 {} {name} n={n}", isa.name());
            }
        }
    }
}

#[test]
fn act_quantizers_write_unaligned_buffers() {
    let x: Vec<f32> = (0..96).map(|i| (i as f32 * 0.37).sin()).collect();
    let r1: Vec<u8> = bytemuck::cast_slice(&act::quantize_q8_1_ref(&x)).to_vec();
    for isa in Isa::available() {
        let mut buf = [0u8; 3 * 36 + 1];
        act::quantize_q8_1_for(isa)(&x, &mut buf[1..]);
        assert_eq!(&buf[1..], &r1[..], "{}", isa.name());
    }
}

#[test]
fn q8_1_reference_properties() {
    let mut rng = ChaCha8Rng::seed_from_u64(8);
    let x: Vec<f32> = (0..256).map(|_| rng.gen_range(-4.0f32..4.0)).collect();
    for (b, xb) in act::quantize_q8_1_ref(&x).iter().zip(x.chunks(32)) {
        let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        assert_eq!(b.d.to_f32(), half::f16::from_f32(d).to_f32());
        let sum: i32 = b.qs.iter().map(|&q| q as i32).sum();
        assert_eq!(b.s, half::f16::from_f32(sum as f32 * d));
        assert!(b.qs.iter().all(|&q| q != -128), "quants stay in -127..=127");
        assert!(
            b.qs.iter().any(|&q| q.abs() == 127),
            "the largest value maps to +-127"
        );
        for (q, v) in b.qs.iter().zip(xb) {
            assert!((*q as f32 * d - v).abs() <= d * 0.5 * (1.0 + 1e-5));
        }
    }
}
