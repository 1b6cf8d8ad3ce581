//! STUB (replaced by the netem branch): netem's per-packet decisions.
#![allow(missing_docs, dead_code)]
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub enum Distribution {
    #[default]
    Uniform,
    Normal,
    Pareto,
    ParetoNormal,
}
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct NetemConfig {
    pub jitter_ns: u64,
    pub distribution: Distribution,
    pub delay_correlation: f64,
    pub reorder: f64,
    pub reorder_correlation: f64,
    pub reorder_gap: u32,
    pub duplicate: f64,
    pub duplicate_correlation: f64,
    pub corrupt: f64,
    pub corrupt_correlation: f64,
}
#[derive(Debug, Clone)]
pub struct Netem {
    cfg: NetemConfig,
    rng: u64,
    count: u32,
}
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delay {
    Reordered,
    After(u64),
}
impl Netem {
    pub fn new(cfg: NetemConfig, seed: u64) -> Self {
        Self {
            cfg,
            rng: seed,
            count: 0,
        }
    }
    fn u(&mut self) -> f64 {
        self.rng = self
            .rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.rng >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn duplicate(&mut self) -> bool {
        self.cfg.duplicate > 0.0 && self.u() < self.cfg.duplicate
    }
    pub fn corrupt(&mut self) -> Option<u64> {
        (self.cfg.corrupt > 0.0 && self.u() < self.cfg.corrupt).then_some(self.rng)
    }
    pub fn delay(&mut self, delay_ns: u64) -> Delay {
        self.count += 1;
        if self.cfg.reorder > 0.0
            && self.count >= self.cfg.reorder_gap
            && self.u() < self.cfg.reorder
        {
            self.count = 0;
            return Delay::Reordered;
        }
        Delay::After(delay_ns)
    }
}
pub fn corrupt_payload(ip_packet: &mut [u8], r: u64) -> Option<usize> {
    let i = 28 + (r as usize) % ip_packet.len().checked_sub(28).filter(|n| *n > 0)?;
    ip_packet[i] ^= 1;
    Some(i)
}
