//! Wire packets inside a segmentation-offload frame, with no socket: what the emulator needs
//! to charge a GSO frame's rate and loss per wire packet, and to cut it where the link
//! treats its packets differently.
//!
//! A packet socket with `PACKET_VNET_HDR` hands over each frame behind a `virtio_net_hdr`
//! (the virtio specification, "Device Operation: Packet Transmission"): for a frame that a
//! host's TCP (TSO) or UDP (`UDP_SEGMENT`) built larger than a wire packet, the header says
//! the segment size and where the transport checksum starts, and the checksum field holds the
//! pseudo-header sum that the device completes. Sending a frame back with such a header has
//! the kernel cut it into wire packets as late as it can, on the far side of the link.
//!
//! [`Plan::parse`] reads such a frame's layout; [`Plan::write_headers`] writes the headers
//! of a run of its segments as the kernel's own segmentation would (`tcp_gso_segment`,
//! `__udp_gso_segment`, `inet_gso_segment`): sequence numbers moved on, FIN and PSH only on
//! the last segment and CWR only on the first, IPv4 identifiers counted up, lengths and the
//! IPv4 header checksum rewritten, and the transport checksum left partial for the device.

use std::ops::Range;

/// Length of a `virtio_net_hdr` (without the `num_buffers` of the mergeable variant).
pub const VNET_HDR_LEN: usize = 10;
/// Ethernet header length.
pub const ETH_HLEN: usize = 14;

/// `VIRTIO_NET_HDR_F_NEEDS_CSUM`: the checksum from `csum_start` on is left to the device.
/// The most header bytes a frame may have before its payload: Ethernet, IPv4 with options
/// (or IPv6), TCP with options.
const MAX_HEADERS: usize = ETH_HLEN + 60 + 60;

const NEEDS_CSUM: u8 = 1;
/// `VIRTIO_NET_HDR_GSO_*` values.
const GSO_NONE: u8 = 0;
const GSO_TCPV4: u8 = 1;
const GSO_TCPV6: u8 = 4;
const GSO_UDP_L4: u8 = 5;
/// `VIRTIO_NET_HDR_GSO_ECN`, or-ed into a TCP type.
const GSO_ECN: u8 = 0x80;

/// TCP flags rewritten per segment.
const TCP_FIN: u8 = 0x01;
const TCP_PSH: u8 = 0x08;
const TCP_CWR: u8 = 0x80;

/// A `virtio_net_hdr`, in this machine's byte order (a packet socket's is the legacy,
/// native one).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VnetHdr {
    /// `VIRTIO_NET_HDR_F_*`.
    pub flags: u8,
    /// `VIRTIO_NET_HDR_GSO_*`, with the ECN bit.
    pub gso_type: u8,
    /// Length of the headers that each segment repeats.
    pub hdr_len: u16,
    /// Payload bytes per segment.
    pub gso_size: u16,
    /// Where the checksum the device completes starts (from the Ethernet header).
    pub csum_start: u16,
    /// Where, from `csum_start`, the device stores it.
    pub csum_offset: u16,
}

impl VnetHdr {
    /// Reads the header at the start of `b`; `None` if `b` is too short.
    pub fn read(b: &[u8]) -> Option<Self> {
        let b: &[u8; VNET_HDR_LEN] = b.get(..VNET_HDR_LEN)?.try_into().ok()?;
        let u16_at = |i: usize| u16::from_ne_bytes([b[i], b[i + 1]]);
        Some(Self {
            flags: b[0],
            gso_type: b[1],
            hdr_len: u16_at(2),
            gso_size: u16_at(4),
            csum_start: u16_at(6),
            csum_offset: u16_at(8),
        })
    }

    /// Writes the header into the first [`VNET_HDR_LEN`] bytes of `out`.
    fn write(&self, out: &mut [u8]) {
        out[0] = self.flags;
        out[1] = self.gso_type;
        out[2..4].copy_from_slice(&self.hdr_len.to_ne_bytes());
        out[4..6].copy_from_slice(&self.gso_size.to_ne_bytes());
        out[6..8].copy_from_slice(&self.csum_start.to_ne_bytes());
        out[8..10].copy_from_slice(&self.csum_offset.to_ne_bytes());
    }

    /// Whether the frame behind this header is more than one wire packet.
    pub fn is_gso(&self) -> bool {
        self.gso_type & !GSO_ECN != GSO_NONE
    }
}

/// A GSO frame that cannot be cut into wire packets: a kind of offload this module does not
/// know, or headers that do not match what the virtio header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a segmentation-offload frame that cannot be cut into wire packets")]
pub struct Malformed;

