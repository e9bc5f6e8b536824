//! [`SamplingFields`]: the sampling and scheduling fields both OpenAI request types share
//! (including Kestrel's and vLLM's extensions), declared once.
//!
//! The one declaration is the field list in `sampling_fields!`. It generates the
//! [`SamplingFields`] struct that validation reads, and, through `openai_request!` (in
//! `request_fields.rs`), the same fields of each request struct.

use std::collections::HashMap;

use utoipa::ToSchema;

use crate::wire::StopSequences;

/// The one list of the shared sampling fields: calls `$callback! { $($args)* ; <fields> }`,
/// each field with its documentation and schema attributes.
macro_rules! sampling_fields {
    ($callback:ident! { $($args:tt)* }) => {
        $callback! { $($args)* ;
            temperature: Option<f64>,
            top_p: Option<f64>,
            n: Option<i64>,
            stop: Option<StopSequences>,
            seed: Option<i64>,
            presence_penalty: Option<f64>,
            frequency_penalty: Option<f64>,
            /// Token id (as a string) -> bias in `[-100, 100]`, added to the logits before
            /// penalties and temperature.
            #[schema(value_type = Option<Object>)]
            logit_bias: Option<HashMap<String, f64>>,
            /// Accepted and ignored (end-user id for abuse tracking).
            user: Option<String>,
            /// Extension: keep only the `top_k` most likely tokens; `-1` or `0` disables.
            top_k: Option<i64>,
            /// Extension: min-p filtering in `[0, 1]`.
            min_p: Option<f64>,
            /// Extension: HF-style repetition penalty (> 0; 1 disables).
            repetition_penalty: Option<f64>,
            /// Extension: scheduling priority, lower runs first (as in vLLM) (default 0).
            priority: Option<i64>,
            /// Extension (vLLM): share cached prompt prefixes only with requests of the same
            /// salt.
            cache_salt: Option<String>,
            /// Extension: keep generating past end-of-generation tokens.
            ignore_eos: Option<bool>,
            /// Extension (vLLM): end-of-generation and stop tokens cannot end the text before
            /// this many tokens.
            min_tokens: Option<i64>,
            /// Extension (vLLM): token ids that end generation.
            stop_token_ids: Option<Vec<i64>>,
            /// Extension (vLLM): keep the stop string that ended generation in the text.
            include_stop_str_in_output: Option<bool>,
            /// Extension (vLLM): leave special tokens out of the text (default true).
            skip_special_tokens: Option<bool>,
            /// Extension: time-to-first-token objective in milliseconds from arrival (1 to
            /// 3600000). A request the server predicts would miss it is refused at once with
            /// 429 and `Retry-After`; also settable with the `X-TTFT-SLO-Ms` header.
            ttft_slo_ms: Option<i64>,
        }
    };
}

/// Declares [`SamplingFields`] from the field list.
macro_rules! sampling_fields_struct {
    ($(#[$meta:meta])* ; $( $(#[$field_meta:meta])* $field:ident : $ty:ty, )*) => {
        $(#[$meta])*
        pub struct SamplingFields {
            $( $(#[$field_meta])* pub $field: $ty, )*
        }
    };
}

sampling_fields! { sampling_fields_struct! {
    /// The shared sampling fields of an OpenAI request, as each request type's
    /// `sampling_fields()` moves them out for validation.
    #[derive(Debug, Clone, Default, ToSchema)]
} }
