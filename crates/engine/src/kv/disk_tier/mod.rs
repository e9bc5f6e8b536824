//! [`DiskTier`]: full KV blocks kept on disk under their chained prefix hash, so a prefix
//! outlives the RAM cache and the process.
//!
//! ```text
//! DIR/<fingerprint (16 hex)>/<block hash (64 hex)>.kvb     one block per file (block_file.rs)
//!
//! store(hash, bytes) ─► bounded queue ─► writer thread: write .tmp, rename, index, evict LRU
//! load(hash)         ─► read, check every header field and both checksums ─► bytes | refused
//! open(dir)          ─► drop .tmp leftovers, read each header, refuse bad or foreign files,
//!                       rebuild the LRU index from modification times
//! ```
//!
//! A block's bytes depend on its tokens (named by the hash, which includes the cache salt and
//! the adapter) and on the model, weights, KV dtype and geometry (named by the
//! [`TierFingerprint`], which is also the directory and is checked in every header), so one
//! model never reads another's KV and two salts never share a block.
//!
//! Writes never block the caller: when the queue is full the block is simply not written.
//! Failing writes (a full or broken disk) are counted; after [`MAX_WRITE_ERRORS`] in a row the
//! tier turns itself off and serving goes on without it.

mod block_file;
mod tier_fingerprint;
mod tier_index;

use std::collections::HashSet;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Instant, SystemTime};

pub use block_file::BlockFileError;
pub use tier_fingerprint::TierFingerprint;
pub use tier_index::TierIndex;

use super::{BlockHash, KvEvent};
use crate::kv_tier_metrics as metrics;

/// Write failures in a row after which the tier turns itself off.
pub const MAX_WRITE_ERRORS: u32 = 3;
/// Blocks waiting to be written; more are not written.
const QUEUE_BLOCKS: usize = 64;
const EXTENSION: &str = "kvb";

/// A disk tier that cannot be opened.
#[derive(Debug, thiserror::Error)]
pub enum DiskTierError {
    #[error("KV disk tier {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What the tier holds and has done since it opened.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TierStats {
    pub blocks: usize,
    pub used_bytes: u64,
    pub budget_bytes: u64,
    pub blocks_written: u64,
    pub bytes_written: u64,
    pub blocks_read: u64,
    pub bytes_read: u64,
    /// Seconds spent in successful reads.
    pub read_seconds: f64,
    /// Blocks not written because the queue was full.
    pub writes_dropped: u64,
    pub write_errors: u64,
    /// Files refused: at open or on a read (torn, truncated, corrupted, foreign).
    pub files_refused: u64,
    /// The tier turned itself off after repeated write failures.
    pub disabled: bool,
}

#[derive(Debug, Default)]
struct Counters {
    blocks_written: AtomicU64,
    bytes_written: AtomicU64,
    blocks_read: AtomicU64,
    bytes_read: AtomicU64,
    read_nanos: AtomicU64,
    writes_dropped: AtomicU64,
    write_errors: AtomicU64,
    files_refused: AtomicU64,
}

/// State the caller and the writer thread share.
#[derive(Debug)]
struct Shared {
    dir: PathBuf,
    fingerprint: TierFingerprint,
    index: Mutex<TierIndex>,
    /// Blocks queued for writing (so a block is queued once).
    pending: Mutex<HashSet<BlockHash>>,
    counters: Counters,
    disabled: AtomicBool,
    errors_in_a_row: AtomicU32,
}

enum Job {
    Write(BlockHash, Vec<u8>),
    Flush(SyncSender<()>),
}

/// Full KV blocks on disk; see the module docs.
#[derive(Debug)]
pub struct DiskTier {
    shared: Arc<Shared>,
    jobs: Option<SyncSender<Job>>,
    writer: Option<JoinHandle<()>>,
}

impl DiskTier {
    /// Opens (creating it if needed) the tier for `fingerprint` under `root`, keeping at most
    /// `budget` bytes of block files, and rebuilds its index from the files there.
    pub fn open(
        root: &Path,
        fingerprint: TierFingerprint,
        budget: u64,
    ) -> Result<DiskTier, DiskTierError> {
        let dir = root.join(fingerprint.short_hex());
        fs::create_dir_all(&dir).map_err(|source| DiskTierError::Io {
            path: dir.clone(),
            source,
        })?;
        let shared = Arc::new(Shared {
            index: Mutex::new(TierIndex::new(budget)),
            pending: Mutex::new(HashSet::new()),
            counters: Counters::default(),
            disabled: AtomicBool::new(false),
            errors_in_a_row: AtomicU32::new(0),
            dir,
            fingerprint,
        });
        shared.rebuild_index()?;
        let (jobs, rx) = sync_channel(QUEUE_BLOCKS);
        let writer_shared = Arc::clone(&shared);
        let writer = std::thread::Builder::new()
            .name("kv-disk-writer".into())
            .spawn(move || writer_shared.write_loop(rx))
            .map_err(|source| DiskTierError::Io {
                path: shared.dir.clone(),
                source,
            })?;
        Ok(DiskTier {
            shared,
            jobs: Some(jobs),
            writer: Some(writer),
        })
    }

