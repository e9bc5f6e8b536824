//! Wire types: the JSON bodies the routes accept and return, with OpenAPI schemas.
//!
//! Request types use `deny_unknown_fields`: a field Kestrel does not know is an error, so a
//! typo never silently changes behaviour. Documented OpenAI fields that Kestrel does not act
//! on are listed explicitly and either ignored or rejected in [`crate::validation`].

pub mod lora;
pub mod openai;
pub mod structured;
pub mod tgi;

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
