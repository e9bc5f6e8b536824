//! Helpers shared by the `engine_*` tests: a one-letter-per-token decoder, a controllable
//! wrapper around [`MockExecutor`], request builders and stream collectors.

#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use kestrel_engine::api::{
    EngineEvent, EngineFailure, EngineRequest, RequestLimits, RequestTimings, Usage,
};
use kestrel_engine::config::EngineConfig;
use kestrel_engine::executor::{BatchInput, BatchOutput, Executor, ExecutorError, KvGeometry};
use kestrel_engine::handle::{EngineHandle, ResponseStream};
use kestrel_engine::mock_executor::MockExecutor;
use kestrel_engine::output::TokenDecoder;
use kestrel_engine::request::FinishReason;
use kestrel_engine::sampling::{Logprobs, SamplingParams};

pub const VOCAB: usize = 64;
pub const BLOCK: usize = 4;
pub const EOS: u32 = 0;

/// Token `t` decodes to the letter `'a' + t % 26`.
pub struct LetterDecoder;

impl TokenDecoder for LetterDecoder {
    fn decode(&self, ids: &[u32]) -> String {
        ids.iter().map(|&t| letter(t)).collect()
    }
}

pub fn letter(t: u32) -> char {
    char::from(b'a' + (t % 26) as u8)
}

pub fn text_of(ids: &[u32]) -> String {
    LetterDecoder.decode(ids)
}

/// Knobs the test thread turns while the engine runs a [`ControlledExecutor`].
pub struct Control {
    paused: Mutex<bool>,
    resumed: Condvar,
    blocked: AtomicBool,
    delay_us: AtomicU64,
    fail_at: AtomicU64,
    panic_at: AtomicU64,
    steps: AtomicU64,
    /// Most distinct LoRA adapters seen in one step.
    max_step_adapters: AtomicU64,
    /// Adapter loads (again after an eviction counts again).
    adapter_loads: AtomicU64,
}

impl Default for Control {
    fn default() -> Self {
        Control {
            paused: Mutex::new(false),
            resumed: Condvar::new(),
            blocked: AtomicBool::new(false),
            delay_us: AtomicU64::new(0),
            fail_at: AtomicU64::new(u64::MAX),
            panic_at: AtomicU64::new(u64::MAX),
            steps: AtomicU64::new(0),
            max_step_adapters: AtomicU64::new(0),
            adapter_loads: AtomicU64::new(0),
        }
    }
}

impl Control {
    /// Most distinct LoRA adapters the executor saw in one step.
    pub fn max_step_adapters(&self) -> u64 {
        self.max_step_adapters.load(Ordering::SeqCst)
    }

    /// Adapter loads the executor did.
    pub fn adapter_loads(&self) -> u64 {
        self.adapter_loads.load(Ordering::SeqCst)
    }

    /// Makes the engine block at its next `execute` until [`Control::resume`].
    pub fn pause(&self) {
        *self.paused.lock().unwrap() = true;
    }

    /// Waits until the engine is blocked inside a paused `execute`.
    pub fn wait_blocked(&self) {
        assert!(
            wait_until(Duration::from_secs(5), || self
                .blocked
                .load(Ordering::SeqCst)),
            "the engine never reached execute"
        );
    }

    pub fn resume(&self) {
        *self.paused.lock().unwrap() = false;
        self.resumed.notify_all();
    }

    /// Sleeps this long in every `execute`.
    pub fn set_delay(&self, d: Duration) {
        self.delay_us.store(d.as_micros() as u64, Ordering::SeqCst);
    }

    /// Makes the `n`-th `execute` (counting from 0) fail.
    pub fn fail_at_step(&self, n: u64) {
        self.fail_at.store(n, Ordering::SeqCst);
    }

    /// Makes the `n`-th `execute` (counting from 0) panic.
    pub fn panic_at_step(&self, n: u64) {
        self.panic_at.store(n, Ordering::SeqCst);
    }

    /// Steps executed (including failed ones).
    pub fn steps(&self) -> u64 {
        self.steps.load(Ordering::SeqCst)
    }
}

