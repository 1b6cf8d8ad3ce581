//! RFC 3550 interarrival jitter.

/// Interarrival jitter estimator of RFC 3550 (RTP), section 6.4.1, with the
/// reference computation of appendix A.8.
///
/// For datagram `i` with sender timestamp `S_i` and arrival time `R_i` (both
/// in nanoseconds, possibly from different, unsynchronised clocks; only
/// differences are used, so a constant offset cancels out), the transit-time
/// difference to the previous datagram is
///
/// ```text
/// D(i-1, i) = (R_i - R_{i-1}) - (S_i - S_{i-1})
/// ```
///
/// and the running estimate is updated with gain 1/16:
///
/// ```text
/// J = J + (|D(i-1, i)| - J) / 16
/// ```
///
/// Differences are computed in `i128`, so any `u64` inputs (including clocks
/// that wrap or go backwards) are handled without overflow or panic; `J` is
/// kept as `f64` rather than the scaled integer of appendix A.8.
///
/// The initial state is `J = 0`; the first datagram only sets the reference
/// (`S_0`, `R_0`) and contributes no sample. As in RFC 3550, datagrams are
/// taken in arrival order, whatever their sequence numbers: feed them to
/// [`on_packet`](Self::on_packet) as they are received.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Jitter {
    /// (send_ns, arrival_ns) of the previous datagram.
    prev: Option<(u64, u64)>,
    /// Transit time of the previous datagram, for [`on_transit`](Self::on_transit).
    prev_transit: Option<i64>,
    jitter: f64,
    samples: u64,
}

impl Jitter {
    /// A fresh estimator: `J = 0`, no reference datagram yet.
    pub const fn new() -> Self {
        Self {
            prev: None,
            prev_transit: None,
            jitter: 0.0,
            samples: 0,
        }
    }

    /// Folds in one datagram sent at `send_ns` (sender's clock) and received
    /// at `arrival_ns` (receiver's clock).
    pub fn on_packet(&mut self, send_ns: u64, arrival_ns: u64) {
        if let Some((prev_send, prev_arrival)) = self.prev {
            let d_arrival = i128::from(arrival_ns) - i128::from(prev_arrival);
            let d_send = i128::from(send_ns) - i128::from(prev_send);
            // |d| < 2^66: exact in i128, finite in f64.
            let d = (d_arrival - d_send).unsigned_abs() as f64;
            self.jitter += (d - self.jitter) / 16.0;
            self.samples = self.samples.saturating_add(1);
        }
        self.prev = Some((send_ns, arrival_ns));
    }

    /// Folds in one datagram by its transit time `R_i - S_i` alone, in ns: `D` is the
    /// difference of consecutive transit times, so this is the same estimator as
    /// [`on_packet`](Self::on_packet) for a caller that already has the transit (a one-way
    /// delay, even with an unknown clock offset) and no unwrapped send time.
    pub fn on_transit(&mut self, transit_ns: i64) {
        // A caller uses one form or the other; each keeps its own previous datagram.
        if let Some(prev) = self.prev_transit {
            // i64 arithmetic where it cannot overflow (any real transit time): the i128 path
            // converts through software floating point.
            let d = match transit_ns.checked_sub(prev) {
                Some(d) => d.unsigned_abs() as f64,
                None => (i128::from(transit_ns) - i128::from(prev)).unsigned_abs() as f64,
            };
            self.jitter += (d - self.jitter) / 16.0;
            self.samples = self.samples.saturating_add(1);
        }
        self.prev_transit = Some(transit_ns);
    }

    /// As `n` calls of [`on_transit`](Self::on_transit) with the same transit time (the
    /// datagrams of one send, read in one GRO buffer): the first updates `J` with its
    /// difference from the datagram before, each other has a difference of 0, which only
    /// decays `J` by 15/16; so `J` is multiplied by (15/16)^(n-1) in one step (equal to the
    /// `n` single steps up to floating-point rounding).
    pub fn on_transit_run(&mut self, transit_ns: i64, n: u64) {
        if n == 0 {
            return;
        }
        self.on_transit(transit_ns);
        // The other n - 1: a sample each, of difference 0 (without a datagram before the
        // run, the first only set the reference and J was 0: the same formula holds).
        let zero_steps = n - 1;
        if zero_steps > 0 {
            let k = i32::try_from(zero_steps).unwrap_or(i32::MAX);
            self.jitter *= (15.0f64 / 16.0).powi(k);
            self.samples = self.samples.saturating_add(zero_steps);
        }
    }

    /// The current jitter estimate `J`, in nanoseconds (0 until two
    /// datagrams have been seen).
    pub fn jitter_ns(&self) -> f64 {
        self.jitter
    }

