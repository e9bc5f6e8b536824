//! `kestrel bench --multi-turn` against a real `kestrel serve` of the default model: 2
//! conversations x 3 turns; the server reports cached prompt tokens from turn 2 on (prefix
//! caching is on by default) and the JSON report carries the per-turn figures.

use std::process::Command;

use serde_json::Value;

use crate::cli_common::*;

/// A running `kestrel serve`, killed when dropped.
struct Serve(std::process::Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn multi_turn_reports_prefix_hits_from_the_second_turn() {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kestrel"));
    cmd.arg("serve").arg("--model").arg(model()).args([
        "--port",
        "0",
        "--threads",
        "2",
        "--kv-cache-memory",
        "128MiB",
    ]);
    let (child, addr) = spawn_and_read_address(cmd);
    let _serve = Serve(child);
    let dir = std::env::temp_dir().join(format!("kestrel-bench-mt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let json_path = dir.join("mt.json");
    let out = kestrel(&[
        "bench",
        "--multi-turn",
        "--base-url",
        &format!("http://{addr}"),
        "--conversations",
        "2",
        "--turns",
        "3",
        "--multi-turn-prefix-tokens",
        "200",
        "--input-len",
        "24",
        "--output-len",
        "8",
        "--think-time",
        "0.1",
        "--no-progress",
        "--json-out",
        json_path.to_str().expect("path"),
    ]);
    let table = stdout_of(&out);
    assert!(table.contains("Prefix hit rate, turns >= 2:"), "{table}");
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(&json_path).expect("json")).expect("JSON");
    assert_eq!(r["successful_requests"], 6, "{r}");
    assert_eq!(
        (r["failed_requests"].as_u64(), r["skipped_turns"].as_u64()),
        (Some(0), Some(0))
    );
    for key in [
        "ttft_ms",
        "ttft_ms_later_turns",
        "prefix_later_turns",
        "prefix_hit_rate_later_turns",
        "request_throughput",
        "output_throughput",
        "errors",
    ] {
        assert!(r.get(key).is_some(), "no {key} in {r}");
    }
    let turns = r["per_turn"].as_array().expect("per_turn");
    assert_eq!(turns.len(), 3);
    let prompt = |t: &Value| t["mean_prompt_tokens"].as_f64().expect("prompt tokens");
    for (i, t) in turns.iter().enumerate() {
        assert_eq!(t["turn"], i + 1);
        assert!(
            t["ttft_ms"]["median_ms"].as_f64().expect("p50") > 0.0,
            "{t}"
        );
        assert!(t["ttft_ms"].get("p90_ms").is_some() && t["ttft_ms"].get("mean_ms").is_some());
        if i > 0 {
            assert!(prompt(t) > prompt(&turns[i - 1]), "the history grows: {r}");
            let cached = t["prefix"]["cached_tokens"]
                .as_u64()
                .expect("cached tokens");
            assert!(cached > 0, "turn {} reported no cached tokens: {t}", i + 1);
        }
    }
    let rate = r["prefix_hit_rate_later_turns"]
        .as_f64()
        .expect("a hit rate");
    assert!(rate > 0.5 && rate <= 1.0, "{rate}");
    std::fs::remove_dir_all(&dir).ok();
}
