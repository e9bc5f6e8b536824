//! `kestrel chat` end to end: on the local default model (served in-process) a greedy answer
//! is what `kestrel generate --chat` prints, commands work and the saved conversation holds the
//! turns; against a running `kestrel serve`, Ctrl-C stops a long answer without ending the
//! program, and the server cancels the request (no running request, KV usage back to 0).

use crate::fleet_common;

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fleet_common::*;

const QUESTION: &str = "What is the capital of France?";

fn chat(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_kestrel"))
        .arg("chat")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kestrel chat starts")
}

fn generate_chat(question: &str, n: &str) -> String {
    let model = default_model();
    let out = Command::new(env!("CARGO_BIN_EXE_kestrel"))
        .args([
            "generate",
            "--model",
            model.to_str().expect("path"),
            "--chat",
            question,
        ])
        .args(["-n", n, "--threads", "1"])
        .output()
        .expect("generate runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("UTF-8")
        .trim()
        .to_string()
}

#[test]
fn local_chat_answers_like_generate_and_saves_the_conversation() {
    let dir = std::env::temp_dir().join(format!("kestrel-chat-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let saved = dir.join("chat.json");
    let model = default_model();
    let mut child = chat(&[
        "--model",
        model.to_str().expect("path"),
        "--threads",
        "1",
        "--kv-cache-memory",
        "128MiB",
        "--max-tokens",
        "24",
    ]);
    let script = format!(
        "/temp 0\n/bogus\n{QUESTION}\n/save {}\n/quit\n",
        saved.display()
    );
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(script.as_bytes())
        .expect("script written");
    let out = child.wait_with_output().expect("chat ends");
    let stdout = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "chat failed: {stderr}");
    assert!(stderr.contains("unknown command /bogus"), "{stderr}");
    assert!(
        stderr.contains("tokens ·") && stderr.contains("TTFT"),
        "stats line: {stderr}"
    );
    assert!(!stdout.is_empty(), "an answer was printed");
    assert_eq!(
        stdout,
        generate_chat(QUESTION, "24"),
        "greedy chat = generate --chat"
    );

    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&saved).expect("saved file"))
            .expect("saved JSON");
    let msgs = doc["messages"].as_array().expect("messages");
    assert_eq!(msgs.len(), 2);
    assert_eq!(msgs[0]["role"], "user");
    assert_eq!(msgs[0]["content"], QUESTION);
    assert_eq!(msgs[1]["role"], "assistant");
    assert_eq!(
        msgs[1]["content"].as_str().map(str::trim),
        Some(stdout.as_str())
    );
    assert_eq!(doc["temperature"], 0.0);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn ctrl_c_stops_the_answer_not_the_chat() {
    let (_server, addr) = serve(&[]);
    let url = format!("http://{addr}");
    let mut child = chat(&["--url", &url, "--max-tokens", "2000", "--ignore-eos"]);
    let mut stdin = child.stdin.take().expect("stdin");
    stdin
        .write_all(b"Tell me a long story.\n")
        .expect("question");
    stdin.flush().expect("flush");

    // Wait until the answer streams, then interrupt it.
    let mut stdout = child.stdout.take().expect("stdout");
    let mut first = [0u8; 16];
    let n = stdout.read(&mut first).expect("answer starts");
    assert!(n > 0, "the answer streams");
    let running = |addr: &str| {
        let scrape = request(addr, "GET", "/metrics", "", Duration::from_secs(5))
            .expect("metrics")
            .body;
        metric(&scrape, "kestrel:num_requests_running").unwrap_or(-1.0)
    };
    let start = Instant::now();
    while running(&addr) != 1.0 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the request runs on the server"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let sent = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(sent.success());

    // The chat goes on: a command still works, then /quit ends it cleanly.
    stdin.write_all(b"/temp 0.5\n/quit\n").expect("more input");
    drop(stdin);
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "chat did not end after /quit"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("stderr");
    assert!(status.success(), "chat exit: {stderr}");
    assert!(stderr.contains("[stopped]"), "{stderr}");
    assert!(
        stderr.contains("temperature 0.5"),
        "commands work after Ctrl-C: {stderr}"
    );

    // The server cancelled the request and freed its blocks.
    let start = Instant::now();
    loop {
        let scrape = request(&addr, "GET", "/metrics", "", Duration::from_secs(5))
            .expect("metrics")
            .body;
        let idle = metric(&scrape, "kestrel:num_requests_running") == Some(0.0)
            && metric(&scrape, "kestrel:kv_cache_usage_perc") == Some(0.0);
        if idle {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "request not cancelled: {scrape}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
