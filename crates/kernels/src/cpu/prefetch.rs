//! Software prefetch of a byte range, one hint per 64-byte cache line. A prefetch reads nothing
//! architecturally visible and never faults, so any address may be given (running past the
//! end of a buffer is harmless). Elsewhere than x86-64 these do nothing.

/// Asks for the cache lines of `len` bytes at `p` in L2.
#[inline(always)]
pub(crate) fn to_l2(p: *const u8, len: usize) {
    lines::<2>(p, len)
}

/// `HINT` is the `_MM_HINT_T*` value (2 = T1: L2).
#[inline(always)]
fn lines<const HINT: i32>(p: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    for off in (0..len).step_by(64) {
        // SAFETY: a prefetch is a hint that reads nothing architecturally visible and never
        // faults, whatever the address.
        unsafe { std::arch::x86_64::_mm_prefetch::<HINT>(p.wrapping_add(off).cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, len);
}
