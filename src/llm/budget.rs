//! Token budgets. A call reserves its prompt estimate plus the completion tokens it may use
//! against
//! - the job's budget (`job_token_budget`, counted across the job's calls), and
//! - the day's budget (`daily_token_budget`, all jobs, per UTC day, persisted in lifecycle
//!   `llm_usage` through `db::lifecycle`, so a restart does not reset it; reservations of calls
//!   in flight count too).
//!
//! The completion allowance is lowered to what both budgets leave; when that is less than
//! [`MIN_COMPLETION`] the call is refused before anything is sent, with an error naming the budget.

use super::wire::Usage;
use super::LlmError;
use crate::db::{lifecycle, Db};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Smallest completion worth asking for.
pub const MIN_COMPLETION: u64 = 64;

/// UTC date of a unix-ms timestamp, `YYYY-MM-DD` (civil-from-days, proleptic Gregorian).
pub fn utc_day(ms: i64) -> String {
    let z = ms.div_euclid(86_400_000) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// What one job has spent.
#[derive(Debug, Default)]
pub struct JobUsage {
    pub used: AtomicU64,
}

impl JobUsage {
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }
}

#[derive(Debug, Default)]
struct Day {
    day: String,
    used: u64,
    reserved: u64,
}

pub struct Budgets {
    job_limit: u64,
    daily_limit: u64,
    store: Option<Arc<Db>>,
    day: Mutex<Day>,
}

/// Tokens held for a call in flight.
#[derive(Debug)]
pub struct Hold {
    tokens: u64,
    day: String,
}

