//! 4 weight rows x 4 activation rows per call for the "offset" formats, Q4_0 and Q5_0
//! (and Q8_0 with AVX-512, see below):
//! `x = (q - o) d` with unsigned quants `q` and a fixed offset `o` (8, 16). Each weight
//! block is unpacked once and each activation block loaded once for the whole tile.
//!
//! `sum((q - o) a) = sum(q a) - sum(o a)`: `q` is unsigned, so `vpdpbusd` (AVX-512
//! VNNI) and `maddubs` (AVX2) take it as is, and the correction `sum(o a)` depends on
//! the activation row only, so it is computed once per activation block, not once per
//! (row, activation) pair. Both sums are exact in `i32` (AVX2: `maddubs` pairs stay
//! within `i16`, `2 * 31 * 127 < 2^15`, activation bytes never being -128).
//!
//! The format supplies its unpacking ([`OffsetBlocks`], [`OffsetHalf`]); the cores are
//! generic over it so that it inlines into the loop. Q8_0 uses the AVX-512 tile with
//! `w + 128` and offset 128 (its AVX2 tile is its own: `w + 128` overflows `maddubs`).
use std::arch::x86_64::*;

use super::load::load_2x256;
use super::offset::OffsetBlocks;
use super::signed_rows::{dot_of, A};
use super::tile::{add_odd_block, from_halves, hsum_half, reduce_tile_512, tile_rows};
use super::tile_scales::{pair_scales, spread, Tile};
use crate::quant::TILE;

/// An [`OffsetBlocks`] format with an AVX2 unpacking of one block, for [`half_avx2`].
pub(crate) trait OffsetHalf: OffsetBlocks {
    /// The 32 unsigned quants of the block at `b`, in element order.
    ///
    /// # Safety
    /// The CPU has AVX2, FMA and F16C; a whole block is readable at `b`.
    unsafe fn unsigned_avx2(b: *const u8) -> __m256i;
}

/// The AVX-512 4 x 4 tile of format `F`: [`tile_avx512`] plus an odd last block.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) fn vec_dot_tile_avx512<F: OffsetBlocks>(
    n: usize,
    w: [&[u8]; TILE],
    a: [&[u8]; TILE],
) -> Tile {
    let (nb, w, a) = tile_rows(n, w, F::BLOCK, a, A);
    let (b, o) = (F::BLOCK, F::OFFSET);
    // SAFETY: every row holds `nb` blocks (checked by `tile_rows`); the features are enabled
    // here; `unsigned2_avx512` reads only within the blocks it is given.
    let mut out = unsafe { tile_avx512(nb, w, a, b, o, |b0, b1| F::unsigned2_avx512(b0, b1)) };
    // SAFETY: block `i < nb` of both rows is in bounds; AVX2, FMA and F16C are enabled.
    add_odd_block(&mut out, nb, |r, j, i| unsafe {
        dot_of::<F>(1, w[r].add(i * b), a[j].add(i * A))
    });
    out
}

/// The AVX2 4 x 4 tile of format `F`: two [`half_avx2`] calls.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn vec_dot_tile_avx2<F: OffsetHalf>(
    n: usize,
    w: [&[u8]; TILE],
    a: [&[u8]; TILE],
) -> Tile {
    let (nb, w, a) = tile_rows(n, w, F::BLOCK, a, A);
    // SAFETY: every row holds `nb` blocks (checked by `tile_rows`); the features are enabled
    // here; `unsigned_avx2` reads only within the block it is given.
    from_halves(a, |a| unsafe {
        half_avx2(nb, w, a, F::BLOCK, F::OFFSET, |b| F::unsigned_avx2(b))
    })
}

/// The tile over the first `nb / 2 * 2` blocks (the caller adds an odd last block),
/// two blocks per step. `unpack(block_i, block_i+1)` returns the unsigned quants of
/// the two `block`-byte weight blocks (elements 0..32 of each, in order), which start
/// with their `f16` scale; weights are `(q - offset) d`.
///
/// # Safety
/// The CPU has AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C; every weight row holds `nb`
/// blocks of `block` bytes and every activation row `nb` Q8_0 blocks; `unpack` reads
/// only within the two blocks it is given.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn tile_avx512<U>(
    nb: usize,
    w: [*const u8; TILE],
    a: [*const u8; TILE],
    block: usize,
    offset: i8,
    unpack: U,
) -> Tile
where
    U: Fn(*const u8, *const u8) -> __m512i,
{
    let mut acc = [[_mm512_setzero_ps(); TILE]; TILE];
    let o = _mm512_set1_epi8(offset);
    let mut i = 0;
    while i + 2 <= nb {
        // SAFETY: blocks i and i+1 < nb of every row are in bounds.
        let (wq, ws, aq, as_) = unsafe {
            (
                w.map(|p| unpack(p.add(i * block), p.add((i + 1) * block))),
                pair_scales(w, i, block),
                a.map(|p| load_2x256(p.add(i * A + 2), p.add((i + 1) * A + 2))),
                pair_scales(a, i, A),
            )
        };
        add_offset_step(&mut acc, wq, aq, o, ws, as_);
        i += 2;
    }
    reduce_tile_512(acc)
}

