//! KV disk tier metrics: the tokens asked of it and supplied (beside vLLM's names for a KV
//! connector's external cache), what it holds, and the traffic of its writer and reader.
//! Recorded where each event happens (the writer and reader threads included), so they are
//! current while the engine idles.

use std::time::Duration;

use metrics::{
    counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram, Unit,
};

/// Metric names, exactly as exported.
pub mod names {
    /// Counter: prompt tokens past the RAM prefix hit, looked up on disk.
    pub const KV_DISK_QUERIES_TOTAL: &str = "kestrel:kv_disk_queries_total";
    /// Counter: of those, tokens read back into the prefix cache.
    pub const KV_DISK_HITS_TOTAL: &str = "kestrel:kv_disk_hits_total";
    /// vLLM's names for the same counts of an external (connector) KV cache.
    pub const EXTERNAL_PREFIX_CACHE_QUERIES_TOTAL: &str =
        "vllm:external_prefix_cache_queries_total";
    pub const EXTERNAL_PREFIX_CACHE_HITS_TOTAL: &str = "vllm:external_prefix_cache_hits_total";
    /// Gauge: blocks on disk.
    pub const KV_DISK_BLOCKS: &str = "kestrel:kv_disk_blocks";
    /// Gauge: bytes the block files take.
    pub const KV_DISK_USED_BYTES: &str = "kestrel:kv_disk_used_bytes";
    /// Gauge: the tier's byte budget (`--kv-cache-disk-size`).
    pub const KV_DISK_BUDGET_BYTES: &str = "kestrel:kv_disk_budget_bytes";
    /// Counters: blocks and bytes written, and read back.
    pub const KV_DISK_BLOCKS_WRITTEN_TOTAL: &str = "kestrel:kv_disk_blocks_written_total";
    pub const KV_DISK_WRITTEN_BYTES_TOTAL: &str = "kestrel:kv_disk_written_bytes_total";
    pub const KV_DISK_BLOCKS_READ_TOTAL: &str = "kestrel:kv_disk_blocks_read_total";
    pub const KV_DISK_READ_BYTES_TOTAL: &str = "kestrel:kv_disk_read_bytes_total";
    /// Histogram (seconds): reading one block back (file read and checks).
    pub const KV_DISK_READ_SECONDS: &str = "kestrel:kv_disk_read_seconds";
    /// Counter: blocks not written because the write queue was full.
    pub const KV_DISK_WRITES_DROPPED_TOTAL: &str = "kestrel:kv_disk_writes_dropped_total";
    /// Counter: failed writes (a full or failing disk).
    pub const KV_DISK_WRITE_ERRORS_TOTAL: &str = "kestrel:kv_disk_write_errors_total";
    /// Counter: block files refused (torn, truncated, corrupted, foreign) and deleted.
    pub const KV_DISK_FILES_REFUSED_TOTAL: &str = "kestrel:kv_disk_files_refused_total";
    /// Gauge: 1 once the tier turned itself off after repeated write failures.
    pub const KV_DISK_DISABLED: &str = "kestrel:kv_disk_disabled";
}

