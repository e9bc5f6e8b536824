//! The engine thread's loop: drain every pending command, step while there is work, block on
//! the command channel when there is none, and honour the shutdown deadline.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::Command;
use crate::adapters::{AdapterCard, AdapterError};
use crate::api::{EngineEvent, EngineFailure, EngineStats};
use crate::core::EngineCore;
use crate::prompt_pass::PromptPassError;

/// How long to wait for commands when requests exist but none could be scheduled.
const STALLED_WAIT: Duration = Duration::from_millis(5);

/// The engine thread's state.
pub(super) struct EngineLoop {
    core: EngineCore,
    commands: Receiver<Command>,
    stats: Arc<Mutex<EngineStats>>,
    adapters: Arc<Mutex<Vec<AdapterCard>>>,
    /// [`EngineCore::adapters_version`] when `adapters` was last published.
    adapters_version: u64,
    deadline: Option<Instant>,
    disconnected: bool,
    /// Set when a step panicked: the loop ends and everything in flight fails with it.
    crashed: Option<String>,
    /// Whether the previous turn of the loop had work: the idle KV check runs once each time
    /// the engine runs out of work.
    was_busy: bool,
}

impl EngineLoop {
    pub(super) fn new(
        core: EngineCore,
        commands: Receiver<Command>,
        stats: Arc<Mutex<EngineStats>>,
        adapters: Arc<Mutex<Vec<AdapterCard>>>,
    ) -> Self {
        let adapters_version = core.adapters_version();
        EngineLoop {
            core,
            commands,
            stats,
            adapters,
            adapters_version,
            deadline: None,
            disconnected: false,
            crashed: None,
            was_busy: true,
        }
    }

    /// Runs until shutdown completes or every sender (handles and streams) is gone.
    pub(super) fn run(mut self) {
        loop {
            self.drain();
            if self.disconnected || self.shutdown_due() || self.crashed.is_some() {
                break;
            }
            if self.core.has_unfinished() {
                self.was_busy = true;
                let Some(computed) = self.guarded_step() else {
                    break;
                };
                self.publish();
                if computed == 0 {
                    self.wait(Some(self.stall_wait()));
                }
            } else {
                if std::mem::take(&mut self.was_busy) {
                    // Counted, logged and published in the stats; the engine keeps serving.
                    let _ = self.core.check_idle();
                }
                self.publish();
                self.wait(None);
            }
        }
        let failure = match &self.crashed {
            Some(message) => EngineFailure::Internal(message.clone()),
            None => EngineFailure::ShuttingDown,
        };
        self.fail_in_flight(failure.clone());
        self.reject_pending(&failure);
        self.publish();
    }

    /// One step with panics caught: `None` (and `crashed` set) if it panicked.
    fn guarded_step(&mut self) -> Option<usize> {
        let core = &mut self.core;
        match catch_unwind(AssertUnwindSafe(|| core.step())) {
            Ok(computed) => Some(computed),
            Err(payload) => {
                let message = format!("the engine panicked: {}", panic_message(&*payload));
                tracing::error!("{message}; failing every request and stopping the engine");
                self.crashed = Some(message);
                None
            }
        }
    }

    /// Fails every live request; after a panic the core may be inconsistent, so a second
    /// panic here is caught (dropping the core then closes the remaining streams, which their
    /// readers see as a failure).
    fn fail_in_flight(&mut self, failure: EngineFailure) {
        let core = &mut self.core;
        if catch_unwind(AssertUnwindSafe(|| core.fail_all(failure))).is_err() {
            tracing::error!("failing the in-flight requests panicked too");
        }
    }

    /// True when shutdown was asked for and either its deadline passed or no work is left.
    fn shutdown_due(&self) -> bool {
        match self.deadline {
            Some(d) => Instant::now() >= d || !self.core.has_unfinished(),
            None => false,
        }
    }

    fn stall_wait(&self) -> Duration {
        let until_deadline = self
            .deadline
            .map(|d| d.saturating_duration_since(Instant::now()));
        until_deadline.map_or(STALLED_WAIT, |d| d.min(STALLED_WAIT))
    }

