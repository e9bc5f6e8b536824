//! What travels through Redis, as JSON: the queued [`Job`], the [`ResultEntry`]s of a request's
//! result stream, a worker's [`WorkerStatus`] heartbeat and the [`ModelDescriptor`] the gateway
//! serves from.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kestrel_engine::api::{EngineEvent, EngineRequest, InvalidRequest, RequestLimits};
use kestrel_engine::sampling::SamplingParams;
use kestrel_model::tokenizer::TokenizerSpec;
use kestrel_server::model_slot::ModelState;
use serde::{Deserialize, Serialize};

use crate::identity::ModelIdentity;

/// The field of a stream entry that holds its JSON.
pub const FIELD: &str = "v";

/// A queued request: a validated [`EngineRequest`] in a form another process can rebuild.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// The gateway's id for the request (unique; names its result stream).
    pub id: String,
    /// The model the prompt was tokenized and validated for: a worker of any other identity
    /// refuses the job instead of running it. Absent only in entries of older gateways or
    /// written by hand, which no worker runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelIdentity>,
    pub prompt_ids: Vec<u32>,
    /// Always seeded, so that a re-run after a worker died repeats the first run's tokens.
    pub sampling: SamplingParams,
    pub priority: i32,
    /// The request's prefix-cache salt (absent from older gateways' jobs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_salt: Option<String>,
    pub max_queue_time_ms: Option<u64>,
    /// The request's first-token objective in milliseconds (`ttft_slo_ms` or
    /// `X-TTFT-SLO-Ms`): the worker's engine refuses the job at admission when it predicts a miss.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_slo_ms: Option<u64>,
    /// The client's `X-Request-Id` (or the one the gateway generated), for the worker's logs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// When the gateway queued it (Unix milliseconds): queue time includes the wait in Redis.
    pub queued_at_ms: u64,
    /// The W3C `traceparent` of the gateway's span for a traced request: the worker's spans
    /// of the job are its children. Absent when the request is not traced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// What the worker computes: a generation (the default, and all an older gateway's jobs
    /// ask for), an embedding or the prompt's logprobs.
    #[serde(default, skip_serializing_if = "JobKind::is_generate")]
    pub kind: JobKind,
    /// The LoRA adapter the request runs with, by name (the worker resolves it to its own
    /// loaded adapter); absent: the base model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter: Option<String>,
    /// Deliveries of the job before it was queued again by a worker that could not run it
    /// (it lacked the job's LoRA adapter): counted against `--max-deliveries` with those of
    /// the entry it is in now. 0 for a job the gateway queued.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub prior_deliveries: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// What a [`Job`] asks of its worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobKind {
    /// Generate tokens from the prompt (its events stream back as [`ResultEvent::Engine`]).
    #[default]
    Generate,
    /// The prompt's embedding, in one pass (answered by one [`ResultEvent::Pass`]).
    Embed,
    /// Every prompt token's logprob with `top_n` alternatives, in one pass (answered by one
    /// [`ResultEvent::Pass`]).
    PromptLogprobs { top_n: usize },
}

impl JobKind {
    /// Whether the job generates tokens.
    pub fn is_generate(&self) -> bool {
        matches!(self, JobKind::Generate)
    }
}

impl Job {
    /// The job for `req`, prepared for `model`; an unseeded request gets `seed`.
    pub fn new(id: String, model: &ModelIdentity, req: &EngineRequest, seed: u64) -> Job {
        let mut sampling = req.sampling().clone();
        sampling.seed.get_or_insert(seed);
        Job {
            id,
            model: Some(model.clone()),
            prompt_ids: req.prompt_ids().to_vec(),
            sampling,
            priority: req.priority(),
            cache_salt: req.cache_salt().map(str::to_string),
            max_queue_time_ms: req
                .max_queue_time()
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            ttft_slo_ms: req
                .ttft_slo()
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            request_id: None,
            queued_at_ms: unix_ms(),
            traceparent: req.trace().map(|t| t.to_string()),
            kind: JobKind::Generate,
            adapter: None,
            prior_deliveries: 0,
        }
    }

    /// A one-pass job (`kind` is not [`JobKind::Generate`]) over `prompt_ids`, for `model`.
    pub fn pass(id: String, model: &ModelIdentity, prompt_ids: Vec<u32>, kind: JobKind) -> Job {
        Job {
            id,
            model: Some(model.clone()),
            prompt_ids,
            sampling: SamplingParams::default(),
            priority: 0,
            cache_salt: None,
            max_queue_time_ms: None,
            ttft_slo_ms: None,
            request_id: None,
            queued_at_ms: unix_ms(),
            traceparent: None,
            kind,
            adapter: None,
            prior_deliveries: 0,
        }
    }

    /// The same job, run with the LoRA adapter called `adapter`.
    pub fn with_adapter(mut self, adapter: Option<String>) -> Job {
        self.adapter = adapter;
        self
    }

    /// The same job, carrying the client's request id.
    pub fn with_request_id(mut self, request_id: Option<String>) -> Job {
        self.request_id = request_id;
        self
    }

