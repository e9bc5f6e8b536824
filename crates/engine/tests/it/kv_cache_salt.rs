//! Prefix-cache salts: requests with different `cache_salt` share no KV block (not even the
//! first), requests with the same salt share as usual, and unsalted requests never hit salted
//! blocks.

use std::sync::Arc;

use kestrel_engine::kv::{ComputedBlocks, KvCacheConfig, KvCacheManager};
use kestrel_engine::request::{Request, RequestParams};

const BS: usize = 4;
const PROMPT: [u32; 13] = [
    100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111, 1,
];

fn manager() -> KvCacheManager {
    KvCacheManager::new(KvCacheConfig {
        num_blocks: 32,
        block_size: BS,
        enable_prefix_caching: true,
        attention_window: None,
    })
    .unwrap()
}

fn req(id: u64, salt: Option<&str>) -> Request {
    let mut p = RequestParams::new(16);
    p.cache_salt = salt.map(Arc::from);
    Request::new(id, PROMPT.to_vec(), p)
}

/// Admits `r` with its cached prefix, computes it, and returns the hit.
fn admit(kv: &mut KvCacheManager, r: &mut Request) -> ComputedBlocks {
    let hit = kv.get_computed_blocks(r);
    kv.allocate_slots(r, r.num_tokens() - hit.num_tokens, &hit)
        .expect("fits");
    r.set_num_computed_tokens(r.num_tokens());
    kv.cache_computed_blocks(r);
    hit
}

#[test]
fn different_salts_share_no_block() {
    let mut kv = manager();
    let mut a = req(1, Some("tenant-a"));
    assert_eq!(admit(&mut kv, &mut a).num_tokens, 0);
    let mut b = req(2, Some("tenant-b"));
    assert_eq!(admit(&mut kv, &mut b), ComputedBlocks::default());
    let shared: Vec<_> = a
        .block_table()
        .iter()
        .filter(|x| b.block_table().contains(x))
        .collect();
    assert!(shared.is_empty(), "shared blocks {shared:?}");
    let mut plain = req(3, None);
    assert_eq!(admit(&mut kv, &mut plain).num_tokens, 0);
}

#[test]
fn same_salt_shares_full_blocks() {
    let mut kv = manager();
    let mut a = req(1, Some("tenant-a"));
    admit(&mut kv, &mut a);
    let mut again = req(2, Some("tenant-a"));
    let hit = admit(&mut kv, &mut again);
    assert_eq!(hit.num_tokens, 12);
    assert_eq!(hit.blocks, a.block_table()[..3].to_vec());
}

#[test]
fn unsalted_requests_still_share() {
    let mut kv = manager();
    admit(&mut kv, &mut req(1, None));
    assert_eq!(admit(&mut kv, &mut req(2, None)).num_tokens, 12);
}

/// A router's prediction of a prompt's block hashes ([`EngineRequest::prompt_block_hashes`])
/// equals what the engine's prefix cache computes for the same request: unsalted, salted and
/// under a LoRA adapter.
#[test]
fn a_routers_block_hashes_are_the_engines() {
    use kestrel_engine::adapter_id::AdapterId;
    use kestrel_engine::api::{EngineRequest, RequestLimits};
    use kestrel_engine::sampling::SamplingParams;
    let limits = RequestLimits {
        vocab_size: 1000,
        max_model_len: 64,
    };
    let sampling = SamplingParams {
        max_tokens: 4,
        ..Default::default()
    };
    let cases = [
        (None, None),
        (Some("tenant-a"), None),
        (Some("tenant-a"), Some(AdapterId(3))),
        (None, Some(AdapterId(3))),
    ];
    let mut seen = Vec::new();
    for (id, (salt, adapter)) in cases.into_iter().enumerate() {
        let engine_req = EngineRequest::new(PROMPT.to_vec(), sampling.clone(), &limits)
            .unwrap()
            .with_cache_salt(salt.map(str::to_string))
            .with_adapter(adapter);
        let predicted = engine_req.prompt_block_hashes(BS);
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let mut r = Request::from_engine(id as u64, engine_req, &[], tx);
        let mut kv = manager();
        admit(&mut kv, &mut r);
        assert_eq!(predicted.len(), PROMPT.len() / BS);
        assert_eq!(
            predicted,
            r.block_hashes(),
            "salt {salt:?} adapter {adapter:?}"
        );
        seen.push(predicted[0]);
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 4, "each namespace has a chain of its own");
}
