//! `HOST`, `HOST:PORT`, `[V6ADDR]:PORT` and a bare IPv6 address: the one way every command
//! (`run`, `sweep` and its `--targets` and `--vary server=`, `run --iperf3`) reads the
//! server it is given, so that what works in one works in all.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// A server as the user wrote it: a host name or address, and the port if one was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPort {
    /// The host name or address, without brackets.
    pub host: String,
    /// The port, if one was given.
    pub port: Option<u16>,
}

/// Why a server could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostPortError {
    /// Nothing was given.
    #[error("no server given: give HOST, HOST:PORT or [IPV6]:PORT")]
    Empty,
    /// `:PORT` with no host before it.
    #[error("{0}: no host before the port: give HOST:PORT")]
    NoHost(String),
    /// `[` without `]`, or something other than `:PORT` after `]`.
    #[error("{0}: an IPv6 address with a port is written [ADDRESS]:PORT")]
    Brackets(String),
    /// An IPv6 address and a port without brackets (`::1:25301`).
    #[error("{input} is no address: an IPv6 address with a port is written [{addr}]:{port}")]
    Unbracketed {
        /// What the user gave.
        input: String,
        /// The address part.
        addr: String,
        /// The port part.
        port: String,
    },
    /// The port is no number from 1 to 65535.
    #[error("{input}: {port:?} is not a port number (1 to 65535)")]
    BadPort {
        /// What the user gave.
        input: String,
        /// The part after the colon.
        port: String,
    },
}

impl HostPort {
    /// The port given, or `default`.
    pub fn port_or(&self, default: u16) -> u16 {
        self.port.unwrap_or(default)
    }

    /// The host and the port given, or `default`.
    pub fn or_port(self, default: u16) -> (String, u16) {
        let port = self.port_or(default);
        (self.host, port)
    }
}

impl FromStr for HostPort {
    type Err = HostPortError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.is_empty() {
            return Err(HostPortError::Empty);
        }
        let port_of = |p: &str| match p.parse::<u16>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(HostPortError::BadPort {
                input: s.to_string(),
                port: p.to_string(),
            }),
        };
        if let Some(rest) = s.strip_prefix('[') {
            let Some((addr, tail)) = rest.split_once(']') else {
                return Err(HostPortError::Brackets(s.to_string()));
            };
            if addr.is_empty() {
                return Err(HostPortError::Brackets(s.to_string()));
            }
            let port = match tail.strip_prefix(':') {
                Some(p) => Some(port_of(p)?),
                None if tail.is_empty() => None,
                None => return Err(HostPortError::Brackets(s.to_string())),
            };
            return Ok(Self {
                host: addr.to_string(),
                port,
            });
        }
        // `::1:25301`, no address, is `::1` and a port written as iperf3 users may: say how.
        if s.parse::<IpAddr>().is_err() {
            if let Some((addr, p)) = s.rsplit_once(':') {
                if addr.parse::<std::net::Ipv6Addr>().is_ok() && p.parse::<u16>().is_ok() {
                    return Err(HostPortError::Unbracketed {
                        input: s.to_string(),
                        addr: addr.to_string(),
                        port: p.to_string(),
                    });
                }
            }
        }
        // A bare IPv6 address (or one with a zone, `fe80::1%eth0`): its colons are no port.
        if s.parse::<IpAddr>().is_ok() || s.matches(':').count() > 1 {
            return Ok(Self {
                host: s.to_string(),
                port: None,
            });
        }
        match s.split_once(':') {
            Some(("", _)) => Err(HostPortError::NoHost(s.to_string())),
            Some((host, p)) => Ok(Self {
                host: host.to_string(),
                port: Some(port_of(p)?),
            }),
            None => Ok(Self {
                host: s.to_string(),
                port: None,
            }),
        }
    }
}

impl fmt::Display for HostPort {
    /// As it is parsed back: an IPv6 address with a port in brackets.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.port {
            Some(p) if self.host.contains(':') => write!(f, "[{}]:{p}", self.host),
            Some(p) => write!(f, "{}:{p}", self.host),
            None => f.write_str(&self.host),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hp(s: &str) -> Result<(String, Option<u16>), HostPortError> {
        s.parse::<HostPort>().map(|h| (h.host, h.port))
    }

    #[test]
    fn every_form_a_command_takes() {
        let ok = |h: &str, p: Option<u16>| Ok((h.to_string(), p));
        assert_eq!(hp("example.net"), ok("example.net", None));
        assert_eq!(hp("example.net:5201"), ok("example.net", Some(5201)));
        assert_eq!(hp("127.0.0.1:5391"), ok("127.0.0.1", Some(5391)));
        assert_eq!(hp("10.0.0.1"), ok("10.0.0.1", None));
        assert_eq!(hp("::1"), ok("::1", None));
        assert_eq!(hp("2001:db8::1"), ok("2001:db8::1", None));
        assert_eq!(hp("fe80::1%eth0"), ok("fe80::1%eth0", None));
        assert_eq!(hp("[::1]:5201"), ok("::1", Some(5201)));
        assert_eq!(hp("[fe80::1]"), ok("fe80::1", None));
    }

    #[test]
    fn mistakes_are_named() {
        assert_eq!(hp(""), Err(HostPortError::Empty));
        assert!(matches!(hp(":5201"), Err(HostPortError::NoHost(_))));
        assert!(matches!(hp("[::1"), Err(HostPortError::Brackets(_))));
        assert!(matches!(hp("[::1]x"), Err(HostPortError::Brackets(_))));
        assert!(matches!(hp("[]:1"), Err(HostPortError::Brackets(_))));
        let e = hp("::1:25301").unwrap_err();
        assert_eq!(
            e.to_string(),
            "::1:25301 is no address: an IPv6 address with a port is written [::1]:25301"
        );
        for bad in ["host:port", "host:", "host:0", "host:65536", "[::1]:x"] {
            assert!(
                matches!(hp(bad), Err(HostPortError::BadPort { .. })),
                "{bad}"
            );
        }
        let msg = hp("host:port").unwrap_err().to_string();
        assert_eq!(msg, "host:port: \"port\" is not a port number (1 to 65535)");
    }

    #[test]
    fn the_default_port_fills_in_only_when_none_was_given() {
        let a: HostPort = "h".parse().unwrap();
        let b: HostPort = "h:1".parse().unwrap();
        assert_eq!(a.or_port(5300), ("h".into(), 5300));
        assert_eq!(b.or_port(5300), ("h".into(), 1));
    }

    #[test]
    fn display_parses_back() {
        for s in ["h", "h:1", "[::1]:5201", "::1", "10.0.0.1:80"] {
            let h: HostPort = s.parse().unwrap();
            assert_eq!(h.to_string(), s);
            assert_eq!(h.to_string().parse::<HostPort>().unwrap(), h);
        }
    }
}
