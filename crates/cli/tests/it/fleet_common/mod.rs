//! A fleet on this machine for tests: a real `redis-server` on a free port and real `kestrel
//! gateway`, `kestrel worker` and `kestrel serve` processes, with a small HTTP/1.1 client.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub fn default_model() -> PathBuf {
    PathBuf::from(std::env::var_os("KESTREL_DEFAULT_MODEL").expect(
        "KESTREL_DEFAULT_MODEL is not set: run the suite with scripts/test.sh (it fetches the default model)",
    ))
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A child process killed when dropped.
pub struct Proc {
    pub child: Child,
    pub name: String,
}

impl Proc {
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then wait up to `limit` for the exit.
    pub fn terminate(&mut self, limit: Duration) -> bool {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Ok(Some(_)) = self.child.try_wait() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A `redis-server` with its data in a temporary directory (AOF on, fsync always).
pub struct Redis {
    pub port: u16,
    pub dir: PathBuf,
    proc: Option<Proc>,
}

impl Redis {
    pub fn start() -> Redis {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!("kestrel-redis-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut r = Redis {
            port,
            dir,
            proc: None,
        };
        r.launch();
        r
    }

    fn launch(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args([
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
            ])
            .arg("--dir")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server runs (scripts/test.sh installs it)");
        self.proc = Some(Proc {
            child,
            name: "redis".into(),
        });
        let start = Instant::now();
        while self.cli(&["PING"]).trim() != "PONG" {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "redis did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Stops the server (SIGTERM: the AOF is complete) and starts it again on the same data.
    pub fn restart(&mut self) {
        if let Some(mut p) = self.proc.take() {
            assert!(p.terminate(Duration::from_secs(10)), "redis did not stop");
        }
        self.launch();
    }

    /// `redis-cli` output of one command.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Pending (taken, unacknowledged) entries over every request stream of every model.
    pub fn pending(&self) -> usize {
        self.request_streams()
            .iter()
            .map(|stream| {
                let out = self.cli(&["XPENDING", stream, "kestrel-workers"]);
                out.lines()
                    .next()
                    .and_then(|l| l.trim().parse().ok())
                    .unwrap_or(0)
            })
            .sum()
    }

    /// Every request stream (`kestrel:requests:{model}:{band}`).
    pub fn request_streams(&self) -> Vec<String> {
        self.cli(&["--scan", "--pattern", "kestrel:requests:*"])
            .lines()
            .map(|l| l.trim().to_string())
            .filter(|l| !l.is_empty())
            .collect()
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        if let Some(p) = self.proc.as_mut() {
            p.kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Where a child's stderr (its log) goes.
pub fn log_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("kestrel-test-{}-{name}.log", std::process::id()))
}

fn spawn(name: &str, args: &[String], stdout: Stdio) -> Proc {
    spawn_with_env(name, args, stdout, &[])
}

fn spawn_with_env(name: &str, args: &[String], stdout: Stdio, env: &[(&str, &str)]) -> Proc {
    let log = log_path(name);
    let child = Command::new(env!("CARGO_BIN_EXE_kestrel"))
        .args(args)
        .env("RUST_LOG", "warn")
        .envs(env.iter().copied())
        .stdout(stdout)
        .stderr(
            std::fs::File::create(&log)
                .map(Stdio::from)
                .unwrap_or(Stdio::null()),
        )
        .spawn()
        .expect("kestrel starts");
    Proc {
        child,
        name: name.into(),
    }
}

/// Reads the child's stdout until it prints `http://ADDR`.
fn address_of(p: &mut Proc) -> String {
    let out = p.child.stdout.take().expect("piped stdout");
    let mut lines = BufReader::new(out).lines();
    let start = Instant::now();
    loop {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("{} exited before printing its address", p.name))
            .unwrap();
        if let Some(rest) = line.split("http://").nth(1) {
            let addr = rest.split([',', ' ']).next().unwrap().trim().to_string();
            std::thread::spawn(move || for _ in lines {});
            return addr;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no address line from {}",
            p.name
        );
    }
}

/// `kestrel serve` on the default model; returns the process and its address.
pub fn serve(extra: &[&str]) -> (Proc, String) {
    serve_on(&default_model(), extra)
}

/// `kestrel serve` on the model at `model`.
pub fn serve_on(model: &Path, extra: &[&str]) -> (Proc, String) {
    let mut args: Vec<String> = vec!["serve".into(), "--model".into()];
    args.push(model.to_string_lossy().into_owned());
    args.extend(
        [
            "--port",
            "0",
            "--threads",
            "1",
            "--kv-cache-memory",
            "256MiB",
        ]
        .map(String::from),
    );
    args.extend(extra.iter().map(|s| s.to_string()));
    let mut p = spawn("serve", &args, Stdio::piped());
    let addr = address_of(&mut p);
    (p, addr)
}

/// `kestrel gateway` on `redis`; returns the process and its address.
pub fn gateway(redis: &Redis, extra: &[&str]) -> (Proc, String) {
    let mut args: Vec<String> = vec!["gateway".into(), "--redis-url".into(), redis.url()];
    args.extend(["--port", "0", "--min-client-priority", "-10"].map(String::from));
    args.extend(extra.iter().map(|s| s.to_string()));
    let mut p = spawn("gateway", &args, Stdio::piped());
    let addr = address_of(&mut p);
    (p, addr)
}

/// `kestrel worker` named `id` on `redis`, with its metrics on a free port; returns the process
/// and its metrics address.
pub fn worker(redis: &Redis, id: &str, extra: &[&str]) -> (Proc, String) {
    worker_with_env(redis, id, extra, &[])
}

/// [`worker`] with extra environment variables (`KESTREL_LOG`, say); its log is
/// [`log_path`]`(id)`.
pub fn worker_with_env(
    redis: &Redis,
    id: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (Proc, String) {
    worker_on(redis, id, &default_model(), extra, env)
}

/// [`worker_with_env`] on the model at `model`.
pub fn worker_on(
    redis: &Redis,
    id: &str,
    model: &Path,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (Proc, String) {
    let port = free_port();
    let mut args: Vec<String> = vec!["worker".into(), "--redis-url".into(), redis.url()];
    args.extend(["--worker-id", id, "--model"].map(String::from));
    args.push(model.to_string_lossy().into_owned());
    args.extend(
        [
            "--threads",
            "1",
            "--kv-cache-memory",
            "256MiB",
            "--claim-idle",
            "2",
        ]
        .map(String::from),
    );
    args.extend(["--metrics-port".to_string(), port.to_string()]);
    args.extend(extra.iter().map(|s| s.to_string()));
    let p = spawn_with_env(id, &args, Stdio::null(), env);
    (p, format!("127.0.0.1:{port}"))
}

/// Waits until `addr`'s `/health` answers 200.
pub fn wait_healthy(addr: &str, limit: Duration) {
    let start = Instant::now();
    loop {
        if let Ok(r) = request(addr, "GET", "/health", "", Duration::from_secs(2)) {
            if r.status == 200 {
                return;
            }
        }
        assert!(start.elapsed() < limit, "{addr} did not become healthy");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until the gateway at `addr` sees `n` live workers (and, with some, serves).
pub fn wait_workers(addr: &str, n: usize, limit: Duration) {
    let start = Instant::now();
    loop {
        if let Ok(r) = request(addr, "GET", "/metrics", "", Duration::from_secs(2)) {
            if metric(&r.body, "kestrel:gateway_live_workers") == Some(n as f64) {
                if n > 0 {
                    wait_healthy(addr, limit.saturating_sub(start.elapsed()));
                }
                return;
            }
        }
        assert!(
            start.elapsed() < limit,
            "the gateway did not see {n} workers"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The value of an unlabelled series (or the first sample of a labelled one) in a scrape.
pub fn metric(scrape: &str, name: &str) -> Option<f64> {
    scrape
        .lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| {
            l.starts_with(name) && matches!(l.as_bytes().get(name.len()), Some(b' ') | Some(b'{'))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// An HTTP response.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub head: String,
    pub body: String,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

/// One HTTP/1.1 request with `Connection: close`.
pub fn request(
    addr: &str,
    method: &str,
    path: &str,
    body: &str,
    timeout: Duration,
) -> std::io::Result<Response> {
    request_with(addr, method, path, &[], body, timeout)
}

/// [`request`] with extra header lines (`name`, `value`).
pub fn request_with(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
    timeout: Duration,
) -> std::io::Result<Response> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(timeout))?;
    let extra: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_string()
    };
    Ok(Response {
        status,
        head: head.to_string(),
        body,
    })
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// The generated text of a completion response, streamed (`data:` events) or not.
pub fn completion_text(r: &Response, streamed: bool) -> String {
    assert_eq!(r.status, 200, "{}", r.body);
    if !streamed {
        return r.json()["choices"][0]["text"].as_str().unwrap().to_string();
    }
    let mut text = String::new();
    let mut done = false;
    for line in r.body.lines() {
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        if data.trim() == "[DONE]" {
            done = true;
            continue;
        }
        let v: serde_json::Value =
            serde_json::from_str(data).unwrap_or_else(|e| panic!("bad event ({e}): {data}"));
        assert!(v.get("error").is_none(), "error event: {data}");
        if let Some(t) = v["choices"][0]["text"].as_str() {
            text.push_str(t);
        }
    }
    assert!(done, "the stream did not end with [DONE]: {}", r.body);
    text
}

pub fn completion_body(prompt: &str, max_tokens: usize, stream: bool, priority: i32) -> String {
    serde_json::json!({
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "stream": stream,
        "priority": priority,
    })
    .to_string()
}

pub fn wait_for(limit: Duration, what: &str, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub fn path_str(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// Sixteen short prompts, one topic each.
pub fn prompts() -> Vec<String> {
    let topics = [
        "the ocean",
        "mountains",
        "a library",
        "the moon",
        "bread",
        "rivers",
        "trains",
        "winter",
        "music",
        "gardens",
        "clocks",
        "bridges",
        "bees",
        "maps",
        "candles",
        "islands",
    ];
    topics
        .iter()
        .map(|t| format!("Write one short paragraph about {t}."))
        .collect()
}

/// Greedy texts of `prompts` from a single `kestrel serve`.
pub fn reference_texts(
    prompts: &[String],
    max_tokens: usize,
) -> std::collections::HashMap<String, String> {
    let (_serve, addr) = serve(&[]);
    prompts
        .iter()
        .map(|p| {
            let r = request(
                &addr,
                "POST",
                "/v1/completions",
                &completion_body(p, max_tokens, false, 0),
                Duration::from_secs(180),
            )
            .unwrap();
            (p.clone(), completion_text(&r, false))
        })
        .collect()
}
