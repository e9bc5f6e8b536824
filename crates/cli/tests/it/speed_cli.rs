//! `kestrel speed --depth N` end to end on the default model: the tests run after N tokens of
//! context, the report says so, and the tg step's bytes count the KV it reads.

use crate::cli_common::*;

fn speed_json(depth: &str) -> serde_json::Value {
    let m = model();
    let m = m.to_str().expect("UTF-8 path");
    let args = [
        "speed", "--model", m, "-p", "16", "-n", "4", "-r", "1", "-t", "1", "--json", "-d", depth,
    ];
    let out = kestrel(&args);
    assert!(
        out.status.success(),
        "kestrel speed failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON report")
}

#[test]
fn speed_at_depth_measures_after_the_context_and_counts_its_kv_reads() {
    let shallow = speed_json("0");
    let deep = speed_json("300");
    assert_eq!(deep["depth"], 300);
    for report in [&shallow, &deep] {
        assert!(report["pp"]["mean_tps"].as_f64().unwrap() > 0.0, "{report}");
        assert!(report["tg"]["mean_tps"].as_f64().unwrap() > 0.0, "{report}");
    }
    let kv = |r: &serde_json::Value| r["tg"]["kv_bytes_per_step"].as_u64().unwrap();
    // Mean context per step: 0 + (4 - 1) / 2 = 1 token, then 300 + 1 = 301 tokens.
    assert!(kv(&shallow) > 0, "{shallow}");
    assert_eq!(kv(&deep), kv(&shallow) * 301, "{deep}");
}
