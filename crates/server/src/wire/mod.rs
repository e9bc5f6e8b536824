//! Wire types shared by the API families (stop strings, structured output, tool calls, LoRA
//! adapters), with OpenAPI schemas; each family's own bodies are in its folder
//! ([`crate::openai::wire`], [`crate::tgi::wire`]). Wire types are data only: checking them is
//! [`crate::validation`]'s job.
//!
//! Unknown top-level request fields are handled in one place, the [`crate::extract::Wire`]
//! extractor: ignored with a warning naming them (vLLM's behaviour, so newer or vendor fields
//! keep working), or refused with a 400 under `--strict-api`. Nested objects ignore unknown
//! keys. Documented OpenAI fields that Kestrel does not act on are listed explicitly and either
//! ignored or rejected in [`crate::validation`].

pub mod lora;
pub mod structured;
pub mod tools;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// One stop string or a list of them.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(untagged)]
pub enum StopSequences {
    One(String),
    Many(Vec<String>),
}

impl StopSequences {
    /// The stop strings as a list.
    pub fn into_vec(self) -> Vec<String> {
        match self {
            StopSequences::One(s) => vec![s],
            StopSequences::Many(v) => v,
        }
    }
}
