//! CoDel (RFC 8289): drop at dequeue once packets have waited more than `target` for a whole
//! `interval`, at times spaced `interval / √count`, until a packet waits less than `target`.
//!
//! [`CodelVars::dequeue`] is the RFC's `dequeue()` and `dodequeue()` (§5.4–5.5) over any
//! packet source, so FQ-CoDel runs the same code on each flow queue. Where the RFC's
//! pseudo-code and Linux differ we follow the RFC (`now >= first_above_time`, an exact
//! square root rather than Linux's Newton step); ECN marking follows Linux's codel_impl.h
//! (the RFC only says to mark instead of dropping): a mark counts as a drop for the control
//! law and the marked packet is delivered.

use super::fifo::PacketFifo;
use super::{AqmConfig, AqmCounters, Dequeued, DropCause, Limits, QueuedPacket};

/// The parameters every CoDel instance of a queue shares.
#[derive(Debug, Clone, Copy)]
pub(super) struct CodelParams {
    pub(super) target_ns: u64,
    pub(super) interval_ns: u64,
    pub(super) ecn: bool,
}

impl CodelParams {
    pub(super) fn new(cfg: &AqmConfig) -> Self {
        Self {
            target_ns: cfg.target_ns,
            interval_ns: cfg.interval_ns,
            ecn: cfg.ecn,
        }
    }

    /// The control law: the next drop `interval / √count` after `t` (RFC 8289 §5.4).
    fn control_law(&self, t: u64, count: u32) -> u64 {
        let gap = self.interval_ns as f64 / f64::from(count.max(1)).sqrt();
        t.saturating_add(gap as u64)
    }
}

/// Where CoDel takes packets from: a FIFO, or one flow of FQ-CoDel.
pub(super) trait Source {
    /// The head packet, removed.
    fn pop(&mut self) -> Option<QueuedPacket>;
    /// Bytes still queued after a pop, for the RFC's `bytes() <= maxpacket` test (Linux
    /// and this code give FQ-CoDel the whole queue's bytes, not the flow's).
    fn backlog_bytes(&self) -> u64;
    /// The largest packet seen (the RFC's `maxpacket`).
    fn max_packet(&self) -> u32;
}

impl Source for PacketFifo {
    fn pop(&mut self) -> Option<QueuedPacket> {
        PacketFifo::pop(self)
    }
    fn backlog_bytes(&self) -> u64 {
        self.bytes()
    }
    fn max_packet(&self) -> u32 {
        PacketFifo::max_packet(self)
    }
}

/// One CoDel instance's state (RFC 8289 §5.3's variables).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct CodelVars {
    /// When the sojourn time will have been above target for an interval; 0: it is not above.
    first_above_ns: u64,
    /// When to drop next while dropping.
    drop_next_ns: u64,
    /// Drops (and marks) since entering the dropping state, or the count it re-entered with.
    count: u32,
    /// `count` when the dropping state was last entered.
    lastcount: u32,
    dropping: bool,
}

impl CodelVars {
    /// The state of a queue that has never been above target (all zero, as `Default`).
    pub(super) const IDLE: Self = Self {
        first_above_ns: 0,
        drop_next_ns: 0,
        count: 0,
        lastcount: 0,
        dropping: false,
    };

    /// Whether it is in the dropping state.
    #[cfg(test)]
    pub(super) fn dropping(&self) -> bool {
        self.dropping
    }

    /// The RFC's `dodequeue()`: the head packet and whether it is OK to drop it.
    fn do_dequeue(
        &mut self,
        p: &CodelParams,
        now_ns: u64,
        src: &mut dyn Source,
    ) -> (Option<QueuedPacket>, bool) {
        let Some(pkt) = src.pop() else {
            self.first_above_ns = 0;
            return (None, false);
        };
        let sojourn = now_ns.saturating_sub(pkt.enqueued_ns);
        if sojourn < p.target_ns || src.backlog_bytes() <= u64::from(src.max_packet()) {
            // Went below target: it must stay above for a whole interval again.
            self.first_above_ns = 0;
            return (Some(pkt), false);
        }
        let ok = if self.first_above_ns == 0 {
            // Just went above: OK to drop once it has stayed above for an interval.
            self.first_above_ns = now_ns.saturating_add(p.interval_ns);
            false
        } else {
            now_ns >= self.first_above_ns
        };
        (Some(pkt), ok)
    }

