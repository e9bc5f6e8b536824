//! `kestrel bench compare a.json b.json`: two saved reports side by side, with `b / a` ratios.
//! Reads the JSON loosely (a metric missing from an older report shows as `-`).

use std::fmt::Write as _;
use std::path::Path;

use serde_json::Value;

use crate::error::BenchError;

/// Whether a larger value of a metric is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Better {
    Higher,
    Lower,
}

/// `(label, JSON path, which way is better)` of each compared metric.
const METRICS: &[(&str, &str, Better)] = &[
    ("Successful requests", "successful_requests", Better::Higher),
    ("Failed requests", "failed_requests", Better::Lower),
    ("Duration (s)", "duration_s", Better::Lower),
    (
        "Request throughput (req/s)",
        "request_throughput",
        Better::Higher,
    ),
    (
        "Request goodput (req/s)",
        "goodput.request_goodput",
        Better::Higher,
    ),
    (
        "Output throughput (tok/s)",
        "output_throughput",
        Better::Higher,
    ),
    (
        "Total throughput (tok/s)",
        "total_token_throughput",
        Better::Higher,
    ),
    ("TTFT median (ms)", "ttft_ms.median_ms", Better::Lower),
    ("TTFT p95 (ms)", "ttft_ms.p95_ms", Better::Lower),
    ("TTFT p99 (ms)", "ttft_ms.p99_ms", Better::Lower),
    ("TPOT median (ms)", "tpot_ms.median_ms", Better::Lower),
    ("TPOT p95 (ms)", "tpot_ms.p95_ms", Better::Lower),
    ("TPOT p99 (ms)", "tpot_ms.p99_ms", Better::Lower),
    ("ITL median (ms)", "itl_ms.median_ms", Better::Lower),
    ("ITL p99 (ms)", "itl_ms.p99_ms", Better::Lower),
    ("E2EL median (ms)", "e2el_ms.median_ms", Better::Lower),
    ("E2EL p95 (ms)", "e2el_ms.p95_ms", Better::Lower),
    ("E2EL p99 (ms)", "e2el_ms.p99_ms", Better::Lower),
];

/// Reads a report written by `kestrel bench --json-out`.
pub fn read_report(path: &Path) -> Result<Value, BenchError> {
    let text = std::fs::read_to_string(path).map_err(|source| BenchError::ReadReport {
        path: path.to_path_buf(),
        message: source.to_string(),
    })?;
    let value: Value = serde_json::from_str(&text).map_err(|e| BenchError::ReadReport {
        path: path.to_path_buf(),
        message: format!("not JSON: {e}"),
    })?;
    if value.get("output_throughput").is_none() {
        return Err(BenchError::ReadReport {
            path: path.to_path_buf(),
            message: "not a kestrel bench report (no output_throughput)".into(),
        });
    }
    Ok(value)
}

fn at(v: &Value, path: &str) -> Option<f64> {
    path.split('.')
        .try_fold(v, |v, key| v.get(key))
        .and_then(Value::as_f64)
}

fn describe(v: &Value) -> String {
    let load = match v["load"]["mode"].as_str() {
        Some("concurrency") => format!("concurrency {}", v["load"]["concurrency"]),
        Some(mode) => format!("{mode} {}", v["load"]["request_rate"]),
        None => "?".into(),
    };
    format!(
        "{} · {} · {} prompts",
        v["model"].as_str().unwrap_or("?"),
        load,
        v["num_prompts"]
    )
}

/// The side-by-side table: each metric of `a` and `b`, the ratio `b / a`, and which run is
/// better on it.
pub fn render(a: &Value, b: &Value) -> String {
    let mut t = String::new();
    let _ = writeln!(t, "a: {}", describe(a));
    let _ = writeln!(t, "b: {}", describe(b));
    let _ = writeln!(
        t,
        "{:<30}{:>12}{:>12}{:>9}  better",
        "metric", "a", "b", "b/a"
    );
    for &(label, path, better) in METRICS {
        let (x, y) = (at(a, path), at(b, path));
        if x.is_none() && y.is_none() {
            continue;
        }
        let show = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.2}"));
        let ratio = match (x, y) {
            (Some(x), Some(y)) if x != 0.0 => format!("{:.3}x", y / x),
            _ => "-".into(),
        };
        let winner = match (x, y) {
            (Some(x), Some(y)) if x == y => "=",
            (Some(x), Some(y)) if (y > x) == (better == Better::Higher) => "b",
            (Some(_), Some(_)) => "a",
            _ => "",
        };
        let _ = writeln!(
            t,
            "{label:<30}{:>12}{:>12}{ratio:>9}  {winner}",
            show(x),
            show(y)
        );
    }
    t
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn report(tput: f64, ttft_p99: f64) -> Value {
        json!({
            "model": "m", "num_prompts": 8,
            "load": {"mode": "concurrency", "concurrency": 4},
            "successful_requests": 8, "failed_requests": 0, "duration_s": 2.0,
            "request_throughput": 4.0, "output_throughput": tput,
            "total_token_throughput": tput * 2.0,
            "ttft_ms": {"median_ms": 10.0, "p95_ms": 12.0, "p99_ms": ttft_p99},
        })
    }

    #[test]
    fn ratios_and_winners() {
        let table = render(&report(100.0, 20.0), &report(150.0, 10.0));
        let row = |name: &str| {
            table
                .lines()
                .find(|l| l.starts_with(name))
                .unwrap_or_else(|| panic!("{name} row in:\n{table}"))
                .to_string()
        };
        let out = row("Output throughput");
        assert!(out.contains("100.00") && out.contains("150.00") && out.contains("1.500x"));
        assert!(out.ends_with(" b"), "higher throughput wins: {out}");
        let ttft = row("TTFT p99");
        assert!(
            ttft.contains("0.500x") && ttft.ends_with(" b"),
            "lower latency wins: {ttft}"
        );
        assert!(row("TTFT median").ends_with(" ="));
        assert!(
            !table.contains("TPOT"),
            "metrics absent from both are left out"
        );
        assert!(table.starts_with("a: m · concurrency 4 · 8 prompts"));
    }

    #[test]
    fn refuses_files_that_are_not_reports() {
        let dir = std::env::temp_dir().join(format!("kestrel-compare-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("x.json");
        std::fs::write(&path, "{\"a\": 1}").expect("write");
        let err = read_report(&path).expect_err("not a report");
        assert!(
            err.to_string().contains("not a kestrel bench report"),
            "{err}"
        );
        std::fs::write(&path, "{oops").expect("write");
        assert!(read_report(&path)
            .expect_err("bad JSON")
            .to_string()
            .contains("not JSON"));
        assert!(read_report(&dir.join("missing.json")).is_err());
        std::fs::remove_dir_all(&dir).ok();
    }
}
