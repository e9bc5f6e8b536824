//! `kestrel serve` stays within its memory budget: after serving concurrent requests with
//! the default model, the server's resident set is at most the model file plus the KV cache
//! budget plus 150 MB (weights are memory-mapped; buffers are sized by the batch, not the
//! traffic).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn default_model() -> PathBuf {
    PathBuf::from(std::env::var_os("KESTREL_DEFAULT_MODEL").expect(
        "KESTREL_DEFAULT_MODEL is not set: run the suite with scripts/test.sh (it fetches the default model)",
    ))
}

fn post(addr: &str, body: &str) -> String {
    let mut s = TcpStream::connect(addr).expect("connects");
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    write!(
        s,
        "POST /v1/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

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
    let mut child = Command::new(env!("CARGO_BIN_EXE_kestrel"))
        .args(["serve", "--model"])
        .arg(&model)
        .args(["--port", "0", "--kv-cache-memory", "128MiB"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let start = Instant::now();
    let addr = loop {
        let line = lines.next().expect("server prints its address").unwrap();
        if let Some(url) = line.split("http://").nth(1) {
            break url.trim().to_string();
        }
        assert!(start.elapsed() < Duration::from_secs(60), "no address line");
    };
    let prompt =
        "The history of the printing press begins in the fifteenth century, when ".repeat(6);
    let body = format!(r#"{{"prompt":"{prompt}","max_tokens":48,"temperature":0.8,"seed":1}}"#);
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let (addr, body) = (addr.clone(), body.clone());
            std::thread::spawn(move || post(&addr, &body))
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
