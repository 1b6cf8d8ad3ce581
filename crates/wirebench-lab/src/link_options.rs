//! A link's properties as people write them (`rate = "2M"`, `delay = "50ms"`,
//! `loss = "5%"`), in scenario files and on the command line, turned into the model's
//! [`LinkConfig`] for each direction.

use serde::{Deserialize, Serialize};
use wirebench_proto::units::{parse_duration, parse_rate, parse_size, Rate, UnitError};

use crate::aqm::{AqmConfig, AqmError};
use crate::link::{LinkConfig, Loss};
use crate::netem::{Distribution, NetemConfig, SlotConfig, SlotGap};
use crate::trace::{Trace, TUN_HEADER_BYTES};

/// A link property that does not make sense; each message names the value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PropsError {
    /// Not a number, nor a percentage.
    #[error("invalid probability {0:?} (e.g. 0.05 or 5%)")]
    InvalidProbability(String),
    /// A number outside 0 to 1 (0% to 100%).
    #[error("probability {0:?} is not between 0 and 1")]
    ProbabilityRange(String),
    /// A rate in packets/s: a link's rate is in bits/s.
    #[error("link rate {0:?} must be bits/s (e.g. 10M)")]
    RateNotBits(String),
    /// A malformed rate, duration or size.
    #[error(transparent)]
    Unit(#[from] UnitError),
    /// A duration without a unit: tc reads `10` as 10 µs, a bare number elsewhere in
    /// wirebench is seconds; a link's delay says which.
    #[error("{key} {value:?} needs a unit (e.g. {value}ms or {value}s): tc reads a bare number as µs, wirebench as seconds")]
    BareDuration {
        /// The key or flag, without dashes.
        key: &'static str,
        /// The value as given.
        value: String,
    },
    /// Loss sizes that are not a range of IP lengths.
    #[error(
        "loss-sizes {0:?} must be MIN-MAX, IP lengths in bytes from 20 to 65535 (e.g. 1050-1120)"
    )]
    LossSizes(String),
    /// A mean loss burst below one packet.
    #[error("loss-burst {0} must be at least 1 packet")]
    BurstTooShort(f64),
    /// Bursts need a good state to come back to.
    #[error("loss of 100% cannot come in bursts")]
    BurstOfTotalLoss,
    /// A queue discipline (`aqm`) that cannot be read.
    #[error("aqm: {0}")]
    Aqm(#[from] AqmError),
    /// `ecn` without an `aqm`: the default drop-tail queue never marks.
    #[error("--ecn marks packets only under an AQM: add --aqm codel, fq_codel or pie")]
    EcnWithoutAqm,
    /// A value past what a link can emulate; the message gives the bound.
    #[error("{key} {value:?}: {why}")]
    OutOfRange {
        /// The property (its scenario key; the flag is `--` and the same).
        key: &'static str,
        /// The value as given.
        value: String,
        /// The bound, in words.
        why: &'static str,
    },
    /// A delay distribution netem does not have.
    #[error("unknown distribution {0:?}: uniform, normal, pareto or paretonormal")]
    UnknownDistribution(String),
    /// A netem option that needs another one set too.
    #[error("{key} needs {needs}")]
    Needs {
        /// The property given (its scenario key; the flag is `--` and the same).
        key: &'static str,
        /// What it needs, in words, with an example.
        needs: &'static str,
    },
    /// A trace file that cannot be used; the message names the file and the line.
    #[error("{key}: {message}")]
    Trace {
        /// The property (`trace`, `trace-up` or `trace-down`).
        key: &'static str,
        /// What is wrong, naming the file.
        message: String,
    },
    /// A trace and a rate for the same direction: the trace is the rate.
    #[error(
        "{trace} and {rate} both set how fast {direction} goes: a trace is its rate; \
         give the rate to the other direction only (rate-up or rate-down)"
    )]
    TraceAndRate {
        /// The trace's key.
        trace: &'static str,
        /// The rate's key.
        rate: &'static str,
        /// `up` or `down`.
        direction: &'static str,
    },
}

/// The longest delay, and the longest jitter, a link takes. A packet held longer outlives
/// every timeout of a test (connecting gives up after 10 s), and what the emulator holds
/// grows with rate × delay.
pub const MAX_DELAY: std::time::Duration = std::time::Duration::from_secs(60);
/// The slowest and fastest link rates, bits/s: below 1 kbit/s one full-size packet takes
/// 12 s to cross; above 1 Tbit/s is no link the emulator can keep up with.
pub const RATE_BPS: std::ops::RangeInclusive<u64> = 1_000..=1_000_000_000_000;
/// The longest queue, packets and bytes, and the largest per-packet overhead and mean loss
/// burst: generous for any real link, and each bounds what the model keeps.
pub const MAX_QUEUE_PACKETS: u32 = 1_000_000;
/// See [`MAX_QUEUE_PACKETS`].
pub const MAX_QUEUE_BYTES: u64 = 1 << 30;
/// See [`MAX_QUEUE_PACKETS`].
pub const MAX_OVERHEAD_BYTES: u32 = 65_535;
/// See [`MAX_QUEUE_PACKETS`].
pub const MAX_LOSS_BURST: f64 = 1e6;
/// The longest reorder gap, packets: past any test's reordering pattern, and a bound on the
/// counter the model keeps.
pub const MAX_REORDER_GAP: u32 = 1_000_000;

/// A scenario's `loss = 0.05` as well as `loss = "5%"`: a bare number is read as its
/// text, so that the link's properties keep one spelling (and serialize as they always did).
fn string_or_number<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Text {
        Str(String),
        Int(i64),
        Float(f64),
    }
    Ok(Option::<Text>::deserialize(d)?.map(|t| match t {
        Text::Str(s) => s,
        Text::Int(i) => i.to_string(),
        Text::Float(f) => f.to_string(),
    }))
}

/// Default queue: 1000 packets, Linux's default `txqueuelen`.
pub const DEFAULT_QUEUE_PACKETS: u32 = 1000;

