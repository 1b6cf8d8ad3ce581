//! What each side measured ([`SideReport`], sent over the control channel) and the results
//! document built from both ([`Results`], the JSON contract documented in `docs/results.md`).
//!
//! `side` holds the per-side report, `document` the document's types, `assemble` how the
//! second is built from two of the first, `rrul` the latency-under-load figures built from
//! several documents.

mod assemble;
mod document;
mod rrul;
mod side;

pub use assemble::NO_TRANSACTION;
pub use document::*;
pub use rrul::{OpenLoop, Part, RrulParts, SentProbe};
pub use side::*;
