//! One pipeline iteration of the K-quant tile kernel for a full group of 16 rows, as a single
//! block of assembly: the tile stores of step `s − 2`, the tile products of step `s`, and the
//! scaling of step `s − 3`'s sums, two rows after each tile product.
//!
//! The spacing is the point. While the tile unit runs a product (about 25 cycles here), the
//! core takes in no instruction behind the next tile instruction, so vector work placed after
//! a run of products waits for all of them: with the scaling as one block after the step's
//! eight products, a 16-row step took the sum of both (about 650 cycles a pair of steps in a
//! stand-alone probe), with two rows after each product about the products' time alone (415
//! against 395). Written as one `asm!` block, the compiler cannot regroup it. In the kernel
//! the spacing pays once the activation tile comes from L1 (`run_pair` in `k_quants.rs`):
//! with each tile fetched from L2 the step waits on that load instead. Batched decode
//! ([`stream_half`]) issues each product as its own block, so that the next super-block's
//! unpacking, written with intrinsics, goes between them too.
//!
//! The scaling's temporaries are zmm29-zmm31 (named, so that the assembly clobbers them).
//!
//! The arithmetic is `k_quants.rs`'s, instruction for instruction, with each row's running
//! sum kept in its output row rather than a register:
//!
//! ```text
//!   Q4_K:  t = f32(16·hi + lo) · d;  t = fma(f32(Σ_p mins[p] · sub_sums[p]), −dmin, t)
//!   Q6_K:  t = f32(256·hi + lo) · d
//!   out[r] = fma(t, d_a[r], out[r])
//! ```

use std::arch::asm;
use std::arch::x86_64::*;

/// Where a step's scaling reads and writes.
pub(super) struct ScaleArgs {
    /// The step's stored sums: 16 rows of the low plane, then 16 of the high plane.
    pub sums: *const u8,
    /// The rows' activation scales (`f32`, one a row).
    pub d_a: *const f32,
    /// The rows' output rows (16 `f32` each, 64 bytes apart), the running sums.
    pub out: *mut f32,
    /// The super-block's weight scales as `f32`, one a panel row, then (Q4_K) `−dmin`, the
    /// minima's.
    pub consts: *const [__m512; 2],
    /// Q4_K: the rows' sub-block sums, 4 `i16` pairs a row (16 bytes apart).
    pub sub_sums: *const u8,
    /// Q4_K: the super-block's minima, as `k_quants.rs`'s `MINS` (4 vectors).
    pub mins: *const __m512i,
}

/// Where a step's tile products read.
pub(super) struct TileArgs {
    /// The 16 activation rows' quarters: 64 bytes a row, in a row.
    pub a: [*const i8; 4],
    /// The super-block's two unpacked planes (64 lines each).
    pub b: *const u8,
    /// Where the C tiles of step `s − 2` (this tile set) go: 2 × 1 KiB.
    pub store: *mut u8,
}

/// Q4_K scaling of row `$r` (see the module docs).
macro_rules! row_q4 {
    ($r:literal) => {
        concat!(
            "vmovdqa32 zmm29, [{c} + 64 * ",
            $r,
            "]\n",
            "vpslld zmm30, [{c} + 1024 + 64 * ",
            $r,
            "], 4\n",
            "vpaddd zmm29, zmm29, zmm30\n",
            "vpbroadcastd zmm31, [{ss} + 16 * ",
            $r,
            "]\n",
            "vpmaddwd zmm31, zmm31, {m0:z}\n",
            "vpdpwssd zmm31, {m1:z}, [{ss} + 16 * ",
            $r,
            " + 4]{{1to16}}\n",
            "vpdpwssd zmm31, {m2:z}, [{ss} + 16 * ",
            $r,
            " + 8]{{1to16}}\n",
            "vpdpwssd zmm31, {m3:z}, [{ss} + 16 * ",
            $r,
            " + 12]{{1to16}}\n",
            "vcvtdq2ps zmm29, zmm29\n",
            "vmulps zmm29, zmm29, {d:z}\n",
            "vcvtdq2ps zmm31, zmm31\n",
            "vfmadd231ps zmm29, zmm31, {nd:z}\n",
            "vbroadcastss zmm30, [{da} + 4 * ",
            $r,
            "]\n",
            "vfmadd213ps zmm29, zmm30, [{o} + 64 * ",
            $r,
            "]\n",
            "vmovups [{o} + 64 * ",
            $r,
            "], zmm29\n",
        )
    };
}

