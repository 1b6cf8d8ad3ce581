//! What the link reads and writes in a packet's IP header: its flow (for fq_codel's flow
//! queues), whether it is ECN-capable, and the Congestion Experienced mark an AQM sets.
//! Each takes the IP packet (no Ethernet header) and never panics on a short one.

use crate::splitmix::mix;

/// ECN's two bits in the IP header: Congestion Experienced.
const CE: u8 = 0b11;

/// A hash of the packet's flow: addresses, protocol and (for TCP and UDP, unfragmented)
/// ports. Packets of one flow always hash alike; 0 for what is not IPv4 or IPv6.
pub fn flow_hash(ip: &[u8]) -> u32 {
    let (proto, addrs, l4) = match ip.first().map(|b| b >> 4) {
        Some(4) if ip.len() >= 20 => {
            let ihl = usize::from(ip[0] & 0x0f) * 4;
            // A fragment after the first carries no ports.
            let first = u16::from_be_bytes([ip[6], ip[7]]) & 0x1fff == 0;
            (ip[9], &ip[12..20], first.then_some(ihl))
        }
        Some(6) if ip.len() >= 40 => (ip[6], &ip[8..40], Some(40)),
        _ => return 0,
    };
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ u64::from(proto);
    for chunk in addrs.chunks(8) {
        let mut w = [0u8; 8];
        w[..chunk.len()].copy_from_slice(chunk);
        h = mix(h ^ u64::from_le_bytes(w));
    }
    if matches!(proto, 6 | 17) {
        if let Some(ports) = l4.and_then(|o| ip.get(o..o + 4)) {
            h = mix(h ^ u64::from(u32::from_be_bytes([ports[0], ports[1], ports[2], ports[3]])));
        }
    }
    (h ^ (h >> 32)) as u32
}

/// The packet's ECN field (0: not ECN-capable; 1, 2: ECT; 3: CE).
pub fn ecn(ip: &[u8]) -> u8 {
    match ip.first().map(|b| b >> 4) {
        Some(4) => ip.get(1).map_or(0, |tos| tos & 0b11),
        Some(6) => ip.get(1).map_or(0, |b| (b >> 4) & 0b11),
        _ => 0,
    }
}

/// Sets Congestion Experienced on an ECN-capable packet, updating the IPv4 header checksum
/// (RFC 1624's incremental update). False if the packet is not ECN-capable, or too short.
pub fn set_ce(ip: &mut [u8]) -> bool {
    if ecn(ip) == 0 {
        return false;
    }
    match ip[0] >> 4 {
        4 if ip.len() >= 20 => {
            let old = u16::from_be_bytes([ip[0], ip[1]]);
            ip[1] |= CE;
            let new = u16::from_be_bytes([ip[0], ip[1]]);
            let sum = u16::from_be_bytes([ip[10], ip[11]]);
            // HC' = ~(~HC + ~m + m'), in one's complement.
            let mut acc = u32::from(!sum) + u32::from(!old) + u32::from(new);
            while acc > 0xffff {
                acc = (acc & 0xffff) + (acc >> 16);
            }
            ip[10..12].copy_from_slice(&(!(acc as u16)).to_be_bytes());
            true
        }
        6 => {
            ip[1] |= CE << 4;
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv4 header's checksum, computed in full.
    fn checksum(h: &[u8]) -> u16 {
        let mut acc = 0u32;
        for (i, w) in h.chunks(2).enumerate() {
            if i != 5 {
                acc += u32::from(u16::from_be_bytes([w[0], w[1]]));
            }
        }
        while acc > 0xffff {
            acc = (acc & 0xffff) + (acc >> 16);
        }
        !(acc as u16)
    }

    fn ipv4(tos: u8, proto: u8, sport: u16) -> Vec<u8> {
        let mut p = vec![0u8; 28];
        p[0] = 0x45;
        p[1] = tos;
        p[2..4].copy_from_slice(&28u16.to_be_bytes());
        p[8] = 64;
        p[9] = proto;
        p[12..16].copy_from_slice(&[10, 77, 0, 1]);
        p[16..20].copy_from_slice(&[10, 77, 0, 2]);
        p[20..22].copy_from_slice(&sport.to_be_bytes());
        p[22..24].copy_from_slice(&5201u16.to_be_bytes());
        let c = checksum(&p[..20]);
        p[10..12].copy_from_slice(&c.to_be_bytes());
        p
    }

    #[test]
    fn ce_keeps_the_ipv4_checksum_right() {
        for tos in [0x01u8, 0x02, 0xb9, 0xfe] {
            let mut p = ipv4(tos, 6, 40000);
            assert!(set_ce(&mut p));
            assert_eq!(ecn(&p), 3);
            assert_eq!(p[1] & !3, tos & !3, "DSCP kept");
            assert_eq!(u16::from_be_bytes([p[10], p[11]]), checksum(&p[..20]));
        }
        let mut not_ect = ipv4(0x00, 6, 40000);
        assert!(!set_ce(&mut not_ect));
        assert_eq!(ecn(&not_ect), 0);
        let mut v6 = vec![0u8; 40];
        v6[0] = 0x60;
        v6[1] = 0x20; // ECT(0)
        assert_eq!(ecn(&v6), 2);
        assert!(set_ce(&mut v6));
        assert_eq!(ecn(&v6), 3);
        assert!(!set_ce(&mut [0x45]), "short: untouched");
    }

    #[test]
    fn flows_hash_by_ports_and_addresses() {
        let a = flow_hash(&ipv4(0, 17, 40000));
        assert_eq!(a, flow_hash(&ipv4(2, 17, 40000)), "ECN is not the flow");
        assert_ne!(a, flow_hash(&ipv4(0, 17, 40001)));
        assert_ne!(a, flow_hash(&ipv4(0, 6, 40000)));
        assert_eq!(flow_hash(&[]), 0);
        assert_eq!(flow_hash(&[0x45, 0, 0]), 0);
    }
}
