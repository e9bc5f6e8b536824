//! [`PrivatePages`]: a thread's scratch memory in pages that no other data shares.
//!
//! The AMX kernel's unpacking buffer is written by one core all the time. Next to data that
//! another thread reads (the block-major activations, allocated from the same heap by the
//! thread that starts each product), the reader's prefetchers, which run ahead within a page
//! and on into the next, pull the writer's lines over to the reader's core, and every write
//! then has to take its line back. With its buffer beside the activations, the calling thread
//! of a 16-row product ran at about half speed while the pool's other thread ran at full
//! speed (`panel_kernels`, 4096 × 2048 Q4_K, static split: 0.37 ms for its half against 0.20
//! ms alone). Unused guard pages on both sides keep every neighbour at least two pages away.

/// One page.
#[derive(Clone, Copy)]
#[repr(C, align(4096))]
struct Page([u8; PAGE]);

/// Bytes of a page.
const PAGE: usize = 4096;

/// Unused pages on each side of the usable ones: a prefetcher that runs into the next page
/// reaches only these (one guard page still left the writer slow in some runs, two never).
const GUARD: usize = 2;

/// Scratch memory of one thread: usable pages between [`GUARD`] unused pages on each side.
pub(super) struct PrivatePages {
    pages: Vec<Page>,
}

impl PrivatePages {
    /// No memory yet.
    pub(super) const fn new() -> Self {
        Self { pages: Vec::new() }
    }

    /// At least `bytes` usable bytes from a page boundary (contents unspecified: zero when
    /// new, else what the thread left there).
    pub(super) fn get(&mut self, bytes: usize) -> &mut [u8] {
        let usable = bytes.div_ceil(PAGE).max(1);
        let total = usable + 2 * GUARD;
        if self.pages.len() < total {
            self.pages.resize(total, Page([0; PAGE]));
        }
        let pages = &mut self.pages[GUARD..GUARD + usable];
        let first = pages.as_mut_ptr().cast::<u8>();
        // SAFETY: `pages` is `usable` whole pages of initialized bytes, borrowed mutably.
        let all = unsafe { std::slice::from_raw_parts_mut(first, usable * PAGE) };
        &mut all[..bytes]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usable_bytes_start_on_a_page_with_guard_pages_on_both_sides() {
        let mut p = PrivatePages::new();
        for bytes in [1, 4095, 4096, 4097, 25_344, 100_000, 10] {
            let (start, len) = {
                let s = p.get(bytes);
                (s.as_ptr() as usize, s.len())
            };
            assert_eq!(len, bytes);
            assert_eq!(start % PAGE, 0, "{bytes} bytes: not page-aligned");
            let base = p.pages.as_ptr() as usize;
            let end = base + p.pages.len() * PAGE;
            assert!(
                start >= base + GUARD * PAGE,
                "{bytes} bytes: no guard before"
            );
            assert!(
                start + bytes.div_ceil(PAGE) * PAGE + GUARD * PAGE <= end,
                "{bytes} bytes: no guard after"
            );
        }
    }

    #[test]
    fn the_thread_keeps_what_it_wrote_while_the_buffer_does_not_grow() {
        let mut p = PrivatePages::new();
        p.get(8192).fill(7);
        assert!(p.get(5000).iter().all(|&b| b == 7));
    }
}
