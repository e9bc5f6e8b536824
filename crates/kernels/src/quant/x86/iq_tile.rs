//! The AVX-512 VNNI 4 x 4 tile of the grid i-quants whose grid bytes are magnitudes (IQ2_*,
//! IQ3_*): each weight sub-block pair (64 weights) is unpacked once for the 4 activation
//! rows, and its signs go onto the weights, not onto each activation row.
//!
//! `maddubs` multiplies unsigned by signed bytes, so the activations are biased to `a + 128`
//! (`xor 0x80`, once per activation block) and the signed weights `w` taken as they are:
//! `sum((a + 128) w) - 128 sum(w) = sum(a w)`. The pair sums stay within `i16`
//! (`2 * 255 * 62 < 2^15`: grid magnitudes are at most 62), and the correction
//! `128 sum(w)`, scaled as the products are, depends on the weight row only, so it is computed
//! once per weight sub-block pair, not once per (row, activation) pair.
use std::arch::x86_64::*;

use super::iq::{join, scale_pairs, GridSimd};
use super::load::load512;
use super::tile::reduce_tile_512;
use super::tile_scales::Tile;
use crate::quant::q8_k::{split_row, BlockQ8K};
use crate::quant::TILE;

/// The AVX-512 tile (`out[j][r]` = row `r` of `w` with row `j` of `a`, `n` weights each) of a
/// magnitude grid format `F` (`F::TERNARY` false).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) fn grid_tile_avx512<F: GridSimd>(n: usize, w: [&[u8]; TILE], a: [&[u8]; TILE]) -> Tile {
    assert!(
        !F::TERNARY,
        "{}: the AVX-512 grid tile takes magnitudes",
        F::DTYPE
    );
    let ws: [&[F::Block]; TILE] = w.map(|wr| split_row::<F::Block>(n, wr, a[0]).0);
    let acts: [&[BlockQ8K]; TILE] = a.map(|ar| split_row::<F::Block>(n, w[0], ar).1);
    let mut acc = [[_mm512_setzero_ps(); TILE]; TILE];
    for bi in 0..ws[0].len() {
        let sums = block_sums::<F>(ws.map(|wr| &wr[bi]), acts.map(|ar| &ar[bi]));
        let dw = ws.map(|wr| F::d(&wr[bi]) * F::FACTOR);
        for (j, (row, s)) in acc.iter_mut().zip(sums).enumerate() {
            for (r, (c, p)) in row.iter_mut().zip(s).enumerate() {
                let d = _mm512_set1_ps(dw[r] * acts[j][bi].d);
                *c = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(p), *c);
            }
        }
    }
    reduce_tile_512(acc)
}

/// The integer sums `sum(scale * w * a)` of one super-block of 4 weight rows with one block of
/// 4 activation rows, `[j][r]`, spread over 16 lanes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn block_sums<F: GridSimd>(w: [&F::Block; TILE], a: [&BlockQ8K; TILE]) -> [[__m512i; TILE]; TILE] {
    let zero = _mm512_setzero_si512();
    let bias = _mm512_set1_epi8(-128);
    let mut p = [[zero; TILE]; TILE];
    let mut corr = [zero; TILE];
    for jj in 0..4 {
        let (j0, j1) = (2 * jj, 2 * jj + 1);
        let y = a.map(|ab| _mm512_xor_si512(load512(&ab.qs, 64 * jj), bias));
        for (r, wb) in w.iter().enumerate() {
            // SAFETY: this function's features include the ones `rows_avx2` needs.
            let g = unsafe { join(F::rows_avx2(wb, j0), F::rows_avx2(wb, j1)) };
            let mask = F::signs(wb, j0) as u64 | (F::signs(wb, j1) as u64) << 32;
            let x = _mm512_mask_sub_epi8(g, mask, zero, g);
            let sc = scale_pairs(F::scales2(wb, j0), F::scales2(wb, j1));
            corr[r] = _mm512_dpwssd_epi32(corr[r], _mm512_maddubs_epi16(bias, x), sc);
            for (pj, yj) in p.iter_mut().zip(y) {
                pj[r] = _mm512_dpwssd_epi32(pj[r], _mm512_maddubs_epi16(yj, x), sc);
            }
        }
    }
    p.map(|pj| std::array::from_fn(|r| _mm512_sub_epi32(pj[r], corr[r])))
}
