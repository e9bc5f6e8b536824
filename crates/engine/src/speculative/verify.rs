//! [`verify_drafts`]: accepts the longest valid prefix of a sequence's draft tokens (see the
//! module docs of [`crate::speculative`] for why this is rejection sampling).

use crate::request::Generation;
use crate::sampling::{SampleError, SamplerScratch};

/// Verifies `drafts` against `rows` (`drafts.len() + 1` logits rows of `vocab`: row `i` scores
/// the token after `history` + `drafts[..i]`), pushing the emitted tokens to `emitted`: each
/// accepted draft token, then the token sampled where the first draft was rejected (or after
/// the last one). Each row is sampled by `generation` exactly as an ordinary step would sample
/// it (penalties see the accepted drafts as history), in `scratch`. Returns the number of accepted drafts.
pub(crate) fn verify_drafts(
    generation: &mut Generation,
    rows: &mut [f32],
    vocab: usize,
    history: &[u32],
    drafts: &[u32],
    emitted: &mut Vec<u32>,
    scratch: &mut SamplerScratch,
) -> Result<usize, SampleError> {
    let mut context = Vec::with_capacity(history.len() + drafts.len());
    context.extend_from_slice(history);
    for (i, row) in rows.chunks_mut(vocab).take(drafts.len() + 1).enumerate() {
        let token = generation.sample(row, &context, scratch)?;
        emitted.push(token);
        match drafts.get(i) {
            Some(&d) if d == token => context.push(d),
            _ => return Ok(i),
        }
    }
    Ok(drafts.len())
}