/// A link's properties; every field is optional and has a default.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct LinkProps {
    /// Rate in bits/s, both directions (`10M`, `1G`); default no limit.
    pub rate: Option<String>,
    /// Rate a → b, if it differs.
    pub rate_up: Option<String>,
    /// Rate b → a, if it differs.
    pub rate_down: Option<String>,
    /// One-way propagation delay, each direction (`50ms`); default 0.
    pub delay: Option<String>,
    /// Extra random delay per packet, 0 to this, never reordering; default 0. With a
    /// `distribution`, netem's jitter instead: delay ± this.
    pub jitter: Option<String>,
    /// Random loss, both directions: a probability (`0.05`, also as a bare number) or a
    /// percentage (`5%`).
    #[serde(default, deserialize_with = "string_or_number")]
    pub loss: Option<String>,
    /// Random loss a → b.
    #[serde(default, deserialize_with = "string_or_number")]
    pub loss_up: Option<String>,
    /// Random loss b → a.
    #[serde(default, deserialize_with = "string_or_number")]
    pub loss_down: Option<String>,
    /// Mean length of a loss burst, packets (Gilbert-Elliott); default 1: independent losses.
    pub loss_burst: Option<f64>,
    /// The packets random loss applies to, by IP length (`1050-1120`): data packets, not
    /// acknowledgements, say; default all. Left out of documents when not given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_sizes: Option<String>,
    /// Queue before the serializer, packets (0: no limit by count); default 1000.
    pub queue: Option<u32>,
    /// Queue limit in bytes (`64K`); default none.
    pub queue_bytes: Option<String>,
    /// Bytes added to each IP packet's length on the wire, for the rate; default 0.
    pub overhead: Option<u32>,
    /// Seed of the link's random numbers; default 1.
    pub seed: Option<u64>,
    /// The queue's discipline in tc's syntax (`fq_codel`, `codel target 5ms ecn`, `pie`);
    /// default a drop-tail queue of `queue` packets. Left out of documents when not given,
    /// so that those of links without it read as they always did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aqm: Option<String>,
    /// Mark ECN-capable packets CE where the AQM would drop them (overrides the `ecn`
    /// keyword of `aqm`); default off. Left out of documents when not given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecn: Option<bool>,
    // netem's options (docs/lab.md, "netem's options"); both directions alike. Written out
    // only when given, so that files of links without them keep their keys.
    /// The shape of the jitter, as netem's `distribution`: uniform, normal, pareto or
    /// paretonormal. Given, jitter becomes netem's: the delay varies by ± jitter (normal:
    /// jitter is its standard deviation), still in order. Default none: 0 to jitter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distribution: Option<String>,
    /// How much each packet's delay draw leans on the one before (netem's `delay D J 25%`).
    #[serde(
        default,
        deserialize_with = "string_or_number",
        skip_serializing_if = "Option::is_none"
    )]
    pub delay_correlation: Option<String>,
    /// Probability that a packet is sent at once, overtaking the delayed ones (netem's
    /// `reorder 25%`); needs a delay.
    #[serde(
        default,
        deserialize_with = "string_or_number",
        skip_serializing_if = "Option::is_none"
    )]
    pub reorder: Option<String>,
    /// How much each reorder draw leans on the one before.
    #[serde(
        default,
        deserialize_with = "string_or_number",
        skip_serializing_if = "Option::is_none"
    )]
    pub reorder_correlation: Option<String>,
    /// netem's `gap N`: only once N − 1 packets went through delayed may the next be
    /// reordered; default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reorder_gap: Option<u32>,
    /// Probability that a packet is sent twice (netem's `duplicate 1%`).
    #[serde(
        default,
        deserialize_with = "string_or_number",
        skip_serializing_if = "Option::is_none"
    )]
    pub duplicate: Option<String>,
    /// How much each duplicate draw leans on the one before.
    #[serde(
        default,
        deserialize_with = "string_or_number",
        skip_serializing_if = "Option::is_none"
    )]
    pub duplicate_correlation: Option<String>,
    /// Probability that a packet gets one bit of its payload flipped (netem's `corrupt
    /// 0.1%`); the receiver's kernel drops it as a checksum error.
    #[serde(
        default,
        deserialize_with = "string_or_number",
        skip_serializing_if = "Option::is_none"
    )]
    pub corrupt: Option<String>,
    /// How much each corrupt draw leans on the one before.
    #[serde(
        default,
        deserialize_with = "string_or_number",
        skip_serializing_if = "Option::is_none"
    )]
    pub corrupt_correlation: Option<String>,
    /// netem's `slot`, in its words: `"800us 1ms packets 10 bytes 64K"` (a slot opens every
    /// 0.8 to 1 ms and lets out at most 10 packets and 64,000 bytes) or `"distribution normal 10ms
    /// 2ms"`; packets leave the delay line only in slots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<String>,
    /// A Mahimahi trace for both directions: a file of delivery opportunities, one per
    /// line (a time in ms; each lets 1504 bytes leave), looped. In place of a rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<std::path::PathBuf>,
    /// A Mahimahi trace a → b (as `mm-link`'s uplink trace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_up: Option<std::path::PathBuf>,
    /// A Mahimahi trace b → a (as `mm-link`'s downlink trace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_down: Option<std::path::PathBuf>,
}

/// Parses a probability: `0.05` or `5%`.
///
/// # Errors
///
/// Text that is not a number from 0 to 1 (or 0% to 100%).
pub fn parse_probability(s: &str) -> Result<f64, PropsError> {
    let t = s.trim();
    let (num, scale) = match t.strip_suffix('%') {
        Some(n) => (n, 100.0),
        None => (t, 1.0),
    };
    let p = num
        .trim()
        .parse::<f64>()
        .map_err(|_| PropsError::InvalidProbability(t.to_owned()))?
        / scale;
    if !(0.0..=1.0).contains(&p) {
        return Err(PropsError::ProbabilityRange(t.to_owned()));
    }
    Ok(p)
}

fn rate(key: &'static str, s: Option<&String>) -> Result<u64, PropsError> {
    match s {
        None => Ok(0),
        Some(s) => match parse_rate(s)? {
            // 0 is no limit, as leaving it out.
            Rate::BitsPerSecond(0) => Ok(0),
            Rate::BitsPerSecond(b) if RATE_BPS.contains(&b) => Ok(b),
            Rate::BitsPerSecond(_) => Err(PropsError::OutOfRange {
                key,
                value: s.clone(),
                why: "a link's rate is 1k to 1T bit/s (leave it out for no limit)",
            }),
            Rate::PacketsPerSecond(_) => Err(PropsError::RateNotBits(s.clone())),
        },
    }
}

/// A non-zero number without a unit (`10`, `2.5`): seconds to wirebench, µs to tc.
fn bare_number(t: &str) -> bool {
    !t.is_empty()
        && t.chars().all(|c| c.is_ascii_digit() || c == '.')
        && t.chars().any(|c| c != '0' && c != '.')
}

