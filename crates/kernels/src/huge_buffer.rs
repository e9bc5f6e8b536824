//! [`HugeBuffer`]: a zeroed, page-aligned byte buffer for large read-mostly data (repacked
//! weights) that asks the kernel for transparent huge pages.
//!
//! Decode streams every weight once per token. With 4 KiB pages that is one TLB miss per
//! 4 KiB read, and the page walks stall the loads; 2 MiB pages cut the misses 512-fold. Linux's
//! default THP mode (`madvise`) grants huge pages only to regions that ask with
//! `MADV_HUGEPAGE`, which an allocator's heap never does, so large buffers get their own
//! anonymous mapping and ask. Elsewhere, or when the kernel declines, the buffer is an
//! ordinary zeroed mapping.

use memmap2::MmapMut;

/// Buffers at least this large ask for huge pages (one huge page; smaller ones cannot use one).
const HUGE_PAGE: usize = 2 << 20;

/// A zero-initialised byte buffer of fixed length.
pub struct HugeBuffer {
    map: Option<MmapMut>,
}

impl HugeBuffer {
    /// `len` zero bytes. Panics if the system cannot map them (as a `Vec` would abort).
    pub fn zeroed(len: usize) -> HugeBuffer {
        if len == 0 {
            return HugeBuffer { map: None };
        }
        let map = MmapMut::map_anon(len)
            .unwrap_or_else(|e| panic!("cannot map {len} bytes of anonymous memory: {e}"));
        #[cfg(target_os = "linux")]
        if len >= HUGE_PAGE {
            // Only a hint, given before the first touch so the first faults get huge pages;
            // on failure the buffer keeps ordinary pages.
            drop(map.advise(memmap2::Advice::HugePage));
        }
        HugeBuffer { map: Some(map) }
    }

    pub fn len(&self) -> usize {
        self.map.as_ref().map_or(0, |m| m.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl std::ops::Deref for HugeBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }
}

impl std::ops::DerefMut for HugeBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.map.as_deref_mut().unwrap_or(&mut [])
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
                b[len - 1] = 7;
                assert_eq!(b[len - 1], 7);
            }
        }
    }
}
