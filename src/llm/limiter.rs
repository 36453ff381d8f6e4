//! Rate limiting before a request is sent, on two sides:
//! - the client's own tokens-per-minute limit: each request reserves its prompt estimate plus its
//!   `max_completion_tokens` and waits while the tokens reserved or spent in the last window (one
//!   minute) would exceed the limit; when it finishes, the reservation is settled to what it
//!   really used, which frees room for waiting requests at once. A request larger than the whole
//!   limit still goes alone once the window is empty (it could never go otherwise);
//! - the server's buckets (issue 51): every `x-ratelimit-*` bucket a response reported
//!   (`observe`: requests and tokens per minute, hour, day, the uncached-token one) with its
//!   remaining amount and reset. The API charges a request its input plus
//!   `max_completion_tokens` up front, so a request that would not fit a token bucket (or finds
//!   a request bucket empty) waits for that bucket's reset, or fails at once naming the bucket
//!   and when it resets when the reset is beyond `max_retry_wait_ms` or the call's deadline.

use super::wire::RateHints;
use super::LlmError;
use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

struct Entry {
    id: u64,
    at: Instant,
    tokens: u64,
}

#[derive(Default)]
struct State {
    entries: VecDeque<Entry>,
    next_id: u64,
}

pub struct TpmLimiter {
    limit: u64,
    window: Duration,
    state: Mutex<State>,
    changed: Notify,
    server: Mutex<Vec<ServerBucket>>,
}

/// A bucket as the last response reported it, minus what was charged since.
#[derive(Debug, Clone)]
struct ServerBucket {
    name: String,
    tokens: bool,
    limit: Option<u64>,
    remaining: u64,
    until: Instant,
    /// The same instant as wall-clock time (unix ms), for messages.
    until_wall_ms: i64,
}

/// A reservation to settle when the request is over.
#[derive(Debug)]
pub struct Reservation(Option<u64>);

impl TpmLimiter {
    /// `limit` tokens per minute; 0 disables the limit.
    pub fn new(limit: u64) -> TpmLimiter {
        TpmLimiter::with_window(limit, Duration::from_secs(60))
    }

    pub fn with_window(limit: u64, window: Duration) -> TpmLimiter {
        TpmLimiter {
            limit,
            window,
            state: Mutex::new(State::default()),
            changed: Notify::new(),
            server: Mutex::new(Vec::new()),
        }
    }

    /// Records the buckets a response reported (each replaces what was known of it).
    pub fn observe(&self, hints: &RateHints) {
        let now = Instant::now();
        let wall = crate::time::now_ms();
        let mut g = match self.server.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        for b in &hints.buckets {
            let (Some(remaining), Some(reset)) = (b.remaining, b.reset) else {
                continue;
            };
            g.retain(|s| s.name != b.name);
            g.push(ServerBucket {
                name: b.name.clone(),
                tokens: b.counts_tokens(),
                limit: b.limit,
                remaining,
                until: now + reset,
                until_wall_ms: wall + reset.as_millis() as i64,
            });
        }
    }

