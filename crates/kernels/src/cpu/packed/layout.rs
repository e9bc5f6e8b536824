//! The packed panel layout: conversion from and to GGUF blocks, and the element accessors the
//! scalar kernel reads through.
//!
//! A panel holds [`PANEL`] consecutive weight rows. Its bytes are all the blocks' quants, then
//! all the blocks' scales (`nb` = blocks per row):
//!
//! ```text
//! panel = | quants of block 0 | ... | quants of block nb-1 | scales 0 | ... | scales nb-1 |
//!
//! Q4_0 / Q4_1 quants of one block (256 bytes) = 4 vectors of 64 bytes; vector v, byte 4r+b:
//!     low nibble  = quant of element 8v+b   of row r   (unsigned, 0..=15)
//!     high nibble = quant of element 8v+4+b of row r
//! Q8_0 quants of one block (512 bytes) = 8 vectors of 64 bytes; vector g, byte 4r+b:
//!     quant of element 4g+b of row r, plus 128 (unsigned, 1..=255)
//! scales: 16 × f16 d (Q4_1: then 16 × f16 m), row r at index r
//!
//! Q4_K (a block is a 256-element super-block of 8 sub-blocks of 32):
//! quants (2048 bytes) = sub-block s at byte 256s, laid out as a Q4_0 block's quants
//! scales (256 bytes)  = 12 × 16 bytes: byte k of row r's 12 packed 6-bit scale/min bytes (the
//!                       GGUF encoding) at 16k + r; then 16 × f16 d; then 16 × f16 dmin
//! ```
//!
//! Q6_K (256-element super-blocks; quants stored unsigned, 0..=63, 32 above the signed ones):
//! quants (3072 bytes) = 8 chunks of 32 elements at byte 384c: the low 4 bits laid out as a
//!                       Q4_0 block's quants (256 bytes), then the high 2 bits in 2 vectors:
//!                       vector u, byte 4r + b, bits 4(v − 2u) + 2k: element 8v + 4k + b
//!                       (v = 2u, 2u + 1; k = 0, 1), i.e. the high bits of nibble vector v
//! scales (288 bytes)  = 16 × 16 i8: scale s of row r at 16s + r; then 16 × f16 d
//!
//! The K-quant panels are as large as their GGUF rows (4.5 and 6.5625 bits a weight), so
//! decode reads no more.
//!
//! A vector thus holds 4 consecutive elements of each of the 16 rows: one `vpdpbusd` against 4
//! activation bytes broadcast to every lane adds those 4 products into 16 row sums.

use super::{PackedKind, PANEL};

/// Bytes of one GGUF block of `kind`.
pub(super) const fn block_bytes(kind: PackedKind) -> usize {
    kind.dtype().block_bytes()
}

/// Writes quant `e` (0..32, unsigned as stored) into a GGUF block.
fn set_block_quant(kind: PackedKind, block: &mut [u8], e: usize, q: u8) {
    match kind {
        PackedKind::Q4_0 | PackedKind::Q4_1 => {
            let qs = &mut block[block_bytes(kind) - 16..];
            if e < 16 {
                qs[e] = (qs[e] & 0xF0) | q;
            } else {
                qs[e - 16] = (qs[e - 16] & 0x0F) | (q << 4);
            }
        }
        PackedKind::Q8_0 => block[2 + e] = q ^ 0x80,
        PackedKind::Q4_K => {
            let (byte, shift) = q4_k_position(e);
            let b = &mut block[Q4_K_QS + byte];
            *b = (*b & !(0x0F << shift)) | (q << shift);
        }
        PackedKind::Q6_K => {
            let ((lo, lo_shift), (hi, hi_shift)) = q6_k_positions(e);
            block[lo] = (block[lo] & !(0x0F << lo_shift)) | ((q & 0x0F) << lo_shift);
            block[hi] = (block[hi] & !(0x03 << hi_shift)) | ((q >> 4) << hi_shift);
        }
    }
}

/// Where a GGUF Q6_K block keeps element `e` (0..256): the byte and shift of its low 4 bits
/// (in `ql`) and of its high 2 bits (in `qh`, which starts at byte 128).
fn q6_k_positions(e: usize) -> ((usize, u32), (usize, u32)) {
    let (n, g, l) = (e / 128, (e % 128) / 32, e % 32);
    let lo = (64 * n + 32 * (g % 2) + l, 4 * (g as u32 / 2));
    let hi = (128 + 32 * n + l, 2 * g as u32);
    (lo, hi)
}

