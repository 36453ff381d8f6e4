//! The in-memory dispatch order of claimed jobs, and the per-client slot accounting.
//!
//! Order: due jobs by priority (highest first) then id (oldest first); jobs with a future
//! `not_before` wait in time order until due. Fair slots: each client (the job row's
//! `client_id`) may hold at most `share` running slots, so one client cannot occupy every slot
//! of the worker. [`ReadyQueue::pop`] returns the best due job among clients below their share
//! and counts its slot; [`ReadyQueue::release`] gives the slot back. Jobs of a client at its
//! share stay queued in their order and become eligible as soon as one of its slots frees.
//!
//! Times here are `time::mono_ms` (issue 34): a job's wall-clock `not_before` is converted once,
//! when it enters the queue, to a monotonic deadline (`time::mono_deadline`), so a wall-clock
//! step neither delays it by the step nor releases it early.
//!
//! Pure data: the claimed snapshots themselves stay in lifecycle.db. Client names are untrusted:
//! memory per client exists only while it has ready or running jobs, and every operation is
//! O(log n) (one ordered set holds the head job of each client below its share).

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};
use std::sync::Arc;

/// A claimed job as the dispatcher sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    pub id: i64,
    pub priority: i64,
    /// The job row's `client_id`: whose share the job's slot counts against.
    pub client: Arc<str>,
}

impl Job {
    pub fn new(id: i64, priority: i64, client: &str) -> Job {
        Job {
            id,
            priority,
            client: Arc::from(client),
        }
    }
}

/// Dispatch rank of a due job: greater = starts first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Due {
    priority: i64,
    id: i64,
}

impl Ord for Due {
    fn cmp(&self, other: &Self) -> Ordering {
        self.priority
            .cmp(&other.priority)
            .then_with(|| Reverse(self.id).cmp(&Reverse(other.id)))
    }
}

impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// One client's due jobs and running slots; dropped when both are empty.
#[derive(Default)]
struct ClientQueue {
    due: BinaryHeap<Due>,
    running: usize,
}

pub struct ReadyQueue {
    /// Running slots one client may hold (at least 1).
    share: usize,
    clients: HashMap<Arc<str>, ClientQueue>,
    /// The head due job of every client below its share.
    eligible: BTreeMap<Due, Arc<str>>,
    /// (not_before, id, priority, client)
    waiting: BTreeSet<(i64, i64, i64, Arc<str>)>,
    /// Due jobs of every client (kept so `len` is O(1)).
    due_count: usize,
}

impl ReadyQueue {
    /// A queue where one client holds at most `share` running slots (0 is taken as 1).
    pub fn new(share: usize) -> ReadyQueue {
        ReadyQueue {
            share: share.max(1),
            clients: HashMap::new(),
            eligible: BTreeMap::new(),
            waiting: BTreeSet::new(),
            due_count: 0,
        }
    }

    pub fn push(&mut self, job: Job, not_before: Option<i64>, now: i64) {
        match not_before {
            Some(t) if t > now => {
                self.waiting.insert((t, job.id, job.priority, job.client));
            }
            _ => self.push_due(job),
        }
    }

    /// Moves jobs whose `not_before` has come into the due order.
    pub fn promote(&mut self, now: i64) {
        while let Some((t, _, _, _)) = self.waiting.first() {
            if *t > now {
                break;
            }
            if let Some((_, id, priority, client)) = self.waiting.pop_first() {
                self.push_due(Job {
                    id,
                    priority,
                    client,
                });
            }
        }
    }

    /// The next job to start, if one is due for a client below its share. Its slot is counted
    /// from now on: give it back with [`release`](Self::release) (or [`put_back`](Self::put_back)).
    pub fn pop(&mut self) -> Option<Job> {
        let (due, client) = self.eligible.pop_last()?;
        let q = self.clients.get_mut(&client)?;
        if q.due.pop().is_some() {
            self.due_count = self.due_count.saturating_sub(1);
        }
        q.running += 1;
        self.attach(&client);
        Some(Job {
            id: due.id,
            priority: due.priority,
            client,
        })
    }

    /// Frees one running slot of `client`; its next due job becomes eligible.
    pub fn release(&mut self, client: &str) {
        let Some(q) = self.clients.get_mut(client) else {
            return;
        };
        q.running = q.running.saturating_sub(1);
        self.attach(client);
        self.forget_if_idle(client);
    }

    /// Undoes a [`pop`](Self::pop) whose job could not be started: slot freed, job due again.
    pub fn put_back(&mut self, job: Job) {
        self.release(&job.client);
        self.push_due(job);
    }

    /// Takes job `id` out of the queue (`brainloop cancel`): it never starts. False if it was not
    /// queued here (running, or unknown).
    pub fn remove(&mut self, id: i64) -> bool {
        if let Some(w) = self.waiting.iter().find(|w| w.1 == id).cloned() {
            self.waiting.remove(&w);
            return true;
        }
        let client = self
            .clients
            .iter()
            .find(|(_, q)| q.due.iter().any(|d| d.id == id))
            .map(|(c, _)| Arc::clone(c));
        let Some(client) = client else {
            return false;
        };
        self.detach(&client);
        if let Some(q) = self.clients.get_mut(&client) {
            q.due.retain(|d| d.id != id);
        }
        self.due_count = self.due_count.saturating_sub(1);
        self.attach(&client);
        self.forget_if_idle(&client);
        true
    }

