//! LoRA serving over real HTTP, on the tiny F32 Llama fixture and its adapters
//! (scripts/goldens/tiny_lora.py; each adapter is checked against PEFT in the model crate):
//! adapter selection by OpenAI `model` and TGI `adapter_id`, mixed concurrent batches equal to
//! each request alone, 404 for unknown adapters, `/v1/models` parents, run-time load and
//! unload behind the API key, the rank limit, LRU eviction, unload while in use (409), LoRA
//! metrics, and no KV blocks left in use afterwards.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use kestrel_engine::adapters::LoraLimits;
use kestrel_model::ThreadPool;
use kestrel_server::launch::{KvBudget, LaunchOptions};
use kestrel_server::ServerConfig;
use serde_json::{json, Value};

const KEY: &str = "sk-lora-test-0123456789";
const PROMPT: &str = "Hello world! How are you";

struct Server {
    base: String,
    key: Option<&'static str>,
}

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

fn adapter(name: &str) -> PathBuf {
    fixtures().join("lora").join(name)
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("test runtime")
    })
}

fn start(
    lora_modules: Vec<(String, PathBuf)>,
    limits: LoraLimits,
    key: Option<&'static str>,
) -> Server {
    let loaded =
        kestrel_model::load_model(&fixtures().join("tiny-llama-f32")).expect("load the tiny model");
    let pool: &'static ThreadPool = Box::leak(Box::new(ThreadPool::new(1)));
    let opts = LaunchOptions {
        max_num_seqs: 16,
        max_num_batched_tokens: 256,
        block_size: 16,
        kv_cache: KvBudget::Tokens(16 * 128),
        model_id: Some("tiny".into()),
        lora_modules,
        lora_limits: limits,
        ..LaunchOptions::default()
    };
    let state = kestrel_server::launch::start(loaded, &opts, pool).expect("start the engine");
    let config = ServerConfig {
        api_keys: key.map(str::to_string).into_iter().collect(),
        enable_runtime_lora: key.is_some(),
        ..ServerConfig::default()
    };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let addr = listener.local_addr().expect("local addr");
    runtime().spawn(async move {
        let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
        kestrel_server::serve_on(listener, config, state, std::future::pending()).await
    });
    Server {
        base: format!("http://{addr}"),
        key,
    }
}

/// Adapters all7 (PEFT, rank 8) and rs (rsLoRA as a llama.cpp GGUF, rank 4); two per step.
fn mixed_server() -> &'static Server {
    static S: OnceLock<Server> = OnceLock::new();
    S.get_or_init(|| {
        let modules = vec![
            ("all7".to_string(), adapter("all7")),
            ("rs".to_string(), adapter("rslora.gguf")),
        ];
        let limits = LoraLimits {
            max_loras: 2,
            max_lora_rank: 8,
            max_cpu_loras: 2,
        };
        start(modules, limits, None)
    })
}

async fn post(s: &Server, path: &str, body: &Value, key: Option<&str>) -> (u16, String) {
    let mut req = reqwest::Client::new()
        .post(format!("{}{path}", s.base))
        .timeout(Duration::from_secs(120))
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    let resp = req.send().await.expect("send");
    let status = resp.status().as_u16();
    (status, resp.text().await.expect("body"))
}

async fn get(s: &Server, path: &str) -> String {
    let mut req = reqwest::Client::new().get(format!("{}{path}", s.base));
    if let Some(k) = s.key {
        req = req.bearer_auth(k);
    }
    req.send().await.expect("send").text().await.expect("body")
}

fn json_of(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// The greedy completion of [`PROMPT`] with `model` (`None`: no `model` field).
async fn complete(s: &Server, model: Option<&str>, max_tokens: usize) -> String {
    let mut body = json!({"prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0,
                          "ignore_eos": true});
    if let Some(m) = model {
        body["model"] = json!(m);
    }
    let (status, text) = post(s, "/v1/completions", &body, s.key).await;
    assert_eq!(status, 200, "{text}");
    let v = json_of(&text);
    assert_eq!(
        v["model"],
        json!(model.unwrap_or("tiny")),
        "the response names the model"
    );
    v["choices"][0]["text"].as_str().expect("text").to_string()
}

async fn tgi_generate(s: &Server, adapter_id: &str) -> String {
    let body = json!({"inputs": PROMPT, "parameters": {"max_new_tokens": 12,
                      "ignore_eos": true, "adapter_id": adapter_id}});
    let (status, text) = post(s, "/generate", &body, s.key).await;
    assert_eq!(status, 200, "{text}");
    json_of(&text)["generated_text"]
        .as_str()
        .expect("text")
        .to_string()
}

async fn kv_usage(s: &Server) -> f64 {
    json_of(&get(s, "/health").await)["kv_cache_usage"]
        .as_f64()
        .expect("kv_cache_usage")
}

async fn wait_idle(s: &Server) {
    for _ in 0..200 {
        if kv_usage(s).await == 0.0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("KV blocks still in use after every request ended");
}

/// The value of the first series of `name` whose labels contain `labels`.
fn series(metrics: &str, name: &str, labels: &str) -> Option<f64> {
    metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            let (s, v) = l.rsplit_once(' ')?;
            (s.starts_with(name) && s[name.len()..].starts_with(['{', ' ']) || s == name)
                .then_some(())
                .filter(|()| s.contains(labels))
                .and_then(|()| v.parse().ok())
        })
}