/// The transport of a GSO frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    Tcp,
    Udp,
}

/// How a GSO frame (the bytes after its virtio header) is cut into wire packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    vnet: VnetHdr,
    transport: Transport,
    v6: bool,
    /// Offsets in the frame: the IP header, the transport header, the payload.
    l3: usize,
    l4: usize,
    payload: usize,
    /// Payload bytes of the whole frame.
    payload_len: usize,
    /// Payload bytes per segment.
    mss: usize,
}

impl Plan {
    /// The layout of a frame of `len` bytes (after the virtio header `vnet`) whose first
    /// bytes are `head` (at least its headers: 14 + 60 + 60 bytes, or all of a shorter
    /// frame). `Ok(None)`: not a GSO frame, one wire packet as it is.
    ///
    /// # Errors
    ///
    /// [`Malformed`] for a GSO frame of a kind other than TCP over IPv4 or IPv6 and UDP
    /// (`UDP_SEGMENT`), or whose headers do not agree with `vnet`.
    pub fn parse(vnet: &VnetHdr, head: &[u8], len: usize) -> Result<Option<Self>, Malformed> {
        if !vnet.is_gso() {
            return Ok(None);
        }
        let transport = match vnet.gso_type & !GSO_ECN {
            GSO_TCPV4 | GSO_TCPV6 => Transport::Tcp,
            GSO_UDP_L4 => Transport::Udp,
            _ => return Err(Malformed),
        };
        let l3 = ETH_HLEN;
        let byte = |i: usize| head.get(i).copied().ok_or(Malformed);
        let (v6, l4, proto) = match byte(l3)? >> 4 {
            4 => {
                let ihl = usize::from(byte(l3)? & 0x0f) * 4;
                (false, l3 + ihl.max(20), byte(l3 + 9)?)
            }
            // Extension headers are not followed: the kernel's own TCP and UDP send none.
            6 => (true, l3 + 40, byte(l3 + 6)?),
            _ => return Err(Malformed),
        };
        let payload = match (transport, proto) {
            (Transport::Tcp, 6) => l4 + usize::from(byte(l4 + 12)? >> 4).max(5) * 4,
            (Transport::Udp, 17) => l4 + 8,
            _ => return Err(Malformed),
        };
        let mss = usize::from(vnet.gso_size);
        let csum_offset = if transport == Transport::Tcp { 16 } else { 6 };
        if mss == 0
            || payload > head.len()
            || len < payload
            || vnet.flags & NEEDS_CSUM == 0
            || usize::from(vnet.csum_start) != l4
            || usize::from(vnet.csum_offset) != csum_offset
        {
            return Err(Malformed);
        }
        Ok(Some(Self {
            vnet: *vnet,
            transport,
            v6,
            l3,
            l4,
            payload,
            payload_len: len - payload,
            mss,
        }))
    }

    /// How many wire packets the frame is.
    pub fn segments(&self) -> usize {
        self.payload_len.div_ceil(self.mss).max(1)
    }

    /// The length of wire packet `k` from its IP header on, bytes.
    pub fn ip_len(&self, k: usize) -> usize {
        (self.payload - self.l3) + self.payload_range(k, 1).len()
    }

    /// Where the payload of segments `first..first + n` lies in the frame.
    pub fn payload_range(&self, first: usize, n: usize) -> Range<usize> {
        let start = (first * self.mss).min(self.payload_len);
        let end = ((first + n) * self.mss).min(self.payload_len);
        self.payload + start..self.payload + end
    }

    /// Bytes [`write_headers`](Self::write_headers) writes: the virtio header and the frame's
    /// headers.
    pub fn headers_len(&self) -> usize {
        VNET_HDR_LEN + self.payload
    }