    /// The engine request again, checked against this worker's `limits`.
    pub fn to_request(&self, limits: &RequestLimits) -> Result<EngineRequest, InvalidRequest> {
        let waited = Duration::from_millis(unix_ms().saturating_sub(self.queued_at_ms));
        // Clocks of different machines may disagree; a wait beyond an hour is not believed.
        let waited = waited.min(Duration::from_secs(3600));
        let now = Instant::now();
        let arrival = now.checked_sub(waited).unwrap_or(now);
        Ok(
            EngineRequest::new(self.prompt_ids.clone(), self.sampling.clone(), limits)?
                .with_priority(self.priority)
                .with_cache_salt(self.cache_salt.clone())
                .with_arrival(arrival)
                .with_max_queue_time(self.max_queue_time_ms.map(Duration::from_millis))
                .with_ttft_slo(self.ttft_slo_ms.map(Duration::from_millis)),
        )
    }
}

/// One entry of a request's result stream.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ResultEntry {
    /// Which delivery of the job produced it (1 for the first run; a re-run after a worker
    /// died has a higher one and repeats the tokens from the start).
    pub attempt: u32,
    /// The entry's place among its run's entries (0, 1, 2, ...). A worker that loses Redis's
    /// reply to an append (Redis restarting after it wrote the entry) appends the entry again;
    /// the gateway drops the second copy by this number. Absent from older workers' entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u32>,
    pub event: ResultEvent,
}

/// What a worker reports about a request.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ResultEvent {
    /// A worker took the job (and the `attempt`-th run starts).
    Started { worker: String },
    /// The engine's event, as `kestrel serve` would stream it.
    Engine(EngineEvent),
    /// The worker refused the job as invalid for its model (a 400).
    Rejected { message: String },
    /// The job was delivered more often than allowed (workers kept dying on it).
    GaveUp { deliveries: u32 },
    /// The answer to a one-pass job (an embedding, prompt logprobs), or why it failed.
    Pass(crate::pass::PassResult),
}

/// A worker's heartbeat: who it is, what it serves, how loaded it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerStatus {
    pub worker_id: String,
    /// The model it runs (and whose queues it reads).
    pub model: ModelIdentity,
    /// Most sequences its engine runs at once.
    pub max_num_seqs: usize,
    /// Jobs it has taken and not finished.
    pub active: usize,
    pub running: usize,
    pub waiting: usize,
    pub kv_usage: f64,
    /// Set by a worker that publishes its prefix-cache events (`{p}:kv:{id}`) and reads a
    /// stream of its own: the block size its cache hashes prompts by. Absent: no
    /// cache-aware routing to it (an older worker, or prefix caching off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_block_size: Option<usize>,
    /// The LoRA adapters it serves (`--lora-modules`): jobs naming one go only to workers
    /// announcing it. Absent: none (or an older worker).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub adapters: Vec<AnnouncedAdapter>,
    /// `loaded`, `loading` or `unloaded`: a worker of several models under
    /// `--max-loaded-models` or `--models-memory-budget` loads a model on its first job.
    /// Absent: loaded (an older worker).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
}

impl WorkerStatus {
    /// Its model's state as the heartbeat announces it: no state is an older worker's,
    /// whose model is always loaded; a state this gateway does not know counts as unloaded.
    pub fn model_state(&self) -> ModelState {
        match &self.state {
            None => ModelState::Loaded,
            Some(s) => ModelState::parse(s).unwrap_or(ModelState::Unloaded),
        }
    }
}

/// A LoRA adapter a worker serves, as its heartbeat announces it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnnouncedAdapter {
    /// The name requests give (`model` on OpenAI routes, `parameters.adapter_id` on TGI's).
    pub name: String,
    /// Where the worker loaded it from (as `/v1/models` shows it).
    pub path: String,
    /// Its largest rank.
    pub rank: usize,
}

/// The served model, as the gateway needs it to validate and render requests without weights.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelDescriptor {
    /// Its name and fingerprint.
    pub identity: ModelIdentity,
    pub dtype: String,
    pub tokenizer: TokenizerSpec,
    pub request_limits: RequestLimits,
    pub max_input_tokens: usize,
    pub max_total_tokens: usize,
    pub max_num_batched_tokens: usize,
    pub max_num_seqs: usize,
    pub block_size: usize,
    pub num_kv_blocks: usize,
    /// The tool-call format the worker reads replies with (`--tool-call-parser` or its
    /// template's), by name; absent: none.
    #[serde(default)]
    pub tool_call_parser: Option<String>,
    /// The reasoning parser the worker splits replies with, by name; absent: none.
    #[serde(default)]
    pub reasoning_parser: Option<String>,
    /// The worker's `--override-generation-config`: the gateway, which validates requests,
    /// applies it; absent: none.
    #[serde(default)]
    pub generation_defaults: kestrel_server::generation_defaults::GenerationDefaults,
}

