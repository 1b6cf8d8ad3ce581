//! STUB (replaced by the trace branch): Mahimahi traces.
#![allow(missing_docs, dead_code)]
use std::sync::Arc;

#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    ms: Arc<[u32]>,
    period_ms: u64,
}
impl Trace {
    pub fn parse(text: &str) -> Result<Trace, std::num::ParseIntError> {
        let ms: Vec<u32> = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| l.trim().parse())
            .collect::<Result<_, _>>()?;
        let period_ms = u64::from(*ms.last().unwrap_or(&1)).max(1);
        Ok(Trace {
            ms: ms.into(),
            period_ms,
        })
    }
    pub fn period_ms(&self) -> u64 {
        self.period_ms
    }
    pub fn opportunities_in(&self, start_ns: u64, end_ns: u64) -> u64 {
        let _ = (start_ns, end_ns);
        0
    }
}
#[derive(Debug, Clone)]
pub struct TraceLink {
    trace: Trace,
    /// Next opportunity: index into the trace and the period it is in.
    next: usize,
    period: u64,
}
impl TraceLink {
    pub fn new(trace: Trace) -> Self {
        Self {
            trace,
            next: 0,
            period: 0,
        }
    }
    fn at(&self) -> u64 {
        (self.period * self.trace.period_ms + u64::from(self.trace.ms[self.next])) * 1_000_000
    }
    fn advance(&mut self) {
        self.next += 1;
        if self.next == self.trace.ms.len() {
            self.next = 0;
            self.period += 1;
        }
    }
    pub fn next_start(&mut self, ready_ns: u64) -> u64 {
        while self.at() < ready_ns {
            self.advance();
        }
        self.at()
    }
    pub fn send(&mut self, start_ns: u64, bytes: u64) -> u64 {
        let _ = (start_ns, bytes);
        let t = self.at();
        self.advance();
        t
    }
}
