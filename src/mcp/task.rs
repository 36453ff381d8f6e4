//! MCP tasks (issue 55, the `io.modelcontextprotocol/tasks` extension): a job is a task. For a
//! client that declared the extension, a `tools/call` that queues a job answers with a task
//! whose id, `bl-<job id>-<64 random bits>`, is written in the job's own insert transaction
//! (`db::input::insert_task_job`): the task exists only once the job row is committed, and it
//! survives any restart because it *is* the job.
//!
//! `tasks/get` and `tasks/cancel` answer only for a job of this front-end's own `--client`
//! whose stored task id is the one given; every other id — malformed, made up, another
//! client's, pruned — gets the same [`unknown`] error. `tasks/get` reads input.db and output.db:
//! `working` (queued, running, waiting for the operator — naming the validation and the
//! operator's `brainloop approve` line), `completed` with the job's result as the tool result
//! (`isError` unless it succeeded), `cancelled` with the cancel line. `tasks/cancel` records a
//! withdrawal in input.db; the worker turns it into its own cancellation (`supervisor::cancels`).

use super::call::Frontend;
use super::queue::JobRow;
use super::reply::{self, Reply};
use rmcp::model::{CreateTaskResult, DetailedTask, GetTaskResult, Task, TaskPayload, TaskStatus};
use rmcp::ErrorData as McpError;

/// The one answer for every task id this front-end does not serve.
pub fn unknown() -> McpError {
    McpError::invalid_params(
        "unknown task: no task with this id belongs to this client".to_string(),
        None,
    )
}

/// The job id of a well-formed task id (`bl-<positive id>-<16 hex digits>`).
pub fn job_of(task_id: &str) -> Option<i64> {
    let rest = task_id.strip_prefix("bl-")?;
    let (id, nonce) = rest.split_once('-')?;
    if nonce.len() != 16 || !nonce.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) || id.starts_with('0') {
        return None;
    }
    id.parse().ok()
}

