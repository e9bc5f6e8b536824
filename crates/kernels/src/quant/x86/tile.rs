//! Assembly of the 4 x 4 tile kernels' results, shared by the formats' tiles: a tile from two
//! 4 x 2 halves (AVX2 has 16 registers), and the odd last block that the two-blocks-per-step
//! AVX-512 cores leave to a one-block dot.

use std::arch::x86_64::*;

use super::reduce::hsum256;
use super::tile_scales::Tile;
use crate::quant::rows::check_tile;
use crate::quant::TILE;

/// [`check_tile`], then the rows' pointers: `(nb, w, a)`. Every row holds `nb` blocks.
#[inline(always)]
pub(crate) fn tile_rows(
    n: usize,
    w: [&[u8]; TILE],
    w_block: usize,
    a: [&[u8]; TILE],
    a_block: usize,
) -> (usize, [*const u8; TILE], [*const u8; TILE]) {
    let nb = check_tile(n, &w, w_block, &a, a_block);
    (nb, w.map(<[u8]>::as_ptr), a.map(<[u8]>::as_ptr))
}

/// The tile of activation rows `a` from `half([a_j, a_j+1])`, the 4 x 2 results of two of them.
#[inline(always)]
pub(crate) fn from_halves<P, H>(a: [P; TILE], half: H) -> Tile
where
    P: Copy,
    H: Fn([P; 2]) -> [[f32; TILE]; 2],
{
    let (lo, hi) = (half([a[0], a[1]]), half([a[2], a[3]]));
    [lo[0], lo[1], hi[0], hi[1]]
}

/// Adds `dot(r, j, nb - 1)`, the dot of block `nb - 1` of weight row `r` and activation row
/// `j`, to `out[j][r]` when `nb` is odd.
#[inline(always)]
pub(crate) fn add_odd_block<D>(out: &mut Tile, nb: usize, dot: D)
where
    D: Fn(usize, usize, usize) -> f32,
{
    if nb % 2 == 1 {
        for (j, o) in out.iter_mut().enumerate() {
            for (r, v) in o.iter_mut().enumerate() {
                *v += dot(r, j, nb - 1);
            }
        }
    }
}

/// The horizontal sums of the accumulators of a 4 x 2 half tile (plain loops, which inline
/// into the caller's epilogue).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn hsum_half(acc: [[__m256; TILE]; 2]) -> [[f32; TILE]; 2] {
    let mut out = [[0.0; TILE]; 2];
    for (o, row) in out.iter_mut().zip(acc) {
        for (v, x) in o.iter_mut().zip(row) {
            *v = hsum256(x);
        }
    }
    out
}

/// The horizontal sums of 4 rows of AVX-512 accumulators.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) fn reduce_rows_512(acc: [__m512; TILE]) -> [f32; TILE] {
    let mut out = [0.0; TILE];
    for (v, x) in out.iter_mut().zip(acc) {
        *v = _mm512_reduce_add_ps(x);
    }
    out
}

/// The horizontal sums of the accumulators of a 4 x 4 AVX-512 tile.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) fn reduce_tile_512(acc: [[__m512; TILE]; TILE]) -> Tile {
    let mut out = [[0.0; TILE]; TILE];
    for (o, row) in out.iter_mut().zip(acc) {
        *o = reduce_rows_512(row);
    }
    out
}
