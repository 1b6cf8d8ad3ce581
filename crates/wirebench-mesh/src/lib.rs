//! wirebench's measurement mesh, sans-IO: a mesh file checked into hosts, tests and paths
//! ([`config`]), and when each path runs ([`schedule`]). The binary's `mesh` command reads
//! the file, drives the schedule with its clock, runs each test with the engine and keeps
//! every run in the archive (`wirebench-report`'s `archive`).

pub mod config;
pub mod schedule;

pub use config::{Host, Kind, Mesh, MeshError, Path, Peer, Test};
pub use schedule::{Ended, Missed, MissedWhy, Schedule, Start};
