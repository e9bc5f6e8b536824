//! `kestrel serve` with several models: models load on their first request, at most
//! `--max-loaded-models` are loaded (the least recently used idle one is unloaded for
//! another) and the process stays within `--models-memory-budget`, pinned and busy models are
//! never unloaded (a request that finds no room, or for a model larger than the budget, gets
//! 503 with `Retry-After`), each model answers as a single-model server of its file does
//! (under its name or an alias), `/v1/models` lists each model's LoRA adapters (a request
//! naming one is served by its model), `/v1/models`, `/models/load`, `/models/unload` and the
//! load counters report it all, and `kestrel chat` switches models with `/model`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::cli_common::{model as default_model, raw_request, spawn_and_read_address};

const WAIT: Duration = Duration::from_secs(300);
const PROMPT: &str = "The three primary colors are";

fn gemma() -> PathBuf {
    PathBuf::from(std::env::var_os("KESTREL_GEMMA3_270M").expect(
        "KESTREL_GEMMA3_270M is not set: run the suite with scripts/test.sh, or set it to the path scripts/fetch_gemma3_270m.sh prints",
    ))
}

/// A `kestrel serve` with `args`, killed on drop.
struct Server {
    child: Child,
    addr: String,
}

impl Server {
    fn start(args: &[String]) -> Server {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_kestrel"));
        cmd.arg("serve")
            .args(args)
            .args(["--port", "0", "--kv-cache-memory", "256MiB"]);
        let (child, addr) = spawn_and_read_address(cmd);
        Server { child, addr }
    }

    fn request(&self, method: &str, path: &str, body: &str) -> (u16, String, serde_json::Value) {
        let raw = raw_request(&self.addr, method, path, "", body, WAIT);
        let status = raw
            .get(9..12)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no status line: {raw}"));
        let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
        let json = serde_json::from_str(body).unwrap_or(serde_json::Value::Null);
        (status, head.to_string(), json)
    }

