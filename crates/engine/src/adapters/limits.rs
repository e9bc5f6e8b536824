//! [`LoraLimits`]: how many LoRA adapters the engine runs and keeps, and how large they may be.

use super::error::AdapterError;

/// LoRA limits of one engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoraLimits {
    /// Most distinct adapters in one engine step (`--max-loras`); requests of another adapter
    /// wait until one of the running adapters has no running request left.
    pub max_loras: usize,
    /// Largest adapter rank accepted at load (`--max-lora-rank`).
    pub max_lora_rank: usize,
    /// Most adapters resident in memory (`--max-cpu-loras`); loading one more evicts the least
    /// recently used adapter that no running or waiting request uses.
    pub max_cpu_loras: usize,
}

impl Default for LoraLimits {
    /// 4 adapters per step, rank up to 64, 4 resident.
    fn default() -> Self {
        LoraLimits {
            max_loras: 4,
            max_lora_rank: 64,
            max_cpu_loras: 4,
        }
    }
}

impl LoraLimits {
    /// No limit on anything (one-shot commands such as `kestrel generate --lora`).
    pub fn unlimited() -> Self {
        LoraLimits {
            max_loras: usize::MAX,
            max_lora_rank: usize::MAX,
            max_cpu_loras: usize::MAX,
        }
    }

    /// Every limit at least 1, and room to keep resident what one step may run.
    pub fn validate(&self) -> Result<(), AdapterError> {
        if self.max_loras == 0 || self.max_lora_rank == 0 || self.max_cpu_loras == 0 {
            return Err(AdapterError::InvalidLimits(
                "--max-loras, --max-lora-rank and --max-cpu-loras must be at least 1".into(),
            ));
        }
        if self.max_cpu_loras < self.max_loras {
            return Err(AdapterError::InvalidLimits(format!(
                "--max-cpu-loras ({}) must be at least --max-loras ({})",
                self.max_cpu_loras, self.max_loras
            )));
        }
        Ok(())
    }
}
