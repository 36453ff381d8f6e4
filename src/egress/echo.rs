//! What a bound host's response hands the command (issue 49): **the one owner of the echo
//! mask** — every form of a secret's value the proxy itself sent, hidden in what the command will
//! read of the response to a request that carried it.
//!
//! The mask works on what the command's HTTP client decodes, not on the bytes of the wire: the
//! response's heads (`1xx` and the final one) are masked whole; the body is decoded from its
//! transfer coding (`Content-Length`, `chunked` across chunk boundaries and across reads, or up
//! to the connection's end), masked as one stream, and sent on re-framed — `chunked` to an
//! HTTP/1.1 client, up to the connection's end otherwise (every response the proxy passes on
//! says `Connection: close`) — since the marker is not as long as what it hides. Trailers are
//! dropped. A value is replaced by [`MARK`], never by one `*` per byte (which would tell its
//! length). The forms masked are those [`forms`] finds in the request head as sent: the value,
//! each header value carrying it (a `header` template's whole rendered value), and each `Basic`
//! credential carrying it (the proxy's `basic_user` Base64, or its re-encoding of the command's
//! own). Toward a bound host the proxy asks for `Accept-Encoding: identity`
//! ([`identity_only`]), so a compression the command asked for cannot hide the value; what the
//! server computes itself (its own Base64 of a value, reversed, upper-cased, compressed although
//! asked not to) is not recognised (docs/security.md says so).

use base64::Engine as _;

/// What a masked value becomes in the response.
pub const MARK: &[u8] = b"[masked]";

/// The longest response head the mask reads (beyond it, nothing more is passed on).
const MAX_HEAD: usize = 64 * 1024;

/// Replaces every occurrence of the values in a byte stream by [`MARK`], across pushes: the
/// end that could begin a value is held back until the next push or [`Mask::finish`].
#[derive(Debug, Default)]
pub struct Mask {
    values: Vec<Vec<u8>>,
    held: Vec<u8>,
}

impl Mask {
    pub fn new(mut values: Vec<Vec<u8>>) -> Mask {
        values.retain(|v| !v.is_empty());
        values.sort();
        values.dedup();
        Mask {
            values,
            held: Vec::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The earliest occurrence of a value in `hay` (the longest one there): (offset, length).
    fn earliest(&self, hay: &[u8]) -> Option<(usize, usize)> {
        let mut best: Option<(usize, usize)> = None;
        for v in &self.values {
            if let Some(i) = memchr::memmem::find(hay, v) {
                best = match best {
                    Some((j, l)) if j < i || (j == i && l >= v.len()) => Some((j, l)),
                    _ => Some((i, v.len())),
                };
            }
        }
        best
    }

    /// Takes `chunk`, returns what may be passed on now: only the longest end that is a proper
    /// prefix of a value waits.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        if self.values.is_empty() {
            return chunk.to_vec();
        }
        self.held.extend_from_slice(chunk);
        let mut out = Vec::with_capacity(self.held.len());
        let mut from = 0;
        while let Some((at, len)) = self.earliest(&self.held[from..]) {
            out.extend_from_slice(&self.held[from..from + at]);
            out.extend_from_slice(MARK);
            from += at + len;
        }
        let rest = &self.held[from..];
        let n = rest.len();
        let keep = (1..n.min(self.longest()) + 1)
            .rev()
            .find(|k| {
                let end = &rest[n - k..];
                self.values
                    .iter()
                    .any(|v| v.len() > *k && v.starts_with(end))
            })
            .unwrap_or(0);
        out.extend_from_slice(&rest[..n - keep]);
        self.held.drain(..from + n - keep);
        out
    }

    fn longest(&self) -> usize {
        self.values.iter().map(|v| v.len()).max().unwrap_or(1) - 1
    }

    /// What was held back (the stream ended): never a whole value.
    pub fn finish(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.held)
    }

    /// `bytes` masked at once (a head).
    fn all(&self, bytes: &[u8]) -> Vec<u8> {
        let mut m = Mask::new(self.values.clone());
        let mut out = m.push(bytes);
        out.extend(m.finish());
        out
    }
}

