//! FQ-CoDel (RFC 8290): packets hashed into flow queues, each with its own CoDel; the
//! scheduler serves new flows before old ones, each for a quantum of bytes per round
//! (deficit round robin), so a sparse flow's packets go out ahead of bulk flows' queues.
//!
//! The rules are RFC 8290 §4 and Linux's sch_fq_codel.c: a flow with no list joins the new
//! flows with a quantum of credit; a flow out of credit gets another quantum and goes to the
//! tail of the old flows; a new flow that empties goes to the old flows (so it cannot
//! starve them by going quiet and coming back as new), an old flow that empties leaves.
//! When the queue is over its limit, packets are dropped from the head of the flow with the
//! most bytes: up to `drop_batch` of them, until half its bytes are gone (Linux; the RFC
//! drops one, which is `drop_batch 1`).
//!
//! Packets live in one slab shared by all flows (a linked list per flow), grown to the most
//! held; the two flow lists are rings sized for every flow at the start.

use std::collections::VecDeque;

use super::codel::{CodelParams, CodelVars, Source};
use super::{
    AqmConfig, AqmCounters, Dequeued, DropCause, Limits, QueuedPacket, DROP_BATCH, FLOWS, QUANTUM,
};

/// No slot: the end of a list.
const NIL: u32 = u32::MAX;

/// Which list a flow is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum List {
    #[default]
    None,
    New,
    Old,
}

/// One flow queue.
#[derive(Debug, Clone, Copy)]
struct Flow {
    head: u32,
    tail: u32,
    bytes: u64,
    /// Bytes it may still send this round (DRR's deficit); may go below zero.
    deficit: i64,
    list: List,
    codel: CodelVars,
}

impl Flow {
    /// A flow that has never had a packet.
    const EMPTY: Self = Self {
        head: NIL,
        tail: NIL,
        bytes: 0,
        deficit: 0,
        list: List::None,
        codel: CodelVars::IDLE,
    };
}

/// Flows per chunk of the flow table.
const CHUNK: usize = 256;

/// The flow queues, in chunks allocated the first time one of their flows gets a packet:
/// memory follows the flows the traffic uses, not the `flows` a config asks for (65536
/// flows would otherwise take 4 MiB per direction of every link at once, 2 GiB for a
/// scenario's 256 links). Each chunk is allocated once and kept.
#[derive(Debug, Clone)]
struct FlowTable {
    chunks: Vec<Option<Box<[Flow]>>>,
}

impl FlowTable {
    fn new(flows: usize) -> Self {
        Self {
            chunks: (0..flows.div_ceil(CHUNK)).map(|_| None).collect(),
        }
    }

    /// Chunks allocated so far.
    fn allocated(&self) -> usize {
        self.chunks.iter().filter(|c| c.is_some()).count()
    }
}

impl std::ops::Index<usize> for FlowTable {
    type Output = Flow;

    /// A flow of a chunk not yet allocated has never had a packet: it reads as empty.
    fn index(&self, i: usize) -> &Flow {
        match self.chunks.get(i / CHUNK) {
            Some(Some(chunk)) => &chunk[i % CHUNK],
            _ => &Flow::EMPTY,
        }
    }
}

impl std::ops::IndexMut<usize> for FlowTable {
    fn index_mut(&mut self, i: usize) -> &mut Flow {
        let chunk = self.chunks[i / CHUNK]
            .get_or_insert_with(|| vec![Flow::EMPTY; CHUNK].into_boxed_slice());
        &mut chunk[i % CHUNK]
    }
}

/// A packet in the slab, and the next of its flow (or of the free list).
#[derive(Debug, Clone, Copy)]
struct Slot {
    packet: QueuedPacket,
    next: u32,
}

/// The packets of all flows: the slab and its free list.
#[derive(Debug, Clone, Default)]
struct Slab {
    slots: Vec<Slot>,
    free: u32,
    len: usize,
    bytes: u64,
    max_packet: u32,
}

