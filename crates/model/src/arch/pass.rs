//! [`Pass`]: what one forward pass of the decoder runs on.

use kestrel_engine::executor::BatchInput;
use kestrel_kernels::cpu::threadpool::ThreadPool;

use super::workspace::Workspace;
use crate::kv_cache::KvCache;
use crate::lora::LoraBatch;

/// What one forward pass runs on: the batch, its rows' LoRA adapters, the KV cache it writes,
/// the workspace and the worker threads.
pub struct Pass<'a> {
    pub batch: &'a BatchInput,
    /// The batch's rows grouped by adapter ([`LoraBatch::none`]: the base model alone).
    pub lora: &'a LoraBatch,
    pub kv: &'a mut KvCache,
    pub ws: &'a mut Workspace,
    pub pool: &'a ThreadPool,
}
