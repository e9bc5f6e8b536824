//! Activations for the packed kernels: the rows quantized exactly as the GGUF kernels quantize
//! them ([`ActFormat::Q8_0`], [`ActFormat::Q8_1`] for Q4_1, [`ActFormat::Q8K`] for Q4_K),
//! stored as separate arrays so the kernels broadcast 4 quants at a time and read each block's
//! constants as scalars.

use super::PackedKind;
use crate::quant::act::BlockQ8_1;
use crate::quant::q8_0::BlockQ8_0;
use crate::quant::q8_k::BlockQ8K;
use crate::quant::ActFormat;

/// `m` quantized activation rows of `cols` values (`nb = cols / block` blocks per row, where a
/// block is 32 values, or 256 for Q8_K).
#[derive(Default)]
pub struct PackedActs {
    /// `m × cols` quants.
    pub(super) q: Vec<i8>,
    /// `m × nb` block scales.
    pub(super) d: Vec<f32>,
    /// `m × nb × 8` (Q8_K only): the quant sum of each 32-value sub-block, which multiplies the
    /// Q4_K sub-block's minimum (at most 32 · 127 in size, so an `i16`).
    pub(super) sub_sums: Vec<i16>,
    /// `m × nb × 16` (Q8_K only): the quant sum of each 16-value sub-block (Q8_K's `bsums`),
    /// which the Q6_K offset of 32 multiplies.
    pub(super) bsums: Vec<i16>,
    /// `m × nb`: the weights' unsigned offset times the block's quant sum (`8·Σq` for Q4_0,
    /// `128·Σq` for Q8_0), subtracted from the integer dot product; 0 for Q4_1.
    pub(super) corr: Vec<i32>,
    /// `m × nb`: Q8_1's `s = d·Σq` (Q4_1 only; multiplies the weight block's minimum).
    pub(super) s: Vec<f32>,
}

impl PackedActs {
    /// Refills from `m` rows in `kind`'s activation format (`blocks`, `nb` blocks a row).
    pub(super) fn fill(&mut self, kind: PackedKind, blocks: &[u8], m: usize, nb: usize) {
        if kind.act() == ActFormat::Q8K {
            return self.fill_q8_k(blocks, m * nb);
        }
        self.q.resize(m * nb * 32, 0);
        self.d.resize(m * nb, 0.0);
        self.corr.resize(m * nb, 0);
        self.s.resize(m * nb, 0.0);
        match kind.act() {
            ActFormat::Q8_1 => {
                for (k, raw) in blocks[..m * nb * 36].chunks_exact(36).enumerate() {
                    let b: BlockQ8_1 = bytemuck::pod_read_unaligned(raw);
                    self.set(k, b.d.to_f32(), &b.qs, 0);
                    self.s[k] = b.s.to_f32();
                }
            }
            _ => {
                for (k, raw) in blocks[..m * nb * 34].chunks_exact(34).enumerate() {
                    let b: BlockQ8_0 = bytemuck::pod_read_unaligned(raw);
                    let sum: i32 = b.qs.iter().map(|&q| q as i32).sum();
                    self.set(k, b.d.to_f32(), &b.qs, kind.offset() * sum);
                }
            }
        }
    }

    /// Refills from `n` Q8_K blocks.
    fn fill_q8_k(&mut self, blocks: &[u8], n: usize) {
        const BYTES: usize = std::mem::size_of::<BlockQ8K>();
        self.q.resize(n * 256, 0);
        self.d.resize(n, 0.0);
        self.sub_sums.resize(n * 8, 0);
        self.bsums.resize(n * 16, 0);
        for (k, raw) in blocks[..n * BYTES].chunks_exact(BYTES).enumerate() {
            let b: BlockQ8K = bytemuck::pod_read_unaligned(raw);
            self.q[k * 256..(k + 1) * 256].copy_from_slice(&b.qs);
            self.d[k] = b.d;
            self.bsums[k * 16..(k + 1) * 16].copy_from_slice(&b.bsums);
            for (s, pair) in b.bsums.chunks_exact(2).enumerate() {
                self.sub_sums[k * 8 + s] = pair[0] + pair[1];
            }
        }
    }

    fn set(&mut self, k: usize, d: f32, qs: &[i8; 32], corr: i32) {
        self.q[k * 32..(k + 1) * 32].copy_from_slice(qs);
        self.d[k] = d;
        self.corr[k] = corr;
    }
}
