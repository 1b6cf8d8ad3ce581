//! What each side measured ([`SideReport`], sent over the control channel) and the results
//! document built from both ([`Results`], the JSON contract documented in `docs/results.md`).
//!
//! `side` holds the per-side report, `document` the document's types, `assemble` how the
//! second is built from two of the first.

mod assemble;
mod document;
mod side;

pub use document::*;
pub use side::*;
