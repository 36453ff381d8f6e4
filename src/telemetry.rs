//! Telemetry events on their way to metadata.db (issue 19): **recording an event never waits
//! on the database**. [`Queue::push`] appends to a bounded in-memory queue and wakes the
//! recorder task (`supervisor::recorder`), which writes the events in batches and retries while
//! metadata.db is locked or failing. When the queue is full the oldest event is dropped and
//! counted; the count is logged and written as an `events_dropped` event once writes succeed
//! again. Only telemetry may be dropped: audit rows never pass here (`db::audit_outbox`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use tokio::sync::Notify;

/// Events held in memory at most; beyond it the oldest is dropped (and counted).
pub const CAPACITY: usize = 1024;

/// One telemetry event, timestamped when it was recorded.
#[derive(Debug, Clone)]
pub struct Event {
    pub timestamp: i64,
    pub kind: String,
    pub job_id: Option<i64>,
    pub detail: serde_json::Value,
}

impl Event {
    pub fn now(kind: &str, job_id: Option<i64>, detail: serde_json::Value) -> Event {
        Event {
            timestamp: crate::time::now_ms(),
            kind: kind.to_string(),
            job_id,
            detail,
        }
    }
}

/// The queue between whoever records events and the recorder; its `wake` also tells the
/// recorder that audit rows were staged.
#[derive(Default)]
pub struct Queue {
    events: Mutex<VecDeque<Event>>,
    dropped: AtomicU64,
    wake: Notify,
}

impl Queue {
    /// Records an event without blocking on anything but the queue's own lock.
    pub fn push(&self, e: Event) {
        self.requeue(vec![e], false);
        self.wake.notify_one();
    }

    /// Tells the recorder that there is work (audit rows staged).
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Resolves at the next `push` / `wake` (a wake while nobody waits is kept).
    pub async fn woken(&self) {
        self.wake.notified().await
    }

    /// Up to `max` of the oldest events, removed from the queue.
    pub fn take(&self, max: usize) -> Vec<Event> {
        let mut q = self.lock();
        let n = q.len().min(max);
        q.drain(..n).collect()
    }

    /// Puts back a batch that could not be written, ahead of newer events.
    pub fn put_back(&self, batch: Vec<Event>) {
        self.requeue(batch, true);
    }

    /// Events dropped since the last call (the counter restarts at 0).
    pub fn take_dropped(&self) -> u64 {
        self.dropped.swap(0, Ordering::Relaxed)
    }

    /// Gives back a count taken with [`Queue::take_dropped`] that could not be written.
    pub fn restore_dropped(&self, n: u64) {
        self.dropped.fetch_add(n, Ordering::Relaxed);
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds `batch` at the back (or the front), then drops the oldest beyond [`CAPACITY`].
    fn requeue(&self, batch: Vec<Event>, front: bool) {
        let mut q = self.lock();
        if front {
            for e in batch.into_iter().rev() {
                q.push_front(e);
            }
        } else {
            q.extend(batch);
        }
        let over = q.len().saturating_sub(CAPACITY);
        if over > 0 {
            q.drain(..over);
            self.dropped.fetch_add(over as u64, Ordering::Relaxed);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Event>> {
        match self.events.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_full_queue_drops_the_oldest_and_counts_them() {
        let q = Queue::default();
        for i in 0..CAPACITY + 3 {
            q.push(Event::now("e", Some(i as i64), json!({})));
        }
        assert_eq!(q.len(), CAPACITY);
        assert_eq!(q.take_dropped(), 3);
        assert_eq!(q.take_dropped(), 0);
        let first = q.take(1);
        assert_eq!(first[0].job_id, Some(3), "the oldest went first");
    }

    #[test]
    fn a_batch_put_back_keeps_its_place_ahead_of_newer_events() {
        let q = Queue::default();
        for i in 0..4 {
            q.push(Event::now("e", Some(i), json!({})));
        }
        let batch = q.take(2);
        q.push(Event::now("e", Some(4), json!({})));
        q.put_back(batch);
        let ids: Vec<_> = q.take(10).iter().map(|e| e.job_id).collect();
        assert_eq!(ids, [0, 1, 2, 3, 4].map(Some));
    }
}
