//! Assembly of the 4 x 4 tile kernels' results, shared by the formats' tiles: a tile from two
//! 4 x 2 halves (AVX2 has 16 registers), and the odd last block that the two-blocks-per-step
//! AVX-512 cores leave to a one-block dot.

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
