//! 4 × 4 tile kernels ([`VecDotTileFn`](crate::quant::VecDotTileFn)) for the float weight
//! types, and their decode form ([`VecDotRowsFn`](crate::quant::VecDotRowsFn): four weight rows
//! streamed together against one activation row). A tile takes four weight rows against four
//! `f32` activation rows per call, so that each weight element is loaded and converted
//! once for four activation rows and each activation element once for four weight rows.
//!
//! The spec is [`super::float::vec_dot_ref`] for every (weight row, activation row) pair:
//! weights convert to `f32` exactly (F16 through F16C, BF16 by a shift), products and sums
//! are `f32` FMAs, so a tile differs from the reference only in summation order, as the row
//! kernels do.
//!
//! ```text
//!   AVX-512: 16 accumulators (4 w × 4 a) of 16 lanes; a step loads 16 elements of each of the
//!            8 rows; the last n % 16 elements through masked loads (no reads past a row).
//!   AVX2:    the tile as two 4 × 2 halves (8 accumulators of 8 lanes: 16 registers in all);
//!            the last n % 8 elements in scalar code.
//! ```

#[cfg(target_arch = "x86_64")]
pub(super) use x86::{select, select_rows};

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! Each `unsafe fn` requires its target features (guaranteed by `float::kernels`, which
    //! caps the ISA to what the CPU runs) and rows of at least `n` elements (checked by the
    //! safe wrappers).
    use std::arch::x86_64::*;

    use crate::cpu::Isa;
    use crate::quant::float::x86::{hsum256, ld8_bf16, ld8_f16, ld8_f32};
    use crate::quant::{DType, VecDotRowsFn, VecDotTileFn, TILE};

    /// The tile kernel of `dtype` for `isa` (AVX2 or AVX-512).
    pub(in crate::quant) fn select(dtype: DType, isa: Isa) -> VecDotTileFn {
        match (dtype, isa) {
            (DType::F32, Isa::Avx2) => tile_f32_avx2,
            (DType::F16, Isa::Avx2) => tile_f16_avx2,
            (_, Isa::Avx2) => tile_bf16_avx2,
            (DType::F32, _) => tile_f32_avx512,
            (DType::F16, _) => tile_f16_avx512,
            _ => tile_bf16_avx512,
        }
    }

    /// The decode kernel ([`VecDotRowsFn`]: four weight rows against one activation row) of
    /// `dtype` for `isa` (AVX2 or AVX-512).
    pub(in crate::quant) fn select_rows(dtype: DType, isa: Isa) -> VecDotRowsFn {
        match (dtype, isa) {
            (DType::F32, Isa::Avx2) => rows_f32_avx2,
            (DType::F16, Isa::Avx2) => rows_f16_avx2,
            (_, Isa::Avx2) => rows_bf16_avx2,
            (DType::F32, _) => rows_f32_avx512,
            (DType::F16, _) => rows_f16_avx512,
            _ => rows_bf16_avx512,
        }
    }

    /// Panics unless every row holds `n` elements (`bytes` each for weights, 4 for
    /// activations).
    fn check(n: usize, w: &[&[u8]; TILE], a: &[&[u8]; TILE], bytes: usize) {
        assert!(
            w.iter().all(|r| r.len() >= n * bytes) && a.iter().all(|r| r.len() >= n * 4),
            "float tile: a row is shorter than n"
        );
    }

    // ---- AVX-512: 16 elements, all or the first `k` of them (masked, the rest zero) ----

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    unsafe fn ld16_f32(p: *const u8, k: __mmask16) -> __m512 {
        // SAFETY: the caller guarantees the `k` lanes' bytes are readable; masked-off lanes
        // are not read.
        unsafe { _mm512_maskz_loadu_ps(k, p.cast()) }
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    unsafe fn ld16_f16(p: *const u8, k: __mmask16) -> __m512 {
        // SAFETY: as `ld16_f32`, 2 bytes a lane.
        _mm512_cvtph_ps(unsafe { _mm256_maskz_loadu_epi16(k, p.cast()) })
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    unsafe fn ld16_bf16(p: *const u8, k: __mmask16) -> __m512 {
        // SAFETY: as `ld16_f32`, 2 bytes a lane.
        let h = unsafe { _mm256_maskz_loadu_epi16(k, p.cast()) };
        _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)))
    }

    macro_rules! tile_avx512 {
        ($name:ident, $bytes:literal, $ld:ident) => {
            fn $name(n: usize, w: [&[u8]; TILE], a: [&[u8]; TILE]) -> [[f32; TILE]; TILE] {
                check(n, &w, &a, $bytes);
                #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
                unsafe fn inner(
                    n: usize,
                    w: [*const u8; TILE],
                    a: [*const u8; TILE],
                ) -> [[f32; TILE]; TILE] {
                    let mut acc = [[_mm512_setzero_ps(); TILE]; TILE];
                    let mut step = |i: usize, k: __mmask16| {
                        // SAFETY: lanes `k` of elements i..i+16 lie within the n elements of
                        // every row (the caller's contract).
                        let (wv, av) = unsafe {
                            (
                                w.map(|p| $ld(p.add(i * $bytes), k)),
                                a.map(|p| ld16_f32(p.add(i * 4), k)),
                            )
                        };
                        for (accj, av) in acc.iter_mut().zip(av) {
                            for (acc, wv) in accj.iter_mut().zip(wv) {
                                *acc = _mm512_fmadd_ps(wv, av, *acc);
                            }
                        }
                    };
                    let full = n / 16 * 16;
                    for i in (0..full).step_by(16) {
                        step(i, 0xFFFF);
                    }
                    if full < n {
                        step(full, (1u16 << (n - full)) - 1);
                    }
                    acc.map(|row| row.map(|v| _mm512_reduce_add_ps(v)))
                }
                // SAFETY: `float::kernels` hands this out only when the CPU has AVX-512
                // F/BW/VL (plus AVX2/FMA/F16C); every row holds `n` elements (checked above).
                unsafe { inner(n, w.map(<[u8]>::as_ptr), a.map(<[u8]>::as_ptr)) }
            }
        };
    }

    macro_rules! rows_avx512 {
        ($name:ident, $bytes:literal, $ld:ident) => {
            fn $name(n: usize, w: [&[u8]; TILE], a: &[u8]) -> [f32; TILE] {
                check(n, &w, &[a; TILE], $bytes);
                #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
                unsafe fn inner(n: usize, w: [*const u8; TILE], a: *const u8) -> [f32; TILE] {
                    let mut acc = [_mm512_setzero_ps(); TILE];
                    let mut step = |i: usize, k: __mmask16| {
                        // SAFETY: lanes `k` of elements i..i+16 lie within the n elements of
                        // every row (the caller's contract).
                        let (wv, av) = unsafe {
                            (
                                w.map(|p| $ld(p.add(i * $bytes), k)),
                                ld16_f32(a.add(i * 4), k),
                            )
                        };
                        for (acc, wv) in acc.iter_mut().zip(wv) {
                            *acc = _mm512_fmadd_ps(wv, av, *acc);
                        }
                    };
                    let full = n / 16 * 16;
                    for i in (0..full).step_by(16) {
                        step(i, 0xFFFF);
                    }
                    if full < n {
                        step(full, (1u16 << (n - full)) - 1);
                    }
                    acc.map(|v| _mm512_reduce_add_ps(v))
                }
                // SAFETY: as for the tile kernels: the CPU has the features, the rows hold
                // `n` elements (checked above).
                unsafe { inner(n, w.map(<[u8]>::as_ptr), a.as_ptr()) }
            }
        };
    }

    rows_avx512!(rows_f32_avx512, 4, ld16_f32);
    rows_avx512!(rows_f16_avx512, 2, ld16_f16);
    rows_avx512!(rows_bf16_avx512, 2, ld16_bf16);

    tile_avx512!(tile_f32_avx512, 4, ld16_f32);
    tile_avx512!(tile_f16_avx512, 2, ld16_f16);
    tile_avx512!(tile_bf16_avx512, 2, ld16_bf16);

    // ---- AVX2: 8 elements ----

    /// Element `k` of an F32 row.
    fn f32_at(row: &[u8], k: usize) -> f32 {
        let b = &row[4 * k..4 * k + 4];
        f32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }

    macro_rules! tile_avx2 {
        ($name:ident, $bytes:literal, $ld:ident, $decode:expr) => {
            fn $name(n: usize, w: [&[u8]; TILE], a: [&[u8]; TILE]) -> [[f32; TILE]; TILE] {
                check(n, &w, &a, $bytes);
                /// Weight rows `w` against activation rows `a[0..2]`, elements `0..n8`.
                #[target_feature(enable = "avx2,fma,f16c")]
                unsafe fn half(
                    n8: usize,
                    w: [*const u8; TILE],
                    a: [*const u8; 2],
                ) -> [[f32; TILE]; 2] {
                    let mut acc = [[_mm256_setzero_ps(); TILE]; 2];
                    for i in (0..n8).step_by(8) {
                        // SAFETY: elements i..i+8 with i + 8 <= n8 <= n, within every row
                        // (the caller's contract).
                        let (wv, av) = unsafe {
                            (
                                w.map(|p| $ld(p.add(i * $bytes))),
                                a.map(|p| ld8_f32(p.add(i * 4))),
                            )
                        };
                        for (accj, av) in acc.iter_mut().zip(av) {
                            for (acc, wv) in accj.iter_mut().zip(wv) {
                                *acc = _mm256_fmadd_ps(wv, av, *acc);
                            }
                        }
                    }
                    acc.map(|row| row.map(|v| hsum256(v)))
                }
                let n8 = n / 8 * 8;
                let wp = w.map(<[u8]>::as_ptr);
                // SAFETY: `float::kernels` hands this out only when the CPU has AVX2, FMA and
                // F16C; every row holds `n >= n8` elements (checked above).
                let (lo, hi) = unsafe {
                    (
                        half(n8, wp, [a[0].as_ptr(), a[1].as_ptr()]),
                        half(n8, wp, [a[2].as_ptr(), a[3].as_ptr()]),
                    )
                };
                let mut out = [lo[0], lo[1], hi[0], hi[1]];
                let decode: fn(&[u8], usize) -> f32 = $decode;
                for (outj, aj) in out.iter_mut().zip(a) {
                    for (o, wr) in outj.iter_mut().zip(w) {
                        *o += (n8..n).map(|k| decode(wr, k) * f32_at(aj, k)).sum::<f32>();
                    }
                }
                out
            }
        };
    }

    /// Element `k` of an F16 row.
    fn f16_at(row: &[u8], k: usize) -> f32 {
        half::f16::from_le_bytes([row[2 * k], row[2 * k + 1]]).to_f32()
    }

    /// Element `k` of a BF16 row.
    fn bf16_at(row: &[u8], k: usize) -> f32 {
        half::bf16::from_le_bytes([row[2 * k], row[2 * k + 1]]).to_f32()
    }

    macro_rules! rows_avx2 {
        ($name:ident, $bytes:literal, $ld:ident, $decode:expr) => {
            fn $name(n: usize, w: [&[u8]; TILE], a: &[u8]) -> [f32; TILE] {
                check(n, &w, &[a; TILE], $bytes);
                #[target_feature(enable = "avx2,fma,f16c")]
                unsafe fn inner(n8: usize, w: [*const u8; TILE], a: *const u8) -> [f32; TILE] {
                    let mut acc = [_mm256_setzero_ps(); TILE];
                    for i in (0..n8).step_by(8) {
                        // SAFETY: elements i..i+8 with i + 8 <= n8 <= n, within every row.
                        let (wv, av) =
                            unsafe { (w.map(|p| $ld(p.add(i * $bytes))), ld8_f32(a.add(i * 4))) };
                        for (acc, wv) in acc.iter_mut().zip(wv) {
                            *acc = _mm256_fmadd_ps(wv, av, *acc);
                        }
                    }
                    acc.map(|v| hsum256(v))
                }
                let n8 = n / 8 * 8;
                // SAFETY: the CPU has AVX2, FMA and F16C; the rows hold `n >= n8` elements.
                let mut out = unsafe { inner(n8, w.map(<[u8]>::as_ptr), a.as_ptr()) };
                let decode: fn(&[u8], usize) -> f32 = $decode;
                for (o, wr) in out.iter_mut().zip(w) {
                    *o += (n8..n).map(|k| decode(wr, k) * f32_at(a, k)).sum::<f32>();
                }
                out
            }
        };
    }

    rows_avx2!(rows_f32_avx2, 4, ld8_f32, f32_at);
    rows_avx2!(rows_f16_avx2, 2, ld8_f16, f16_at);
    rows_avx2!(rows_bf16_avx2, 2, ld8_bf16, bf16_at);

    tile_avx2!(tile_f32_avx2, 4, ld8_f32, f32_at);
    tile_avx2!(tile_f16_avx2, 2, ld8_f16, f16_at);
    tile_avx2!(tile_bf16_avx2, 2, ld8_bf16, bf16_at);
}
