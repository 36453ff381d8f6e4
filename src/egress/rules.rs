//! Host rules: which `host:port` a command may reach through the egress proxy, and which
//! addresses count as private (reachable only when a rule names the host explicitly).
//!
//! A rule is `HOST[:PORT]`: HOST a name, an IPv4 address, `[IPv6]`, or a glob where `*` matches
//! any run of characters (dots included: `*.pythonhosted.org` covers `a.b.pythonhosted.org`, not
//! `pythonhosted.org`); PORT a number or `*`; no port = any port. `*` alone is any public host.
//! A rule without `*` is *explicit*: only an explicit rule lets a connection reach a private,
//! loopback, link-local or otherwise non-public address, whether the host is such an address or
//! a name that resolves to one.

use serde::Serialize;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// One host rule and where it comes from (shown in results and `show`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostRule {
    /// Lowercase, no trailing dot, IPv6 without brackets.
    pub host: String,
    pub port: Option<u16>,
    /// `grant` (the client's NETWORK grants) or `approved` (a human approved it for the command).
    pub source: String,
}

impl HostRule {
    /// Parses `HOST[:PORT]` (see the module doc); the error says what is wrong.
    pub fn parse(text: &str, source: &str) -> Result<HostRule, String> {
        let t = text.trim();
        let bad = |why: &str| {
            Err(format!("host rule {t:?}: {why} (expected HOST[:PORT], e.g. pypi.org:443 or *.pythonhosted.org:443)"))
        };
        if t.is_empty() {
            return bad("empty");
        }
        let (host, port) = if let Some(rest) = t.strip_prefix('[') {
            let Some((h, after)) = rest.split_once(']') else {
                return bad("unclosed [");
            };
            if h.parse::<Ipv6Addr>().is_err() {
                return bad("not an IPv6 address between [ ]");
            }
            match after {
                "" => (h.to_string(), None),
                p => match p.strip_prefix(':') {
                    Some(p) => (h.to_string(), Some(p)),
                    None => return bad("unexpected text after ]"),
                },
            }
        } else {
            match t.rsplit_once(':') {
                Some((h, _)) if h.contains(':') => return bad("an IPv6 address needs [ ]"),
                Some((h, p)) => (h.to_string(), Some(p)),
                None => (t.to_string(), None),
            }
        };
        let host = normalise_host(&host);
        if host.is_empty()
            || !host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '*' | ':'))
        {
            return bad("the host may hold letters, digits, . - _ and *");
        }
        let port = match port {
            None | Some("*") => None,
            Some(p) => match p.parse::<u16>() {
                Ok(n) if n > 0 => Some(n),
                _ => return bad("the port is a number from 1 to 65535, or *"),
            },
        };
        Ok(HostRule {
            host,
            port,
            source: source.to_string(),
        })
    }

    /// Whether the host part names one host (no glob).
    pub fn explicit(&self) -> bool {
        !self.host.contains('*')
    }

    /// Whether the rule covers `host:port` (`host` as given to the proxy).
    pub fn matches(&self, host: &str, port: u16) -> bool {
        self.port.is_none_or(|p| p == port)
            && glob(self.host.as_bytes(), normalise_host(host).as_bytes())
    }

    /// The rule as typed (`host:port`, `[v6]:port`, `host:*`).
    pub fn text(&self) -> String {
        let h = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        match self.port {
            Some(p) => format!("{h}:{p}"),
            None => format!("{h}:*"),
        }
    }
}

/// Lowercase, without a trailing dot or IPv6 brackets.
pub fn normalise_host(h: &str) -> String {
    let h = h.trim().trim_end_matches('.');
    let h = h
        .strip_prefix('[')
        .and_then(|x| x.strip_suffix(']'))
        .unwrap_or(h);
    h.to_ascii_lowercase()
}

/// `*` matches any run of bytes; everything else literally.
fn glob(p: &[u8], s: &[u8]) -> bool {
    let (mut pi, mut si, mut star, mut mark) = (0, 0, None, 0);
    while si < s.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some(pi);
            pi += 1;
            mark = si;
        } else if pi < p.len() && p[pi] == s[si] {
            pi += 1;
            si += 1;
        } else if let Some(sp) = star {
            pi = sp + 1;
            mark += 1;
            si = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// The rules of one command run: the client's NETWORK grants and the hosts a human approved for
/// this command.
#[derive(Debug, Clone, Default)]
pub struct Rules {
    pub rules: Vec<HostRule>,
}

/// What the rules say about `host:port` before resolution.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// No rule covers it.
    Refused,
    /// A rule covers it; `explicit`: one that names the host (private addresses allowed).
    Allowed { rule: String, explicit: bool },
}

