//! The prefix-cache events a router sees when a disk tier sits under the cache: the blocks the
//! engine can serve without computing them, RAM and disk together. A block evicted from RAM but
//! kept on disk stays announced; one that leaves both is removed; after a restart the first
//! snapshot already holds what the tier kept.

use std::path::PathBuf;

use kestrel_engine::core::KvEventLink;
use kestrel_engine::kv::disk_tier::{DiskTier, TierFingerprint};
use kestrel_engine::kv::{BlockHash, KvCacheConfig, KvCacheManager, KvEvent};
use tokio::sync::mpsc::{channel, Receiver};

/// Block files of 4096-byte payloads: the budget holds two, not three.
const BUDGET: u64 = 10_000;

fn temp_root(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kestrel-kv-events-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn h(i: u32) -> BlockHash {
    BlockHash::new(None, &[i, i + 1], None, None)
}

fn payload(i: u32) -> Vec<u8> {
    (0..4096u32).map(|b| (b * 3 + i) as u8).collect()
}

fn fp() -> TierFingerprint {
    TierFingerprint::of("events test model, f16 KV, 16-token blocks")
}

fn store(tier: &DiskTier, i: u32) {
    tier.store(h(i), payload(i));
    tier.flush();
}

/// The next batch, sorted (a batch's order within one block is all that matters).
fn next(rx: &mut Receiver<Vec<KvEvent>>) -> Vec<KvEvent> {
    let mut batch = rx.try_recv().expect("a batch was sent");
    batch.sort_by_key(|e| match e {
        KvEvent::AllCleared => (0, None),
        KvEvent::Stored(h) => (1, Some(*h)),
        KvEvent::Removed(h) => (2, Some(*h)),
    });
    batch
}

fn sorted(mut events: Vec<KvEvent>) -> Vec<KvEvent> {
    events.sort_by_key(|e| match e {
        KvEvent::AllCleared => (0, None),
        KvEvent::Stored(h) => (1, Some(*h)),
        KvEvent::Removed(h) => (2, Some(*h)),
    });
    events
}

#[test]
fn the_router_sees_ram_and_disk_blocks_as_one_cache() {
    let root = temp_root("union");
    {
        let before_restart = DiskTier::open(&root, fp(), BUDGET).unwrap();
        store(&before_restart, 10);
    }
    let tier = DiskTier::open(&root, fp(), BUDGET).unwrap();
    let mut kv = KvCacheManager::new(KvCacheConfig::new(2)).unwrap();
    let (tx, mut rx) = channel(16);
    let mut link = KvEventLink::new(tx, &mut kv, Some(&tier));

    assert!(link.publish(&mut kv, Some(&tier)));
    assert_eq!(
        next(&mut rx),
        vec![KvEvent::AllCleared, KvEvent::Stored(h(10))],
        "the first snapshot holds what the tier kept across the restart"
    );

    assert!(kv.adopt_block(h(1), |_| true));
    assert!(link.publish(&mut kv, Some(&tier)));
    assert_eq!(next(&mut rx), vec![KvEvent::Stored(h(1))]);

    store(&tier, 1);
    assert!(link.publish(&mut kv, Some(&tier)));
    assert!(
        rx.try_recv().is_err(),
        "a RAM block written to disk is no news"
    );

    assert!(kv.adopt_block(h(2), |_| true) && kv.adopt_block(h(3), |_| true));
    assert!(!kv.is_cached(&h(1)), "two RAM blocks: the first left RAM");
    assert!(link.publish(&mut kv, Some(&tier)));
    assert_eq!(
        next(&mut rx),
        sorted(vec![KvEvent::Stored(h(2)), KvEvent::Stored(h(3))]),
        "the block evicted from RAM is still on disk: not removed"
    );

    store(&tier, 2);
    assert!(!tier.contains(&h(10)), "the budget holds two files");
    assert!(link.publish(&mut kv, Some(&tier)));
    assert_eq!(next(&mut rx), vec![KvEvent::Removed(h(10))]);

    store(&tier, 3);
    assert!(!tier.contains(&h(1)));
    assert!(link.publish(&mut kv, Some(&tier)));
    assert_eq!(
        next(&mut rx),
        vec![KvEvent::Removed(h(1))],
        "gone from RAM and disk"
    );

    assert!(kv.reset_prefix_cache());
    assert!(link.publish(&mut kv, Some(&tier)));
    assert_eq!(
        next(&mut rx),
        sorted(vec![
            KvEvent::AllCleared,
            KvEvent::Stored(h(2)),
            KvEvent::Stored(h(3))
        ]),
        "a cleared RAM cache: a snapshot of what the disk still holds"
    );
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn without_a_tier_the_prefix_cache_events_pass_through() {
    let mut kv = KvCacheManager::new(KvCacheConfig::new(1)).unwrap();
    let (tx, mut rx) = channel(16);
    let mut link = KvEventLink::new(tx, &mut kv, None);
    assert!(link.publish(&mut kv, None));
    assert_eq!(next(&mut rx), vec![KvEvent::AllCleared]);
    assert!(kv.adopt_block(h(1), |_| true) && kv.adopt_block(h(2), |_| true));
    assert!(link.publish(&mut kv, None));
    assert_eq!(
        rx.try_recv().unwrap(),
        vec![
            KvEvent::Stored(h(1)),
            KvEvent::Removed(h(1)),
            KvEvent::Stored(h(2))
        ]
    );
}
