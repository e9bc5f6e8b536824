//! Perplexity and KL divergence, computed the way llama.cpp's `llama-perplexity` computes them.
//!
//! ```text
//!   tokens:  t0 t1 t2 ... (the whole text, BOS added only if the tokenizer adds it)
//!   windows: [0, ctx) [ctx, 2ctx) ...       non-overlapping, each from an empty KV cache;
//!            if the model adds BOS, the first token of every window is replaced by BOS
//!   scored:  logits at positions ctx/2 .. ctx-2 predict tokens ctx/2+1 .. ctx-1
//!            (ctx - 1 - ctx/2 tokens per window; the first half is context only)
//! ```
//!
//! * [`windows`] cuts the token stream; [`evaluate`] runs every window through a
//!   [`WindowModel`] (a [`RunnerModel`] for a real model) and hands each scored position's
//!   log-probabilities to a callback.
//! * [`NllStats`] accumulates negative log-likelihoods: PPL = exp(mean NLL), with llama.cpp's
//!   error estimate `PPL * sqrt(var(NLL) / (n - 1))`.
//! * [`LogProbWriter`] / [`LogProbReader`] store the base model's top-k log-probabilities
//!   compactly; [`KlStats`] compares another model against them (mean KL divergence, its
//!   error, and how often both models agree on the most likely token).

use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;

use kestrel_engine::executor::{BatchInput, SeqBatch};
use kestrel_model::runner::ModelRunner;

/// Magic bytes at the start of a log-probability file.
pub const LOGPROB_MAGIC: &[u8; 8] = b"KSTLOGP1";

/// Why a perplexity run failed.
#[derive(Debug, thiserror::Error)]
pub enum PerplexityError {
    #[error("the text has {tokens} tokens; at least {needed} (2 x ctx) are needed")]
    TooFewTokens { tokens: usize, needed: usize },
    #[error("ctx must be at least 4 (got {0})")]
    BadContext(usize),
    #[error("model execution failed: {0}")]
    Execute(String),
    #[error("log-prob file {path}: {reason}")]
    LogProbFile { path: String, reason: String },
    #[error("log-prob file does not match this run: {0}")]
    Mismatch(String),
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
}

/// Anything that returns the logits of every position of a window run from an empty cache.
pub trait WindowModel {
    /// Vocabulary size (width of a logits row).
    fn vocab(&self) -> usize;
    /// Logits `[tokens.len(), vocab]` for `tokens` at positions `0..tokens.len()`.
    fn window_logits(&mut self, tokens: &[u32]) -> Result<Vec<f32>, PerplexityError>;
}

/// A [`ModelRunner`] fed a window in chunks of at most `batch` tokens.
pub struct RunnerModel {
    runner: ModelRunner,
    batch: usize,
    block_table: Vec<u32>,
    adapter: Option<kestrel_engine::adapter_id::AdapterId>,
}

impl RunnerModel {
    /// `runner` must have enough KV blocks for one window (its whole cache is the window's).
    pub fn new(runner: ModelRunner, batch: usize) -> RunnerModel {
        let blocks = runner.kv_shape().num_blocks as u32;
        RunnerModel {
            runner,
            batch: batch.max(1),
            block_table: (0..blocks).collect(),
            adapter: None,
        }
    }

    /// Score with the runner's LoRA adapter `adapter`.
    pub fn with_adapter(mut self, adapter: Option<kestrel_engine::adapter_id::AdapterId>) -> Self {
        self.adapter = adapter;
        self
    }
}

impl WindowModel for RunnerModel {
    fn vocab(&self) -> usize {
        self.runner.model().dims().vocab
    }

    fn window_logits(&mut self, tokens: &[u32]) -> Result<Vec<f32>, PerplexityError> {
        let mut logits = Vec::with_capacity(tokens.len() * self.vocab());
        for (i, chunk) in tokens.chunks(self.batch).enumerate() {
            let seq = SeqBatch {
                request_id: 0,
                tokens: chunk.to_vec(),
                start_pos: i * self.batch,
                block_table: self.block_table.clone(),
                num_logits: 1,
                adapter: self.adapter,
            };
            let out = self
                .runner
                .execute_all_logits(&BatchInput { seqs: vec![seq] })
                .map_err(|e| PerplexityError::Execute(e.to_string()))?;
            logits.extend_from_slice(&out.logits);
        }
        Ok(logits)
    }
}

