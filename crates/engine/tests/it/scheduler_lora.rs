//! `max_loras` in the scheduler (no executor needed): a waiting request whose adapter would be
//! one too many among the running requests is deferred; LoRA requests queued behind it wait
//! behind it (so it is not starved by newer requests for the running adapters); base-model
//! requests behind it may start; it starts once the running adapter has no request left.

use kestrel_engine::adapter_id::AdapterId;
use kestrel_engine::request::{FinishReason, Request, RequestParams};
use kestrel_engine::scheduler::{Scheduler, SchedulerConfig};

fn req(id: u64, adapter: Option<u32>) -> Request {
    let mut params = RequestParams::new(8);
    params.adapter = adapter.map(AdapterId);
    Request::new(id, vec![1, 2, 3, 4, 5], params)
}

#[test]
fn a_deferred_adapter_is_not_starved_and_base_requests_pass_it() {
    let cfg = SchedulerConfig {
        block_size: 4,
        max_loras: Some(1),
        ..SchedulerConfig::new(64)
    };
    let mut s = Scheduler::new(cfg).unwrap();
    s.add_request(req(1, Some(0))).unwrap(); // adapter 0 runs
    let _ = s.schedule();
    assert_eq!(s.running_ids(), [1]);
    s.add_request(req(2, Some(1))).unwrap(); // adapter 1: one too many
    s.add_request(req(3, Some(0))).unwrap(); // adapter 0, but queued behind 2
    s.add_request(req(4, None)).unwrap(); // the base model
    let _ = s.schedule();
    assert_eq!(
        s.running_ids(),
        [1, 4],
        "2 deferred, 3 waits behind it, 4 passes"
    );
    assert_eq!(s.waiting_ids(), [2, 3]);
    assert!(s.finish(1, FinishReason::Stop).is_some());
    let _ = s.schedule();
    assert_eq!(
        s.running_ids(),
        [4, 2],
        "2 starts once adapter 0 has no running request"
    );
    assert_eq!(
        s.waiting_ids(),
        [3],
        "3 (adapter 0) now waits for adapter 1"
    );
    assert_eq!(s.running_adapters().len(), 1);
    assert_eq!(s.adapter_uses()[&AdapterId(0)], 1);
    assert_eq!(s.adapter_uses()[&AdapterId(1)], 1);
}