    /// Writes into `out` (at least [`headers_len`](Self::headers_len) bytes) the virtio
    /// header and the Ethernet, IP and transport headers of one frame that carries segments
    /// `first..first + n` of this one: a GSO frame itself when `n` > 1, a plain packet
    /// otherwise; either way with the transport checksum left to the device. `head` is the
    /// original frame's first bytes, as given to [`parse`](Self::parse). The payload, from
    /// [`payload_range`](Self::payload_range), follows.
    pub fn write_headers(&self, head: &[u8], first: usize, n: usize, out: &mut [u8]) {
        let last = first + n >= self.segments();
        let payload_len = self.payload_range(first, n).len();
        let mut vnet = VnetHdr {
            flags: NEEDS_CSUM,
            hdr_len: self.payload as u16,
            ..self.vnet
        };
        if n <= 1 {
            vnet.gso_type = GSO_NONE;
            vnet.gso_size = 0;
        }
        vnet.write(out);
        let f = &mut out[VNET_HDR_LEN..VNET_HDR_LEN + self.payload];
        f.copy_from_slice(&head[..self.payload]);
        let (l3, l4) = (self.l3, self.l4);
        let l4_len = self.payload - l4 + payload_len;
        if self.v6 {
            put16(f, l3 + 4, (self.payload - l3 - 40 + payload_len) as u16);
        } else {
            put16(f, l3 + 2, (self.payload - l3 + payload_len) as u16);
            let id = get16(f, l3 + 4).wrapping_add(first as u16);
            put16(f, l3 + 4, id);
            put16(f, l3 + 10, 0);
            let sum = !fold(sum16(&f[l3..l4], 0));
            put16(f, l3 + 10, sum);
        }
        match self.transport {
            Transport::Tcp => {
                let seq = get32(f, l4 + 4).wrapping_add((first * self.mss) as u32);
                f[l4 + 4..l4 + 8].copy_from_slice(&seq.to_be_bytes());
                if first > 0 {
                    f[l4 + 13] &= !TCP_CWR;
                }
                if !last {
                    f[l4 + 13] &= !(TCP_FIN | TCP_PSH);
                }
                put16(f, l4 + 16, self.pseudo_sum(f, l4_len));
            }
            Transport::Udp => {
                put16(f, l4 + 4, l4_len as u16);
                put16(f, l4 + 6, self.pseudo_sum(f, l4_len));
            }
        }
    }

    /// Cuts a frame (its virtio header, then the bytes this plan describes) down to its
    /// first `n` segments where it lies: rewrites its headers as
    /// [`write_headers`](Self::write_headers) does for segments `0..n`, whose payload is
    /// already in place after them, and returns the frame's new length. The bytes past it
    /// are let go by the caller. No payload byte is copied.
    pub fn keep_first(&self, frame: &mut [u8], n: usize) -> usize {
        let mut head = [0u8; MAX_HEADERS];
        let head = &mut head[..self.payload];
        head.copy_from_slice(&frame[VNET_HDR_LEN..VNET_HDR_LEN + self.payload]);
        self.write_headers(head, 0, n, &mut frame[..self.headers_len()]);
        VNET_HDR_LEN + self.payload_range(0, n).end
    }

    /// The pseudo-header's sum, folded and not inverted: what a checksum field holds for a
    /// device to complete (the kernel's `~tcp_v4_check(len, saddr, daddr, 0)`).
    fn pseudo_sum(&self, f: &[u8], l4_len: usize) -> u16 {
        let proto = match self.transport {
            Transport::Tcp => 6u32,
            Transport::Udp => 17,
        };
        let addrs = if self.v6 {
            &f[self.l3 + 8..self.l3 + 40]
        } else {
            &f[self.l3 + 12..self.l3 + 20]
        };
        let len = l4_len as u32;
        fold(sum16(addrs, proto + (len >> 16) + (len & 0xffff)))
    }
}

fn get16(b: &[u8], i: usize) -> u16 {
    u16::from_be_bytes([b[i], b[i + 1]])
}

