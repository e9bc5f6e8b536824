//! Unpacking the K-quant panels into the tile kernel's byte planes (see `k_quants.rs` for
//! what the planes hold): a super-block a slot, a quarter (or a quarter's plane) at a time,
//! so that a pipeline can put the pieces between its tile products.

use std::arch::x86_64::*;
use std::ops::Range;

use crate::cpu::packed::x86::q4_k_scales::q4_k_scales;
use crate::cpu::packed::x86::{prefetch, TILE_PREFETCH_BYTES};
use crate::cpu::packed::{PackedKind, PanelJob};

/// Bytes of one plane of a super-block (64 lines).
const PLANE: usize = 64 * 64;

/// Bytes of one super-block's two planes.
pub(super) const PLANES: usize = 2 * PLANE;

/// Bytes of Q4_K's sub-block minima of a super-block, kept apart from the planes: 4 vectors,
/// vector `p` holding each row's minima of sub-blocks `2p` and `2p + 1` as an `i16` pair (the
/// operand of `vpdpwssd` against the activation's two sub-block sums).
pub(super) const MINS: usize = 4 * 64;

/// Where unpacked super-blocks live: super-block `i`'s planes and Q4_K minima.
#[derive(Clone, Copy)]
pub(super) struct Unpacked {
    pub planes: *mut u8,
    pub mins: *mut u8,
}

impl Unpacked {
    /// Slots for `n` super-blocks' planes, then `n` super-blocks' minima, from `buffer`.
    pub(super) fn at(buffer: *mut u8, n: usize) -> Self {
        Self {
            planes: buffer,
            mins: buffer.wrapping_add(n * PLANES),
        }
    }

    /// Slot `k`'s planes and minima.
    pub(super) fn slot(self, k: usize) -> Self {
        Self {
            planes: self.planes.wrapping_add(PLANES * k),
            mins: self.mins.wrapping_add(MINS * k),
        }
    }
}

/// Each row's value of `x` (byte `r` = row `r`'s) in both `i16` halves of the row's `i32` lane.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn per_row_i16(x: __m128i) -> __m512i {
    let z = _mm512_cvtepu8_epi32(x);
    _mm512_or_si512(z, _mm512_slli_epi32(z, 16))
}

/// Q6_K: a sub-block's scales (byte `r` = row `r`'s) as the even and odd byte operands of
/// `maddubs` (row `r`'s 4 bytes `[sc, 0, sc, 0]` and `[0, sc, 0, sc]`), and each row's
/// `32 · sc` in its `i16` lanes (the quants' offset times the scale).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn scale_pairs(sc: __m128i) -> (__m512i, __m512i, __m512i) {
    let even = per_row_i16(sc);
    // Each `i32` lane's two `i16` halves: the sign-extended scale times 32.
    let w = _mm512_slli_epi32(_mm512_cvtepi8_epi32(sc), 5);
    let offset = _mm512_or_si512(
        _mm512_and_si512(w, _mm512_set1_epi32(0xFFFF)),
        _mm512_slli_epi32(w, 16),
    );
    (even, _mm512_slli_epi32(even, 8), offset)
}

/// Q6_K: line `x` of unsigned quants times its rows' scales, less `offset`, as the low
/// (unsigned) and high (signed) bytes of the `i16` results: `v = 256 · hi + lo`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn split(x: __m512i, (se, so, offset): (__m512i, __m512i, __m512i)) -> (__m512i, __m512i) {
    // The products of the even and odd bytes as `i16` lanes (one factor is 0 in each pair).
    let ve = _mm512_sub_epi16(_mm512_maddubs_epi16(x, se), offset);
    let vo = _mm512_sub_epi16(_mm512_maddubs_epi16(x, so), offset);
    // Odd bytes from the odd elements' products.
    let odd: __mmask64 = 0xAAAA_AAAA_AAAA_AAAA;
    let lo = _mm512_mask_blend_epi8(odd, ve, _mm512_slli_epi16(vo, 8));
    let hi = _mm512_mask_blend_epi8(odd, _mm512_srli_epi16(ve, 8), vo);
    (lo, hi)
}

/// Super-blocks `blocks` of the panel as scaled byte planes: super-block `blocks.start + n`
/// in slot `n` of `dst` (see [`Pending`]).
///
/// # Safety
/// As [`Pending::start`], for each super-block and slot.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn unpack(job: &PanelJob<'_>, blocks: Range<usize>, dst: Unpacked) {
    for (n, i) in blocks.enumerate() {
        // SAFETY: the caller's contract.
        unsafe {
            let pending = Pending::start(job, i, dst.slot(n));
            for k in 0..4 {
                pending.quarter(k);
            }
        }
    }
}

