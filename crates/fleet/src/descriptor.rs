//! The [`ModelDescriptor`] a worker announces, and the gateway's [`ModelInfo`] and [`Limits`]
//! rebuilt from it: the gateway validates, tokenizes and renders chat templates exactly as
//! `kestrel serve` does, without loading weights.

use std::sync::Arc;

use kestrel_model::tokenizer::Tokenizer;
use kestrel_server::launch::Launched;
use kestrel_server::{Limits, ModelInfo};

use crate::identity::ModelIdentity;
use crate::protocol::ModelDescriptor;
use crate::FleetError;

/// The descriptor of a started engine, served as `identity`.
pub fn describe(
    launched: &Launched,
    identity: ModelIdentity,
) -> Result<ModelDescriptor, FleetError> {
    let config = launched.engine.config();
    let stats = launched.engine.stats();
    let tokenizer = launched
        .model
        .tokenizer
        .to_spec()
        .map_err(|e| FleetError::Model(e.to_string()))?;
    Ok(ModelDescriptor {
        identity,
        dtype: launched.model.dtype.clone(),
        tokenizer,
        request_limits: launched.engine.limits(),
        max_input_tokens: launched.limits.max_input_tokens,
        max_total_tokens: launched.limits.max_total_tokens,
        max_num_batched_tokens: config.max_num_batched_tokens,
        max_num_seqs: config.max_num_seqs,
        block_size: stats.block_size,
        num_kv_blocks: stats.num_kv_blocks,
        tool_call_parser: launched
            .model
            .tool_call_format
            .map(|f| f.name().to_string()),
        reasoning_parser: launched
            .model
            .reasoning_parser
            .map(|p| p.name().to_string()),
        generation_defaults: launched.limits.generation_defaults,
    })
}

/// The model as the gateway's routes see it.
pub fn model_info(d: &ModelDescriptor) -> Result<ModelInfo, FleetError> {
    let tokenizer =
        Tokenizer::from_spec(&d.tokenizer).map_err(|e| FleetError::Model(e.to_string()))?;
    let chat_template = kestrel_model::loader::template(&tokenizer)
        .map_err(|e| FleetError::Model(e.to_string()))?;
    let tool_call_format = match &d.tool_call_parser {
        Some(name) => Some(
            kestrel_server::tools::ToolCallFormat::from_name(name)
                .map_err(|e| FleetError::Model(e.to_string()))?,
        ),
        None => None,
    };
    let reasoning_parser = match &d.reasoning_parser {
        Some(name) => kestrel_server::reasoning::ReasoningParser::from_name(name)
            .map_err(|e| FleetError::Model(e.to_string()))?,
        None => None,
    };
    Ok(ModelInfo {
        model_id: d.identity.name.clone(),
        dtype: d.dtype.clone(),
        tokenizer: Arc::new(tokenizer),
        chat_template,
        tool_call_format,
        reasoning_parser,
    })
}

/// The request limits the gateway enforces: the workers' context limits, the gateway's own
/// queue timeout, priority floor, input size and event buffer.
pub fn limits(d: &ModelDescriptor, config: &crate::gateway::GatewayConfig) -> Limits {
    Limits {
        max_input_tokens: d.max_input_tokens,
        max_total_tokens: d.max_total_tokens,
        max_queue_time: config.max_queue_time,
        min_client_priority: config.min_client_priority,
        max_input_bytes: config.max_input_bytes,
        max_buffered_events: config.max_buffered_events,
        generation_defaults: d.generation_defaults,
    }
}