    /// The greedy completion of [`PROMPT`] by `model` (`None`: the only model).
    fn complete(&self, model: Option<&str>) -> String {
        let model = model.map_or(String::new(), |m| format!(r#""model":"{m}","#));
        let body = format!(r#"{{{model}"prompt":"{PROMPT}","max_tokens":12,"temperature":0}}"#);
        let (status, _, json) = self.request("POST", "/v1/completions", &body);
        assert_eq!(status, 200, "{json}");
        json["choices"][0]["text"]
            .as_str()
            .expect("a completion text")
            .to_string()
    }

    /// The token ids `/tokenize` gives for [`PROMPT`] under `model`.
    fn tokenize(&self, model: Option<&str>) -> serde_json::Value {
        let model = model.map_or(String::new(), |m| format!(r#""model":"{m}","#));
        let body = format!(r#"{{{model}"inputs":"{PROMPT}"}}"#);
        let (status, _, json) = self.request("POST", "/tokenize", &body);
        assert_eq!(status, 200, "{json}");
        json
    }

    /// Each model's `status.value` in `/v1/models`, in listed order.
    fn states(&self) -> Vec<(String, String)> {
        let (status, _, json) = self.request("GET", "/v1/models", "");
        assert_eq!(status, 200);
        json["data"]
            .as_array()
            .expect("a model list")
            .iter()
            .map(|m| {
                let id = m["id"].as_str().unwrap_or_default().to_string();
                let state = m["status"]["value"].as_str().unwrap_or_default();
                (id, state.to_string())
            })
            .collect()
    }

    /// The value of counter `name` for `model` (0 when not exported yet); a series of `name`
    /// without the label fails the test.
    fn counter(&self, name: &str, model: &str) -> u64 {
        let raw = raw_request(&self.addr, "GET", "/metrics", "", "", WAIT);
        let series = format!("{name}{{model_name=\"{model}\"}} ");
        let unlabelled = format!("{name} ");
        assert!(
            !raw.lines().any(|l| l.starts_with(&unlabelled)),
            "{name} without model_name"
        );
        raw.lines()
            .find_map(|l| l.strip_prefix(&series))
            .map_or(0, |v| v.trim().parse().expect("a counter value"))
    }

    /// The value of the unlabelled gauge `name`.
    fn gauge(&self, name: &str) -> f64 {
        let raw = raw_request(&self.addr, "GET", "/metrics", "", "", WAIT);
        let prefix = format!("{name} ");
        raw.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .map(|v| v.trim().parse().expect("a gauge value"))
            .unwrap_or_else(|| panic!("no {name} in /metrics"))
    }

    /// A `kB` field of the server process's `/proc/PID/status` (`VmRSS`, `VmHWM`), in bytes.
    fn proc_status_bytes(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("the server's /proc status");
        let kb: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no {field} in /proc status"));
        kb * 1024
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn states(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

fn path_arg(name: &str, path: &std::path::Path) -> [String; 2] {
    ["--model".into(), format!("{name}={}", path.display())]
}

/// What a single-model server of `path` answers: the greedy text and the tokenization.
fn single_model_answers(path: &std::path::Path) -> (String, serde_json::Value) {
    let server = Server::start(&["--model".into(), path.display().to_string()]);
    (server.complete(None), server.tokenize(None))
}

/// The memory budget of the swapping test: each model's estimate (weights file + the
/// 256 MiB KV cache: 350 MiB and 497 MiB) fits, both together (847 MiB) do not. The process
/// needs more than the estimate (tokenizer, activations, runtime: about 640 MiB resident with
/// Gemma loaded), and with both models resident it takes about 990 MiB.
const BUDGET: u64 = 800 << 20;

#[test]
fn two_models_take_turns_in_one_slot_and_answer_as_their_own_servers() {
    let (a_path, b_path) = (default_model(), gemma());
    let (a_text, a_tokens) = single_model_answers(&a_path);
    let (b_text, b_tokens) = single_model_answers(&b_path);
    assert_ne!(a_tokens, b_tokens, "the two models tokenize differently");

    let mut args: Vec<String> = Vec::new();
    args.extend(path_arg("a", &a_path));
    args.extend(path_arg("b", &b_path));
    args.extend(["--max-loaded-models", "1", "--model-alias", "smol=a"].map(String::from));
    args.extend(["--models-memory-budget".into(), BUDGET.to_string()]);
    let server = Server::start(&args);
    assert_eq!(
        server.states(),
        states(&[("a", "unloaded"), ("b", "unloaded")])
    );
    let mut peak_estimate: f64 = 0.0;
    for round in 0..3 {
        assert_eq!(server.complete(Some("a")), a_text, "round {round}, model a");
        assert_eq!(server.states()[0].1, "loaded");
        peak_estimate = peak_estimate.max(server.gauge("kestrel:models_memory_estimate_bytes"));
        assert_eq!(server.complete(Some("b")), b_text, "round {round}, model b");
        assert_eq!(
            server.states(),
            states(&[("a", "unloaded"), ("b", "loaded")])
        );
        peak_estimate = peak_estimate.max(server.gauge("kestrel:models_memory_estimate_bytes"));
    }
    // Each model's estimate is counted, never both at once; the whole process's peak resident
    // memory (loads and unloads included) stays within the budget too.
    assert!(
        peak_estimate > 0.0 && peak_estimate <= BUDGET as f64,
        "{peak_estimate}"
    );
    let peak_rss = server.proc_status_bytes("VmHWM");
    assert!(
        peak_rss <= BUDGET,
        "peak RSS {peak_rss} over the budget {BUDGET}"
    );
    assert_eq!(server.tokenize(Some("b")), b_tokens);
    assert_eq!(server.counter("kestrel:model_loads_total", "a"), 3);
    assert_eq!(server.counter("kestrel:model_loads_total", "b"), 3);
    assert_eq!(server.counter("kestrel:model_unloads_total", "a"), 3);
    assert_eq!(server.counter("kestrel:model_unloads_total", "b"), 2);
    // The engines' own series carry the model's name.
    for model in ["a", "b"] {
        let tokens = server.counter("kestrel:generation_tokens_total", model);
        assert!(tokens > 0, "no labelled generation tokens for {model}");
    }

    // An alias is its model, in /v1/models and in requests.
    let (status, _, list) = server.request("GET", "/v1/models", "");
    assert_eq!(status, 200);
    assert_eq!(list["data"][0]["aliases"], serde_json::json!(["smol"]));
    assert_eq!(
        server.complete(Some("smol")),
        a_text,
        "the alias is model a"
    );
    assert_eq!(server.counter("kestrel:model_loads_total", "a"), 4);

    // Unloaded on request, then loaded again by the next request for it.
    let (status, _, card) = server.request("POST", "/models/unload", r#"{"model":"smol"}"#);
    assert_eq!(status, 200, "{card}");
    assert_eq!(
        (&card["id"], &card["status"]["value"]),
        (&"a".into(), &"unloaded".into())
    );
    assert_eq!(server.counter("kestrel:model_unloads_total", "a"), 4);
    assert_eq!(server.tokenize(Some("a")), a_tokens);
    assert_eq!(server.complete(Some("b")), b_text);
    assert_eq!(server.counter("kestrel:model_loads_total", "b"), 4);

    // Unknown names are OpenAI's 404; a request naming no model is a 400 with several served.
    let unknown = r#"{"model":"nope","prompt":"x","max_tokens":1}"#;
    let (status, _, json) = server.request("POST", "/v1/completions", unknown);
    assert_eq!(status, 404, "{json}");
    assert_eq!(json["error"]["code"], "model_not_found");
    assert_eq!(json["error"]["param"], "model");
    let (status, _, json) = server.request("POST", "/models/load", r#"{"model":"nope"}"#);
    assert_eq!(status, 404, "{json}");
    let (status, _, json) = server.request("POST", "/v1/completions", r#"{"prompt":"x"}"#);
    assert_eq!(status, 400, "{json}");
    assert!(json["error"]["message"]
        .as_str()
        .unwrap()
        .contains("2 models"));
    let (status, _, _) = server.request("POST", "/models/unload", r#"{"name":"a"}"#);
    assert_eq!(status, 400, "a body without `model` is refused");
}

/// Sends a streaming request for `model` that generates until `max_tokens`, reads its first
/// bytes (so it is running) and returns the open connection.
fn start_stream(addr: &str, model: &str) -> TcpStream {
    // Token ids 0 and 2 are the default model's end-of-text and end-of-turn tokens.
    let body = format!(
        r#"{{"model":"{model}","prompt":"Count:","max_tokens":4000,"stream":true,"temperature":0,"logit_bias":{{"0":-100,"2":-100}}}}"#
    );
    let mut s = TcpStream::connect(addr).expect("connects");
    s.set_read_timeout(Some(WAIT)).unwrap();
    write!(
        s,
        "POST /v1/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut first = [0u8; 256];
    let n = s.read(&mut first).expect("the stream starts");
    let head = String::from_utf8_lossy(&first[..n]);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    s
}

#[test]
fn pinned_and_busy_models_are_not_unloaded_and_a_third_gets_503() {
    let path = default_model();
    let mut args: Vec<String> = Vec::new();
    for name in ["a", "b", "c"] {
        args.extend(path_arg(name, &path));
    }
    args.extend(["--max-loaded-models", "2", "--pin", "a"].map(String::from));
    let server = Server::start(&args);
    server.complete(Some("a"));
    let busy = start_stream(&server.addr, "b");

    let (status, head, json) = server.request("POST", "/models/load", r#"{"model":"c"}"#);
    assert_eq!(status, 503, "{json}");
    assert!(head.to_ascii_lowercase().contains("retry-after:"), "{head}");
    let body = r#"{"model":"c","prompt":"x","max_tokens":1}"#;
    let (status, head, _) = server.request("POST", "/v1/completions", body);
    assert_eq!(status, 503);
    assert!(head.to_ascii_lowercase().contains("retry-after:"), "{head}");
    let (status, _, json) = server.request("POST", "/models/unload", r#"{"model":"a"}"#);
    assert_eq!(status, 409, "a pinned model is not unloaded: {json}");
    let (status, _, json) = server.request("POST", "/models/unload", r#"{"model":"b"}"#);
    assert_eq!(status, 409, "a busy model is not unloaded: {json}");
    assert_eq!(
        server.states(),
        states(&[("a", "loaded"), ("b", "loaded"), ("c", "unloaded")])
    );

    // Once b's client is gone, b is idle and c takes its place; the pinned a stays.
    drop(busy);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (status, _, json) = server.request("POST", "/v1/completions", body);
        if status == 200 {
            break;
        }
        assert_eq!(status, 503, "{json}");
        assert!(Instant::now() < deadline, "b never became idle");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        server.states(),
        states(&[("a", "loaded"), ("b", "unloaded"), ("c", "loaded")])
    );
    assert_eq!(server.counter("kestrel:model_unloads_total", "a"), 0);
    assert_eq!(server.counter("kestrel:model_unloads_total", "b"), 1);
}

#[test]
fn a_model_that_fails_to_load_reports_why_and_the_others_serve() {
    let bad = std::env::temp_dir().join(format!("kestrel-bad-model-{}.gguf", std::process::id()));
    std::fs::write(&bad, b"this is not a GGUF file").unwrap();
    let mut args: Vec<String> = Vec::new();
    args.extend(path_arg("good", &default_model()));
    args.extend(path_arg("bad", &bad));
    // Gemma's estimate (253 MB file + half the 256 MiB KV cache) is over the budget; the
    // default model's (98 MB + 128 MiB) is not.
    args.extend(path_arg("huge", &gemma()));
    args.extend(["--models-memory-budget", "300MiB"].map(String::from));
    args.extend(["--api-key".into(), "sk-test".into()]);
    let server = Server::start(&args);
    let auth = "Authorization: Bearer sk-test\r\n";
    let send = |body: &str| {
        let raw = raw_request(&server.addr, "POST", "/v1/completions", auth, body, WAIT);
        let status: u16 = raw[9..12].parse().unwrap();
        let json: serde_json::Value =
            serde_json::from_str(raw.split_once("\r\n\r\n").unwrap().1).unwrap();
        (status, json)
    };

    // Without the key nothing is loaded.
    let (status, _, _) = server.request("POST", "/models/load", r#"{"model":"good"}"#);
    assert_eq!(status, 401);
    let listed = raw_request(&server.addr, "GET", "/v1/models", auth, "", WAIT);
    assert!(listed.contains(r#""value":"unloaded""#) && !listed.contains(r#""value":"loaded""#));

    let (status, json) = send(r#"{"model":"bad","prompt":"x","max_tokens":1}"#);
    assert_eq!(status, 500, "{json}");
    let message = json["error"]["message"].as_str().unwrap();
    assert!(message.contains("`bad` failed to load"), "{message}");
    let (status, json) = send(r#"{"model":"good","prompt":"x","max_tokens":2}"#);
    assert_eq!(status, 200, "{json}");
    let listed = raw_request(&server.addr, "GET", "/v1/models", auth, "", WAIT);
    let json: serde_json::Value =
        serde_json::from_str(listed.split_once("\r\n\r\n").unwrap().1).unwrap();
    let bad_card = &json["data"][1];
    assert_eq!(bad_card["id"], "bad");
    assert_eq!(bad_card["status"]["value"], "unloaded");
    assert!(bad_card["status"]["error"].as_str().is_some(), "{json}");

    // A model that can never fit the budget is refused with 503 and a reason.
    let huge = r#"{"model":"huge","prompt":"x","max_tokens":1}"#;
    let raw = raw_request(&server.addr, "POST", "/v1/completions", auth, huge, WAIT);
    assert!(raw.starts_with("HTTP/1.1 503"), "{raw}");
    assert!(raw.to_ascii_lowercase().contains("retry-after:"), "{raw}");
    assert!(raw.contains("--models-memory-budget"), "{raw}");
    std::fs::remove_file(&bad).unwrap();
}

#[test]
fn lora_adapters_are_listed_under_each_model_and_a_request_naming_one_is_served() {
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
    let tiny = fixtures.join("tiny-llama-f32");
    let mut args: Vec<String> = Vec::new();
    args.extend(path_arg("a", &tiny));
    args.extend(path_arg("b", &tiny));
    args.extend(["--max-lora-rank", "8", "--lora-modules"].map(String::from));
    args.push(format!("all7={}", fixtures.join("lora/all7").display()));
    let server = Server::start(&args);
    let listed = |server: &Server| {
        let (status, _, json) = server.request("GET", "/v1/models", "");
        assert_eq!(status, 200, "{json}");
        json["data"]
            .as_array()
            .expect("a model list")
            .iter()
            .map(|c| {
                let parent = c["parent"].as_str().unwrap_or("-");
                let state = c["status"]["value"].as_str().unwrap_or_default();
                format!("{}<{parent}:{state}", c["id"].as_str().unwrap_or_default())
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        listed(&server),
        [
            "a<-:unloaded",
            "all7<a:unloaded",
            "b<-:unloaded",
            "all7<b:unloaded"
        ]
    );
    // The adapter's name is served by the first model that has it.
    let body = r#"{"model":"all7","prompt":"hello","max_tokens":4,"temperature":0}"#;
    let (status, _, json) = server.request("POST", "/v1/completions", body);
    assert_eq!(status, 200, "{json}");
    assert_eq!(json["model"], "all7");
    assert_eq!(
        listed(&server),
        [
            "a<-:loaded",
            "all7<a:loaded",
            "b<-:unloaded",
            "all7<b:unloaded"
        ]
    );
}

#[test]
fn kestrel_chat_lists_the_models_and_switches_with_slash_model() {
    let path = default_model();
    let mut args: Vec<String> = Vec::new();
    args.extend(path_arg("a", &path));
    args.extend(path_arg("b", &path));
    let server = Server::start(&args);
    let url = format!("http://{}", server.addr);
    let mut child = Command::new(env!("CARGO_BIN_EXE_kestrel"))
        .args([
            "chat",
            "--url",
            &url,
            "--model-name",
            "a",
            "--max-tokens",
            "4",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kestrel chat starts");
    let script = "/temp 0\n/model\n/model nope\n/model b\nHello\n/quit\n";
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(script.as_bytes())
        .expect("script written");
    let out = child.wait_with_output().expect("chat ends");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "chat failed: {stderr}");
    assert!(stderr.contains("  a (unloaded) *"), "{stderr}");
    assert!(stderr.contains("  b (unloaded)\n"), "{stderr}");
    assert!(stderr.contains("no model \"nope\""), "{stderr}");
    assert!(stderr.contains("chatting with b"), "{stderr}");
    assert!(!stderr.contains("error:"), "{stderr}");
    // The answer came from b: only b was ever loaded.
    assert_eq!(
        server.states(),
        states(&[("a", "unloaded"), ("b", "loaded")])
    );
}
