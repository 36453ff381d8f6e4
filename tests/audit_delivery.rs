//! Issue 19: a metadata.db held by another process never delays results, and no audit row is
//! lost or duplicated — not while metadata.db is locked, not across a shutdown while it is
//! locked, not when the worker is killed between a job's result and its audit row.
//!
//! The real binary on temp dirs; a separate connection holds `BEGIN IMMEDIATE` (the write lock)
//! on metadata.db, or on lifecycle.db to open the window between the two commits of a result.
//! Nothing is timed: the tests assert what exists while the lock is still held.

mod common;

use common::Env;
use rusqlite::Connection;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(60);

/// Holds the write lock of one database until dropped (or `release`d).
struct Lock {
    release: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Lock {
    fn hold(env: &Env, file: &str) -> Lock {
        let c: Connection = env.db(file);
        let (locked_tx, locked_rx) = mpsc::channel();
        let (release, release_rx) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            c.execute_batch("BEGIN IMMEDIATE")
                .expect("take the write lock");
            locked_tx.send(()).unwrap();
            let _ = release_rx.recv();
            c.execute_batch("COMMIT").unwrap();
        });
        locked_rx.recv_timeout(LONG).expect("lock taken");
        Lock {
            release: Some(release),
            thread: Some(thread),
        }
    }

    /// Asserts the lock is still held (the holder thread has not committed).
    fn still_held(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    fn release(mut self) {
        self.release.take();
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        self.release.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn insert_jobs(env: &Env, n: usize) -> Vec<i64> {
    (0..n)
        .map(|i| {
            if i % 2 == 0 {
                env.insert("sleep", "{\"ms\": 20}")
            } else {
                env.insert("list_actions", "{}")
            }
        })
        .collect()
}

fn wait_succeeded(env: &Env, ids: &[i64]) {
    for id in ids {
        env.wait_status(*id, "succeeded", LONG);
    }
}

fn audit_rows(env: &Env, id: i64) -> i64 {
    env.metadata()
        .query_row("SELECT count(*) FROM audit WHERE job_id = ?1", [id], |r| {
            r.get(0)
        })
        .unwrap()
}

/// Waits until every job has an audit row, then asserts exactly one each.
fn assert_audited_once(env: &Env, ids: &[i64]) {
    let t0 = Instant::now();
    loop {
        let counts: Vec<(i64, i64)> = ids.iter().map(|id| (*id, audit_rows(env, *id))).collect();
        if counts.iter().all(|(_, n)| *n >= 1) {
            for (id, n) in counts {
                assert_eq!(n, 1, "job {id} must have exactly one audit row");
            }
            return;
        }
        assert!(
            t0.elapsed() < LONG,
            "audit rows missing after the lock was released (job, rows): {counts:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn staged(env: &Env) -> i64 {
    env.lifecycle()
        .query_row("SELECT count(*) FROM audit_outbox", [], |r| r.get(0))
        .unwrap()
}

#[test]
fn a_locked_metadata_db_delays_no_result_and_loses_no_audit_row_even_across_a_restart() {
    let env = Env::new();
    let d = env.start(&[]);
    let warm = insert_jobs(&env, 1);
    wait_succeeded(&env, &warm);

    // 1. metadata.db locked by another process while jobs run: every result arrives.
    let lock = Lock::hold(&env, "brainloop.metadata.db");
    let first = insert_jobs(&env, 8);
    wait_succeeded(&env, &first);
    assert!(
        lock.still_held(),
        "the results must arrive while the lock is held"
    );
    for id in &first {
        assert_eq!(audit_rows(&env, *id), 0, "metadata.db is locked");
    }

    // 2. Shutdown and a new start with the lock still held: the start-up event does not stall
    //    dispatch, and the audit rows wait (staged) across the restart.
    d.sigterm();
    let (st, _) = d.wait_exit(LONG);
    assert!(st.success(), "exit status {st:?}");
    let d = env.start(&[]);
    let second = insert_jobs(&env, 6);
    wait_succeeded(&env, &second);
    assert!(
        lock.still_held(),
        "the results must arrive while the lock is held"
    );

    // 3. Released: every audit row lands, exactly once; nothing stays staged.
    lock.release();
    let all: Vec<i64> = warm.iter().chain(&first).chain(&second).copied().collect();
    assert_audited_once(&env, &all);
    assert_eq!(staged(&env), 0, "nothing left in the outbox");
    let startups: i64 = env
        .metadata()
        .query_row(
            "SELECT count(*) FROM events WHERE kind = 'startup'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let t0 = Instant::now();
    let mut startups = startups;
    while startups < 2 {
        assert!(
            t0.elapsed() < LONG,
            "the second start-up event never landed"
        );
        std::thread::sleep(Duration::from_millis(50));
        startups = env
            .metadata()
            .query_row(
                "SELECT count(*) FROM events WHERE kind = 'startup'",
                [],
                |r| r.get(0),
            )
            .unwrap();
    }
    assert_eq!(startups, 2, "both start-up events, each once");
    d.sigterm();
    let (st, _) = d.wait_exit(LONG);
    assert!(st.success());
}

#[test]
fn a_kill_between_a_result_and_its_audit_row_is_recovered_at_the_next_start() {
    let env = Env::new();
    let d = env.start(&[]);
    let id = env.insert("sleep", "{\"ms\": 1500}");
    env.wait_status(id, "running", LONG);
    // lifecycle.db locked: the result commits (output.db), closing the claim waits.
    let lock = Lock::hold(&env, "brainloop.lifecycle.db");
    env.wait_status(id, "succeeded", LONG);
    assert!(lock.still_held());
    d.kill9();
    lock.release();
    assert_eq!(audit_rows(&env, id), 0, "killed before the audit row");

    let d = env.start(&[]);
    assert_audited_once(&env, &[id]);
    let (status, _, _, attempts) = env.result(id).unwrap();
    assert_eq!(
        (status.as_str(), attempts),
        ("succeeded", 1),
        "not run again"
    );
    let later = insert_jobs(&env, 2);
    wait_succeeded(&env, &later);
    assert_audited_once(&env, &later);
    assert_audited_once(&env, &[id]);
    d.sigterm();
    let (st, _) = d.wait_exit(LONG);
    assert!(st.success());
}