    /// Number of transit-time differences `D` folded into the estimate: one
    /// less than the number of datagrams seen (0 before the second).
    pub fn samples(&self) -> u64 {
        self.samples
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_of_equal_transits_is_its_single_steps() {
        for (before, run) in [(&[][..], 1u64), (&[][..], 5), (&[1_000i64, 9_000][..], 64)] {
            let (mut one, mut runs) = (Jitter::new(), Jitter::new());
            for &t in before {
                one.on_transit(t);
                runs.on_transit(t);
            }
            for _ in 0..run {
                one.on_transit(4_000);
            }
            runs.on_transit_run(4_000, run);
            assert_eq!(one.samples(), runs.samples());
            let (a, b) = (one.jitter_ns(), runs.jitter_ns());
            assert!((a - b).abs() <= 1e-9 * a.abs().max(1.0), "{a} vs {b}");
        }
    }

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn first_packet_is_reference_only() {
        let mut j = Jitter::new();
        assert_eq!(j.samples(), 0);
        assert_eq!(j.jitter_ns().to_bits(), 0.0f64.to_bits());
        j.on_packet(1_000, 9_999_999);
        assert_eq!(j.samples(), 0);
        assert_eq!(j.jitter_ns().to_bits(), 0.0f64.to_bits());
        assert_eq!(Jitter::default(), Jitter::new());
    }

    #[test]
    fn constant_spacing_is_zero() {
        let mut j = Jitter::new();
        // different clocks (large offset), same spacing on both sides
        for i in 0..10_000u64 {
            j.on_packet(i * 1_000_000, 7_000_000_000_123 + i * 1_000_000);
        }
        assert_eq!(j.samples(), 9_999);
        assert_eq!(j.jitter_ns().to_bits(), 0.0f64.to_bits());
    }

    #[test]
    fn constant_transit_change_follows_closed_form() {
        // arrival spacing alternates 1200, 800 against a send spacing of 1000:
        // |D| = 200 every time, so J_n = 200 * (1 - (15/16)^n).
        let mut j = Jitter::new();
        let mut arrival = 50_000u64;
        for i in 0..=40u64 {
            if i > 0 {
                arrival += if i % 2 == 1 { 1_200 } else { 800 };
            }
            j.on_packet(i * 1_000, arrival);
            let n = i32::try_from(i).expect("small");
            let expect = 200.0 * (1.0 - (15.0f64 / 16.0).powi(n));
            assert!(close(j.jitter_ns(), expect, 1e-9), "{i}: {}", j.jitter_ns());
        }
        assert_eq!(j.samples(), 40);
    }

    #[test]
    fn alternating_pattern_converges() {
        // transit grows by 100 then 300 ns alternately: |D| = 100, 300, 100, ...
        // The estimate converges to a 2-cycle: J_a = (15 J_b + 300)/16 and
        // J_b = (15 J_a + 100)/16, i.e. J_a = 6300/31 and J_b = 6100/31.
        let mut j = Jitter::new();
        let mut transit = 1_000_000u64;
        j.on_packet(0, transit);
        let mut last = (0.0, 0.0);
        for i in 1..=2_000u64 {
            transit += if i % 2 == 1 { 100 } else { 300 };
            j.on_packet(i * 10_000, i * 10_000 + transit);
            if i % 2 == 1 {
                last.0 = j.jitter_ns(); // after a 100-sample
            } else {
                last.1 = j.jitter_ns(); // after a 300-sample
            }
        }
        assert_eq!(j.samples(), 2_000);
        assert!(close(last.0, 6100.0 / 31.0, 1e-9), "{}", last.0);
        assert!(close(last.1, 6300.0 / 31.0, 1e-9), "{}", last.1);
    }

    #[test]
    fn single_spike_decays() {
        let mut j = Jitter::new();
        j.on_packet(0, 0);
        j.on_packet(1_000, 1_000 + 1_600); // D = 1600 -> J = 100
        assert!(close(j.jitter_ns(), 100.0, 1e-12));
        j.on_packet(2_000, 2_000 + 1_600); // D = 0 -> J = 93.75
        assert!(close(j.jitter_ns(), 93.75, 1e-12));
    }

    #[test]
    fn reordered_arrivals_use_absolute_difference() {
        // a datagram sent earlier arriving later gives a negative send spacing
        let mut j = Jitter::new();
        j.on_packet(2_000, 10_000);
        j.on_packet(1_000, 10_500); // D = 500 - (-1000) = 1500
        assert!(close(j.jitter_ns(), 1500.0 / 16.0, 1e-12));
    }

    #[test]
    fn transit_form_matches_send_and_arrival_form() {
        let mut a = Jitter::new();
        let mut b = Jitter::new();
        let transit = [5_000i64, 5_200, 4_900, 7_000, 5_000, 5_000, -3_000_000];
        for (i, t) in transit.into_iter().enumerate() {
            let send = i as u64 * 1_000_000;
            a.on_packet(send, (send as i64 + t + 10_000_000) as u64);
            b.on_transit(t);
        }
        assert_eq!(a.samples(), b.samples());
        assert!(close(a.jitter_ns(), b.jitter_ns(), 1e-9));
        assert!(b.jitter_ns() > 0.0);
    }

    #[test]
    fn huge_values_do_not_panic() {
        let mut j = Jitter::new();
        j.on_packet(0, u64::MAX);
        j.on_packet(u64::MAX, 0); // D = -(2^64-1) - (2^64-1)
        let expect = 2.0 * (u64::MAX as f64) / 16.0;
        assert!(j.jitter_ns().is_finite());
        assert!(close(j.jitter_ns(), expect, expect * 1e-12));
        for &(s, r) in &[
            (u64::MAX, u64::MAX),
            (0, 0),
            (u64::MAX, 0),
            (0, u64::MAX),
            (1, u64::MAX - 1),
        ] {
            j.on_packet(s, r);
            assert!(j.jitter_ns().is_finite() && j.jitter_ns() >= 0.0);
        }
        assert_eq!(j.samples(), 6);
    }
}
