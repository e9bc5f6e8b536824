//! [`MockExecutor`]: a deterministic stand-in for the model runner, for engine tests.
//!
//! It keeps a shadow KV cache (which token, at which position, sits in each block slot) and
//! checks every [`BatchInput`] the way a real runner would depend on it:
//! * each sequence's block table has exactly `ceil((start_pos + len) / block_size)` distinct,
//!   in-range blocks, except that with an attention window ([`MockExecutor::with_window`])
//!   entries before the window of the first token may be [`NO_BLOCK`] holes;
//! * every context position `< start_pos` that the window lets the sequence see was written in
//!   an *earlier* step, at that position (so prefix-cache hits only ever point at K/V that
//!   really exists);
//! * no slot is written twice in one step, and no slot is read and written in the same step.
//!
//! * every sequence's LoRA adapter is loaded ([`Executor::load_adapter`]: the mock "reads" an
//!   adapter whose file name ends in its rank, e.g. `sql-r8`, and refuses any other path).
//!
//! The "model" reads the context back from the shadow cache, so a wrong block table changes its
//! output: the next token is [`reference_next_token_at`] of the context the last token sees
//! (all of it, or its window), returned as a one-hot logits row.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

use crate::adapter_id::AdapterId;
use crate::executor::{BatchInput, BatchOutput, Executor, ExecutorError, KvGeometry, SeqBatch};
use crate::kv::NO_BLOCK;

/// Bytes of one slot in a block copied out for the disk tier.
const SLOT_BYTES: usize = 12;

/// What a shadow KV slot holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Slot {
    token: u32,
    pos: usize,
    step: u64,
}

/// The "model": the token that follows `context`, a hash of every (position, token) pair
/// reduced to `vocab`.
pub fn reference_next_token(context: &[u32], vocab: usize) -> u32 {
    reference_next_token_at(0, context, vocab)
}

/// The "model" over the part of a context it sees: `tokens` sit at positions `first_pos..`.
pub fn reference_next_token_at(first_pos: usize, tokens: &[u32], vocab: usize) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (i, &t) in tokens.iter().enumerate() {
        let pos = first_pos + i;
        h ^= u64::from(t) | ((pos as u64) << 32);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
        h ^= h >> 29;
    }
    (h % vocab.max(1) as u64) as u32
}

/// Greedy generation with [`reference_next_token`] and no scheduler: what the engine must
/// reproduce for `prompt` (stopping early at any of `stop_ids`).
pub fn reference_generate(
    prompt: &[u32],
    max_tokens: usize,
    stop_ids: &[u32],
    vocab: usize,
) -> Vec<u32> {
    reference_generate_windowed(prompt, max_tokens, stop_ids, vocab, None)
}

/// [`reference_generate`] for a model whose last token sees only the `window` tokens up to
/// and including itself.
pub fn reference_generate_windowed(
    prompt: &[u32],
    max_tokens: usize,
    stop_ids: &[u32],
    vocab: usize,
    window: Option<usize>,
) -> Vec<u32> {
    let mut ctx = prompt.to_vec();
    let mut out = Vec::new();
    while out.len() < max_tokens {
        let first = first_key(window, ctx.len() - 1);
        let t = reference_next_token_at(first, &ctx[first..], vocab);
        ctx.push(t);
        out.push(t);
        if stop_ids.contains(&t) {
            break;
        }
    }
    out
}

/// The first key position a query at `pos` sees under `window`.
fn first_key(window: Option<usize>, pos: usize) -> usize {
    window.map_or(0, |w| (pos + 1).saturating_sub(w))
}

/// Index of each row's largest logit (the token a one-hot row encodes).
pub fn argmax_rows(out: &BatchOutput) -> Vec<u32> {
    (0..out.num_rows())
        .map(|i| {
            let row = out.row(i);
            let best = row
                .iter()
                .enumerate()
                .fold(0, |b, (j, &x)| if x > row[b] { j } else { b });
            best as u32
        })
        .collect()
}

/// Deterministic executor with a validated shadow KV cache.
#[derive(Debug, Clone)]
pub struct MockExecutor {
    block_size: usize,
    num_blocks: usize,
    vocab: usize,
    window: Option<usize>,
    kv: HashMap<u32, Vec<Option<Slot>>>,
    step: u64,
    tokens_computed: usize,
    adapters: BTreeMap<AdapterId, String>,
    adapter_loads: usize,
}

