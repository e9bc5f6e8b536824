//! Bodies of the run-time LoRA routes (vLLM's): `POST /v1/load_lora_adapter` and
//! `POST /v1/unload_lora_adapter`.

use serde::Deserialize;
use utoipa::ToSchema;

/// `POST /v1/load_lora_adapter`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct LoadLoraAdapterRequest {
    /// The name requests will use (`model` on OpenAI routes, `adapter_id` on TGI routes).
    pub lora_name: String,
    /// A PEFT adapter directory or a llama.cpp LoRA adapter `.gguf`, on the server's disk.
    pub lora_path: String,
}

/// `POST /v1/unload_lora_adapter`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct UnloadLoraAdapterRequest {
    pub lora_name: String,
    /// Accepted for compatibility and ignored (adapters are named by `lora_name`).
    pub lora_int_id: Option<i64>,
}
