//! `kestrel serve` stays within its memory budget: after serving concurrent requests with
//! the default model, the server's resident set is at most the model file plus the KV cache
//! budget plus 150 MB (weights are memory-mapped; buffers are sized by the batch, not the
//! traffic).

use std::process::Command;
use std::time::Duration;

use crate::cli_common::{model as default_model, post_json, spawn_and_read_address};

/// `VmRSS` of process `pid`, in bytes (Linux).
fn resident_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc is readable");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("a VmRSS line");
    kb * 1024
}

#[test]
fn resident_set_is_model_plus_kv_budget_plus_150_mb() {
    let model = default_model();
    let kv_budget: u64 = 128 << 20;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kestrel"));
    cmd.args(["serve", "--model"])
        .arg(&model)
        .args(["--port", "0", "--kv-cache-memory", "128MiB"]);
    let (mut child, addr) = spawn_and_read_address(cmd);
    let prompt =
        "The history of the printing press begins in the fifteenth century, when ".repeat(6);
    let body = format!(r#"{{"prompt":"{prompt}","max_tokens":48,"temperature":0.8,"seed":1}}"#);
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let (addr, body) = (addr.clone(), body.clone());
            std::thread::spawn(move || {
                post_json(&addr, "/v1/completions", &body, Duration::from_secs(120))
            })
        })
        .collect();
    let responses: Vec<String> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    let rss = resident_bytes(child.id());
    child.kill().unwrap();
    let _ = child.wait();
    for r in &responses {
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    }
    let file = std::fs::metadata(&model).unwrap().len();
    let limit = file + kv_budget + 150_000_000;
    eprintln!(
        "resident {:.1} MB; model {:.1} MB + KV budget {:.1} MB + 150 MB = {:.1} MB",
        rss as f64 / 1e6,
        file as f64 / 1e6,
        kv_budget as f64 / 1e6,
        limit as f64 / 1e6
    );
    assert!(rss <= limit, "resident set {rss} bytes exceeds {limit}");
}