    /// Drops or marks `pkt`: marked (and returned) if ECN allows, else dropped.
    fn drop_or_mark(
        p: &CodelParams,
        pkt: QueuedPacket,
        c: &mut AqmCounters,
        drop: &mut dyn FnMut(QueuedPacket, DropCause),
    ) -> Option<QueuedPacket> {
        if p.ecn && pkt.ect {
            c.marked += 1;
            return Some(pkt);
        }
        c.dropped_aqm += 1;
        drop(pkt, DropCause::Aqm);
        None
    }

    /// The RFC's `dequeue()`: the packet to send at `now_ns`, dropping (or marking) on the
    /// way as the control law says.
    pub(super) fn dequeue(
        &mut self,
        p: &CodelParams,
        now_ns: u64,
        src: &mut dyn Source,
        c: &mut AqmCounters,
        drop: &mut dyn FnMut(QueuedPacket, DropCause),
    ) -> Option<Dequeued> {
        let (mut pkt, mut ok) = self.do_dequeue(p, now_ns, src);
        let Some(mut head) = pkt else {
            self.dropping = false;
            return None;
        };
        if self.dropping {
            if !ok {
                // Sojourn went below target: leave the dropping state.
                self.dropping = false;
            }
            while self.dropping && now_ns >= self.drop_next_ns {
                self.count = self.count.saturating_add(1);
                if let Some(marked) = Self::drop_or_mark(p, head, c, drop) {
                    self.drop_next_ns = p.control_law(self.drop_next_ns, self.count);
                    return Some(Dequeued {
                        packet: marked,
                        mark_ce: true,
                    });
                }
                (pkt, ok) = self.do_dequeue(p, now_ns, src);
                match pkt {
                    Some(next) if ok => {
                        head = next;
                        self.drop_next_ns = p.control_law(self.drop_next_ns, self.count);
                    }
                    _ => self.dropping = false,
                }
            }
            return pkt.map(|packet| Dequeued {
                packet,
                mark_ce: false,
            });
        }
        if !ok {
            return Some(Dequeued {
                packet: head,
                mark_ce: false,
            });
        }
        // Enter the dropping state: drop (or mark) this packet and send the next.
        let out = match Self::drop_or_mark(p, head, c, drop) {
            Some(marked) => Some(Dequeued {
                packet: marked,
                mark_ce: true,
            }),
            None => self.do_dequeue(p, now_ns, src).0.map(|packet| Dequeued {
                packet,
                mark_ce: false,
            }),
        };
        self.dropping = true;
        // If it went above target soon after it last went below, the drop rate that
        // controlled the queue then is a good start now (RFC 8289 §5.5, Linux's rule): the
        // count of the last cycle's drops beyond the first, else 1.
        let delta = self.count.wrapping_sub(self.lastcount);
        let recent = now_ns.saturating_sub(self.drop_next_ns) < 16 * p.interval_ns;
        self.count = if delta > 1 && delta < u32::MAX / 2 && recent {
            delta
        } else {
            1
        };
        self.lastcount = self.count;
        self.drop_next_ns = p.control_law(now_ns, self.count);
        out
    }
}

/// CoDel over one FIFO (tc's `codel`): tail drop when full, CoDel at dequeue.
#[derive(Debug, Clone)]
pub(super) struct Codel {
    pub(super) packets: PacketFifo,
    limits: Limits,
    params: CodelParams,
    vars: CodelVars,
    pub(super) counters: AqmCounters,
}

impl Codel {
    pub(super) fn new(cfg: &AqmConfig, limits: Limits) -> Self {
        Self {
            packets: PacketFifo::default(),
            limits,
            params: CodelParams::new(cfg),
            vars: CodelVars::default(),
            counters: AqmCounters::default(),
        }
    }

    pub(super) fn enqueue(
        &mut self,
        p: QueuedPacket,
        drop: &mut dyn FnMut(QueuedPacket, DropCause),
    ) {
        if self.packets.overflows(self.limits, &p) {
            self.counters.dropped_overflow += 1;
            drop(p, DropCause::Overflow);
            return;
        }
        self.packets.push(p);
        self.counters.took(self.packets.len(), self.packets.bytes());
    }