    /// The directory holding this fingerprint's block files.
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// Whether block `hash` is on disk (a later [`DiskTier::load`] may still refuse it).
    pub fn contains(&self, hash: &BlockHash) -> bool {
        self.shared.index().contains(hash)
    }

    /// Logs the blocks that enter and leave the tier from now on ([`Self::take_events`]).
    pub fn log_events(&self) {
        self.shared.index().log_changes();
    }

    /// The blocks that entered (`Stored`) or left (`Removed`) the tier since the last call, in
    /// order: written, evicted for the budget, or refused on a read.
    pub fn take_events(&self) -> Vec<KvEvent> {
        self.shared.index().take_changes()
    }

    /// Every block on disk, in no particular order.
    pub fn hashes(&self) -> Vec<BlockHash> {
        self.shared.index().hashes()
    }

    /// Queues block `hash` with `bytes` for writing, unless it is on disk or queued already,
    /// the queue is full, or the tier is off. Never blocks.
    pub fn store(&self, hash: BlockHash, bytes: Vec<u8>) {
        let s = &self.shared;
        if s.disabled.load(Ordering::Relaxed) || s.index().contains(&hash) {
            return;
        }
        if !s.pending().insert(hash) {
            return;
        }
        let Some(jobs) = &self.jobs else { return };
        match jobs.try_send(Job::Write(hash, bytes)) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                s.pending().remove(&hash);
                s.counters.writes_dropped.fetch_add(1, Ordering::Relaxed);
                metrics::record_write_dropped();
            }
        }
    }

    /// The bytes of block `hash`, every field of its file checked; `None` if it is not on
    /// disk or its file is refused (then it is deleted and forgotten).
    pub fn load(&self, hash: &BlockHash) -> Option<Vec<u8>> {
        let s = &self.shared;
        if !s.index().contains(hash) {
            return None;
        }
        let start = Instant::now();
        let path = s.path_of(hash);
        let read = fs::read(&path)
            .map_err(|e| e.to_string())
            .and_then(|bytes| {
                block_file::decode(bytes, &s.fingerprint, hash).map_err(|e| e.to_string())
            });
        match read {
            Ok(payload) => {
                s.index().touch(hash);
                let c = &s.counters;
                c.blocks_read.fetch_add(1, Ordering::Relaxed);
                c.bytes_read
                    .fetch_add(payload.len() as u64, Ordering::Relaxed);
                c.read_nanos
                    .fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
                metrics::record_block_read(payload.len() as u64);
                Some(payload)
            }
            Err(why) => {
                s.refuse(&path, &why);
                s.index().remove(hash);
                s.record_size();
                None
            }
        }
    }

    /// Waits until every block queued so far is written (or failed).
    pub fn flush(&self) {
        let Some(jobs) = &self.jobs else { return };
        let (tx, rx) = sync_channel(1);
        if jobs.send(Job::Flush(tx)).is_ok() {
            let _ = rx.recv();
        }
    }

    pub fn stats(&self) -> TierStats {
        let s = &self.shared;
        let c = &s.counters;
        let index = s.index();
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        TierStats {
            blocks: index.len(),
            used_bytes: index.used(),
            budget_bytes: index.budget(),
            blocks_written: load(&c.blocks_written),
            bytes_written: load(&c.bytes_written),
            blocks_read: load(&c.blocks_read),
            bytes_read: load(&c.bytes_read),
            read_seconds: load(&c.read_nanos) as f64 / 1e9,
            writes_dropped: load(&c.writes_dropped),
            write_errors: load(&c.write_errors),
            files_refused: load(&c.files_refused),
            disabled: s.disabled.load(Ordering::Relaxed),
        }
    }
}

