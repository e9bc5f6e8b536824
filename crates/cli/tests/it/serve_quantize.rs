//! `kestrel serve --quantize`: an F32 checkpoint quantized while loading serves completions;
//! a calibrated method is refused with a clear message.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::cli_common::{post_json, spawn_capturing_stderr};

fn tiny() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/tiny-llama-f32")
        .to_string_lossy()
        .into_owned()
}

#[test]
fn serve_quantizes_while_loading() {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kestrel"));
    cmd.args([
        "serve",
        "--model",
        &tiny(),
        "--quantize",
        "int8",
        "--port",
        "0",
        "--kv-cache-tokens",
        "512",
    ]);
    let (mut child, addr, stderr) = spawn_capturing_stderr(cmd);
    let response = post_json(
        &addr,
        "/v1/completions",
        r#"{"prompt":"hello","max_tokens":4,"temperature":0}"#,
        Duration::from_secs(30),
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
