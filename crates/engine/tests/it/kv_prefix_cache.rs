//! KV manager tests: exact block ids, reference counts and eviction order for prefix hits.

use kestrel_engine::adapter_id::AdapterId;
use kestrel_engine::kv::{ComputedBlocks, KvCacheConfig, KvCacheManager};
use kestrel_engine::request::{Request, RequestParams};

const BS: usize = 4;

fn manager(num_blocks: usize, caching: bool) -> KvCacheManager {
    KvCacheManager::new(KvCacheConfig {
        num_blocks,
        block_size: BS,
        enable_prefix_caching: caching,
        attention_window: None,
    })
    .unwrap()
}

fn req(id: u64, prompt: &[u32]) -> Request {
    Request::new(id, prompt.to_vec(), RequestParams::new(16))
}

/// Admits `r` with its cached prefix and computes the rest of its tokens in one step.
fn admit_and_compute(kv: &mut KvCacheManager, r: &mut Request) -> (ComputedBlocks, Vec<u32>) {
    let hit = kv.get_computed_blocks(r);
    let new = kv
        .allocate_slots(r, r.num_tokens() - hit.num_tokens, &hit)
        .expect("fits");
    r.set_num_computed_tokens(r.num_tokens());
    kv.cache_computed_blocks(r);
    (hit, new)
}

fn refs(kv: &KvCacheManager, blocks: &[u32]) -> Vec<u32> {
    blocks.iter().map(|&b| kv.pool().ref_count(b)).collect()
}

const SYS: [u32; 8] = [100, 101, 102, 103, 104, 105, 106, 107];

#[test]
fn shared_system_prompt_hits_exact_blocks_and_evicts_lru() {
    let mut kv = manager(10, true);
    let mut a = req(1, &[&SYS[..], &[1, 2, 3]].concat());
    let (hit, new) = admit_and_compute(&mut kv, &mut a);
    assert_eq!(hit, ComputedBlocks::default());
    assert_eq!(new, vec![0, 1, 2]);

    let mut b = req(2, &[&SYS[..], &[7, 8, 9, 10, 11]].concat());
    let (hit, new) = admit_and_compute(&mut kv, &mut b);
    assert_eq!(
        hit,
        ComputedBlocks {
            blocks: vec![0, 1],
            num_tokens: 8
        }
    );
    assert_eq!(new, vec![3, 4]);
    assert_eq!(b.block_table(), &[0, 1, 3, 4]);
    assert_eq!(refs(&kv, &[0, 1, 2, 3, 4]), vec![2, 2, 1, 1, 1]);
    assert_eq!(kv.pool().free_list(), vec![5, 6, 7, 8, 9]);
    assert_eq!((kv.stats().queries, kv.stats().hits), (24, 8));
    assert!((kv.usage() - 0.5).abs() < 1e-12);

    kv.free(&mut a);
    assert_eq!(refs(&kv, &[0, 1, 2]), vec![1, 1, 0]);
    assert_eq!(kv.pool().free_list(), vec![5, 6, 7, 8, 9, 2]);
    kv.free(&mut b);
    // Reverse order: a sequence's tail is evicted before its (shared) head.
    assert_eq!(kv.pool().free_list(), vec![5, 6, 7, 8, 9, 2, 4, 3, 1, 0]);
    assert_eq!(kv.num_free_blocks(), 10);
    assert_eq!(kv.usage(), 0.0);
    // Full blocks 0, 1 (system prompt) and 3 (B's third block) stay cached while free.
    assert_eq!(kv.pool().num_cached_blocks(), 3);
    let b_hashes = b.block_hashes().to_vec();
    assert_eq!(kv.pool().lookup(b_hashes[2]), Some(3));

    // Unrelated request takes 8 blocks: the fresh ones, then A's tail, B's tail, B's block 3.
    let mut c = req(3, &(200..232).collect::<Vec<_>>());
    let (hit, new) = admit_and_compute(&mut kv, &mut c);
    assert!(hit.blocks.is_empty());
    assert_eq!(new, vec![5, 6, 7, 8, 9, 2, 4, 3]);
    assert_eq!(kv.pool().lookup(b_hashes[2]), None, "block 3 was evicted");
    assert_eq!(
        kv.pool().lookup(b_hashes[0]),
        Some(0),
        "shared prefix survives longest"
    );
    assert_eq!(kv.pool().free_list(), vec![1, 0]);
    kv.pool().check_invariants().unwrap();
}

#[test]
fn prefix_hit_revives_free_block_from_middle_of_free_list() {
    let mut kv = manager(6, true);
    let mut a = req(1, &[&SYS[..], &[1]].concat());
    admit_and_compute(&mut kv, &mut a);
    kv.free(&mut a);
    assert_eq!(kv.pool().free_list(), vec![3, 4, 5, 2, 1, 0]);
    let mut b = req(2, &[&SYS[..4], &[9, 9, 9, 9, 9]].concat());
    let (hit, new) = admit_and_compute(&mut kv, &mut b);
    assert_eq!(hit.blocks, vec![0]);
    assert_eq!(new, vec![3, 4]);
    assert_eq!(kv.pool().free_list(), vec![5, 2, 1]);
    assert_eq!(kv.pool().ref_count(0), 1);
    kv.pool().check_invariants().unwrap();
}

