//! The idle KV check: each time the engine runs out of work it verifies that every KV block
//! came back and that the block pool's invariants hold, and publishes the result in its stats
//! (and `/metrics`), so a soak test can check for leaks from outside.

use crate::engine_common;

use std::time::Duration;

use engine_common::*;
use kestrel_engine::kv::{KvCacheConfig, KvCacheManager, KvLeak};
use kestrel_engine::request::{Request, RequestParams};

/// Finished, stopped and aborted (dropped mid-stream) requests, some sharing a prefix: once the
/// engine is idle again, the check has run, passed, and every block is free.
#[test]
fn the_idle_check_runs_and_passes_after_finished_and_aborted_requests() {
    let (engine, ctl) = start(config(48));
    ctl.set_delay(Duration::from_micros(200));
    for round in 0..3u32 {
        let mut streams = Vec::new();
        for i in 0..12u32 {
            let mut shared = prompt(round, 8);
            shared.extend(prompt(100 + i, 3));
            let mut r = request(shared, 20 + i as usize);
            r.sampling.ignore_eos = i % 2 == 0;
            streams.push(engine.submit(r.build()).expect("admitted"));
        }
        // Drop every third stream after its first event (a client that went away), and read
        // the others to the end.
        for (i, mut s) in streams.into_iter().enumerate() {
            if i % 3 == 0 {
                let _ = s.blocking_next();
                drop(s);
            } else {
                collect(s);
            }
        }
        assert!(
            wait_until(Duration::from_secs(5), || {
                let s = engine.stats();
                s.running == 0 && s.waiting == 0 && s.kv_idle_checks_total > round as u64
            }),
            "the engine went idle and checked: {:?}",
            engine.stats()
        );
    }
    let stats = engine.stats();
    assert_eq!(stats.kv_idle_check_failures_total, 0, "{stats:?}");
    assert_eq!(stats.kv_free_blocks, stats.num_kv_blocks, "{stats:?}");
    assert_eq!(stats.kv_usage, 0.0);
    engine.shutdown(Duration::from_secs(1));
}

fn manager(num_blocks: usize) -> KvCacheManager {
    KvCacheManager::new(KvCacheConfig {
        num_blocks,
        block_size: BLOCK,
        enable_prefix_caching: true,
        attention_window: None,
    })
    .expect("valid config")
}

/// The check itself detects a request whose blocks were never freed, and passes once they are.
#[test]
fn the_idle_check_reports_blocks_still_held() {
    let mut kv = manager(8);
    assert_eq!(kv.check_idle(), Ok(()));
    let mut r = Request::new(1, prompt(1, 10), RequestParams::new(4));
    let hit = kv.get_computed_blocks(&mut r);
    let n = r.num_tokens();
    kv.allocate_slots(&mut r, n, &hit).expect("fits");
    assert_eq!(
        kv.check_idle(),
        Err(KvLeak::BlocksHeld { held: 3, total: 8 })
    );
    kv.free(&mut r);
    assert_eq!(kv.check_idle(), Ok(()));
}