/// Q6_K scaling of row `$r` (see the module docs).
macro_rules! row_q6 {
    ($r:literal) => {
        concat!(
            "vmovdqa32 zmm29, [{c} + 64 * ",
            $r,
            "]\n",
            "vpslld zmm30, [{c} + 1024 + 64 * ",
            $r,
            "], 8\n",
            "vpaddd zmm29, zmm29, zmm30\n",
            "vcvtdq2ps zmm29, zmm29\n",
            "vmulps zmm29, zmm29, {d:z}\n",
            "vbroadcastss zmm30, [{da} + 4 * ",
            $r,
            "]\n",
            "vfmadd213ps zmm29, zmm30, [{o} + 64 * ",
            $r,
            "]\n",
            "vmovups [{o} + 64 * ",
            $r,
            "], zmm29\n",
        )
    };
}

/// Quarter `$k` of a step's products (A tile `$a`, C tiles `$lo`/`$hi`, the high plane's
/// product `$dp`), rows `$r0` of scaling after the low plane's product and `$r1` after the
/// high plane's.
macro_rules! quarter {
    ($row:ident, $k:literal, $a:literal, $lo:literal, $hi:literal, $dp:literal,
     [$($r0:literal)*], [$($r1:literal)*]) => {
        concat!(
            "tileloadd ", $a, ", [{a", $k, "} + {line} * 1]\n",
            "tileloadd tmm5, [{b} + {line} * 1 + 1024 * ", $k, "]\n",
            "tdpbsud ", $lo, ", ", $a, ", tmm5\n",
                        $($row!($r0),)*
            "tileloadd tmm6, [{b} + {line} * 1 + 4096 + 1024 * ", $k, "]\n",
            $dp, " ", $hi, ", ", $a, ", tmm6\n",
                        $($row!($r1),)*
        )
    };
}

/// A whole iteration: store the tile set, zero it, its four quarters with all 16 rows of
/// scaling spread over them.
macro_rules! fused {
    ($row:ident, $lo:literal, $hi:literal, $dp:literal) => {
        concat!(
            "tilestored [{cs} + {line} * 1], ", $lo, "\n",
            "tilestored [{cs} + {line} * 1 + 1024], ", $hi, "\n",
            "tilezero ", $lo, "\n",
            "tilezero ", $hi, "\n",
            quarter!($row, 0, "tmm4", $lo, $hi, $dp, [0 1], [2 3]),
            quarter!($row, 1, "tmm7", $lo, $hi, $dp, [4 5], [6 7]),
            quarter!($row, 2, "tmm4", $lo, $hi, $dp, [8 9], [10 11]),
            quarter!($row, 3, "tmm7", $lo, $hi, $dp, [12 13], [14 15]),
        )
    };
}

/// All 16 rows of scaling alone.
macro_rules! scale_all {
    ($row:ident) => {
        concat!(
            $row!(0),
            $row!(1),
            $row!(2),
            $row!(3),
            $row!(4),
            $row!(5),
            $row!(6),
            $row!(7),
            $row!(8),
            $row!(9),
            $row!(10),
            $row!(11),
            $row!(12),
            $row!(13),
            $row!(14),
            $row!(15),
        )
    };
}