    /// When the earliest waiting job becomes due.
    pub fn next_due(&self) -> Option<i64> {
        self.waiting.first().map(|(t, _, _, _)| *t)
    }

    /// Jobs queued (due or waiting), not counting running ones.
    pub fn len(&self) -> usize {
        self.due_count + self.waiting.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Running slots held by `client`.
    pub fn running(&self, client: &str) -> usize {
        self.clients.get(client).map_or(0, |q| q.running)
    }

    /// Running slots held by every client, by name (clients holding none are left out).
    pub fn running_by_client(&self) -> BTreeMap<String, usize> {
        self.clients
            .iter()
            .filter(|(_, q)| q.running > 0)
            .map(|(c, q)| (c.to_string(), q.running))
            .collect()
    }

    fn push_due(&mut self, job: Job) {
        self.detach(&job.client);
        self.clients
            .entry(Arc::clone(&job.client))
            .or_default()
            .due
            .push(Due {
                priority: job.priority,
                id: job.id,
            });
        self.due_count += 1;
        self.attach(&job.client);
    }

    /// Removes `client`'s head job from the eligible set, if it is there.
    fn detach(&mut self, client: &str) {
        let head = self.clients.get(client).and_then(|q| q.due.peek().copied());
        if let Some(h) = head {
            self.eligible.remove(&h);
        }
    }

    /// Puts `client`'s head job in the eligible set if the client is below its share.
    fn attach(&mut self, client: &str) {
        let Some((key, q)) = self.clients.get_key_value(client) else {
            return;
        };
        if q.running >= self.share {
            return;
        }
        if let Some(&h) = q.due.peek() {
            self.eligible.insert(h, Arc::clone(key));
        }
    }

    fn forget_if_idle(&mut self, client: &str) {
        if self
            .clients
            .get(client)
            .is_some_and(|q| q.running == 0 && q.due.is_empty())
        {
            self.clients.remove(client);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(q: &mut ReadyQueue) -> Vec<i64> {
        std::iter::from_fn(|| q.pop()).map(|j| j.id).collect()
    }

    #[test]
    fn a_removed_job_never_pops_and_the_rest_keep_their_order() {
        let mut q = ReadyQueue::new(usize::MAX);
        q.push(Job::new(1, 0, "a"), None, 100);
        q.push(Job::new(2, 5, "a"), None, 100);
        q.push(Job::new(3, 0, "b"), None, 100);
        q.push(Job::new(4, 0, "a"), Some(200), 100);
        assert!(q.remove(2), "the head of a's due jobs");
        assert!(q.remove(4), "a waiting job");
        assert!(!q.remove(2) && !q.remove(99));
        assert_eq!(q.len(), 2);
        q.promote(300);
        assert_eq!(drain(&mut q), vec![1, 3]);
    }

    #[test]
    fn priority_then_id_and_not_before_respected() {
        let mut q = ReadyQueue::new(usize::MAX);
        q.push(Job::new(1, 0, "a"), None, 100);
        q.push(Job::new(2, 5, "a"), None, 100);
        q.push(Job::new(3, 5, "a"), None, 100);
        q.push(Job::new(4, 9, "a"), Some(200), 100);
        q.push(Job::new(5, -1, "a"), Some(50), 100); // already due
        assert_eq!(drain(&mut q), vec![2, 3, 1, 5]);
        assert_eq!(q.next_due(), Some(200));
        q.promote(199);
        assert_eq!(q.pop(), None);
        q.promote(200);
        assert_eq!(q.pop(), Some(Job::new(4, 9, "a")));
        assert!(q.is_empty());
    }

    /// One case: jobs (id, priority, client) pushed in this order, the share, how many slots
    /// are free, and the ids expected to start, in order.
    struct Case {
        name: &'static str,
        jobs: &'static [(i64, i64, &'static str)],
        share: usize,
        free: usize,
        starts: &'static [i64],
    }

    const CASES: &[Case] = &[
        Case {
            name: "a lone client gets its share, not fewer",
            jobs: &[
                (1, 0, "s"),
                (2, 0, "s"),
                (3, 0, "s"),
                (4, 0, "s"),
                (5, 0, "s"),
            ],
            share: 3,
            free: 4,
            starts: &[1, 2, 3],
        },
        Case {
            name: "a client at its share is skipped; another client's job starts",
            jobs: &[
                (1, 0, "s"),
                (2, 0, "s"),
                (3, 0, "s"),
                (4, 0, "s"),
                (5, 0, "o"),
            ],
            share: 3,
            free: 4,
            starts: &[1, 2, 3, 5],
        },
        Case {
            name: "priority across clients while both are below their share",
            jobs: &[
                (1, 0, "a"),
                (2, 7, "b"),
                (3, 5, "a"),
                (4, 7, "a"),
                (5, -1, "b"),
            ],
            share: 2,
            free: 3,
            starts: &[2, 4, 3],
        },
        Case {
            name: "a higher-priority job of a client at its share waits",
            jobs: &[(1, 9, "a"), (2, 9, "a"), (3, 8, "a"), (4, 0, "b")],
            share: 2,
            free: 4,
            starts: &[1, 2, 4],
        },
        Case {
            name: "share 1 (concurrency 1): order only",
            jobs: &[(1, 0, "a"), (2, 3, "b"), (3, 0, "a")],
            share: 1,
            free: 1,
            starts: &[2],
        },
        Case {
            name: "many clients, share 1 each",
            jobs: &[
                (1, 0, "a"),
                (2, 0, "a"),
                (3, 0, "b"),
                (4, 0, "c"),
                (5, 1, "c"),
            ],
            share: 1,
            free: 4,
            starts: &[5, 1, 3],
        },
        Case {
            name: "share 0 is taken as 1",
            jobs: &[(1, 0, "a"), (2, 0, "a")],
            share: 0,
            free: 2,
            starts: &[1],
        },
    ];

    #[test]
    fn selection_table() {
        for c in CASES {
            let mut q = ReadyQueue::new(c.share);
            for &(id, p, client) in c.jobs {
                q.push(Job::new(id, p, client), None, 0);
            }
            let started: Vec<i64> = std::iter::from_fn(|| q.pop())
                .take(c.free)
                .map(|j| j.id)
                .collect();
            assert_eq!(started, c.starts, "{}", c.name);
            assert_eq!(q.len(), c.jobs.len() - c.starts.len(), "{}", c.name);
        }
    }

    #[test]
    fn a_client_at_its_share_keeps_its_order_and_resumes_when_a_slot_frees() {
        let mut q = ReadyQueue::new(2);
        for id in 1..=6 {
            q.push(Job::new(id, 0, "s"), None, 0);
        }
        assert_eq!(drain(&mut q), vec![1, 2]);
        assert_eq!(q.running("s"), 2);
        // Another client arrives later with a lower priority: it still gets a slot.
        q.push(Job::new(7, -5, "o"), None, 0);
        assert_eq!(drain(&mut q), vec![7]);
        q.release("s");
        assert_eq!(drain(&mut q), vec![3]);
        // A higher-priority job of the same client goes before its older ones.
        q.push(Job::new(8, 4, "s"), None, 0);
        q.release("s");
        q.release("s");
        assert_eq!(drain(&mut q), vec![8, 4]);
        q.release("o");
        assert_eq!(q.running("o"), 0);
        for _ in 0..2 {
            q.release("s");
        }
        assert_eq!(drain(&mut q), vec![5, 6]);
        assert_eq!(
            q.running_by_client(),
            BTreeMap::from([("s".to_string(), 2)])
        );
        q.release("s");
        q.release("s");
        assert!(q.clients.is_empty(), "idle clients are forgotten");
        assert!(q.eligible.is_empty());
    }

    #[test]
    fn put_back_frees_the_slot_and_keeps_the_job_first() {
        let mut q = ReadyQueue::new(1);
        q.push(Job::new(1, 0, "a"), None, 0);
        q.push(Job::new(2, 0, "a"), None, 0);
        let j = q.pop().unwrap();
        assert_eq!(q.pop(), None);
        q.put_back(j);
        assert_eq!(q.running("a"), 0);
        assert_eq!(q.pop().map(|j| j.id), Some(1));
    }

    #[test]
    fn waiting_jobs_count_against_their_own_client_when_due() {
        let mut q = ReadyQueue::new(1);
        q.push(Job::new(1, 0, "a"), Some(50), 0);
        q.push(Job::new(2, 0, "a"), None, 0);
        q.push(Job::new(3, 0, "b"), None, 0);
        assert_eq!(drain(&mut q), vec![2, 3]);
        q.promote(50);
        assert_eq!(q.pop(), None, "a is at its share");
        q.release("a");
        assert_eq!(drain(&mut q), vec![1]);
    }

    #[test]
    fn releasing_an_unknown_client_changes_nothing() {
        let mut q = ReadyQueue::new(2);
        q.release("nobody");
        assert!(q.clients.is_empty());
        q.push(Job::new(1, 0, "a"), None, 0);
        q.release("a"); // no slot held: stays at 0, the job is still there
        assert_eq!(q.running("a"), 0);
        assert_eq!(drain(&mut q), vec![1]);
    }

    #[test]
    fn many_distinct_clients_leave_nothing_behind() {
        let mut q = ReadyQueue::new(1);
        for id in 0..10_000 {
            q.push(Job::new(id, 0, &format!("c{id}")), None, 0);
        }
        let started: Vec<Job> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(started.len(), 10_000);
        for j in started {
            q.release(&j.client);
        }
        assert!(q.clients.is_empty() && q.eligible.is_empty() && q.is_empty());
    }
}
