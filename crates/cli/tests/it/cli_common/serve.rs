//! Starting a `kestrel serve` from a test and finding where it listens.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// Spawns `cmd` (a `kestrel serve`, usually with `--port 0`) with its stdout piped and its
/// stderr discarded, and reads stdout up to the line with the server's `http://` address.
/// Returns the child and that address (`host:port`).
pub fn spawn_and_read_address(mut cmd: Command) -> (Child, String) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let addr = loop {
        let line = lines.next().expect("server prints its address").unwrap();
        if let Some(url) = line.split("http://").nth(1) {
            break url.trim().to_string();
        }
    };
    (child, addr)
}