/// Iteration `s` in tile set `T`: stores the set's C tiles (step `s − 2`) at `tiles.store`,
/// runs step `s`'s products, and scales step `s − 3` (`scale`) between them. `Q6` picks the
/// high plane's signedness and the scaling.
///
/// # Safety
/// The tiles are configured as `Layout::Wide { rows: 16 }`; tile set `T` holds step `s − 2`'s
/// products; the 16 A rows, both planes, the store buffer and everything `scale` points at
/// are in bounds, `scale.sums` 64-byte aligned and stored at least an iteration before.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn fused_step<const T: usize, const Q6: bool>(
    tiles: &TileArgs,
    scale: &ScaleArgs,
) {
    macro_rules! q4 {
        ($lo:literal, $hi:literal) => {
            asm!(
                fused!(row_q4, $lo, $hi, "tdpbsud"),
                a0 = in(reg) tiles.a[0], a1 = in(reg) tiles.a[1], a2 = in(reg) tiles.a[2],
                a3 = in(reg) tiles.a[3], b = in(reg) tiles.b,
                line = in(reg) 64usize, cs = in(reg) tiles.store,
                c = in(reg) scale.sums, ss = in(reg) scale.sub_sums, da = in(reg) scale.d_a,
                o = in(reg) scale.out, d = in(zmm_reg) (*scale.consts)[0],
                nd = in(zmm_reg) (*scale.consts)[1],
                m0 = in(zmm_reg) *scale.mins, m1 = in(zmm_reg) *scale.mins.add(1),
                m2 = in(zmm_reg) *scale.mins.add(2), m3 = in(zmm_reg) *scale.mins.add(3),
                out("zmm29") _, out("zmm30") _, out("zmm31") _,
                options(nostack),
            )
        };
    }
    macro_rules! q6 {
        ($lo:literal, $hi:literal) => {
            asm!(
                fused!(row_q6, $lo, $hi, "tdpbssd"),
                a0 = in(reg) tiles.a[0], a1 = in(reg) tiles.a[1], a2 = in(reg) tiles.a[2],
                a3 = in(reg) tiles.a[3], b = in(reg) tiles.b,
                line = in(reg) 64usize, cs = in(reg) tiles.store,
                c = in(reg) scale.sums, da = in(reg) scale.d_a, o = in(reg) scale.out,
                d = in(zmm_reg) (*scale.consts)[0], out("zmm29") _, out("zmm30") _,
                options(nostack),
            )
        };
    }
    // The assembly's temporaries (typed, so that they print as `zmm` registers).
    let (_, _, _t2): (__m512i, __m512i, __m512i);
    // SAFETY: the caller's contract; the tiles belong to this kernel.
    unsafe {
        match (T, Q6) {
            (0, false) => q4!("tmm0", "tmm1"),
            (_, false) => q4!("tmm2", "tmm3"),
            (0, true) => q6!("tmm0", "tmm1"),
            (_, true) => q6!("tmm2", "tmm3"),
        }
    }
}

/// Step `s − 3`'s scaling alone (the pipeline's last iterations).
///
/// # Safety
/// As [`fused_step`]'s `scale`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn scale_step<const Q6: bool>(scale: &ScaleArgs) {
    // The assembly's temporaries (typed, so that they print as `zmm` registers).
    let (_, _, _t2): (__m512i, __m512i, __m512i);
    // SAFETY: the caller's contract.
    unsafe {
        if Q6 {
            asm!(
                scale_all!(row_q6),
                c = in(reg) scale.sums, da = in(reg) scale.d_a, o = in(reg) scale.out,
                d = in(zmm_reg) (*scale.consts)[0], out("zmm29") _, out("zmm30") _,
                options(nostack),
            )
        } else {
            asm!(
                scale_all!(row_q4),
                c = in(reg) scale.sums, ss = in(reg) scale.sub_sums, da = in(reg) scale.d_a,
                o = in(reg) scale.out, d = in(zmm_reg) (*scale.consts)[0],
                nd = in(zmm_reg) (*scale.consts)[1],
                m0 = in(zmm_reg) *scale.mins, m1 = in(zmm_reg) *scale.mins.add(1),
                m2 = in(zmm_reg) *scale.mins.add(2), m3 = in(zmm_reg) *scale.mins.add(3),
                out("zmm29") _, out("zmm30") _, out("zmm31") _,
                options(nostack),
            )
        }
    }
}

impl Default for TileArgs {
    fn default() -> Self {
        Self {
            a: [std::ptr::null(); 4],
            b: std::ptr::null(),
            store: std::ptr::null_mut(),
        }
    }
}

impl Default for ScaleArgs {
    fn default() -> Self {
        Self {
            sums: std::ptr::null(),
            d_a: std::ptr::null(),
            out: std::ptr::null_mut(),
            consts: std::ptr::null(),
            sub_sums: std::ptr::null(),
            mins: std::ptr::null(),
        }
    }
}

/// Half `$h` (0: the low plane's product, 1: the high plane's) of quarter `$k` of a step's
/// products in tile set (`$lo`, `$hi`), A tile `$a`, the high plane's product `$dp`, then
/// rows `$r` of scaling.
macro_rules! half {
    ($row:ident, 0, $k:literal, $a:literal, $lo:literal, $hi:literal, $dp:literal, [$($z:literal)*], [$($r:literal)*]) => {
        concat!(
            $("tilezero ", $z, "\n",)*
            "tileloadd ", $a, ", [{a} + {line} * 1]\n",
            "tileloadd tmm5, [{b} + {line} * 1 + 1024 * ", $k, "]\n",
            "tdpbsud ", $lo, ", ", $a, ", tmm5\n",
            $($row!($r),)*
        )
    };
    ($row:ident, 1, $k:literal, $a:literal, $lo:literal, $hi:literal, $dp:literal, [$($z:literal)*], [$($r:literal)*]) => {
        concat!(
            "/* A is loaded: {a} */\n",
            "tileloadd tmm6, [{b} + {line} * 1 + 4096 + 1024 * ", $k, "]\n",
            $dp, " ", $hi, ", ", $a, ", tmm6\n",
            $($row!($r),)*
        )
    };
}

