//! A server that closes each connection shortly after a streamed response (as llama.cpp's
//! server does while still advertising keep-alive) must not cause failures: a request written
//! to such a stale pooled connection is resent once.

use std::time::Duration;

use kestrel_bench::{run, BenchArgs};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const SSE_BODY: &str = concat!(
    "data: {\"choices\":[{\"text\":\" a\"}]}\n\n",
    "data: {\"choices\":[{\"text\":\" b\"}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\n\n",
    "data: [DONE]\n\n",
);

/// Reads one request (headers plus Content-Length body), answers with a chunked SSE body that
/// claims keep-alive, then closes the socket after `linger`.
async fn serve_once_then_close(mut sock: TcpStream, linger: Duration) {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    loop {
        let n = sock.read(&mut tmp).await.unwrap_or(0);
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&tmp[..n]);
        let text = String::from_utf8_lossy(&buf).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let len: usize = text[..end]
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap())
                })
                .unwrap_or(0);
            if buf.len() >= end + 4 + len {
                break;
            }
        }
    }
    let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nKeep-Alive: timeout=5, max=100\r\nTransfer-Encoding: chunked\r\n\r\n";
    let chunk = format!("{:x}\r\n{SSE_BODY}\r\n0\r\n\r\n", SSE_BODY.len());
    let _ = sock.write_all(head.as_bytes()).await;
    let _ = sock.write_all(chunk.as_bytes()).await;
    tokio::time::sleep(linger).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_keep_alive_connections_do_not_fail_requests() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            tokio::spawn(serve_once_then_close(sock, Duration::from_millis(30)));
        }
    });
    let args = BenchArgs {
        base_url: format!("http://{addr}"),
        model: Some("m".into()),
        num_prompts: Some(6),
        input_len: 3,
        output_len: 2,
        no_progress: true,
        ..BenchArgs::default()
    };
    let r = run(args).await.unwrap();
    assert_eq!(
        (r.successful_requests, r.failed_requests),
        (6, 0),
        "{:?}",
        r.errors
    );
    assert_eq!(r.total_output_tokens, 12);
    assert!(r.retried_requests <= 6);
}
