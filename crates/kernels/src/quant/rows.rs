//! Row checks and block views of the 32-element block formats (Q4_0, Q4_1, Q5_0, Q8_0):
//! what the SIMD kernels rely on for memory safety.

use std::borrow::Cow;

use bytemuck::Pod;

use super::dispatch::Variant;
use super::format::QuantFormat;
use super::TILE;

/// Elements per block.
pub const QK: usize = 32;

/// View `bytes` as blocks of `T`, copying only if they are not suitably aligned.
pub(crate) fn cast_blocks<T: Pod>(bytes: &[u8]) -> Cow<'_, [T]> {
    match bytemuck::try_cast_slice(bytes) {
        Ok(blocks) => Cow::Borrowed(blocks),
        Err(_) => {
            let mut v = vec![T::zeroed(); bytes.len() / std::mem::size_of::<T>()];
            let len = v.len() * std::mem::size_of::<T>();
            bytemuck::cast_slice_mut::<T, u8>(&mut v).copy_from_slice(&bytes[..len]);
            Cow::Owned(v)
        }
    }
}

/// Check a dot product's arguments: `n` whole blocks and rows long enough for them.
/// Returns the block count. The SIMD kernels rely on this for memory safety.
pub(crate) fn check_dot(n: usize, w: &[u8], w_block: usize, a: &[u8], a_block: usize) -> usize {
    assert!(
        n.is_multiple_of(QK),
        "vec_dot: n = {n} is not a multiple of {QK}"
    );
    let nb = n / QK;
    assert!(
        w.len() >= nb * w_block,
        "vec_dot: weight row shorter than n"
    );
    assert!(
        a.len() >= nb * a_block,
        "vec_dot: activation row shorter than n"
    );
    nb
}

/// [`check_dot`] for every (weight row, activation row) pair of a tile; returns the block
/// count. The SIMD tile kernels rely on this for memory safety.
pub(crate) fn check_tile(
    n: usize,
    w: &[&[u8]; TILE],
    w_block: usize,
    a: &[&[u8]; TILE],
    a_block: usize,
) -> usize {
    let nb = check_dot(n, w[0], w_block, a[0], a_block);
    for (wr, ar) in w.iter().zip(a) {
        check_dot(n, wr, w_block, ar, a_block);
    }
    nb
}

/// Check that `src` holds the `block`-byte blocks of `dst.len()` elements (the last one
/// may be partial); returns the number of whole blocks in `dst`. `name` names the format in
/// the panic message.
pub(crate) fn check_dequantize(src: &[u8], dst: &[f32], block: usize, name: &str) -> usize {
    assert!(
        src.len() >= dst.len().div_ceil(QK) * block,
        "{name} dequantize: too few blocks"
    );
    dst.len() / QK
}

/// The scalar `dequantize` of format `F` on byte rows: the reference on the blocks of
/// `dst.len()` elements (the last one may be partial).
pub(crate) fn dequantize_scalar<F: QuantFormat>(src: &[u8], dst: &mut [f32]) {
    let nb = dst.len().div_ceil(QK);
    F::dequantize_ref(&cast_blocks(&src[..nb * size_of::<F::Block>()]), dst);
}

/// The scalar `vec_dot` of format `F` on byte rows: the reference on `n / 32` blocks.
pub(crate) fn vec_dot_scalar<F: QuantFormat>(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let (wb, ab) = (size_of::<F::Block>(), size_of::<F::Act>());
    let nb = check_dot(n, w, wb, a, ab);
    F::vec_dot_ref(&cast_blocks(&w[..nb * wb]), &cast_blocks(&a[..nb * ab]))
}

/// The scalar variant of format `F`.
pub(crate) fn scalar_variant<F: QuantFormat>() -> Variant {
    Variant::scalar(dequantize_scalar::<F>, vec_dot_scalar::<F>)
}