fn ns(key: &'static str, s: Option<&String>) -> Result<u64, PropsError> {
    let Some(s) = s else { return Ok(0) };
    let t = s.trim();
    if bare_number(t) {
        return Err(PropsError::BareDuration {
            key,
            value: t.to_owned(),
        });
    }
    let d = parse_duration(s)?;
    if d > MAX_DELAY {
        return Err(PropsError::OutOfRange {
            key,
            value: s.clone(),
            why: "at most 60s",
        });
    }
    Ok(d.as_nanos() as u64)
}

/// Refuses `value` of `key` past `max`.
fn at_most<T: PartialOrd + ToString>(
    key: &'static str,
    value: Option<T>,
    max: T,
    why: &'static str,
) -> Result<(), PropsError> {
    match value {
        Some(v) if v > max => Err(PropsError::OutOfRange {
            key,
            value: v.to_string(),
            why,
        }),
        _ => Ok(()),
    }
}

impl LinkProps {
    /// Fills the fields this one leaves unset from `base`.
    pub fn or(&self, base: &LinkProps) -> LinkProps {
        macro_rules! pick {
            ($($f:ident),*) => { LinkProps { $($f: self.$f.clone().or_else(|| base.$f.clone()),)* } };
        }
        pick!(
            rate,
            rate_up,
            rate_down,
            delay,
            jitter,
            loss,
            loss_up,
            loss_down,
            loss_burst,
            loss_sizes,
            queue,
            queue_bytes,
            overhead,
            seed,
            aqm,
            ecn,
            distribution,
            delay_correlation,
            reorder,
            reorder_correlation,
            reorder_gap,
            duplicate,
            duplicate_correlation,
            corrupt,
            corrupt_correlation,
            slot,
            trace,
            trace_up,
            trace_down
        )
    }

    /// The queue discipline, both directions: `aqm` read, with `ecn` applied; None for the
    /// link's plain drop-tail queue.
    ///
    /// # Errors
    ///
    /// An `aqm` that cannot be read, or `ecn` on without one.
    pub fn aqm(&self) -> Result<Option<AqmConfig>, PropsError> {
        let Some(text) = &self.aqm else {
            return match self.ecn {
                Some(true) => Err(PropsError::EcnWithoutAqm),
                _ => Ok(None),
            };
        };
        let mut cfg = AqmConfig::parse(text)?;
        cfg.ecn = self.ecn.unwrap_or(cfg.ecn);
        Ok(Some(cfg))
    }

    /// The model's configuration for a → b ("up") and b → a ("down"). The two directions
    /// draw from different seeds derived from `seed`.
    ///
    /// # Errors
    ///
    /// A one-line message naming the bad value.
    pub fn configs(&self) -> Result<(LinkConfig, LinkConfig), PropsError> {
        let aqm = self.aqm()?;
        let both = rate("rate", self.rate.as_ref())?;
        let up_rate = self
            .rate_up
            .as_ref()
            .map_or(Ok(both), |r| rate("rate-up", Some(r)))?;
        let down_rate = self
            .rate_down
            .as_ref()
            .map_or(Ok(both), |r| rate("rate-down", Some(r)))?;
        at_most(
            "queue",
            self.queue,
            MAX_QUEUE_PACKETS,
            "at most 1000000 packets",
        )?;
        at_most(
            "overhead",
            self.overhead,
            MAX_OVERHEAD_BYTES,
            "at most 65535 bytes",
        )?;
        at_most(
            "loss-burst",
            self.loss_burst,
            MAX_LOSS_BURST,
            "at most 1000000 packets",
        )?;
        let loss = |dir: &Option<String>| -> Result<f64, PropsError> {
            match dir.as_ref().or(self.loss.as_ref()) {
                None => Ok(0.0),
                Some(s) => parse_probability(s),
            }
        };
        let burst = self.loss_burst.unwrap_or(1.0);
        if !(burst.is_finite() && burst >= 1.0) {
            return Err(PropsError::BurstTooShort(burst));
        }
        let model = |p: f64| -> Result<Loss, PropsError> {
            if p == 0.0 {
                Ok(Loss::None)
            } else if burst == 1.0 {
                Ok(Loss::Bernoulli { p })
            } else {
                // Lose every packet in the bad state and none in the good; stay bad for
                // `burst` packets on average, and be bad a fraction p of the time.
                if p >= 1.0 {
                    return Err(PropsError::BurstOfTotalLoss);
                }
                let p_bg = 1.0 / burst;
                Ok(Loss::GilbertElliott {
                    p_gb: (p * p_bg / (1.0 - p)).min(1.0),
                    p_bg,
                    loss_good: 0.0,
                    loss_bad: 1.0,
                })
            }
        };
        let (queue_packets, queue_bytes) = self.queue_limits(aqm.as_ref())?;
        // netem's options are checked with the rest, so every caller refuses them alike.
        let (netem_up, netem_down) = self.netem()?;
        let slot = self.slot()?;
        let seed = self.seed.unwrap_or(1);
        let (up_overhead, down_overhead) = self.trace_overheads()?;
        let (up_trace, down_trace) = self.traces()?;
        let base = LinkConfig {
            rate_bps: 0,
            overhead_bytes: self.overhead.unwrap_or(0),
            delay_ns: ns("delay", self.delay.as_ref())?,
            // With a distribution, jitter is netem's (its config's), not the link's 0 to J.
            jitter_ns: if self.distribution.is_some() {
                0
            } else {
                ns("jitter", self.jitter.as_ref())?
            },
            queue_packets,
            queue_bytes,
            loss: Loss::None,
            loss_sizes: self
                .loss_sizes
                .as_deref()
                .map(parse_loss_sizes)
                .transpose()?,
            seed: 0,
            aqm,
            netem: NetemConfig::default(),
            slot,
            trace: None,
        };
        let up = LinkConfig {
            rate_bps: up_rate,
            overhead_bytes: up_overhead,
            loss: model(loss(&self.loss_up)?)?,
            seed: seed.wrapping_mul(2),
            netem: netem_up,
            trace: up_trace,
            ..base.clone()
        };
        let down = LinkConfig {
            rate_bps: down_rate,
            overhead_bytes: down_overhead,
            loss: model(loss(&self.loss_down)?)?,
            seed: seed.wrapping_mul(2).wrapping_add(1),
            netem: netem_down,
            trace: down_trace,
            ..base
        };
        Ok((up, down))
    }