/// Every form of the values in `values` the request head `headers` (as sent upstream) carries:
/// the values themselves, each header value holding one, and each `Basic` credential whose
/// decoding holds one (the Base64 token alone, as a server may echo it).
pub fn forms(values: &[&[u8]], headers: &[(String, Vec<u8>)]) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = values.iter().map(|v| v.to_vec()).collect();
    let holds = |b: &[u8]| {
        values
            .iter()
            .any(|v| !v.is_empty() && b.windows(v.len()).any(|w| w == *v))
    };
    for (_, v) in headers {
        if holds(v) {
            out.push(v.clone());
        }
        for token in v.split(|b| b.is_ascii_whitespace() || *b == b',') {
            if token.len() < 4 {
                continue;
            }
            let decoded = [
                &base64::engine::general_purpose::STANDARD,
                &base64::engine::general_purpose::URL_SAFE,
            ]
            .iter()
            .find_map(|e| e.decode(token).ok());
            if decoded.is_some_and(|d| holds(&d)) {
                out.push(token.to_vec());
                out.push(v.clone());
            }
        }
    }
    out
}

/// A request head toward a bound host that carries a value asks for the response unencoded:
/// its `Accept-Encoding` lines become one `Accept-Encoding: identity`.
pub fn identity_only(headers: &mut Vec<(String, Vec<u8>)>) {
    headers.retain(|(n, _)| !n.eq_ignore_ascii_case("accept-encoding"));
    headers.push(("Accept-Encoding".into(), b"identity".to_vec()));
}

#[derive(Debug)]
enum Body {
    /// `Content-Length`: bytes left.
    Length(u64),
    /// `chunked`: where in the framing.
    Chunked(Chunk),
    /// Up to the connection's end.
    Close,
}

#[derive(Debug)]
enum Chunk {
    /// Reading a chunk-size line.
    Size,
    /// Data bytes left in this chunk.
    Data(u64),
    /// The CRLF after a chunk's data.
    DataEnd,
    /// The trailer section after the last chunk (dropped).
    Trailers,
}

#[derive(Debug)]
enum State {
    Head,
    Body(Body),
    /// The response ended (or could not be read): the rest is dropped.
    Done,
}

/// The response to a request that carried a value, as the command gets it (see the module doc).
#[derive(Debug)]
pub struct Masked {
    mask: Mask,
    state: State,
    /// Bytes read and not decoded yet.
    buf: Vec<u8>,
    /// The request was `HEAD`: no body follows any head.
    head_request: bool,
    /// The body goes on `chunked` (an HTTP/1.1 client), else up to the connection's end.
    rechunk: bool,
}