/// Offsets in one super-block's panel scale bytes: Q4_K's 16 `f16` d and 16 `f16` dmin after
/// the 192 packed scale bytes; Q6_K's 16 `f16` d after the 256 `i8` scales.
pub(super) const Q4_K_PANEL_D: usize = 192;
pub(super) const Q4_K_PANEL_DMIN: usize = 224;
pub(super) const Q6_K_PANEL_D: usize = 256;

/// Offset of a GGUF Q6_K block's scales and of its `d`.
const Q6_K_SCALES: usize = 192;
const Q6_K_D: usize = 208;

/// Element `e` (0..=63) of a GGUF Q6_K block.
fn q6_k_quant(block: &[u8], e: usize) -> u8 {
    let ((lo, lo_shift), (hi, hi_shift)) = q6_k_positions(e);
    ((block[lo] >> lo_shift) & 0x0F) | (((block[hi] >> hi_shift) & 0x03) << 4)
}

/// Offset of a GGUF Q4_K block's quants (after `d`, `dmin` and 12 scale bytes).
const Q4_K_QS: usize = 16;

/// The byte of a GGUF Q4_K block's quants holding element `e` (0..256), and its shift:
/// elements `64p..64p + 32` are the low nibbles of bytes `32p..32p + 32`, the next 32 their
/// high nibbles.
fn q4_k_position(e: usize) -> (usize, u32) {
    let (p, l) = (e / 64, e % 64);
    (32 * p + l % 32, if l < 32 { 0 } else { 4 })
}

/// The byte of a block's packed quants holding element `e` of row `r`, and the shift of its
/// value within that byte (always 0 for Q8_0).
#[inline]
fn quant_position(kind: PackedKind, r: usize, e: usize) -> (usize, u32) {
    match kind {
        PackedKind::Q4_0 | PackedKind::Q4_1 => {
            let (v, w) = (e / 8, e % 8);
            (v * 64 + 4 * r + w % 4, if w < 4 { 0 } else { 4 })
        }
        PackedKind::Q8_0 => ((e / 4) * 64 + 4 * r + e % 4, 0),
        PackedKind::Q4_K => {
            let (byte, shift) = quant_position(PackedKind::Q4_0, r, e % 32);
            (256 * (e / 32) + byte, shift)
        }
        PackedKind::Q6_K => unreachable!("Q6_K quants are split over two places"),
    }
}

/// The byte (within a Q6_K chunk's 128 high-bit bytes) and shift of the high 2 bits of
/// element `e` (0..32) of row `r`.
fn q6_k_high_position(r: usize, e: usize) -> (usize, u32) {
    let (v, k, b) = (e / 8, (e % 8) / 4, e % 4);
    (64 * (v / 2) + 4 * r + b, (4 * (v % 2) + 2 * k) as u32)
}

/// Element `e` of row `r` in one block's packed quants (unsigned, as stored).
#[inline]
pub(super) fn packed_quant(kind: PackedKind, quants: &[u8], r: usize, e: usize) -> u8 {
    if kind == PackedKind::Q6_K {
        let chunk = &quants[384 * (e / 32)..][..384];
        let low = packed_quant(PackedKind::Q4_0, chunk, r, e % 32);
        let (byte, shift) = q6_k_high_position(r, e % 32);
        return low | (((chunk[256 + byte] >> shift) & 0x03) << 4);
    }
    let (byte, shift) = quant_position(kind, r, e);
    let v = quants[byte] >> shift;
    match kind {
        PackedKind::Q8_0 => v,
        _ => v & 0x0F,
    }
}

/// Packs block `i` of the panel's rows (`rows[r]` = row `r`'s GGUF bytes) into `quants` (one
/// block's quant bytes) and `scales` (one block's scale bytes).
pub(super) fn pack_block(
    kind: PackedKind,
    rows: &[&[u8]; PANEL],
    i: usize,
    quants: &mut [u8],
    scales: &mut [u8],
) {
    let bb = block_bytes(kind);
    for (r, row) in rows.iter().enumerate() {
        let block = &row[i * bb..(i + 1) * bb];
        match kind {
            PackedKind::Q8_0 => pack_q8_row(block, r, quants),
            PackedKind::Q4_0 | PackedKind::Q4_1 => {
                let qs = &block[bb - 16..];
                pack_q4_row(|e| (qs[e % 16] >> (4 * (e / 16))) & 0x0F, r, quants);
            }
            PackedKind::Q4_K => pack_q4_k_row(block, r, quants, scales),
            PackedKind::Q6_K => pack_q6_k_row(block, r, quants, scales),
        }
        if !matches!(kind, PackedKind::Q4_K | PackedKind::Q6_K) {
            scales[2 * r..2 * r + 2].copy_from_slice(&block[..2]);
        }
        if kind == PackedKind::Q4_1 {
            scales[32 + 2 * r..34 + 2 * r].copy_from_slice(&block[2..4]);
        }
    }
}

