//! Outlier channels for INT8 with calibration: choose the input channels of a layer whose
//! activations are largest, and split their weight columns off the matrix (they are stored in
//! F16 and computed beside the INT8 product, see [`OutlierColumns`](kestrel_model::layers::OutlierColumns)).

/// At most this fraction of a layer's inputs become outlier channels.
pub const MAX_SHARE: usize = 16;

/// The `min(count, cols / MAX_SHARE)` channels of largest `abs_max` (calibration maxima of
/// `|x|`, one per input channel), in increasing order. Channels never seen non-zero are not
/// chosen.
pub fn choose_channels(abs_max: &[f32], count: usize) -> Vec<u32> {
    let take = count.min(abs_max.len() / MAX_SHARE);
    let mut idx: Vec<u32> = (0..abs_max.len() as u32)
        .filter(|&c| abs_max[c as usize] > 0.0)
        .collect();
    idx.sort_by(|&a, &b| {
        abs_max[b as usize]
            .total_cmp(&abs_max[a as usize])
            .then(a.cmp(&b))
    });
    idx.truncate(take);
    idx.sort_unstable();
    idx
}

/// Move columns `channels` of the row-major `[rows, cols]` matrix `w` into a `[rows,
/// channels.len()]` matrix, leaving zeros in `w`.
pub fn split_off(w: &mut [f32], cols: usize, channels: &[u32]) -> Vec<f32> {
    let mut out = Vec::with_capacity(w.len() / cols * channels.len());
    for row in w.chunks_exact_mut(cols) {
        out.extend(
            channels
                .iter()
                .map(|&c| std::mem::take(&mut row[c as usize])),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn largest_channels_in_order_capped_at_a_sixteenth() {
        let mut a = vec![1.0f32; 64];
        a[40] = 90.0;
        a[3] = 50.0;
        a[17] = 70.0;
        assert_eq!(choose_channels(&a, 2), vec![17, 40]);
        assert_eq!(
            choose_channels(&a, 32),
            vec![0, 3, 17, 40],
            "64 / 16 = 4 channels, ties by index"
        );
        assert!(
            choose_channels(&vec![0.0; 64], 4).is_empty(),
            "dead channels are not outliers"
        );
    }

    #[test]
    fn split_keeps_every_weight_once() {
        let mut w: Vec<f32> = (1..=12).map(|v| v as f32).collect();
        let o = split_off(&mut w, 4, &[1, 3]);
        assert_eq!(o, vec![2.0, 4.0, 6.0, 8.0, 10.0, 12.0]);
        assert_eq!(
            w,
            vec![1.0, 0.0, 3.0, 0.0, 5.0, 0.0, 7.0, 0.0, 9.0, 0.0, 11.0, 0.0]
        );
    }
}
