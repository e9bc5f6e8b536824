//! [`KeyChunks`]: the fixed partition of a query's keys into chunks that every path
//! computes separately and folds together in one order ("split-K", flash-decoding).
//!
//! Chunks are runs of whole cache blocks aligned on absolute key positions, fixed by the
//! block size alone (never by the thread count or the batch):
//!
//! ```text
//!   bs = 16, KEY_CHUNK = 2048: 128 blocks a chunk
//!   keys:   0 ........ 2047 | 2048 ........ 4095 | 4096 .. pos
//!   chunk:        0         |         1          |    2
//!   partial k = online softmax of the query's visible keys in chunk k from a fresh state
//!               (m = −∞, l = 0, acc = 0): unnormalized acc, m, l per row
//!   result    = normalize(merge(merge(partial 0, partial 1), partial 2))     chunk order
//! ```
//!
//! A query whose visible keys lie in one chunk gets that chunk's partial normalized: the
//! operations and bits of an unchunked walk. The decode path runs the chunks of a long
//! context as separate work units (on any threads) and [`merge`]s their partials after;
//! the tiled path walks them in turn inside its unit, merging as it goes. Both fold with
//! [`merge`] in chunk order, so a query's output is the same whichever path, thread or
//! batch computes it.

use std::ops::RangeInclusive;

use crate::cpu::ops::vmath;

/// Keys per chunk (rounded down to whole blocks, at least one). Measured with the
/// `decode_attention` example on a 2-core Xeon (single sequence, 8k context, see
/// docs/benchmarks/2026-12-07-split-k-decode.md).
pub const KEY_CHUNK: usize = 2048;

/// The chunks of one cache geometry.
#[derive(Clone, Copy)]
pub(super) struct KeyChunks {
    /// Blocks per chunk.
    pub blocks: usize,
}

impl KeyChunks {
    pub fn new(block_size: usize) -> KeyChunks {
        KeyChunks {
            blocks: (KEY_CHUNK / block_size).max(1),
        }
    }

    /// The chunk holding logical block `b`.
    #[inline]
    pub fn of_block(&self, b: usize) -> usize {
        b / self.blocks
    }

    /// The blocks of chunk `c` within `blocks` (a non-empty intersection: `c` is between the
    /// chunks of `blocks`' ends).
    #[inline]
    pub fn blocks_of(&self, c: usize, blocks: RangeInclusive<usize>) -> RangeInclusive<usize> {
        let lo = (c * self.blocks).max(*blocks.start());
        let hi = ((c + 1) * self.blocks - 1).min(*blocks.end());
        lo..=hi
    }
}

/// One row's online-softmax partial: unnormalized `acc` (`head_dim` floats), running
/// maximum `m` and denominator `l`.
pub(super) struct Partial<'a> {
    pub acc: &'a [f32],
    pub m: f32,
    pub l: f32,
}

/// Folds the next chunk's partial `b` into the running partial `(acc, m, l)`:
///
/// ```text
///   m' = max(m, m_b);  c = e^(m − m'),  c_b = e^(m_b − m')
///   acc = acc·c + acc_b·c_b;   l = l·c + l_b·c_b
/// ```
///
/// A partial that saw no key (`m = −∞`) contributes nothing: `b` is skipped, or copied
/// when the running one is empty. Scalar and unfused on every ISA, so the fold does the
/// same operations whichever path produced the partials.
pub(super) fn merge(acc: &mut [f32], m: &mut f32, l: &mut f32, b: Partial<'_>) {
    if b.m == f32::NEG_INFINITY {
        return;
    }
    if *m == f32::NEG_INFINITY {
        acc.copy_from_slice(b.acc);
        (*m, *l) = (b.m, b.l);
        return;
    }
    let mx = if b.m > *m { b.m } else { *m };
    let (c, cb) = (vmath::exp::<false>(*m - mx), vmath::exp::<false>(b.m - mx));
    for (x, &y) in acc.iter_mut().zip(b.acc) {
        *x = *x * c + y * cb;
    }
    (*m, *l) = (mx, *l * c + b.l * cb);
}
