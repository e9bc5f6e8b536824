//! [`plan_room`]: which loaded models a multi-model server unloads so that one more may load,
//! under its two limits: the number of models loaded at once (`--max-loaded-models`) and the
//! estimated memory of those models (`--models-memory-budget`, each model's weights file plus
//! its share of the KV cache). The least recently used idle, unpinned models go first; when
//! unloading all of them is still not enough nothing is unloaded and the load is refused.

use std::time::Instant;

/// The limits on the models loaded at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoomLimits {
    /// Most models loaded (or loading) at once.
    pub max_loaded: usize,
    /// Most estimated bytes of the models loaded (or loading) at once; `None`: no limit.
    pub memory_budget: Option<u64>,
}

/// A model that holds memory now (loaded or loading).
#[derive(Debug, Clone, Copy)]
pub struct Holder {
    /// Its estimated memory.
    pub bytes: u64,
    /// When a request last chose it.
    pub last_used: Instant,
    /// Whether it may be unloaded now (loaded, idle and not pinned).
    pub evictable: bool,
}

/// Why a model cannot be loaded now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoRoom {
    /// Alone it is larger than the memory budget: it never fits.
    TooLarge { need: u64, budget: u64 },
    /// It would fit once models that are busy or pinned now are unloaded.
    Busy,
}

/// The indices (into `holders`) of the models to unload, least recently used first, so that
/// a model of `need` bytes fits; empty when it fits already.
pub fn plan_room(limits: RoomLimits, need: u64, holders: &[Holder]) -> Result<Vec<usize>, NoRoom> {
    if let Some(budget) = limits.memory_budget.filter(|&b| need > b) {
        return Err(NoRoom::TooLarge { need, budget });
    }
    let mut count = holders.len();
    let mut bytes: u64 = holders.iter().map(|h| h.bytes).sum();
    let fits = |count: usize, bytes: u64| {
        count < limits.max_loaded
            && limits
                .memory_budget
                .is_none_or(|b| bytes.saturating_add(need) <= b)
    };
    let mut candidates: Vec<usize> = (0..holders.len())
        .filter(|&i| holders[i].evictable)
        .collect();
    candidates.sort_by_key(|&i| holders[i].last_used);
    let mut victims = Vec::new();
    for i in candidates {
        if fits(count, bytes) {
            break;
        }
        victims.push(i);
        count -= 1;
        bytes -= holders[i].bytes;
    }
    if fits(count, bytes) {
        Ok(victims)
    } else {
        Err(NoRoom::Busy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn holders(spec: &[(u64, u64, bool)]) -> Vec<Holder> {
        let t0 = Instant::now();
        spec.iter()
            .map(|&(bytes, age, evictable)| Holder {
                bytes,
                last_used: t0 + Duration::from_secs(age),
                evictable,
            })
            .collect()
    }

    const COUNT_2: RoomLimits = RoomLimits {
        max_loaded: 2,
        memory_budget: None,
    };

    #[test]
    fn the_count_limit_unloads_the_least_recently_used_idle_model() {
        assert_eq!(plan_room(COUNT_2, 1, &holders(&[(1, 0, true)])), Ok(vec![]));
        let two = holders(&[(1, 5, true), (1, 3, true)]);
        assert_eq!(plan_room(COUNT_2, 1, &two), Ok(vec![1]));
        let busy = holders(&[(1, 5, false), (1, 3, false)]);
        assert_eq!(plan_room(COUNT_2, 1, &busy), Err(NoRoom::Busy));
    }

    #[test]
    fn the_memory_budget_unloads_as_many_models_as_it_takes() {
        let limits = RoomLimits {
            max_loaded: 10,
            memory_budget: Some(100),
        };
        let held = holders(&[(40, 1, true), (30, 0, true), (20, 2, true)]);
        assert_eq!(plan_room(limits, 10, &held), Ok(vec![]), "90 + 10 fits");
        assert_eq!(plan_room(limits, 45, &held), Ok(vec![1, 0]), "oldest first");
        assert_eq!(
            plan_room(limits, 101, &held),
            Err(NoRoom::TooLarge {
                need: 101,
                budget: 100
            })
        );
        let pinned = holders(&[(40, 1, false), (30, 0, true), (20, 2, true)]);
        assert_eq!(plan_room(limits, 80, &pinned), Err(NoRoom::Busy));
    }
}
