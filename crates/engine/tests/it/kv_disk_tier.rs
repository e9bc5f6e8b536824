//! The KV disk tier on a real directory: blocks survive reopening (a restart), every kind of
//! damaged or foreign file is refused and deleted, the byte budget evicts the least recently
//! used blocks, and a failing disk turns the tier off instead of failing callers.

use std::path::PathBuf;

use kestrel_engine::kv::disk_tier::{DiskTier, TierFingerprint, MAX_WRITE_ERRORS};
use kestrel_engine::kv::BlockHash;

fn temp_root(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kestrel-disk-tier-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn block(i: u32) -> (BlockHash, Vec<u8>) {
    let hash = BlockHash::new(None, &[i, i + 1], None, None);
    let bytes = (0..4096u32).map(|b| (b * 7 + i) as u8).collect();
    (hash, bytes)
}

fn fp() -> TierFingerprint {
    TierFingerprint::of("test model, q4_0, f16 KV, 16-token blocks")
}

const BUDGET: u64 = 1 << 20;

#[test]
fn blocks_survive_reopening() {
    let root = temp_root("reopen");
    let blocks: Vec<_> = (0..5).map(block).collect();
    {
        let tier = DiskTier::open(&root, fp(), BUDGET).unwrap();
        for (h, b) in &blocks {
            tier.store(*h, b.clone());
        }
        tier.flush();
        assert_eq!(tier.stats().blocks_written, 5);
    }
    let tier = DiskTier::open(&root, fp(), BUDGET).unwrap();
    assert_eq!(tier.stats().blocks, 5);
    for (h, b) in &blocks {
        assert_eq!(tier.load(h).as_ref(), Some(b));
    }
    let (other, _) = block(99);
    assert!(!tier.contains(&other) && tier.load(&other).is_none());
    let stats = tier.stats();
    assert_eq!((stats.blocks_read, stats.bytes_read), (5, 5 * 4096));
}

#[test]
fn damaged_and_foreign_files_are_refused_and_deleted() {
    let root = temp_root("damaged");
    let (h0, b0) = block(0);
    let (h1, b1) = block(1);
    let (h2, b2) = block(2);
    let dir = {
        let tier = DiskTier::open(&root, fp(), BUDGET).unwrap();
        tier.store(h0, b0);
        tier.store(h1, b1);
        tier.store(h2, b2.clone());
        tier.flush();
        tier.dir().to_path_buf()
    };
    let path = |h: &BlockHash| dir.join(format!("{}.kvb", h.to_hex()));
    // A torn write (truncated), a leftover temporary file, a file under the wrong name.
    let torn = std::fs::read(path(&h0)).unwrap();
    std::fs::write(path(&h0), &torn[..torn.len() / 2]).unwrap();
    std::fs::write(dir.join("leftover.tmp"), b"partial").unwrap();
    let (h3, _) = block(3);
    std::fs::copy(path(&h1), path(&h3)).unwrap();
    // Another model's block in this directory.
    let foreign_root = temp_root("foreign");
    let foreign =
        DiskTier::open(&foreign_root, TierFingerprint::of("another model"), BUDGET).unwrap();
    let (h4, b4) = block(4);
    foreign.store(h4, b4);
    foreign.flush();
    std::fs::copy(
        foreign.dir().join(format!("{}.kvb", h4.to_hex())),
        path(&h4),
    )
    .unwrap();

    let tier = DiskTier::open(&root, fp(), BUDGET).unwrap();
    assert_eq!(
        tier.stats().files_refused,
        3,
        "torn, misnamed and foreign files"
    );
    for h in [&h0, &h3, &h4] {
        assert!(!tier.contains(h) && !path(h).exists());
    }
    assert!(!dir.join("leftover.tmp").exists());
    // Corruption found only on reading (the payload) is refused then.
    let mut bytes = std::fs::read(path(&h2)).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(path(&h2), bytes).unwrap();
    assert!(tier.contains(&h2));
    assert!(tier.load(&h2).is_none());
    assert!(!tier.contains(&h2) && !path(&h2).exists());
    assert_eq!(tier.stats().files_refused, 4);
    assert!(tier.load(&h1).is_some(), "the sound block is still served");
}

#[test]
fn the_budget_evicts_the_least_recently_used_blocks() {
    let root = temp_root("budget");
    let file_bytes = 4096 + 96;
    let tier = DiskTier::open(&root, fp(), 3 * file_bytes).unwrap();
    let blocks: Vec<_> = (0..4).map(block).collect();
    for (h, b) in &blocks[..3] {
        tier.store(*h, b.clone());
    }
    tier.flush();
    assert!(
        tier.load(&blocks[0].0).is_some(),
        "block 0 is now the most recent"
    );
    tier.store(blocks[3].0, blocks[3].1.clone());
    tier.flush();
    assert!(
        !tier.contains(&blocks[1].0),
        "block 1 was the least recently used"
    );
    for i in [0, 2, 3] {
        assert!(tier.contains(&blocks[i].0), "block {i}");
    }
    let stats = tier.stats();
    assert_eq!((stats.blocks, stats.used_bytes), (3, 3 * file_bytes));
    let files = std::fs::read_dir(tier.dir()).unwrap().count();
    assert_eq!(files, 3);
}

#[test]
fn a_failing_disk_turns_the_tier_off() {
    let root = temp_root("failing");
    let tier = DiskTier::open(&root, fp(), BUDGET).unwrap();
    std::fs::remove_dir_all(tier.dir()).unwrap();
    for i in 0..MAX_WRITE_ERRORS + 2 {
        let (h, b) = block(i);
        tier.store(h, b);
        tier.flush();
    }
    let stats = tier.stats();
    assert!(stats.disabled, "{stats:?}");
    assert_eq!(stats.write_errors, u64::from(MAX_WRITE_ERRORS));
    assert_eq!((stats.blocks, stats.blocks_written), (0, 0));
}

/// An engine over the checking mock executor with a disk tier under its prefix cache: a
/// prompt whose blocks were evicted from RAM comes back from disk (the mock checks every
/// position a step reads was written at that position), and the reply is the same.
#[test]
fn an_engine_reads_evicted_prefixes_back_from_disk() {
    use crate::engine_common::{collect, config, controlled, prompt, request, LetterDecoder, EOS};
    use kestrel_engine::handle::{EngineHandle, EngineOptions};
    use std::sync::Arc;

    let root = temp_root("engine");
    let cfg = config(24);
    let (exec, _ctl) = controlled(&cfg);
    let tier = DiskTier::open(&root, fp(), BUDGET).unwrap();
    let options = EngineOptions {
        disk_tier: Some(tier),
        ..EngineOptions::default()
    };
    let engine = EngineHandle::try_start_with(
        Box::new(exec),
        Arc::new(LetterDecoder),
        vec![EOS],
        cfg.engine(),
        options,
    )
    .unwrap();
    let run = |seed: u32| {
        let stream = engine.submit(request(prompt(seed, 41), 4).build()).unwrap();
        collect(stream)
    };
    let first = run(1);
    assert_eq!(first.usage().cached_tokens, 0);
    // Two other prompts of 11 blocks each take every one of the 24 blocks in turn.
    run(2);
    run(3);
    // The writer thread has written what the three requests computed (11 blocks each).
    let dir = std::fs::read_dir(&root)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let written = || std::fs::read_dir(&dir).unwrap().count() >= 30;
    assert!(crate::engine_common::wait_until(
        std::time::Duration::from_secs(10),
        written
    ));
    let again = run(1);
    assert_eq!(again.ids, first.ids, "the same reply from blocks read back");
    assert_eq!(
        again.usage().cached_tokens,
        40,
        "all 10 full prompt blocks came from disk"
    );
}