impl Masked {
    /// The response to a request of `method`, HTTP/1.`version`, masking `values` (the forms
    /// [`forms`] found; none: nothing to mask — the response passes as it is).
    pub fn new(values: Vec<Vec<u8>>, method: &str, version: u8) -> Masked {
        Masked {
            mask: Mask::new(values),
            state: State::Head,
            buf: Vec::new(),
            head_request: method.eq_ignore_ascii_case("HEAD"),
            rechunk: version >= 1,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.mask.is_empty()
    }

    /// Takes what the upstream sent next; returns what the command may read now.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        if self.mask.is_empty() {
            return chunk.to_vec();
        }
        if matches!(self.state, State::Done) {
            return Vec::new();
        }
        self.buf.extend_from_slice(chunk);
        let mut out = Vec::new();
        while self.step(&mut out) {}
        out
    }

    /// The upstream closed: what is left (a body read up to the end, a body cut short).
    pub fn finish(&mut self) -> Vec<u8> {
        if self.mask.is_empty() {
            return std::mem::take(&mut self.buf);
        }
        let mut out = Vec::new();
        match std::mem::replace(&mut self.state, State::Done) {
            State::Head => {
                // A head cut short: what came of it, masked.
                out = self.mask.all(&self.buf);
            }
            State::Body(_) => {
                let rest = self.mask.finish();
                self.frame(&rest, &mut out);
                if self.rechunk {
                    out.extend_from_slice(b"0\r\n\r\n");
                }
            }
            State::Done => {}
        }
        self.buf.clear();
        out
    }

    /// Body bytes `data` (masked already) as the command gets them.
    fn frame(&self, data: &[u8], out: &mut Vec<u8>) {
        if data.is_empty() {
            return;
        }
        if self.rechunk {
            out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
            out.extend_from_slice(data);
            out.extend_from_slice(b"\r\n");
        } else {
            out.extend_from_slice(data);
        }
    }

    /// Decoded body bytes: masked, framed.
    fn body(&mut self, data: &[u8], out: &mut Vec<u8>) {
        let m = self.mask.push(data);
        self.frame(&m, out);
    }

    /// The body ended.
    fn end(&mut self, out: &mut Vec<u8>) {
        let rest = self.mask.finish();
        self.frame(&rest, out);
        if self.rechunk {
            out.extend_from_slice(b"0\r\n\r\n");
        }
        self.state = State::Done;
        self.buf.clear();
    }

    /// One step of decoding; false: it needs more bytes (or the response is done).
    fn step(&mut self, out: &mut Vec<u8>) -> bool {
        match &mut self.state {
            State::Done => false,
            State::Head => {
                let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                    if self.buf.len() > MAX_HEAD {
                        self.state = State::Done;
                        self.buf.clear();
                    }
                    return false;
                };
                let head: Vec<u8> = self.buf.drain(..end + 4).collect();
                self.head(&head, out);
                true
            }
            State::Body(Body::Length(left)) => {
                if *left == 0 {
                    self.end(out);
                    return false;
                }
                if self.buf.is_empty() {
                    return false;
                }
                let n = (*left).min(self.buf.len() as u64) as usize;
                *left -= n as u64;
                let data: Vec<u8> = self.buf.drain(..n).collect();
                self.body(&data, out);
                true
            }
            State::Body(Body::Close) => {
                if self.buf.is_empty() {
                    return false;
                }
                let data = std::mem::take(&mut self.buf);
                self.body(&data, out);
                false
            }
            State::Body(Body::Chunked(c)) => match c {
                Chunk::Size => {
                    let Some(nl) = self.buf.iter().position(|b| *b == b'\n') else {
                        if self.buf.len() > 4096 {
                            self.state = State::Done;
                        }
                        return false;
                    };
                    let line: Vec<u8> = self.buf.drain(..nl + 1).collect();
                    let text = String::from_utf8_lossy(&line);
                    let size = text.split(';').next().unwrap_or("").trim();
                    match u64::from_str_radix(size, 16) {
                        Ok(0) => *c = Chunk::Trailers,
                        Ok(n) => *c = Chunk::Data(n),
                        Err(_) => {
                            // Not chunked framing: nothing more is passed on.
                            self.end(out);
                            return false;
                        }
                    }
                    true
                }
                Chunk::Data(left) => {
                    if self.buf.is_empty() {
                        return false;
                    }
                    let n = (*left).min(self.buf.len() as u64) as usize;
                    *left -= n as u64;
                    if *left == 0 {
                        *c = Chunk::DataEnd;
                    }
                    let data: Vec<u8> = self.buf.drain(..n).collect();
                    self.body(&data, out);
                    true
                }
                Chunk::DataEnd => {
                    let Some(nl) = self.buf.iter().position(|b| *b == b'\n') else {
                        return false;
                    };
                    self.buf.drain(..nl + 1);
                    *c = Chunk::Size;
                    true
                }
                Chunk::Trailers => {
                    let Some(nl) = self.buf.iter().position(|b| *b == b'\n') else {
                        return false;
                    };
                    let line: Vec<u8> = self.buf.drain(..nl + 1).collect();
                    if line.trim_ascii().is_empty() {
                        self.end(out);
                        return false;
                    }
                    true
                }
            },
        }
    }

    /// A response head: masked; a final one says how the body is framed and is re-framed.
    fn head(&mut self, head: &[u8], out: &mut Vec<u8>) {
        let code: u16 = std::str::from_utf8(head.get(9..12).unwrap_or_default())
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        if (100..200).contains(&code) {
            out.extend(self.mask.all(head));
            return;
        }
        let mut chunked = false;
        let mut length: Option<u64> = None;
        let mut kept = Vec::with_capacity(head.len() + 32);
        let body_head = &head[..head.len() - 2];
        for (i, line) in body_head.split_inclusive(|b| *b == b'\n').enumerate() {
            let name = line.split(|b| *b == b':').next().unwrap_or_default();
            let name = name.trim_ascii();
            let value = line
                .splitn(2, |b| *b == b':')
                .nth(1)
                .unwrap_or_default()
                .trim_ascii();
            if i > 0 && name.eq_ignore_ascii_case(b"transfer-encoding") {
                chunked |= value.to_ascii_lowercase().ends_with(b"chunked");
                continue;
            }
            if i > 0 && name.eq_ignore_ascii_case(b"content-length") {
                length = std::str::from_utf8(value).ok().and_then(|v| v.parse().ok());
                continue;
            }
            kept.extend_from_slice(line);
        }
        let no_body = self.head_request || code == 204 || code == 304;
        if no_body {
            // Its framing lines say what a GET would get: kept as they are.
            out.extend(self.mask.all(head));
            self.state = State::Done;
            self.buf.clear();
            return;
        }
        // `chunked` only in an HTTP/1.1 response (an HTTP/1.0 one is read up to the end).
        self.rechunk &= head.starts_with(b"HTTP/1.1");
        if self.rechunk {
            kept.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
        }
        kept.extend_from_slice(b"\r\n");
        out.extend(self.mask.all(&kept));
        self.state = State::Body(match (chunked, length) {
            (true, _) => Body::Chunked(Chunk::Size),
            (false, Some(n)) => Body::Length(n),
            (false, None) => Body::Close,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V: &[u8] = b"s3cr3t-canary";

    fn through(m: &mut Masked, parts: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for p in parts {
            out.extend(m.push(p));
        }
        out.extend(m.finish());
        out
    }

    /// The body a client decodes from a chunked response.
    fn dechunk(resp: &[u8]) -> (String, Vec<u8>) {
        let end = resp.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let head = String::from_utf8_lossy(&resp[..end]).into_owned();
        let mut rest = &resp[end..];
        let mut body = Vec::new();
        loop {
            let nl = rest.windows(2).position(|w| w == b"\r\n").unwrap();
            let n = usize::from_str_radix(std::str::from_utf8(&rest[..nl]).unwrap(), 16).unwrap();
            rest = &rest[nl + 2..];
            if n == 0 {
                break;
            }
            body.extend_from_slice(&rest[..n]);
            rest = &rest[n + 2..];
        }
        (head, body)
    }

    #[test]
    fn a_mask_replaces_each_value_by_the_marker_across_pushes() {
        let mut m = Mask::new(vec![b"s3cr3t".to_vec()]);
        let mut out = m.push(b"hello s3c");
        out.extend(m.push(b"r3t world s3cr3t"));
        out.extend(m.finish());
        assert_eq!(out, b"hello [masked] world [masked]");
        let mut m = Mask::new(vec![b"s3cr3t".to_vec()]);
        assert_eq!(m.push(b"ok\n"), b"ok\n");
        assert_eq!(m.push(b"done s3"), b"done ");
        assert_eq!(m.push(b"x"), b"s3x");
        assert_eq!(m.push(b"s3cr"), b"");
        assert_eq!(m.push(b"3t!"), b"[masked]!");
        assert!(m.finish().is_empty());
    }

    #[test]
    fn a_chunked_body_is_masked_whatever_offset_splits_the_value() {
        for split in 0..=V.len() {
            for read in [1usize, 3, 7, 64] {
                let (a, b) = V.split_at(split);
                let mut wire = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
                for part in [&b"echo: "[..], a, b, b"\n"] {
                    if !part.is_empty() {
                        wire.extend(format!("{:x}\r\n", part.len()).as_bytes());
                        wire.extend_from_slice(part);
                        wire.extend_from_slice(b"\r\n");
                    }
                }
                wire.extend_from_slice(b"0\r\nX-Trailer: s3cr3t-canary\r\n\r\n");
                let mut m = Masked::new(vec![V.to_vec()], "GET", 1);
                let parts: Vec<&[u8]> = wire.chunks(read).collect();
                let out = through(&mut m, &parts);
                let (head, body) = dechunk(&out);
                assert_eq!(body, b"echo: [masked]\n", "split {split}, reads of {read}");
                assert!(head.contains("Transfer-Encoding: chunked"), "{head}");
                assert!(!out.windows(V.len()).any(|w| w == V), "split {split}");
            }
        }
    }

    #[test]
    fn a_content_length_body_is_reframed_and_heads_are_masked() {
        let body = b"Authorization: Basic eC1hY2Nlc3MtdG9rZW46czNjcjN0LWNhbmFyeQ==\n";
        let wire = [
            &b"HTTP/1.1 100 Continue\r\nX-Seen: s3cr3t-canary\r\n\r\n"[..],
            format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nX-Echo: s3cr3t-canary\r\n\r\n",
                body.len()
            )
            .as_bytes(),
            body,
            b"garbage after the body",
        ]
        .concat();
        let values = forms(
            &[V],
            &[(
                "Authorization".into(),
                b"Basic eC1hY2Nlc3MtdG9rZW46czNjcjN0LWNhbmFyeQ==".to_vec(),
            )],
        );
        let mut m = Masked::new(values.clone(), "GET", 1);
        let out = through(&mut m, &[&wire]);
        let text = String::from_utf8_lossy(&out);
        assert!(
            text.starts_with("HTTP/1.1 100 Continue\r\nX-Seen: [masked]\r\n\r\n"),
            "{text}"
        );
        assert!(!text.contains("Content-Length"), "{text}");
        assert!(text.contains("X-Echo: [masked]"), "{text}");
        let second = out.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let (_, b) = dechunk(&out[second..]);
        assert_eq!(b, b"Authorization: [masked]\n");
        // An HTTP/1.0 client, or an HTTP/1.0 response: the body up to the end, not chunked.
        let mut m = Masked::new(values.clone(), "GET", 0);
        let out = through(&mut m, &[&wire]);
        assert!(String::from_utf8_lossy(&out).ends_with("\r\n\r\nAuthorization: [masked]\n"));
        let old = [
            &b"HTTP/1.0 200 OK\r\nContent-Length: 14\r\n\r\n"[..],
            V,
            b"!",
        ]
        .concat();
        let mut m = Masked::new(values, "GET", 1);
        let out = String::from_utf8_lossy(&through(&mut m, &[&old])).into_owned();
        assert_eq!(out, "HTTP/1.0 200 OK\r\n\r\n[masked]!");
    }

    #[test]
    fn a_head_request_and_an_unmasked_response_pass_as_they_are() {
        let wire = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n";
        let mut m = Masked::new(vec![V.to_vec()], "HEAD", 1);
        assert_eq!(through(&mut m, &[wire]), wire.to_vec());
        let mut m = Masked::new(Vec::new(), "GET", 1);
        let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi";
        assert_eq!(through(&mut m, &[raw]), raw.to_vec());
    }

    #[test]
    fn forms_are_the_value_the_rendered_header_and_the_basic_token() {
        let f = forms(
            &[V],
            &[
                ("X-Api-Key".into(), b"Key s3cr3t-canary".to_vec()),
                ("Accept".into(), b"*/*".to_vec()),
            ],
        );
        assert_eq!(f, vec![V.to_vec(), b"Key s3cr3t-canary".to_vec()]);
    }
}
