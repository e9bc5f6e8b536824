//! Writing new tokens' keys and values into the paged cache: [`store_kv`] for one token,
//! [`store_kv_many`] for a step's batch, shared out over the pool when the batch is large
//! (a prefill chunk), so that encoding the rows (and the page faults of a fresh cache's first
//! writes) do not run on one thread while the others wait.

use std::cell::RefCell;

use super::{slot_offset, PagedKvMut};
use crate::cpu::threadpool::SharedMut;
use crate::cpu::ThreadPool;

/// Batches with fewer tokens are stored on the calling thread: their work (two encoded rows a
/// token) is shorter than waking the pool.
const PARALLEL_TOKENS: usize = 64;

/// Encode one token's `k_row` and `v_row` (`n_kv_heads · head_dim` each) at position `pos`.
pub fn store_kv(
    kv: &mut PagedKvMut<'_>,
    block_table: &[u32],
    pos: usize,
    k_row: &[f32],
    v_row: &[f32],
) {
    let (hd, dtype) = (kv.head_dim, kv.dtype);
    let row = kv.n_kv_heads * hd;
    assert!(
        k_row.len() == row && v_row.len() == row,
        "store_kv: rows must be n_kv·head_dim"
    );
    let rb = dtype.row_bytes(hd);
    let block_bytes = kv.block_size * kv.n_kv_heads * rb;
    debug_assert!(
        (block_table[pos / kv.block_size] as usize) < kv.k.len() / block_bytes.max(1),
        "store_kv: position {pos} maps to a block outside the cache (a released block?)"
    );
    let off = slot_offset(block_table, kv.block_size, kv.n_kv_heads * rb, pos);
    let slot = off..off + kv.n_kv_heads * rb;
    for (src, dst) in v_row.chunks_exact(hd).zip(kv.v[slot].chunks_exact_mut(rb)) {
        dtype.encode_row(src, dst);
    }
    let tile = kv.as_ref().key_tile();
    let block = block_table[pos / kv.block_size] as usize;
    with_row(rb, |row| {
        for (h, src) in k_row.chunks_exact(hd).enumerate() {
            dtype.encode_row(src, row);
            let at = tile.offset(block, h, kv.n_kv_heads);
            tile.scatter(row, pos % kv.block_size, &mut kv.k[at..at + tile.bytes()]);
        }
    });
}

/// `f` with this thread's scratch row of `bytes` bytes (one encoded key row).
fn with_row(bytes: usize, f: impl FnOnce(&mut [u8])) {
    thread_local! {
        static ROW: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    }
    ROW.with_borrow_mut(|row| {
        row.resize(bytes, 0);
        f(row)
    })
}

/// One sequence's new tokens for [`store_kv_many`]: `n` tokens at positions `start_pos..`,
/// placed by `block_table`.
#[derive(Clone, Copy)]
pub struct KvWrite<'a> {
    pub block_table: &'a [u32],
    pub start_pos: usize,
    pub n: usize,
}

/// [`store_kv`] for every token of `writes` (an iterator the threads each walk), in order: token `i` of the batch (counting
/// through the writes) takes row `i` of `k_rows` and `v_rows` (`n_kv_heads · head_dim` each).
/// A large batch is shared out over `pool`: each (physical block, kv head) belongs to one
/// thread, which encodes its key tile's columns and its value rows, so no two threads write
/// the same bytes whatever the positions. The bytes written are those of [`store_kv`].
pub fn store_kv_many<'a>(
    pool: &ThreadPool,
    kv: &mut PagedKvMut<'_>,
    writes: impl Iterator<Item = KvWrite<'a>> + Clone + Sync,
    k_rows: &[f32],
    v_rows: &[f32],
) {
    let row = kv.n_kv_heads * kv.head_dim;
    let tokens: usize = writes.clone().map(|w| w.n).sum();
    assert!(
        k_rows.len() == tokens * row && v_rows.len() == tokens * row,
        "store_kv_many: rows must be tokens × n_kv·head_dim"
    );
    if tokens < PARALLEL_TOKENS || pool.n_threads() == 1 {
        let mut i = 0;
        for w in writes {
            for pos in w.start_pos..w.start_pos + w.n {
                let (k, v) = (&k_rows[i * row..][..row], &v_rows[i * row..][..row]);
                store_kv(kv, w.block_table, pos, k, v);
                i += 1;
            }
        }
        return;
    }
    let (hd, bs, n_kv, dtype) = (kv.head_dim, kv.block_size, kv.n_kv_heads, kv.dtype);
    let tile = kv.as_ref().key_tile();
    let (rb, slot_bytes) = (dtype.row_bytes(hd), kv.as_ref().slot_bytes());
    let (k, v) = (SharedMut::new(&mut *kv.k), SharedMut::new(&mut *kv.v));
    pool.broadcast(&|t, n| {
        with_row(rb, |enc| {
            let mut i = 0;
            for w in writes.clone() {
                for pos in w.start_pos..w.start_pos + w.n {
                    let (block, slot) = (w.block_table[pos / bs] as usize, pos % bs);
                    for h in (0..n_kv).filter(|h| (block + h) % n == t) {
                        let src = i * row + h * hd;
                        // SAFETY: thread t writes only the (block, head) pairs with
                        // (block + head) % n == t: the value row of (slot, head) in that
                        // block and the key tile of (block, head). Each of those byte ranges
                        // belongs to one (block, head) pair, so no other thread touches them,
                        // and this thread holds one of them at a time. Bounds are checked.
                        let v_row =
                            unsafe { v.slice_mut((block * bs + slot) * slot_bytes + h * rb, rb) };
                        dtype.encode_row(&v_rows[src..src + hd], v_row);
                        dtype.encode_row(&k_rows[src..src + hd], enc);
                        // SAFETY: as above.
                        let k_tile =
                            unsafe { k.slice_mut(tile.offset(block, h, n_kv), tile.bytes()) };
                        tile.scatter(enc, slot, k_tile);
                    }
                    i += 1;
                }
            }
        })
    });
}
