//! `brainloop review` (issue 22): one terminal screen for the human. Pending validations on the
//! left; for the selected one, why it asks (policy, risk, set, reasons, the job's stated purpose),
//! its change set's diff (coloured) and the command's output; below, the change sets applied
//! recently, to undo. Keys: `a` approve, `L` approve --learn, `d` deny (then `y` or `d` again to
//! confirm: any other key cancels), `s` skip, `Tab` to the applied list and `u` undo there,
//! `↑`/`↓` (`j`/`k`) select, `PgUp`/`PgDn` scroll, `q` quit. It fits 80×24: below 120 columns or
//! 30 rows the lists shrink to a few rows and the detail takes the full width, the diff right
//! after the command (why it asks follows it).
//! Decisions go through the same functions as `approve` / `deny` / `undo` (`cli::security`),
//! so `--learn` is refused here exactly as there. Plain ANSI over any terminal (SSH included);
//! `--json` prints the pending validations with their change sets for scripts instead.
//! With a fleet registry (`[registry]`, issue 37) it works on the registry from any machine:
//! every worker's pending, undecided validations with the payload their worker published, each
//! naming its worker; decisions are written there (`ask::validations::fleet_decide`, as
//! `approve` / `deny`) and `u` sends an undo request to the worker that applied the change set.
//!
//! What it shows comes from the agent (commands, diffs, output): it is drawn as text through
//! `shown` (control, format and separator characters escaped, bidi overrides included), never
//! interpreted.

use super::security;
use crate::ask::validations::{self, Validation};
use crate::config::Config;
use crate::db::{self, DbKind};
use anyhow::Result;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span, Text};
use ratatui::widgets::{Block, List, ListItem, ListState, Paragraph, Wrap};
use ratatui::Frame;
use serde_json::Value;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct ReviewArgs {
    /// Print the pending validations with their change sets as JSON (no terminal UI).
    #[arg(long)]
    pub json: bool,
}

/// A pending validation and what the hooks would be told about it.
struct Item {
    v: Validation,
    payload: Value,
    /// What the reviewer answered (`hooks::reviewer_marks`), marked as the reviewer's.
    reviewer: Vec<String>,
    /// With a fleet registry: the worker that asked.
    worker: Option<String>,
}

/// An applied change set that can be undone.
struct Applied {
    job_id: i64,
    /// With a fleet registry: the worker that applied it (undo is a request to it).
    worker: Option<String>,
    command: String,
    summary: String,
    policy: String,
}

#[derive(PartialEq)]
enum Focus {
    Pending,
    Applied,
}

struct App {
    items: Vec<Item>,
    applied: Vec<Applied>,
    pending_sel: ListState,
    applied_sel: ListState,
    focus: Focus,
    scroll: u16,
    status: String,
    /// The validation a `d` asked to deny, waiting for its confirmation.
    confirm_deny: Option<(String, i64)>,
}

/// The keys, as the status line shows them while nothing else is said.
const KEYS: &str =
    "a approve · L approve --learn · d deny · s skip · Tab applied · u undo · q quit";

/// With a fleet registry (issue 37): every worker's pending validations not decided yet, each
/// with the payload its worker published (`ask::fleet`), and what a reviewer or a worker's
/// refusal said of it.
fn fleet_pending(reg: &crate::registry::Settings) -> Result<Vec<Item>> {
    let mut c = crate::registry::connect(reg)?;
    crate::registry::check_version(&mut c)?;
    let mut items = Vec::new();
    for f in validations::fleet_list(&mut c, true)? {
        if f.validation.status != "pending" {
            continue;
        }
        let mut payload =
            validations::fleet_detail(&mut c, &f.validation.id)?.unwrap_or_else(|| {
                serde_json::json!({
                    "command": f.validation.command,
                    "policy": f.validation.policy,
                    "permission_set": f.validation.permission_set,
                    "reasons": f.validation.reasons.as_deref()
                        .and_then(|r| serde_json::from_str::<Value>(r).ok()),
                })
            });
        // Which worker asked (`review --json` too).
        payload["worker"] = Value::String(f.worker.clone());
        let reviewer = validations::fleet_decisions_of(&mut c, &f.validation.id)?
            .into_iter()
            .map(|(d, refused)| {
                format!(
                    "{} by {}{}",
                    d.row.decision.map(|x| x.as_str()).unwrap_or("?"),
                    d.row.decided_by,
                    refused
                        .map(|r| format!(": REFUSED by the worker, yours to decide ({r})"))
                        .unwrap_or_default()
                )
            })
            .collect();
        items.push(Item {
            v: f.validation,
            payload,
            reviewer,
            worker: Some(f.worker),
        });
    }
    Ok(items)
}