/// A super-block being unpacked into a slot, a quarter at a time: quarter `k` writes lines
/// `16k..16k + 16` of both planes (elements `64k..64k + 64` of each row, the bytes tile
/// product `k` reads), its low plane's line `g` (elements `4g..4g + 4`) at `64 g` of the
/// slot's planes and the high plane's at [`PLANE`]` + 64 g`. Unpacking in quarters lets a
/// step's tile products interleave with the next super-block's unpacking, so neither waits
/// for the whole of the other.
pub(super) struct Pending {
    /// The super-block's quants and scales in the panel.
    qp: *const u8,
    sp: *const u8,
    /// The slot it goes to.
    dst: Unpacked,
    /// Q4_K: each sub-block's 6-bit scale, a row per byte.
    sc: [__m128i; 8],
    q6: bool,
    stream: bool,
}

impl Pending {
    /// Starts super-block `i` of the panel into `dst`: decodes Q4_K's scales and stores its
    /// minima ([`MINS`]) in the slot's minima.
    ///
    /// # Safety
    /// The CPU has AVX-512 BW; `i` is one of the panel's `nb` super-blocks; `dst` is a slot.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub(super) unsafe fn start(job: &PanelJob<'_>, i: usize, dst: Unpacked) -> Self {
        let (nb, qb, sb) = (job.nb, job.kind.quant_bytes(), job.kind.scale_bytes());
        let quants = job.panel.as_ptr();
        let (qp, sp) = (
            quants.wrapping_add(i * qb),
            quants.wrapping_add(nb * qb + i * sb),
        );
        if job.stream {
            prefetch(sp.wrapping_add(TILE_PREFETCH_BYTES / 8), sb);
        }
        let q6 = job.kind == PackedKind::Q6_K;
        let mut sc = [_mm_setzero_si128(); 8];
        if !q6 {
            // SAFETY: super-block i's 192 scale bytes are in the panel; the minima slot holds
            // 4 vectors.
            unsafe {
                let ks = q4_k_scales(sp);
                for (p, &[lo, hi]) in ks.mn_pairs.iter().enumerate() {
                    let pair = _mm512_cvtepu8_epi16(_mm256_set_m128i(hi, lo));
                    _mm512_store_si512(dst.mins.add(64 * p).cast(), pair);
                }
                sc = ks.sc;
            }
        }
        Self {
            qp,
            sp,
            dst,
            sc,
            q6,
            stream: job.stream,
        }
    }

    /// Unpacks quarter `k` (see [`Pending`]).
    ///
    /// # Safety
    /// As [`Pending::start`]; `k < 4`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub(super) unsafe fn quarter(&self, k: usize) {
        // SAFETY: the caller's contract.
        unsafe {
            if self.q6 {
                self.q6_k_quarter(k)
            } else {
                self.q4_k_quarter(k)
            }
        }
    }

    /// Q4_K's sub-blocks `2k` and `2k + 1`, both planes from one load of each line's quants
    /// ([`Pending::q4_k_quarter_plane`] twice would load them twice: the chunked path, which
    /// unpacks whole quarters, ran 4% slower so).
    ///
    /// # Safety
    /// As [`Pending::quarter`].
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn q4_k_quarter(&self, k: usize) {
        let (qp, d) = (self.qp, self.dst.planes);
        let (mask, low4) = (_mm512_set1_epi8(0x0F), _mm_set1_epi8(0x0F));
        for s in 2 * k..2 * k + 2 {
            if self.stream {
                prefetch(qp.wrapping_add(256 * s + TILE_PREFETCH_BYTES), 256);
            }
            let scale = self.sc[s];
            let sl = per_row_i16(_mm_and_si128(scale, low4));
            let sh = per_row_i16(_mm_and_si128(_mm_srli_epi16(scale, 4), low4));
            for v in 0..4 {
                let g = 8 * s + 2 * v;
                // SAFETY: sub-block s's quant bytes are in the panel, lines g and g + 1 of
                // both planes in the slot.
                unsafe {
                    let raw = _mm512_loadu_si512(qp.add(256 * s + 64 * v).cast());
                    let x0 = _mm512_and_si512(raw, mask);
                    let x1 = _mm512_and_si512(_mm512_srli_epi16(raw, 4), mask);
                    _mm512_store_si512(d.add(64 * g).cast(), _mm512_mullo_epi16(x0, sl));
                    _mm512_store_si512(d.add(64 * g + 64).cast(), _mm512_mullo_epi16(x1, sl));
                    _mm512_store_si512(d.add(PLANE + 64 * g).cast(), _mm512_mullo_epi16(x0, sh));
                    _mm512_store_si512(
                        d.add(PLANE + 64 * g + 64).cast(),
                        _mm512_mullo_epi16(x1, sh),
                    );
                }
            }
        }
    }

    /// Q4_K's sub-blocks `2k` and `2k + 1`, the low plane's lines (`HI` false, with the
    /// stream's prefetch, spread over the sub-blocks: a burst of 32 prefetches stalls) or the
    /// high plane's. The 6-bit scale is split, `sc = 16 · sh + sl`, and both `sl · q` and
    /// `sh · q` fit a byte: one `i16` multiply scales a line's even and odd bytes at once.
    ///
    /// # Safety
    /// As [`Pending::quarter`]; the job is Q4_K.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub(super) unsafe fn q4_k_quarter_plane<const HI: bool>(&self, k: usize) {
        let (qp, d) = (
            self.qp,
            self.dst.planes.wrapping_add(if HI { PLANE } else { 0 }),
        );
        let (mask, low4) = (_mm512_set1_epi8(0x0F), _mm_set1_epi8(0x0F));
        for s in 2 * k..2 * k + 2 {
            if self.stream && !HI {
                prefetch(qp.wrapping_add(256 * s + TILE_PREFETCH_BYTES), 256);
            }
            let scale = if HI {
                _mm_and_si128(_mm_srli_epi16(self.sc[s], 4), low4)
            } else {
                _mm_and_si128(self.sc[s], low4)
            };
            let sx = per_row_i16(scale);
            for v in 0..4 {
                let g = 8 * s + 2 * v;
                // SAFETY: sub-block s's quant bytes are in the panel, line g and g + 1 of the
                // plane in the slot.
                unsafe {
                    let raw = _mm512_loadu_si512(qp.add(256 * s + 64 * v).cast());
                    let x0 = _mm512_and_si512(raw, mask);
                    let x1 = _mm512_and_si512(_mm512_srli_epi16(raw, 4), mask);
                    _mm512_store_si512(d.add(64 * g).cast(), _mm512_mullo_epi16(x0, sx));
                    _mm512_store_si512(d.add(64 * g + 64).cast(), _mm512_mullo_epi16(x1, sx));
                }
            }
        }
    }

    /// Q6_K's sub-blocks `4k..4k + 4` (chunks `2k` and `2k + 1` of 384 bytes).
    ///
    /// # Safety
    /// As [`Pending::quarter`].
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub(super) unsafe fn q6_k_quarter(&self, k: usize) {
        let (qp, sp, d) = (self.qp, self.sp, self.dst.planes);
        let (mask, top) = (_mm512_set1_epi8(0x0F), _mm512_set1_epi8(0x30));
        for s in 4 * k..4 * k + 4 {
            // SAFETY: sub-block s's scale and quant bytes are in the panel; lines
            // `8c + 2v`, `8c + 2v + 1` of both planes are in the slot.
            unsafe {
                let pairs = scale_pairs(_mm_loadu_si128(sp.add(16 * s).cast()));
                let (c, h) = (s / 2, s % 2);
                let chunk = qp.add(384 * c);
                if self.stream && h == 0 {
                    prefetch(chunk.wrapping_add(TILE_PREFETCH_BYTES), 384);
                }
                // The high bits of nibble vectors 2h and 2h + 1 (see `layout.rs`).
                let hv = _mm512_loadu_si512(chunk.add(256 + 64 * h).cast());
                for w in 0..2 {
                    let v = 2 * h + w;
                    let (lo_h, hi_h) = if w == 0 {
                        (_mm512_slli_epi16(hv, 4), _mm512_slli_epi16(hv, 2))
                    } else {
                        (hv, _mm512_srli_epi16(hv, 2))
                    };
                    let raw = _mm512_loadu_si512(chunk.add(64 * v).cast());
                    let x0 =
                        _mm512_or_si512(_mm512_and_si512(raw, mask), _mm512_and_si512(lo_h, top));
                    let x1 = _mm512_or_si512(
                        _mm512_and_si512(_mm512_srli_epi16(raw, 4), mask),
                        _mm512_and_si512(hi_h, top),
                    );
                    let g = 8 * c + 2 * v;
                    let ((lo0, hi0), (lo1, hi1)) = (split(x0, pairs), split(x1, pairs));
                    _mm512_store_si512(d.add(64 * g).cast(), lo0);
                    _mm512_store_si512(d.add(64 * g + 64).cast(), lo1);
                    _mm512_store_si512(d.add(PLANE + 64 * g).cast(), hi0);
                    _mm512_store_si512(d.add(PLANE + 64 * g + 64).cast(), hi1);
                }
            }
        }
    }
}
