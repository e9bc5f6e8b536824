//! Shared helpers of the tests that run the `kestrel` binary.

#![allow(dead_code)]

mod serve;

pub use serve::{post_json, raw_request, spawn_and_read_address, spawn_capturing_stderr};

use std::path::PathBuf;
use std::process::{Command, Output};

/// The real default model; the test suite's script sets `KESTREL_DEFAULT_MODEL`.
pub fn model() -> PathBuf {
    PathBuf::from(std::env::var_os("KESTREL_DEFAULT_MODEL").expect(
        "KESTREL_DEFAULT_MODEL is not set: run the suite with scripts/test.sh (it fetches the default model)",
    ))
}

/// Runs the binary with `args` to completion.
pub fn kestrel(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kestrel"))
        .args(args)
        .output()
        .expect("kestrel runs")
}

/// The standard output of a run that must have succeeded (its stderr in the failure message).
pub fn stdout_of(out: &Output) -> String {
    assert!(
        out.status.success(),
        "kestrel failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).expect("stdout is UTF-8")
}
