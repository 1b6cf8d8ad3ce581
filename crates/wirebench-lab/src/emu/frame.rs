//! The frames the emulator holds: their buffers, reused from a pool, and the cut of a GSO
//! frame whose wire packets the link treats apart into runs that each travel whole.

use std::collections::VecDeque;
use std::ops::Range;
use std::time::Duration;

use super::DirectionReport;
use crate::gso::{Plan, VNET_HDR_LEN};

/// Largest frame a slot holds: a 1500-byte MTU with its Ethernet and VLAN headers (and a
/// virtio header), rounded up.
pub(super) const SLOT: usize = 2048;
/// What a frame may take beyond its slot: the rest of the largest GSO frame (an IP packet of
/// 64 KiB, its Ethernet and virtio headers).
pub(super) const BIG: usize = 64 << 10;

/// A frame's slot.
pub(super) type Slot = Box<[u8; SLOT]>;
/// The space a GSO frame takes beyond its slot.
pub(super) type Big = Box<[u8; BIG]>;

/// A GSO frame travels whole when the link delivers all of its wire packets within this
/// span, at the last one's time: no wire packet is held back longer to travel with its
/// neighbours. Otherwise it is cut into runs that each are. At 5 Gbit/s this is 21 packets
/// of 1500 bytes; at 1 Gbit/s, 4.
const HOLD: Duration = Duration::from_micros(50);

/// A frame the emulator holds: its slot and, for a GSO frame longer than a slot, the rest.
pub(super) struct Frame {
    pub(super) slot: Slot,
    big: Option<Big>,
    pub(super) len: usize,
    /// Its place among the UDP datagrams that reached the link, when it is one and the link
    /// treats each wire packet apart; [`NOT_COUNTED`] otherwise. A copy keeps its original's.
    pub(super) udp_index: u64,
    /// A bit of it was flipped.
    pub(super) corrupt: bool,
}

/// [`Frame::udp_index`] of a frame that is not counted as a UDP datagram.
pub(super) const NOT_COUNTED: u64 = u64::MAX;

impl Frame {
    /// A frame of `len` bytes in `slot` and `big`, not counted as a UDP datagram, intact.
    pub(super) fn new(slot: Slot, big: Option<Big>, len: usize) -> Self {
        Self {
            slot,
            big,
            len,
            udp_index: NOT_COUNTED,
            corrupt: false,
        }
    }

    /// A copy of the frame, in buffers from `pool`, counted as the same datagram.
    pub(super) fn copy(&self, pool: &mut Pool) -> Self {
        let mut c = Self {
            udp_index: self.udp_index,
            ..Self::new(pool.slot(), None, 0)
        };
        let (a, b) = self.parts();
        c.extend(a, pool);
        c.extend(b, pool);
        c
    }

    /// The frame's bytes, in its slot and past it.
    pub(super) fn parts(&self) -> (&[u8], &[u8]) {
        let a = self.len.min(SLOT);
        let b = self.big.as_ref().map_or(&[][..], |b| &b[..self.len - a]);
        (&self.slot[..a], b)
    }

    /// Bytes `r` of the frame, in its slot and past it.
    fn range(&self, r: Range<usize>) -> (&[u8], &[u8]) {
        let (a, b) = self.parts();
        let split = r.start.min(a.len())..r.end.min(a.len());
        let rest = r.start.saturating_sub(a.len())..r.end.saturating_sub(a.len());
        (&a[split], &b[rest])
    }

    /// The frame's first bytes, those its slot holds: all of its headers.
    fn head_mut(&mut self) -> &mut [u8] {
        &mut self.slot[..self.len.min(SLOT)]
    }

    /// Appends `bytes`, past the slot into a buffer from `pool`.
    fn extend(&mut self, mut bytes: &[u8], pool: &mut Pool) {
        if self.len < SLOT {
            let k = bytes.len().min(SLOT - self.len);
            self.slot[self.len..self.len + k].copy_from_slice(&bytes[..k]);
            self.len += k;
            bytes = &bytes[k..];
        }
        if !bytes.is_empty() {
            let at = self.len - SLOT;
            let big = self.big.get_or_insert_with(|| pool.big());
            big[at..at + bytes.len()].copy_from_slice(bytes);
            self.len += bytes.len();
        }
    }
}

/// Frame buffers for reuse: they grow to the most ever in flight, and nothing is allocated
/// per frame after that.
#[derive(Default)]
pub(super) struct Pool {
    slots: Vec<Slot>,
    bigs: Vec<Big>,
}