impl Slab {
    fn push(&mut self, flow: &mut Flow, packet: QueuedPacket) {
        let slot = Slot { packet, next: NIL };
        let i = if self.free != NIL {
            let i = self.free;
            self.free = self.slots[i as usize].next;
            self.slots[i as usize] = slot;
            i
        } else {
            self.slots.push(slot);
            (self.slots.len() - 1) as u32
        };
        if flow.tail == NIL {
            flow.head = i;
        } else {
            self.slots[flow.tail as usize].next = i;
        }
        flow.tail = i;
        flow.bytes += u64::from(packet.bytes);
        self.len += 1;
        self.bytes += u64::from(packet.bytes);
        self.max_packet = self.max_packet.max(packet.bytes);
    }

    fn pop(&mut self, flow: &mut Flow) -> Option<QueuedPacket> {
        if flow.head == NIL {
            return None;
        }
        let i = flow.head;
        let slot = self.slots[i as usize];
        flow.head = slot.next;
        if flow.head == NIL {
            flow.tail = NIL;
        }
        self.slots[i as usize].next = self.free;
        self.free = i;
        flow.bytes -= u64::from(slot.packet.bytes);
        self.len -= 1;
        self.bytes -= u64::from(slot.packet.bytes);
        Some(slot.packet)
    }
}

/// One flow as CoDel's packet source, with the whole queue's bytes for its maxpacket test.
struct FlowSource<'a> {
    slab: &'a mut Slab,
    flow: &'a mut Flow,
}

impl Source for FlowSource<'_> {
    fn pop(&mut self) -> Option<QueuedPacket> {
        self.slab.pop(self.flow)
    }
    fn backlog_bytes(&self) -> u64 {
        self.slab.bytes
    }
    fn max_packet(&self) -> u32 {
        self.slab.max_packet
    }
}

/// The FQ-CoDel queue.
#[derive(Debug, Clone)]
pub(super) struct FqCodel {
    flows: FlowTable,
    /// How many flow queues (the config's `flows`).
    n_flows: u32,
    new_flows: VecDeque<u32>,
    old_flows: VecDeque<u32>,
    slab: Slab,
    limits: Limits,
    params: CodelParams,
    quantum: i64,
    drop_batch: u32,
    /// Flows on either list.
    active: u32,
    pub(super) counters: AqmCounters,
}