    /// Applies every command already queued.
    fn drain(&mut self) {
        loop {
            match self.commands.try_recv() {
                Ok(cmd) => self.apply(cmd),
                Err(TryRecvError::Empty) => return,
                Err(TryRecvError::Disconnected) => {
                    self.disconnected = true;
                    return;
                }
            }
        }
    }

    /// Blocks until a command arrives (or `timeout` passes) and applies it.
    fn wait(&mut self, timeout: Option<Duration>) {
        let cmd = match timeout {
            None => self
                .commands
                .recv()
                .map_err(|_| RecvTimeoutError::Disconnected),
            Some(t) => self.commands.recv_timeout(t),
        };
        match cmd {
            Ok(cmd) => self.apply(cmd),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => self.disconnected = true,
        }
    }

    fn apply(&mut self, cmd: Command) {
        match cmd {
            Command::Submit {
                id,
                req,
                events,
                admission,
            } => {
                let admitted = self.core.admit(id, *req, events);
                if let Some(tx) = admission {
                    // The receiver is gone only if the client went away; its abort follows.
                    let _ = tx.send(admitted);
                }
                self.publish_adapters();
            }
            Command::Abort(id) => {
                self.core.abort(id);
            }
            Command::LoadAdapter { name, path, reply } => {
                let result = self.core.load_adapter(&name, &path);
                self.publish_adapters();
                let _ = reply.send(result);
            }
            Command::UnloadAdapter { name, reply } => {
                let result = self.core.unload_adapter(&name);
                self.publish_adapters();
                let _ = reply.send(result);
            }
            Command::Shutdown { deadline } => {
                self.deadline = Some(self.deadline.map_or(deadline, |d| d.min(deadline)));
            }
            Command::Embed { tokens, reply } => {
                let _ = reply.send(self.core.embed(&tokens));
                self.publish();
            }
            Command::PromptLogprobs {
                tokens,
                top_n,
                adapter,
                reply,
            } => {
                let _ = reply.send(self.core.prompt_logprobs(&tokens, top_n, adapter));
                self.publish_adapters();
                self.publish();
            }
            Command::Ping { reply } => {
                let _ = reply.send(());
            }
            Command::WatchKvEvents { sink } => {
                self.core.watch_kv_events(sink);
                self.publish();
            }
            Command::WatchSteps { sink } => self.core.watch_steps(sink),
        }
    }

    /// Fails requests and adapter commands sent after the loop ended.
    fn reject_pending(&mut self, failure: &EngineFailure) {
        while let Ok(cmd) = self.commands.try_recv() {
            match cmd {
                Command::Submit {
                    events, admission, ..
                } => {
                    let _ = events.send(EngineEvent::Failed(failure.clone()));
                    if let Some(tx) = admission {
                        let _ = tx.send(Err(failure.clone()));
                    }
                }
                Command::LoadAdapter { reply, .. } => {
                    let _ = reply.send(Err(AdapterError::Stopped));
                }
                Command::UnloadAdapter { reply, .. } => {
                    let _ = reply.send(Err(AdapterError::Stopped));
                }
                Command::Embed { reply, .. } => {
                    let _ = reply.send(Err(PromptPassError::Stopped));
                }
                Command::PromptLogprobs { reply, .. } => {
                    let _ = reply.send(Err(PromptPassError::Stopped));
                }
                Command::Abort(_)
                | Command::Shutdown { .. }
                | Command::Ping { .. }
                | Command::WatchKvEvents { .. }
                | Command::WatchSteps { .. } => {}
            }
        }
    }

    /// Republishes the registered adapters if a load, unload or eviction changed them.
    fn publish_adapters(&mut self) {
        let version = self.core.adapters_version();
        if version == self.adapters_version {
            return;
        }
        self.adapters_version = version;
        *self.adapters.lock().unwrap_or_else(|p| p.into_inner()) = self.core.adapters();
    }

    /// Publishes the stats snapshot and hands on the prefix cache's changes.
    fn publish(&mut self) {
        self.core.publish_kv_events();
        let snapshot = self.core.stats();
        // A poisoned lock still guards a plain value; overwrite it.
        *self.stats.lock().unwrap_or_else(|p| p.into_inner()) = snapshot;
    }
}

/// The text of a panic payload (`panic!` with a literal or a formatted message).
fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "unknown panic"
    }
}