#[test]
fn mixed_concurrent_batch_equals_each_request_alone() {
    let s = mixed_server();
    runtime().block_on(async {
        let models = [None, Some("all7"), Some("rs"), Some("tiny")];
        let mut alone = Vec::new();
        for m in models {
            alone.push(complete(s, m, 12).await);
        }
        assert_ne!(alone[1], alone[0], "all7 changes the output");
        assert_ne!(alone[2], alone[0], "rs changes the output");
        assert_ne!(alone[1], alone[2], "the two adapters differ");
        assert_eq!(alone[3], alone[0], "the base model's own name is the base");
        let tasks: Vec<_> = (0..9)
            .map(|i| {
                let m = models[i % 3];
                runtime().spawn(async move { (i % 3, complete(mixed_server(), m, 12).await) })
            })
            .collect();
        for t in tasks {
            let (k, text) = t.await.expect("task");
            assert_eq!(text, alone[k], "{:?} in a mixed batch", models[k]);
        }
        assert_eq!(tgi_generate(s, "all7").await, alone[1], "TGI adapter_id");
        assert_eq!(tgi_generate(s, "rs").await, alone[2], "TGI adapter_id");
        wait_idle(s).await;
        let m = get(s, "/metrics").await;
        assert!(
            m.lines().any(|l| l.starts_with("vllm:lora_requests_info{")
                && l.contains("max_lora=\"2\"")
                && (l.contains("running_lora_adapters=\"all7,rs\"")
                    || l.contains("running_lora_adapters=\"all7\""))),
            "a LoRA info series with running adapters:\n{m}"
        );
        assert!(
            series(&m, "kestrel:lora_adapter_loads_total", "").unwrap_or(0.0) >= 2.0,
            "{m}"
        );
    });
}

#[test]
fn unknown_adapters_are_404_naming_them() {
    let s = mixed_server();
    runtime().block_on(async {
        let body = json!({"model": "nope", "prompt": PROMPT, "max_tokens": 2});
        let (status, text) = post(s, "/v1/completions", &body, None).await;
        assert_eq!(status, 404, "{text}");
        let err = &json_of(&text)["error"];
        assert!(
            err["message"].as_str().unwrap().contains("`nope`"),
            "{text}"
        );
        assert_eq!(err["code"], json!("model_not_found"));
        let chat = json!({"model": "nope", "messages": [{"role": "user", "content": "hi"}]});
        let (status, _) = post(s, "/v1/chat/completions", &chat, None).await;
        assert_eq!(status, 404);
        let tgi = json!({"inputs": PROMPT, "parameters": {"adapter_id": "nope"}});
        let (status, text) = post(s, "/generate", &tgi, None).await;
        assert_eq!(status, 404, "{text}");
        assert!(text.contains("'nope'"), "{text}");
        let (status, text) = post(s, "/generate_stream", &tgi, None).await;
        assert_eq!(status, 404, "{text}");
        // Run-time loading is off on this server: the routes say how to turn it on.
        let load = json!({"lora_name": "x", "lora_path": "/nowhere"});
        let (status, text) = post(s, "/v1/load_lora_adapter", &load, None).await;
        assert_eq!(status, 404, "{text}");
        assert!(text.contains("--enable-runtime-lora"), "{text}");
    });
}

#[test]
fn models_lists_each_adapter_with_the_base_as_parent() {
    let s = mixed_server();
    let v = json_of(&runtime().block_on(get(s, "/v1/models")));
    let data = v["data"].as_array().expect("data");
    let ids: Vec<&str> = data.iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["tiny", "all7", "rs"]);
    assert_eq!(data[0]["parent"], Value::Null);
    for m in &data[1..] {
        assert_eq!(m["parent"], json!("tiny"));
        assert_eq!(m["object"], json!("model"));
        assert_eq!(m["owned_by"], json!("kestrel"));
    }
    assert_eq!(
        data[1]["root"],
        json!(adapter("all7").display().to_string())
    );
}

