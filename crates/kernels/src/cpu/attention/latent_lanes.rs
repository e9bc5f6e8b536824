//! The SIMD variants of the latent attention walk ([`super::latent`], whose `one_query` is the
//! reference): the same online softmax over the same decoded key tiles, with the per-tile
//! loops in lane-structured vector math ([`vmath`]: scores as one `axpy` per key dimension,
//! the block max, the polynomial `exp` with the denominator, each latent dimension's weighted
//! sum as a `dot`) and f16 tiles decoded with F16C. Compiled once per ISA by `simd_entry!`.
//! Results equal the reference's up to `f32` rounding and the vector `exp` (relative error
//! about 2e-7).

use super::key_tile::KeyTile;
use super::latent::{decode_tile, LatentParams, Query, Scratch};
use super::{KvDtype, PagedKv};
#[cfg(target_arch = "x86_64")]
use crate::cpu::ops::simd_entry;
use crate::cpu::ops::vmath;

/// [`super::latent`]'s `one_query` with `L`-lane loops (`F`: fused multiply-add).
#[inline(always)]
fn one_query<const F: bool, const L: usize>(
    kv: &PagedKv<'_>,
    p: &LatentParams,
    query: &Query<'_>,
    out: &mut [f32],
    buf: &mut Vec<f32>,
) {
    let (hd, bs, vd) = (kv.head_dim, kv.block_size, p.value_dim);
    let heads = query.q.len() / hd;
    let Scratch {
        keys,
        scores,
        max,
        sum,
    } = Scratch::new(buf, hd, bs, heads);
    out.fill(0.0);
    let tile = kv.key_tile();
    for b in 0..=query.pos / bs {
        let n = (query.pos + 1 - b * bs).min(bs);
        let at = tile.offset(query.block_table[b] as usize, 0, 1);
        decode(&tile, &kv.k[at..at + tile.bytes()], keys);
        for h in 0..heads {
            let q = &query.q[h * hd..][..hd];
            let s = &mut scores[..n];
            s.fill(0.0);
            for (d, &qd) in q.iter().enumerate() {
                vmath::axpy::<F>(s, qd * p.scale, &keys[d * bs..][..n]);
            }
            let acc = &mut out[h * vd..][..vd];
            update::<F, L>(s, (&mut max[h], &mut sum[h]), acc);
            for (d, a) in acc.iter_mut().enumerate() {
                *a += vmath::dot::<F, L>(&keys[d * bs..][..n], s);
            }
        }
    }
    for (h, &l) in sum.iter().enumerate() {
        vmath::scale(&mut out[h * vd..][..vd], 1.0 / l);
    }
}

/// The online-softmax step (see the reference's `update`), with the vector max and `exp`.
#[inline(always)]
fn update<const F: bool, const L: usize>(
    scores: &mut [f32],
    (max, sum): (&mut f32, &mut f32),
    acc: &mut [f32],
) {
    let m = max.max(vmath::max::<L>(scores));
    let corr = (*max - m).exp();
    if corr != 1.0 {
        vmath::scale(acc, corr);
        *sum *= corr;
    }
    *max = m;
    *sum += vmath::exp_sub_sum::<F, L>(scores, m);
}

/// The tile's keys as f32 (see the reference's `decode_tile`): f16 through F16C, the other
/// formats as the reference decodes them.
#[inline(always)]
fn decode(tile: &KeyTile, bytes: &[u8], keys: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if tile.dtype == KvDtype::F16 {
        let values = &bytes[tile.value_at(0, 0)..];
        // SAFETY: every caller of this function is compiled with F16C (the `simd_entry!`
        // functions below, handed out only for CPUs that have it).
        unsafe { x86::f16_to_f32(values, keys) };
        return;
    }
    decode_tile(tile, bytes, keys)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// `dst[i] = src[2i..2i+2]` as f16 → f32, eight at a time with F16C.
    ///
    /// # Safety
    /// The CPU must support F16C and AVX.
    #[inline]
    #[target_feature(enable = "avx,f16c")]
    pub(super) unsafe fn f16_to_f32(src: &[u8], dst: &mut [f32]) {
        assert!(src.len() >= 2 * dst.len(), "f16 tile shorter than its keys");
        let done = dst.len() / 8 * 8;
        for (i, c) in dst[..done].chunks_exact_mut(8).enumerate() {
            // SAFETY: bytes 16i..16i+16 are in `src` (checked above: 2 bytes per key), and
            // `c` holds 8 floats; both accesses are unaligned.
            unsafe {
                let h = _mm_loadu_si128(src.as_ptr().add(16 * i).cast());
                _mm256_storeu_ps(c.as_mut_ptr(), _mm256_cvtph_ps(h));
            }
        }
        for (i, d) in dst[done..].iter_mut().enumerate() {
            let j = 2 * (done + i);
            *d = half::f16::from_bits(u16::from_ne_bytes([src[j], src[j + 1]])).to_f32();
        }
    }
}

#[cfg(target_arch = "x86_64")]
simd_entry!(
    avx2_entry,
    "avx2,fma,f16c",
    fn(kv: &PagedKv<'_>, p: &LatentParams, q: &Query<'_>, out: &mut [f32], buf: &mut Vec<f32>),
    one_query::<true, 16>(kv, p, q, out, buf)
);
#[cfg(target_arch = "x86_64")]
simd_entry!(
    avx512_entry,
    "avx512f,avx512bw,avx2,fma,f16c",
    fn(kv: &PagedKv<'_>, p: &LatentParams, q: &Query<'_>, out: &mut [f32], buf: &mut Vec<f32>),
    one_query::<true, 16>(kv, p, q, out, buf)
);

/// The AVX2 + FMA + F16C variant (for CPUs with those features only).
#[cfg(target_arch = "x86_64")]
pub(super) fn one_query_avx2(
    kv: &PagedKv<'_>,
    p: &LatentParams,
    q: &Query<'_>,
    out: &mut [f32],
    buf: &mut Vec<f32>,
) {
    avx2_entry(kv, p, q, out, buf)
}

/// The AVX-512 variant (for CPUs with AVX-512 F/BW, AVX2, FMA and F16C only).
#[cfg(target_arch = "x86_64")]
pub(super) fn one_query_avx512(
    kv: &PagedKv<'_>,
    p: &LatentParams,
    q: &Query<'_>,
    out: &mut [f32],
    buf: &mut Vec<f32>,
) {
    avx512_entry(kv, p, q, out, buf)
}
