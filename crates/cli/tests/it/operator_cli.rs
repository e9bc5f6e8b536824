//! `kestrel serve` for operators, end to end on the default model: the access log shows at the
//! default level with each request's id, the startup summary says what was chosen,
//! `--log-format json` writes one JSON object per line, and `--config FILE` sets flags that
//! command-line flags and environment variables override (bad files fail with the key named).

use crate::cli_common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A `kestrel serve` whose stderr goes to a file; killed when dropped.
struct Server {
    child: Child,
    addr: String,
    log: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// The log so far.
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the log has a line containing every one of `needles`; returns it.
    fn log_line(&self, needles: &[&str]) -> String {
        let start = Instant::now();
        loop {
            let log = self.log();
            if let Some(line) = log.lines().find(|l| needles.iter().all(|n| l.contains(n))) {
                return line.to_string();
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "no log line with {needles:?} in:\n{log}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kestrel-operator-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// `kestrel serve args...` with the log level variables removed and `env` set; stderr goes to a
/// file (never a pipe nobody reads).
fn serve(name: &str, args: &[&str], env: &[(&str, &str)]) -> Server {
    let log = temp_dir(name).join("stderr.log");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kestrel"));
    cmd.arg("serve")
        .args(args)
        .env_remove("KESTREL_LOG")
        .env_remove("RUST_LOG")
        .env_remove("KESTREL_LOG_FORMAT")
        .stdout(Stdio::piped())
        .stderr(Stdio::from(std::fs::File::create(&log).expect("log file")));
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("kestrel serve starts");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let start = Instant::now();
    let addr = loop {
        let line = match lines.next() {
            Some(Ok(line)) => line,
            _ => panic!(
                "kestrel serve exited before printing its address: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            ),
        };
        if let Some(rest) = line.split("http://").nth(1) {
            break rest.trim().to_string();
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no address line"
        );
    };
    std::thread::spawn(move || for _ in lines {});
    Server { child, addr, log }
}

/// The default model and the flags that keep a test server small.
fn small(extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = vec![cli_common::model().to_string_lossy().into_owned()];
    args.extend(
        [
            "--port",
            "0",
            "--threads",
            "1",
            "--kv-cache-memory",
            "64MiB",
        ]
        .iter()
        .chain(extra)
        .map(|s| s.to_string()),
    );
    args
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// One HTTP/1.1 request with an optional `X-Request-Id`; returns status, echoed id and body.
fn http(
    addr: &str,
    method: &str,
    path: &str,
    id: Option<&str>,
    body: &str,
) -> (u16, String, String) {
    let id_header = id.map_or_else(String::new, |id| format!("X-Request-Id: {id}\r\n"));
    let raw = cli_common::raw_request(
        addr,
        method,
        path,
        &id_header,
        body,
        Duration::from_secs(60),
    );
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let echoed = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("x-request-id")
                .then(|| v.trim().to_string())
        })
        .unwrap_or_default();
    (status, echoed, body.to_string())
}

/// `/v1/models`' first card.
fn model_card(addr: &str) -> Value {
    let (status, _, body) = http(addr, "GET", "/v1/models", None, "");
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).expect("JSON");
    v["data"][0].clone()
}

#[test]
fn the_access_log_and_startup_summary_show_by_default() {
    let server = serve("default-level", &strs(&small(&[])), &[]);
    let (status, echoed, _) = http(&server.addr, "GET", "/v1/models", Some("acc-log-1"), "");
    assert_eq!((status, echoed.as_str()), (200, "acc-log-1"));
    let line = server.log_line(&["kestrel::request", "acc-log-1"]);
    assert!(line.contains("INFO"), "{line}");
    assert!(
        line.contains("request_id=\"acc-log-1\"") || line.contains("request_id=acc-log-1"),
        "{line}"
    );
    assert!(
        line.contains("route=\"/v1/models\"") || line.contains("route=/v1/models"),
        "{line}"
    );
    assert!(line.contains("status=200"), "{line}");
    assert!(!line.contains('\u{1b}'), "no color codes in a file: {line}");

    // A generation request's line carries the id and the engine's ids of its choices.
    let body = r#"{"prompt":"Hello","max_tokens":2,"temperature":0}"#;
    let (status, echoed, text) = http(&server.addr, "POST", "/v1/completions", None, body);
    assert_eq!(status, 200, "{text}");
    assert_eq!(echoed.len(), 32, "a generated id: {echoed:?}");
    let line = server.log_line(&["kestrel::request", &echoed]);
    assert!(line.contains("engine_ids="), "{line}");
    assert!(line.contains("completion_tokens=2"), "{line}");

    // The startup summary: threads and why, ISA, KV cache size and sizing, batching, model, URLs.
    let log = server.log();
    let has = |needle: &str| assert!(log.contains(needle), "no {needle:?} in:\n{log}");
    has("kestrel::startup");
    has("threads: 1 (--threads)");
    has("ISA: ");
    has("KV cache: ");
    has("sized by --kv-cache-memory 64.0 MiB");
    has("batching: up to 64 sequences, 512 batched tokens per step");
    has("model: ");
    has("(llama, ");
    has("M parameters, mostly ");
    has(&format!("playground: http://{}/", server.addr));
    has(&format!("API base: http://{}/v1", server.addr));
    let kv = log.lines().find(|l| l.contains("KV cache: ")).unwrap();
    let tokens: usize = kv
        .split("KV cache: ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no token count in {kv}"));
    assert!(tokens > 0 && tokens.is_multiple_of(16), "{kv}");
}

#[test]
fn json_logs_are_one_object_per_line() {
    let server = serve("json", &strs(&small(&["--log-format", "json"])), &[]);
    let (status, _, _) = http(&server.addr, "GET", "/nope", Some("json-404"), "");
    assert_eq!(status, 404);
    server.log_line(&["json-404"]);
    let log = server.log();
    let lines: Vec<Value> = log
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let access = lines
        .iter()
        .find(|v| v["request_id"] == "json-404")
        .unwrap_or_else(|| panic!("no access line in:\n{log}"));
    assert_eq!(access["target"], "kestrel::request");
    assert_eq!(access["level"], "INFO");
    assert_eq!(access["status"], 404);
    assert!(access["timestamp"].is_string());
    assert!(
        lines.iter().any(|v| v["target"] == "kestrel::startup"
            && v["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("ISA: "))),
        "{log}"
    );
}

/// A config file in a fresh directory.
fn config(name: &str, text: &str) -> PathBuf {
    let path = temp_dir(name).join("kestrel.toml");
    std::fs::write(&path, text).expect("write config");
    path
}

fn path_str(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

#[test]
fn a_config_file_sets_flags_that_flags_and_env_override() {
    let text = format!(
        "model = {:?}\nserved_model_name = \"from-file\"\nmax-total-tokens = 300\n\
         port = 0\nthreads = 1\nkv_cache_memory = \"64MiB\"\n",
        path_str(&cli_common::model())
    );
    let file = path_str(&config("config-ok", &text));
    let server = serve("config-file", &["--config", &file], &[]);
    let card = model_card(&server.addr);
    assert_eq!(card["id"], "from-file");
    assert_eq!(card["max_model_len"], 300);
    server.log_line(&["flags read from the config file", "kestrel.toml"]);
    drop(server);

    let server = serve(
        "config-override",
        &["--config", &file, "--served-model-name", "from-flag"],
        &[("MAX_TOTAL_TOKENS", "200")],
    );
    let card = model_card(&server.addr);
    assert_eq!(card["id"], "from-flag", "the flag beats the file");
    assert_eq!(card["max_model_len"], 200, "the environment beats the file");
}

#[test]
fn bad_config_files_fail_naming_the_key() {
    for (name, text, want) in [
        ("unknown", "max_num_seq = 3\n", "unknown key `max_num_seq`"),
        (
            "type",
            "max_num_seqs = \"lots\"\n",
            "`max_num_seqs` must be an integer",
        ),
        ("bool", "cors = 1\n", "`cors` must be a boolean"),
    ] {
        let file = path_str(&config(name, text));
        let out = Command::new(env!("CARGO_BIN_EXE_kestrel"))
            .args(["serve", "--config", &file, "--port", "0"])
            .output()
            .expect("runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{name}: {err}");
        assert!(err.contains(want), "{name}: {err}");
        assert!(
            err.contains(&file),
            "{name}: the error names the file: {err}"
        );
    }
}

/// `--chat-template FILE` replaces the model's own template on the chat routes: with a template
/// that renders only the messages' text, the prompt of "Hello" is a couple of tokens, where the
/// default model's own template (its system prompt, role headers) makes dozens.
#[test]
fn a_chat_template_file_replaces_the_models_own() {
    let dir = temp_dir("chat-template");
    let template = dir.join("plain.jinja");
    std::fs::write(
        &template,
        "{% for m in messages %}{{ m['content'] }}{% endfor %}",
    )
    .unwrap();
    let template_arg = template.to_string_lossy().into_owned();
    let server = serve(
        "chat-template",
        &strs(&small(&["--chat-template", &template_arg])),
        &[],
    );
    let body = r#"{"messages":[{"role":"user","content":"Hello"}],"max_tokens":1}"#;
    let (status, _, text) = http(&server.addr, "POST", "/v1/chat/completions", None, body);
    assert_eq!(status, 200, "{text}");
    let reply: Value = serde_json::from_str(&text).expect("JSON");
    let prompt_tokens = reply["usage"]["prompt_tokens"].as_u64().expect("usage");
    assert!(
        (1..=3).contains(&prompt_tokens),
        "the plain template's prompt is \"Hello\" (+BOS), got {prompt_tokens} tokens"
    );
}

/// `--chat-template chatml` picks Kestrel's built-in ChatML template by name: the default
/// model's own template adds a default system prompt, the plain ChatML one does not.
#[test]
fn a_built_in_chat_template_is_chosen_by_name() {
    let body = r#"{"messages":[{"role":"user","content":"Hello"}],"max_tokens":1}"#;
    let prompt_tokens = |args: &[&str]| {
        let server = serve("named-template", &strs(&small(args)), &[]);
        let (status, _, text) = http(&server.addr, "POST", "/v1/chat/completions", None, body);
        assert_eq!(status, 200, "{text}");
        let reply: Value = serde_json::from_str(&text).expect("JSON");
        reply["usage"]["prompt_tokens"].as_u64().expect("usage")
    };
    let own = prompt_tokens(&[]);
    let chatml = prompt_tokens(&["--chat-template", "chatml"]);
    assert!(
        (8..=10).contains(&chatml) && chatml < own,
        "ChatML around \"Hello\" is 9 tokens ({chatml}); the model's own template adds a \
         system prompt ({own})"
    );
}

/// A template that takes only alternating user/model turns (Gemma's) still serves what agents
/// send — several developer messages, consecutive user turns, a system message after the
/// user's turn, a tool result — folded into its shape; a conversation it cannot take even
/// folded (one that opens with the assistant) keeps the template's own refusal.
#[test]
fn a_strict_template_serves_agent_shaped_conversations_folded() {
    let server = serve(
        "folded-turns",
        &strs(&small(&["--chat-template", "gemma"])),
        &[],
    );
    let agent = r#"{"max_tokens":1,"messages":[
        {"role":"developer","content":"You are a coding agent."},
        {"role":"developer","content":"Work in /tmp."},
        {"role":"user","content":"Hello"},
        {"role":"user","content":"List the files."},
        {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function",
            "function":{"name":"ls","arguments":"{}"}}]},
        {"role":"tool","tool_call_id":"c1","content":"a.txt"},
        {"role":"system","content":"Reply briefly."}]}"#;
    let (status, _, text) = http(&server.addr, "POST", "/v1/chat/completions", None, agent);
    assert_eq!(status, 200, "{text}");
    let opens_with_assistant =
        r#"{"max_tokens":1,"messages":[{"role":"assistant","content":"Hi"}]}"#;
    let (status, _, text) = http(
        &server.addr,
        "POST",
        "/v1/chat/completions",
        None,
        opens_with_assistant,
    );
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("alternate"), "{text}");
}

