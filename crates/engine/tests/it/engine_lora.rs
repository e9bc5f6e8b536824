//! LoRA adapters in the engine, over the mock executor (which "loads" an adapter whose file
//! name ends in its rank and refuses batches naming an adapter it does not hold): loads and
//! unloads as engine commands, `max_loras` deferral without starvation, LRU eviction under
//! `max_cpu_loras`, the rank limit, unload while in use, and unknown adapters failing only
//! their own request.

use crate::engine_common;

use std::path::PathBuf;
use std::time::Duration;

use engine_common::*;
use kestrel_engine::adapter_id::AdapterId;
use kestrel_engine::adapters::{AdapterError, LoraLimits};
use kestrel_engine::api::EngineFailure;
use kestrel_engine::mock_executor::reference_generate;
use kestrel_engine::request::FinishReason;

fn limits(max_loras: usize, max_cpu_loras: usize) -> LoraLimits {
    LoraLimits {
        max_loras,
        max_lora_rank: 16,
        max_cpu_loras,
    }
}

fn engine(
    lora: LoraLimits,
) -> (
    kestrel_engine::handle::EngineHandle,
    std::sync::Arc<Control>,
) {
    start(Config {
        lora,
        ..config(256)
    })
}

fn mock(name: &str) -> PathBuf {
    PathBuf::from(format!("/adapters/{name}"))
}

fn resident(h: &kestrel_engine::handle::EngineHandle) -> Vec<String> {
    h.adapters()
        .into_iter()
        .filter(|c| c.resident)
        .map(|c| c.name)
        .collect()
}

#[test]
fn max_loras_defers_without_starving_and_outputs_are_exact() {
    let (h, ctl) = engine(limits(1, 3));
    let ids: Vec<AdapterId> = ["a-r4", "b-r4", "c-r4"]
        .iter()
        .map(|n| h.load_adapter(n, mock(n)).unwrap().id)
        .collect();
    ctl.set_delay(Duration::from_micros(300));
    let mut streams = Vec::new();
    for i in 0..12u32 {
        // Adapters a, b, c and the base model, interleaved.
        let adapter = (i % 4 < 3).then(|| ids[(i % 4) as usize]);
        let p = prompt(i, 5 + i as usize % 7);
        let req = request(p.clone(), 6).build().with_adapter(adapter);
        streams.push((p, h.submit(req).unwrap()));
    }
    for (p, s) in streams {
        let c = collect(s);
        assert_eq!(c.ids, reference_generate(&p, 6, &[EOS], VOCAB));
    }
    assert_eq!(ctl.max_step_adapters(), 1, "max_loras = 1 per step");
    assert!(
        wait_until(Duration::from_secs(5), || h.stats().kv_usage == 0.0),
        "no KV blocks left in use"
    );
}

#[test]
fn an_unknown_adapter_fails_only_its_own_request() {
    let (h, _ctl) = engine(limits(2, 2));
    let a = h.load_adapter("a", mock("a-r2")).unwrap().id;
    let good = h
        .submit(request(prompt(1, 6), 8).build().with_adapter(Some(a)))
        .unwrap();
    let bad = h
        .submit(
            request(prompt(2, 6), 8)
                .build()
                .with_adapter(Some(AdapterId(77))),
        )
        .unwrap();
    let bad = collect(bad);
    assert!(
        matches!(bad.failure(), EngineFailure::Adapter(m) if m.contains("adapter#77")),
        "{:?}",
        bad.end
    );
    let good = collect(good);
    assert_eq!(
        good.ids,
        reference_generate(&prompt(1, 6), 8, &[EOS], VOCAB)
    );
}

#[test]
fn lru_eviction_reloads_on_demand() {
    let (h, ctl) = engine(limits(2, 2));
    let a = h.load_adapter("a", mock("a-r2")).unwrap().id;
    h.load_adapter("b", mock("b-r2")).unwrap();
    h.load_adapter("c", mock("c-r2")).unwrap();
    assert_eq!(resident(&h), ["b", "c"], "a was the least recently used");
    assert_eq!(h.adapters().len(), 3, "evicted adapters stay registered");
    // A request for a loads it again (same id) and evicts b, now the least recently used.
    let c = collect(
        h.submit(request(prompt(3, 6), 4).build().with_adapter(Some(a)))
            .unwrap(),
    );
    assert_eq!(c.ids, reference_generate(&prompt(3, 6), 4, &[EOS], VOCAB));
    assert_eq!(resident(&h), ["a", "c"]);
    assert_eq!(h.adapter_id("a"), Some(a));
    assert_eq!(ctl.adapter_loads(), 4);
}

#[test]
fn loading_fails_clearly_when_every_resident_adapter_is_in_use() {
    let (h, ctl) = engine(limits(1, 1));
    let a = h.load_adapter("a", mock("a-r2")).unwrap().id;
    ctl.set_delay(Duration::from_millis(2));
    let s = h
        .submit(request(prompt(4, 6), 60).build().with_adapter(Some(a)))
        .unwrap();
    assert!(wait_until(Duration::from_secs(5), || h.stats().running == 1));
    let err = h.load_adapter("b", mock("b-r2")).unwrap_err();
    assert_eq!(
        err,
        AdapterError::NoFreeSlot {
            name: "b".into(),
            max_cpu_loras: 1
        }
    );
    assert!(err.to_string().contains("--max-cpu-loras"), "{err}");
    let unload = h.unload_adapter("a").unwrap_err();
    assert_eq!(
        unload,
        AdapterError::InUse {
            name: "a".into(),
            requests: 1
        }
    );
    ctl.set_delay(Duration::ZERO);
    assert_eq!(collect(s).reason(), FinishReason::Length);
    h.load_adapter("b", mock("b-r2"))
        .expect("a is free to evict now");
    assert_eq!(resident(&h), ["b"]);
    h.unload_adapter("a").expect("unused now");
    assert_eq!(
        h.unload_adapter("a").unwrap_err(),
        AdapterError::NotFound("a".into())
    );
    assert_eq!(h.adapter_id("a"), None);
}

#[test]
fn refusals_rank_duplicates_and_bad_paths() {
    let (h, ctl) = engine(limits(2, 2));
    let err = h.load_adapter("big", mock("big-r32")).unwrap_err();
    assert_eq!(
        err,
        AdapterError::RankTooLarge {
            name: "big".into(),
            rank: 32,
            max: 16
        }
    );
    assert!(h.adapters().is_empty(), "a refused adapter is not kept");
    h.load_adapter("a", mock("a-r16")).unwrap();
    assert_eq!(
        h.load_adapter("a", mock("a-r2")).unwrap_err(),
        AdapterError::AlreadyLoaded("a".into())
    );
    let bad = h.load_adapter("x", mock("not-an-adapter")).unwrap_err();
    assert!(
        matches!(&bad, AdapterError::Load { name, reason } if name == "x" && reason.contains("not a mock adapter")),
        "{bad:?}"
    );
    assert_eq!(ctl.adapter_loads(), 2, "big and a were read; x was not");
    assert_eq!(h.adapters().len(), 1);
}

#[test]
fn invalid_limits_are_refused_at_start() {
    let cfg = Config {
        lora: limits(4, 2),
        ..config(64)
    };
    let exec = kestrel_engine::mock_executor::MockExecutor::new(64, BLOCK, VOCAB);
    let r = kestrel_engine::handle::EngineHandle::try_start(
        Box::new(exec),
        std::sync::Arc::new(LetterDecoder),
        vec![EOS],
        cfg.engine(),
    );
    assert!(r.is_err());
}
