//! Turning one row of logits into one token.
//!
//! [`SamplingParams`] is the validated description of how a request samples;
//! [`Sampler`] owns a seeded ChaCha RNG and scratch buffers and applies, in order:
//!
//! ```text
//! logits ─► logit bias (OpenAI `logit_bias`) ─► before `min_tokens`: stop/EOS ids to -inf
//!        ─► repetition penalty (prompt + generated, HF/vLLM: divide > 0, multiply < 0)
//!        ─► frequency / presence penalty (generated only, OpenAI: l -= f·count + p·[count > 0])
//!        ─► temperature == 0 ? argmax (ties → lowest id)
//!        ─► / temperature ─► top-k ─► top-p ─► min-p ─► categorical draw
//! ```
//!
//! Top-k uses partial selection (`select_nth_unstable`) and top-p a quickselect-style search
//! for the nucleus boundary, so a 49k vocabulary is never sorted; exponentials are computed once
//! per step. [`logprobs`] computes log-softmax values for the chosen token
//! and the top alternatives.

use std::cmp::Ordering;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::logit_bias::{LogitBias, LogitBiasError};

/// Most alternatives a request may ask [`logprobs`] for.
pub const MAX_LOGPROBS: usize = 20;

/// Temperatures below this are treated as greedy decoding.
const GREEDY_EPSILON: f32 = 1e-5;

/// How a request samples its tokens. Build one, then call [`SamplingParams::validate`] (or
/// [`Sampler::new`], which validates).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SamplingParams {
    /// Softmax temperature; `0` means greedy (argmax).
    pub temperature: f32,
    /// Keep only the `k` most likely tokens; `None` disables.
    pub top_k: Option<usize>,
    /// Nucleus sampling mass in `(0, 1]`; `1` disables.
    pub top_p: f32,
    /// Drop tokens whose probability is below `min_p` times the top probability; `0` disables.
    pub min_p: f32,
    /// HF-style repetition penalty over prompt and generated tokens; `1` disables.
    pub repetition_penalty: f32,
    /// OpenAI frequency penalty in `[-2, 2]` over generated tokens.
    pub frequency_penalty: f32,
    /// OpenAI presence penalty in `[-2, 2]` over generated tokens.
    pub presence_penalty: f32,
    /// RNG seed; `None` draws one from the OS.
    pub seed: Option<u64>,
    /// Most tokens to generate.
    pub max_tokens: usize,
    /// Extra token ids that end generation (besides the tokenizer's end-of-generation ids).
    pub stop_token_ids: Vec<u32>,
    /// Strings that end generation; the text is cut before them.
    pub stop: Vec<String>,
    /// Keep generating past end-of-generation tokens (benchmarks).
    pub ignore_eos: bool,
    /// Number of top alternatives to report per token; `None` reports none.
    pub logprobs: Option<usize>,
    /// The grammar the output must follow (structured output); `None`: free text.
    #[serde(default)]
    pub grammar: Option<crate::constraint::GrammarSpec>,
    /// Added to the raw logits before anything else.
    #[serde(default)]
    pub logit_bias: LogitBias,
    /// End-of-generation and stop tokens cannot be sampled before this many tokens.
    #[serde(default)]
    pub min_tokens: usize,
    /// Keep the stop string that ended generation in the text.
    #[serde(default)]
    pub include_stop_str_in_output: bool,
    /// Leave special tokens out of the text (default); `false` keeps them (e.g. the EOS text).
    #[serde(default = "yes")]
    pub skip_special_tokens: bool,
}

fn yes() -> bool {
    true
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 1.0,
            top_k: None,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            seed: None,
            max_tokens: 256,
            stop_token_ids: Vec::new(),
            stop: Vec::new(),
            ignore_eos: false,
            logprobs: None,
            logit_bias: LogitBias::default(),
            min_tokens: 0,
            include_stop_str_in_output: false,
            skip_special_tokens: true,
            grammar: None,
        }
    }
}