/// Adds one two-block step of a 4 x 4 tile to `acc`: `wq[r]` the unsigned quants of weight
/// row `r` (two blocks), `aq[j]` the quants of activation row `j`, `offset` the weights'
/// offset in every byte (`sum(offset a)` subtracted once per activation row), `ws` and `as_`
/// the weight and activation rows' pair scales ([`pair_scales`]' layout).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) fn add_offset_step(
    acc: &mut [[__m512; TILE]; TILE],
    wq: [__m512i; TILE],
    aq: [__m512i; TILE],
    offset: __m512i,
    ws: __m512,
    as_: __m512,
) {
    let dw: [__m512; TILE] = std::array::from_fn(|r| spread(ws, 2 * r as i32));
    for j in 0..TILE {
        let zero = _mm512_setzero_si512();
        let init = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, offset, aq[j]));
        let da = spread(as_, 2 * j as i32);
        for r in 0..TILE {
            let p = _mm512_dpbusd_epi32(init, wq[r], aq[j]);
            let d = _mm512_mul_ps(dw[r], da);
            acc[j][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), d, acc[j][r]);
        }
    }
}

/// 4 weight rows x 2 activation rows (AVX2 has 16 registers), one block per step.
/// `unpack(block)` returns the 32 unsigned quants of a `block`-byte weight block that
/// starts with its `f16` scale; weights are `(q - offset) d`. The `i16` pair sums of
/// `maddubs(q, a) - maddubs(offset, a)` are exact (see the module docs).
///
/// # Safety
/// The CPU has AVX2, FMA and F16C; every weight row holds `nb` blocks of `block` bytes
/// and every activation row `nb` Q8_0 blocks; `unpack` reads only within its block.
// Not inlined: each tile makes two calls, and one body keeps the 16 AVX2 registers.
#[inline(never)]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn half_avx2<U>(
    nb: usize,
    w: [*const u8; TILE],
    a: [*const u8; 2],
    block: usize,
    offset: i8,
    unpack: U,
) -> [[f32; TILE]; 2]
where
    U: Fn(*const u8) -> __m256i,
{
    let mut acc = [[_mm256_setzero_ps(); TILE]; 2];
    let (o, ones) = (_mm256_set1_epi8(offset), _mm256_set1_epi16(1));
    for i in 0..nb {
        // SAFETY: block i < nb of every row is in bounds.
        let (wq, ws, aq, as_) = unsafe {
            let h = w.map(|p| p.add(i * block).cast::<u16>().read_unaligned() as i16);
            let g = a.map(|p| p.add(i * A).cast::<u16>().read_unaligned() as i16);
            (
                w.map(|p| unpack(p.add(i * block))),
                _mm_cvtph_ps(_mm_setr_epi16(h[0], h[1], h[2], h[3], 0, 0, 0, 0)),
                a.map(|p| _mm256_loadu_si256(p.add(i * A + 2).cast())),
                _mm_cvtph_ps(_mm_setr_epi16(g[0], g[1], 0, 0, 0, 0, 0, 0)),
            )
        };
        for j in 0..2 {
            let corr = _mm256_maddubs_epi16(o, aq[j]);
            let dd = _mm256_castps128_ps256(_mm_mul_ps(
                ws,
                _mm_permutevar_ps(as_, _mm_set1_epi32(j as i32)),
            ));
            for r in 0..TILE {
                let p16 = _mm256_sub_epi16(_mm256_maddubs_epi16(wq[r], aq[j]), corr);
                let p = _mm256_madd_epi16(p16, ones);
                let d = _mm256_permutevar8x32_ps(dd, _mm256_set1_epi32(r as i32));
                acc[j][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), d, acc[j][r]);
            }
        }
    }
    hsum_half(acc)
}
