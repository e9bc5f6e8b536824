//! `kestrel serve --quantize`: an F32 checkpoint quantized while loading serves completions;
//! a calibrated method is refused with a clear message.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn tiny() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/tiny-llama-f32")
        .to_string_lossy()
        .into_owned()
}

/// POST `body` to `path` and return the raw response.
fn post(addr: &str, path: &str, body: &str) -> String {
    let mut s = TcpStream::connect(addr).expect("connects");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn serve_quantizes_while_loading() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kestrel"))
        .args([
            "serve",
            "--model",
            &tiny(),
            "--quantize",
            "int8",
            "--port",
            "0",
            "--kv-cache-tokens",
            "512",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts");
    // Drained as it comes: the server logs at INFO by default and must never block on a full
    // pipe.
    let mut err_pipe = child.stderr.take().unwrap();
    let stderr = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = err_pipe.read_to_string(&mut text);
        text
    });
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let start = Instant::now();
    let addr = loop {
        let line = lines.next().expect("server prints its address").unwrap();
        if let Some(url) = line.split("http://").nth(1) {
            break url.trim().to_string();
        }
        assert!(start.elapsed() < Duration::from_secs(60), "no address line");
    };
    let response = post(
        &addr,
        "/v1/completions",
        r#"{"prompt":"hello","max_tokens":4,"temperature":0}"#,
    );
    child.kill().unwrap();
    let _ = child.wait();
    let stderr = stderr.join().unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.contains("\"completion_tokens\":4"), "{response}");
    assert!(stderr.contains("to int8 while loading"), "{stderr}");
}

#[test]
fn serve_refuses_calibrated_methods_in_situ() {
    let out = Command::new(env!("CARGO_BIN_EXE_kestrel"))
        .args([
            "serve",
            "--model",
            &tiny(),
            "--quantize",
            "gptq",
            "--port",
            "0",
        ])
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("needs calibration"), "{err}");
}
