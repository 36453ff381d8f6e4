//! **The hosts a command names** before it runs (issue 36): what the first prompt about a
//! network command shows, resolved with the proxy's resolver (`resolve::shown`), and what an
//! `approve` of that prompt allows for the command (the hosts shown public; one shown at a
//! non-public address only with `--allow-private-hosts`, `cli::security`). Read from the classified operations' arguments: URLs
//! (`scheme://[user@]host[:port]/…`, the scheme's port when none is given) and, for `git`, the
//! scp-like `user@host:path` (port 22). Never a rule by itself: a host the command reaches
//! without naming it (a package registry, a redirect) is refused by the proxy and asked about
//! after the run, as before.

use super::rules::HostRule;
use crate::classify::CheckReport;

/// At most this many hosts are named in one prompt (the rest asked about after the run).
pub const MAX_NAMED: usize = 8;

/// The `host:port` rule texts `report`'s operations name, sorted, without duplicates; none
/// when its permission set has no network (a command without network reaches nothing).
pub fn hosts(report: &CheckReport) -> Vec<String> {
    if !report.permission_set.network() {
        return Vec::new();
    }
    let mut out: Vec<String> = Vec::new();
    for op in &report.operations {
        for a in &op.args {
            for h in urls_in(a) {
                out.push(h);
            }
            if op.program == "git" {
                out.extend(scp_like(a));
            }
        }
    }
    out.sort();
    out.dedup();
    // The proxy itself, as the command reaches it (`-x socks5h://127.0.0.1:3128`).
    let own = format!("127.0.0.1:{}", super::proxy::PORT);
    out.retain(|h| *h != own && h != &format!("localhost:{}", super::proxy::PORT));
    out.truncate(MAX_NAMED);
    out
}

/// The port a URL scheme means when its URL names none.
fn default_port(scheme: &str) -> Option<u16> {
    Some(match scheme {
        "http" | "ws" => 80,
        "https" | "wss" => 443,
        "ftp" => 21,
        "ftps" => 990,
        "ssh" | "sftp" | "git+ssh" | "ssh+git" => 22,
        "git" => 9418,
        "rsync" => 873,
        "socks5" | "socks5h" | "socks4" | "socks4a" => 1080,
        _ => return None,
    })
}

/// The `host:port` rule text of one URL (`http://127.0.0.1:8080/v1`: the configured model's
/// host, for a hook with `llm = true`).
pub fn url_host(url: &str) -> Option<String> {
    urls_in(url.trim()).into_iter().next()
}

/// The `host:port` of every URL in `s` (a word of the command).
fn urls_in(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = s;
    while let Some(at) = rest.find("://") {
        let before = &rest[..at];
        let scheme: String = before
            .chars()
            .rev()
            .take_while(|c| c.is_ascii_alphanumeric() || "+-.".contains(*c))
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        let after = &rest[at + 3..];
        let end = after
            .find(|c: char| "/?#\\\"' \t\n()<>,;`|&".contains(c))
            .unwrap_or(after.len());
        if let Some(h) = authority(&scheme.to_ascii_lowercase(), &after[..end]) {
            out.push(h);
        }
        rest = &after[end..];
    }
    out
}

/// `host:port` of a URL's authority (`user@host:port`), when it names one host.
fn authority(scheme: &str, auth: &str) -> Option<String> {
    let port = default_port(scheme)?;
    let hostport = auth.rsplit_once('@').map_or(auth, |(_, h)| h);
    if hostport.is_empty() {
        return None;
    }
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        let (h, tail) = v6.split_once(']')?;
        let p = match tail.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None if tail.is_empty() => port,
            None => return None,
        };
        (format!("[{h}]"), p)
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), p.parse().ok()?),
            None => (hostport.to_string(), port),
        }
    };
    plain(&host, port)
}

/// git's scp-like remote `user@host:path` (port 22); not a URL, not a local path.
fn scp_like(s: &str) -> Option<String> {
    if s.contains("://") || s.starts_with('-') || s.starts_with('/') {
        return None;
    }
    let (userhost, path) = s.split_once(':')?;
    let (_, host) = userhost.split_once('@')?;
    if path.is_empty() || host.is_empty() || host.contains('/') {
        return None;
    }
    plain(host, 22)
}

/// The rule text of `host:port` when it is one plain host (no glob, nothing dynamic).
fn plain(host: &str, port: u16) -> Option<String> {
    if host.contains('*') || host.contains('…') || host.contains('$') {
        return None;
    }
    let r = HostRule::parse(&format!("{host}:{port}"), "named").ok()?;
    r.explicit().then(|| r.text())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(cmd: &str) -> Vec<String> {
        hosts(&crate::classify::check(
            cmd,
            &crate::classify::Context { workdir: None },
        ))
    }

    #[test]
    fn urls_and_git_remotes_name_their_hosts_with_the_schemes_port() {
        assert_eq!(
            named("curl -sS https://Example.org/x?y=1"),
            ["example.org:443"]
        );
        assert_eq!(
            named("curl -sS http://127.0.0.1:8080/index.html -o /dev/null"),
            ["127.0.0.1:8080"]
        );
        assert_eq!(
            named("wget 'http://user:pw@files.example.net:8000/a' http://[::1]:81/b"),
            ["[::1]:81", "files.example.net:8000"]
        );
        assert_eq!(named("git clone git@github.com:o/r.git"), ["github.com:22"]);
        assert_eq!(
            named("git ls-remote https://git.example.org/r.git"),
            ["git.example.org:443"]
        );
        // The host is what follows the userinfo: the address the tool connects to is shown.
        assert_eq!(
            named("curl http://pypi.org:443@127.0.0.1:8080/x"),
            ["127.0.0.1:8080"]
        );
        // The proxy itself is not a host the command is asking for.
        assert_eq!(
            named("curl -x socks5h://127.0.0.1:3128 http://a.test:9/"),
            ["a.test:9"]
        );
        // Nothing without a network set, nothing dynamic, no unknown scheme.
        assert!(named("echo http://example.org/").is_empty());
        assert!(named("curl \"$URL\"").is_empty());
        assert!(named("curl http://$HOST/x").is_empty());
        assert!(named("curl file:///etc/passwd").is_empty());
    }

    #[test]
    fn a_base_url_names_its_host() {
        assert_eq!(
            url_host("http://127.0.0.1:8080/v1").as_deref(),
            Some("127.0.0.1:8080")
        );
        assert_eq!(
            url_host("https://api.cerebras.ai/v1").as_deref(),
            Some("api.cerebras.ai:443")
        );
        assert_eq!(
            url_host("http://localhost:11434").as_deref(),
            Some("localhost:11434")
        );
        assert_eq!(url_host("not a url"), None);
    }

    #[test]
    fn hosts_are_capped() {
        let many: Vec<String> = (0..20).map(|i| format!("http://h{i}.test/")).collect();
        assert_eq!(named(&format!("curl {}", many.join(" "))).len(), MAX_NAMED);
    }
}