/// Milliseconds since the Unix epoch.
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> ModelIdentity {
        ModelIdentity {
            name: "m".into(),
            fingerprint: "f".repeat(64),
        }
    }

    #[test]
    fn a_job_round_trips_and_is_seeded() {
        let limits = RequestLimits {
            vocab_size: 100,
            max_model_len: 64,
        };
        let sampling = SamplingParams {
            max_tokens: 8,
            ..Default::default()
        };
        let req = EngineRequest::new(vec![1, 2, 3], sampling, &limits)
            .unwrap()
            .with_priority(3)
            .with_cache_salt(Some("tenant".into()))
            .with_ttft_slo(Some(Duration::from_millis(250)));
        let job = Job::new("r1".into(), &model(), &req, 42).with_request_id(Some("abc".into()));
        assert_eq!(job.sampling.seed, Some(42));
        assert_eq!(job.ttft_slo_ms, Some(250));
        assert_eq!(job.request_id.as_deref(), Some("abc"));
        assert_eq!(job.model, Some(model()));
        let json = serde_json::to_string(&job).unwrap();
        let back: Job = serde_json::from_str(&json).unwrap();
        assert_eq!(back, job);
        let rebuilt = back.to_request(&limits).unwrap();
        assert_eq!(rebuilt.prompt_ids(), &[1, 2, 3]);
        assert_eq!(rebuilt.priority(), 3);
        assert_eq!(rebuilt.cache_salt(), Some("tenant"));
        assert_eq!(rebuilt.sampling().seed, Some(42));
        assert_eq!(rebuilt.ttft_slo(), Some(Duration::from_millis(250)));
    }

    #[test]
    fn a_job_of_an_older_gateway_has_no_objective_or_request_id() {
        let limits = RequestLimits {
            vocab_size: 10,
            max_model_len: 16,
        };
        let sampling = SamplingParams {
            max_tokens: 2,
            ..Default::default()
        };
        let req = EngineRequest::new(vec![1], sampling, &limits).unwrap();
        let job = Job::new("old".into(), &model(), &req, 1);
        let mut json = serde_json::to_value(&job).unwrap();
        assert!(json.get("ttft_slo_ms").is_none() && json.get("request_id").is_none());
        json.as_object_mut().unwrap().remove("model");
        let back: Job = serde_json::from_value(json).unwrap();
        assert_eq!(back.model, None, "an older gateway's job names no model");
        assert_eq!((back.ttft_slo_ms, back.request_id.as_deref()), (None, None));
        assert_eq!(back.to_request(&limits).unwrap().ttft_slo(), None);
        assert_eq!(
            back.kind,
            JobKind::Generate,
            "an older gateway's job generates"
        );
        assert_eq!(
            back.adapter, None,
            "an older gateway's job runs the base model"
        );
    }

    #[test]
    fn a_pass_job_names_its_kind_and_a_generation_does_not() {
        let limits = RequestLimits {
            vocab_size: 10,
            max_model_len: 16,
        };
        let sampling = SamplingParams {
            max_tokens: 2,
            ..Default::default()
        };
        let req = EngineRequest::new(vec![1], sampling, &limits).unwrap();
        let generate = serde_json::to_value(Job::new("g".into(), &model(), &req, 1)).unwrap();
        assert!(generate.get("kind").is_none());
        for kind in [JobKind::Embed, JobKind::PromptLogprobs { top_n: 3 }] {
            let job = Job::pass("p".into(), &model(), vec![4, 5], kind);
            let json = serde_json::to_value(&job).unwrap();
            assert!(json.get("kind").is_some(), "{json}");
            let back: Job = serde_json::from_value(json).unwrap();
            assert_eq!(back, job);
        }
        let embed = serde_json::to_value(Job::pass("e".into(), &model(), vec![4], JobKind::Embed));
        assert_eq!(embed.unwrap()["kind"], "embed");
    }

    #[test]
    fn a_seeded_request_keeps_its_seed() {
        let limits = RequestLimits {
            vocab_size: 10,
            max_model_len: 16,
        };
        let sampling = SamplingParams {
            seed: Some(7),
            max_tokens: 2,
            ..Default::default()
        };
        let req = EngineRequest::new(vec![1], sampling, &limits).unwrap();
        assert_eq!(
            Job::new("x".into(), &model(), &req, 99).sampling.seed,
            Some(7)
        );
    }

    #[test]
    fn a_job_is_checked_against_the_worker_limits() {
        let wide = RequestLimits {
            vocab_size: 1000,
            max_model_len: 64,
        };
        let narrow = RequestLimits {
            vocab_size: 10,
            max_model_len: 64,
        };
        let sampling = SamplingParams {
            max_tokens: 2,
            ..Default::default()
        };
        let req = EngineRequest::new(vec![500], sampling, &wide);
        let job = Job::new("y".into(), &model(), &req.unwrap(), 1);
        assert!(matches!(
            job.to_request(&narrow),
            Err(InvalidRequest::TokenOutOfVocab { .. })
        ));
    }
}
