//! Kestrel's serving engine. No tensor code lives here: the model runner plugs in from the
//! `model` crate.
//!
//! * [`sampling`] — [`sampling::SamplingParams`] and the [`sampling::Sampler`] that turns a
//!   logits row into a token (greedy, temperature, top-k/top-p/min-p, penalties, seeded RNG).
//! * [`output`] — incremental detokenization that never emits broken UTF-8, and stop strings.

pub mod executor;
pub mod kv;
pub mod mock_executor;
pub mod output;
pub mod request;
pub mod sampling;
pub mod scheduler;