#[test]
fn second_turn_reuses_first_turn_blocks() {
    let mut kv = manager(16, true);
    let turn1: Vec<u32> = (10..20).collect();
    let mut a = req(1, &turn1);
    let (_, new) = admit_and_compute(&mut kv, &mut a);
    assert_eq!(new, vec![0, 1, 2]);
    // Decode three tokens; each step computes the previously sampled token.
    for t in [50, 51, 52] {
        a.append_output_token(t);
        let computed = a.num_tokens() - 1;
        if computed > a.num_computed_tokens() {
            let n = computed - a.num_computed_tokens();
            kv.allocate_slots(&mut a, n, &ComputedBlocks::default())
                .expect("fits");
            a.set_num_computed_tokens(computed);
            kv.cache_computed_blocks(&mut a);
        }
    }
    assert_eq!(a.num_computed_tokens(), 12);
    assert_eq!(a.block_table(), &[0, 1, 2]);
    kv.free(&mut a);

    let turn2 = [a.all_token_ids(), &[60, 61, 62, 63]].concat();
    let mut b = req(2, &turn2);
    let (hit, new) = admit_and_compute(&mut kv, &mut b);
    assert_eq!(
        hit,
        ComputedBlocks {
            blocks: vec![0, 1, 2],
            num_tokens: 12
        }
    );
    assert_eq!(new, vec![3, 4]);
    assert_eq!(b.block_table(), &[0, 1, 2, 3, 4]);
    assert_eq!(refs(&kv, &[0, 1, 2, 3, 4]), vec![1; 5]);
}

#[test]
fn never_hits_the_whole_prompt() {
    let mut kv = manager(8, true);
    let mut a = req(1, &SYS);
    admit_and_compute(&mut kv, &mut a);
    kv.free(&mut a);
    let mut b = req(2, &SYS);
    let hit = kv.get_computed_blocks(&mut b);
    assert_eq!(
        hit,
        ComputedBlocks {
            blocks: vec![0],
            num_tokens: 4
        }
    );
    let new = kv.allocate_slots(&mut b, 4, &hit).unwrap();
    assert_eq!(
        new,
        vec![2],
        "block 1 is cached but free: the tail is evicted first"
    );
}

#[test]
fn disabled_caching_and_cache_keys_never_share() {
    let mut kv = manager(8, false);
    let mut a = req(1, &SYS);
    admit_and_compute(&mut kv, &mut a);
    kv.free(&mut a);
    let mut b = req(2, &[&SYS[..], &[1]].concat());
    assert_eq!(kv.get_computed_blocks(&mut b), ComputedBlocks::default());
    assert_eq!(kv.stats().queries, 0);
    assert_eq!(kv.pool().num_cached_blocks(), 0);

    let mut kv = manager(8, true);
    let mut a = req(1, &[&SYS[..], &[1]].concat());
    admit_and_compute(&mut kv, &mut a);
    let mut params = RequestParams::new(4);
    params.cache_key = Some(42);
    let mut b = Request::new(2, [&SYS[..], &[1]].concat(), params);
    assert!(kv.get_computed_blocks(&mut b).blocks.is_empty());
}

#[test]
fn allocation_failure_changes_nothing_and_counts_revived_hits() {
    let mut kv = manager(4, true);
    let mut a = req(1, &[&SYS[..], &[1]].concat());
    admit_and_compute(&mut kv, &mut a);
    kv.free(&mut a);
    // All 4 blocks free; 0 and 1 hold the cached prefix.
    let mut b = req(2, &[&SYS[..], &(1..12).collect::<Vec<_>>()].concat());
    let hit = kv.get_computed_blocks(&mut b);
    assert_eq!(hit.blocks, vec![0, 1]);
    // 19 tokens need 5 blocks: 2 hits + 3 new, but only 2 remain once the hits are revived.
    let before = kv.pool().free_list();
    assert_eq!(kv.allocate_slots(&mut b, 11, &hit), None);
    assert_eq!(kv.pool().free_list(), before);
    assert_eq!(kv.stats().queries, 9, "a failed allocation is not counted");
    assert_eq!(b.block_table(), &[] as &[u32]);
    let mut c = req(3, &[&SYS[..], &[1, 2, 3, 4, 5, 6, 7]].concat());
    let hit = kv.get_computed_blocks(&mut c);
    assert_eq!(kv.allocate_slots(&mut c, 7, &hit), Some(vec![3, 2]));
    kv.pool().check_invariants().unwrap();
}

fn with_adapter(id: u64, prompt: &[u32], adapter: Option<u32>) -> Request {
    let mut params = RequestParams::new(4);
    params.adapter = adapter.map(AdapterId);
    Request::new(id, prompt.to_vec(), params)
}

#[test]
fn lora_adapters_never_share_blocks_but_share_among_themselves() {
    let mut kv = manager(16, true);
    let prompt = [&SYS[..], &[1]].concat();
    let mut base = with_adapter(1, &prompt, None);
    let (_, base_blocks) = admit_and_compute(&mut kv, &mut base);
    let mut a = with_adapter(2, &prompt, Some(7));
    assert!(
        kv.get_computed_blocks(&mut a).blocks.is_empty(),
        "an adapter must not reuse the base model's KV"
    );
    let (_, a_blocks) = admit_and_compute(&mut kv, &mut a);
    let mut b = with_adapter(3, &prompt, Some(8));
    assert!(
        kv.get_computed_blocks(&mut b).blocks.is_empty(),
        "two adapters must not share KV"
    );
    let mut a2 = with_adapter(4, &prompt, Some(7));
    let hit = kv.get_computed_blocks(&mut a2);
    assert_eq!(
        hit.blocks,
        a_blocks[..2].to_vec(),
        "same adapter, same prefix"
    );
    assert!(base_blocks[..2].iter().all(|b| !hit.blocks.contains(b)));
    // The adapter is part of the key even beside a cache salt.
    let mut salted = with_adapter(5, &prompt, Some(7));
    let mut params = salted.params().clone();
    params.cache_key = Some(1);
    salted = Request::new(5, prompt.clone(), params);
    assert!(kv.get_computed_blocks(&mut salted).blocks.is_empty());
}