/// One tile product of a streaming step (batched decode, where the next super-block is
/// unpacked between the products): half `H` (0: low plane, 1: high plane) of quarter `k` of
/// tile set `T`'s step, A the quarter's 16 activation rows at `a` (64 bytes a row, in a row),
/// the planes at `b`; then, if `scale` is given, rows `4k + 2H` and `4k + 2H + 1` of that
/// step's scaling. Quarter 0's low half zeroes the tile set first.
///
/// # Safety
/// As [`fused_step`], for the rows, the planes and `scale`; `k < 4`, `H < 2`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn stream_half<const T: usize, const Q6: bool, const H: usize>(
    a: *const i8,
    b: *const u8,
    k: usize,
    scale: Option<&ScaleArgs>,
) {
    macro_rules! emit {
        ($h:tt, $k:literal, $a:literal, $lo:literal, $hi:literal, $dp:literal, $z:tt, $r:tt) => {
            match scale {
                Some(scale) if Q6 => asm!(
                    half!(row_q6, $h, $k, $a, $lo, $hi, $dp, $z, $r),
                    a = in(reg) a, b = in(reg) b, line = in(reg) 64usize,
                    c = in(reg) scale.sums, da = in(reg) scale.d_a, o = in(reg) scale.out,
                    d = in(zmm_reg) (*scale.consts)[0], out("zmm29") _, out("zmm30") _,
                    options(nostack),
                ),
                Some(scale) => asm!(
                    half!(row_q4, $h, $k, $a, $lo, $hi, $dp, $z, $r),
                    a = in(reg) a, b = in(reg) b, line = in(reg) 64usize,
                    c = in(reg) scale.sums, ss = in(reg) scale.sub_sums, da = in(reg) scale.d_a,
                    o = in(reg) scale.out, d = in(zmm_reg) (*scale.consts)[0],
                    nd = in(zmm_reg) (*scale.consts)[1],
                    m0 = in(zmm_reg) *scale.mins, m1 = in(zmm_reg) *scale.mins.add(1),
                    m2 = in(zmm_reg) *scale.mins.add(2), m3 = in(zmm_reg) *scale.mins.add(3),
                    out("zmm29") _, out("zmm30") _, out("zmm31") _,
                    options(nostack),
                ),
                None => asm!(
                    half!(row_q4, $h, $k, $a, $lo, $hi, $dp, $z, []),
                    a = in(reg) a, b = in(reg) b, line = in(reg) 64usize,
                    options(nostack, readonly),
                ),
            }
        };
    }
    macro_rules! by_half_quarter {
        ($lo:literal, $hi:literal, $dp:literal) => {
            match (H, k) {
                (0, 0) => emit!(0, 0, "tmm4", $lo, $hi, $dp, [$lo $hi], [0 1]),
                (1, 0) => emit!(1, 0, "tmm4", $lo, $hi, $dp, [], [2 3]),
                (0, 1) => emit!(0, 1, "tmm7", $lo, $hi, $dp, [], [4 5]),
                (1, 1) => emit!(1, 1, "tmm7", $lo, $hi, $dp, [], [6 7]),
                (0, 2) => emit!(0, 2, "tmm4", $lo, $hi, $dp, [], [8 9]),
                (1, 2) => emit!(1, 2, "tmm4", $lo, $hi, $dp, [], [10 11]),
                (0, _) => emit!(0, 3, "tmm7", $lo, $hi, $dp, [], [12 13]),
                (_, _) => emit!(1, 3, "tmm7", $lo, $hi, $dp, [], [14 15]),
            }
        };
    }
    // SAFETY: the caller's contract; the tiles belong to this kernel.
    unsafe {
        match (T, Q6) {
            (0, false) => by_half_quarter!("tmm0", "tmm1", "tdpbsud"),
            (_, false) => by_half_quarter!("tmm2", "tmm3", "tdpbsud"),
            (0, true) => by_half_quarter!("tmm0", "tmm1", "tdpbssd"),
            (_, true) => by_half_quarter!("tmm2", "tmm3", "tdpbssd"),
        }
    }
}
