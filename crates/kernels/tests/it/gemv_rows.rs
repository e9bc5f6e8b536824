//! The m = 1 multi-row kernels (`q4_0::vec_dot_rows`, `q8_0::vec_dot_rows`, IQ4_NL's
//! `vec_dot_rows`) against the scalar reference dot products, for every ISA this CPU runs, with
//! even and odd block counts.

use kestrel_kernels::cpu::Isa;
use kestrel_kernels::quant::{iq4_nl, q4_0, q8_0, TILE};
use kestrel_kernels::{DType, TypeKernels};
use rand::{Rng, SeedableRng};

fn random(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    (0..n).map(|_| rng.gen_range(-1.0f32..1.0)).collect()
}

/// Checks `rows(n, w, a)[r]` against `reference(r)` within a relative tolerance.
fn check(got: [f32; TILE], reference: impl Fn(usize) -> f32, what: &str) {
    for (r, &g) in got.iter().enumerate() {
        let want = reference(r);
        let tol = 1e-4 * want.abs().max(1.0);
        assert!(
            (g - want).abs() <= tol,
            "{what}: row {r}: got {g}, want {want}"
        );
    }
}

#[test]
fn q4_0_rows_match_reference() {
    let mut tested = 0;
    for isa in Isa::available() {
        let Some(rows) = q4_0::vec_dot_rows(isa) else {
            continue;
        };
        for n in [32, 64, 96, 2048] {
            let w: Vec<Vec<q4_0::BlockQ4_0>> = (0..TILE)
                .map(|r| q4_0::quantize_ref(&random(n, r as u64)))
                .collect();
            let a = q8_0::quantize_ref(&random(n, 99));
            let wb: Vec<&[u8]> = w.iter().map(|x| bytemuck::cast_slice(x)).collect();
            let got = rows(n, std::array::from_fn(|r| wb[r]), bytemuck::cast_slice(&a));
            check(
                got,
                |r| q4_0::vec_dot_ref(&w[r], &a),
                &format!("Q4_0 {isa:?} n={n}"),
            );
            tested += 1;
        }
    }
    assert!(tested > 0 || !Isa::available().contains(&Isa::Avx512Vnni));
}

#[test]
fn q8_0_rows_match_reference() {
    let mut tested = 0;
    for isa in Isa::available() {
        let Some(rows) = q8_0::vec_dot_rows(isa) else {
            continue;
        };
        for n in [32, 64, 96, 2048] {
            let w: Vec<Vec<q8_0::BlockQ8_0>> = (0..TILE)
                .map(|r| q8_0::quantize_ref(&random(n, 10 + r as u64)))
                .collect();
            let a = q8_0::quantize_ref(&random(n, 98));
            let wb: Vec<&[u8]> = w.iter().map(|x| bytemuck::cast_slice(x)).collect();
            let got = rows(n, std::array::from_fn(|r| wb[r]), bytemuck::cast_slice(&a));
            check(
                got,
                |r| q8_0::vec_dot_ref(&w[r], &a),
                &format!("Q8_0 {isa:?} n={n}"),
            );
            tested += 1;
        }
    }
    assert!(tested > 0 || !Isa::available().contains(&Isa::Avx512Vnni));
}

#[test]
fn iq4_nl_rows_match_reference() {
    let mut tested = 0;
    for isa in Isa::available() {
        let Some(rows) = TypeKernels::for_isa(DType::IQ4_NL, isa).vec_dot_rows else {
            continue;
        };
        for n in [32, 64, 96, 2048] {
            let w: Vec<Vec<iq4_nl::BlockIq4Nl>> = (0..TILE)
                .map(|r| iq4_nl::quantize_ref(&random(n, 20 + r as u64)))
                .collect();
            let a = q8_0::quantize_ref(&random(n, 97));
            let wb: Vec<&[u8]> = w.iter().map(|x| bytemuck::cast_slice(x)).collect();
            let got = rows(n, std::array::from_fn(|r| wb[r]), bytemuck::cast_slice(&a));
            check(
                got,
                |r| iq4_nl::vec_dot_ref(&w[r], &a),
                &format!("IQ4_NL {isa:?} n={n}"),
            );
            tested += 1;
        }
    }
    assert!(tested > 0 || !Isa::available().contains(&Isa::Avx512Vnni));
}
