//! `kestrel serve --lora-modules` end to end on the tiny F32 fixture: a completion served with
//! an adapter (picked by `model`) is the text `kestrel generate --lora` prints for the same
//! prompt (greedy), and differs from the base model's; the PEFT adapter and the same adapter as
//! a llama.cpp GGUF serve the same text; `--max-lora-rank` below an adapter's rank stops the
//! server at start with a clear error.

use crate::cli_common;

use cli_common::*;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const PROMPT: &str = "Hello world! How are you";

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn completion(addr: &str, model: &str) -> String {
    let body = serde_json::json!({"model": model, "prompt": PROMPT, "max_tokens": 16,
                                  "temperature": 0})
    .to_string();
    let mut stream = TcpStream::connect(addr).expect("connects");
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    write!(
        stream,
        "POST /v1/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    stream.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(head.starts_with("HTTP/1.1 200"), "{out}");
    let v: serde_json::Value = serde_json::from_str(body).expect("JSON");
    assert_eq!(v["model"], serde_json::json!(model));
    v["choices"][0]["text"].as_str().unwrap().to_string()
}

fn generate(lora: Option<&Path>) -> String {
    let tiny = fixtures().join("tiny-llama-f32");
    let mut args = vec!["generate", "--model", s(&tiny), PROMPT, "-n", "16"];
    if let Some(l) = lora {
        args.extend(["--lora", s(l)]);
    }
    let out = stdout_of(&kestrel(&args));
    out.strip_suffix('\n').unwrap_or(&out).to_string()
}

#[test]
fn served_adapters_equal_generate_lora() {
    let tiny = fixtures().join("tiny-llama-f32");
    let all7 = fixtures().join("lora/all7");
    let all7_gguf = fixtures().join("lora/all7.gguf");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kestrel"));
    cmd.args([
        "serve",
        "--model",
        s(&tiny),
        "--port",
        "0",
        "--served-model-name",
        "tiny",
    ])
    .args(["--max-loras", "2", "--max-lora-rank", "8", "--lora-modules"])
    .arg(format!("all7={}", s(&all7)))
    .arg(format!("all7g={}", s(&all7_gguf)));
    let (mut child, addr) = spawn_and_read_address(cmd);
    let served = (
        completion(&addr, "tiny"),
        completion(&addr, "all7"),
        completion(&addr, "all7g"),
    );
    child.kill().ok();
    child.wait().ok();
    let with_lora = generate(Some(&all7));
    assert_eq!(served.1, with_lora, "served all7 vs generate --lora");
    assert_eq!(served.2, with_lora, "the same adapter as a llama.cpp GGUF");
    assert_eq!(served.0, generate(None), "served base vs generate");
    assert_ne!(served.1, served.0, "the adapter changes the output");
}

#[test]
fn an_adapter_above_max_lora_rank_stops_the_server() {
    let tiny = fixtures().join("tiny-llama-f32");
    let all7 = fixtures().join("lora/all7");
    let out = Command::new(env!("CARGO_BIN_EXE_kestrel"))
        .args([
            "serve",
            "--model",
            s(&tiny),
            "--port",
            "0",
            "--max-lora-rank",
            "4",
        ])
        .arg("--lora-modules")
        .arg(format!("all7={}", s(&all7)))
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--lora-modules all7=") && err.contains("rank 8, above --max-lora-rank 4"),
        "{err}"
    );
}
