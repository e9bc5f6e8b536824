//! [`HugeBuffer`]: a zeroed, page-aligned byte buffer for large read-mostly data (repacked
//! weights) that asks the kernel for transparent huge pages.
//!
//! Decode streams every weight once per token. With 4 KiB pages that is one TLB miss per
//! 4 KiB read, and the page walks stall the loads; 2 MiB pages cut the misses 512-fold. Linux's
//! default THP mode (`madvise`) grants huge pages only to regions that ask with
//! `MADV_HUGEPAGE`, which an allocator's heap never does, so large buffers get their own
//! anonymous mapping and ask. A huge page must be 2 MiB-aligned, and a mapping is only
//! page-aligned, so a large buffer maps one huge page more than it needs and starts at the
//! first 2 MiB boundary inside: all of it but the tail after its last whole huge page can then
//! be backed by huge pages (the unused head is never touched, so it costs address space only).
//! Elsewhere, or when the kernel declines, the buffer is an ordinary zeroed mapping.

use memmap2::MmapMut;

/// Buffers at least this large ask for huge pages (one huge page; smaller ones cannot use one).
const HUGE_PAGE: usize = 2 << 20;

/// A zero-initialised byte buffer of fixed length.
pub struct HugeBuffer {
    map: Option<MmapMut>,
    /// The buffer is `map[start..start + len]`.
    start: usize,
    len: usize,
}

impl HugeBuffer {
    /// `len` zero bytes. Panics if the system cannot map them (as a `Vec` would abort).
    pub fn zeroed(len: usize) -> HugeBuffer {
        if len == 0 {
            return HugeBuffer {
                map: None,
                start: 0,
                len: 0,
            };
        }
        let huge = len >= HUGE_PAGE;
        let slack = if huge { HUGE_PAGE } else { 0 };
        let map = MmapMut::map_anon(len + slack)
            .unwrap_or_else(|e| panic!("cannot map {len} bytes of anonymous memory: {e}"));
        #[cfg(target_os = "linux")]
        if huge {
            // Only a hint, given before the first touch so the first faults get huge pages;
            // on failure the buffer keeps ordinary pages.
            drop(map.advise(memmap2::Advice::HugePage));
        }
        let start = if huge {
            (map.as_ptr() as usize).next_multiple_of(HUGE_PAGE) - map.as_ptr() as usize
        } else {
            0
        };
        HugeBuffer {
            map: Some(map),
            start,
            len,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl std::ops::Deref for HugeBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.map {
            Some(m) => &m[self.start..self.start + self.len],
            None => &[],
        }
    }
}

impl std::ops::DerefMut for HugeBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        match &mut self.map {
            Some(m) => &mut m[self.start..self.start + self.len],
            None => &mut [],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_start_zeroed_page_aligned_and_keep_writes() {
        for len in [0, 1, 4096, HUGE_PAGE + 100] {
            let mut b = HugeBuffer::zeroed(len);
            assert_eq!(b.len(), len);
            assert!(b.iter().all(|&x| x == 0));
            if len > 0 {
                assert_eq!(b.as_ptr() as usize % 4096, 0);
                if len >= HUGE_PAGE {
                    assert_eq!(
                        b.as_ptr() as usize % HUGE_PAGE,
                        0,
                        "large buffers start on a huge page"
                    );
                }
                b[len - 1] = 7;
                assert_eq!(b[len - 1], 7);
            }
        }
    }
}
