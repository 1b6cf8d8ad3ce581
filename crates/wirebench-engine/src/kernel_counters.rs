//! Counters the kernel keeps for the whole host (its network namespace), read at a test's
//! start and end: a UDP datagram whose checksum fails is dropped by the kernel before any
//! socket sees it, so only `/proc/net/snmp`'s `Udp: InCsumErrors` (and `/proc/net/snmp6`'s
//! `Udp6InCsumErrors`) can tell a receiver that some of its datagrams arrived corrupt.
//!
//! Read twice a test, never per datagram. The files are the kernel's, but parsed as any
//! input: bounded in size, every field checked, a missing or odd one giving `None`.

use std::io::Read;

/// More than either file holds (about 2 KiB and 8 KiB on Linux 6).
const MAX_FILE_BYTES: u64 = 64 * 1024;

/// Reads `path` whole, up to [`MAX_FILE_BYTES`]; `None` if it cannot be read.
fn read_small(path: &str) -> Option<String> {
    let mut text = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(MAX_FILE_BYTES)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// UDP checksum errors of IPv4 and IPv6 so far in this network namespace; `None` when
/// neither count can be read (no `/proc`, or a kernel without the counter). IPv6's alone
/// may be missing (IPv6 off): then IPv4's.
pub(crate) fn udp_checksum_errors() -> Option<u64> {
    let v4 = read_small("/proc/net/snmp").and_then(|t| snmp_field(&t, "Udp:", "InCsumErrors"));
    let v6 = read_small("/proc/net/snmp6").and_then(|t| snmp6_field(&t, "Udp6InCsumErrors"));
    match (v4, v6) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
    }
}

/// The errors counted between two readings; `None` unless both were read. A count that
/// went down (the counters were reset, or wrapped) gives 0.
pub(crate) fn since(start: Option<u64>, end: Option<u64>) -> Option<u64> {
    Some(end?.saturating_sub(start?))
}

/// A field of `/proc/net/snmp`, whose protocols come as line pairs: `Udp: Name Name ...`
/// then `Udp: value value ...`.
fn snmp_field(text: &str, prefix: &str, name: &str) -> Option<u64> {
    let mut lines = text.lines().filter(|l| l.starts_with(prefix));
    let names = lines.next()?;
    let values = lines.next()?;
    let column = names.split_whitespace().position(|n| n == name)?;
    values.split_whitespace().nth(column)?.parse().ok()
}

/// A field of `/proc/net/snmp6`: one `Name value` a line.
fn snmp6_field(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let mut words = l.split_whitespace();
        if words.next()? != name {
            return None;
        }
        words.next()?.parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Linux 6.1's layout.
    const SNMP: &str = "\
Ip: Forwarding DefaultTTL InReceives
Ip: 1 64 12345
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
Udp: 100 2 7 90 0 0 5 0 0
UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
UdpLite: 0 0 0 0 0 0 99 0 0
";

    #[test]
    fn the_udp_line_pair_gives_in_csum_errors() {
        assert_eq!(snmp_field(SNMP, "Udp:", "InCsumErrors"), Some(5));
        assert_eq!(snmp_field(SNMP, "Udp:", "InErrors"), Some(7));
        // UdpLite's line does not answer for Udp's.
        assert_eq!(snmp_field(SNMP, "UdpLite:", "InCsumErrors"), Some(99));
    }

    #[test]
    fn snmp6_lines_give_their_value() {
        let t = "Udp6InDatagrams                 \t42\nUdp6InCsumErrors                \t3\n";
        assert_eq!(snmp6_field(t, "Udp6InCsumErrors"), Some(3));
        assert_eq!(snmp6_field(t, "Udp6InErrors"), None);
    }

    #[test]
    fn odd_text_gives_none_never_a_panic() {
        for t in [
            "",
            "Udp: InCsumErrors\n",
            "Udp: InCsumErrors\nUdp:\n",
            "Udp: InCsumErrors\nUdp: -1\n",
            "Udp: InCsumErrors\nUdp: 99999999999999999999999\n",
            "Udp: A B\nUdp: 1 2\n",
            "\u{0}\u{ffff}",
        ] {
            assert_eq!(snmp_field(t, "Udp:", "InCsumErrors"), None, "{t:?}");
            assert_eq!(snmp6_field(t, "Udp6InCsumErrors"), None, "{t:?}");
        }
        assert_eq!(snmp6_field("Udp6InCsumErrors\n", "Udp6InCsumErrors"), None);
    }

    #[test]
    fn the_difference_needs_both_readings() {
        assert_eq!(since(Some(5), Some(12)), Some(7));
        assert_eq!(since(Some(12), Some(5)), Some(0));
        assert_eq!(since(None, Some(5)), None);
        assert_eq!(since(Some(5), None), None);
    }

    #[test]
    fn this_host_has_the_counter() {
        // Linux has had InCsumErrors since 3.10: where /proc is mounted it is read.
        if std::path::Path::new("/proc/net/snmp").exists() {
            assert!(udp_checksum_errors().is_some());
        }
    }
}