fn get32(b: &[u8], i: usize) -> u32 {
    u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

fn put16(b: &mut [u8], i: usize, v: u16) {
    b[i..i + 2].copy_from_slice(&v.to_be_bytes());
}

/// The ones'-complement sum of `b` as big-endian 16-bit words (RFC 1071), added to `acc`,
/// not folded.
fn sum16(b: &[u8], mut acc: u32) -> u32 {
    let mut chunks = b.chunks_exact(2);
    for c in &mut chunks {
        acc += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        acc += u32::from(*last) << 8;
    }
    acc
}

/// Folds a 32-bit ones'-complement sum to 16 bits.
fn fold(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: usize = 1000;

    /// A TCP/IPv4 frame (behind its virtio header) of `payload` bytes as TSO hands it over:
    /// full lengths, checksum field holding the pseudo-header sum over the whole length.
    fn tcp4_frame(payload: usize, flags: u8) -> Vec<u8> {
        let mut f = vec![0u8; VNET_HDR_LEN + ETH_HLEN + 20 + 32 + payload];
        let l3 = VNET_HDR_LEN + ETH_HLEN;
        let l4 = l3 + 20;
        f[VNET_HDR_LEN + 12..VNET_HDR_LEN + 14].copy_from_slice(&[0x08, 0x00]);
        f[l3] = 0x45;
        put16(&mut f, l3 + 2, (20 + 32 + payload) as u16);
        put16(&mut f, l3 + 4, 0xfffe); // the identifier wraps within the frame
        f[l3 + 6] = 0x40; // DF
        f[l3 + 8] = 64;
        f[l3 + 9] = 6;
        f[l3 + 12..l3 + 16].copy_from_slice(&[10, 77, 0, 1]);
        f[l3 + 16..l3 + 20].copy_from_slice(&[10, 77, 0, 2]);
        f[l4..l4 + 2].copy_from_slice(&5300u16.to_be_bytes());
        f[l4 + 2..l4 + 4].copy_from_slice(&40000u16.to_be_bytes());
        f[l4 + 4..l4 + 8].copy_from_slice(&0xffff_fc00u32.to_be_bytes()); // wraps too
        f[l4 + 12] = 8 << 4; // 32-byte header: timestamps
        f[l4 + 13] = flags;
        f[l4 + 20..l4 + 32].copy_from_slice(&[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2]);
        for (i, b) in f[l4 + 32..].iter_mut().enumerate() {
            *b = (i * 7 + 3) as u8;
        }
        let vnet = VnetHdr {
            flags: NEEDS_CSUM,
            gso_type: GSO_TCPV4,
            hdr_len: (ETH_HLEN + 52) as u16,
            gso_size: MSS as u16,
            csum_start: (ETH_HLEN + 20) as u16,
            csum_offset: 16,
        };
        vnet.write(&mut f);
        let frame = &f[VNET_HDR_LEN..];
        let plan_sum = fold(sum16(&frame[14 + 12..14 + 20], 6 + (32 + payload) as u32));
        put16(&mut f, l4 + 16, plan_sum);
        f
    }

    /// Cuts `frame` into groups of `sizes` segments, and completes each group's checksum as
    /// a device would.
    fn cut(frame: &[u8], sizes: &[usize]) -> Vec<Vec<u8>> {
        let vnet = VnetHdr::read(frame).expect("header");
        let body = &frame[VNET_HDR_LEN..];
        let plan = Plan::parse(&vnet, body, body.len())
            .expect("parses")
            .expect("GSO");
        let mut out = Vec::new();
        let mut first = 0;
        for &n in sizes {
            let mut g = vec![0u8; plan.headers_len()];
            plan.write_headers(body, first, n, &mut g);
            g.extend_from_slice(&body[plan.payload_range(first, n)]);
            out.push(g);
            first += n;
        }
        assert_eq!(first, plan.segments());
        out
    }

    /// Completes a partial checksum as a device does, then checks it the way a receiver
    /// does: the sum over the pseudo-header and the segment is all ones.
    fn device_checksum_ok(g: &[u8]) -> bool {
        let vnet = VnetHdr::read(g).expect("header");
        let mut f = g[VNET_HDR_LEN..].to_vec();
        let start = usize::from(vnet.csum_start);
        let at = start + usize::from(vnet.csum_offset);
        let sum = !fold(sum16(&f[start..], 0));
        put16(&mut f, at, sum);
        let l3 = ETH_HLEN;
        let proto = u32::from(f[l3 + 9]);
        let len = (f.len() - start) as u32;
        fold(sum16(&f[start..], sum16(&f[l3 + 12..l3 + 20], proto + len))) == 0xffff
            && fold(sum16(&f[l3..start], 0)) == 0xffff
    }

    #[test]
    fn tcp_segments_carry_on_the_byte_stream() {
        let frame = tcp4_frame(3 * MSS + 500, TCP_CWR | TCP_PSH | TCP_FIN | 0x10);
        let segs = cut(&frame, &[1, 1, 1, 1]);
        let mut data = Vec::new();
        for (k, g) in segs.iter().enumerate() {
            let vnet = VnetHdr::read(g).expect("header");
            assert!(!vnet.is_gso());
            let f = &g[VNET_HDR_LEN..];
            let (l3, l4) = (ETH_HLEN, ETH_HLEN + 20);
            let len = if k < 3 { MSS } else { 500 };
            assert_eq!(usize::from(get16(f, l3 + 2)), 52 + len);
            assert_eq!(get16(f, l3 + 4), 0xfffeu16.wrapping_add(k as u16));
            assert_eq!(
                get32(f, l4 + 4),
                0xffff_fc00u32.wrapping_add((k * MSS) as u32)
            );
            let flags = f[l4 + 13];
            assert_eq!(flags & TCP_CWR != 0, k == 0, "CWR on the first only");
            assert_eq!(
                flags & (TCP_FIN | TCP_PSH) != 0,
                k == 3,
                "FIN, PSH on the last"
            );
            assert_eq!(flags & 0x10, 0x10, "ACK on all");
            assert_eq!(f.len(), ETH_HLEN + 52 + len);
            assert!(device_checksum_ok(g), "segment {k}");
            data.extend_from_slice(&f[ETH_HLEN + 52..]);
        }
        assert_eq!(data, frame[VNET_HDR_LEN + ETH_HLEN + 52..]);
    }

    #[test]
    fn a_run_of_segments_stays_one_gso_frame() {
        let frame = tcp4_frame(5 * MSS, 0x10 | TCP_PSH);
        let groups = cut(&frame, &[2, 3]);
        let v = VnetHdr::read(&groups[1]).expect("header");
        assert_eq!((v.gso_type, usize::from(v.gso_size)), (GSO_TCPV4, MSS));
        let f = &groups[1][VNET_HDR_LEN..];
        assert_eq!(usize::from(get16(f, ETH_HLEN + 2)), 52 + 3 * MSS);
        assert_eq!(f[ETH_HLEN + 20 + 13] & TCP_PSH, TCP_PSH);
        assert_eq!(groups[0][VNET_HDR_LEN + ETH_HLEN + 20 + 13] & TCP_PSH, 0);
        // A group's checksum is partial over its own length, as a device completes it
        // before it cuts the group (the kernel's segmentation then adjusts per segment).
        assert!(groups.iter().all(|g| device_checksum_ok(g)));
    }

    #[test]
    fn a_frame_cut_to_its_first_segments_where_it_lies_equals_a_copied_cut() {
        let frame = tcp4_frame(5 * MSS + 300, 0x10 | TCP_PSH | TCP_CWR);
        let body = &frame[VNET_HDR_LEN..];
        let plan = Plan::parse(&VnetHdr::read(&frame).expect("h"), body, body.len())
            .expect("ok")
            .expect("gso");
        for n in [1, 2, 5] {
            let copied = &cut(&frame, &[n, plan.segments() - n])[0];
            let mut in_place = frame.clone();
            let len = plan.keep_first(&mut in_place, n);
            assert_eq!(&in_place[..len], &copied[..], "first {n} segments");
        }
    }

    #[test]
    fn wire_lengths_add_up_to_the_frame() {
        let frame = tcp4_frame(2 * MSS + 1, 0x10);
        let body = &frame[VNET_HDR_LEN..];
        let plan = Plan::parse(&VnetHdr::read(&frame).expect("h"), body, body.len())
            .expect("ok")
            .expect("gso");
        assert_eq!(plan.segments(), 3);
        let lens: Vec<usize> = (0..3).map(|k| plan.ip_len(k)).collect();
        assert_eq!(lens, [52 + MSS, 52 + MSS, 53]);
    }

    #[test]
    fn udp_segments_are_datagrams_of_their_own() {
        let n = 1472;
        let payload = 3 * n;
        let mut frame = vec![0u8; VNET_HDR_LEN + ETH_HLEN + 28 + payload];
        let l3 = VNET_HDR_LEN + ETH_HLEN;
        frame[l3] = 0x45;
        frame[l3 + 9] = 17;
        frame[l3 + 12..l3 + 20].copy_from_slice(&[10, 77, 0, 1, 10, 77, 0, 2]);
        let vnet = VnetHdr {
            flags: NEEDS_CSUM,
            gso_type: GSO_UDP_L4,
            hdr_len: (ETH_HLEN + 28) as u16,
            gso_size: n as u16,
            csum_start: (ETH_HLEN + 20) as u16,
            csum_offset: 6,
        };
        vnet.write(&mut frame);
        for g in cut(&frame, &[1, 1, 1]) {
            let f = &g[VNET_HDR_LEN..];
            assert_eq!(usize::from(get16(f, ETH_HLEN + 20 + 4)), 8 + n);
            assert_eq!(usize::from(get16(f, ETH_HLEN + 2)), 28 + n);
            assert!(device_checksum_ok(&g));
        }
    }

    #[test]
    fn what_it_cannot_cut_is_refused_not_guessed() {
        let frame = tcp4_frame(2 * MSS, 0x10);
        let body = &frame[VNET_HDR_LEN..];
        let good = VnetHdr::read(&frame).expect("h");
        for bad in [
            VnetHdr {
                gso_type: 3, // UFO: fragments, not datagrams
                ..good
            },
            VnetHdr {
                gso_size: 0,
                ..good
            },
            VnetHdr {
                csum_start: 20,
                ..good
            },
            VnetHdr { flags: 0, ..good },
        ] {
            assert_eq!(Plan::parse(&bad, body, body.len()), Err(Malformed));
        }
        assert_eq!(Plan::parse(&good, &body[..40], body.len()), Err(Malformed));
        let plain = VnetHdr::default();
        assert_eq!(Plan::parse(&plain, body, body.len()), Ok(None));
    }
}