/// Cut `tokens` into at most `max_chunks` non-overlapping windows of `ctx` tokens (a partial
/// tail is dropped). With `bos`, each window's first token is replaced by it.
pub fn windows(
    tokens: &[u32],
    ctx: usize,
    bos: Option<u32>,
    max_chunks: Option<usize>,
) -> Result<Vec<Vec<u32>>, PerplexityError> {
    if ctx < 4 {
        return Err(PerplexityError::BadContext(ctx));
    }
    if tokens.len() < 2 * ctx {
        return Err(PerplexityError::TooFewTokens {
            tokens: tokens.len(),
            needed: 2 * ctx,
        });
    }
    let n = (tokens.len() / ctx).min(max_chunks.unwrap_or(usize::MAX));
    Ok(tokens
        .chunks_exact(ctx)
        .take(n)
        .map(|w| {
            let mut w = w.to_vec();
            if let Some(b) = bos {
                w[0] = b;
            }
            w
        })
        .collect())
}

/// Index of the first position whose logits are scored in a window of `ctx` tokens.
pub fn first_scored(ctx: usize) -> usize {
    ctx / 2
}

/// Scored tokens per window of `ctx` tokens.
pub fn scored_per_window(ctx: usize) -> usize {
    ctx - 1 - first_scored(ctx)
}

/// `out = log_softmax(logits)`, accumulated in `f64`.
pub fn log_softmax(logits: &[f32], out: &mut Vec<f32>) {
    let max = logits.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    let sum: f64 = logits.iter().map(|&v| ((v - max) as f64).exp()).sum();
    let log_z = max as f64 + sum.ln();
    out.clear();
    out.extend(logits.iter().map(|&v| (v as f64 - log_z) as f32));
}

/// One scored position: the log-probabilities over the vocabulary and the actual next token.
pub struct ScoredToken<'a> {
    pub window: usize,
    pub logprobs: &'a [f32],
    pub target: u32,
}

