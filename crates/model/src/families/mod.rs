//! Model families: one file per family, listed in [`registry`].
//!
//! A family file holds everything that is particular to that family: its names (registry
//! name, GGUF `general.architecture`, HF class and `model_type`), the `config.json` keys and
//! defaults its config class has, its GGUF metadata quirks, its tensor naming, RoPE pairing
//! and block layout. It implements the `Family` trait (`family.rs`), whose defaults are a
//! plain Llama-style decoder; shared readers (`crate::config::from_hf`, `gemma`, `moe`,
//! `window`) do the common work and name no family. The rest of Kestrel holds an
//! [`Architecture`], a `Copy` handle onto a registry entry, and asks it questions.
//!
//! To add a family:
//! 1. write `families/<family>.rs`: a unit struct implementing `Family` (names, HF defaults,
//!    and only the hooks where it differs from the defaults);
//! 2. add its `mod` line here and one line to the list in [`registry`];
//! 3. add a golden test on a tiny checkpoint (`crates/model/tests/it/golden_tiny_*.rs`).

mod architecture;
pub mod builtin_templates;
pub(crate) mod family;
pub mod registry;

mod bloom;
mod deepseek;
mod gemma2;
mod gemma3;
mod gpt_oss;
mod llama;
mod mistral;
mod mixtral;
mod phi3;
mod qwen2;
mod qwen2_moe;
mod qwen3;
mod qwen3_moe;

pub use architecture::Architecture;
pub use registry::{all, by_hf_class, by_name, supported_names};
