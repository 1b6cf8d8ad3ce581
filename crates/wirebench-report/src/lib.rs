//! Turning results into what people read: the terminal table, live interval lines and JSON.
//!
//! Every output format is an [`Exporter`]; each works from a finished [`Results`] document,
//! never from live state (the live lines are built from the same interval records that end
//! up in the document).
#![deny(unsafe_code)]

pub mod experiment;
pub mod export;
pub mod html;
pub mod plot;

pub use export::csv::packet_log_csv;
pub use export::json::Json;
pub(crate) use export::table::columns;
pub use export::table::{interval_header, interval_line, seed_002_table, Table};
pub use export::Exporter;