/// A sampling parameter outside its allowed range.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SamplingParamError {
    #[error("temperature must be a finite number >= 0, got {0}")]
    Temperature(f32),
    #[error("top_k must be at least 1 (omit it to disable top-k)")]
    TopK,
    #[error("top_p must be in (0, 1], got {0}")]
    TopP(f32),
    #[error("min_p must be in [0, 1], got {0}")]
    MinP(f32),
    #[error("repetition_penalty must be a finite number > 0, got {0}")]
    RepetitionPenalty(f32),
    #[error("frequency_penalty must be in [-2, 2], got {0}")]
    FrequencyPenalty(f32),
    #[error("presence_penalty must be in [-2, 2], got {0}")]
    PresencePenalty(f32),
    #[error("max_tokens must be at least 1")]
    MaxTokens,
    #[error("logprobs must be at most {MAX_LOGPROBS}, got {0}")]
    Logprobs(usize),
    #[error("stop strings must not be empty")]
    EmptyStop,
    #[error(transparent)]
    LogitBias(#[from] LogitBiasError),
}

impl SamplingParamError {
    /// The name of the offending parameter, as it appears on the wire.
    pub fn param(&self) -> &'static str {
        match self {
            SamplingParamError::Temperature(_) => "temperature",
            SamplingParamError::TopK => "top_k",
            SamplingParamError::TopP(_) => "top_p",
            SamplingParamError::MinP(_) => "min_p",
            SamplingParamError::RepetitionPenalty(_) => "repetition_penalty",
            SamplingParamError::FrequencyPenalty(_) => "frequency_penalty",
            SamplingParamError::PresencePenalty(_) => "presence_penalty",
            SamplingParamError::MaxTokens => "max_tokens",
            SamplingParamError::Logprobs(_) => "logprobs",
            SamplingParamError::EmptyStop => "stop",
            SamplingParamError::LogitBias(_) => "logit_bias",
        }
    }
}

/// A logits row that cannot be sampled from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum SampleError {
    #[error("logits row is empty")]
    EmptyLogits,
    #[error("every logit is -inf or NaN; no token can be chosen")]
    NoFiniteLogits,
    #[error("token {token} is outside a vocabulary of {vocab}")]
    TokenOutOfRange { token: u32, vocab: usize },
    /// The request's grammar failed (structured output).
    #[error(transparent)]
    Constraint(#[from] crate::constraint::ConstraintError),
}

impl SamplingParams {
    /// Checks every field's range; the first violation is returned.
    pub fn validate(&self) -> Result<(), SamplingParamError> {
        let t = self.temperature;
        if !t.is_finite() || t < 0.0 {
            return Err(SamplingParamError::Temperature(t));
        }
        if self.top_k == Some(0) {
            return Err(SamplingParamError::TopK);
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(SamplingParamError::TopP(self.top_p));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return Err(SamplingParamError::MinP(self.min_p));
        }
        let rp = self.repetition_penalty;
        if !rp.is_finite() || rp <= 0.0 {
            return Err(SamplingParamError::RepetitionPenalty(rp));
        }
        if !(-2.0..=2.0).contains(&self.frequency_penalty) {
            return Err(SamplingParamError::FrequencyPenalty(self.frequency_penalty));
        }
        if !(-2.0..=2.0).contains(&self.presence_penalty) {
            return Err(SamplingParamError::PresencePenalty(self.presence_penalty));
        }
        if self.max_tokens == 0 {
            return Err(SamplingParamError::MaxTokens);
        }
        match self.logprobs {
            Some(n) if n > MAX_LOGPROBS => return Err(SamplingParamError::Logprobs(n)),
            _ => {}
        }
        if self.stop.iter().any(String::is_empty) {
            return Err(SamplingParamError::EmptyStop);
        }
        self.logit_bias.validate()?;
        Ok(())
    }

    /// Whether these parameters decode greedily.
    pub fn is_greedy(&self) -> bool {
        self.temperature < GREEDY_EPSILON
    }

