//! `kestrel serve --kv-cache-disk DIR` across a restart on the default model: the next
//! server reads the prompt's blocks back (cached tokens cover it) and answers exactly as the
//! first did; salted prefixes stay apart on disk; another KV layout never reads the tier; a
//! directory that cannot be used stops serve with a clear message.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::cli_common::*;

/// A running `kestrel serve`, killed (not shut down) when dropped: a crash.
struct Serve {
    child: Child,
    addr: String,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kestrel-kv-disk-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn serve(dir: &Path, extra: &[&str]) -> Serve {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kestrel"));
    cmd.arg("serve")
        .arg("--model")
        .arg(model())
        .args([
            "--port",
            "0",
            "--threads",
            "2",
            "--kv-cache-memory",
            "128MiB",
        ])
        .arg("--kv-cache-disk")
        .arg(dir)
        .args(extra);
    let (child, addr) = spawn_and_read_address(cmd);
    Serve { child, addr }
}

/// A prompt of about 700 tokens.
fn prompt() -> String {
    (0..120)
        .map(|i| format!("Item {i} is stored on shelf {}.", i % 7))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A greedy completion of `prompt()`: its text, prompt tokens and cached tokens.
fn complete(s: &Serve, salt: Option<&str>) -> (String, u64, u64) {
    let mut body = json!({"prompt": prompt(), "max_tokens": 12, "temperature": 0});
    if let Some(salt) = salt {
        body["cache_salt"] = json!(salt);
    }
    let raw = post_json(
        &s.addr,
        "/v1/completions",
        &body.to_string(),
        Duration::from_secs(120),
    );
    let json_body = raw.split("\r\n\r\n").nth(1).unwrap_or_default();
    let reply: Value = serde_json::from_str(json_body).unwrap_or_else(|_| panic!("{raw}"));
    let usage = &reply["usage"];
    (
        reply["choices"][0]["text"]
            .as_str()
            .expect("text")
            .to_string(),
        usage["prompt_tokens"].as_u64().expect("prompt tokens"),
        usage["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap_or(0),
    )
}

fn metric(s: &Serve, name: &str) -> f64 {
    let raw = raw_request(&s.addr, "GET", "/metrics", "", "", Duration::from_secs(10));
    raw.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Waits until the writer has put at least `blocks` blocks on disk.
fn wait_written(s: &Serve, blocks: f64) {
    let start = Instant::now();
    while metric(s, "kestrel:kv_disk_blocks_written_total") < blocks {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "blocks never written"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_restarted_server_reads_the_prompt_back_and_answers_the_same() {
    let dir = temp_dir("restart");
    let (first, prompt_tokens) = {
        let s = serve(&dir, &[]);
        let (text, prompt_tokens, cached) = complete(&s, None);
        assert_eq!(cached, 0);
        wait_written(&s, (prompt_tokens / 16) as f64);
        (text, prompt_tokens)
    };
    let s = serve(&dir, &[]);
    let (again, _, cached) = complete(&s, None);
    assert_eq!(
        again, first,
        "greedy output with the tier equals the output without it"
    );
    assert!(
        cached >= prompt_tokens * 9 / 10,
        "{cached} of {prompt_tokens} prompt tokens came back from disk"
    );
    assert_eq!(metric(&s, "kestrel:kv_disk_hits_total"), cached as f64);
    assert!(metric(&s, "kestrel:kv_disk_blocks_read_total") >= (cached / 16) as f64);
}

#[test]
fn salted_prefixes_and_other_kv_layouts_never_share_the_tier() {
    let dir = temp_dir("apart");
    {
        let s = serve(&dir, &[]);
        let (_, prompt_tokens, _) = complete(&s, Some("alice"));
        wait_written(&s, (prompt_tokens / 16) as f64);
    }
    {
        let s = serve(&dir, &["--kv-cache-dtype", "f32"]);
        let (_, _, cached) = complete(&s, Some("alice"));
        assert_eq!(cached, 0, "an f32 KV cache never reads f16 blocks");
    }
    let s = serve(&dir, &[]);
    assert_eq!(complete(&s, Some("bob")).2, 0, "another salt finds nothing");
    assert_eq!(complete(&s, None).2, 0, "no salt finds nothing");
    let (_, prompt_tokens, cached) = complete(&s, Some("alice"));
    assert!(
        cached >= prompt_tokens * 9 / 10,
        "the same salt finds its blocks: {cached}"
    );
    let subdirs = std::fs::read_dir(&dir).unwrap().count();
    assert_eq!(subdirs, 2, "one directory per model and KV layout");
}

#[test]
fn an_unusable_tier_directory_stops_serve_naming_it() {
    let dir = temp_dir("unusable");
    std::fs::create_dir_all(dir.parent().unwrap()).unwrap();
    std::fs::write(&dir, b"a file, not a directory").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kestrel"))
        .arg("serve")
        .arg("--model")
        .arg(model())
        .args(["--port", "0", "--kv-cache-memory", "64MiB"])
        .arg("--kv-cache-disk")
        .arg(&dir)
        .output()
        .expect("kestrel runs");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--kv-cache-disk") && stderr.contains(&*dir.to_string_lossy()),
        "{stderr}"
    );
    let _ = std::fs::remove_file(&dir);
}
