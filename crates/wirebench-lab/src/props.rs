//! A link's properties as people write them (`rate = "2M"`, `delay = "50ms"`,
//! `loss = "5%"`), in scenario files and on the command line, turned into the model's
//! [`LinkConfig`] for each direction.

use serde::{Deserialize, Serialize};
use wirebench_proto::units::{parse_duration, parse_rate, parse_size, Rate, UnitError};

use crate::link::{LinkConfig, Loss};

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
    /// A mean loss burst below one packet.
    #[error("loss-burst {0} must be at least 1 packet")]
    BurstTooShort(f64),
    /// Bursts need a good state to come back to.
    #[error("loss of 100% cannot come in bursts")]
    BurstOfTotalLoss,
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
    /// Extra random delay per packet, 0 to this, never reordering; default 0.
    pub jitter: Option<String>,
    /// Random loss, both directions: a probability (`0.05`) or a percentage (`5%`).
    pub loss: Option<String>,
    /// Random loss a → b.
    pub loss_up: Option<String>,
    /// Random loss b → a.
    pub loss_down: Option<String>,
    /// Mean length of a loss burst, packets (Gilbert-Elliott); default 1: independent losses.
    pub loss_burst: Option<f64>,
    /// Queue before the serializer, packets (0: no limit by count); default 1000.
    pub queue: Option<u32>,
    /// Queue limit in bytes (`64K`); default none.
    pub queue_bytes: Option<String>,
    /// Bytes added to each IP packet's length on the wire, for the rate; default 0.
    pub overhead: Option<u32>,
    /// Seed of the link's random numbers; default 1.
    pub seed: Option<u64>,
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

fn rate(s: Option<&String>) -> Result<u64, PropsError> {
    match s {
        None => Ok(0),
        Some(s) => match parse_rate(s)? {
            Rate::BitsPerSecond(b) => Ok(b),
            Rate::PacketsPerSecond(_) => Err(PropsError::RateNotBits(s.clone())),
        },
    }
}

fn ns(s: Option<&String>) -> Result<u64, PropsError> {
    s.map_or(Ok(0), |s| {
        parse_duration(s)
            .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
            .map_err(PropsError::from)
    })
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
            queue,
            queue_bytes,
            overhead,
            seed
        )
    }

    /// The model's configuration for a → b ("up") and b → a ("down"). The two directions
    /// draw from different seeds derived from `seed`.
    ///
    /// # Errors
    ///
    /// A one-line message naming the bad value.
    pub fn configs(&self) -> Result<(LinkConfig, LinkConfig), PropsError> {
        let both = rate(self.rate.as_ref())?;
        let up_rate = self.rate_up.as_ref().map_or(Ok(both), |r| rate(Some(r)))?;
        let down_rate = self
            .rate_down
            .as_ref()
            .map_or(Ok(both), |r| rate(Some(r)))?;
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
        let queue_bytes = match &self.queue_bytes {
            None => 0,
            Some(s) => parse_size(s)?,
        };
        let seed = self.seed.unwrap_or(1);
        let base = LinkConfig {
            rate_bps: 0,
            overhead_bytes: self.overhead.unwrap_or(0),
            delay_ns: ns(self.delay.as_ref())?,
            jitter_ns: ns(self.jitter.as_ref())?,
            queue_packets: self.queue.unwrap_or(DEFAULT_QUEUE_PACKETS),
            queue_bytes,
            loss: Loss::None,
            seed: 0,
        };
        let up = LinkConfig {
            rate_bps: up_rate,
            loss: model(loss(&self.loss_up)?)?,
            seed: seed.wrapping_mul(2),
            ..base
        };
        let down = LinkConfig {
            rate_bps: down_rate,
            loss: model(loss(&self.loss_down)?)?,
            seed: seed.wrapping_mul(2).wrapping_add(1),
            ..base
        };
        Ok((up, down))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        ] {
            let e = p.configs().unwrap_err().to_string();
            assert!(e.contains(needle), "{e}");
        }
    }
}
