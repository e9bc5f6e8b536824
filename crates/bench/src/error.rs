//! Errors that stop a benchmark before or after the load phase.
//!
//! Failures of individual requests are not errors of the run: they are counted in the report
//! (see [`crate::outcome::RequestFailure`]). A [`BenchError`] means the benchmark itself could not
//! be set up, could not be saved, or produced no successful request at all.

use std::path::PathBuf;

/// Why `kestrel bench` could not produce a report.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A command-line value is out of range or inconsistent with another one.
    #[error("invalid argument: {0}")]
    InvalidArgs(String),
    /// The prompts file could not be read.
    #[error("cannot read prompts file {path}: {source}")]
    PromptsFileIo {
        /// The file given with `--prompts-file`.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A line of the prompts file is not a valid `{"prompt": ..., "output_len"?: n}` object.
    #[error("prompts file {path}, line {line}: {message}")]
    PromptsFileFormat {
        /// The file given with `--prompts-file`.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong with the line.
        message: String,
    },
    /// The HTTP client could not be built (for example TLS initialisation failed).
    #[error("cannot build HTTP client: {0}")]
    Client(#[source] reqwest::Error),
    /// The async runtime for [`crate::run_blocking`] could not be started.
    #[error("cannot start async runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// The report could not be serialized to JSON.
    #[error("cannot serialize report: {0}")]
    Serialize(#[source] serde_json::Error),
    /// The JSON report could not be written to `--json-out`.
    #[error("cannot write JSON report to {path}: {source}")]
    JsonOut {
        /// The file given with `--json-out`.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// `--plot` names an unsupported format, or the plot could not be written.
    #[error(transparent)]
    Plot(#[from] crate::plot::PlotError),
    /// A saved report could not be read (`kestrel bench compare`).
    #[error("cannot read report {path}: {message}")]
    ReadReport {
        path: std::path::PathBuf,
        message: String,
    },
    /// Every request failed, so there is nothing to measure.
    #[error("all {total} requests failed; first error: {first_error}")]
    AllFailed {
        /// Number of requests sent.
        total: usize,
        /// Description of the first failure, for diagnosis.
        first_error: String,
    },
}
