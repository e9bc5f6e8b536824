//! Q8_K activation quantizer: every ISA variant against the scalar reference, and the
//! reference's own round-trip error.

use bytemuck::Zeroable;
use kestrel_kernels::cpu::Isa;
use kestrel_kernels::quant::q8_k::{self, BlockQ8K, QK_K};
use kestrel_kernels::ActFormat;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Rows with per-block magnitudes from 1e-30 to 1e30 and a few special blocks.
fn test_rows() -> Vec<Vec<f32>> {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut rows = Vec::new();
    for nb in [1usize, 2, 5, 12] {
        let row: Vec<f32> = (0..nb * QK_K)
            .map(|i| {
                let scale = 10f32.powi(((i / QK_K) as i32 * 7) % 61 - 30);
                rng.gen_range(-1.0f32..1.0) * scale
            })
            .collect();
        rows.push(row);
    }
    let mut special = vec![0f32; 6 * QK_K];
    special[QK_K + 3] = -2.5; // one non-zero value
    special[2 * QK_K..3 * QK_K].fill(1e-39); // subnormal: too small to scale, becomes zeros
    special[3 * QK_K..4 * QK_K].fill(-3.0); // constant
    for (i, v) in special[4 * QK_K..5 * QK_K].iter_mut().enumerate() {
        *v = (i as f32 - 128.0) / 127.0 * 3.0; // values landing exactly on .5 boundaries
    }
    for (i, v) in special[5 * QK_K..].iter_mut().enumerate() {
        *v = if i % 2 == 0 {
            f32::MAX / 2.0
        } else {
            -f32::MAX / 3.0
        };
    }
    rows.push(special);
    rows
}

fn quantize_with(isa: Isa, row: &[f32]) -> Vec<BlockQ8K> {
    // One spare block checks that nothing past the row is written.
    let mut out = vec![BlockQ8K::zeroed(); row.len() / QK_K + 1];
    let sentinel = BlockQ8K {
        d: 42.0,
        qs: [5; QK_K],
        bsums: [80; 16],
    };
    *out.last_mut().expect("at least one block") = sentinel;
    (q8_k::quantize_for(isa))(row, bytemuck::cast_slice_mut(&mut out));
    assert_eq!(out.pop(), Some(sentinel), "{isa:?} wrote past the row");
    out
}

#[test]
fn kquant_q8k_every_isa_is_bit_identical_to_reference() {
    for row in test_rows() {
        let reference = q8_k::quantize_ref(&row);
        for isa in Isa::available() {
            let got = quantize_with(isa, &row);
            for (b, (g, r)) in got.iter().zip(&reference).enumerate() {
                assert_eq!(g, r, "{isa:?}: block {b} differs");
            }
        }
    }
}

#[test]
fn kquant_q8k_reference_round_trip_within_half_step() {
    for row in test_rows() {
        let blocks = q8_k::quantize_ref(&row);
        let mut back = vec![0f32; row.len()];
        q8_k::dequantize_ref(&blocks, &mut back);
        for (b, blk) in blocks.iter().enumerate() {
            let x = &row[b * QK_K..(b + 1) * QK_K];
            let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
            for (g, sum) in blk.bsums.iter().enumerate() {
                let want: i32 = blk.qs[16 * g..16 * g + 16].iter().map(|&q| q as i32).sum();
                assert_eq!(*sum as i32, want, "block {b} bsum {g}");
            }
            assert!(
                blk.qs.iter().all(|&q| q >= -127),
                "block {b}: -128 is never produced"
            );
            if amax < 1e-36 {
                assert_eq!(
                    *blk,
                    BlockQ8K::zeroed(),
                    "block {b}: tiny input gives a zero block"
                );
                continue;
            }
            assert!(
                blk.qs.iter().any(|&q| q.unsigned_abs() == 127),
                "block {b} uses full range"
            );
            // Error bound: half a step plus float rounding of the scale (relative 1e-6).
            let tol = blk.d * 0.5 + amax * 1e-6;
            for (i, (&v, &r)) in x.iter().zip(&back[b * QK_K..(b + 1) * QK_K]).enumerate() {
                assert!(
                    (v - r).abs() <= tol,
                    "block {b} elem {i}: {v} -> {r} (tol {tol})"
                );
            }
        }
    }
}

#[test]
fn kquant_q8k_act_format_sizes_agree() {
    assert_eq!(
        std::mem::size_of::<BlockQ8K>(),
        ActFormat::Q8K.block_bytes()
    );
    assert_eq!(ActFormat::Q8K.block_size(), QK_K);
}

#[test]
#[should_panic(expected = "not a multiple of 256")]
fn kquant_q8k_rejects_partial_blocks() {
    q8_k::quantize_ref(&[1.0; 100]);
}
