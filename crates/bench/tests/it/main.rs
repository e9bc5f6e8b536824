//! The integration tests of `kestrel-bench`, built as one test binary (one link instead of
//! one per file); each module is one former test file.

mod support;

mod error_paths;
mod multi_turn;
mod plot_run;
mod stale_connection;
mod stream_metrics;