impl Budgets {
    /// `store`: lifecycle.db, to persist daily usage (None: memory only).
    pub fn new(job_limit: u64, daily_limit: u64, store: Option<Arc<Db>>) -> Budgets {
        Budgets {
            job_limit,
            daily_limit,
            store,
            day: Mutex::new(Day::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Day> {
        match self.day.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Today's persisted usage; an error when it cannot be read (the caller fails closed).
    fn stored_usage(&self, day: &str) -> Result<u64, String> {
        let Some(db) = &self.store else { return Ok(0) };
        db.with(|c| lifecycle::llm_usage_of(c, day))
            .map(|n| n.max(0) as u64)
            .map_err(|e| {
                tracing::warn!(error = format!("{e:#}"), "cannot read today's LLM usage");
                format!("{e:#}")
            })
    }

    /// Tokens spent today (persisted + this process; what is known when the read fails).
    pub fn used_today(&self) -> u64 {
        let today = utc_day(crate::time::now_ms());
        let mut d = self.lock();
        let _ = self.roll(&mut d, &today);
        d.used
    }

    /// Starts a new day from the persisted usage. On a failed read the day is not started (the
    /// next call reads again) and the error is returned: the daily budget fails closed.
    fn roll(&self, d: &mut Day, today: &str) -> Result<(), String> {
        if d.day != today {
            let used = self.stored_usage(today)?;
            d.day = today.to_string();
            d.used = used;
            d.reserved = 0;
        }
        Ok(())
    }

    /// Reserves `prompt_estimate + wanted` tokens, lowering `wanted` to what the budgets leave.
    /// Returns the hold and the completion allowance.
    /// May read lifecycle.db (once a day): call it off the async threads.
    pub fn reserve(
        &self,
        job_used: u64,
        prompt_estimate: u64,
        wanted: u64,
    ) -> Result<(Hold, u64), LlmError> {
        let mut allowed = wanted;
        if self.job_limit > 0 {
            let left = self
                .job_limit
                .saturating_sub(job_used)
                .saturating_sub(prompt_estimate);
            if left < MIN_COMPLETION {
                return Err(LlmError::Budget(format!(
                    "per-job token budget exceeded: the job has used {job_used} of its {} tokens and this prompt needs about {prompt_estimate} ([llm] job_token_budget)",
                    self.job_limit
                )));
            }
            allowed = allowed.min(left);
        }
        let today = utc_day(crate::time::now_ms());
        let mut d = self.lock();
        if let Err(e) = self.roll(&mut d, &today) {
            if self.daily_limit > 0 {
                return Err(LlmError::Budget(format!(
                    "daily token budget: today's usage cannot be read ({e}); refusing rather than assuming none was spent ([llm] daily_token_budget)"
                )));
            }
        }
        if self.daily_limit > 0 {
            let left = self
                .daily_limit
                .saturating_sub(d.used + d.reserved)
                .saturating_sub(prompt_estimate);
            if left < MIN_COMPLETION {
                return Err(LlmError::Budget(format!(
                    "daily token budget exceeded: {} of {} tokens used today (UTC {today}), {} reserved by calls in flight ([llm] daily_token_budget)",
                    d.used, self.daily_limit, d.reserved
                )));
            }
            allowed = allowed.min(left);
        }
        let tokens = prompt_estimate + allowed;
        d.reserved += tokens;
        Ok((Hold { tokens, day: today }, allowed))
    }

    /// Releases a hold and records what the call really used (`None`: nothing was consumed).
    pub fn record(&self, job: &JobUsage, hold: Hold, usage: Option<Usage>) {
        job.used
            .fetch_add(usage.map(|u| u.total()).unwrap_or(0), Ordering::Relaxed);
        self.release(hold, usage);
    }

    /// The day's side of [`Budgets::record`]; writes lifecycle.db (call it off the async threads).
    pub fn release(&self, hold: Hold, usage: Option<Usage>) {
        let spent = usage.map(|u| u.total()).unwrap_or(0);
        {
            let mut d = self.lock();
            if d.day == hold.day {
                d.reserved = d.reserved.saturating_sub(hold.tokens);
                d.used += spent;
            }
        }
        let (Some(db), Some(u)) = (&self.store, usage) else {
            return;
        };
        let now = crate::time::now_ms();
        let (prompt, completion) = (u.prompt_tokens as i64, u.completion_tokens as i64);
        let res = db.with(|c| lifecycle::record_llm_usage(c, &hold.day, prompt, completion, now));
        if let Err(e) = res {
            tracing::warn!(error = format!("{e:#}"), "cannot record LLM usage");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_days() {
        assert_eq!(utc_day(0), "1970-01-01");
        assert_eq!(utc_day(951_782_400_000), "2000-02-29");
        assert_eq!(utc_day(1_767_225_599_000), "2025-12-31");
        assert_eq!(utc_day(1_767_225_600_000), "2026-01-01");
    }

    #[test]
    fn job_and_daily_budgets_lower_then_refuse() {
        let b = Budgets::new(1_000, 0, None);
        let job = JobUsage::default();
        let (h, allowed) = b.reserve(job.used(), 100, 8_192).unwrap();
        assert_eq!(allowed, 900);
        b.record(
            &job,
            h,
            Some(Usage {
                prompt_tokens: 100,
                completion_tokens: 850,
                ..Usage::default()
            }),
        );
        let e = b.reserve(job.used(), 100, 8_192).unwrap_err();
        assert!(e.to_string().contains("per-job token budget"), "{e}");
        // A fresh job is fine.
        assert!(b.reserve(0, 100, 100).is_ok());

        let b = Budgets::new(0, 1_000, None);
        let (h1, a1) = b.reserve(0, 100, 500).unwrap();
        assert_eq!(a1, 500);
        // In-flight reservations count.
        let (h2, a2) = b.reserve(0, 100, 500).unwrap();
        assert_eq!(a2, 300);
        let e = b.reserve(0, 10, 500).unwrap_err();
        assert!(e.to_string().contains("daily token budget"), "{e}");
        b.record(&JobUsage::default(), h1, None);
        b.record(
            &JobUsage::default(),
            h2,
            Some(Usage {
                prompt_tokens: 50,
                completion_tokens: 50,
                ..Usage::default()
            }),
        );
        assert_eq!(b.used_today(), 100);
    }

    #[test]
    fn daily_usage_survives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        crate::db::migrate::migrate_all(dir.path()).unwrap();
        let db = Db::open(dir.path(), crate::db::DbKind::Lifecycle).unwrap();
        let b = Budgets::new(0, 1_000, Some(db.clone()));
        let job = JobUsage::default();
        let (h, _) = b.reserve(job.used(), 10, 100).unwrap();
        b.record(
            &job,
            h,
            Some(Usage {
                prompt_tokens: 400,
                completion_tokens: 500,
                ..Usage::default()
            }),
        );
        let again = Budgets::new(0, 1_000, Some(db));
        assert_eq!(again.used_today(), 900);
        assert!(again.reserve(0, 50, 500).is_err());
    }

    #[test]
    fn a_failed_usage_read_fails_the_daily_budget_closed() {
        let dir = tempfile::tempdir().unwrap();
        crate::db::migrate::migrate_all(dir.path()).unwrap();
        let db = Db::open(dir.path(), crate::db::DbKind::Lifecycle).unwrap();
        db.with(|c| Ok(c.execute_batch("DROP TABLE llm_usage")?))
            .unwrap();
        let b = Budgets::new(0, 1_000_000, Some(db.clone()));
        let e = b.reserve(0, 10, 100).unwrap_err();
        assert!(format!("{e}").contains("cannot be read"), "{e}");
        // without a daily limit there is nothing to protect: calls go on
        assert!(Budgets::new(0, 0, Some(db)).reserve(0, 10, 100).is_ok());
    }
}
