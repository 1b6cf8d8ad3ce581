//! What each side measured ([`SideReport`], sent over the control channel) and the results
//! document built from both ([`Results`], the JSON contract documented in `docs/results.md`).
//!
//! `side` holds the per-side report, `document` the document's types, `failure` the
//! documents of a test that did not complete, `assemble` how the
//! second is built from two of the first, `rrul` the latency-under-load figures built from
//! several documents.

mod assemble;
mod document;
mod failure;
mod rrul;
mod side;

pub use assemble::NO_TRANSACTION;
pub use document::*;
pub use failure::{FailureDocument, ResultsWithExit};
pub use rrul::{OpenLoop, Part, RrulParts, SentProbe};
pub use side::*;
