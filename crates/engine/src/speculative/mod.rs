//! Speculative decoding: a cheap proposer guesses the next `k` tokens of a request, the model
//! checks them in one forward pass, and every guess it agrees with is a token gained.
//!
//! One engine step of a speculating request:
//!
//! ```text
//! plan:     Speculator::plan      -> request.spec_lookahead = k' (0: decode normally)
//! schedule: last token + k' slots -> budgeted, blocks allocated, SchedulerOutput::lookahead
//! propose:  Speculator::propose   -> batch tokens = [last, d1..dj] (j <= k'), j + 1 rows
//! execute:  logits of the last j + 1 positions
//! verify:   verify_drafts         -> accepted d1..da, then one token sampled after them
//! update:   Scheduler::update_emitted: tokens appended one by one (stops apply to each),
//!           num_computed_tokens = position of da + 1 (rejected slots are overwritten
//!           later), blocks past the new tokens freed
//! ```
//!
//! What speculation remembers about a request (its draft slots and draft length, a found
//! n-gram draft, what the draft model has cached) is the request's [`SpecState`], a field of
//! its [`crate::request::Request`]: it dies with the request, and proposers keep no maps.
//!
//! Both proposers are deterministic given the context (n-gram lookup; the draft model decodes
//! greedily), so the proposal distribution `q` is a point mass on the draft token `d`.
//! Rejection sampling with such a `q` accepts `d` with probability `min(1, p(d) / q(d)) = p(d)`
//! and, on rejection, samples from `max(0, p - q)` normalised, which is `p` with `d` removed.
//! [`verify_drafts`] does exactly that by sampling `t ~ p` with the request's own sampler and
//! accepting `d` iff `t == d`: `P(accept) = p(d)`, and a rejected draw is `p` conditioned on
//! `t != d`. So the emitted tokens follow the target distribution, greedy requests produce the
//! same tokens as without speculation, and a seeded request draws from its RNG once per
//! emitted token, as it would without speculation.
//!
//! [`Speculator`] backs off (no request speculates that step) when the running requests times
//! `k + 1` exceed [`SpeculativeConfig::max_batch_tokens`]: a batch that large is compute-bound,
//! and verifying rejected drafts would cost real time.

mod draft_length;
mod draft_model_proposer;
mod ngram_proposer;
mod proposer;
mod spec_metrics;
mod spec_state;
mod speculative_config;
mod speculator;
mod verify;

pub use draft_length::DraftLengths;
pub use draft_model_proposer::DraftModelProposer;
pub use ngram_proposer::{ngram_lookup, NgramProposer};
pub use proposer::{DraftSeq, Proposer};
pub use spec_metrics::{describe_metrics, names, SpecCounters};
pub use spec_state::SpecState;
pub use speculative_config::SpeculativeConfig;
pub use speculator::Speculator;
pub(crate) use verify::verify_drafts;