fn fleet_applied(reg: &crate::registry::Settings) -> Result<Vec<Applied>> {
    let mut c = crate::registry::connect(reg)?;
    Ok(validations::fleet_applied(&mut c, 40)?
        .into_iter()
        .filter(|a| a.undone_at.is_none())
        .take(20)
        .map(|a| Applied {
            job_id: a.job_id,
            worker: Some(a.worker),
            command: a.command,
            summary: a.summary,
            policy: a.policy_used,
        })
        .collect())
}

fn load_pending(config: &Config) -> Result<Vec<Item>> {
    if let Some(reg) = &config.registry {
        return fleet_pending(reg);
    }
    let out = db::open_read_only(&config.data_dir, DbKind::Output)?;
    let life = db::open_read_only(&config.data_dir, DbKind::Lifecycle)?;
    let sec = db::open_read_only(&config.data_dir, DbKind::Security).ok();
    let meta = db::open_read_only(&config.data_dir, DbKind::Metadata).ok();
    let mut list = validations::list(&out, true)?;
    list.sort_by_key(|v| (v.requested_at, v.job_id));
    Ok(list
        .into_iter()
        .map(|v| {
            let mut payload =
                crate::hooks::payload::build(&life, &config.data_dir, &v, "validation");
            // the hosts a network request names, as `[notify]` and the reviewer get them
            let request = sec
                .as_ref()
                .and_then(|s| crate::egress::store::request(s, &v.id).ok())
                .flatten();
            crate::hooks::payload::add_network(&mut payload, request.as_ref());
            let reviewer = sec
                .as_ref()
                .and_then(|s| crate::hooks::reviewer_marks(s, meta.as_ref(), &v).ok())
                .unwrap_or_default();
            Item {
                v,
                payload,
                reviewer,
                worker: None,
            }
        })
        .collect())
}