/// [`MockExecutor`] behind a [`Control`].
pub struct ControlledExecutor {
    inner: MockExecutor,
    ctl: Arc<Control>,
}

impl Executor for ControlledExecutor {
    fn execute(&mut self, input: &BatchInput) -> Result<BatchOutput, ExecutorError> {
        {
            let mut paused = self.ctl.paused.lock().unwrap();
            while *paused {
                self.ctl.blocked.store(true, Ordering::SeqCst);
                paused = self.ctl.resumed.wait(paused).unwrap();
            }
            self.ctl.blocked.store(false, Ordering::SeqCst);
        }
        let delay = self.ctl.delay_us.load(Ordering::SeqCst);
        if delay > 0 {
            std::thread::sleep(Duration::from_micros(delay));
        }
        let step = self.ctl.steps.fetch_add(1, Ordering::SeqCst);
        if step == self.ctl.fail_at.load(Ordering::SeqCst) {
            return Err(ExecutorError::Failed("injected failure".into()));
        }
        if step == self.ctl.panic_at.load(Ordering::SeqCst) {
            panic!("injected panic");
        }
        let adapters: std::collections::HashSet<_> =
            input.seqs.iter().filter_map(|s| s.adapter).collect();
        self.ctl
            .max_step_adapters
            .fetch_max(adapters.len() as u64, Ordering::SeqCst);
        self.inner.execute(input)
    }

    fn vocab_size(&self) -> usize {
        self.inner.vocab_size()
    }

    fn kv_geometry(&self) -> KvGeometry {
        self.inner.kv_geometry()
    }

    fn kv_block_bytes(&self, block: u32) -> Option<Vec<u8>> {
        self.inner.kv_block_bytes(block)
    }

    fn set_kv_block_bytes(&mut self, block: u32, bytes: &[u8]) -> bool {
        self.inner.set_kv_block_bytes(block, bytes)
    }

    fn load_adapter(
        &mut self,
        id: kestrel_engine::adapter_id::AdapterId,
        name: &str,
        path: &std::path::Path,
    ) -> Result<usize, ExecutorError> {
        let rank = self.inner.load_adapter(id, name, path)?;
        self.ctl.adapter_loads.fetch_add(1, Ordering::SeqCst);
        Ok(rank)
    }

    fn unload_adapter(&mut self, id: kestrel_engine::adapter_id::AdapterId) {
        self.inner.unload_adapter(id);
    }
}

/// Engine limits plus the mock executor's KV geometry.
#[derive(Debug, Clone)]
pub struct Config {
    pub max_num_seqs: usize,
    pub max_num_batched_tokens: usize,
    pub block_size: usize,
    pub num_kv_blocks: usize,
    pub enable_prefix_caching: bool,
    pub max_model_len: usize,
    pub max_concurrent_requests: Option<usize>,
    pub lora: kestrel_engine::adapters::LoraLimits,
}

impl Config {
    pub fn engine(&self) -> EngineConfig {
        EngineConfig {
            max_num_seqs: self.max_num_seqs,
            max_num_batched_tokens: self.max_num_batched_tokens,
            enable_prefix_caching: self.enable_prefix_caching,
            max_model_len: self.max_model_len,
            max_concurrent_requests: self.max_concurrent_requests,
            lora: self.lora,
        }
    }
}

pub fn config(num_kv_blocks: usize) -> Config {
    Config {
        max_num_seqs: 8,
        max_num_batched_tokens: 64,
        block_size: BLOCK,
        num_kv_blocks,
        enable_prefix_caching: true,
        max_model_len: 256,
        max_concurrent_requests: None,
        lora: Default::default(),
    }
}

/// A mock executor with `config`'s KV geometry behind a new [`Control`].
pub fn controlled(config: &Config) -> (ControlledExecutor, Arc<Control>) {
    let ctl = Arc::new(Control::default());
    let exec = ControlledExecutor {
        inner: MockExecutor::new(config.num_kv_blocks, config.block_size, VOCAB),
        ctl: ctl.clone(),
    };
    (exec, ctl)
}

