//! `--multi-turn` against the in-process fake server: every turn resends the history with the
//! replies the server streamed, usage is asked for, and a failed turn ends its conversation.

use crate::support;

use serde_json::Value;

use kestrel_bench::{multi_turn, BenchArgs};
use support::{start, Behavior, FakeConfig};

fn args(base_url: &str) -> BenchArgs {
    BenchArgs {
        base_url: base_url.to_owned(),
        multi_turn: true,
        conversations: 2,
        turns: 3,
        input_len: 4,
        output_len: 6,
        multi_turn_prefix_tokens: 10,
        concurrency: Some(1),
        no_progress: true,
        ..BenchArgs::default()
    }
}

fn fast() -> FakeConfig {
    FakeConfig {
        first_delay: std::time::Duration::from_millis(20),
        token_delay: std::time::Duration::from_millis(2),
        ..FakeConfig::default()
    }
}

fn roles(body: &Value) -> Vec<&str> {
    body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| m["role"].as_str().expect("role"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turns_resend_the_history_with_the_streamed_replies() {
    let server = start(fast()).await;
    let r = multi_turn::run(args(&server.base_url)).await.unwrap();
    assert_eq!(
        (r.successful_requests, r.failed_requests, r.skipped_turns),
        (6, 0, 0)
    );
    assert_eq!(r.model, "fake-model");
    assert_eq!(r.endpoint, "/v1/chat/completions");

    // One conversation at a time: bodies 0..3 are conversation 0's turns.
    let bodies = server.bodies();
    assert_eq!(bodies.len(), 6);
    assert_eq!(bodies[0]["stream_options"]["include_usage"], true);
    assert_eq!(bodies[0]["max_tokens"], 6);
    assert_eq!(roles(&bodies[0]), ["system", "user"]);
    assert_eq!(
        roles(&bodies[2]),
        ["system", "user", "assistant", "user", "assistant", "user"]
    );
    let third = &bodies[2]["messages"];
    assert_eq!(
        third[2]["content"],
        " tok".repeat(6),
        "the reply as streamed"
    );
    assert_eq!(third[0], bodies[0]["messages"][0], "same system message");
    assert_eq!(
        third[1], bodies[0]["messages"][1],
        "same first user message"
    );
    assert_ne!(bodies[3]["messages"][0], third[0], "conversations differ");

    // The fake caches everything but the new user message: 10 + 4 + 6 of 24 words on turn 2.
    let t2 = &r.per_turn[1];
    assert_eq!((t2.prefix.prompt_tokens, t2.prefix.cached_tokens), (48, 40));
    assert_eq!(r.per_turn[0].prefix.cached_tokens, 20, "the system message");
    assert!(r.prefix_hit_rate_later_turns.unwrap() > 0.8);
    assert_eq!(r.ttft_ms_later_turns.count, 4);
    assert!(r.ttft_ms_later_turns.min_ms >= 20.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_turn_ends_its_conversation() {
    // Arrivals alternate ok / 500: each conversation's second turn fails.
    let server = start(FakeConfig {
        behaviors: vec![Behavior::Stream, Behavior::Status(500)],
        ..fast()
    })
    .await;
    let r = multi_turn::run(args(&server.base_url)).await.unwrap();
    assert_eq!(r.requests_sent, 4);
    assert_eq!(
        (r.successful_requests, r.failed_requests, r.skipped_turns),
        (2, 2, 2)
    );
    assert_eq!(
        (r.errors[0].kind.as_str(), r.errors[0].count),
        ("http_500", 2)
    );
    assert_eq!((r.per_turn[1].requests, r.per_turn[1].failed), (2, 2));
    assert_eq!(r.per_turn[2].requests, 0);
    assert_eq!(r.prefix_hit_rate_later_turns, None);
    assert!(r.render_table().contains("Skipped turns:"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_and_plot_are_written() {
    let server = start(fast()).await;
    let dir = std::env::temp_dir().join(format!("kestrel-multi-turn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (json, plot) = (dir.join("r.json"), dir.join("r.png"));
    let a = BenchArgs {
        json_out: Some(json.clone()),
        plot: Some(plot.clone()),
        concurrency: None,
        think_time: 0.05,
        ..args(&server.base_url)
    };
    multi_turn::run(a).await.unwrap();
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["shape"]["concurrency"], 2);
    assert_eq!(v["per_turn"].as_array().unwrap().len(), 3);
    assert!(v["ttft_ms_later_turns"]["median_ms"].as_f64().unwrap() > 0.0);
    assert!(v["prefix_hit_rate_later_turns"].as_f64().unwrap() > 0.8);
    assert!(
        v["duration_s"].as_f64().unwrap() >= 0.1,
        "two think times per conversation"
    );
    assert_eq!(&std::fs::read(&plot).unwrap()[1..4], b"PNG");
    std::fs::remove_dir_all(&dir).ok();
}
