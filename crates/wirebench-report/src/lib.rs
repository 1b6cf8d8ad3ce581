//! Turning results into what people read and what other tools load: the formats behind one
//! [`Exporter`] trait (the terminal table, JSON, CSV, NDJSON; `export/`), live interval lines,
//! experiments (grids, presets and their summaries; `experiment`), what an experiment
//! records of how it was run (`meta`), plots (`plot`), the HTML report (`html`), and text from
//! files made safe to show (`text`).
//!
//! Every format works from a finished document, never from live state (the live lines are
//! built from the same interval records that end up in the document).
#![deny(unsafe_code)]

pub mod archive;
pub mod experiment;
pub mod export;
pub mod html;
pub mod input;
pub mod meta;
/// Files written whole or not at all (kept here under its old path for the callers).
pub use wirebench_sys::output;
pub use wirebench_sys::rundir;
pub mod plot;
pub mod text;

pub use export::csv::packet_log as packet_log_csv;
pub use export::{BothDirections, Csv, Exporter, Format, Human, Json, Ndjson, Table};