/// Run every window through `model`; for each scored position call `on_token`, and after each
/// window call `on_window(index, seconds)`.
pub fn evaluate(
    model: &mut dyn WindowModel,
    windows: &[Vec<u32>],
    on_token: &mut dyn FnMut(&ScoredToken<'_>) -> Result<(), PerplexityError>,
    on_window: &mut dyn FnMut(usize, f64),
) -> Result<(), PerplexityError> {
    let vocab = model.vocab();
    let mut logprobs = Vec::with_capacity(vocab);
    for (w, tokens) in windows.iter().enumerate() {
        let start = std::time::Instant::now();
        let logits = model.window_logits(tokens)?;
        let first = first_scored(tokens.len());
        for pos in first..tokens.len() - 1 {
            log_softmax(&logits[pos * vocab..(pos + 1) * vocab], &mut logprobs);
            on_token(&ScoredToken {
                window: w,
                logprobs: &logprobs,
                target: tokens[pos + 1],
            })?;
        }
        on_window(w, start.elapsed().as_secs_f64());
    }
    Ok(())
}

/// Running sums of per-token negative log-likelihoods.
#[derive(Debug, Clone, Copy, Default)]
pub struct NllStats {
    sum: f64,
    sum2: f64,
    count: usize,
}

impl NllStats {
    /// Add one token's NLL (`-log p(target)`).
    pub fn push(&mut self, nll: f64) {
        self.sum += nll;
        self.sum2 += nll * nll;
        self.count += 1;
    }

    pub fn count(&self) -> usize {
        self.count
    }

    /// exp(mean NLL).
    pub fn ppl(&self) -> f64 {
        (self.sum / self.count as f64).exp()
    }

    /// llama.cpp's standard error of the PPL: `ppl * sqrt((E[nll²] - E[nll]²) / (n - 1))`;
    /// `None` with fewer than two tokens or zero variance.
    pub fn ppl_error(&self) -> Option<f64> {
        let (mean, var) = mean_var(self.sum, self.sum2, self.count)?;
        Some(self.ppl() * (var / (self.count - 1) as f64).sqrt()).filter(|_| mean.is_finite())
    }
}

/// Mean and (population) variance from sums, if `n >= 2` and the variance is positive.
fn mean_var(sum: f64, sum2: f64, n: usize) -> Option<(f64, f64)> {
    if n < 2 {
        return None;
    }
    let mean = sum / n as f64;
    let var = sum2 / n as f64 - mean * mean;
    (var > 0.0).then_some((mean, var))
}

/// The `k` largest log-probabilities, descending (ties: lower id first).
pub fn top_k(logprobs: &[f32], k: usize) -> Vec<(u32, f32)> {
    let mut idx: Vec<u32> = (0..logprobs.len() as u32).collect();
    let k = k.min(idx.len());
    let cmp = |a: &u32, b: &u32| {
        logprobs[*b as usize]
            .total_cmp(&logprobs[*a as usize])
            .then(a.cmp(b))
    };
    if k < idx.len() {
        idx.select_nth_unstable_by(k, cmp);
        idx.truncate(k);
    }
    idx.sort_by(cmp);
    idx.into_iter().map(|i| (i, logprobs[i as usize])).collect()
}

/// KL(P‖Q) where P is known only through its top-k entries `base` (the rest of its mass is
/// one bucket) and Q is a full log-probability row. Equal to the full KL divergence when the
/// top-k hold all of P's mass, a lower bound otherwise.
pub fn kl_divergence_topk(base: &[(u32, f32)], logq: &[f32]) -> f64 {
    let mut kl = 0.0f64;
    let (mut p_top, mut q_top) = (0.0f64, 0.0f64);
    for &(id, lp) in base {
        let (lp, lq) = (lp as f64, logq[id as usize] as f64);
        let p = lp.exp();
        kl += p * (lp - lq);
        p_top += p;
        q_top += lq.exp();
    }
    let p_rest = (1.0 - p_top).max(0.0);
    if p_rest > 1e-12 {
        let q_rest = (1.0 - q_top).max(1e-30);
        kl += p_rest * (p_rest.ln() - q_rest.ln());
    }
    kl.max(0.0)
}

/// Running KL divergence and top-1 agreement statistics.
#[derive(Debug, Clone, Copy, Default)]
pub struct KlStats {
    sum: f64,
    sum2: f64,
    same_top1: usize,
    count: usize,
}

impl KlStats {
    /// Compare one position: the base model's top-k against this model's log-probs.
    pub fn push(&mut self, base: &[(u32, f32)], logq: &[f32]) {
        let kl = kl_divergence_topk(base, logq);
        self.sum += kl;
        self.sum2 += kl * kl;
        self.count += 1;
        let ours = top_k(logq, 1);
        if let (Some(b), Some(o)) = (base.first(), ours.first()) {
            self.same_top1 += usize::from(b.0 == o.0);
        }
    }

    pub fn count(&self) -> usize {
        self.count
    }

    /// Mean KL divergence (nats).
    pub fn mean(&self) -> f64 {
        self.sum / self.count.max(1) as f64
    }

    /// Standard error of [`KlStats::mean`].
    pub fn mean_error(&self) -> f64 {
        mean_var(self.sum, self.sum2, self.count)
            .map_or(0.0, |(_, v)| (v / (self.count - 1) as f64).sqrt())
    }

    /// Percentage of positions where both models' most likely token is the same.
    pub fn top1_percent(&self) -> f64 {
        100.0 * self.same_top1 as f64 / self.count.max(1) as f64
    }

    /// Standard error of [`KlStats::top1_percent`] (binomial).
    pub fn top1_percent_error(&self) -> f64 {
        let p = self.same_top1 as f64 / self.count.max(1) as f64;
        100.0 * (p * (1.0 - p) / (self.count.max(2) - 1) as f64).sqrt()
    }
}

/// What a log-probability file describes, checked when it is read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogProbHeader {
    pub vocab: u32,
    pub k: u32,
    pub ctx: u32,
    /// The evaluated windows, concatenated (`n_windows * ctx` tokens).
    pub tokens: Vec<u32>,
}

/// Writes the base model's top-k log-probabilities of every scored position.
///
/// ```text
///   "KSTLOGP1" | vocab u32 | k u32 | ctx u32 | n_tokens u64 | tokens u32 × n_tokens
///   then per scored position: ids u32 × k | logprobs f32 × k   (all little-endian)
/// ```
pub struct LogProbWriter {
    out: BufWriter<std::fs::File>,
    k: usize,
}

impl LogProbWriter {
    /// Create `path` and write `header`.
    pub fn create(path: &Path, header: &LogProbHeader) -> Result<LogProbWriter, PerplexityError> {
        let mut out = BufWriter::new(std::fs::File::create(path)?);
        out.write_all(LOGPROB_MAGIC)?;
        for v in [header.vocab, header.k, header.ctx] {
            out.write_all(&v.to_le_bytes())?;
        }
        out.write_all(&(header.tokens.len() as u64).to_le_bytes())?;
        out.write_all(bytemuck::cast_slice(&header.tokens))?;
        Ok(LogProbWriter {
            out,
            k: header.k as usize,
        })
    }

