//! STUB (replaced by the aqm branch): the queue interface the link drives.
#![allow(missing_docs, dead_code)]
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueuedPacket {
    pub id: u32,
    pub bytes: u32,
    pub flow: u32,
    pub ect: bool,
    pub enqueued_ns: u64,
}
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropCause {
    Overflow,
    Aqm,
}
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dequeued {
    pub packet: QueuedPacket,
    pub mark_ce: bool,
}
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum AqmKind {
    DropTail,
    DropHead,
    Codel,
    FqCodel,
    Pie,
}
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AqmConfig {
    pub kind: AqmKind,
    pub ecn: bool,
}
impl AqmConfig {
    pub fn parse(text: &str) -> Result<Self, String> {
        let kind = match text.split_whitespace().next() {
            Some("droptail") => AqmKind::DropTail,
            Some("drophead") => AqmKind::DropHead,
            Some("codel") => AqmKind::Codel,
            Some("fq_codel") => AqmKind::FqCodel,
            Some("pie") => AqmKind::Pie,
            _ => return Err(text.into()),
        };
        Ok(Self { kind, ecn: false })
    }
}
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AqmCounters {
    pub dropped_overflow: u64,
    pub dropped_aqm: u64,
    pub marked: u64,
}
#[derive(Debug, Clone)]
pub struct Aqm {
    q: VecDeque<QueuedPacket>,
    limit: u32,
    bytes: u64,
    counters: AqmCounters,
}
impl Aqm {
    pub fn new(_cfg: &AqmConfig, limit_packets: u32, _limit_bytes: u64, _seed: u64) -> Self {
        Self {
            q: VecDeque::new(),
            limit: limit_packets,
            bytes: 0,
            counters: AqmCounters::default(),
        }
    }
    pub fn enqueue(
        &mut self,
        now_ns: u64,
        mut p: QueuedPacket,
        drop: &mut dyn FnMut(QueuedPacket, DropCause),
    ) {
        if self.limit > 0 && self.q.len() >= self.limit as usize {
            self.counters.dropped_overflow += 1;
            drop(p, DropCause::Overflow);
            return;
        }
        p.enqueued_ns = now_ns;
        self.bytes += u64::from(p.bytes);
        self.q.push_back(p);
    }
    pub fn dequeue(
        &mut self,
        _now_ns: u64,
        _drop: &mut dyn FnMut(QueuedPacket, DropCause),
    ) -> Option<Dequeued> {
        let p = self.q.pop_front()?;
        self.bytes -= u64::from(p.bytes);
        Some(Dequeued {
            packet: p,
            mark_ce: false,
        })
    }
    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }
    pub fn len(&self) -> usize {
        self.q.len()
    }
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
    pub fn counters(&self) -> AqmCounters {
        self.counters
    }
}