/// ISO 8601 (RFC 3339, UTC, milliseconds) of a unix-ms time.
fn iso(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Whether two task ids are equal, in time independent of where they differ.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

impl Frontend {
    /// The task's base fields: its ttl from `[retention] results_days` (a job's result and the
    /// task with it are pruned then), its poll interval from `[mcp] poll_interval_ms`.
    fn task(&self, task_id: &str, status: TaskStatus, created: i64, updated: i64) -> Task {
        let ttl = self
            .config
            .retention
            .results_days
            .saturating_mul(86_400_000);
        Task::new(task_id, status, iso(created), iso(updated.max(created)))
            .with_ttl_ms(ttl)
            .with_poll_interval_ms(self.config.mcp.poll_interval_ms.max(100))
    }

    /// The seed state of a task just created for job `job_id`.
    pub fn created(&self, job_id: i64, task_id: &str) -> CreateTaskResult {
        let now = crate::time::now_ms();
        let task = self
            .task(task_id, TaskStatus::Working, now, now)
            .with_status_message(format!("job {job_id} queued"));
        CreateTaskResult::new(task)
    }

    /// The job id and creation time of `task_id`, if it is one of this client's tasks.
    async fn owned(&self, task_id: &str) -> Result<(i64, i64), McpError> {
        let Some(job_id) = job_of(task_id) else {
            return Err(unknown());
        };
        match self.queue.task(job_id).await {
            Ok(Some((client, Some(stored), created)))
                if client == self.client && same(&stored, task_id) =>
            {
                Ok((job_id, created))
            }
            Ok(_) => Err(unknown()),
            Err(e) => Err(McpError::internal_error(
                format!("cannot read the task's job: {e:#}"),
                None,
            )),
        }
    }

    /// `tasks/get`, from the databases.
    pub async fn get_task(&self, task_id: &str) -> Result<GetTaskResult, McpError> {
        let (job_id, created) = self.owned(task_id).await?;
        let row = self.queue.row(job_id).await.map_err(|e| {
            McpError::internal_error(format!("cannot read the job's result: {e:#}"), None)
        })?;
        let (status, message, payload) = detail(job_id, row.as_ref());
        let updated = row.as_ref().and_then(|r| r.updated_at).unwrap_or(created);
        let task = self
            .task(task_id, status, created, updated)
            .with_status_message(message);
        Ok(GetTaskResult::new(DetailedTask::new(task, payload)))
    }

    /// `tasks/cancel`: records a withdrawal unless the job already ended; the worker decides.
    pub async fn cancel_task(&self, task_id: &str) -> Result<(), McpError> {
        let (job_id, _) = self.owned(task_id).await?;
        let row = self.queue.row(job_id).await.map_err(|e| {
            McpError::internal_error(format!("cannot read the job's result: {e:#}"), None)
        })?;
        if row.as_ref().is_some_and(JobRow::is_final) {
            return Ok(()); // ended: nothing to withdraw, the next tasks/get says how it ended
        }
        let new = self
            .queue
            .withdraw(job_id, self.client.clone())
            .await
            .map_err(|e| McpError::internal_error(format!("{e:#}"), None))?;
        tracing::info!(job_id, client = %self.client, new, "task withdrawn by its client");
        Ok(())
    }
}

/// A job's row as a task status, message and payload.
fn detail(job_id: i64, row: Option<&JobRow>) -> (TaskStatus, String, TaskPayload) {
    let Some(row) = row else {
        return (
            TaskStatus::Working,
            format!("job {job_id} queued"),
            TaskPayload::Working,
        );
    };
    if row.status == "cancelled" {
        let why = row
            .error
            .clone()
            .unwrap_or_else(|| format!("job {job_id} cancelled"));
        return (
            TaskStatus::Cancelled,
            crate::shown::line(&why),
            TaskPayload::Cancelled,
        );
    }
    if row.is_final() {
        let reply = Reply::finished(job_id, &row.status, row.result.clone(), row.error.clone());
        let message = format!("job {job_id} ended {}", row.status);
        return (
            TaskStatus::Completed,
            message,
            TaskPayload::Completed {
                result: reply.into_object(),
            },
        );
    }
    if row.status == "pending_validation" {
        let vid = reply::validation_id(row.result.as_ref());
        return (
            TaskStatus::Working,
            reply::waiting_message(job_id, &crate::shown::line(&vid)),
            TaskPayload::Working,
        );
    }
    (
        TaskStatus::Working,
        format!("job {job_id} {}", crate::shown::line(&row.status)),
        TaskPayload::Working,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_well_formed_task_ids_name_a_job() {
        assert_eq!(job_of("bl-42-00112233445566ff"), Some(42));
        for bad in [
            "bl-42-0011223344556",
            "bl-042-00112233445566ff",
            "bl--1-00112233445566ff",
            "bl-x-00112233445566ff",
            "42",
            "bl-42-0011223344556zff",
            "",
        ] {
            assert_eq!(job_of(bad), None, "{bad}");
        }
        assert!(same("abc", "abc") && !same("abc", "abd") && !same("abc", "ab"));
    }

    #[test]
    fn statuses_map_to_task_states() {
        let row = |status: &str, result: Option<serde_json::Value>| JobRow {
            status: status.into(),
            result,
            error: Some("cancelled by client:agent while queued".into()),
            updated_at: None,
        };
        assert_eq!(detail(1, None).0, TaskStatus::Working);
        let (st, msg, _) = detail(
            1,
            Some(&row(
                "pending_validation",
                Some(json!({"validation_id": "v-1"})),
            )),
        );
        assert_eq!(st, TaskStatus::Working);
        assert!(msg.contains("brainloop approve v-1"), "{msg}");
        let (st, msg, _) = detail(1, Some(&row("cancelled", None)));
        assert_eq!(st, TaskStatus::Cancelled);
        assert!(msg.contains("client:agent"), "{msg}");
        let (st, _, p) = detail(1, Some(&row("failed", None)));
        assert_eq!(st, TaskStatus::Completed);
        let TaskPayload::Completed { result } = p else {
            panic!("no result")
        };
        assert_eq!(result["isError"], true);
        assert_eq!(result["structuredContent"]["status"], "failed");
    }
}