#[test]
fn runtime_load_use_evict_and_unload() {
    // One adapter resident, one per step, rank at most 4, behind an API key.
    let limits = LoraLimits {
        max_loras: 1,
        max_lora_rank: 4,
        max_cpu_loras: 1,
    };
    let s = start(vec![("rs".into(), adapter("rslora"))], limits, Some(KEY));
    runtime().block_on(async {
        let base = complete(&s, None, 12).await;
        let rs = complete(&s, Some("rs"), 12).await;
        assert_ne!(rs, base);
        let load = |name: &str, path: PathBuf| {
            json!({"lora_name": name, "lora_path": path.display().to_string()})
        };
        let attn = load("attn", adapter("attn-bf16"));
        // The API key guards both routes.
        let (status, _) = post(&s, "/v1/load_lora_adapter", &attn, None).await;
        assert_eq!(status, 401);
        let (status, _) = post(&s, "/v1/unload_lora_adapter", &json!({"lora_name": "rs"}), None).await;
        assert_eq!(status, 401);
        // Refusals: rank above --max-lora-rank, a path that is no adapter, a duplicate name.
        let (status, text) =
            post(&s, "/v1/load_lora_adapter", &load("big", adapter("all7")), Some(KEY)).await;
        assert_eq!(status, 400, "{text}");
        assert!(text.contains("rank 8, above --max-lora-rank 4"), "{text}");
        let (status, text) = post(
            &s,
            "/v1/load_lora_adapter",
            &load("bad", fixtures().join("tiny-llama-f32")),
            Some(KEY),
        )
        .await;
        assert_eq!(status, 400, "{text}");
        assert!(text.contains("cannot load the LoRA adapter 'bad'"), "{text}");
        let (status, text) =
            post(&s, "/v1/load_lora_adapter", &load("rs", adapter("rslora")), Some(KEY)).await;
        assert_eq!(status, 400, "{text}");
        assert!(text.contains("already been loaded"), "{text}");

        let before = get(&s, "/metrics").await;
        let evictions = |m: &str| series(m, "kestrel:lora_adapter_evictions_total", "").unwrap_or(0.0);
        let loads = |m: &str| series(m, "kestrel:lora_adapter_loads_total", "").unwrap_or(0.0);
        // Loading attn evicts rs (one resident adapter, rs unused).
        let (status, text) = post(&s, "/v1/load_lora_adapter", &attn, Some(KEY)).await;
        assert_eq!(status, 200, "{text}");
        assert!(text.contains("Success"), "{text}");
        let models = json_of(&get(&s, "/v1/models").await);
        assert_eq!(models["data"][2]["id"], json!("attn"));
        assert_eq!(models["data"][2]["parent"], json!("tiny"));
        let with_attn = complete(&s, Some("attn"), 12).await;
        assert_ne!(with_attn, base);
        // rs is loaded again on demand and gives what it gave before its eviction.
        assert_eq!(complete(&s, Some("rs"), 12).await, rs);
        let after = get(&s, "/metrics").await;
        assert!(evictions(&after) >= evictions(&before) + 2.0, "{after}");
        assert!(loads(&after) >= loads(&before) + 2.0, "{after}");

        // While a request uses attn, it cannot be unloaded (409), and no other adapter can be
        // made resident (503: the only slot is in use).
        let long = json!({"model": "attn", "prompt": PROMPT, "max_tokens": 230,
                          "temperature": 0, "ignore_eos": true, "stream": true});
        let mut streams = Vec::new();
        for _ in 0..16 {
            let resp = reqwest::Client::new()
                .post(format!("{}/v1/completions", s.base))
                .bearer_auth(KEY)
                .header("content-type", "application/json")
                .body(long.to_string())
                .send()
                .await
                .expect("stream starts");
            assert_eq!(resp.status().as_u16(), 200);
            streams.push(resp);
        }
        for resp in &mut streams {
            resp.chunk().await.expect("a first chunk").expect("not the end");
        }
        let m = get(&s, "/metrics").await;
        assert!(
            m.lines().any(|l| l.starts_with("vllm:lora_requests_info{")
                && l.contains("running_lora_adapters=\"attn\"")
                && l.contains("max_lora=\"1\"")),
            "the LoRA gauge shows attn running:\n{m}"
        );
        let unload_attn = json!({"lora_name": "attn"});
        let (status, text) = post(&s, "/v1/unload_lora_adapter", &unload_attn, Some(KEY)).await;
        assert_eq!(status, 409, "{text}");
        assert!(text.contains("is in use by") && text.contains("running or waiting request"), "{text}");
        let (status, text) = post(&s, "/v1/completions", &json!({"model": "rs", "prompt": PROMPT,
            "max_tokens": 2}), Some(KEY)).await;
        assert_eq!(status, 503, "{text}");
        assert!(text.contains("--max-cpu-loras"), "{text}");
        drop(streams);
        // Once the stream is gone (aborted), unloading works; then the name is unknown.
        let mut unloaded = false;
        for _ in 0..200 {
            let (status, _) = post(&s, "/v1/unload_lora_adapter", &unload_attn, Some(KEY)).await;
            if status == 200 {
                unloaded = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert!(unloaded, "attn unloads once its request is gone");
        let (status, text) = post(&s, "/v1/unload_lora_adapter", &unload_attn, Some(KEY)).await;
        assert_eq!(status, 404, "{text}");
        assert!(text.contains("'attn' cannot be found"), "{text}");
        let body = json!({"model": "attn", "prompt": PROMPT, "max_tokens": 2});
        let (status, _) = post(&s, "/v1/completions", &body, Some(KEY)).await;
        assert_eq!(status, 404);
        assert_eq!(complete(&s, Some("rs"), 12).await, rs, "rs still serves");
        wait_idle(&s).await;
    });
}