fn load_applied(config: &Config) -> Result<Vec<Applied>> {
    if let Some(reg) = &config.registry {
        return fleet_applied(reg);
    }
    let sec = db::open_read_only(&config.data_dir, DbKind::Security)?;
    let mut s = sec.prepare(
        "SELECT job_id, command, summary, policy_used FROM journal
         WHERE undone_at IS NULL ORDER BY applied_at DESC LIMIT 20",
    )?;
    let rows = s
        .query_map([], |r| {
            Ok(Applied {
                job_id: r.get(0)?,
                worker: None,
                command: r.get(1)?,
                summary: r.get(2)?,
                policy: r.get(3)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

pub fn run(config: &Config, a: &ReviewArgs) -> Result<i32> {
    if a.json {
        let list: Vec<Value> = load_pending(config)?
            .into_iter()
            .map(|i| i.payload)
            .collect();
        println!("{}", crate::shown::json(&list)?);
        return Ok(0);
    }
    let mut app = App {
        items: Vec::new(),
        applied: Vec::new(),
        pending_sel: ListState::default(),
        applied_sel: ListState::default(),
        focus: Focus::Pending,
        scroll: 0,
        status: KEYS.into(),
        confirm_deny: None,
    };
    // Without a terminal the screen cannot draw: say what works instead (issue 36).
    let no_terminal = "`brainloop review` is an interactive screen and needs a terminal; without one use \
         `brainloop review --json` (the pending validations with their change sets) or `brainloop validations`, \
         then `brainloop approve ID` / `brainloop deny ID`";
    if !std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        anyhow::bail!("{no_terminal} (standard output is not a terminal)");
    }
    app.refresh(config);
    let mut terminal = ratatui::try_init().map_err(|e| anyhow::anyhow!("{no_terminal} ({e})"))?;
    let res = app.main_loop(config, &mut terminal);
    ratatui::try_restore()?;
    res.map(|_| 0)
}

impl App {
    fn refresh(&mut self, config: &Config) {
        match (load_pending(config), load_applied(config)) {
            (Ok(p), Ok(a)) => {
                let keep = self.selected().map(|i| i.v.id.clone());
                self.items = p;
                self.applied = a;
                let at = keep
                    .and_then(|id| self.items.iter().position(|i| i.v.id == id))
                    .unwrap_or(0);
                clamp(&mut self.pending_sel, self.items.len(), at);
                let ra = self.applied_sel.selected().unwrap_or(0);
                clamp(&mut self.applied_sel, self.applied.len(), ra);
            }
            (Err(e), _) | (_, Err(e)) => self.status = format!("cannot read: {e:#}"),
        }
    }

    fn selected(&self) -> Option<&Item> {
        self.pending_sel.selected().and_then(|i| self.items.get(i))
    }

    fn main_loop(
        &mut self,
        config: &Config,
        terminal: &mut ratatui::DefaultTerminal,
    ) -> Result<()> {
        let mut last = Instant::now();
        loop {
            terminal.draw(|f| self.draw(f))?;
            if event::poll(Duration::from_millis(500))? {
                if let Event::Key(k) = event::read()? {
                    if k.kind != KeyEventKind::Release && !self.key(config, k.code) {
                        return Ok(());
                    }
                }
            }
            if last.elapsed() >= Duration::from_secs(1) {
                self.refresh(config);
                last = Instant::now();
            }
        }
    }

    /// Handles one key; false: quit.
    fn key(&mut self, config: &Config, code: KeyCode) -> bool {
        // A deny waits for its confirmation: `y` or `d` denies, any other key cancels (and does
        // nothing else).
        if let Some((id, job)) = self.confirm_deny.take() {
            match code {
                KeyCode::Char('y') | KeyCode::Char('d') => {
                    self.decide_id(config, &id, false, false)
                }
                _ => self.status = format!("deny of job {job} cancelled · {KEYS}"),
            }
            self.refresh(config);
            return true;
        }
        match code {
            KeyCode::Char('q') | KeyCode::Esc => return false,
            KeyCode::Tab => {
                self.focus = match self.focus {
                    Focus::Pending => Focus::Applied,
                    Focus::Applied => Focus::Pending,
                }
            }
            KeyCode::Down | KeyCode::Char('j') => self.step(1),
            KeyCode::Up | KeyCode::Char('k') => self.step(-1),
            KeyCode::Char('s') => self.step(1),
            KeyCode::PageDown => self.scroll = self.scroll.saturating_add(10),
            KeyCode::PageUp => self.scroll = self.scroll.saturating_sub(10),
            KeyCode::Char('a') => self.decide(config, true, false),
            KeyCode::Char('L') => self.decide(config, true, true),
            KeyCode::Char('d') => self.ask_deny(),
            KeyCode::Char('u') if self.focus == Focus::Applied => self.undo(config),
            KeyCode::Char('r') => {}
            _ => return true,
        }
        self.refresh(config);
        true
    }

    fn step(&mut self, by: i64) {
        let (sel, n) = match self.focus {
            Focus::Pending => (&mut self.pending_sel, self.items.len()),
            Focus::Applied => (&mut self.applied_sel, self.applied.len()),
        };
        if n > 0 {
            let i = sel.selected().unwrap_or(0) as i64 + by;
            sel.select(Some(i.rem_euclid(n as i64) as usize));
        }
        self.scroll = 0;
    }

    /// `d`: asks for the confirmation of a deny of the selected validation.
    fn ask_deny(&mut self) {
        if self.focus != Focus::Pending {
            return;
        }
        let Some((id, job, cmd)) = self.selected().map(|i| {
            (
                i.v.id.clone(),
                i.v.job_id,
                i.v.command.clone().unwrap_or_default(),
            )
        }) else {
            self.status = "nothing pending".into();
            return;
        };
        self.status = format!(
            "DENY job {job} ({cmd})? y or d: deny, discarding its change set · any other key: cancel"
        );
        self.confirm_deny = Some((id, job));
    }

    fn decide(&mut self, config: &Config, approve: bool, learn: bool) {
        if self.focus != Focus::Pending {
            return;
        }
        let Some(id) = self.selected().map(|i| i.v.id.clone()) else {
            self.status = "nothing pending".into();
            return;
        };
        self.decide_id(config, &id, approve, learn);
    }

    fn decide_id(&mut self, config: &Config, id: &str, approve: bool, learn: bool) {
        let reason = Some("brainloop review");
        if let Some(reg) = &config.registry {
            // The registry's decision, as `approve` / `deny` write it from any machine.
            let d = if approve {
                validations::Decision::Approve
            } else {
                validations::Decision::Deny
            };
            let scope = learn.then_some(validations::LearnScope::Worker);
            let res = crate::registry::connect(reg).and_then(|mut c| {
                crate::registry::check_version(&mut c)?;
                validations::fleet_decide(&mut c, id, d, scope, reason, &super::operator())
            });
            self.status = match res {
                Ok((f, _)) => format!(
                    "{}{} validation {} (job {} on worker {}): the worker takes it at once",
                    d.as_str(),
                    if learn { " --learn" } else { "" },
                    f.validation.id,
                    f.validation.job_id,
                    f.worker
                ),
                Err(e) => format!("{e:#}").replace('\n', " "),
            };
            self.scroll = 0;
            return;
        }
        self.status = match security::record_decision(config, id, approve, false, learn, reason) {
            Ok((d, v, retired)) => format!(
                "{}{} validation {} (job {}){}",
                d.as_str(),
                if learn { " --learn" } else { "" },
                v.id,
                v.job_id,
                retired.iter().map(|r| format!("; {r}")).collect::<String>()
            ),
            Err(e) => format!("{e:#}").replace('\n', " "),
        };
        self.scroll = 0;
    }

    fn undo(&mut self, config: &Config) {
        let Some(a) = self
            .applied_sel
            .selected()
            .and_then(|i| self.applied.get(i))
        else {
            self.status = "nothing to undo".into();
            return;
        };
        let job = a.job_id;
        if let (Some(reg), Some(w)) = (&config.registry, &a.worker) {
            // A request: the worker that applied it undoes it on its own workspace.
            let res = crate::registry::connect(reg)
                .and_then(|mut c| validations::request_undo(&mut c, w, job, &super::operator()));
            self.status = match res {
                Ok(n) => format!(
                    "undo request #{n} sent to worker {w} for job {job} (`brainloop show {job} --worker {w}` for its outcome)"
                ),
                Err(e) => format!("{e:#}").replace('\n', " "),
            };
            return;
        }
        self.status = match security::undo_job(config, job) {
            Ok(paths) => format!("undid job {job}: {} path(s) restored", paths.len()),
            Err(e) => format!("{e:#}").replace('\n', " "),
        };
    }

    fn draw(&mut self, f: &mut Frame) {
        let (left, right, bottom, status) = areas(
            f.area(),
            self.items.len(),
            self.applied.len(),
            self.focus == Focus::Applied,
        );
        let items: Vec<ListItem> = self
            .items
            .iter()
            .map(|i| {
                ListItem::new(crate::shown::line(&format!(
                    "job {} {} r{:.2} {}",
                    i.v.job_id,
                    i.v.client_id,
                    i.v.risk_score.unwrap_or(0.0),
                    i.v.command.as_deref().unwrap_or("")
                )))
            })
            .collect();
        let title = format!("pending ({})", self.items.len());
        let list = framed_list(items, title, self.focus == Focus::Pending);
        f.render_stateful_widget(list, left, &mut self.pending_sel);
        let detail = Paragraph::new(self.detail())
            .block(Block::bordered().title("why it asks · diff · output"))
            .wrap(Wrap { trim: false })
            .scroll((self.scroll, 0));
        f.render_widget(detail, right);
        let applied: Vec<ListItem> = self
            .applied
            .iter()
            .map(|a| {
                ListItem::new(crate::shown::line(&format!(
                    "job {} [{}] {}: {}",
                    a.job_id, a.policy, a.summary, a.command
                )))
            })
            .collect();
        let title = "applied recently (Tab, then u to undo)".to_string();
        let applied = framed_list(applied, title, self.focus == Focus::Applied);
        f.render_stateful_widget(applied, bottom, &mut self.applied_sel);
        let style = if self.confirm_deny.is_some() {
            Style::new()
                .fg(Color::Black)
                .bg(Color::Yellow)
                .add_modifier(Modifier::BOLD)
        } else {
            Style::new()
        };
        f.render_widget(
            Paragraph::new(crate::shown::line(&self.status))
                .style(style)
                .wrap(Wrap { trim: true }),
            status,
        );
    }

    /// The selected validation: why it asks, its diff (coloured), the command's output.
    fn detail(&self) -> Text<'static> {
        let Some(i) = self.selected() else {
            return Text::from("no validation waiting");
        };
        let p = &i.payload;
        let s = |k: &str| p[k].as_str().map(crate::shown::line).unwrap_or_default();
        let mut lines = vec![
            Line::from(format!(
                "validation {}  job {}  client {}{}",
                crate::shown::line(&i.v.id),
                i.v.job_id,
                crate::shown::line(&i.v.client_id),
                i.worker
                    .as_deref()
                    .map(|w| format!("  worker {}", crate::shown::line(w)))
                    .unwrap_or_default()
            )),
            Line::from(format!(
                "policy {}  risk {:.2}  set {}",
                s("policy"),
                i.v.risk_score.unwrap_or(0.0),
                s("permission_set")
            )),
            Line::from(format!("command: {}", s("command"))),
        ];
        if !s("purpose").is_empty() {
            lines.push(Line::from(format!("purpose: {}", s("purpose"))));
        }
        // Why it asks comes after the diff: on a small screen the diff is what must show.
        let why: Vec<Line<'static>> = p["reasons"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| {
                Line::from(format!(
                    "- {}",
                    r.as_str().map(crate::shown::line).unwrap_or_default()
                ))
            })
            .collect();
        for r in &i.reviewer {
            lines.push(Line::styled(
                clean(r),
                Style::new().fg(Color::Magenta).add_modifier(Modifier::BOLD),
            ));
        }
        for c in p["cut"].as_array().into_iter().flatten() {
            lines.push(Line::styled(
                format!(
                    "not shown whole: {}",
                    c.as_str().map(clean).unwrap_or_default()
                ),
                Style::new().fg(Color::Yellow),
            ));
        }
        let cs = &p["change_set"];
        if cs.is_object() {
            let c = |k: &str| cs[k].as_str().map(clean).unwrap_or_default();
            lines.push(Line::from(""));
            lines.push(Line::styled(
                format!(
                    "changes: {}",
                    crate::shown::line(cs["summary"].as_str().unwrap_or(""))
                ),
                Style::new().add_modifier(Modifier::BOLD),
            ));
            // Split on '\n' only: `lines()` would drop a carriage return before it unseen.
            for l in cs["diff"].as_str().unwrap_or("").split('\n') {
                lines.push(diff_line(l));
            }
            push_why(&mut lines, why);
            lines.push(Line::from(""));
            lines.push(Line::styled(
                "--- output",
                Style::new().add_modifier(Modifier::BOLD),
            ));
            for l in c("stdout").lines().chain(c("stderr").lines()) {
                lines.push(Line::from(l.to_string()));
            }
        } else {
            lines.push(Line::from(""));
            lines.push(Line::from("asked up front: nothing ran yet, no diff"));
            push_why(&mut lines, why);
        }
        Text::from(lines)
    }
}

fn push_why(lines: &mut Vec<Line<'static>>, why: Vec<Line<'static>>) {
    if why.is_empty() {
        return;
    }
    lines.push(Line::from(""));
    lines.push(Line::styled(
        "--- why it asks",
        Style::new().add_modifier(Modifier::BOLD),
    ));
    lines.extend(why);
}

/// Where the pending list, the detail, the applied list and the status line go. Wide and tall
/// (120×30 and more): the list beside the detail, the applied list below. Smaller (80×24): the
/// detail takes the full width; the lists get a few rows each (the applied one more while it has
/// the focus), so the diff stays on screen.
fn areas(
    area: ratatui::layout::Rect,
    pending: usize,
    applied: usize,
    applied_focus: bool,
) -> (
    ratatui::layout::Rect,
    ratatui::layout::Rect,
    ratatui::layout::Rect,
    ratatui::layout::Rect,
) {
    if area.width >= 120 && area.height >= 30 {
        let [top, bottom, status] = Layout::vertical([
            Constraint::Min(10),
            Constraint::Length(8),
            Constraint::Length(2),
        ])
        .areas(area);
        let [left, right] =
            Layout::horizontal([Constraint::Percentage(35), Constraint::Percentage(65)]).areas(top);
        return (left, right, bottom, status);
    }
    let rows = |n: usize, max: usize| (n.clamp(1, max) + 2) as u16;
    let [list, detail, bottom, status] = Layout::vertical([
        Constraint::Length(rows(pending, 3)),
        Constraint::Min(6),
        Constraint::Length(rows(applied, if applied_focus { 4 } else { 1 })),
        Constraint::Length(2),
    ])
    .areas(area);
    (list, detail, bottom, status)
}

/// A bordered list, its border yellow when it has the focus.
fn framed_list(items: Vec<ListItem<'static>>, title: String, focused: bool) -> List<'static> {
    let border = if focused {
        Style::new().fg(Color::Yellow)
    } else {
        Style::new()
    };
    List::new(items)
        .block(Block::bordered().title(title).border_style(border))
        .highlight_style(Style::new().add_modifier(Modifier::REVERSED))
        .highlight_symbol("> ")
}

fn clamp(s: &mut ListState, n: usize, at: usize) {
    s.select(if n == 0 { None } else { Some(at.min(n - 1)) });
}

fn diff_line(l: &str) -> Line<'static> {
    let color = if l.starts_with("+++") || l.starts_with("---") {
        Color::White
    } else if l.starts_with('+') {
        Color::Green
    } else if l.starts_with('-') {
        Color::Red
    } else if l.starts_with("@@") {
        Color::Cyan
    } else {
        Color::Reset
    };
    Line::from(Span::styled(clean(l), Style::new().fg(color)))
}

/// Several lines of agent text as the screen draws them: `shown::block` (every control, format
/// and separator character escaped but newline and tab), tabs four spaces.
fn clean(s: &str) -> String {
    crate::shown::block(s).replace('\t', "    ")
}