impl Drop for DiskTier {
    /// Writes what is queued, then stops the writer.
    fn drop(&mut self) {
        self.jobs.take();
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

impl Shared {
    fn index(&self) -> std::sync::MutexGuard<'_, TierIndex> {
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, HashSet<BlockHash>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn path_of(&self, hash: &BlockHash) -> PathBuf {
        self.dir.join(format!("{}.{EXTENSION}", hash.to_hex()))
    }

    /// Deletes a file that cannot be served, with a warning.
    fn refuse(&self, path: &Path, why: &str) {
        tracing::warn!(path = %path.display(), "KV disk tier: refusing block file: {why}");
        self.counters.files_refused.fetch_add(1, Ordering::Relaxed);
        metrics::record_file_refused();
        let _ = fs::remove_file(path);
    }

    /// Indexes the valid block files in the directory, oldest first; deletes leftovers of
    /// interrupted writes and refused files.
    fn rebuild_index(&self) -> Result<(), DiskTierError> {
        let io = |source| DiskTierError::Io {
            path: self.dir.clone(),
            source,
        };
        let mut found = Vec::new();
        for entry in fs::read_dir(&self.dir).map_err(io)? {
            let path = entry.map_err(io)?.path();
            match path.extension().and_then(|e| e.to_str()) {
                Some("tmp") => {
                    let _ = fs::remove_file(&path);
                }
                Some(EXTENSION) => match self.check_file(&path) {
                    Ok(f) => found.push(f),
                    Err(why) => self.refuse(&path, &why),
                },
                _ => {}
            }
        }
        found.sort_by_key(|(mtime, _, _)| *mtime);
        {
            let mut index = self.index();
            for (_, hash, bytes) in found {
                for old in index.insert(hash, bytes) {
                    let _ = fs::remove_file(self.path_of(&old));
                }
            }
        }
        self.record_size();
        Ok(())
    }

    /// A block file's modification time, hash and size, if its header is sound, names the
    /// block the file name says, and the file is as long as the header says.
    fn check_file(&self, path: &Path) -> Result<(SystemTime, BlockHash, u64), String> {
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        let named = BlockHash::from_hex(stem).ok_or("the name is not a block hash")?;
        let mut file = fs::File::open(path).map_err(|e| e.to_string())?;
        let meta = file.metadata().map_err(|e| e.to_string())?;
        let mut head = vec![0u8; block_file::HEADER_LEN];
        file.read_exact(&mut head)
            .map_err(|_| BlockFileError::Truncated.to_string())?;
        let header =
            block_file::read_header(&head, &self.fingerprint).map_err(|e| e.to_string())?;
        if header.hash != named {
            return Err(BlockFileError::WrongBlock.to_string());
        }
        if meta.len() != block_file::HEADER_LEN as u64 + header.payload_len {
            return Err(BlockFileError::Truncated.to_string());
        }
        let mtime = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        Ok((mtime, named, meta.len()))
    }

    fn write_loop(&self, jobs: Receiver<Job>) {
        for job in jobs {
            match job {
                Job::Write(hash, bytes) => {
                    if !self.disabled.load(Ordering::Relaxed) {
                        self.write_block(hash, &bytes);
                    }
                    self.pending().remove(&hash);
                }
                Job::Flush(done) => {
                    let _ = done.send(());
                }
            }
        }
    }

    fn write_block(&self, hash: BlockHash, payload: &[u8]) {
        let path = self.path_of(&hash);
        let tmp = path.with_extension("tmp");
        let header = block_file::header(&self.fingerprint, &hash, payload);
        let written = fs::write(&tmp, [header.as_slice(), payload].concat())
            .and_then(|()| fs::rename(&tmp, &path));
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            self.write_failed(&e);
            return;
        }
        self.errors_in_a_row.store(0, Ordering::Relaxed);
        let bytes = (header.len() + payload.len()) as u64;
        let c = &self.counters;
        c.blocks_written.fetch_add(1, Ordering::Relaxed);
        c.bytes_written.fetch_add(bytes, Ordering::Relaxed);
        metrics::record_block_written(bytes);
        let evicted = self.index().insert(hash, bytes);
        for old in evicted {
            let _ = fs::remove_file(self.path_of(&old));
        }
        self.record_size();
    }

    /// Publishes what the index holds.
    fn record_size(&self) {
        let index = self.index();
        metrics::record_tier_size(index.len(), index.used(), index.budget());
    }

    fn write_failed(&self, e: &std::io::Error) {
        self.counters.write_errors.fetch_add(1, Ordering::Relaxed);
        let in_a_row = self.errors_in_a_row.fetch_add(1, Ordering::Relaxed) + 1;
        tracing::warn!(dir = %self.dir.display(), "KV disk tier: write failed: {e}");
        metrics::record_write_error(in_a_row >= MAX_WRITE_ERRORS);
        if in_a_row >= MAX_WRITE_ERRORS && !self.disabled.swap(true, Ordering::Relaxed) {
            tracing::error!(
                dir = %self.dir.display(),
                "KV disk tier: {in_a_row} writes failed in a row; the tier is off until restart"
            );
        }
    }
}
