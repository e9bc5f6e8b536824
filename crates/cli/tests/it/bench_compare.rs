//! `kestrel bench compare a.json b.json` prints two saved reports side by side; bad files and
//! bad `--goodput` values are refused with a clear message.

use crate::cli_common;

use cli_common::*;

fn report(output_throughput: f64) -> String {
    serde_json::json!({
        "model": "smol", "num_prompts": 16,
        "load": {"mode": "concurrency", "concurrency": 16},
        "successful_requests": 16, "failed_requests": 0, "duration_s": 4.0,
        "request_throughput": 4.0, "output_throughput": output_throughput,
        "total_token_throughput": output_throughput * 2.0,
        "ttft_ms": {"median_ms": 40.0, "p95_ms": 80.0, "p99_ms": 90.0},
        "goodput": {"request_goodput": 3.0, "good_requests": 12},
    })
    .to_string()
}

#[test]
fn compare_prints_ratios() {
    let dir = std::env::temp_dir().join(format!("kestrel-bench-cmp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let (a, b) = (dir.join("a.json"), dir.join("b.json"));
    std::fs::write(&a, report(200.0)).expect("a");
    std::fs::write(&b, report(300.0)).expect("b");
    let out = stdout_of(&kestrel(&[
        "bench",
        "compare",
        a.to_str().expect("path"),
        b.to_str().expect("path"),
    ]));
    let row = out
        .lines()
        .find(|l| l.starts_with("Output throughput"))
        .unwrap_or_else(|| panic!("no throughput row:\n{out}"));
    assert!(
        row.contains("200.00") && row.contains("300.00") && row.contains("1.500x"),
        "{row}"
    );
    assert!(out.contains("Request goodput"), "{out}");

    std::fs::write(&b, "not json").expect("b");
    let bad = kestrel(&[
        "bench",
        "compare",
        a.to_str().expect("path"),
        b.to_str().expect("path"),
    ]);
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("cannot read report") && err.contains("not JSON"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_goodput_is_refused() {
    let out = kestrel(&["bench", "--goodput", "ttft:fast"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--goodput"), "{err}");
}