impl MockExecutor {
    /// A mock over `num_blocks` blocks of `block_size` slots with a `vocab`-wide output.
    pub fn new(num_blocks: usize, block_size: usize, vocab: usize) -> Self {
        MockExecutor {
            block_size,
            num_blocks,
            vocab,
            window: None,
            kv: HashMap::new(),
            step: 0,
            tokens_computed: 0,
            adapters: BTreeMap::new(),
            adapter_loads: 0,
        }
    }

    /// The same mock as a model whose every layer attends over `window` tokens: it reports
    /// the window in its [`KvGeometry`], reads only the window, and accepts [`NO_BLOCK`] holes
    /// before it.
    pub fn with_window(mut self, window: usize) -> Self {
        self.window = Some(window);
        self
    }

    /// Steps executed so far.
    pub fn num_steps(&self) -> u64 {
        self.step
    }

    /// Tokens computed over all steps (prefix-cache hits are not computed).
    pub fn tokens_computed(&self) -> usize {
        self.tokens_computed
    }

    /// The names of the adapters loaded now, by id.
    pub fn loaded_adapters(&self) -> &BTreeMap<AdapterId, String> {
        &self.adapters
    }

    /// Adapter loads so far (loading an evicted adapter again counts again).
    pub fn adapter_loads(&self) -> usize {
        self.adapter_loads
    }

    fn invalid(msg: String) -> ExecutorError {
        ExecutorError::InvalidBatch(msg)
    }

    /// Checks one sequence's table and reads the cached context its first token sees; returns
    /// that context's first position and its tokens.
    fn read_context(
        &self,
        i: usize,
        s: &SeqBatch,
        reads: &mut HashSet<(u32, usize)>,
    ) -> Result<(usize, Vec<u32>), ExecutorError> {
        if s.tokens.is_empty() {
            return Err(Self::invalid(format!("seq {i}: no tokens")));
        }
        let end = s.start_pos + s.tokens.len();
        let want = end.div_ceil(self.block_size);
        if s.block_table.len() != want {
            return Err(Self::invalid(format!(
                "seq {i}: {} blocks for {end} positions",
                s.block_table.len()
            )));
        }
        let first = first_key(self.window, s.start_pos);
        let live = &s.block_table[first / self.block_size..];
        let held: Vec<u32> = s
            .block_table
            .iter()
            .copied()
            .filter(|&b| b != NO_BLOCK)
            .collect();
        let distinct: HashSet<u32> = held.iter().copied().collect();
        if distinct.len() != held.len()
            || live.contains(&NO_BLOCK)
            || held.iter().any(|&b| b as usize >= self.num_blocks)
        {
            return Err(Self::invalid(format!(
                "seq {i}: bad block table {:?}",
                s.block_table
            )));
        }
        let mut ctx = Vec::with_capacity(end - first);
        for pos in first..s.start_pos {
            let (b, off) = (s.block_table[pos / self.block_size], pos % self.block_size);
            let slot = self.kv.get(&b).and_then(|v| v[off]);
            match slot {
                Some(sl) if sl.pos == pos && sl.step < self.step => ctx.push(sl.token),
                other => {
                    return Err(Self::invalid(format!(
                        "seq {i}: position {pos} in block {b} holds {other:?}"
                    )))
                }
            }
            reads.insert((b, off));
        }
        Ok((first, ctx))
    }

    fn validate(&self, input: &BatchInput) -> Result<Vec<(usize, Vec<u32>)>, ExecutorError> {
        let mut reads = HashSet::new();
        let mut writes = HashSet::new();
        let mut contexts = Vec::with_capacity(input.seqs.len());
        for (i, s) in input.seqs.iter().enumerate() {
            if let Some(a) = s.adapter.filter(|a| !self.adapters.contains_key(a)) {
                return Err(Self::invalid(format!("seq {i}: LoRA {a} is not loaded")));
            }
            let (first, mut ctx) = self.read_context(i, s, &mut reads)?;
            for (k, &t) in s.tokens.iter().enumerate() {
                let pos = s.start_pos + k;
                let slot = (s.block_table[pos / self.block_size], pos % self.block_size);
                if !writes.insert(slot) {
                    return Err(Self::invalid(format!(
                        "seq {i}: slot {slot:?} written twice"
                    )));
                }
                ctx.push(t);
            }
            contexts.push((first, ctx));
        }
        if let Some(slot) = reads.intersection(&writes).next() {
            return Err(Self::invalid(format!(
                "slot {slot:?} read and written in one step"
            )));
        }
        Ok(contexts)
    }
}