    /// Append one position's top-k of `logprobs`.
    pub fn push(&mut self, logprobs: &[f32]) -> Result<(), PerplexityError> {
        let top = top_k(logprobs, self.k);
        let ids: Vec<u32> = top.iter().map(|t| t.0).collect();
        let lps: Vec<f32> = top.iter().map(|t| t.1).collect();
        self.out.write_all(bytemuck::cast_slice(&ids))?;
        self.out.write_all(bytemuck::cast_slice(&lps))?;
        Ok(())
    }

    /// Flush everything to disk.
    pub fn finish(mut self) -> Result<(), PerplexityError> {
        self.out.flush()?;
        Ok(())
    }
}

/// Reads a file written by [`LogProbWriter`], one position at a time.
pub struct LogProbReader {
    input: BufReader<std::fs::File>,
    header: LogProbHeader,
    buf: Vec<u8>,
    path: String,
}

impl LogProbReader {
    /// Open `path` and read its header.
    pub fn open(path: &Path) -> Result<LogProbReader, PerplexityError> {
        let name = path.display().to_string();
        let bad = |reason: String| PerplexityError::LogProbFile {
            path: name.clone(),
            reason,
        };
        let mut input = BufReader::new(std::fs::File::open(path)?);
        let mut magic = [0u8; 8];
        input
            .read_exact(&mut magic)
            .map_err(|e| bad(e.to_string()))?;
        if &magic != LOGPROB_MAGIC {
            return Err(bad("not a Kestrel log-prob file (bad magic)".into()));
        }
        let mut word = [0u8; 4];
        let mut read_u32 = |input: &mut BufReader<std::fs::File>| -> Result<u32, PerplexityError> {
            input
                .read_exact(&mut word)
                .map_err(|e| bad(e.to_string()))?;
            Ok(u32::from_le_bytes(word))
        };
        let (vocab, k, ctx) = (
            read_u32(&mut input)?,
            read_u32(&mut input)?,
            read_u32(&mut input)?,
        );
        let mut len = [0u8; 8];
        input.read_exact(&mut len).map_err(|e| bad(e.to_string()))?;
        let n = u64::from_le_bytes(len) as usize;
        if n > 1 << 32 {
            return Err(bad(format!("implausible token count {n}")));
        }
        let mut raw = vec![0u8; n * 4];
        input.read_exact(&mut raw).map_err(|e| bad(e.to_string()))?;
        let tokens = raw
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let header = LogProbHeader {
            vocab,
            k,
            ctx,
            tokens,
        };
        Ok(LogProbReader {
            input,
            header,
            buf: vec![0u8; k as usize * 8],
            path: name,
        })
    }

    pub fn header(&self) -> &LogProbHeader {
        &self.header
    }

