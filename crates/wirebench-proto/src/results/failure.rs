//! The documents `run --json` and `--json-stream` print when a test does not complete: the
//! results with how it ended, or, when it never began, the test asked for and the error.
//! Their keys are part of the contract `docs/results.md` documents ("When a test fails").

use serde::Serialize;

use super::{Results, TestView};
use crate::error_kind::ErrorKind;

/// The results document with how the test ended, for `--json` and `--json-stream` when it
/// did not complete.
#[derive(Debug, Serialize)]
pub struct ResultsWithExit<'a> {
    /// What was measured.
    #[serde(flatten)]
    pub results: &'a Results,
    /// How it ended, for scripts (`docs/results.md`'s table).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<&'static str>,
    /// The signal that interrupted the test (`SIGINT`, `SIGTERM`, `SIGHUP`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<&'static str>,
    /// The process's exit code.
    pub exit_code: u8,
}

/// The document of a test that never began: the test asked for and the error.
#[derive(Debug, Serialize)]
pub struct FailureDocument<'a> {
    /// Document version, as the results'.
    pub schema: u32,
    /// Tool and version of the client.
    pub wirebench: &'static str,
    /// The server, as the user named it, with its port.
    pub server: String,
    /// The test as asked.
    pub test: TestView,
    /// What went wrong, in words.
    pub error: &'a str,
    /// How it ended, for scripts.
    pub error_kind: &'static str,
    /// The error's kind as the engine gave it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_cause: Option<ErrorKind>,
    /// The signal that interrupted the test before it began.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<&'static str>,
    /// The process's exit code.
    pub exit_code: u8,
}
