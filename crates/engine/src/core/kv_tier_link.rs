//! [`KvTierLink`]: the engine's side of the KV disk tier — what goes down to disk and what
//! comes back up, around each step.
//!
//! ```text
//! step:  adopt_loaded ─► look_up ─► schedule ─► execute ─► update ─► keep_new_blocks
//!
//! keep_new_blocks  every block the prefix cache registered this step (full, computed) that
//!                  the tier lacks: copied out of the executor, queued for the writer thread
//! look_up          each new waiting request: its prompt blocks past the RAM hit that the
//!                  tier holds (a chain, in order) go to the reader thread; the request is not
//!                  admitted until they are back (other requests run meanwhile)
//! adopt_loaded     blocks read back: written into free blocks and registered in the prefix
//!                  cache, so the scheduler's ordinary lookup finds them
//! ```
//!
//! The step never waits on the disk: writes are queued (dropped when the queue is full), reads
//! run on their own thread, and a request whose read fails or comes back short simply has a
//! shorter hit.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::executor::Executor;
use crate::kv::disk_tier::DiskTier;
use crate::kv::BlockHash;
use crate::kv_tier_metrics::{record_disk_read, record_tier_traffic};
use crate::request::RequestId;
use crate::scheduler::Scheduler;

/// Blocks of one request to read back.
struct LoadJob {
    id: RequestId,
    hashes: Vec<BlockHash>,
}

/// What the reader thread read for one request: a leading run of its blocks.
struct Loaded {
    id: RequestId,
    blocks: Vec<(BlockHash, Vec<u8>)>,
}

/// The engine's connection to its KV disk tier.
pub struct KvTierLink {
    tier: Arc<DiskTier>,
    jobs: Option<Sender<LoadJob>>,
    loaded: Receiver<Loaded>,
    reader: Option<JoinHandle<()>>,
}

impl KvTierLink {
    /// Links `tier` to the scheduler's prefix cache (which starts logging the blocks it
    /// registers) and starts the reader thread.
    pub fn new(tier: DiskTier, scheduler: &mut Scheduler) -> std::io::Result<KvTierLink> {
        scheduler.kv_mut().log_new_blocks();
        let tier = Arc::new(tier);
        let (jobs, job_rx) = channel::<LoadJob>();
        let (loaded_tx, loaded) = channel();
        let reader_tier = Arc::clone(&tier);
        let reader = std::thread::Builder::new()
            .name("kv-disk-reader".into())
            .spawn(move || {
                for job in job_rx {
                    let blocks = read_chain(&reader_tier, &job.hashes);
                    if loaded_tx.send(Loaded { id: job.id, blocks }).is_err() {
                        return;
                    }
                }
            })?;
        Ok(KvTierLink {
            tier,
            jobs: Some(jobs),
            loaded,
            reader: Some(reader),
        })
    }

    /// The tier under the prefix cache.
    pub fn tier(&self) -> &DiskTier {
        &self.tier
    }

    /// Before scheduling: adopts the blocks read back, then sends the reads of new requests.
    pub fn before_schedule(&mut self, scheduler: &mut Scheduler, executor: &mut dyn Executor) {
        self.adopt_loaded(scheduler, executor);
        self.look_up(scheduler);
    }

    /// After a step: queues a copy of every block the prefix cache registered that the tier
    /// lacks.
    pub fn keep_new_blocks(&mut self, scheduler: &mut Scheduler, executor: &dyn Executor) {
        for (hash, block) in scheduler.kv_mut().take_new_blocks() {
            if self.tier.contains(&hash) {
                continue;
            }
            if let Some(bytes) = executor.kv_block_bytes(block) {
                self.tier.store(hash, bytes);
            }
        }
    }

    fn adopt_loaded(&mut self, scheduler: &mut Scheduler, executor: &mut dyn Executor) {
        while let Ok(Loaded { id, blocks }) = self.loaded.try_recv() {
            protect_ram_hit(scheduler, id, blocks.first().map(|(h, _)| *h));
            let block_size = scheduler.kv().block_size() as u64;
            let mut hits = 0;
            for (hash, bytes) in blocks {
                let adopted = scheduler
                    .kv_mut()
                    .adopt_block(hash, |b| executor.set_kv_block_bytes(b, &bytes));
                if !adopted {
                    break;
                }
                hits += block_size;
            }
            record_tier_traffic(0, hits);
            if let Some(req) = scheduler.request_mut(id) {
                req.set_disk_lookup(false);
            }
        }
    }

    /// Sends each new waiting request's blocks that the tier holds to the reader thread (at
    /// most half the free blocks, so a read never evicts the prefix it extends).
    fn look_up(&mut self, scheduler: &mut Scheduler) {
        let Some(jobs) = &self.jobs else { return };
        let block_size = scheduler.kv().block_size() as u64;
        for id in scheduler.waiting_ids() {
            if scheduler.request(id).is_none_or(|r| r.disk_checked()) {
                continue;
            }
            let past_hit = scheduler.blocks_past_hit(id);
            let queries = past_hit.len() as u64 * block_size;
            record_tier_traffic(queries, 0);
            let room = scheduler.kv().num_free_blocks() / 2;
            let hashes: Vec<BlockHash> = past_hit
                .into_iter()
                .take_while(|h| self.tier.contains(h))
                .take(room)
                .collect();
            let loading = !hashes.is_empty() && jobs.send(LoadJob { id, hashes }).is_ok();
            if let Some(req) = scheduler.request_mut(id) {
                req.set_disk_lookup(loading);
            }
        }
    }
}

impl Drop for KvTierLink {
    fn drop(&mut self) {
        self.jobs.take();
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

/// Makes request `id`'s cached blocks before `first_loaded` the most recently freed, so the
/// blocks read back after them do not evict the prefix they extend.
fn protect_ram_hit(scheduler: &mut Scheduler, id: RequestId, first_loaded: Option<BlockHash>) {
    let Some(req) = scheduler.request(id) else {
        return;
    };
    let prefix: Vec<BlockHash> = req
        .block_hashes()
        .iter()
        .take_while(|&&h| Some(h) != first_loaded)
        .copied()
        .collect();
    scheduler.kv_mut().refresh_cached(&prefix);
}

/// The blocks of `hashes` the tier can serve, in order, up to the first it cannot.
fn read_chain(tier: &DiskTier, hashes: &[BlockHash]) -> Vec<(BlockHash, Vec<u8>)> {
    hashes
        .iter()
        .map_while(|h| {
            let start = std::time::Instant::now();
            let bytes = tier.load(h)?;
            record_disk_read(start.elapsed());
            Some((*h, bytes))
        })
        .collect()
}