    /// The queue's limits in packets and bytes (0: no limit by that measure): `queue` and
    /// `queue-bytes`, or a drop-tail discipline's own (tc's `pfifo limit N`, `bfifo limit
    /// B`), since drop-tail runs on the link's own path, which reads only these.
    fn queue_limits(&self, aqm: Option<&AqmConfig>) -> Result<(u32, u64), PropsError> {
        let queue_bytes = match &self.queue_bytes {
            None => 0,
            Some(s) => parse_size(s)?,
        };
        if queue_bytes > MAX_QUEUE_BYTES {
            return Err(PropsError::OutOfRange {
                key: "queue-bytes",
                value: self.queue_bytes.clone().unwrap_or_default(),
                why: "at most 1Gi (1073741824 bytes)",
            });
        }
        let mut queue_packets = self.queue.unwrap_or(DEFAULT_QUEUE_PACKETS);
        let mut queue_bytes = queue_bytes;
        if let Some(a) = aqm.filter(|a| a.kind == crate::aqm::AqmKind::DropTail) {
            // A limit in bytes alone (`bfifo limit B`, Mahimahi's `bytes=B`) has no cap in
            // packets, as there, unless --queue gives one.
            let bytes_only = a.limit.is_none() && a.limit_bytes.is_some() && self.queue.is_none();
            queue_packets = a
                .limit
                .unwrap_or(if bytes_only { 0 } else { queue_packets });
            queue_bytes = a.limit_bytes.unwrap_or(queue_bytes);
        }
        Ok((queue_packets, queue_bytes))
    }

    /// netem's options for a → b ("up") and b → a ("down"): the same both ways (each
    /// direction's [`crate::netem::Netem`] draws from its link's seed).
    ///
    /// # Errors
    ///
    /// A one-line message naming the bad value, or the option another needs: a
    /// distribution without jitter, delay correlation without a distribution, reordering
    /// without delay, a gap without reordering.
    pub fn netem(&self) -> Result<(NetemConfig, NetemConfig), PropsError> {
        let p = |s: &Option<String>| s.as_deref().map_or(Ok(0.0), parse_probability);
        let jitter_ns = ns("jitter", self.jitter.as_ref())?;
        let distribution = match &self.distribution {
            None => None,
            Some(s) => Some(
                Distribution::parse(s).ok_or_else(|| PropsError::UnknownDistribution(s.clone()))?,
            ),
        };
        if distribution.is_some() && jitter_ns == 0 {
            return Err(PropsError::Needs {
                key: "distribution",
                needs: "a jitter to shape (e.g. --jitter 5ms)",
            });
        }
        if distribution.is_none() && self.delay_correlation.is_some() {
            return Err(PropsError::Needs {
                key: "delay-correlation",
                needs: "a distribution (e.g. --distribution uniform, netem's default): \
                        without one, jitter is 0 to J and uncorrelated",
            });
        }
        let reorder = p(&self.reorder)?;
        if reorder > 0.0 && ns("delay", self.delay.as_ref())? == 0 {
            return Err(PropsError::Needs {
                key: "reorder",
                needs: "a delay for reordered packets to overtake (e.g. --delay 10ms)",
            });
        }
        if self.reorder_gap.is_some() && reorder == 0.0 {
            return Err(PropsError::Needs {
                key: "reorder-gap",
                needs: "reorder (e.g. --reorder 100% --reorder-gap 5: every 5th packet)",
            });
        }
        at_most(
            "reorder-gap",
            self.reorder_gap,
            MAX_REORDER_GAP,
            "at most 1000000 packets",
        )?;
        let cfg = NetemConfig {
            jitter_ns: if distribution.is_some() { jitter_ns } else { 0 },
            distribution: distribution.unwrap_or_default(),
            delay_correlation: p(&self.delay_correlation)?,
            reorder,
            reorder_correlation: p(&self.reorder_correlation)?,
            reorder_gap: self.reorder_gap.unwrap_or(1),
            duplicate: p(&self.duplicate)?,
            duplicate_correlation: p(&self.duplicate_correlation)?,
            corrupt: p(&self.corrupt)?,
            corrupt_correlation: p(&self.corrupt_correlation)?,
        };
        Ok((cfg, cfg))
    }

    /// netem's `slot`, the same both ways; `None` without one.
    ///
    /// # Errors
    ///
    /// Text that is not netem's `slot` syntax, or a value past its bound, named.
    pub fn slot(&self) -> Result<Option<SlotConfig>, PropsError> {
        self.slot.as_deref().map(parse_slot).transpose()
    }
}

/// Parses netem's `slot` words: `MIN [MAX] [packets N] [bytes B]` or `distribution NAME
/// DELAY JITTER [packets N] [bytes B]`.
fn parse_slot(text: &str) -> Result<SlotConfig, PropsError> {
    let bad = |why: &'static str| PropsError::OutOfRange {
        key: "slot",
        value: text.to_owned(),
        why,
    };
    const SYNTAX: &str = "as netem's slot: \"800us 1ms packets 10 bytes 64K\" or \
                          \"distribution normal 10ms 2ms\"";
    let duration = |w: Option<&str>| -> Result<u64, PropsError> {
        let w = w.ok_or_else(|| bad(SYNTAX))?;
        if bare_number(w) {
            return Err(bad(
                "a slot's times need a unit (e.g. 800us): tc reads a bare number as µs",
            ));
        }
        let d = parse_duration(w).map_err(|_| bad(SYNTAX))?;
        if d > MAX_DELAY {
            return Err(bad("a slot's times are at most 60s"));
        }
        Ok(d.as_nanos() as u64)
    };
    let mut words = text.split_whitespace().peekable();
    let gap = if words.peek() == Some(&"distribution") {
        words.next();
        let name = words.next().ok_or_else(|| bad(SYNTAX))?;
        let distribution = Distribution::parse(name).ok_or(bad(
            "its distribution is uniform, normal, pareto or paretonormal",
        ))?;
        SlotGap::Table {
            distribution,
            delay_ns: duration(words.next())?,
            jitter_ns: duration(words.next())?,
        }
    } else {
        let min_ns = duration(words.next())?;
        let max_ns = match words.peek() {
            Some(&w) if w != "packets" && w != "bytes" => duration(words.next())?,
            _ => min_ns,
        };
        if max_ns < min_ns {
            return Err(bad("its longest gap is shorter than its shortest"));
        }
        SlotGap::Uniform { min_ns, max_ns }
    };
    let (mut max_packets, mut max_bytes) = (0, 0);
    while let Some(key) = words.next() {
        let value = words.next().ok_or_else(|| bad(SYNTAX))?;
        match key {
            "packets" => {
                max_packets = value
                    .parse::<u32>()
                    .ok()
                    .filter(|&n| n <= MAX_QUEUE_PACKETS)
                    .ok_or(bad("packets is 0 (no limit) to 1000000"))?;
            }
            "bytes" => {
                max_bytes = parse_size(value)
                    .ok()
                    .filter(|&b| b <= MAX_QUEUE_BYTES)
                    .ok_or(bad("bytes is 0 (no limit) to 1Gi"))?;
            }
            _ => return Err(bad(SYNTAX)),
        }
    }
    Ok(SlotConfig {
        gap,
        max_packets,
        max_bytes,
    })
}

