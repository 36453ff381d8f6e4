//! Host rules: which `host:port` a command may reach through the egress proxy — and the one
//! owner of **the class of an address** ([`class`]: public, private, loopback, link-local, …,
//! every IPv6 spelling of an IPv4 address judged by the address inside).
//!
//! A rule is `HOST[:PORT][+CLASS]...`: HOST a name, an IPv4 address, `[IPv6]`, or a glob where
//! `*` matches any run of characters (dots included: `*.pythonhosted.org` covers
//! `a.b.pythonhosted.org`, not `pythonhosted.org`); PORT a number or `*`; no port = any port.
//! `*` alone is any public host. Which addresses a rule reaches ([`HostRule::reaches`]):
//!
//! - every rule reaches public addresses;
//! - a rule naming an IP address (no `*`) reaches that address, whatever its class (the human
//!   saw the address itself);
//! - a rule naming a host by name reaches a non-public address only of a class it lists
//!   (`svc.internal:8080+loopback`, `db.corp:5432+private`: written by the operator, or by
//!   `brainloop approve ID --allow-private-hosts` from the classes the request showed); a
//!   name approved plainly reaches public addresses only, so a name that resolves — or
//!   rebinds — to 127.0.0.1 reaches nothing local;
//! - a glob never reaches a non-public address.
//!
//! The proxy checks the address it actually connects to (after its own resolution), so a name
//! that rebinds between the prompt and the connection is judged by where it points then.

use serde::{Deserialize, Serialize};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The class of an address ([`class`]): what a connection to it reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AddrClass {
    /// Global unicast: the internet.
    Public,
    /// RFC 1918 `10/8`, `172.16/12`, `192.168/16`; IPv6 unique local `fc00::/7`, site-local
    /// `fec0::/10`, local-use NAT64 `64:ff9b:1::/48`.
    Private,
    /// `127/8`, `::1`: this machine.
    Loopback,
    /// `169.254/16` (cloud metadata services live there), `fe80::/10`.
    LinkLocal,
    /// Carrier-grade NAT shared space `100.64/10`.
    Cgnat,
    /// `0.0.0.0`, `::` (a connection to it reaches this machine).
    Unspecified,
    /// `224/4`, `ff00::/8`.
    Multicast,
    /// `255.255.255.255`.
    Broadcast,
    /// `192.0.2/24`, `198.51.100/24`, `203.0.113/24`, `2001:db8::/32`, `3fff::/20`.
    Documentation,
    /// `198.18/15`, `2001:2::/48`.
    Benchmarking,
    /// Anything else that is not global unicast: `0/8`, `240/4`, `192.0.0/24`, 6to4 relays,
    /// IPv4-compatible / -translated / 6to4 / Teredo forms of a public address, `2001::/23`,
    /// `100::/64`, IPv6 outside `2000::/3`.
    Reserved,
}

impl AddrClass {
    /// Every class but public, as written after `+` in a rule.
    pub const NON_PUBLIC: [AddrClass; 10] = [
        AddrClass::Private,
        AddrClass::Loopback,
        AddrClass::LinkLocal,
        AddrClass::Cgnat,
        AddrClass::Unspecified,
        AddrClass::Multicast,
        AddrClass::Broadcast,
        AddrClass::Documentation,
        AddrClass::Benchmarking,
        AddrClass::Reserved,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AddrClass::Public => "public",
            AddrClass::Private => "private",
            AddrClass::Loopback => "loopback",
            AddrClass::LinkLocal => "link-local",
            AddrClass::Cgnat => "cgnat",
            AddrClass::Unspecified => "unspecified",
            AddrClass::Multicast => "multicast",
            AddrClass::Broadcast => "broadcast",
            AddrClass::Documentation => "documentation",
            AddrClass::Benchmarking => "benchmarking",
            AddrClass::Reserved => "reserved",
        }
    }

    /// A non-public class by the name written after `+` in a rule.
    pub fn parse(name: &str) -> Option<AddrClass> {
        AddrClass::NON_PUBLIC
            .into_iter()
            .find(|c| c.as_str() == name.trim().to_ascii_lowercase())
    }
}

