//! Starting a `kestrel serve` from a test, finding where it listens, and talking to it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::thread::JoinHandle;
use std::time::Duration;

/// Spawns `cmd` (a `kestrel serve`, usually with `--port 0`) with its stdout piped and its
/// stderr discarded, and reads stdout up to the line with the server's `http://` address.
/// Returns the child and that address (`host:port`).
pub fn spawn_and_read_address(mut cmd: Command) -> (Child, String) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("starts");
    let addr = read_address(child.stdout.take().unwrap());
    (child, addr)
}

/// [`spawn_and_read_address`] keeping stderr: a thread drains it as it comes (the server
/// logs at INFO and must never block on a full pipe) and returns all of it once the child
/// has exited.
pub fn spawn_capturing_stderr(mut cmd: Command) -> (Child, String, JoinHandle<String>) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts");
    let mut pipe = child.stderr.take().unwrap();
    let stderr = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = pipe.read_to_string(&mut text);
        text
    });
    let addr = read_address(child.stdout.take().unwrap());
    (child, addr, stderr)
}

/// Reads `stdout` up to the line with the server's `http://` address.
fn read_address(stdout: ChildStdout) -> String {
    let mut lines = BufReader::new(stdout).lines();
    loop {
        let line = lines.next().expect("server prints its address").unwrap();
        if let Some(url) = line.split("http://").nth(1) {
            return url.trim().to_string();
        }
    }
}

/// `POST path` with a JSON `body` on a fresh connection; the whole raw response (status line,
/// headers and body). Fails the test if the server does not answer within `timeout`.
pub fn post_json(addr: &str, path: &str, body: &str, timeout: Duration) -> String {
    raw_request(addr, "POST", path, "", body, timeout)
}

/// One HTTP/1.1 request (`headers`: extra header lines, each ending in `\r\n`) with a JSON
/// `body` on a fresh connection; the whole raw response.
pub fn raw_request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &str,
    body: &str,
    timeout: Duration,
) -> String {
    let mut s = TcpStream::connect(addr).expect("connects");
    s.set_read_timeout(Some(timeout)).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{headers}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}