/// Registers help text for the disk tier metrics.
pub fn describe() {
    use names::*;
    let counters = [
        (
            KV_DISK_QUERIES_TOTAL,
            "Prompt tokens past the RAM prefix hit looked up in the KV disk tier",
        ),
        (
            KV_DISK_HITS_TOTAL,
            "Prompt tokens read back from the KV disk tier into the prefix cache",
        ),
        (
            EXTERNAL_PREFIX_CACHE_QUERIES_TOTAL,
            "Tokens looked up in the external (disk) KV cache",
        ),
        (
            EXTERNAL_PREFIX_CACHE_HITS_TOTAL,
            "Tokens found in the external (disk) KV cache",
        ),
        (
            KV_DISK_BLOCKS_WRITTEN_TOTAL,
            "KV blocks written to the disk tier",
        ),
        (
            KV_DISK_BLOCKS_READ_TOTAL,
            "KV blocks read back from the disk tier",
        ),
        (
            KV_DISK_WRITES_DROPPED_TOTAL,
            "KV blocks not written because the write queue was full",
        ),
        (KV_DISK_WRITE_ERRORS_TOTAL, "Failed KV disk tier writes"),
        (
            KV_DISK_FILES_REFUSED_TOTAL,
            "KV disk tier files refused (torn, corrupted, foreign)",
        ),
    ];
    for (name, help) in counters {
        describe_counter!(name, Unit::Count, help);
    }
    describe_counter!(
        KV_DISK_WRITTEN_BYTES_TOTAL,
        Unit::Bytes,
        "Bytes written to the KV disk tier"
    );
    describe_counter!(
        KV_DISK_READ_BYTES_TOTAL,
        Unit::Bytes,
        "Bytes read from the KV disk tier"
    );
    describe_histogram!(
        KV_DISK_READ_SECONDS,
        Unit::Seconds,
        "Time to read one KV block back from disk"
    );
    describe_gauge!(
        KV_DISK_BLOCKS,
        Unit::Count,
        "KV blocks held by the disk tier"
    );
    describe_gauge!(
        KV_DISK_USED_BYTES,
        Unit::Bytes,
        "Bytes of KV disk tier files"
    );
    describe_gauge!(
        KV_DISK_BUDGET_BYTES,
        Unit::Bytes,
        "The KV disk tier's byte budget"
    );
    describe_gauge!(
        KV_DISK_DISABLED,
        Unit::Count,
        "1 once the KV disk tier turned itself off"
    );
}

/// Blocks and bytes now on disk, and the budget (after the index changed).
pub(crate) fn record_tier_size(blocks: usize, used_bytes: u64, budget_bytes: u64) {
    use names::*;
    gauge!(KV_DISK_BLOCKS).set(blocks as f64);
    gauge!(KV_DISK_USED_BYTES).set(used_bytes as f64);
    gauge!(KV_DISK_BUDGET_BYTES).set(budget_bytes as f64);
}

/// One block written, taking `bytes`.
pub(crate) fn record_block_written(bytes: u64) {
    counter!(names::KV_DISK_BLOCKS_WRITTEN_TOTAL).increment(1);
    counter!(names::KV_DISK_WRITTEN_BYTES_TOTAL).increment(bytes);
}

/// One block read back, `bytes` long.
pub(crate) fn record_block_read(bytes: u64) {
    counter!(names::KV_DISK_BLOCKS_READ_TOTAL).increment(1);
    counter!(names::KV_DISK_READ_BYTES_TOTAL).increment(bytes);
}

/// A block not written: the queue was full.
pub(crate) fn record_write_dropped() {
    counter!(names::KV_DISK_WRITES_DROPPED_TOTAL).increment(1);
}

/// A write failed; `disabled`: the tier is off from now on.
pub(crate) fn record_write_error(disabled: bool) {
    counter!(names::KV_DISK_WRITE_ERRORS_TOTAL).increment(1);
    gauge!(names::KV_DISK_DISABLED).set(if disabled { 1.0 } else { 0.0 });
}

/// A block file refused and deleted.
pub(crate) fn record_file_refused() {
    counter!(names::KV_DISK_FILES_REFUSED_TOTAL).increment(1);
}

/// Prompt tokens looked up on disk (`queries`) and read back into the prefix cache (`hits`).
pub(crate) fn record_tier_traffic(queries: u64, hits: u64) {
    use names::*;
    if queries > 0 {
        counter!(KV_DISK_QUERIES_TOTAL).increment(queries);
        counter!(EXTERNAL_PREFIX_CACHE_QUERIES_TOTAL).increment(queries);
    }
    if hits > 0 {
        counter!(KV_DISK_HITS_TOTAL).increment(hits);
        counter!(EXTERNAL_PREFIX_CACHE_HITS_TOTAL).increment(hits);
    }
}

/// One block read back in `elapsed`.
pub(crate) fn record_disk_read(elapsed: Duration) {
    histogram!(names::KV_DISK_READ_SECONDS).record(elapsed.as_secs_f64());
}