/// `--override-generation-config` fills what requests leave out: with a `max_new_tokens` of 3
/// a request without a limit gets 3 tokens, one with its own limit keeps it; a bad value stops
/// serve naming the flag's key.
#[test]
fn generation_defaults_fill_what_requests_leave_out() {
    let config = r#"{"temperature": 0, "max_new_tokens": 3}"#;
    let server = serve(
        "generation-defaults",
        &strs(&small(&["--override-generation-config", config])),
        &[],
    );
    let tokens = |body: &str| {
        let (status, _, text) = http(&server.addr, "POST", "/v1/completions", None, body);
        assert_eq!(status, 200, "{text}");
        let reply: Value = serde_json::from_str(&text).expect("JSON");
        reply["usage"]["completion_tokens"].as_u64().expect("usage")
    };
    assert_eq!(
        tokens(r#"{"prompt":"Once upon a time","ignore_eos":true}"#),
        3
    );
    assert_eq!(
        tokens(r#"{"prompt":"Once upon a time","ignore_eos":true,"max_tokens":5}"#),
        5
    );
    let out = Command::new(env!("CARGO_BIN_EXE_kestrel"))
        .arg("serve")
        .args(strs(&small(&[
            "--override-generation-config",
            r#"{"temperature": 9}"#,
        ])))
        .output()
        .expect("kestrel runs");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--override-generation-config") && stderr.contains("temperature"),
        "{stderr}"
    );
}

/// A chat template that does not compile stops `kestrel serve` before it serves, naming the
/// file; a missing one likewise (and names the built-in templates).
#[test]
fn a_bad_chat_template_file_stops_serve_naming_it() {
    let dir = temp_dir("bad-template");
    let broken = dir.join("broken.jinja");
    std::fs::write(&broken, "{% for m in %}").unwrap();
    let missing = dir.join("missing.jinja");
    for path in [&broken, &missing] {
        let path_arg = path.to_string_lossy().into_owned();
        let out = Command::new(env!("CARGO_BIN_EXE_kestrel"))
            .arg("serve")
            .args(strs(&small(&["--chat-template", &path_arg])))
            .output()
            .expect("kestrel runs");
        assert!(!out.status.success(), "serve refused {path_arg}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("chat template") && stderr.contains(&path_arg),
            "stderr names the template file {path_arg}:\n{stderr}"
        );
        if path == &missing {
            assert!(stderr.contains("chatml, gemma"), "{stderr}");
        }
    }
}

#[test]
fn an_unknown_reasoning_parser_stops_serve_naming_the_choices() {
    let out = Command::new(env!("CARGO_BIN_EXE_kestrel"))
        .arg("serve")
        .args(strs(&small(&["--reasoning-parser", "granite"])))
        .output()
        .expect("kestrel runs");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("granite") && stderr.contains("deepseek_r1, qwen3, harmony, none"),
        "{stderr}"
    );
}