    /// Waits until every server bucket can take a request charged `tokens`, then charges it;
    /// fails naming the bucket when its reset is beyond `max_wait` or `deadline`.
    pub async fn server_room(
        &self,
        tokens: u64,
        deadline: Instant,
        max_wait: Duration,
        cancel: &CancellationToken,
    ) -> Result<(), LlmError> {
        loop {
            let blocking = {
                let mut g = match self.server.lock() {
                    Ok(g) => g,
                    Err(p) => p.into_inner(),
                };
                let now = Instant::now();
                g.retain(|b| b.until > now);
                let need = |b: &ServerBucket| if b.tokens { tokens } else { 1 };
                match g
                    .iter()
                    .filter(|b| b.remaining < need(b))
                    .max_by_key(|b| b.until)
                {
                    Some(b) => Some(b.clone()),
                    None => {
                        for b in g.iter_mut() {
                            b.remaining = b.remaining.saturating_sub(need(b));
                        }
                        None
                    }
                }
            };
            let Some(b) = blocking else { return Ok(()) };
            let now = Instant::now();
            let wait = b.until.saturating_duration_since(now);
            if wait > max_wait || b.until > deadline {
                return Err(LlmError::RateLimited(format!(
                    "the server's {} bucket has {} left{} and this request needs {} ({} charged up front: input + max_completion_tokens); it resets in {:.1} s, at {} — beyond {} (wait for the reset, lower [llm] max_completion_tokens, or raise the plan's limits)",
                    b.name,
                    b.remaining,
                    b.limit.map(|l| format!(" of {l}")).unwrap_or_default(),
                    if b.tokens { format!("{tokens} tokens") } else { "1 request".into() },
                    if b.tokens { "tokens are" } else { "requests are" },
                    wait.as_secs_f64(),
                    crate::time::local(b.until_wall_ms),
                    if wait > max_wait { "max_retry_wait_ms" } else { "the call's deadline (request_timeout_ms)" },
                )));
            }
            tracing::info!(bucket = %b.name, wait_ms = wait.as_millis() as u64, "waiting for the LLM API's rate-limit reset");
            tokio::select! {
                _ = cancel.cancelled() => return Err(LlmError::Cancelled),
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        match self.state.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Tokens reserved or spent in the current window.
    pub fn in_window(&self) -> u64 {
        let mut s = self.lock();
        self.prune(&mut s, Instant::now());
        s.entries.iter().map(|e| e.tokens).sum()
    }

    fn prune(&self, s: &mut State, now: Instant) {
        while s
            .entries
            .front()
            .is_some_and(|e| now.duration_since(e.at) >= self.window)
        {
            s.entries.pop_front();
        }
    }

    /// Waits until `tokens` fit in the window, then reserves them.
    pub async fn acquire(
        &self,
        tokens: u64,
        deadline: Instant,
        cancel: &CancellationToken,
    ) -> Result<Reservation, LlmError> {
        if self.limit == 0 {
            return Ok(Reservation(None));
        }
        loop {
            let notified = self.changed.notified();
            let wait = {
                let mut s = self.lock();
                let now = Instant::now();
                self.prune(&mut s, now);
                let used: u64 = s.entries.iter().map(|e| e.tokens).sum();
                if s.entries.is_empty() || used + tokens <= self.limit {
                    let id = s.next_id;
                    s.next_id += 1;
                    s.entries.push_back(Entry {
                        id,
                        at: now,
                        tokens,
                    });
                    return Ok(Reservation(Some(id)));
                }
                // The oldest entry leaves the window first.
                s.entries
                    .front()
                    .map(|e| (e.at + self.window).saturating_duration_since(now))
                    .unwrap_or_default()
            };
            let now = Instant::now();
            if now >= deadline {
                return Err(LlmError::RateLimited(format!(
                    "the client-side limit of {} tokens per minute left no room before the call's deadline",
                    self.limit
                )));
            }
            // Room may also come earlier, when a call in flight settles for less.
            let wait = wait.min(deadline - now);
            tokio::select! {
                _ = cancel.cancelled() => return Err(LlmError::Cancelled),
                _ = tokio::time::sleep(wait) => {}
                _ = notified => {}
            }
        }
    }

    /// Replaces a reservation by what the request really used (0 if nothing was consumed).
    pub fn settle(&self, r: Reservation, used: u64) {
        let Some(id) = r.0 else { return };
        {
            let mut s = self.lock();
            if let Some(e) = s.entries.iter_mut().find(|e| e.id == id) {
                e.tokens = used;
            }
        }
        self.changed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn waits_for_room_and_settling_frees_it() {
        let l = std::sync::Arc::new(TpmLimiter::with_window(1_000, Duration::from_secs(3600)));
        let far = Instant::now() + Duration::from_secs(3600);
        let c = CancellationToken::new();
        let a = l.acquire(600, far, &c).await.unwrap();
        assert_eq!(l.in_window(), 600);
        // The second must wait: settle the first to its real use and it goes.
        let l2 = l.clone();
        let c2 = c.clone();
        let waiter = tokio::spawn(async move { l2.acquire(600, far, &c2).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished(), "600 + 600 > 1000 must wait");
        l.settle(a, 100);
        let b = waiter.await.unwrap().unwrap();
        assert_eq!(l.in_window(), 700);
        l.settle(b, 0);
        // Too big for the limit: goes once the window is empty only.
        let l3 = TpmLimiter::with_window(100, Duration::from_millis(100));
        let r = l3.acquire(500, far, &c).await.unwrap();
        l3.settle(r, 500);
        let t = Instant::now();
        let _ = l3.acquire(500, far, &c).await.unwrap();
        assert!(t.elapsed() >= Duration::from_millis(90));
    }

    #[tokio::test]
    async fn a_bucket_the_server_reported_waits_for_its_reset_or_fails_naming_it() {
        let l = TpmLimiter::new(0);
        let c = CancellationToken::new();
        let far = Instant::now() + Duration::from_secs(3600);
        let mut h = RateHints::default();
        h.set("limit-tokens-minute", "60000");
        h.set("remaining-tokens-minute", "1000");
        h.set("reset-tokens-minute", "0.3");
        l.observe(&h);
        // 500 fits, and is charged: the next 600 does not, and waits for the reset.
        l.server_room(500, far, Duration::from_secs(60), &c)
            .await
            .unwrap();
        let t = Instant::now();
        l.server_room(600, far, Duration::from_secs(60), &c)
            .await
            .unwrap();
        assert!(
            t.elapsed() >= Duration::from_millis(250),
            "{:?}",
            t.elapsed()
        );
        let mut h = RateHints::default();
        h.set("remaining-requests-day", "0");
        h.set("reset-requests-day", "30000.5");
        l.observe(&h);
        let e = l
            .server_room(1, far, Duration::from_secs(120), &c)
            .await
            .unwrap_err();
        assert!(
            matches!(&e, LlmError::RateLimited(m) if m.contains("requests-day") && m.contains("30000.5 s")),
            "{e}"
        );
    }

    #[tokio::test]
    async fn deadline_and_cancel() {
        let l = TpmLimiter::with_window(10, Duration::from_secs(3600));
        let c = CancellationToken::new();
        let _a = l
            .acquire(10, Instant::now() + Duration::from_secs(1), &c)
            .await
            .unwrap();
        let e = l
            .acquire(5, Instant::now() + Duration::from_millis(100), &c)
            .await
            .unwrap_err();
        assert!(matches!(e, LlmError::RateLimited(_)));
        let l = TpmLimiter::with_window(10, Duration::from_millis(500));
        let _a = l
            .acquire(10, Instant::now() + Duration::from_secs(10), &c)
            .await
            .unwrap();
        c.cancel();
        assert_eq!(
            l.acquire(5, Instant::now() + Duration::from_secs(10), &c)
                .await
                .unwrap_err(),
            LlmError::Cancelled
        );
    }
}
