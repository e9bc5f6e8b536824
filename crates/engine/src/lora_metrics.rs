//! LoRA metrics, in vLLM's shape where vLLM has one:
//!
//! * `vllm:lora_requests_info` — a gauge whose labels carry the state: `running_lora_adapters`
//!   and `waiting_lora_adapters` (comma-separated adapter names, sorted) and `max_lora`; its
//!   value is the Unix time of the update, so the newest series is the current state.
//! * `kestrel:lora_adapter_loads_total` — adapters loaded into the model (again after an
//!   eviction counts again).
//! * `kestrel:lora_adapter_evictions_total` — resident adapters evicted under
//!   `--max-cpu-loras`.

use std::time::{SystemTime, UNIX_EPOCH};

use metrics::{counter, describe_counter, describe_gauge, gauge, Unit};

/// Metric names, exactly as exported.
pub mod names {
    /// Gauge labelled `running_lora_adapters`, `waiting_lora_adapters`, `max_lora`.
    pub const LORA_REQUESTS_INFO: &str = "vllm:lora_requests_info";
    /// Counter: adapters loaded.
    pub const LORA_ADAPTER_LOADS_TOTAL: &str = "kestrel:lora_adapter_loads_total";
    /// Counter: adapters evicted.
    pub const LORA_ADAPTER_EVICTIONS_TOTAL: &str = "kestrel:lora_adapter_evictions_total";
}

/// Registers help text for the LoRA metrics.
pub fn describe() {
    describe_gauge!(
        names::LORA_REQUESTS_INFO,
        "Running and waiting requests' LoRA adapters (labels); value: Unix time of the update"
    );
    describe_counter!(
        names::LORA_ADAPTER_LOADS_TOTAL,
        Unit::Count,
        "LoRA adapters loaded into the model"
    );
    describe_counter!(
        names::LORA_ADAPTER_EVICTIONS_TOTAL,
        Unit::Count,
        "Resident LoRA adapters evicted to make room (--max-cpu-loras)"
    );
}

/// Publishes the LoRA gauge and the growth of the counters since the previous call.
#[derive(Debug)]
pub struct LoraRecorder {
    max_lora: String,
    last: Option<(String, String)>,
    loads: u64,
    evictions: u64,
}

impl LoraRecorder {
    pub fn new(max_loras: usize) -> LoraRecorder {
        LoraRecorder {
            max_lora: max_loras.to_string(),
            last: None,
            loads: 0,
            evictions: 0,
        }
    }

    /// Sets the gauge when the running or waiting adapters changed, and adds to the counters.
    pub fn record(&mut self, running: &str, waiting: &str, loads: u64, evictions: u64) {
        let state = (running.to_string(), waiting.to_string());
        if self.last.as_ref() != Some(&state) {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64());
            gauge!(
                names::LORA_REQUESTS_INFO,
                "running_lora_adapters" => state.0.clone(),
                "waiting_lora_adapters" => state.1.clone(),
                "max_lora" => self.max_lora.clone()
            )
            .set(now);
            self.last = Some(state);
        }
        if loads > self.loads {
            counter!(names::LORA_ADAPTER_LOADS_TOTAL).increment(loads - self.loads);
            self.loads = loads;
        }
        if evictions > self.evictions {
            counter!(names::LORA_ADAPTER_EVICTIONS_TOTAL).increment(evictions - self.evictions);
            self.evictions = evictions;
        }
    }
}
