//! `--kv-cache-dtype` end to end: `kestrel ppl` on the real default model with a q8 KV cache
//! scores a text close to the f32-KV perplexity, and a bad value is rejected with a message
//! that lists the valid ones.

use crate::cli_common;

use cli_common::*;

use std::process::Output;

fn ppl_of(out: &Output) -> f64 {
    assert!(
        out.status.success(),
        "kestrel ppl failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let rest = &text[text
        .find("PPL = ")
        .unwrap_or_else(|| panic!("no PPL in {text}"))
        + 6..];
    rest.split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("PPL value in {text}"))
}

#[test]
fn ppl_with_q8_kv_cache_is_close_to_f32() {
    let m = model();
    let dir = std::env::temp_dir().join(format!("kestrel-kv-dtype-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let text = dir.join("text.txt");
    let para = "The river winds through the valley, past farms and small towns, before it reaches \
                the sea. In spring the water rises with melted snow from the mountains, and in \
                late summer it runs slow and warm. People have fished here for centuries. ";
    std::fs::write(&text, para.repeat(12)).expect("write text");
    let run = |dtype: &str| {
        let args = [
            "ppl",
            m.to_str().expect("UTF-8 path"),
            "--text",
            text.to_str().expect("UTF-8 path"),
            "--ctx",
            "128",
            "--chunks",
            "2",
            "--kv-cache-dtype",
            dtype,
        ];
        kestrel(&args)
    };
    let q8_out = run("q8");
    let (f32_ppl, q8_ppl) = (ppl_of(&run("f32")), ppl_of(&q8_out));
    assert!(
        String::from_utf8_lossy(&q8_out.stderr).contains("KV cache: q8, 12240 bytes per token"),
        "ppl reports the KV dtype and its size (30 layers × 2 × 3 heads × 68 bytes): {}",
        String::from_utf8_lossy(&q8_out.stderr)
    );
    assert!(f32_ppl.is_finite() && f32_ppl > 1.0, "f32 PPL {f32_ppl}");
    let rel = (q8_ppl - f32_ppl).abs() / f32_ppl;
    assert!(
        rel < 0.03,
        "q8 KV PPL {q8_ppl} vs f32 KV {f32_ppl}: {:.2} % apart",
        rel * 100.0
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_kv_cache_dtype_is_rejected_with_the_valid_values() {
    let m = model();
    let m = m.to_str().expect("UTF-8 path");
    for args in [
        vec!["ppl", m, "--text", "unused.txt", "--kv-cache-dtype", "int4"],
        vec!["serve", "--model", m, "--kv-cache-dtype", "int4"],
        vec!["generate", "--model", m, "hi", "--kv-cache-dtype", "int4"],
        vec!["speed", "--model", m, "--kv-cache-dtype", "int4"],
    ] {
        let out = kestrel(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} must fail");
        assert!(
            err.contains("--kv-cache-dtype")
                && err.contains("\"int4\"")
                && err.contains("f32, f16, q8"),
            "{args:?}: the error names the flag, the value and the valid values: {err}"
        );
    }
}