impl std::fmt::Display for AddrClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One host rule and where it comes from (shown in results and `show`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostRule {
    /// Lowercase, no trailing dot, IPv6 without brackets.
    pub host: String,
    pub port: Option<u16>,
    /// The non-public classes a rule naming a host by name may reach (`+loopback`), sorted.
    pub classes: Vec<AddrClass>,
    /// `grant` (the client's NETWORK grants) or `approved` (a human approved it for the command).
    pub source: String,
}

impl HostRule {
    /// Parses `HOST[:PORT][+CLASS]...` (see the module doc); the error says what is wrong.
    pub fn parse(text: &str, source: &str) -> Result<HostRule, String> {
        let t = text.trim();
        let bad = |why: &str| {
            Err(format!("host rule {t:?}: {why} (expected HOST[:PORT][+CLASS], e.g. pypi.org:443, *.pythonhosted.org:443 or svc.internal:8080+loopback)"))
        };
        if t.is_empty() {
            return bad("empty");
        }
        let mut parts = t.split('+');
        let hp = parts.next().unwrap_or("").trim();
        let mut classes = Vec::new();
        for name in parts {
            match AddrClass::parse(name) {
                Some(c) => classes.push(c),
                None => {
                    return bad(&format!(
                        "unknown address class {name:?} after + (one of {})",
                        AddrClass::NON_PUBLIC.map(|c| c.as_str()).join(", ")
                    ))
                }
            }
        }
        classes.sort();
        classes.dedup();
        let (host, port) = if let Some(rest) = hp.strip_prefix('[') {
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
            match hp.rsplit_once(':') {
                Some((h, _)) if h.contains(':') => return bad("an IPv6 address needs [ ]"),
                Some((h, p)) => (h.to_string(), Some(p)),
                None => (hp.to_string(), None),
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
        if host.contains('*') && !classes.is_empty() {
            return bad("a glob reaches public addresses only: an address class needs one host named without *");
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
            classes,
            source: source.to_string(),
        })
    }

    /// Whether the host part names one host (no glob).
    pub fn explicit(&self) -> bool {
        !self.host.contains('*')
    }

    /// The address the rule names, when its host is an IP address.
    pub fn literal(&self) -> Option<IpAddr> {
        self.host.parse().ok()
    }

    /// Whether the rule covers `host:port` (`host` as given to the proxy).
    pub fn matches(&self, host: &str, port: u16) -> bool {
        self.port.is_none_or(|p| p == port)
            && glob(self.host.as_bytes(), normalise_host(host).as_bytes())
    }

    /// Whether a connection under this rule may go to `ip` (see the module doc): public, the
    /// address the rule names, or a class the rule lists for the host it names.
    pub fn reaches(&self, ip: IpAddr) -> bool {
        let c = class(ip);
        c == AddrClass::Public
            || self.literal() == Some(ip)
            || (self.explicit() && self.classes.contains(&c))
    }

    /// The rule as typed (`host:port`, `[v6]:port`, `host:*`, then `+class`…).
    pub fn text(&self) -> String {
        let h = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        let mut t = match self.port {
            Some(p) => format!("{h}:{p}"),
            None => format!("{h}:*"),
        };
        for c in &self.classes {
            t.push('+');
            t.push_str(c.as_str());
        }
        t
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
    /// The rules covering it, those naming the host (no `*`) first: which address each may
    /// reach is decided after resolution ([`Verdict::rule_for`]).
    Allowed(Vec<HostRule>),
}

impl Verdict {
    /// The covering rule that lets a connection go to `ip` (none: refused by class).
    pub fn rule_for(&self, ip: IpAddr) -> Option<&HostRule> {
        match self {
            Verdict::Refused => None,
            Verdict::Allowed(rules) => rules.iter().find(|r| r.reaches(ip)),
        }
    }

    /// The first covering rule's text (recorded when no address was reached).
    pub fn rule(&self) -> Option<String> {
        match self {
            Verdict::Refused => None,
            Verdict::Allowed(rules) => rules.first().map(HostRule::text),
        }
    }
}

impl Rules {
    pub fn decide(&self, host: &str, port: u16) -> Verdict {
        let mut covering: Vec<HostRule> = self
            .rules
            .iter()
            .filter(|r| r.matches(host, port))
            .cloned()
            .collect();
        if covering.is_empty() {
            return Verdict::Refused;
        }
        covering.sort_by_key(|r| !r.explicit());
        Verdict::Allowed(covering)
    }
}

/// Whether `ip` is a public unicast address ([`class`] is [`AddrClass::Public`]).
pub fn is_public(ip: IpAddr) -> bool {
    class(ip) == AddrClass::Public
}

/// The class of `ip` — the one place that decides it. Every IPv6 form that carries an IPv4
/// address (mapped `::ffff:a.b.c.d`, compatible `::a.b.c.d`, translated `::ffff:0:a.b.c.d`,
/// NAT64 `64:ff9b::/96`, 6to4 `2002::/16`) has the class of the address inside when that is
/// not public; a public one inside is public only where the kernel or a NAT64 gateway reaches
/// exactly that address (mapped, NAT64), reserved otherwise.
pub fn class(ip: IpAddr) -> AddrClass {
    match ip {
        IpAddr::V4(v4) => class_v4(v4),
        IpAddr::V6(v6) => class_v6(v6),
    }
}

fn class_v4(ip: Ipv4Addr) -> AddrClass {
    use AddrClass::*;
    let o = ip.octets();
    if ip.is_unspecified() {
        Unspecified
    } else if o[0] == 0 {
        Reserved // "this network" 0/8
    } else if ip.is_loopback() {
        Loopback
    } else if ip.is_private() {
        Private
    } else if ip.is_link_local() {
        LinkLocal
    } else if o[0] == 100 && (o[1] & 0xc0) == 64 {
        Cgnat
    } else if o[0] == 198 && (o[1] & 0xfe) == 18 {
        Benchmarking
    } else if ip.is_documentation() {
        Documentation
    } else if ip.is_broadcast() {
        Broadcast
    } else if ip.is_multicast() {
        Multicast
    } else if o[0] >= 240
        || (o[0] == 192 && o[1] == 0 && o[2] == 0) // IETF protocol assignments
        || (o[0] == 192 && o[1] == 88 && o[2] == 99)
    // 6to4 relay anycast (deprecated)
    {
        Reserved
    } else {
        Public
    }
}

fn class_v6(ip: Ipv6Addr) -> AddrClass {
    use AddrClass::*;
    let s = ip.segments();
    let o = ip.octets();
    let v4 = |at: usize| Ipv4Addr::new(o[at], o[at + 1], o[at + 2], o[at + 3]);
    // The class of an embedded IPv4 address; `direct`: the form reaches exactly it.
    let inside = |a: Ipv4Addr, direct: bool| match class_v4(a) {
        Public if !direct => Reserved,
        c => c,
    };
    if ip.is_unspecified() {
        Unspecified
    } else if ip.is_loopback() {
        Loopback
    } else if s[..5] == [0; 5] && s[5] == 0xffff {
        inside(v4(12), true) // IPv4-mapped ::ffff:a.b.c.d
    } else if s[..6] == [0; 6] || (s[..4] == [0; 4] && s[4] == 0xffff && s[5] == 0) {
        // IPv4-compatible ::a.b.c.d (deprecated), IPv4-translated ::ffff:0:a.b.c.d (RFC 2765)
        inside(v4(12), false)
    } else if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0; 4] {
        inside(v4(12), true) // NAT64 well-known prefix 64:ff9b::/96 (RFC 6052)
    } else if s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1 {
        Private // local-use NAT64 64:ff9b:1::/48 (RFC 8215)
    } else if s[0] == 0x2002 {
        inside(v4(2), false) // 6to4 2002:a.b.c.d::/48
    } else if s[0] == 0x2001 && s[1] == 0x0db8 || (s[0] & 0xfff0) == 0x3ff0 {
        Documentation
    } else if s[0] == 0x2001 && s[1] == 2 && s[2] == 0 {
        Benchmarking
    } else if (s[0] == 0x2001 && s[1] < 0x200) || (s[0] == 0x100 && s[1..4] == [0; 3]) {
        // 2001::/23 IETF protocol assignments (Teredo 2001::/32 among them), discard 100::/64
        Reserved
    } else if (s[0] & 0xfe00) == 0xfc00 || (s[0] & 0xffc0) == 0xfec0 {
        Private // unique local fc00::/7, site-local fec0::/10 (deprecated)
    } else if (s[0] & 0xffc0) == 0xfe80 {
        LinkLocal
    } else if ip.is_multicast() {
        Multicast
    } else if (s[0] & 0xe000) != 0x2000 {
        Reserved // outside global unicast 2000::/3
    } else {
        Public
    }
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
    fn named_rules_come_first_and_a_name_reaches_public_addresses_only_unless_it_lists_the_class() {
        let rules = Rules {
            rules: vec![r("*.internal.test:80"), r("svc.internal.test:80")],
        };
        let v = rules.decide("svc.internal.test", 80);
        assert_eq!(v.rule().as_deref(), Some("svc.internal.test:80"));
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let public: IpAddr = "93.184.215.14".parse().unwrap();
        assert_eq!(
            v.rule_for(public).map(HostRule::text).as_deref(),
            Some("svc.internal.test:80")
        );
        // A plain name (a human's plain approve) and a glob: public only.
        assert_eq!(v.rule_for(lo), None);
        assert_eq!(
            rules.decide("other.internal.test", 80).rule().as_deref(),
            Some("*.internal.test:80")
        );
        assert_eq!(rules.decide("svc.internal.test", 81), Verdict::Refused);
        // The class it lists, and only that one.
        let named = r("svc.internal.test:80+loopback");
        assert_eq!(named.text(), "svc.internal.test:80+loopback");
        assert!(named.reaches(lo) && named.reaches(public));
        assert!(!named.reaches("169.254.169.254".parse().unwrap()));
        assert!(!named.reaches("10.0.0.1".parse().unwrap()));
        assert!(r("db:5432+private+link-local").reaches("10.0.0.1".parse().unwrap()));
        // An IP literal reaches the address it names, nothing else private.
        let literal = r("127.0.0.1:8080");
        assert!(literal.reaches(lo));
        assert!(!literal.reaches("127.0.0.2".parse().unwrap()));
        assert!(r("[::1]:80").reaches("::1".parse().unwrap()));
        // A class on a glob, or an unknown class, is refused at parse time.
        for bad in ["*.x.test:80+loopback", "h:80+public", "h:80+lan", "h:80+"] {
            assert!(HostRule::parse(bad, "grant").is_err(), "{bad}");
        }
        assert_eq!(
            r("H:1+Loopback+private+loopback").text(),
            "h:1+private+loopback"
        );
    }

    /// The class of every spelling: (address, class). The owner of the SSRF check.
    #[test]
    fn every_spelling_of_an_address_gets_its_class() {
        use AddrClass::*;
        let table: &[(&str, AddrClass)] = &[
            ("127.0.0.1", Loopback),
            ("127.255.255.254", Loopback),
            ("10.1.2.3", Private),
            ("172.16.0.1", Private),
            ("172.31.255.255", Private),
            ("192.168.1.1", Private),
            ("169.254.169.254", LinkLocal),
            ("100.64.0.1", Cgnat),
            ("100.127.255.255", Cgnat),
            ("0.0.0.0", Unspecified),
            ("0.1.2.3", Reserved),
            ("198.18.0.1", Benchmarking),
            ("198.19.255.255", Benchmarking),
            ("192.0.2.1", Documentation),
            ("198.51.100.1", Documentation),
            ("203.0.113.1", Documentation),
            ("192.0.0.8", Reserved),
            ("192.88.99.1", Reserved),
            ("224.0.0.1", Multicast),
            ("239.255.255.250", Multicast),
            ("240.0.0.1", Reserved),
            ("255.255.255.255", Broadcast),
            ("::1", Loopback),
            ("::", Unspecified),
            ("fe80::1", LinkLocal),
            ("febf::1", LinkLocal),
            ("fd00::1", Private),
            ("fc00::1", Private),
            ("fec0::1", Private),
            ("ff02::1", Multicast),
            ("ff0e::1", Multicast),
            // IPv4-mapped: the kernel connects to the IPv4 address itself.
            ("::ffff:10.0.0.1", Private),
            ("::ffff:127.0.0.1", Loopback),
            ("::ffff:169.254.169.254", LinkLocal),
            ("::ffff:7f00:1", Loopback),
            ("::ffff:93.184.215.14", Public),
            // IPv4-compatible (deprecated): the address inside, reserved when public.
            ("::127.0.0.1", Loopback),
            ("::7f00:1", Loopback),
            ("::10.0.0.1", Private),
            ("::169.254.169.254", LinkLocal),
            ("::0.0.0.2", Reserved),
            ("::93.184.215.14", Reserved),
            // IPv4-translated (RFC 2765).
            ("::ffff:0:127.0.0.1", Loopback),
            ("::ffff:0:7f00:1", Loopback),
            ("::ffff:0:10.0.0.1", Private),
            ("::ffff:0:93.184.215.14", Reserved),
            // NAT64: the gateway reaches the address inside.
            ("64:ff9b::127.0.0.1", Loopback),
            ("64:ff9b::a9fe:a9fe", LinkLocal),
            ("64:ff9b::10.0.0.1", Private),
            ("64:ff9b::93.184.215.14", Public),
            ("64:ff9b:1::1", Private),
            // 6to4 wrapping an address; Teredo and the rest of 2001::/23.
            ("2002:7f00:1::", Loopback),
            ("2002:a00:1::1", Private),
            ("2002:a9fe:a9fe::1", LinkLocal),
            ("2002:5db8:d70e::1", Reserved),
            ("2001:0:4136:e378:8000:63bf:3fff:fdd2", Reserved),
            ("2001:2::1", Benchmarking),
            ("2001:1::1", Reserved),
            ("2001:db8::1", Documentation),
            ("3fff::1", Documentation),
            ("100::1", Reserved),
            ("4000::1", Reserved),
            ("1234::1", Reserved),
            ("e000::1", Reserved),
            ("93.184.215.14", Public),
            ("151.101.0.223", Public),
            ("8.8.8.8", Public),
            ("1.1.1.1", Public),
            ("100.63.255.255", Public),
            ("100.128.0.0", Public),
            ("172.32.0.1", Public),
            ("198.20.0.1", Public),
            ("2a04:4e42::223", Public),
            ("2606:4700:4700::1111", Public),
            ("2001:4860:4860::8888", Public),
        ];
        for (ip, want) in table {
            let addr: IpAddr = ip.parse().unwrap();
            assert_eq!(class(addr), *want, "{ip}");
            assert_eq!(is_public(addr), *want == Public, "{ip}");
        }
    }
}