    pub(super) fn dequeue(
        &mut self,
        now_ns: u64,
        drop: &mut dyn FnMut(QueuedPacket, DropCause),
    ) -> Option<Dequeued> {
        let out = self.vars.dequeue(
            &self.params,
            now_ns,
            &mut self.packets,
            &mut self.counters,
            drop,
        );
        if out.is_some() {
            self.counters.dequeued += 1;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Aqm, AqmConfig};
    use super::*;

    const MS: u64 = 1_000_000;

    fn pkt(id: u32, ect: bool) -> QueuedPacket {
        QueuedPacket {
            id,
            bytes: 1500,
            flow: 0,
            ect,
            enqueued_ns: 0,
        }
    }

    /// What happened at each millisecond step.
    #[derive(Default)]
    struct Run {
        drops_ms: Vec<u64>,
        marks_ms: Vec<u64>,
        sent: u32,
    }

    /// A standing queue: 100 packets at 0, then from `start_ms` one packet in and one out
    /// each millisecond until `end_ms` (so the queue stays ~100 ms deep, far above target).
    fn standing(q: &mut Aqm, ect: bool, start_ms: u64, end_ms: u64, next_id: &mut u32) -> Run {
        let mut run = Run::default();
        for _ in 0..100 {
            q.enqueue(
                start_ms.saturating_sub(10) * MS,
                pkt(*next_id, ect),
                &mut |_, _| {},
            );
            *next_id += 1;
        }
        for ms in start_ms..end_ms {
            let now = ms * MS;
            q.enqueue(now, pkt(*next_id, ect), &mut |_, _| panic!("no overflow"));
            *next_id += 1;
            let mut dropped = 0;
            let d = q.dequeue(now, &mut |_, cause| {
                assert_eq!(cause, DropCause::Aqm);
                dropped += 1;
            });
            for _ in 0..dropped {
                run.drops_ms.push(ms);
            }
            let d = d.expect("backlogged");
            if d.mark_ce {
                run.marks_ms.push(ms);
            }
            run.sent += 1;
        }
        run
    }

    /// The drop times of the control law, ms, from entering at `enter_ms` with `count`:
    /// each `interval / √count` after the last *scheduled* time, observed at the first
    /// whole millisecond at or after it (the test steps in milliseconds).
    fn law_ms(enter_ms: u64, first_count: u32, n: usize) -> Vec<u64> {
        let mut t = enter_ms as f64;
        let mut out = vec![enter_ms];
        for k in 0..n - 1 {
            t += 100.0 / f64::from(first_count + k as u32).sqrt();
            out.push((t - 1e-9).ceil() as u64);
        }
        out
    }

    fn codel(ecn: bool) -> Aqm {
        let mut cfg = AqmConfig::parse("codel target 5ms interval 100ms").unwrap();
        cfg.ecn = ecn;
        Aqm::new(&cfg, 10_000, 0, 1)
    }

    #[test]
    fn drops_are_spaced_interval_over_root_count() {
        let mut q = codel(false);
        let mut id = 0;
        // The first dequeue (10 ms) finds sojourn above target: OK to drop from 110 ms on.
        let run = standing(&mut q, false, 10, 582, &mut id);
        // 110, 210, 280.7, 338.5, 388.5, 433.2, 474.0, 511.8, 547.2, 580.5 ms.
        assert_eq!(run.drops_ms, law_ms(110, 1, 10));
        assert_eq!(run.drops_ms[..4], [110, 210, 281, 339]);
        assert!(run.marks_ms.is_empty());
        let c = q.counters();
        assert_eq!((c.dropped_aqm, c.dequeued, c.marked), (10, 572, 0));
    }

    #[test]
    fn nothing_is_dropped_below_target_or_before_an_interval() {
        let mut q = codel(false);
        // Each packet waits 4 ms: below the 5 ms target, for a long time.
        for ms in 0..2_000 {
            q.enqueue(ms * MS, pkt(ms as u32, false), &mut |_, _| panic!());
            if ms >= 4 {
                q.dequeue(ms * MS, &mut |_, _| panic!("dropped below target"));
            }
        }
        // Above target, but for less than an interval: 99 ms of standing queue.
        let mut q = codel(false);
        let mut id = 0;
        let run = standing(&mut q, false, 10, 110, &mut id);
        assert!(run.drops_ms.is_empty(), "{:?}", run.drops_ms);
    }

    /// Drains the queue at `now_ms`, then sends one fresh packet per ms for `ms` ms: sojourn
    /// 0, so CoDel leaves the dropping state.
    fn idle_for(q: &mut Aqm, now_ms: u64, ms: u64, id: &mut u32) -> u64 {
        let mut drops = 0;
        while q.dequeue(now_ms * MS, &mut |_, _| drops += 1).is_some() {}
        for t in now_ms..now_ms + ms {
            q.enqueue(t * MS, pkt(*id, false), &mut |_, _| {});
            *id += 1;
            q.dequeue(t * MS, &mut |_, _| drops += 1);
        }
        drops
    }

    #[test]
    fn leaves_dropping_below_target_and_reenters_with_the_last_count() {
        let mut q = codel(false);
        let mut id = 0;
        // Enter at 110 ms; five drops by 389 ms (count 5), the next due at 433.7 ms.
        let run = standing(&mut q, false, 10, 400, &mut id);
        assert_eq!(run.drops_ms, law_ms(110, 1, 5));
        let Inner::Codel(c) = &q.inner else { panic!() };
        assert!(c.vars.dropping());
        // The drain drops a few more while the head is still old: count them in.
        let extra = idle_for(&mut q, 400, 50, &mut id);
        let Inner::Codel(c) = &q.inner else { panic!() };
        assert!(
            !c.vars.dropping(),
            "a packet below target ends the dropping state"
        );
        let count = c.vars.count;
        assert_eq!(u64::from(count), 5 + extra);
        // Back above target soon after (within 16 intervals of the last drop_next): it
        // re-enters with count = count − lastcount (lastcount 1), so the first gap is
        // 100 ms / √(count − 1), not 100 ms.
        let run = standing(&mut q, false, 450, 700, &mut id);
        let enter = run.drops_ms[0];
        assert_eq!(
            enter, 550,
            "an interval after the first dequeue above target"
        );
        assert_eq!(run.drops_ms[..3], law_ms(enter, count - 1, 3)[..]);
        assert_eq!(run.drops_ms[1] - enter, 50, "100/√4 ms after entering");
    }

    #[test]
    fn reenters_with_count_one_long_after() {
        let mut q = codel(false);
        let mut id = 0;
        standing(&mut q, false, 10, 400, &mut id);
        idle_for(&mut q, 400, 100, &mut id);
        // More than 16 intervals (1.6 s) later: the old count is forgotten.
        let run = standing(&mut q, false, 3_000, 3_300, &mut id);
        assert_eq!(run.drops_ms, law_ms(3_100, 1, 3));
    }

    #[test]
    fn ecn_marks_at_the_drop_times_and_drops_nothing() {
        let mut q = codel(true);
        let mut id = 0;
        let run = standing(&mut q, true, 10, 582, &mut id);
        assert!(run.drops_ms.is_empty());
        assert_eq!(run.marks_ms, law_ms(110, 1, 10));
        let c = q.counters();
        assert_eq!((c.marked, c.dropped_aqm), (10, 0));
        // Packets that are not ECN-capable are still dropped.
        let mut q = codel(true);
        let run = standing(&mut q, false, 10, 582, &mut id);
        assert_eq!(run.drops_ms, law_ms(110, 1, 10));
    }

    #[test]
    fn one_packet_of_backlog_is_never_dropped() {
        // Each packet waits 50 ms, far above target, but alone in the queue: after it
        // leaves, no more than a packet (the RFC's maxpacket) is queued.
        let mut q = codel(false);
        for k in 0..100u64 {
            q.enqueue(k * 60 * MS, pkt(k as u32, false), &mut |_, _| {});
            let d = q.dequeue((k * 60 + 50) * MS, &mut |_, _| {
                panic!("dropped a lone packet")
            });
            assert!(d.is_some());
        }
        assert_eq!(q.counters().dropped_aqm, 0);
    }

    use super::super::Inner;
}