/// Row `r`'s GGUF Q4_K super-block into the block's packed quants (each sub-block as a Q4_0
/// block) and scales (see the layout above).
fn pack_q4_k_row(block: &[u8], r: usize, quants: &mut [u8], scales: &mut [u8]) {
    for s in 0..8 {
        let nibble = |e: usize| {
            let (byte, shift) = q4_k_position(32 * s + e);
            (block[Q4_K_QS + byte] >> shift) & 0x0F
        };
        pack_q4_row(nibble, r, &mut quants[256 * s..][..256]);
    }
    for k in 0..12 {
        scales[16 * k + r] = block[4 + k];
    }
    scales[Q4_K_PANEL_D + 2 * r..][..2].copy_from_slice(&block[..2]);
    scales[Q4_K_PANEL_DMIN + 2 * r..][..2].copy_from_slice(&block[2..4]);
}

/// Row `r`'s GGUF Q6_K super-block into the block's packed quants (per chunk of 32: the low
/// 4 bits as a Q4_0 block, then the high 2 bits) and scales (see the layout above).
fn pack_q6_k_row(block: &[u8], r: usize, quants: &mut [u8], scales: &mut [u8]) {
    for c in 0..8 {
        let chunk = &mut quants[384 * c..][..384];
        pack_q4_row(
            |e| q6_k_quant(block, 32 * c + e) & 0x0F,
            r,
            &mut chunk[..256],
        );
        for e in 0..32 {
            let (byte, shift) = q6_k_high_position(r, e);
            chunk[256 + byte] |= (q6_k_quant(block, 32 * c + e) >> 4) << shift;
        }
    }
    for s in 0..16 {
        scales[16 * s + r] = block[Q6_K_SCALES + s];
    }
    scales[Q6_K_PANEL_D + 2 * r..][..2].copy_from_slice(&block[Q6_K_D..Q6_K_D + 2]);
}

/// Row `r`'s Q8_0 quants (block at `block`) into the block's packed quants: element `4g + b`
/// at byte `64g + 4r + b`, plus 128.
fn pack_q8_row(block: &[u8], r: usize, quants: &mut [u8]) {
    for (g, src) in block[2..34].chunks_exact(4).enumerate() {
        let dst = &mut quants[64 * g + 4 * r..][..4];
        dst.iter_mut().zip(src).for_each(|(d, s)| *d = s ^ 0x80);
    }
}

/// Row `r`'s 32 Q4 quants (`nibble(e)`, 0..=15) into a block's packed quants: byte
/// `64v + 4r + b` holds element `8v + b` low and `8v + 4 + b` high.
fn pack_q4_row(nibble: impl Fn(usize) -> u8, r: usize, quants: &mut [u8]) {
    for v in 0..4 {
        let dst = &mut quants[64 * v + 4 * r..][..4];
        for (b, d) in dst.iter_mut().enumerate() {
            *d = nibble(8 * v + b) | nibble(8 * v + 4 + b) << 4;
        }
    }
}

/// Rebuilds row `r`'s GGUF block from one block's packed `quants` and `scales`.
pub(super) fn unpack_block(
    kind: PackedKind,
    quants: &[u8],
    scales: &[u8],
    r: usize,
    block: &mut [u8],
) {
    block.fill(0);
    if kind == PackedKind::Q6_K {
        for s in 0..16 {
            block[Q6_K_SCALES + s] = scales[16 * s + r];
        }
        block[Q6_K_D..Q6_K_D + 2].copy_from_slice(&scales[Q6_K_PANEL_D + 2 * r..][..2]);
    } else if kind == PackedKind::Q4_K {
        block[..2].copy_from_slice(&scales[Q4_K_PANEL_D + 2 * r..][..2]);
        block[2..4].copy_from_slice(&scales[Q4_K_PANEL_DMIN + 2 * r..][..2]);
        for k in 0..12 {
            block[4 + k] = scales[16 * k + r];
        }
    } else {
        block[..2].copy_from_slice(&scales[2 * r..2 * r + 2]);
    }
    if kind == PackedKind::Q4_1 {
        block[2..4].copy_from_slice(&scales[32 + 2 * r..34 + 2 * r]);
    }
    for e in 0..kind.block_elems() {
        set_block_quant(kind, block, e, packed_quant(kind, quants, r, e));
    }
}