impl Pool {
    pub(super) fn slot(&mut self) -> Slot {
        self.slots.pop().unwrap_or_else(|| Box::new([0; SLOT]))
    }

    pub(super) fn big(&mut self) -> Big {
        self.bigs.pop().unwrap_or_else(|| {
            // Made on the heap: 64 KiB is too much for a thread's stack in a debug build.
            match vec![0u8; BIG].into_boxed_slice().try_into() {
                Ok(b) => b,
                Err(_) => unreachable!("a boxed slice of BIG bytes is a boxed [u8; BIG]"),
            }
        })
    }

    pub(super) fn put(&mut self, f: Frame) {
        self.slots.push(f.slot);
        self.bigs.extend(f.big);
    }
}

/// Puts a GSO frame's wire packets, delivered at `times` (`None`: dropped), on `pending`:
/// whole, when all of them are delivered within [`HOLD`]; else cut into runs of delivered
/// packets that each are: a run from the first packet in the frame's own buffers, the
/// others copied into frames of their own.
pub(super) fn deliver_segments(
    plan: &Plan,
    frame: Frame,
    times: &[Option<u64>],
    pending: &mut VecDeque<(u64, Frame)>,
    pool: &mut Pool,
    report: &mut DirectionReport,
) {
    let within =
        |t0: u64, t: Option<u64>| t.is_some_and(|t| t.saturating_sub(t0) <= HOLD.as_nanos() as u64);
    // A GSO frame of one segment is one wire packet: counted in neither, so that the split
    // frames stay a part of the GSO frames.
    let many = u64::from(times.len() > 1);
    report.gso_frames += many;
    if let (Some(Some(t0)), Some(&last)) = (times.first(), times.last()) {
        if times.iter().all(|&t| within(*t0, t)) {
            pending.push_back((last.unwrap_or(*t0), frame));
            return;
        }
    }
    report.split_frames += many;
    // The first run, when it starts at the frame's first packet, stays in the frame's own
    // buffers (cut down to it once the other runs are copied out): with a full drop-tail
    // queue, the usual cut is a frame's tail dropped, and then nothing is copied.
    let at = pending.len();
    let mut first_run = None;
    let mut k = 0;
    while k < times.len() {
        let Some(t0) = times[k] else {
            k += 1;
            continue;
        };
        let mut j = k + 1;
        while j < times.len() && within(t0, times[j]) {
            j += 1;
        }
        if k == 0 {
            first_run = Some((j, times[j - 1].unwrap_or(t0)));
            k = j;
            continue;
        }
        let mut out = Frame::new(pool.slot(), None, plan.headers_len());
        plan.write_headers(
            &frame.slot[VNET_HDR_LEN..],
            k,
            j - k,
            &mut out.slot[..plan.headers_len()],
        );
        let r = plan.payload_range(k, j - k);
        let (a, b) = frame.range(VNET_HDR_LEN + r.start..VNET_HDR_LEN + r.end);
        out.extend(a, pool);
        out.extend(b, pool);
        pending.push_back((times[j - 1].unwrap_or(t0), out));
        k = j;
    }
    match first_run {
        Some((n, time)) => {
            let mut frame = frame;
            frame.len = plan.keep_first(frame.head_mut(), n);
            if frame.len <= SLOT {
                pool.bigs.extend(frame.big.take());
            }
            pending.insert(at, (time, frame));
        }
        None => pool.put(frame),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gso::{VnetHdr, ETH_HLEN};

    const MSS: usize = 100;

    /// A UDP GSO frame as a packet socket hands it over (virtio header, Ethernet, IPv4,
    /// UDP), of `segments` payloads of [`MSS`] bytes, segment k's bytes all k; and its plan.
    fn udp_gso_frame(pool: &mut Pool, segments: usize) -> (Plan, Frame) {
        let mut b = vec![0u8; VNET_HDR_LEN + ETH_HLEN + 28 + segments * MSS];
        b[0] = 1; // the device completes the checksum
        b[1] = 5; // UDP segmentation
        for (at, v) in [(2, 42u16), (4, MSS as u16), (6, 34), (8, 6)] {
            b[at..at + 2].copy_from_slice(&v.to_ne_bytes());
        }
        let l3 = VNET_HDR_LEN + ETH_HLEN;
        b[l3 - 2..l3].copy_from_slice(&[0x08, 0x00]);
        b[l3] = 0x45;
        b[l3 + 9] = 17;
        for k in 0..segments {
            b[l3 + 28 + k * MSS..l3 + 28 + (k + 1) * MSS].fill(k as u8);
        }
        let vnet = VnetHdr::read(&b).expect("a virtio header");
        let plan = Plan::parse(&vnet, &b[VNET_HDR_LEN..], b.len() - VNET_HDR_LEN)
            .expect("well formed")
            .expect("a GSO frame");
        let mut frame = Frame::new(pool.slot(), None, 0);
        frame.extend(&b, pool);
        (plan, frame)
    }

    /// A frame's datagrams: (UDP length from its header, its payload's bytes).
    fn datagram(f: &Frame) -> (usize, Vec<u8>) {
        let (a, b) = f.parts();
        let bytes = [a, b].concat();
        let udp = VNET_HDR_LEN + ETH_HLEN + 20;
        let len = usize::from(u16::from_be_bytes([bytes[udp + 4], bytes[udp + 5]]));
        (len, bytes[udp + 8..].to_vec())
    }

    fn segments_bytes(ks: &[u8]) -> Vec<u8> {
        ks.iter().flat_map(|&k| [k; MSS]).collect()
    }

    #[test]
    fn a_frame_whose_tail_is_dropped_goes_on_in_its_own_buffers() {
        let mut pool = Pool::default();
        let (plan, frame) = udp_gso_frame(&mut pool, 30);
        assert!(frame.big.is_some(), "the frame is longer than a slot");
        let slot = frame.slot.as_ptr();
        let mut times = vec![Some(0), Some(10), Some(20)];
        times.resize(30, None);
        let (mut pending, mut report) = (VecDeque::new(), DirectionReport::default());
        deliver_segments(&plan, frame, &times, &mut pending, &mut pool, &mut report);
        assert_eq!((report.gso_frames, report.split_frames), (1, 1));
        assert_eq!(pending.len(), 1);
        let (at, f) = &pending[0];
        assert_eq!(*at, 20, "sent with its last packet");
        assert!(std::ptr::eq(f.slot.as_ptr(), slot), "not copied");
        assert!(f.big.is_none(), "the rest of its buffers back in the pool");
        assert_eq!(pool.bigs.len(), 1);
        assert_eq!(datagram(f), (8 + 3 * MSS, segments_bytes(&[0, 1, 2])));
    }

    #[test]
    fn a_frame_cut_in_runs_keeps_the_first_in_place_and_the_order_of_time() {
        let mut pool = Pool::default();
        let (plan, frame) = udp_gso_frame(&mut pool, 6);
        let slot = frame.slot.as_ptr();
        let hold = HOLD.as_nanos() as u64;
        // Packet 1 dropped; 2 and 3 together; 4 more than the hold after 2; 5 dropped.
        let times = [Some(0), None, Some(5), Some(6), Some(5 + hold + 1), None];
        let (mut pending, mut report) = (VecDeque::new(), DirectionReport::default());
        pending.push_back((0, udp_gso_frame(&mut pool, 1).1)); // one already waiting
        deliver_segments(&plan, frame, &times, &mut pending, &mut pool, &mut report);
        let at: Vec<u64> = pending.iter().map(|p| p.0).collect();
        assert_eq!(at, [0, 0, 6, 5 + hold + 1]);
        assert!(
            std::ptr::eq(pending[1].1.slot.as_ptr(), slot),
            "first run in place"
        );
        let got: Vec<(usize, Vec<u8>)> = pending.iter().skip(1).map(|p| datagram(&p.1)).collect();
        assert_eq!(
            got,
            [
                (8 + MSS, segments_bytes(&[0])),
                (8 + 2 * MSS, segments_bytes(&[2, 3])),
                (8 + MSS, segments_bytes(&[4])),
            ]
        );
    }

    #[test]
    fn a_frame_without_a_delivered_packet_goes_back_to_the_pool() {
        let mut pool = Pool::default();
        let (plan, frame) = udp_gso_frame(&mut pool, 30);
        let (mut pending, mut report) = (VecDeque::new(), DirectionReport::default());
        deliver_segments(
            &plan,
            frame,
            &[None; 30],
            &mut pending,
            &mut pool,
            &mut report,
        );
        assert!(pending.is_empty());
        assert_eq!((pool.slots.len(), pool.bigs.len()), (1, 1));
    }
}
