//! [`AttentionWindow`]: which KV blocks a sequence of a sliding-window model still needs.
//!
//! When every layer attends over a window of at most `w` tokens, the query at position `p`
//! reads keys `p - w + 1 ..= p` only, and later queries read no earlier key. So once a
//! sequence's next query is at `next`, every logical block that ends before `next - w + 1` is
//! dead for the rest of the request and can go back to the pool:
//!
//! ```text
//!   w = 6, block_size = 4, next = 13 (the next chunk starts there)
//!   positions  0 1 2 3 | 4 5 6 7 | 8 9 10 11 | 12 13 ..
//!                dead  |   dead  |  . [8 ..=12 read by the query at 13]
//!   first_key(13) = 8   ->  blocks 0 and 1 are released
//! ```
//!
//! A chunk of queries `next .. next + n` reads from `first_key(next)`, its *first* query's
//! window, which is why the bound is taken at the chunk's start.

/// The attention window that bounds every layer of a model, over blocks of `block_size` tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttentionWindow {
    window: usize,
    block_size: usize,
}

impl AttentionWindow {
    /// A window of `window` tokens over blocks of `block_size`; `None` if either is zero.
    pub fn new(window: usize, block_size: usize) -> Option<Self> {
        (window > 0 && block_size > 0).then_some(AttentionWindow { window, block_size })
    }

    /// The window in tokens (the query counts itself).
    pub fn window(&self) -> usize {
        self.window
    }

    /// The first key position the query at `pos` reads.
    pub fn first_key(&self, pos: usize) -> usize {
        (pos + 1).saturating_sub(self.window)
    }

    /// Logical blocks below this index hold no key that a query at `next_pos` or later reads.
    pub fn first_live_block(&self, next_pos: usize) -> usize {
        self.first_key(next_pos) / self.block_size
    }

    /// Most blocks a sequence holds while it computes a chunk of `chunk` tokens: the keys its
    /// queries read and the slots it writes span `chunk + window - 1` positions, which touch at
    /// most `ceil((chunk + window - 2) / block_size) + 1` blocks.
    pub fn max_live_blocks(&self, chunk: usize) -> usize {
        (chunk + self.window)
            .saturating_sub(2)
            .div_ceil(self.block_size)
            + 1
    }

    /// The longest chunk whose [`max_live_blocks`](Self::max_live_blocks) fit in `num_blocks`,
    /// or `None` when not even one token does.
    pub fn max_chunk(&self, num_blocks: usize) -> Option<usize> {
        let span = num_blocks.checked_sub(1)?.checked_mul(self.block_size)?;
        (span + 2).checked_sub(self.window).filter(|&n| n >= 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks a sequence holds after computing `start` tokens and allocating `n` more, when it
    /// released everything below `first_live_block(start)`.
    fn held(w: &AttentionWindow, start: usize, n: usize) -> usize {
        (start + n).div_ceil(w.block_size) - w.first_live_block(start)
    }

    #[test]
    fn first_key_and_live_block_follow_the_window() {
        let w = AttentionWindow::new(6, 4).unwrap();
        assert_eq!(w.first_key(0), 0);
        assert_eq!(w.first_key(5), 0);
        assert_eq!(w.first_key(6), 1);
        assert_eq!(w.first_key(13), 8);
        assert_eq!(w.first_live_block(13), 2);
        assert_eq!(w.first_live_block(11), 1);
        assert!(AttentionWindow::new(0, 4).is_none());
        assert!(AttentionWindow::new(4, 0).is_none());
    }

    #[test]
    fn max_live_blocks_is_tight_over_every_alignment() {
        for bs in 1..6 {
            for win in 1..20 {
                let w = AttentionWindow::new(win, bs).unwrap();
                for n in 1..12 {
                    let worst = (0..60).map(|s| held(&w, s, n)).max().unwrap();
                    assert_eq!(worst, w.max_live_blocks(n), "bs {bs} w {win} n {n}");
                }
            }
        }
    }

    #[test]
    fn max_chunk_fits_the_pool() {
        let w = AttentionWindow::new(8, 4).unwrap();
        assert_eq!(w.max_chunk(1), None);
        assert_eq!(w.max_chunk(3), Some(2));
        assert_eq!(w.max_live_blocks(2), 3);
        assert_eq!(w.max_live_blocks(3), 4);
        for blocks in 1..40 {
            if let Some(n) = w.max_chunk(blocks) {
                assert!(w.max_live_blocks(n) <= blocks);
                assert!(w.max_live_blocks(n + 1) > blocks);
            }
        }
    }
}
