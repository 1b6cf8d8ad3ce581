//! One file per command: each validates its flags, calls a library and prints.

pub mod archive;
pub mod completions;
pub mod interrupt;
pub mod iperf3_record;
pub mod lab;
pub mod live;
pub mod merge;
pub mod mesh;
pub mod plot;
pub mod report;
pub mod rrul;
pub mod run;
pub mod serve;
pub mod stack;
pub mod sweep;