/// An engine over a controlled mock executor with EOS [`EOS`].
pub fn start(config: Config) -> (EngineHandle, Arc<Control>) {
    let (exec, ctl) = controlled(&config);
    let handle = EngineHandle::start(
        Box::new(exec),
        Arc::new(LetterDecoder),
        vec![EOS],
        config.engine(),
    );
    (handle, ctl)
}

/// A request under construction; [`Req::build`] validates it into an [`EngineRequest`].
#[derive(Debug, Clone)]
pub struct Req {
    pub prompt_ids: Vec<u32>,
    pub sampling: SamplingParams,
    pub priority: i32,
    pub arrival: Instant,
    pub max_queue_time: Option<Duration>,
}

impl Req {
    /// Validated against the test vocabulary only (lengths are the engine's to enforce).
    pub fn build(self) -> EngineRequest {
        let limits = RequestLimits {
            vocab_size: VOCAB,
            max_model_len: usize::MAX,
        };
        self.build_with(&limits).expect("a valid test request")
    }

    /// Validated against `limits`.
    pub fn build_with(
        self,
        limits: &RequestLimits,
    ) -> Result<EngineRequest, kestrel_engine::api::InvalidRequest> {
        Ok(EngineRequest::new(self.prompt_ids, self.sampling, limits)?
            .with_priority(self.priority)
            .with_arrival(self.arrival)
            .with_max_queue_time(self.max_queue_time))
    }
}

/// Greedy request for `prompt`, at most `max_tokens` new tokens.
pub fn request(prompt: Vec<u32>, max_tokens: usize) -> Req {
    Req {
        prompt_ids: prompt,
        sampling: SamplingParams {
            temperature: 0.0,
            max_tokens,
            ..SamplingParams::default()
        },
        priority: 0,
        arrival: Instant::now(),
        max_queue_time: None,
    }
}

/// A deterministic prompt of `len` tokens in `1..VOCAB` (no EOS), distinct per `seed`.
pub fn prompt(seed: u32, len: usize) -> Vec<u32> {
    (0..len as u32)
        .map(|i| 1 + (seed * 31 + i * 7 + i * i) % (VOCAB as u32 - 1))
        .collect()
}

/// What one stream yielded.
#[derive(Debug, Clone)]
pub struct Collected {
    pub ids: Vec<u32>,
    pub text: String,
    pub logprobs: Vec<Option<Logprobs>>,
    pub end: End,
}

#[derive(Debug, Clone)]
pub enum End {
    Finished {
        reason: FinishReason,
        usage: Usage,
        timings: RequestTimings,
    },
    Failed(EngineFailure),
    /// The stream ended without a terminal event (a bug).
    Closed,
}

impl Collected {
    pub fn reason(&self) -> FinishReason {
        match &self.end {
            End::Finished { reason, .. } => *reason,
            other => panic!("request did not finish: {other:?}"),
        }
    }

    pub fn usage(&self) -> Usage {
        match &self.end {
            End::Finished { usage, .. } => *usage,
            other => panic!("request did not finish: {other:?}"),
        }
    }

    pub fn failure(&self) -> EngineFailure {
        match &self.end {
            End::Failed(f) => f.clone(),
            other => panic!("request did not fail: {other:?}"),
        }
    }
}

/// Reads `stream` to its end, checking that nothing follows the terminal event.
pub fn collect(mut stream: ResponseStream) -> Collected {
    let mut c = Collected {
        ids: vec![],
        text: String::new(),
        logprobs: vec![],
        end: End::Closed,
    };
    while let Some(ev) = stream.blocking_next() {
        match ev {
            EngineEvent::Token(t) => {
                c.ids.push(t.id);
                c.text.push_str(&t.text);
                c.logprobs.push(t.logprobs);
            }
            EngineEvent::Finished {
                reason,
                text,
                usage,
                timings,
            } => {
                c.text.push_str(&text);
                c.end = End::Finished {
                    reason,
                    usage,
                    timings,
                };
            }
            EngineEvent::Failed(f) => c.end = End::Failed(f),
        }
    }
    assert!(stream.blocking_next().is_none(), "events after the end");
    c
}

/// Polls `cond` until it holds or `timeout` passes.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    cond()
}
