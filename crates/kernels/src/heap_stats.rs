//! [`HeapStats`]: what the C allocator holds and what of it is live, for the heap
//! fragmentation gauge.
//!
//! Read from glibc's `mallinfo2` (totals over every arena): `held` is the memory the allocator
//! got from the system (`arena`, the bytes of its heaps, plus `hblkhd`, the bytes of chunks
//! it mapped one by one), `live` the bytes in allocated chunks (`uordblks` plus `hblkhd`).
//! The difference is free memory the allocator keeps for reuse: fragmentation. Free chunks whose
//! pages glibc already returned with `madvise` still count, so this is an upper bound on the
//! resident part. Model weights mapped from their file are not heap and are not counted.
//! Costs nothing between reads; a read walks the arenas' free lists under their locks
//! (call it per scrape, not per request).

/// Allocator totals, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeapStats {
    /// Bytes the allocator holds from the system.
    pub held: u64,
    /// Bytes in chunks handed out and not freed.
    pub live: u64,
}

impl HeapStats {
    /// Free bytes the allocator keeps, over the bytes it holds: in `[0, 1]`, 0 when it holds
    /// nothing.
    pub fn fragmentation(&self) -> f64 {
        if self.held == 0 {
            return 0.0;
        }
        self.held.saturating_sub(self.live) as f64 / self.held as f64
    }
}

/// The allocator's totals now, or `None` where the C library does not report them (not glibc).
pub fn heap_stats() -> Option<HeapStats> {
    imp::read()
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod imp {
    use super::HeapStats;

    /// glibc's `struct mallinfo2` (every field a `size_t`).
    #[repr(C)]
    #[derive(Default)]
    struct MallInfo2 {
        arena: usize,
        ordblks: usize,
        smblks: usize,
        hblks: usize,
        hblkhd: usize,
        usmblks: usize,
        fsmblks: usize,
        uordblks: usize,
        fordblks: usize,
        keepcost: usize,
    }

    unsafe extern "C" {
        fn mallinfo2() -> MallInfo2;
    }

    pub(super) fn read() -> Option<HeapStats> {
        // SAFETY: `mallinfo2` takes no arguments and returns a plain struct by value whose
        // layout `MallInfo2` mirrors; glibc locks each arena while it sums it, so any thread may
        // call it at any time.
        let info = unsafe { mallinfo2() };
        let mapped = info.hblkhd as u64;
        Some(HeapStats {
            held: info.arena as u64 + mapped,
            live: info.uordblks as u64 + mapped,
        })
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
mod imp {
    pub(super) fn read() -> Option<super::HeapStats> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freed_small_chunks_show_up_as_fragmentation() {
        let before = heap_stats().expect("glibc reports its heap");
        // Many small blocks, then every other one freed: the freed half stays in the heap.
        let mut blocks: Vec<Vec<u8>> = (0..20_000).map(|i| vec![i as u8; 512]).collect();
        let full = heap_stats().unwrap();
        assert!(
            full.live >= before.live + 20_000 * 512 / 2,
            "{before:?} -> {full:?}"
        );
        for b in blocks.iter_mut().step_by(2) {
            *b = Vec::new();
        }
        let holed = heap_stats().unwrap();
        assert!(holed.held >= holed.live);
        assert!(
            holed.held - holed.live >= (full.held - full.live) + 20_000 / 2 * 512 / 2,
            "{full:?} -> {holed:?}"
        );
        assert!(holed.fragmentation() > full.fragmentation());
        drop(blocks);
    }

    #[test]
    fn an_empty_heap_is_not_fragmented() {
        let s = HeapStats { held: 0, live: 0 };
        assert_eq!(s.fragmentation(), 0.0);
    }
}