    /// The next position's top-k (id, log-prob), descending.
    pub fn next_position(&mut self) -> Result<Vec<(u32, f32)>, PerplexityError> {
        self.input
            .read_exact(&mut self.buf)
            .map_err(|e| PerplexityError::LogProbFile {
                path: self.path.clone(),
                reason: format!("truncated: {e}"),
            })?;
        let k = self.header.k as usize;
        let word = |i: usize| {
            [
                self.buf[4 * i],
                self.buf[4 * i + 1],
                self.buf[4 * i + 2],
                self.buf[4 * i + 3],
            ]
        };
        Ok((0..k)
            .map(|i| (u32::from_le_bytes(word(i)), f32::from_le_bytes(word(k + i))))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Uniform(usize);

    impl WindowModel for Uniform {
        fn vocab(&self) -> usize {
            self.0
        }
        fn window_logits(&mut self, tokens: &[u32]) -> Result<Vec<f32>, PerplexityError> {
            Ok(vec![0.25; tokens.len() * self.0])
        }
    }

    #[test]
    fn uniform_logits_give_ppl_equal_to_vocab() {
        let tokens: Vec<u32> = (0..100).map(|i| i % 7).collect();
        let ws = windows(&tokens, 16, None, None).unwrap();
        assert_eq!(ws.len(), 6);
        let mut stats = NllStats::default();
        let mut per_window = Vec::new();
        evaluate(
            &mut Uniform(50),
            &ws,
            &mut |t| {
                stats.push(-(t.logprobs[t.target as usize] as f64));
                Ok(())
            },
            &mut |w, _| per_window.push(w),
        )
        .unwrap();
        assert_eq!(stats.count(), 6 * scored_per_window(16));
        assert_eq!(scored_per_window(16), 7);
        assert!((stats.ppl() - 50.0).abs() < 1e-3, "{}", stats.ppl());
        assert_eq!(
            stats.ppl_error(),
            None,
            "zero variance has no error estimate"
        );
        assert_eq!(per_window, vec![0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn windows_replace_first_token_with_bos_and_respect_limits() {
        let tokens: Vec<u32> = (10..50).collect();
        let ws = windows(&tokens, 8, Some(1), Some(3)).unwrap();
        assert_eq!(
            ws,
            vec![
                vec![1, 11, 12, 13, 14, 15, 16, 17],
                vec![1, 19, 20, 21, 22, 23, 24, 25],
                vec![1, 27, 28, 29, 30, 31, 32, 33]
            ]
        );
        assert!(matches!(
            windows(&tokens, 32, None, None),
            Err(PerplexityError::TooFewTokens {
                tokens: 40,
                needed: 64
            })
        ));
        assert!(matches!(
            windows(&tokens, 2, None, None),
            Err(PerplexityError::BadContext(2))
        ));
    }

    #[test]
    fn hand_computed_ppl_and_error() {
        // NLLs 1 and 3: mean 2, E[x²] = 5, var = 1, error = e² * sqrt(1 / 1).
        let mut s = NllStats::default();
        s.push(1.0);
        s.push(3.0);
        assert!((s.ppl() - 2f64.exp()).abs() < 1e-12);
        assert!((s.ppl_error().unwrap() - 2f64.exp()).abs() < 1e-12);
    }

    #[test]
    fn log_softmax_matches_hand_values() {
        let mut out = Vec::new();
        log_softmax(&[0.0, (3f32).ln()], &mut out);
        assert!((out[0] - (0.25f32).ln()).abs() < 1e-6);
        assert!((out[1] - (0.75f32).ln()).abs() < 1e-6);
    }

    #[test]
    fn kl_is_zero_for_identical_and_matches_closed_form() {
        let p = [(0.5f32).ln(), (0.25f32).ln(), (0.25f32).ln()];
        let q = [(0.25f32).ln(), (0.5f32).ln(), (0.25f32).ln()];
        let full = top_k(&p, 3);
        assert!(kl_divergence_topk(&full, &p).abs() < 1e-7);
        let expected = 0.5 * (2f64).ln() + 0.25 * (0.5f64).ln();
        assert!((kl_divergence_topk(&full, &q) - expected).abs() < 1e-6);
        // Top-1 only: buckets {0} and rest: P = (.5, .5), Q = (.25, .75).
        let bucketed = 0.5 * (2f64).ln() + 0.5 * (0.5f64 / 0.75).ln();
        assert!((kl_divergence_topk(&full[..1], &q) - bucketed).abs() < 1e-6);
        let mut stats = KlStats::default();
        stats.push(&full, &q);
        stats.push(&full, &p);
        assert_eq!(stats.top1_percent(), 50.0);
        assert!((stats.mean() - expected / 2.0).abs() < 1e-6);
    }

    #[test]
    fn top_k_orders_descending_with_low_ids_first_on_ties() {
        assert_eq!(
            top_k(&[0.1, 0.5, 0.5, -1.0], 3),
            vec![(1, 0.5), (2, 0.5), (0, 0.1)]
        );
    }

    #[test]
    fn logprob_file_round_trips() {
        let dir = std::env::temp_dir().join(format!("kestrel-lp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("base.bin");
        let header = LogProbHeader {
            vocab: 4,
            k: 2,
            ctx: 4,
            tokens: vec![1, 2, 3, 0],
        };
        let mut w = LogProbWriter::create(&path, &header).unwrap();
        w.push(&[-3.0, -0.1, -2.0, -5.0]).unwrap();
        w.finish().unwrap();
        let mut r = LogProbReader::open(&path).unwrap();
        assert_eq!(r.header(), &header);
        assert_eq!(r.next_position().unwrap(), vec![(1, -0.1), (2, -2.0)]);
        assert!(r.next_position().is_err(), "reading past the end fails");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