    /// Whether `token` ends generation, given the tokenizer's end-of-generation ids.
    pub fn is_stop_token(&self, token: u32, eos_ids: &[u32]) -> bool {
        self.stop_token_ids.contains(&token) || (!self.ignore_eos && eos_ids.contains(&token))
    }
}

/// The tokens a request has seen so far: its prompt followed by what it generated.
#[derive(Debug, Clone, Copy)]
pub struct TokenHistory<'a> {
    tokens: &'a [u32],
    prompt_len: usize,
}

impl<'a> TokenHistory<'a> {
    /// `tokens` is prompt + generated; the first `prompt_len` (clamped) are the prompt.
    pub fn new(tokens: &'a [u32], prompt_len: usize) -> Self {
        TokenHistory {
            tokens,
            prompt_len: prompt_len.min(tokens.len()),
        }
    }

    /// Prompt and generated tokens together.
    pub fn all(&self) -> &'a [u32] {
        self.tokens
    }

    /// Only the generated tokens.
    pub fn generated(&self) -> &'a [u32] {
        &self.tokens[self.prompt_len..]
    }
}

/// Vocabulary-sized working space of [`Sampler::sample`]. Samplers draw one at a time on
/// the engine thread, so the engine owns one and lends it to every request's sampler, rather
/// than each running request keeping its own (about 1.8 MB for a 152k-token vocabulary).
#[derive(Debug, Clone, Default)]
pub struct SamplerScratch {
    candidates: Vec<Candidate>,
    seen: Vec<u64>,
    counts: Vec<u32>,
}

/// Per-request sampler: parameters and a seeded RNG.
#[derive(Debug, Clone)]
pub struct Sampler {
    params: SamplingParams,
    seed: u64,
    rng: ChaCha8Rng,
    /// Ids that cannot be sampled before `min_tokens` tokens were generated.
    min_tokens_ban: Vec<u32>,
}

impl Sampler {
    /// Validates `params` and seeds the RNG from `params.seed` (or the OS when `None`).
    pub fn new(params: SamplingParams) -> Result<Self, SamplingParamError> {
        params.validate()?;
        Ok(Self::from_validated(params))
    }

    /// A sampler for parameters already validated (the engine's requests were, by
    /// [`crate::api::EngineRequest::new`]).
    pub(crate) fn from_validated(params: SamplingParams) -> Self {
        let seed = params.seed.unwrap_or_else(|| rand::thread_rng().gen());
        let min_tokens_ban = params.stop_token_ids.clone();
        Sampler {
            params,
            seed,
            rng: ChaCha8Rng::seed_from_u64(seed),
            min_tokens_ban,
        }
    }

    /// Also bans `eos_ids` until `min_tokens` tokens were generated (the stop token ids always
    /// are).
    pub fn with_eos_ids(mut self, eos_ids: &[u32]) -> Self {
        self.min_tokens_ban.extend_from_slice(eos_ids);
        self
    }

