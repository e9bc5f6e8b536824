//! [`ChatClient`]: streamed chat completions from an OpenAI-compatible server.

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use kestrel_bench::sse::SseParser;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use serde_json::Value;

/// What one answer took.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AnswerStats {
    /// Completion tokens (the server's usage count, else the content chunks seen).
    pub tokens: usize,
    /// Time to the first content.
    pub ttft: Option<Duration>,
    /// Whole answer.
    pub elapsed: Duration,
    /// Prompt tokens served from the prefix cache, when the server says.
    pub cached_tokens: Option<usize>,
    /// `finish_reason` of the answer.
    pub finish_reason: Option<String>,
}

impl AnswerStats {
    /// Tokens per second after the first one.
    pub fn tokens_per_second(&self) -> Option<f64> {
        let ttft = self.ttft?;
        let decode = self.elapsed.checked_sub(ttft)?.as_secs_f64();
        (self.tokens > 1 && decode > 0.0).then(|| (self.tokens - 1) as f64 / decode)
    }

    /// One line for the terminal.
    pub fn summary(&self) -> String {
        let mut parts = vec![format!("{} tokens", self.tokens)];
        if let Some(t) = self.ttft {
            parts.push(format!("TTFT {} ms", t.as_millis()));
        }
        if let Some(r) = self.tokens_per_second() {
            parts.push(format!("{r:.1} tok/s"));
        }
        if let Some(c) = self.cached_tokens.filter(|&c| c > 0) {
            parts.push(format!("{c} prompt tokens cached"));
        }
        format!("[{}]", parts.join(" · "))
    }
}

/// A connection to one server and model.
pub struct ChatClient {
    http: reqwest::Client,
    base: String,
    api_key: Option<String>,
    pub model: String,
}

impl ChatClient {
    /// Checks the server and picks the model (the first listed unless `model` is given).
    pub async fn connect(
        base: &str,
        api_key: Option<String>,
        model: Option<String>,
    ) -> Result<Self> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .no_proxy()
            .build()?;
        let mut client = ChatClient {
            http,
            base: base.trim_end_matches('/').to_string(),
            api_key,
            model: String::new(),
        };
        client.model = match model {
            Some(m) => m,
            None => client.first_model().await?,
        };
        Ok(client)
    }

    async fn first_model(&self) -> Result<String> {
        self.models()
            .await?
            .into_iter()
            .next()
            .map(|(id, _)| id)
            .ok_or_else(|| anyhow!("the server lists no models"))
    }

    /// The ids `/v1/models` lists, each with its `status.value` on a server of several models.
    pub async fn models(&self) -> Result<Vec<(String, Option<String>)>> {
        let resp = self
            .authorized(self.http.get(format!("{}/v1/models", self.base)))
            .timeout(Duration::from_secs(10))
            .send()
            .await?;
        let status = resp.status();
        let body: Value = serde_json::from_slice(&resp.bytes().await?)
            .context("/v1/models did not return JSON")?;
        if !status.is_success() {
            bail!("/v1/models answered {status}: {}", error_message(&body));
        }
        let cards = body["data"].as_array().cloned().unwrap_or_default();
        Ok(cards
            .iter()
            .filter_map(|card| {
                let id = card["id"].as_str()?.to_string();
                let status = card["status"]["value"].as_str().map(str::to_string);
                Some((id, status))
            })
            .collect())
    }

    fn authorized(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.api_key {
            Some(key) => req.header(AUTHORIZATION, format!("Bearer {key}")),
            None => req,
        }
    }

    /// Sends `body` and passes each piece of content to `on_text` as it arrives. Dropping the
    /// returned future closes the connection, which cancels the request on the server.
    pub async fn stream(&self, body: &Value, mut on_text: impl FnMut(&str)) -> Result<AnswerStats> {
        let start = Instant::now();
        let mut resp = self
            .authorized(self.http.post(format!("{}/v1/chat/completions", self.base)))
            .header(ACCEPT, "text/event-stream")
            .header(CONTENT_TYPE, "application/json")
            .body(serde_json::to_vec(body)?)
            .send()
            .await?;
        if !resp.status().is_success() {
            let status = resp.status();
            let bytes = resp.bytes().await.unwrap_or_default();
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            bail!("the server answered {status}: {}", error_message(&body));
        }
        let mut stats = AnswerStats::default();
        let mut chunks = 0;
        let mut parser = SseParser::new();
        while let Some(bytes) = resp.chunk().await? {
            for data in parser.feed(&bytes) {
                if data == "[DONE]" {
                    continue;
                }
                let event: Value = serde_json::from_str(&data)
                    .with_context(|| format!("bad stream event: {data}"))?;
                if let Some(msg) = event.get("error") {
                    bail!(
                        "the server failed: {}",
                        error_message(&serde_json::json!({"error": msg}))
                    );
                }
                chunks += apply_event(&event, &mut stats, start, &mut on_text);
            }
        }
        stats.elapsed = start.elapsed();
        if stats.tokens == 0 {
            stats.tokens = chunks;
        }
        Ok(stats)
    }
}

/// Folds one chunk into `stats`; returns 1 if it carried content.
fn apply_event(
    event: &Value,
    stats: &mut AnswerStats,
    start: Instant,
    on_text: &mut impl FnMut(&str),
) -> usize {
    if let Some(usage) = event.get("usage").filter(|u| u.is_object()) {
        stats.tokens = usage["completion_tokens"].as_u64().unwrap_or(0) as usize;
        stats.cached_tokens = usage["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .map(|c| c as usize);
    }
    let Some(choice) = event["choices"].get(0) else {
        return 0;
    };
    if let Some(reason) = choice["finish_reason"].as_str() {
        stats.finish_reason = Some(reason.to_string());
    }
    match choice["delta"]["content"].as_str() {
        Some(text) if !text.is_empty() => {
            stats.ttft.get_or_insert_with(|| start.elapsed());
            on_text(text);
            1
        }
        _ => 0,
    }
}

/// The `error.message` of an OpenAI error body, else the body.
fn error_message(body: &Value) -> String {
    body["error"]["message"]
        .as_str()
        .map_or_else(|| body.to_string(), str::to_string)
}