impl Rules {
    pub fn decide(&self, host: &str, port: u16) -> Verdict {
        let mut covering = self.rules.iter().filter(|r| r.matches(host, port));
        let Some(first) = covering.next() else {
            return Verdict::Refused;
        };
        let explicit = self
            .rules
            .iter()
            .find(|r| r.explicit() && r.matches(host, port));
        match explicit {
            Some(r) => Verdict::Allowed {
                rule: r.text(),
                explicit: true,
            },
            None => Verdict::Allowed {
                rule: first.text(),
                explicit: false,
            },
        }
    }
}

/// Whether `ip` is a public unicast address (not private, loopback, link-local, shared,
/// documentation, benchmarking, multicast, reserved or unspecified).
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => public_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return public_v4(v4);
            }
            let s = v6.segments();
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00 // unique local
                || (s[0] & 0xffc0) == 0xfe80 // link-local
                || (s[0] & 0xffc0) == 0xfec0 // site-local (deprecated)
                || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
                || (s[0] == 0x0064 && s[1] == 0xff9b) // NAT64: the v4 inside decides nothing here
                || (s[0] == 0x2002)) // 6to4 can wrap any v4
        }
    }
}

fn public_v4(ip: Ipv4Addr) -> bool {
    let o = ip.octets();
    !(ip.is_private()
        || ip.is_loopback()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_documentation()
        || ip.is_multicast()
        || o[0] == 0
        || (o[0] == 100 && (o[1] & 0xc0) == 64) // shared address space 100.64/10
        || (o[0] == 198 && (o[1] & 0xfe) == 18) // benchmarking 198.18/15
        || (o[0] == 192 && o[1] == 0 && o[2] == 0) // IETF protocol assignments
        || o[0] >= 240)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(s: &str) -> HostRule {
        HostRule::parse(s, "grant").unwrap()
    }

    #[test]
    fn rules_parse_and_match_by_host_glob_and_port() {
        assert!(r("pypi.org:443").matches("PyPI.org.", 443));
        assert!(!r("pypi.org:443").matches("pypi.org", 80));
        assert!(r("pypi.org").matches("pypi.org", 80));
        assert!(r("pypi.org:*").matches("pypi.org", 8443));
        let g = r("*.pythonhosted.org:443");
        assert!(g.matches("files.pythonhosted.org", 443));
        assert!(g.matches("a.b.pythonhosted.org", 443));
        assert!(!g.matches("pythonhosted.org", 443));
        assert!(!g.matches("evilpythonhosted.org", 443));
        assert!(!g.explicit());
        assert!(r("*").matches("anything.example", 1));
        assert!(r("[::1]:8080").matches("[::1]", 8080));
        assert_eq!(r("[::1]:8080").text(), "[::1]:8080");
        assert_eq!(r("Example.COM").text(), "example.com:*");
        for bad in [
            "", "a b:1", "h:0", "h:70000", "h:x", "::1:80", "[zz]:1", "h/p:1",
        ] {
            assert!(HostRule::parse(bad, "grant").is_err(), "{bad}");
        }
    }

    #[test]
    fn only_an_explicit_rule_is_marked_explicit() {
        let rules = Rules {
            rules: vec![r("*.internal.test:80"), r("svc.internal.test:80")],
        };
        assert_eq!(
            rules.decide("svc.internal.test", 80),
            Verdict::Allowed {
                rule: "svc.internal.test:80".into(),
                explicit: true
            }
        );
        assert_eq!(
            rules.decide("other.internal.test", 80),
            Verdict::Allowed {
                rule: "*.internal.test:80".into(),
                explicit: false
            }
        );
        assert_eq!(rules.decide("svc.internal.test", 81), Verdict::Refused);
    }

    #[test]
    fn private_loopback_and_link_local_addresses_are_not_public() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fe80::1",
            "fd00::1",
            "::ffff:10.0.0.1",
            "::",
            "224.0.0.1",
        ] {
            assert!(!is_public(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["93.184.215.14", "151.101.0.223", "2a04:4e42::223"] {
            assert!(is_public(ip.parse().unwrap()), "{ip}");
        }
    }
}