    /// The parameters this sampler was built with.
    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// The seed actually used (drawn from the OS when the request gave none).
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Picks the next token, working in `scratch` (any sampler's; its contents do not carry
    /// over). Penalties are applied to `logits` in place, so copy it first if raw [`logprobs`]
    /// are wanted.
    pub fn sample(
        &mut self,
        logits: &mut [f32],
        history: TokenHistory<'_>,
        scratch: &mut SamplerScratch,
    ) -> Result<u32, SampleError> {
        if logits.is_empty() {
            return Err(SampleError::EmptyLogits);
        }
        self.params.logit_bias.apply(logits);
        if history.generated().len() < self.params.min_tokens {
            for &t in &self.min_tokens_ban {
                if let Some(l) = logits.get_mut(t as usize) {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
        self.apply_penalties(logits, history, scratch);
        if self.params.is_greedy() {
            return argmax(logits).ok_or(SampleError::NoFiniteLogits);
        }
        self.filter_candidates(logits, &mut scratch.candidates)?;
        Ok(self.draw(&scratch.candidates))
    }

    fn apply_penalties(
        &self,
        logits: &mut [f32],
        history: TokenHistory<'_>,
        scratch: &mut SamplerScratch,
    ) {
        let rp = self.params.repetition_penalty;
        if rp != 1.0 {
            let seen = &mut scratch.seen;
            seen.clear();
            seen.resize(logits.len().div_ceil(64), 0);
            for &t in history.all() {
                let i = t as usize;
                if i >= logits.len() || seen[i / 64] & (1 << (i % 64)) != 0 {
                    continue;
                }
                seen[i / 64] |= 1 << (i % 64);
                let l = &mut logits[i];
                *l = if *l > 0.0 { *l / rp } else { *l * rp };
            }
        }
        let (fp, pp) = (self.params.frequency_penalty, self.params.presence_penalty);
        if fp == 0.0 && pp == 0.0 {
            return;
        }
        let counts = &mut scratch.counts;
        counts.clear();
        counts.resize(logits.len(), 0);
        for &t in history.generated() {
            if let Some(c) = counts.get_mut(t as usize) {
                *c += 1;
            }
        }
        for &t in history.generated() {
            let i = t as usize;
            if i < logits.len() && counts[i] > 0 {
                logits[i] -= fp * counts[i] as f32 + pp;
                counts[i] = 0;
            }
        }
    }

    /// Leaves the surviving tokens, with their unnormalized probabilities, in `cands`.
    fn filter_candidates(
        &self,
        logits: &[f32],
        cands: &mut Vec<Candidate>,
    ) -> Result<(), SampleError> {
        let max = logits
            .iter()
            .fold(f32::NEG_INFINITY, |m, &l| if l > m { l } else { m });
        if max == f32::NEG_INFINITY {
            return Err(SampleError::NoFiniteLogits);
        }
        let inv_t = 1.0 / self.params.temperature;
        cands.clear();
        cands.extend(
            logits
                .iter()
                .enumerate()
                .filter(|(_, l)| **l > f32::NEG_INFINITY)
                .map(|(i, &l)| Candidate {
                    id: i as u32,
                    logit: l,
                    weight: 0.0,
                }),
        );
        if let Some(k) = self.params.top_k {
            if k < cands.len() {
                cands.select_nth_unstable_by(k - 1, Candidate::better_first);
                cands.truncate(k);
            }
        }
        // Exponentials only for what survived top-k.
        for c in cands.iter_mut() {
            c.weight = ((c.logit - max) * inv_t).exp();
        }
        if self.params.top_p < 1.0 {
            keep_nucleus(cands, self.params.top_p);
        }
        if self.params.min_p > 0.0 {
            let top = cands.iter().fold(0.0f32, |m, c| m.max(c.weight));
            let threshold = self.params.min_p * top;
            cands.retain(|c| c.weight >= threshold);
        }
        Ok(())
    }

    /// Categorical draw over `cands` (non-empty, positive total weight: the best token has
    /// weight 1 and every filter keeps it).
    fn draw(&mut self, cands: &[Candidate]) -> u32 {
        let total: f64 = cands.iter().map(|c| f64::from(c.weight)).sum();
        let mut target = self.rng.gen::<f64>() * total;
        for c in cands {
            target -= f64::from(c.weight);
            if target < 0.0 {
                return c.id;
            }
        }
        // Rounding left a sliver of mass: it goes to the last candidate. The list is non-empty
        // because `filter_candidates` returned Ok and every filter keeps at least one token.
        cands[cands.len() - 1].id
    }
}

/// A token still in the running: its (penalized) logit and `exp((logit - max) / T)`.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    id: u32,
    logit: f32,
    weight: f32,
}

impl Candidate {
    /// Orders more likely tokens first, ties by ascending id (a strict total order).
    fn better_first(a: &Candidate, b: &Candidate) -> Ordering {
        b.logit.total_cmp(&a.logit).then(a.id.cmp(&b.id))
    }
}

/// Index of the largest logit, lowest id on ties; NaN is ignored. `None` if no logit is a number
/// greater than -inf.
pub fn argmax(logits: &[f32]) -> Option<u32> {
    let mut best = 0usize;
    let mut best_logit = f32::NEG_INFINITY;
    for (i, &l) in logits.iter().enumerate() {
        if l > best_logit {
            best = i;
            best_logit = l;
        }
    }
    (best_logit > f32::NEG_INFINITY).then_some(best as u32)
}

/// Keeps the smallest most-likely set whose probability mass reaches `top_p` (HF/vLLM: a token is
/// kept while the mass strictly before it is below `top_p`).
///
/// Nothing is sorted: a quickselect-style search halves the undecided range each round,
///
/// ```text
/// [ kept (mass counted) | undecided lo..hi, boundary inside | dropped ]
///   partition lo..hi at mid; if mass(lo..=mid) reaches what is still needed, the boundary is
///   in lo..=mid, otherwise everything up to mid is kept and the search continues above it
/// ```
///
/// so the whole search is O(n) expected, and only the last few candidates are sorted.
fn keep_nucleus(cands: &mut Vec<Candidate>, top_p: f32) {
    let total: f64 = cands.iter().map(|c| f64::from(c.weight)).sum();
    let mut needed = f64::from(top_p) * total;
    let (mut lo, mut hi) = (0, cands.len());
    while hi - lo > 16 {
        let mid = lo + (hi - lo) / 2;
        cands[lo..hi].select_nth_unstable_by(mid - lo, Candidate::better_first);
        let mass: f64 = cands[lo..=mid].iter().map(|c| f64::from(c.weight)).sum();
        if mass >= needed {
            hi = mid + 1;
        } else {
            needed -= mass;
            lo = mid + 1;
        }
    }
    cands[lo..hi].sort_unstable_by(Candidate::better_first);
    let mut mass = 0.0f64;
    for i in lo..hi {
        mass += f64::from(cands[i].weight);
        if mass >= needed {
            cands.truncate(i + 1);
            return;
        }
    }
    // Rounding kept the mass just short of `needed`: keep everything up to `hi`.
    cands.truncate(hi.max(1));
}

/// One token and its log-probability.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TokenLogprob {
    pub token: u32,
    pub logprob: f32,
}

/// The chosen token's log-probability and the `n` most likely alternatives (descending, ties by
/// ascending id).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Logprobs {
    pub chosen: TokenLogprob,
    pub top: Vec<TokenLogprob>,
}

/// Log-softmax of `logits` at `chosen`, plus the `top_n` best tokens. NaN logits count as -inf.
pub fn logprobs(logits: &[f32], chosen: u32, top_n: usize) -> Result<Logprobs, SampleError> {
    let vocab = logits.len();
    let chosen_logit = *logits
        .get(chosen as usize)
        .ok_or(SampleError::TokenOutOfRange {
            token: chosen,
            vocab,
        })?;
    let max = logits
        .iter()
        .filter(|l| !l.is_nan())
        .fold(f32::NEG_INFINITY, |a, &b| a.max(b));
    if max == f32::NEG_INFINITY {
        return Err(SampleError::NoFiniteLogits);
    }
    let sum: f64 = logits
        .iter()
        .filter(|l| !l.is_nan())
        .map(|&l| f64::from((l - max).exp()))
        .sum();
    let lse = max + sum.ln() as f32;
    let lp = |l: f32| {
        if l.is_nan() {
            f32::NEG_INFINITY
        } else {
            l - lse
        }
    };
    let pairs = top_pairs(logits, top_n.min(vocab), lp);
    Ok(Logprobs {
        chosen: TokenLogprob {
            token: chosen,
            logprob: lp(chosen_logit),
        },
        top: pairs
            .into_iter()
            .map(|(token, logprob)| TokenLogprob { token, logprob })
            .collect(),
    })
}

/// The `n` best `(id, lp(logit))` pairs in [`pair_desc`] order, kept in a list of `n` while
/// the vocabulary streams past: a result lives as long as the token's output event, so it
/// must not carry a vocabulary-sized allocation (collecting all pairs and truncating kept
/// one of 8 bytes per vocabulary entry behind every token's logprobs).
fn top_pairs(logits: &[f32], n: usize, lp: impl Fn(f32) -> f32) -> Vec<(u32, f32)> {
    let mut top: Vec<(u32, f32)> = Vec::with_capacity(n + 1);
    if n == 0 {
        return top;
    }
    for (i, &l) in logits.iter().enumerate() {
        let p = (i as u32, lp(l));
        let full = top.len() == n;
        if full
            && top
                .last()
                .is_some_and(|last| pair_desc(&p, last) != Ordering::Less)
        {
            continue;
        }
        let at = top.partition_point(|q| pair_desc(q, &p) == Ordering::Less);
        top.insert(at, p);
        top.truncate(n);
    }
    top
}

/// `(id, value)` pairs by descending value, ties by ascending id.
fn pair_desc(a: &(u32, f32), b: &(u32, f32)) -> Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logprobs_top_tokens_equal_a_full_sort_and_hold_no_vocabulary_sized_buffer() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for case in 0..50 {
            let vocab = 5 + case * 97;
            // Few distinct values, so ties are common; a NaN and a -inf here and there.
            let mut logits: Vec<f32> = (0..vocab)
                .map(|_| f32::from(rng.gen_range(0u8..12)) * 0.5)
                .collect();
            logits[vocab / 2] = f32::NAN;
            logits[vocab / 3] = f32::NEG_INFINITY;
            for top_n in [0, 1, 5, 20] {
                let got = logprobs(&logits, 0, top_n).unwrap();
                let mut all: Vec<(u32, f32)> = logits
                    .iter()
                    .enumerate()
                    .map(|(i, &l)| (i as u32, l))
                    .collect();
                all.sort_by(|a, b| {
                    let key = |x: f32| if x.is_nan() { f32::NEG_INFINITY } else { x };
                    key(b.1).total_cmp(&key(a.1)).then(a.0.cmp(&b.0))
                });
                let want: Vec<u32> = all.iter().take(top_n).map(|p| p.0).collect();
                let ids: Vec<u32> = got.top.iter().map(|t| t.token).collect();
                assert_eq!(ids, want, "vocab {vocab}, top {top_n}");
                assert!(
                    got.top.capacity() <= top_n + 1,
                    "top {top_n} holds room for {}",
                    got.top.capacity()
                );
            }
        }
    }

    /// The nucleus by full sort, as the definition states it.
    fn reference(cands: &[Candidate], top_p: f32) -> Vec<u32> {
        let mut sorted = cands.to_vec();
        sorted.sort_by(Candidate::better_first);
        let total: f64 = sorted.iter().map(|c| f64::from(c.weight)).sum();
        let mut mass = 0.0;
        let mut kept = Vec::new();
        for c in sorted {
            kept.push(c.id);
            mass += f64::from(c.weight);
            if mass >= f64::from(top_p) * total {
                break;
            }
        }
        kept.sort_unstable();
        kept
    }

    #[test]
    fn nucleus_search_matches_full_sort() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        for case in 0..300 {
            let n = [1, 2, 17, 100, 1000, 5000][case % 6];
            // Coarse logits make many ties, which must break by id.
            let cands: Vec<Candidate> = (0..n)
                .map(|i| {
                    let logit = (rng.gen_range(0..40) as f32) * 0.25;
                    Candidate {
                        id: i as u32,
                        logit,
                        weight: (logit - 10.0).exp(),
                    }
                })
                .collect();
            let top_p = rng.gen_range(0.01f32..=1.0);
            let mut got = cands.clone();
            keep_nucleus(&mut got, top_p);
            let mut ids: Vec<u32> = got.iter().map(|c| c.id).collect();
            ids.sort_unstable();
            assert_eq!(ids, reference(&cands, top_p), "n={n} top_p={top_p}");
        }
    }
}
