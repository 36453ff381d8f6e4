//! Cron schedules (DESIGN §3): rows of input.db `schedules` (name, cron, action, params,
//! client_id, enabled) fire jobs of the schedule's client, with the same grants and approvals as
//! any job of that client.
//!
//! The worker never writes input.db, so a firing is claimed directly into lifecycle.db with a
//! *negative* job id from its own sequence (producers' ids are positive, so the two never meet);
//! `results`, `get_result` and the audit treat it like any job. State per schedule (last firing,
//! last job) lives in lifecycle `schedule_state`. A schedule whose previous job has not finished
//! is not fired again (no overlap). At start-up a firing missed while the worker was down runs
//! once (`schedules_catch_up`). Expressions are read in `schedules_timezone` (UTC by default). An invalid expression is reported (log, event,
//! `status`) and skipped — never a crash.

pub mod cronexpr;

use crate::db::{lifecycle, write_tx, Stores};
use anyhow::Result;
use chrono::{DateTime, TimeZone, Utc};
use rusqlite::{params, Connection, OptionalExtension};
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub name: String,
    pub cron: String,
    pub action: String,
    pub params: String,
    pub client_id: String,
    pub enabled: bool,
}

pub fn load(conn: &Connection) -> Result<Vec<Row>> {
    let mut s = conn.prepare_cached(
        "SELECT name, cron, action, coalesce(params, '{}'), coalesce(client_id, 'local'), coalesce(enabled, 1) FROM schedules ORDER BY name",
    )?;
    let rows = s
        .query_map([], |r| {
            Ok(Row {
                name: r.get(0)?,
                cron: r.get(1)?,
                action: r.get(2)?,
                params: r.get(3)?,
                client_id: r.get(4)?,
                enabled: r.get::<_, i64>(5)? != 0,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// What `status` shows of a schedule.
#[derive(Debug, Clone, Serialize)]
pub struct View {
    pub name: String,
    pub cron: String,
    pub action: String,
    pub client_id: String,
    pub enabled: bool,
    pub next_fire_ms: Option<i64>,
    pub last_fired_ms: Option<i64>,
    pub error: Option<String>,
}

struct Entry {
    row: Row,
    schedule: Option<cron::Schedule>,
    next: Option<DateTime<Utc>>,
}

fn ms_to_dt(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms)
        .single()
        .unwrap_or_else(Utc::now)
}

fn last_fired(conn: &Connection, name: &str) -> Result<(Option<i64>, Option<i64>)> {
    Ok(conn
        .query_row(
            "SELECT last_fired_at, last_job_id FROM schedule_state WHERE name = ?1",
            [name],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?
        .unwrap_or((None, None)))
}

/// Schedules with their next firing, computed as the worker would (for `status`).
pub fn views(
    input_conn: &Connection,
    lifecycle: Option<&Connection>,
    now: DateTime<Utc>,
    tz: chrono_tz::Tz,
) -> Result<Vec<View>> {
    let mut out = Vec::new();
    for row in load(input_conn)? {
        let last = lifecycle
            .map(|c| last_fired(c, &row.name))
            .transpose()?
            .and_then(|(t, _)| t);
        let (next, error) = match cronexpr::parse(&row.cron) {
            Ok(s) => (
                cronexpr::next_after(&s, now, tz).map(|t| t.timestamp_millis()),
                None,
            ),
            Err(e) => (None, Some(e)),
        };
        out.push(View {
            name: row.name,
            cron: row.cron,
            action: row.action,
            client_id: row.client_id,
            enabled: row.enabled,
            next_fire_ms: if row.enabled { next } else { None },
            last_fired_ms: last,
            error,
        });
    }
    Ok(out)
}

/// A job the scheduler claimed, for the dispatcher.
#[derive(Debug, Clone)]
pub struct Fired {
    pub job_id: i64,
    pub schedule: String,
    /// The schedule's client: the firing's slot counts against its share.
    pub client_id: String,
}

/// The worker's scheduler: schedules as last loaded, with their next firing.
pub struct Scheduler {
    entries: BTreeMap<String, Entry>,
    first_load: bool,
    tz: chrono_tz::Tz,
    /// The wall clock as [`Scheduler::fire_due`] last saw it: a later call that sees it earlier
    /// knows the clock stepped back.
    last_seen_ms: Option<i64>,
}

impl Scheduler {
    pub fn new(tz: chrono_tz::Tz) -> Scheduler {
        Scheduler {
            entries: BTreeMap::new(),
            first_load: true,
            tz,
            last_seen_ms: None,
        }
    }

    /// Reloads the rows; returns the problems found in new or changed ones (for events).
    pub fn refresh(&mut self, stores: &Stores, catch_up: bool) -> Result<Vec<String>> {
        let rows = stores.input.with(|c| load(c))?;
        let now = Utc::now();
        let mut problems = Vec::new();
        let mut fresh = BTreeMap::new();
        for row in rows {
            if let Some(e) = self.entries.remove(&row.name) {
                if e.row == row {
                    fresh.insert(row.name.clone(), e);
                    continue;
                }
            }
            let schedule = match cronexpr::parse(&row.cron) {
                Ok(s) => Some(s),
                Err(e) => {
                    problems.push(format!("schedule {:?}: {e}", row.name));
                    None
                }
            };
            let mut next = None;
            if let (Some(s), true) = (&schedule, row.enabled) {
                let (last, _) = stores.lifecycle.with(|c| last_fired(c, &row.name))?;
                next = match last {
                    // Missed while down: once, now (at the first load only).
                    Some(t) => cronexpr::next_after(s, ms_to_dt(t), self.tz).map(|due| {
                        if due <= now && !(catch_up && self.first_load) {
                            cronexpr::next_after(s, now, self.tz).unwrap_or(due)
                        } else {
                            due
                        }
                    }),
                    None => cronexpr::next_after(s, now, self.tz),
                };
            }
            fresh.insert(
                row.name.clone(),
                Entry {
                    row,
                    schedule,
                    next,
                },
            );
        }
        self.entries = fresh;
        self.first_load = false;
        Ok(problems)
    }

    /// When the next schedule is due (unix ms).
    pub fn next_due(&self) -> Option<i64> {
        self.entries
            .values()
            .filter_map(|e| e.next)
            .min()
            .map(|t| t.timestamp_millis())
    }

    /// Takes a backward step of the wall clock into account (issue 50): when `now_ms` is
    /// earlier than the clock last seen, every next firing computed before the step (as far
    /// ahead as the step was long) is brought back to the first one after `now_ms`. A forward
    /// step needs nothing: what it skipped is due at once and fires once. Whether it stepped.
    pub fn observe_clock(&mut self, now_ms: i64) -> bool {
        let stepped_back = self.last_seen_ms.is_some_and(|t| now_ms < t);
        self.last_seen_ms = Some(now_ms);
        if !stepped_back {
            return false;
        }
        let (now, tz) = (ms_to_dt(now_ms), self.tz);
        for e in self.entries.values_mut() {
            if let (Some(next), Some(s)) = (e.next, &e.schedule) {
                if let Some(sooner) = cronexpr::next_after(s, now, tz).filter(|t| *t < next) {
                    e.next = Some(sooner);
                }
            }
        }
        true
    }

    /// Claims a job for every schedule that is due and whose previous job has finished.
    pub fn fire_due(&mut self, stores: &Stores, now_ms: i64) -> Result<(Vec<Fired>, Vec<String>)> {
        let now = ms_to_dt(now_ms);
        let tz = self.tz;
        let mut fired = Vec::new();
        let mut skipped = Vec::new();
        for e in self.entries.values_mut() {
            let (Some(next), Some(s)) = (e.next, &e.schedule) else {
                continue;
            };
            if next > now || !e.row.enabled {
                continue;
            }
            e.next = cronexpr::next_after(s, now, tz);
            let row = e.row.clone();
            let job = stores.lifecycle.with(|c| {
                let (_, last_job) = last_fired(c, &row.name)?;
                if let Some(j) = last_job {
                    let open: Option<String> = c
                        .query_row(
                            "SELECT status FROM processed_log WHERE job_id = ?1",
                            [j],
                            |r| r.get(0),
                        )
                        .optional()?;
                    if open.is_some_and(|st| st != "done") {
                        return Ok(None);
                    }
                }
                Ok(Some(claim(c, &row, now_ms)?))
            })?;
            match job {
                Some(job_id) => fired.push(Fired {
                    job_id,
                    schedule: row.name.clone(),
                    client_id: row.client_id.clone(),
                }),
                None => skipped.push(row.name.clone()),
            }
        }
        Ok((fired, skipped))
    }
}

/// Claims one firing: a snapshot with the next negative id (`db::lifecycle::claim_firing`), and
/// the schedule's state, in one transaction.
fn claim(conn: &mut Connection, row: &Row, now_ms: i64) -> rusqlite::Result<i64> {
    write_tx(conn, |tx| {
        let reject = match serde_json::from_str::<serde_json::Value>(&row.params) {
            Ok(v) if v.is_object() => None,
            _ => Some(format!(
                "schedule {:?}: params must be a JSON object",
                row.name
            )),
        };
        let params = if reject.is_some() {
            None
        } else {
            Some(row.params.as_str())
        };
        let firing = lifecycle::Firing {
            action: &row.action,
            params,
            client_id: &row.client_id,
            reject,
        };
        let id = lifecycle::claim_firing(tx, &firing, now_ms)?;
        tx.execute(
            "INSERT INTO schedule_state(name, last_fired_at, last_job_id) VALUES (?1, ?2, ?3)
             ON CONFLICT(name) DO UPDATE SET last_fired_at = excluded.last_fired_at, last_job_id = excluded.last_job_id",
            params![row.name, now_ms, id],
        )?;
        Ok(id)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_5s() -> Scheduler {
        let mut s = Scheduler::new(chrono_tz::UTC);
        let schedule = cronexpr::parse("*/5 * * * * *").unwrap();
        s.entries.insert(
            "tick".into(),
            Entry {
                row: Row {
                    name: "tick".into(),
                    cron: "*/5 * * * * *".into(),
                    action: "ping".into(),
                    params: "{}".into(),
                    client_id: "local".into(),
                    enabled: true,
                },
                schedule: Some(schedule),
                next: None,
            },
        );
        s
    }

    #[test]
    fn a_backward_clock_step_brings_the_next_firing_back_and_a_forward_one_changes_nothing() {
        let mut s = every_5s();
        let t = 1_800_000_000_000_i64; // a multiple of 5 s
        s.entries.get_mut("tick").unwrap().next = Some(ms_to_dt(t + 5_000));
        assert!(!s.observe_clock(t + 1_000));
        assert_eq!(s.next_due(), Some(t + 5_000));
        // Two hours back: the next firing is 5 s after the new time, not in two hours.
        let back = t - 7_200_000;
        assert!(s.observe_clock(back + 1_000));
        assert_eq!(s.next_due(), Some(back + 5_000));
        // Forward: nothing re-planned (what was skipped is due at once).
        assert!(!s.observe_clock(back + 3_600_000));
        assert_eq!(s.next_due(), Some(back + 5_000));
    }
}