/// Trace-driven directions: which file each reads, their checks and their loading.
impl LinkProps {
    /// The trace file of a → b and of b → a, if any, each with its key.
    fn trace_paths(&self) -> [Option<(&'static str, &std::path::Path)>; 2] {
        let both = self.trace.as_deref().map(|p| ("trace", p));
        [
            self.trace_up.as_deref().map(|p| ("trace-up", p)).or(both),
            self.trace_down
                .as_deref()
                .map(|p| ("trace-down", p))
                .or(both),
        ]
    }

    /// The overhead of a → b and of b → a: `overhead` if given, else the 4-byte TUN header
    /// Mahimahi counts in each packet on a direction with a trace (so that a 1500-byte IP
    /// packet fills one 1504-byte opportunity, as under `mm-link`), else 0. Refuses a trace
    /// and a rate on the same direction.
    fn trace_overheads(&self) -> Result<(u32, u32), PropsError> {
        let [up, down] = self.trace_paths();
        let rates = [
            self.rate_up.as_ref().map(|_| "rate-up"),
            self.rate_down.as_ref().map(|_| "rate-down"),
        ];
        let mut overheads = [0u32; 2];
        for (i, (trace, direction)) in [(up, "up"), (down, "down")].into_iter().enumerate() {
            let Some((trace, _)) = trace else {
                overheads[i] = self.overhead.unwrap_or(0);
                continue;
            };
            if let Some(rate) = rates[i].or(self.rate.as_ref().map(|_| "rate")) {
                return Err(PropsError::TraceAndRate {
                    trace,
                    rate,
                    direction,
                });
            }
            overheads[i] = self.overhead.unwrap_or(TUN_HEADER_BYTES);
        }
        Ok((overheads[0], overheads[1]))
    }

    /// Loads the traces of a → b ("up") and b → a ("down"); `None` for a direction without
    /// one. A file both directions name is read once.
    ///
    /// # Errors
    ///
    /// A file that is missing or malformed (one line naming it and the line), or a trace and
    /// a rate on the same direction.
    pub fn traces(&self) -> Result<(Option<Trace>, Option<Trace>), PropsError> {
        self.trace_overheads()?;
        let load = |(key, path): (&'static str, &std::path::Path)| {
            Trace::load(path).map_err(|e| PropsError::Trace {
                key,
                message: e.to_string(),
            })
        };
        let [up, down] = self.trace_paths();
        let up_trace = up.map(load).transpose()?;
        let down_trace = match (up, down, &up_trace) {
            (Some((_, a)), Some((_, b)), Some(t)) if a == b => Some(t.clone()),
            _ => down.map(load).transpose()?,
        };
        Ok((up_trace, down_trace))
    }

    /// Makes the trace paths relative to `dir` (a scenario file's directory), as a scenario
    /// means them; absolute ones are kept.
    pub fn resolve_traces(&mut self, dir: &std::path::Path) {
        for p in [&mut self.trace, &mut self.trace_up, &mut self.trace_down]
            .into_iter()
            .flatten()
        {
            if p.is_relative() {
                *p = dir.join(&*p);
            }
        }
    }
}

/// `MIN-MAX`: IP lengths, bytes, MIN at most MAX.
fn parse_loss_sizes(text: &str) -> Result<(u64, u64), PropsError> {
    let bad = || PropsError::LossSizes(text.to_owned());
    let (min, max) = text.split_once('-').ok_or_else(bad)?;
    let n = |v: &str| {
        v.trim()
            .parse::<u64>()
            .ok()
            .filter(|n| (20..=65_535).contains(n))
    };
    match (n(min), n(max)) {
        (Some(min), Some(max)) if min <= max => Ok((min, max)),
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aqm::AqmKind;

    #[test]
    fn text_becomes_both_directions() {
        let p = LinkProps {
            rate: Some("2M".into()),
            delay: Some("50ms".into()),
            loss: Some("5%".into()),
            loss_down: Some("0".into()),
            queue: Some(8),
            ..LinkProps::default()
        };
        let (up, down) = p.configs().unwrap();
        assert_eq!(up.rate_bps, 2_000_000);
        assert_eq!(up.delay_ns, 50_000_000);
        assert_eq!(up.queue_packets, 8);
        assert_eq!(up.loss, Loss::Bernoulli { p: 0.05 });
        assert_eq!(down.loss, Loss::None);
        assert_ne!(up.seed, down.seed);
    }

    #[test]
    fn the_bounds_themselves_are_accepted() {
        let p = LinkProps {
            rate: Some("1k".into()),
            rate_up: Some("1T".into()),
            delay: Some("60s".into()),
            jitter: Some("60s".into()),
            queue: Some(MAX_QUEUE_PACKETS),
            queue_bytes: Some("1Gi".into()),
            overhead: Some(MAX_OVERHEAD_BYTES),
            loss_burst: Some(MAX_LOSS_BURST),
            loss: Some("0.5".into()),
            ..LinkProps::default()
        };
        let (up, down) = p.configs().unwrap();
        assert_eq!((up.rate_bps, down.rate_bps), (1_000_000_000_000, 1_000));
        assert_eq!(up.delay_ns, 60_000_000_000);
    }

    #[test]
    fn loss_reads_as_a_bare_number_or_text() {
        // docs/lab.md writes `loss = 0.05`; TOML gives a float, or an integer for `loss = 0`.
        for (toml_text, want) in [
            ("loss = 0.05", "0.05"),
            ("loss = \"5%\"", "5%"),
            ("loss-up = 0", "0"),
            ("loss-down = 1", "1"),
        ] {
            let p: LinkProps = toml::from_str(toml_text).unwrap();
            let got = p.loss.or(p.loss_up).or(p.loss_down).unwrap();
            assert_eq!(got, want, "{toml_text}");
        }
        let p: LinkProps = toml::from_str("loss = 0.05").unwrap();
        assert_eq!(p.configs().unwrap().0.loss, Loss::Bernoulli { p: 0.05 });
        // Written back as the text it always was.
        assert_eq!(serde_json::to_value(&p).unwrap()["loss"], "0.05");
        assert!(toml::from_str::<LinkProps>("loss = true").is_err());
    }

    #[test]
    fn bursts_keep_the_mean_loss() {
        let p = LinkProps {
            loss: Some("0.1".into()),
            loss_burst: Some(4.0),
            ..LinkProps::default()
        };
        let (up, _) = p.configs().unwrap();
        let Loss::GilbertElliott { p_gb, p_bg, .. } = up.loss else {
            panic!("{:?}", up.loss)
        };
        assert!((p_gb / (p_gb + p_bg) - 0.1).abs() < 1e-12);
        assert!((1.0 / p_bg - 4.0).abs() < 1e-12);
    }

    #[test]
    fn aqm_and_ecn_read_from_flags_and_scenarios() {
        let p: LinkProps = toml::from_str("aqm = \"fq_codel target 2ms\"\necn = true").unwrap();
        let cfg = p.aqm().unwrap().unwrap();
        assert_eq!(
            (cfg.kind, cfg.target_ns, cfg.ecn),
            (AqmKind::FqCodel, 2_000_000, true)
        );
        // `ecn = false` wins over the keyword; no `ecn` keeps it.
        let off = LinkProps {
            ecn: Some(false),
            ..LinkProps::default()
        };
        let p = LinkProps {
            aqm: Some("codel ecn".into()),
            ..LinkProps::default()
        };
        assert!(p.aqm().unwrap().unwrap().ecn);
        assert!(!off.or(&p).aqm().unwrap().unwrap().ecn);
        assert_eq!(LinkProps::default().aqm(), Ok(None));
        // A FIFO takes it, and marks nothing.
        let fifo = LinkProps {
            aqm: Some("droptail".into()),
            ecn: Some(true),
            ..LinkProps::default()
        };
        assert!(fifo.aqm().unwrap().unwrap().ecn);
        // Written back as given.
        assert_eq!(serde_json::to_value(&p).unwrap()["aqm"], "codel ecn");
        // An AQM's own limits are bounded as the link's queue is.
        assert_eq!(crate::aqm::MAX_QUEUE_PACKETS, MAX_QUEUE_PACKETS);
        assert_eq!(crate::aqm::MAX_QUEUE_BYTES, MAX_QUEUE_BYTES);
    }

    #[test]
    fn a_delay_without_a_unit_is_refused() {
        let link = |delay: &str, jitter: Option<&str>| LinkProps {
            delay: Some(delay.into()),
            jitter: jitter.map(Into::into),
            ..LinkProps::default()
        };
        for (p, key) in [
            (link("10", None), "delay"),
            (link("2.5", None), "delay"),
            (link("10ms", Some("5")), "jitter"),
        ] {
            let e = p.configs().expect_err("a bare number").to_string();
            assert!(e.starts_with(key) && e.contains("needs a unit"), "{e}");
        }
        for ok in [
            link("0", None),
            link("10ms", Some("1ms")),
            link("0.5s", Some("0")),
        ] {
            assert!(ok.configs().is_ok(), "{ok:?}");
        }
        let slot = |spec: &str| LinkProps {
            slot: Some(spec.into()),
            ..LinkProps::default()
        };
        let e = slot("1 2").configs().expect_err("bare").to_string();
        assert!(e.contains("need a unit"), "{e}");
        assert!(slot("800us 1ms").configs().is_ok());
    }

    #[test]
    fn a_drop_tail_disciplines_limits_are_the_links_queue() {
        // Drop-tail runs on the link's own path, which reads only the link's queue: tc's
        // and Mahimahi's ways of sizing a FIFO must land there.
        let queue = |aqm: &str, queue: Option<u32>| {
            let p = LinkProps {
                aqm: Some(aqm.into()),
                queue,
                ..LinkProps::default()
            };
            let (up, down) = p.configs().unwrap();
            assert_eq!(
                (up.queue_packets, up.queue_bytes),
                (down.queue_packets, down.queue_bytes)
            );
            (up.queue_packets, up.queue_bytes)
        };
        assert_eq!(queue("droptail limit 20", None), (20, 0));
        assert_eq!(queue("pfifo limit 5000", Some(10)), (5000, 0));
        assert_eq!(
            queue("bfifo limit 30000", None),
            (0, 30000),
            "bytes alone, as tc's"
        );
        assert_eq!(queue("droptail limit_bytes 30000", None), (0, 30000));
        assert_eq!(
            queue("droptail bytes=30000", None),
            (0, 30000),
            "as Mahimahi's"
        );
        assert_eq!(
            queue("bfifo limit 30000", Some(50)),
            (50, 30000),
            "and --queue"
        );
        assert_eq!(queue("droptail packets=20", None), (20, 0));
        assert_eq!(queue("droptail", Some(7)), (7, 0), "no limit of its own");
        // Other disciplines keep their limits to themselves.
        assert_eq!(queue("codel limit 20", None), (1000, 0));
    }

    #[test]
    fn traces_load_per_direction_and_count_the_tun_header() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/traces");
        let p = LinkProps {
            trace: Some(dir.join("const-12mbit")),
            trace_down: Some(dir.join("alternating-48-6")),
            rate_up: None,
            ..LinkProps::default()
        };
        let (up, down) = p.traces().expect("both load");
        assert_eq!(up.map(|t| t.period_ms()), Some(1));
        assert_eq!(down.map(|t| t.period_ms()), Some(2000));
        // Mahimahi counts 4 bytes beyond the IP packet: the trace's directions do too,
        // unless overhead is given.
        let (up, down) = p.configs().expect("configs");
        assert_eq!((up.overhead_bytes, down.overhead_bytes), (4, 4));
        assert_eq!((up.rate_bps, down.rate_bps), (0, 0));
        let given = LinkProps {
            overhead: Some(0),
            ..p.clone()
        };
        assert_eq!(given.configs().expect("configs").0.overhead_bytes, 0);
        // A trace one way, a rate the other.
        let mixed = LinkProps {
            trace_up: Some(dir.join("const-12mbit")),
            rate_down: Some("10M".into()),
            ..LinkProps::default()
        };
        let (up, down) = mixed.configs().expect("configs");
        assert_eq!((up.overhead_bytes, down.overhead_bytes), (4, 0));
        assert_eq!(down.rate_bps, 10_000_000);
        let (up, down) = mixed.traces().expect("loads");
        assert!(up.is_some() && down.is_none());
        // No trace: nothing read.
        assert_eq!(LinkProps::default().traces().expect("none"), (None, None));
        // Flags on top of a scenario's link: the trace keys are merged as the others.
        let merged = LinkProps::default().or(&mixed);
        assert_eq!(merged.trace_up, mixed.trace_up);
    }

    /// Issue 45: `lab up` passes its link to the holder process as JSON, where the trace
    /// was skipped (a testbed without its rate limit). Every option, set at once, comes
    /// back as it went: the holder builds the link `lab -- run` builds.
    #[test]
    fn every_link_option_crosses_to_a_testbed_holder_unchanged() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/traces");
        let p = LinkProps {
            trace_up: Some(dir.join("const-12mbit")),
            trace_down: Some(dir.join("alternating-48-6")),
            delay: Some("5ms".into()),
            jitter: Some("1ms".into()),
            distribution: Some("pareto".into()),
            delay_correlation: Some("10%".into()),
            loss: Some("1%".into()),
            loss_down: Some("2%".into()),
            loss_burst: Some(3.0),
            queue_bytes: Some("64K".into()),
            overhead: Some(24),
            seed: Some(11),
            aqm: Some("fq_codel target 5ms".into()),
            ecn: Some(true),
            reorder: Some("5%".into()),
            reorder_correlation: Some("25%".into()),
            reorder_gap: Some(3),
            duplicate: Some("1%".into()),
            corrupt: Some("0.5%".into()),
            slot: Some("800us 1ms packets 10".into()),
            ..LinkProps::default()
        };
        let (up, down) = p.configs().expect("a link");
        assert!(up.trace.is_some() && down.trace.is_some());
        let topo = crate::topo::Topology::pair(up, down);
        let json = serde_json::to_string(&topo).expect("serializes");
        let back: crate::topo::Topology = serde_json::from_str(&json).expect("reads back");
        assert_eq!(back, topo);
        // Shared with the first reading, not read again.
        let (a, b) = (&topo.links[0].up.trace, &back.links[0].up.trace);
        assert_eq!(
            a.as_ref().map(|t| t.heap_bytes()),
            b.as_ref().map(|t| t.heap_bytes())
        );
        // And the rates the other options leave: a rate crosses as a rate.
        let rated = LinkProps {
            rate_up: Some("2M".into()),
            rate_down: Some("10M".into()),
            ..LinkProps::default()
        };
        let (up, down) = rated.configs().expect("a link");
        let topo = crate::topo::Topology::pair(up, down);
        let back: crate::topo::Topology =
            serde_json::from_str(&serde_json::to_string(&topo).expect("json")).expect("back");
        assert_eq!(back, topo);
    }

