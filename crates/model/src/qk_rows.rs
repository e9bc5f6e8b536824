//! Q/K row order: GGUF (llama.cpp's converter) stores the rows of each attention head so
//! that RoPE rotates adjacent pairs; HF pairs row `j` with row `j + head_dim / 2`.
//!
//! ```text
//!   within head h (rows h*hd .. (h+1)*hd), for j < hd/2 and s in {0, 1}:
//!     GGUF row  h*hd + 2j + s   <->   HF row  h*hd + s*hd/2 + j
//!   e.g. hd = 4:  GGUF rows [0 1 2 3]  hold  HF rows [0 2 1 3]
//! ```

/// HF row order → GGUF row order, for a `[n_heads * head_dim, cols]` matrix (`cols = 1` for
/// a bias).
pub fn hf_to_gguf(data: &[f32], n_heads: usize, cols: usize) -> Vec<f32> {
    reorder(data, n_heads, cols, |hd, h, j, s| {
        (h * hd + 2 * j + s, h * hd + s * hd / 2 + j)
    })
}

/// GGUF row order → HF row order (the inverse of [`hf_to_gguf`]).
pub fn gguf_to_hf(data: &[f32], n_heads: usize, cols: usize) -> Vec<f32> {
    reorder(data, n_heads, cols, |hd, h, j, s| {
        (h * hd + s * hd / 2 + j, h * hd + 2 * j + s)
    })
}

/// `out[dst row] = data[src row]` for every `(dst, src) = map(head_dim, head, j, s)`.
fn reorder(
    data: &[f32],
    n_heads: usize,
    cols: usize,
    map: impl Fn(usize, usize, usize, usize) -> (usize, usize),
) -> Vec<f32> {
    let rows = data.len() / cols;
    let hd = rows / n_heads;
    let mut out = vec![0.0; data.len()];
    for h in 0..n_heads {
        for j in 0..hd / 2 {
            for s in 0..2 {
                let (dst, src) = map(hd, h, j, s);
                out[dst * cols..(dst + 1) * cols]
                    .copy_from_slice(&data[src * cols..(src + 1) * cols]);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permutation_matches_the_row_formula_and_inverts() {
        let rows: Vec<f32> = (0..8).map(|r| r as f32).collect();
        // Two heads of 4: GGUF rows hold HF rows [0 2 1 3 | 4 6 5 7].
        assert_eq!(
            hf_to_gguf(&rows, 2, 1),
            vec![0.0, 2.0, 1.0, 3.0, 4.0, 6.0, 5.0, 7.0]
        );
        let m: Vec<f32> = (0..48).map(|v| v as f32).collect();
        assert_eq!(gguf_to_hf(&hf_to_gguf(&m, 2, 6), 2, 6), m);
    }
}