impl Executor for MockExecutor {
    fn execute(&mut self, input: &BatchInput) -> Result<BatchOutput, ExecutorError> {
        let contexts = self.validate(input)?;
        let mut logits = Vec::new();
        for (s, (first, ctx)) in input.seqs.iter().zip(&contexts) {
            for (k, &token) in s.tokens.iter().enumerate() {
                let pos = s.start_pos + k;
                let b = s.block_table[pos / self.block_size];
                let block = self
                    .kv
                    .entry(b)
                    .or_insert_with(|| vec![None; self.block_size]);
                block[pos % self.block_size] = Some(Slot {
                    token,
                    pos,
                    step: self.step,
                });
            }
            self.tokens_computed += s.tokens.len();
            let end = s.start_pos + s.tokens.len();
            for pos in end - s.num_logits.min(s.tokens.len())..end {
                let mut row = vec![0.0f32; self.vocab];
                let key = first_key(self.window, pos);
                let seen = &ctx[key - first..=pos - first];
                row[reference_next_token_at(key, seen, self.vocab) as usize] = 1.0;
                logits.extend_from_slice(&row);
            }
        }
        self.step += 1;
        Ok(BatchOutput {
            vocab: self.vocab,
            logits,
        })
    }

    fn vocab_size(&self) -> usize {
        self.vocab
    }

    /// A full block's slots as bytes (token `u32` LE, position `u64` LE per slot); `None` for
    /// a block with an unwritten slot.
    fn kv_block_bytes(&self, block: u32) -> Option<Vec<u8>> {
        let slots = self.kv.get(&block)?;
        let mut out = Vec::with_capacity(slots.len() * SLOT_BYTES);
        for slot in slots {
            let slot = slot.as_ref()?;
            out.extend_from_slice(&slot.token.to_le_bytes());
            out.extend_from_slice(&(slot.pos as u64).to_le_bytes());
        }
        Some(out)
    }

    /// Writes a block copied by [`Executor::kv_block_bytes`] back, as if an earlier step had
    /// computed it (the copy counts as a step, so the next step may read it).
    fn set_kv_block_bytes(&mut self, block: u32, bytes: &[u8]) -> bool {
        if block as usize >= self.num_blocks || bytes.len() != self.block_size * SLOT_BYTES {
            return false;
        }
        let step = self.step;
        self.step += 1;
        let slots = bytes
            .chunks_exact(SLOT_BYTES)
            .map(|c| {
                let mut token = [0u8; 4];
                let mut pos = [0u8; 8];
                token.copy_from_slice(&c[..4]);
                pos.copy_from_slice(&c[4..]);
                Some(Slot {
                    token: u32::from_le_bytes(token),
                    pos: u64::from_le_bytes(pos) as usize,
                    step,
                })
            })
            .collect();
        self.kv.insert(block, slots);
        true
    }

    fn kv_geometry(&self) -> KvGeometry {
        KvGeometry {
            block_size: self.block_size,
            num_blocks: self.num_blocks,
            attention_window: self.window,
        }
    }

    fn load_adapter(
        &mut self,
        id: AdapterId,
        name: &str,
        path: &Path,
    ) -> Result<usize, ExecutorError> {
        let file = path.file_name().and_then(|f| f.to_str()).unwrap_or("");
        let digits = file.len() - file.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        let rank = file[file.len() - digits..].parse().map_err(|_| {
            ExecutorError::Adapter(format!(
                "{} is not a mock adapter (its name must end in its rank)",
                path.display()
            ))
        })?;
        self.adapters.insert(id, name.to_string());
        self.adapter_loads += 1;
        Ok(rank)
    }

    fn unload_adapter(&mut self, id: AdapterId) {
        self.adapters.remove(&id);
    }
}