    #[test]
    fn trace_mistakes_name_the_file_and_line() {
        let dir = std::env::temp_dir().join(format!("wirebench-props-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let bad = dir.join("bad.down");
        std::fs::write(&bad, "1\n2\n1\n").expect("write");
        for (p, needle) in [
            (
                LinkProps {
                    trace_down: Some(bad.clone()),
                    ..LinkProps::default()
                },
                "trace-down: ",
            ),
            (
                LinkProps {
                    trace: Some(dir.join("missing")),
                    ..LinkProps::default()
                },
                "trace: ",
            ),
        ] {
            let e = p.traces().expect_err("refused").to_string();
            assert!(e.starts_with(needle), "{e}");
            assert!(!e.contains('\n'), "{e}");
        }
        let e = LinkProps {
            trace_down: Some(bad.clone()),
            ..LinkProps::default()
        }
        .traces()
        .expect_err("bad")
        .to_string();
        assert!(e.contains("bad.down: line 3: 1 ms is before"), "{e}");
        for (p, needle) in [
            (
                LinkProps {
                    rate: Some("10M".into()),
                    trace_down: Some(bad.clone()),
                    ..LinkProps::default()
                },
                "trace-down and rate both set how fast down goes",
            ),
            (
                LinkProps {
                    rate_up: Some("10M".into()),
                    trace: Some(bad.clone()),
                    ..LinkProps::default()
                },
                "trace and rate-up both set how fast up goes",
            ),
        ] {
            let e = p.configs().expect_err("refused").to_string();
            assert!(e.contains(needle), "{e}");
            assert_eq!(p.traces().expect_err("refused").to_string(), e);
        }
        std::fs::remove_dir_all(&dir).expect("clean up");
    }

    #[test]
    fn bad_values_are_named() {
        for (p, needle) in [
            (
                LinkProps {
                    loss: Some("1.5".into()),
                    ..LinkProps::default()
                },
                "between 0 and 1",
            ),
            (
                LinkProps {
                    rate: Some("10kpps".into()),
                    ..LinkProps::default()
                },
                "bits/s",
            ),
            (
                LinkProps {
                    delay: Some("soon".into()),
                    ..LinkProps::default()
                },
                "soon",
            ),
            (
                LinkProps {
                    loss_burst: Some(0.5),
                    ..LinkProps::default()
                },
                "at least 1",
            ),
            // Regression: a delay past every timeout held the lab until it was due.
            (
                LinkProps {
                    delay: Some("1000000000s".into()),
                    ..LinkProps::default()
                },
                "delay \"1000000000s\": at most 60s",
            ),
            (
                LinkProps {
                    jitter: Some("2m".into()),
                    ..LinkProps::default()
                },
                "jitter \"2m\": at most 60s",
            ),
            (
                LinkProps {
                    rate_down: Some("10".into()),
                    ..LinkProps::default()
                },
                "rate-down \"10\": a link's rate is 1k to 1T bit/s",
            ),
            (
                LinkProps {
                    queue: Some(4_000_000_000),
                    ..LinkProps::default()
                },
                "queue \"4000000000\": at most 1000000 packets",
            ),
            (
                LinkProps {
                    queue_bytes: Some("2G".into()),
                    ..LinkProps::default()
                },
                "queue-bytes \"2G\": at most 1Gi",
            ),
            (
                LinkProps {
                    overhead: Some(70_000),
                    ..LinkProps::default()
                },
                "overhead \"70000\": at most 65535 bytes",
            ),
            (
                LinkProps {
                    loss_burst: Some(1e7),
                    ..LinkProps::default()
                },
                "loss-burst \"10000000\": at most 1000000 packets",
            ),
            (
                LinkProps {
                    aqm: Some("fq_codel flows 0".into()),
                    ..LinkProps::default()
                },
                "aqm: flows \"0\": must be 1 to 65536",
            ),
            (
                LinkProps {
                    aqm: Some("red".into()),
                    ..LinkProps::default()
                },
                "aqm: unknown queue discipline \"red\"",
            ),
            (
                LinkProps {
                    ecn: Some(true),
                    ..LinkProps::default()
                },
                "--ecn marks packets only under an AQM",
            ),
        ] {
            let e = p.configs().unwrap_err().to_string();
            assert!(e.contains(needle), "{e}");
        }
    }

    #[test]
    fn netems_options_become_both_directions() {
        let p: LinkProps = toml::from_str(
            r#"
            delay = "10ms"
            jitter = "5ms"
            distribution = "Normal"
            delay-correlation = "25%"
            reorder = "25%"
            reorder-correlation = 0.5
            reorder-gap = 5
            duplicate = 0.01
            corrupt = "0.1%"
            "#,
        )
        .unwrap();
        let (up, down) = p.netem().unwrap();
        assert_eq!(up, down);
        assert_eq!(up.jitter_ns, 5_000_000);
        assert_eq!(up.distribution, Distribution::Normal);
        assert_eq!(up.delay_correlation, 0.25);
        assert_eq!(
            (up.reorder, up.reorder_correlation, up.reorder_gap),
            (0.25, 0.5, 5)
        );
        assert_eq!(up.duplicate, 0.01);
        assert!((up.corrupt - 0.001).abs() < 1e-15);
        // The jitter is netem's now: the link adds none of its own.
        assert_eq!(p.configs().unwrap().0.jitter_ns, 0);
        // Without a distribution, jitter stays the link's 0 to J, and netem has none.
        let plain = LinkProps {
            jitter: Some("5ms".into()),
            ..LinkProps::default()
        };
        assert_eq!(plain.configs().unwrap().0.jitter_ns, 5_000_000);
        let (n, _) = plain.netem().unwrap();
        assert_eq!(
            n,
            NetemConfig {
                reorder_gap: 1,
                ..NetemConfig::default()
            }
        );
        assert!(!n.is_active());
        // A scenario's base fills what a link leaves out.
        let link = LinkProps {
            duplicate: Some("5%".into()),
            ..LinkProps::default()
        };
        let merged = link.or(&p);
        assert_eq!(merged.netem().unwrap().0.duplicate, 0.05);
        assert_eq!(merged.netem().unwrap().0.reorder_gap, 5);
    }

    #[test]
    fn netems_options_that_cannot_work_are_refused() {
        let base = LinkProps {
            delay: Some("10ms".into()),
            jitter: Some("5ms".into()),
            ..LinkProps::default()
        };
        for (p, needle) in [
            (
                LinkProps {
                    distribution: Some("gamma".into()),
                    ..base.clone()
                },
                "unknown distribution \"gamma\": uniform, normal, pareto or paretonormal",
            ),
            (
                LinkProps {
                    distribution: Some("normal".into()),
                    jitter: None,
                    ..base.clone()
                },
                "distribution needs a jitter",
            ),
            (
                LinkProps {
                    delay_correlation: Some("25%".into()),
                    ..base.clone()
                },
                "delay-correlation needs a distribution",
            ),
            (
                LinkProps {
                    reorder: Some("25%".into()),
                    delay: None,
                    ..base.clone()
                },
                "reorder needs a delay",
            ),
            (
                LinkProps {
                    reorder_gap: Some(5),
                    ..base.clone()
                },
                "reorder-gap needs reorder",
            ),
            (
                LinkProps {
                    reorder: Some("1".into()),
                    reorder_gap: Some(2_000_000),
                    ..base.clone()
                },
                "reorder-gap \"2000000\": at most 1000000 packets",
            ),
            (
                LinkProps {
                    duplicate: Some("150%".into()),
                    ..base.clone()
                },
                "not between 0 and 1",
            ),
            (
                LinkProps {
                    corrupt_correlation: Some("often".into()),
                    ..base.clone()
                },
                "invalid probability \"often\"",
            ),
            (
                LinkProps {
                    distribution: Some("pareto".into()),
                    jitter: Some("61s".into()),
                    ..base.clone()
                },
                "jitter \"61s\": at most 60s",
            ),
        ] {
            let e = p.netem().unwrap_err().to_string();
            assert!(e.contains(needle), "{e}");
            assert_eq!(p.configs().unwrap_err().to_string(), e);
        }
    }

    #[test]
    fn slot_reads_netems_words() {
        let slot = |t: &str| {
            LinkProps {
                slot: Some(t.into()),
                ..LinkProps::default()
            }
            .slot()
        };
        assert_eq!(
            slot("800us 1ms packets 10 bytes 64K").unwrap(),
            Some(SlotConfig {
                gap: SlotGap::Uniform {
                    min_ns: 800_000,
                    max_ns: 1_000_000
                },
                max_packets: 10,
                // wirebench's units: K is 1000 (Ki is 1024).
                max_bytes: 64_000,
            })
        );
        assert_eq!(
            slot("2ms").unwrap().unwrap().gap,
            SlotGap::Uniform {
                min_ns: 2_000_000,
                max_ns: 2_000_000
            }
        );
        assert_eq!(slot("2ms bytes 1500").unwrap().unwrap().max_bytes, 1500);
        assert_eq!(
            slot("distribution pareto 10ms 2ms packets 5").unwrap(),
            Some(SlotConfig {
                gap: SlotGap::Table {
                    distribution: Distribution::Pareto,
                    delay_ns: 10_000_000,
                    jitter_ns: 2_000_000
                },
                max_packets: 5,
                max_bytes: 0,
            })
        );
        assert_eq!(LinkProps::default().slot().unwrap(), None);
        for (t, needle) in [
            ("", "as netem's slot"),
            ("soon", "as netem's slot"),
            ("2ms 1ms", "longest gap is shorter"),
            ("61s", "at most 60s"),
            ("1ms packets", "as netem's slot"),
            ("1ms packets -1", "packets is 0"),
            ("1ms packets 2000000", "packets is 0"),
            ("1ms bytes 2G", "bytes is 0"),
            ("1ms frames 3", "as netem's slot"),
            ("distribution gamma 1ms 1ms", "uniform, normal"),
            ("distribution normal 1ms", "as netem's slot"),
        ] {
            let e = slot(t).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("slot {t:?}: ")) && e.contains(needle),
                "{e}"
            );
            let p = LinkProps {
                slot: Some(t.into()),
                ..LinkProps::default()
            };
            assert_eq!(p.configs().unwrap_err().to_string(), e);
        }
    }
}
