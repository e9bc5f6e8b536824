//! AutoGPTQ / GPTQModel layout to [`GroupQuant`].
//!
//! For a linear with `out` outputs and `in` inputs, `b`-bit codes (`p = 32 / b` per word) and
//! `G` groups:
//!
//! ```text
//!  qweight int32 [in/p, out]   word r of column o holds inputs r*p .. r*p+p-1 of output o,
//!                              input r*p + k in field k (bits b*k .. b*k+b-1)
//!  qzeros  int32 [G, out/p]    word c of row g holds the zeros of outputs c*p .. c*p+p-1
//!  scales  f16   [G, out]
//!  g_idx   int32 [in]          group of each input column (absent: i / group_size)
//!
//!  w[o][i] = (code - zero) * scale,  zero and scale of group g_idx[i];
//!  v1 ("gptq") files store zero - 1: zero = (stored + 1) mod 2^b
//! ```
//!
//! With `desc_act` the groups are scattered over the inputs. Sorting the inputs stably by
//! `g_idx` gathers each group into `group_size` consecutive stored columns; that order becomes
//! [`GroupQuant::perm`].

use kestrel_model::weights::safetensors::SafetensorsCheckpoint;

use crate::codec::GroupQuant;

use super::packed::{field, floats, ints, multiple, transpose, words};
use super::{ImportError, QuantConfig};

/// Read the GPTQ linear `prefix` of shape `[rows, cols]` (outputs, inputs).
pub(crate) fn read(
    ckpt: &SafetensorsCheckpoint,
    cfg: &QuantConfig,
    prefix: &str,
    rows: usize,
    cols: usize,
) -> Result<GroupQuant, ImportError> {
    let bits = cfg.bits;
    if bits != 4 && bits != 8 {
        return Err(ImportError::UnsupportedBits {
            method: "GPTQ",
            bits: i64::from(bits),
            supported: "4, 8",
        });
    }
    let per = 32 / bits as usize;
    let group = cfg.group_size_for(cols);
    let groups = multiple(prefix, "input features", cols, group)?;
    let packed_in = multiple(prefix, "input features", cols, per)?;
    let packed_out = multiple(prefix, "output features", rows, per)?;
    let qweight = words(ckpt, &format!("{prefix}.qweight"), &[packed_in, rows])?;
    let qzeros = words(ckpt, &format!("{prefix}.qzeros"), &[groups, packed_out])?;
    let scales = floats(ckpt, &format!("{prefix}.scales"), &[groups, rows])?;
    let perm = column_order(ckpt, prefix, cols, group)?;

    let codes = unpack_codes(&qweight, rows, cols, bits, perm.as_deref());
    let zeros_by_group = unpack_zeros(&qzeros, groups, rows, bits, cfg.zero_point_v1);
    Ok(GroupQuant {
        rows,
        cols,
        bits,
        group_size: group,
        codes,
        scales: transpose(&scales, groups, rows),
        zeros: transpose(&zeros_by_group, groups, rows),
        perm,
    })
}

/// Codes `[rows][cols]` in stored column order from qweight `[cols/p][rows]`.
fn unpack_codes(
    qweight: &[u32],
    rows: usize,
    cols: usize,
    bits: u8,
    perm: Option<&[u32]>,
) -> Vec<u8> {
    let per = 32 / bits as usize;
    let mut codes = vec![0u8; rows * cols];
    for j in 0..cols {
        let i = perm.map_or(j, |p| p[j] as usize);
        let words = &qweight[(i / per) * rows..(i / per + 1) * rows];
        for (o, &w) in words.iter().enumerate() {
            codes[o * cols + j] = field(w, i % per, bits);
        }
    }
    codes
}

/// Zeros `[groups][rows]` from qzeros `[groups][rows/p]`, undoing the v1 offset if `v1`.
fn unpack_zeros(qzeros: &[u32], groups: usize, rows: usize, bits: u8, v1: bool) -> Vec<u8> {
    let per = 32 / bits as usize;
    let mask = ((1u32 << bits) - 1) as u8;
    (0..groups * rows)
        .map(|k| {
            let (g, o) = (k / rows, k % rows);
            let z = field(qzeros[g * (rows / per) + o / per], o % per, bits);
            if v1 {
                z.wrapping_add(1) & mask
            } else {
                z
            }
        })
        .collect()
}

/// The stored column order implied by `<prefix>.g_idx`: inputs sorted stably by group, or
/// `None` when that is the identity or there is no `g_idx`. Every group must hold exactly
/// `group` inputs.
fn column_order(
    ckpt: &SafetensorsCheckpoint,
    prefix: &str,
    cols: usize,
    group: usize,
) -> Result<Option<Vec<u32>>, ImportError> {
    let name = format!("{prefix}.g_idx");
    if !ckpt.contains(&name) {
        return Ok(None);
    }
    let g_idx = ints(ckpt, &name, &[cols])?;
    let groups = cols / group;
    let bad = |reason: String| ImportError::BadGIdx {
        name: name.clone(),
        reason,
    };
    let mut counts = vec![0usize; groups];
    for (i, &g) in g_idx.iter().enumerate() {
        let slot = usize::try_from(g).ok().and_then(|g| counts.get_mut(g));
        let Some(count) = slot else {
            return Err(bad(format!(
                "input {i} is in group {g}, outside 0..{groups}"
            )));
        };
        *count += 1;
    }
    if let Some((g, n)) = counts.iter().enumerate().find(|&(_, &n)| n != group) {
        return Err(bad(format!(
            "group {g} has {n} inputs, expected group_size {group}"
        )));
    }
    // Column indices fit in u32: no checkpoint has 2^32 input features.
    let mut perm: Vec<u32> = (0..cols as u32).collect();
    perm.sort_by_key(|&i| g_idx[i as usize]);
    let identity = perm.iter().enumerate().all(|(j, &i)| i as usize == j);
    Ok((!identity).then_some(perm))
}