impl FqCodel {
    pub(super) fn new(cfg: &AqmConfig, limits: Limits) -> Self {
        // Within the bounds `parse` holds a config to, also for one built by hand: no
        // flows or no quantum would never send, too many would take memory for nothing.
        let n = cfg.flows.clamp(*FLOWS.start(), *FLOWS.end()) as usize;
        Self {
            flows: FlowTable::new(n),
            n_flows: n as u32,
            new_flows: VecDeque::with_capacity(n),
            old_flows: VecDeque::with_capacity(n),
            slab: Slab {
                free: NIL,
                ..Slab::default()
            },
            limits,
            params: CodelParams::new(cfg),
            quantum: i64::from(cfg.quantum.clamp(*QUANTUM.start(), *QUANTUM.end())),
            drop_batch: cfg.drop_batch.clamp(*DROP_BATCH.start(), *DROP_BATCH.end()),
            active: 0,
            counters: AqmCounters::default(),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.slab.len
    }

    pub(super) fn bytes(&self) -> u64 {
        self.slab.bytes
    }

    /// Packets it holds without allocating; flow chunks count as one packet each, so that
    /// a chunk allocated late shows as growth too.
    pub(super) fn capacity(&self) -> usize {
        self.slab.slots.capacity() + self.flows.allocated()
    }

    pub(super) fn enqueue(
        &mut self,
        p: QueuedPacket,
        drop: &mut dyn FnMut(QueuedPacket, DropCause),
    ) {
        let idx = (p.flow % self.n_flows) as usize;
        // A packet larger than the byte limit alone could only empty other flows for nothing.
        if self.limits.exceeded(1, u64::from(p.bytes)) {
            self.counters.dropped_overflow += 1;
            drop(p, DropCause::Overflow);
            return;
        }
        let flow = &mut self.flows[idx];
        self.slab.push(flow, p);
        if flow.list == List::None {
            flow.list = List::New;
            flow.deficit = self.quantum;
            self.new_flows.push_back(idx as u32);
            self.counters.new_flows += 1;
            self.active += 1;
            self.counters.flows_max = self.counters.flows_max.max(self.active);
        }
        self.counters.took(self.slab.len, self.slab.bytes);
        while self.limits.exceeded(self.slab.len, self.slab.bytes) {
            if !self.drop_from_fattest(drop) {
                break;
            }
        }
    }

    /// Drops from the head of the flow with the most bytes: up to `drop_batch` packets,
    /// until half its bytes are gone (Linux's fq_codel_drop). Ties go to the lowest index.
    /// False if there was nothing to drop.
    fn drop_from_fattest(&mut self, drop: &mut dyn FnMut(QueuedPacket, DropCause)) -> bool {
        // Every flow with packets is on one of the lists: scan those, not every flow.
        let Some(fat) = self
            .new_flows
            .iter()
            .chain(self.old_flows.iter())
            .map(|&i| i as usize)
            .max_by_key(|&i| (self.flows[i].bytes, std::cmp::Reverse(i)))
        else {
            return false;
        };
        let flow = &mut self.flows[fat];
        let half = flow.bytes / 2;
        let mut gone = 0u64;
        for _ in 0..self.drop_batch {
            let Some(p) = self.slab.pop(flow) else { break };
            gone += u64::from(p.bytes);
            self.counters.dropped_overflow += 1;
            drop(p, DropCause::Overflow);
            if gone >= half {
                break;
            }
        }
        gone > 0
    }

    pub(super) fn dequeue(
        &mut self,
        now_ns: u64,
        drop: &mut dyn FnMut(QueuedPacket, DropCause),
    ) -> Option<Dequeued> {
        loop {
            let (list, &idx) = match self.new_flows.front() {
                Some(i) => (List::New, i),
                None => (List::Old, self.old_flows.front()?),
            };
            let i = idx as usize;
            if self.flows[i].deficit <= 0 {
                // Out of credit for this round: another quantum, and to the back of the old.
                self.flows[i].deficit += self.quantum;
                self.flows[i].list = List::Old;
                self.pop_front(list);
                self.old_flows.push_back(idx);
                continue;
            }
            let flow = &mut self.flows[i];
            let mut codel = flow.codel;
            let got = codel.dequeue(
                &self.params,
                now_ns,
                &mut FlowSource {
                    slab: &mut self.slab,
                    flow,
                },
                &mut self.counters,
                drop,
            );
            flow.codel = codel;
            if let Some(d) = got {
                flow.deficit -= i64::from(d.packet.bytes);
                self.counters.dequeued += 1;
                return Some(d);
            }
            self.pop_front(list);
            if list == List::New && !self.old_flows.is_empty() {
                // An emptied new flow goes through the old list once, so that a flow
                // cannot stay "new" by sending one packet at a time.
                self.flows[i].list = List::Old;
                self.old_flows.push_back(idx);
            } else {
                self.flows[i].list = List::None;
                self.active -= 1;
            }
        }
    }

    fn pop_front(&mut self, list: List) {
        match list {
            List::New => self.new_flows.pop_front(),
            _ => self.old_flows.pop_front(),
        };
    }

    /// The flow indices on the new and the old list, front first.
    #[cfg(test)]
    fn lists(&self) -> (Vec<u32>, Vec<u32>) {
        (
            self.new_flows.iter().copied().collect(),
            self.old_flows.iter().copied().collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Aqm, Inner};
    use super::*;

    const MS: u64 = 1_000_000;

    fn pkt(id: u32, flow: u32, bytes: u32) -> QueuedPacket {
        QueuedPacket {
            id,
            bytes,
            flow,
            ect: false,
            enqueued_ns: 0,
        }
    }

    fn fq(text: &str, limit: u32) -> Aqm {
        Aqm::new(&AqmConfig::parse(text).unwrap(), limit, 0, 1)
    }

    fn lists(q: &Aqm) -> (Vec<u32>, Vec<u32>) {
        let Inner::FqCodel(f) = &q.inner else {
            panic!()
        };
        f.lists()
    }

    fn next(q: &mut Aqm, now: u64) -> Option<QueuedPacket> {
        q.dequeue(now, &mut |_, _| panic!("no drops"))
            .map(|d| d.packet)
    }

    #[test]
    fn a_new_flows_packet_goes_before_a_backlogged_old_flow() {
        let mut q = fq("fq_codel", 10_000);
        for id in 0..10 {
            q.enqueue(0, pkt(id, 1, 1000), &mut |_, _| panic!());
        }
        assert_eq!(lists(&q), (vec![1], vec![]));
        // Flow 1 spends its 1514-byte quantum on two packets, then is an old flow.
        assert_eq!(next(&mut q, 0).unwrap().id, 0);
        assert_eq!(next(&mut q, 0).unwrap().id, 1);
        assert_eq!(next(&mut q, 0).unwrap().id, 2);
        assert_eq!(lists(&q), (vec![], vec![1]));
        // A sparse flow's packet jumps the 7 packets of flow 1.
        q.enqueue(0, pkt(100, 2, 200), &mut |_, _| panic!());
        assert_eq!(lists(&q), (vec![2], vec![1]));
        assert_eq!(next(&mut q, 0).unwrap().id, 100);
        assert_eq!(q.counters().new_flows, 2);
    }

    #[test]
    fn an_emptied_flow_goes_to_the_old_list_then_leaves() {
        let mut q = fq("fq_codel", 10_000);
        for id in 0..10 {
            q.enqueue(0, pkt(id, 1, 1000), &mut |_, _| panic!());
        }
        for _ in 0..3 {
            next(&mut q, 0);
        }
        q.enqueue(0, pkt(100, 2, 200), &mut |_, _| panic!());
        assert_eq!(next(&mut q, 0).unwrap().id, 100);
        // Flow 2 is empty: the next dequeue moves it behind flow 1 on the old list, and
        // sends flow 1's packet.
        assert_eq!(next(&mut q, 0).unwrap().id, 3);
        assert_eq!(lists(&q), (vec![], vec![1, 2]));
        // Flow 1 runs out of credit and goes behind flow 2; flow 2, empty and old, leaves.
        assert_eq!(next(&mut q, 0).unwrap().id, 4);
        assert_eq!(next(&mut q, 0).unwrap().id, 5);
        assert_eq!(lists(&q), (vec![], vec![1]));
        // Back with a packet: a new flow again.
        q.enqueue(0, pkt(101, 2, 200), &mut |_, _| panic!());
        assert_eq!(lists(&q), (vec![2], vec![1]));
        assert_eq!(q.counters().new_flows, 3);
        assert_eq!(q.counters().flows_max, 2);
    }

    #[test]
    fn backlogged_flows_get_equal_bytes_within_a_quantum() {
        let mut q = fq("fq_codel", 100_000);
        // Flow 1 sends 1500-byte packets, flow 2 300-byte ones, both always backlogged.
        let mut id = 0;
        for _ in 0..2000 {
            q.enqueue(0, pkt(id, 1, 1500), &mut |_, _| panic!());
            id += 1;
        }
        for _ in 0..10_000 {
            q.enqueue(0, pkt(id, 2, 300), &mut |_, _| panic!());
            id += 1;
        }
        let mut sent = [0u64; 3];
        for _ in 0..3000 {
            let p = next(&mut q, 0).unwrap();
            sent[p.flow as usize] += u64::from(p.bytes);
        }
        let diff = sent[1].abs_diff(sent[2]);
        assert!(sent[1] > 700_000, "{sent:?}");
        assert!(diff <= 1514 + 1500, "{sent:?} differ by {diff}");
    }

    #[test]
    fn overflow_drops_from_the_fattest_flow() {
        // Limit 10: flow 1 holds 8 packets of 1000, flow 2 two of 100.
        let mut q = fq("fq_codel", 10);
        for id in 0..8 {
            q.enqueue(0, pkt(id, 1, 1000), &mut |_, _| panic!());
        }
        for id in 8..10 {
            q.enqueue(0, pkt(id, 2, 100), &mut |_, _| panic!());
        }
        // Flow 2's third packet overflows: flow 1's oldest go, half its 8000 bytes.
        let mut dropped = Vec::new();
        q.enqueue(0, pkt(10, 2, 100), &mut |p, c| {
            assert_eq!(c, DropCause::Overflow);
            dropped.push(p.id);
        });
        assert_eq!(dropped, [0, 1, 2, 3]);
        assert_eq!(q.len(), 7);
        // With drop_batch 1, as RFC 8290: one packet each time.
        let mut q = fq("fq_codel drop_batch 1", 10);
        for id in 0..10 {
            q.enqueue(
                0,
                pkt(id, 1 + u32::from(id >= 8), 1000),
                &mut |_, _| panic!(),
            );
        }
        let mut dropped = Vec::new();
        q.enqueue(0, pkt(10, 2, 100), &mut |p, _| dropped.push(p.id));
        assert_eq!((dropped, q.len()), (vec![0], 10));
        assert_eq!(q.counters().dropped_overflow, 1);
    }

    #[test]
    fn each_flow_has_its_own_codel() {
        let mut q = fq("fq_codel", 100_000);
        // Flow 1: a standing queue 100 packets deep, one in and one out per ms. Flow 2: a
        // packet each ms, sent in the same ms (its sojourn is 0).
        let mut dropped = [0u32; 3];
        let mut id = 0;
        for _ in 0..100 {
            q.enqueue(0, pkt(id, 1, 1500), &mut |_, _| {});
            id += 1;
        }
        for ms in 10..1_000 {
            for flow in [1, 2] {
                q.enqueue(ms * MS, pkt(id, flow, 1500), &mut |_, _| {});
                id += 1;
            }
            for _ in 0..2 {
                q.dequeue(ms * MS, &mut |p, c| {
                    assert_eq!(c, DropCause::Aqm);
                    dropped[p.flow as usize] += 1;
                });
            }
        }
        assert!(dropped[1] >= 10, "{dropped:?}");
        assert_eq!(dropped[2], 0);
        let Inner::FqCodel(f) = &q.inner else {
            panic!()
        };
        assert!(f.flows[1].codel.dropping());
        assert!(!f.flows[2].codel.dropping());
    }

    #[test]
    fn ecn_capable_flows_are_marked_not_dropped() {
        // Flow 1 ECN-capable, flow 3 not, both standing queues 100 ms deep.
        let mut q = fq("fq_codel ecn", 100_000);
        let (mut id, mut marked, mut dropped) = (0, [0u32; 4], [0u32; 4]);
        for _ in 0..100 {
            for flow in [1, 3] {
                let p = QueuedPacket {
                    ect: flow == 1,
                    ..pkt(id, flow, 1500)
                };
                q.enqueue(0, p, &mut |_, _| panic!());
                id += 1;
            }
        }
        for ms in 10..1_000 {
            for flow in [1, 3] {
                let p = QueuedPacket {
                    ect: flow == 1,
                    ..pkt(id, flow, 1500)
                };
                q.enqueue(ms * MS, p, &mut |_, _| panic!());
                id += 1;
            }
            for _ in 0..2 {
                let d = q.dequeue(ms * MS, &mut |p, _| dropped[p.flow as usize] += 1);
                if let Some(d) = d.filter(|d| d.mark_ce) {
                    marked[d.packet.flow as usize] += 1;
                }
            }
        }
        assert!(marked[1] >= 10 && dropped[1] == 0, "{marked:?} {dropped:?}");
        assert!(dropped[3] >= 10 && marked[3] == 0, "{marked:?} {dropped:?}");
        let c = q.counters();
        assert_eq!(
            (c.marked, c.dropped_aqm),
            (u64::from(marked[1]), u64::from(dropped[3]))
        );
    }

    #[test]
    fn memory_follows_the_flows_used_not_the_flows_asked_for() {
        let mut q = fq("fq_codel flows 65536", 1000);
        let Inner::FqCodel(f) = &q.inner else {
            panic!()
        };
        assert_eq!(f.flows.allocated(), 0);
        // Three flows: at most three chunks of 256 flows, whatever their hashes.
        for (id, flow) in [7u32, 40_000, 65_535, 7].into_iter().enumerate() {
            q.enqueue(0, pkt(id as u32, flow, 100), &mut |_, _| panic!());
        }
        let Inner::FqCodel(f) = &q.inner else {
            panic!()
        };
        assert_eq!(f.flows.allocated(), 3);
        assert_eq!(lists(&q), (vec![7, 40_000, 65_535], vec![]));
        while next(&mut q, 0).is_some() {}
        assert!(q.is_empty());
    }
}
