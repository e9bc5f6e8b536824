//! `kestrel serve` refuses configurations that would silently weaken it, accepts a key file,
//! and exits within its shutdown timeout after SIGTERM even while a client stalls.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::cli_common::{model, spawn_and_read_address};

fn serve(args: &[&str], envs: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kestrel"));
    cmd.args(["serve", "--model"])
        .arg(model())
        .args(["--port", "0", "--kv-cache-memory", "64MiB"])
        .args(args)
        .env_remove("KESTREL_API_KEY");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd
}

/// Runs a serve command that must fail at startup; returns its stderr.
fn startup_error(args: &[&str], envs: &[(&str, &str)]) -> String {
    let out = serve(args, envs).output().expect("kestrel runs");
    assert!(!out.status.success(), "kestrel serve {args:?} started");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn an_empty_api_key_is_a_startup_error() {
    let err = startup_error(&["--api-key", ""], &[]);
    assert!(err.contains("empty"), "{err}");
    let err = startup_error(&[], &[("KESTREL_API_KEY", "")]);
    assert!(err.contains("empty"), "{err}");
}

#[test]
fn an_api_key_file_without_keys_is_a_startup_error() {
    let dir = std::env::temp_dir().join(format!("kestrel-keys-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("empty.txt");
    std::fs::write(&path, "# no keys here\n\n").unwrap();
    let err = startup_error(&["--api-key-file", path.to_str().unwrap()], &[]);
    assert!(err.contains("no key"), "{err}");
}

/// Starts the server and returns it with its address.
fn start(args: &[&str]) -> (Child, String) {
    spawn_and_read_address(serve(args, &[]))
}

/// The status line of `GET path` with `key`.
fn get_status(addr: &str, path: &str, key: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out.lines().next().unwrap_or("").to_string()
}

#[test]
fn key_file_keys_work_and_sigterm_exits_despite_a_stalled_client() {
    let dir = std::env::temp_dir().join(format!("kestrel-keys2-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("keys.txt");
    std::fs::write(&path, "# team keys\nsk-alpha\n\n  sk-beta  \n").unwrap();
    let (mut child, addr) = start(&[
        "--api-key-file",
        path.to_str().unwrap(),
        "--shutdown-timeout",
        "2",
        "--body-timeout",
        "600",
    ]);
    assert!(get_status(&addr, "/v1/models", "sk-alpha").contains("200"));
    assert!(get_status(&addr, "/v1/models", "sk-beta").contains("200"));
    assert!(get_status(&addr, "/v1/models", "sk-gamma").contains("401"));
    // A client that sends half a body and then nothing.
    let mut stalled = TcpStream::connect(&addr).unwrap();
    write!(
        stalled,
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-alpha\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{\"prompt\":"
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let start = Instant::now();
    let limit = Duration::from_secs(15);
    let exited = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if start.elapsed() > limit {
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let waited = start.elapsed();
    if exited.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    drop(stalled);
    assert!(exited.is_some(), "still running {waited:?} after SIGTERM");
    assert!(
        waited >= Duration::from_secs(1),
        "exited at once ({waited:?}): no drain?"
    );
}

#[test]
fn the_model_may_be_positional_and_host_is_an_alias_of_hostname() {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kestrel"));
    cmd.arg("serve")
        .arg(model())
        .args([
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--kv-cache-memory",
            "64MiB",
        ])
        .env_remove("KESTREL_API_KEY")
        .env_remove("MODEL_ID");
    let (mut child, addr) = spawn_and_read_address(cmd);
    assert!(addr.starts_with("127.0.0.1:"), "{addr}");
    assert!(get_status(&addr, "/health", "").contains("200"));
    let _ = child.kill();
    let _ = child.wait();

    // Two different models are refused rather than one silently winning.
    let out = Command::new(env!("CARGO_BIN_EXE_kestrel"))
        .arg("serve")
        .arg(model())
        .args(["--model", "/elsewhere/other.gguf", "--port", "0"])
        .env_remove("MODEL_ID")
        .output()
        .expect("kestrel runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("given twice"), "{err}");
}

/// Sends `signal` (a `kill` name such as `TERM`) to `child`.
fn signal(child: &Child, signal: &str) {
    let sent = Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
}

/// Waits up to `limit` for `child` to exit; kills it and returns `None` if it does not.
fn wait_exit(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

#[test]
fn a_second_signal_exits_at_once_while_draining() {
    let (mut child, addr) = start(&["--shutdown-timeout", "120", "--body-timeout", "600"]);
    // A client that holds the drain open: half a body, then nothing.
    let mut stalled = TcpStream::connect(&addr).unwrap();
    write!(
        stalled,
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{\"prompt\":"
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    signal(&child, "INT");
    // Still draining (the stalled client keeps it open) ...
    std::thread::sleep(Duration::from_millis(700));
    assert!(
        child.try_wait().unwrap().is_none(),
        "exited before the drain"
    );
    // ... until a second signal.
    let start = Instant::now();
    signal(&child, "TERM");
    let status = wait_exit(&mut child, Duration::from_secs(10));
    drop(stalled);
    let status = status.expect("still running 10 s after the second signal");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    assert!(
        !status.success(),
        "a forced exit reports failure: {status:?}"
    );
}
