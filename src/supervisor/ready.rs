//! The in-memory dispatch order of claimed jobs: due jobs by priority (highest first) then id
//! (oldest first); jobs with a future `not_before` wait in time order until due.
//! Pure data: the claimed snapshots themselves stay in lifecycle.db.

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeSet, BinaryHeap};

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

#[derive(Default)]
pub struct ReadyQueue {
    due: BinaryHeap<Due>,
    /// (not_before, id, priority)
    waiting: BTreeSet<(i64, i64, i64)>,
}

impl ReadyQueue {
    pub fn push(&mut self, id: i64, priority: i64, not_before: Option<i64>, now: i64) {
        match not_before {
            Some(t) if t > now => {
                self.waiting.insert((t, id, priority));
            }
            _ => self.due.push(Due { priority, id }),
        }
    }

    /// Moves jobs whose `not_before` has come into the due heap.
    pub fn promote(&mut self, now: i64) {
        while let Some(&(t, id, priority)) = self.waiting.first() {
            if t > now {
                break;
            }
            self.waiting.pop_first();
            self.due.push(Due { priority, id });
        }
    }

    /// The next job to start, if one is due: `(id, priority)`.
    pub fn pop(&mut self) -> Option<(i64, i64)> {
        self.due.pop().map(|d| (d.id, d.priority))
    }

    /// When the earliest waiting job becomes due.
    pub fn next_due(&self) -> Option<i64> {
        self.waiting.first().map(|&(t, _, _)| t)
    }

    pub fn len(&self) -> usize {
        self.due.len() + self.waiting.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priority_then_id_and_not_before_respected() {
        let mut q = ReadyQueue::default();
        q.push(1, 0, None, 100);
        q.push(2, 5, None, 100);
        q.push(3, 5, None, 100);
        q.push(4, 9, Some(200), 100);
        q.push(5, -1, Some(50), 100); // already due
        let mut order = vec![];
        while let Some((id, _)) = q.pop() {
            order.push(id);
        }
        assert_eq!(order, vec![2, 3, 1, 5]);
        assert_eq!(q.next_due(), Some(200));
        q.promote(199);
        assert_eq!(q.pop(), None);
        q.promote(200);
        assert_eq!(q.pop(), Some((4, 9)));
        assert!(q.is_empty());
    }
}
