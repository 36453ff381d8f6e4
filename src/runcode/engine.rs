//! The embedded engine: QuickJS (rquickjs) on a dedicated thread, one fresh runtime per run.
//!
//! The context has the standard built-ins only — no module loader, no file, network, process,
//! timer or environment access (the prelude also deletes anything that could block, such as
//! `Atomics`). Limits: a memory limit (`Runtime::set_memory_limit`), a stack limit, a CPU
//! budget enforced by the interrupt handler (time spent running JavaScript, not waiting for
//! tool calls; the interrupt is uncatchable), a cap on tool calls and on captured output.
//!
//! The agent's code is the body of `async (KEY) => { "use strict"; ... }`: top-level `await`
//! and `return` work. Tool calls leave the engine as [`FromEngine::Call`] messages; their
//! answers come back as [`ToEngine::Reply`] and settle the call's promise. The engine drives
//! QuickJS's job queue itself; while every remaining promise waits for a tool call, it blocks
//! on the reply channel.

use rquickjs::{
    function::Func, promise::PromiseState, CaughtError, Context, Ctx, Exception, Function, Object,
    Persistent, Promise, Runtime, Value,
};
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedSender;

const PRELUDE: &str = include_str!("prelude.js");

/// Stack of the engine thread; QuickJS's own limit ([`Limits::stack_bytes`]) stays well below.
pub const ENGINE_THREAD_STACK: usize = 64 * 1024 * 1024;

/// What one run may use.
#[derive(Debug, Clone)]
pub struct Limits {
    pub memory_bytes: usize,
    pub stack_bytes: usize,
    pub cpu: Duration,
    pub max_calls: usize,
    pub max_log_bytes: usize,
    pub max_result_bytes: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            memory_bytes: 64 * 1024 * 1024,
            stack_bytes: 4 * 1024 * 1024,
            cpu: Duration::from_secs(10),
            max_calls: 1000,
            max_log_bytes: 64 * 1024,
            max_result_bytes: 1024 * 1024,
        }
    }
}

/// Inputs of one run.
pub struct Job {
    /// Plain JavaScript (instrumented, types stripped): the body of the async function.
    pub js: String,
    /// Name of the call-site parameter (see instrument.rs).
    pub key: String,
    pub limits: Limits,
    /// Seed of `Math.random` (recorded in the checkpoint: a replay draws the same numbers).
    pub seed: i32,
    /// Clock readings of an earlier attempt, answered again in order before the real clock.
    pub times: Vec<i64>,
}

/// Engine → runner.
#[derive(Debug)]
pub enum FromEngine {
    Call {
        id: u64,
        tool: String,
        op: String,
        /// The static operation (site) of the call; `None` when it carries none.
        site: Option<usize>,
        params: String,
    },
    /// A new clock reading (to record).
    Time(i64),
    Done(Box<Finished>),
}

/// Runner → engine.
#[derive(Debug)]
pub enum ToEngine {
    /// The answer of a call: a JSON value, or an error message (thrown in the code).
    Reply {
        id: u64,
        result: Result<String, String>,
    },
    /// Stop now (pause, cancellation): the running code is interrupted.
    Stop,
}

/// Why a run did not return a value.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// A limit was exceeded (named).
    Limit(String),
    /// Stopped on request (pause or cancellation).
    Stopped,
    /// The code threw (or rejected) and did not catch it.
    Thrown(String),
    /// The code could not start (syntax error, engine set-up).
    Setup(String),
    /// Nothing left to run but the code's promise never settles.
    Stuck,
}

#[derive(Debug)]
pub struct Finished {
    pub value: Result<serde_json::Value, Failure>,
    pub logs: Vec<String>,
    pub logs_truncated: bool,
    pub cpu_ms: u64,
}

type Pending = (Persistent<Function<'static>>, Persistent<Function<'static>>);

struct Host {
    tx: UnboundedSender<FromEngine>,
    next_id: Cell<u64>,
    calls: Cell<usize>,
    pending: RefCell<HashMap<u64, Pending>>,
    logs: RefCell<Vec<String>>,
    log_bytes: Cell<usize>,
    logs_truncated: Cell<bool>,
    replay_times: RefCell<VecDeque<i64>>,
    limits: Limits,
    /// Set when the host itself decides to stop the code (a limit).
    limit_hit: RefCell<Option<String>>,
    stop: Arc<AtomicBool>,
}

#[derive(Clone, Copy, PartialEq)]
enum Why {
    Stop,
    Cpu,
}

/// Runs `job` to completion on the current thread (call it on a thread with
/// [`ENGINE_THREAD_STACK`]); the result is also sent as [`FromEngine::Done`].
pub fn run(
    job: Job,
    tx: UnboundedSender<FromEngine>,
    rx: Receiver<ToEngine>,
    stop: Arc<AtomicBool>,
) {
    let started = Instant::now();
    let used = Rc::new(Cell::new(Duration::ZERO));
    let since: Rc<Cell<Option<Instant>>> = Rc::new(Cell::new(None));
    let why: Rc<Cell<Option<Why>>> = Rc::new(Cell::new(None));
    let host = Rc::new(Host {
        tx: tx.clone(),
        next_id: Cell::new(1),
        calls: Cell::new(0),
        pending: RefCell::new(HashMap::new()),
        logs: RefCell::new(Vec::new()),
        log_bytes: Cell::new(0),
        logs_truncated: Cell::new(false),
        replay_times: RefCell::new(job.times.iter().copied().collect()),
        limits: job.limits.clone(),
        limit_hit: RefCell::new(None),
        stop: Arc::clone(&stop),
    });
    let value = drive(&job, &host, &rx, &stop, &used, &since, &why);
    let _ = started;
    let finished = Finished {
        value,
        logs: std::mem::take(&mut *host.logs.borrow_mut()),
        logs_truncated: host.logs_truncated.get(),
        cpu_ms: used.get().as_millis() as u64,
    };
    let _ = tx.send(FromEngine::Done(Box::new(finished)));
}

#[allow(clippy::too_many_arguments)]
fn drive(
    job: &Job,
    host: &Rc<Host>,
    rx: &Receiver<ToEngine>,
    stop: &Arc<AtomicBool>,
    used: &Rc<Cell<Duration>>,
    since: &Rc<Cell<Option<Instant>>>,
    why: &Rc<Cell<Option<Why>>>,
) -> Result<serde_json::Value, Failure> {
    let rt = Runtime::new().map_err(|e| Failure::Setup(format!("cannot start the engine: {e}")))?;
    rt.set_memory_limit(job.limits.memory_bytes);
    rt.set_max_stack_size(job.limits.stack_bytes);
    {
        let (stop, used, since, why, budget) = (
            Arc::clone(stop),
            Rc::clone(used),
            Rc::clone(since),
            Rc::clone(why),
            job.limits.cpu,
        );
        rt.set_interrupt_handler(Some(Box::new(move || {
            if stop.load(Ordering::Relaxed) {
                why.set(Some(Why::Stop));
                return true;
            }
            if let Some(t0) = since.get() {
                if used.get() + t0.elapsed() > budget {
                    why.set(Some(Why::Cpu));
                    return true;
                }
            }
            false
        })));
    }
    let ctx = Context::full(&rt)
        .map_err(|e| Failure::Setup(format!("cannot create the engine context: {e}")))?;
    let slice = |f: &mut dyn FnMut()| {
        since.set(Some(Instant::now()));
        f();
        if let Some(t0) = since.take() {
            used.set(used.get() + t0.elapsed());
        }
    };

    // Start: prelude, then the code as an async function called with the call-site function.
    let mut main: Option<Persistent<Promise<'static>>> = None;
    let mut start_err: Option<Failure> = None;
    slice(&mut || {
        let r = ctx.with(|ctx| -> Result<Persistent<Promise<'static>>, Failure> {
            let site = install(&ctx, host, job.seed).map_err(|e| setup_error(&ctx, e))?;
            let wrapper = format!("(async ({}) => {{\"use strict\";\n{}\n}})", job.key, job.js);
            let f: Function = ctx
                .eval(wrapper)
                .map_err(|e| thrown(&ctx, e, "the code does not compile"))?;
            let p: Promise = f
                .call((site,))
                .map_err(|e| thrown(&ctx, e, "the code failed"))?;
            Ok(Persistent::save(&ctx, p))
        });
        match r {
            Ok(p) => main = Some(p),
            Err(e) => start_err = Some(e),
        }
    });
    let result = match (main, start_err) {
        (Some(main), None) => event_loop(&rt, &ctx, host, rx, main, &slice),
        (_, Some(e)) => Err(e),
        (None, None) => Err(Failure::Setup("the code did not start".into())),
    };
    // Release every JS value held by Rust before the runtime goes away.
    ctx.with(|_ctx| host.pending.borrow_mut().clear());
    let result = match (why.get(), host.limit_hit.borrow().clone()) {
        (_, Some(limit)) => Err(Failure::Limit(limit)),
        (Some(Why::Cpu), _) => Err(Failure::Limit(format!(
            "cpu: the code ran for more than {} ms",
            job.limits.cpu.as_millis()
        ))),
        (Some(Why::Stop), _) => Err(Failure::Stopped),
        (None, _) => result,
    };
    result.map_err(|f| name_limit(f, &job.limits))
}

/// Names the limit behind QuickJS's own errors (memory, stack).
fn name_limit(f: Failure, limits: &Limits) -> Failure {
    match f {
        Failure::Thrown(m) | Failure::Setup(m) if m.contains("out of memory") => {
            Failure::Limit(format!(
                "memory: the code needed more than {} MiB",
                limits.memory_bytes / (1024 * 1024)
            ))
        }
        Failure::Thrown(m) if m.contains("stack overflow") || m.contains("Maximum call stack") => {
            Failure::Limit(format!(
                "stack: recursion deeper than the {} KiB stack ({})",
                limits.stack_bytes / 1024,
                m.lines().next().unwrap_or_default()
            ))
        }
        other => other,
    }
}

fn event_loop(
    rt: &Runtime,
    ctx: &Context,
    host: &Rc<Host>,
    rx: &Receiver<ToEngine>,
    main: Persistent<Promise<'static>>,
    slice: &dyn Fn(&mut dyn FnMut()),
) -> Result<serde_json::Value, Failure> {
    loop {
        // Microtasks until none is left.
        let mut job_err: Option<String> = None;
        slice(&mut || loop {
            match rt.execute_pending_job() {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => {
                    job_err = Some(e.0.with(|ctx| {
                        let v = ctx.catch();
                        describe(&ctx, v)
                    }));
                    break;
                }
            }
        });
        if host.stop.load(Ordering::Relaxed) || host.limit_hit.borrow().is_some() {
            return Err(Failure::Stopped);
        }
        if let Some(e) = job_err {
            return Err(Failure::Thrown(e));
        }
        let mut state = PromiseState::Pending;
        let mut out: Option<Result<serde_json::Value, Failure>> = None;
        slice(&mut || {
            ctx.with(|ctx| {
                let p = match main.clone().restore(&ctx) {
                    Ok(p) => p,
                    Err(e) => {
                        out = Some(Err(Failure::Setup(e.to_string())));
                        return;
                    }
                };
                state = p.state();
                match state {
                    PromiseState::Pending => {}
                    PromiseState::Resolved => {
                        out = Some(settle_value(&ctx, &p, host.limits.max_result_bytes));
                    }
                    PromiseState::Rejected => {
                        let r: Option<rquickjs::Result<Value>> = p.result();
                        let msg = match r {
                            Some(Err(_)) => {
                                let v = ctx.catch();
                                describe(&ctx, v)
                            }
                            _ => "the code's promise was rejected".to_string(),
                        };
                        out = Some(Err(Failure::Thrown(msg)));
                    }
                }
            })
        });
        if let Some(o) = out {
            return o;
        }
        if host.pending.borrow().is_empty() {
            return Err(Failure::Stuck);
        }
        // Everything waits for a tool call: block for the next answer.
        match rx.recv() {
            Ok(ToEngine::Reply { id, result }) => {
                slice(&mut || {
                    ctx.with(|ctx| {
                        let Some((res, rej)) = host.pending.borrow_mut().remove(&id) else {
                            return;
                        };
                        let _ = deliver(&ctx, res, rej, result.clone());
                    })
                });
            }
            Ok(ToEngine::Stop) | Err(_) => return Err(Failure::Stopped),
        }
    }
}

fn deliver<'js>(
    ctx: &Ctx<'js>,
    res: Persistent<Function<'static>>,
    rej: Persistent<Function<'static>>,
    result: Result<String, String>,
) -> rquickjs::Result<()> {
    match result {
        Ok(json) => {
            let v = ctx.json_parse(json)?;
            res.restore(ctx)?.call::<_, ()>((v,))
        }
        Err(msg) => {
            let e = Exception::from_message(ctx.clone(), &msg)?;
            rej.restore(ctx)?.call::<_, ()>((e,))
        }
    }
}

fn settle_value<'js>(
    ctx: &Ctx<'js>,
    p: &Promise<'js>,
    max: usize,
) -> Result<serde_json::Value, Failure> {
    let v: Value = match p.result::<Value>() {
        Some(Ok(v)) => v,
        _ => return Err(Failure::Thrown("cannot read the returned value".into())),
    };
    if v.is_undefined() {
        return Ok(serde_json::Value::Null);
    }
    let text = match ctx.json_stringify(v) {
        Ok(Some(s)) => s.to_string().map_err(|e| Failure::Thrown(e.to_string()))?,
        Ok(None) => return Ok(serde_json::Value::Null),
        Err(e) => return Err(thrown(ctx, e, "the returned value is not JSON")),
    };
    if text.len() > max {
        return Err(Failure::Limit(format!(
            "output: the returned value is {} bytes as JSON (at most {max})",
            text.len()
        )));
    }
    serde_json::from_str(&text)
        .map_err(|e| Failure::Thrown(format!("the returned value is not JSON: {e}")))
}

/// The message (and first stack lines) of a thrown value.
fn describe<'js>(ctx: &Ctx<'js>, v: Value<'js>) -> String {
    if let Some(ex) = v
        .as_object()
        .and_then(|o| Exception::from_object(o.clone()))
    {
        let name: String = ex
            .get::<_, String>("name")
            .unwrap_or_else(|_| "Error".to_string());
        let msg = ex.message().unwrap_or_default();
        let stack = ex.stack().unwrap_or_default();
        let stack: Vec<&str> = stack.lines().take(5).collect();
        return if stack.is_empty() {
            format!("{name}: {msg}")
        } else {
            format!("{name}: {msg}\n{}", stack.join("\n"))
        };
    }
    match ctx.json_stringify(v.clone()) {
        Ok(Some(s)) => format!("uncaught value: {}", s.to_string().unwrap_or_default()),
        _ => "uncaught value".to_string(),
    }
}

fn thrown<'js>(ctx: &Ctx<'js>, e: rquickjs::Error, what: &str) -> Failure {
    match CaughtError::from_error(ctx, e) {
        CaughtError::Exception(ex) => Failure::Thrown(describe(ctx, ex.into_value())),
        CaughtError::Value(v) => Failure::Thrown(describe(ctx, v)),
        CaughtError::Error(e) => Failure::Thrown(format!("{what}: {e}")),
    }
}

fn setup_error<'js>(ctx: &Ctx<'js>, e: rquickjs::Error) -> Failure {
    match thrown(ctx, e, "engine set-up failed") {
        Failure::Thrown(m) => Failure::Setup(m),
        f => f,
    }
}

/// Evaluates the prelude with the host functions; returns the call-site function.
fn install<'js>(ctx: &Ctx<'js>, host: &Rc<Host>, seed: i32) -> rquickjs::Result<Function<'js>> {
    let h = Object::new(ctx.clone())?;
    let hc = Rc::clone(host);
    h.set(
        "call",
        Func::from(
            move |ctx: Ctx<'js>,
                  tool: String,
                  op: String,
                  site: f64,
                  params: String,
                  resolve: Function<'js>,
                  reject: Function<'js>|
                  -> rquickjs::Result<()> {
                let n = hc.calls.get() + 1;
                hc.calls.set(n);
                if n > hc.limits.max_calls {
                    *hc.limit_hit.borrow_mut() = Some(format!(
                        "tool calls: more than {} in one run",
                        hc.limits.max_calls
                    ));
                    hc.stop.store(true, Ordering::Relaxed);
                    return Ok(());
                }
                let id = hc.next_id.get();
                hc.next_id.set(id + 1);
                let site = (site >= 0.0 && site.fract() == 0.0).then_some(site as usize);
                hc.pending.borrow_mut().insert(
                    id,
                    (
                        Persistent::save(&ctx, resolve),
                        Persistent::save(&ctx, reject),
                    ),
                );
                if hc
                    .tx
                    .send(FromEngine::Call {
                        id,
                        tool,
                        op,
                        site,
                        params,
                    })
                    .is_err()
                {
                    hc.stop.store(true, Ordering::Relaxed);
                }
                Ok(())
            },
        ),
    )?;
    let hl = Rc::clone(host);
    h.set(
        "log",
        Func::from(move |level: String, text: String| {
            if hl.logs_truncated.get() {
                return;
            }
            let line = if level == "log" {
                text
            } else {
                format!("[{level}] {text}")
            };
            let used = hl.log_bytes.get();
            let room = hl.limits.max_log_bytes.saturating_sub(used);
            if line.len() > room {
                let mut cut = room;
                while cut > 0 && !line.is_char_boundary(cut) {
                    cut -= 1;
                }
                if cut > 0 {
                    hl.logs.borrow_mut().push(line[..cut].to_string());
                }
                hl.log_bytes.set(hl.limits.max_log_bytes);
                hl.logs_truncated.set(true);
                return;
            }
            hl.log_bytes.set(used + line.len());
            hl.logs.borrow_mut().push(line);
        }),
    )?;
    let hn = Rc::clone(host);
    h.set(
        "now",
        Func::from(move || -> f64 {
            if let Some(t) = hn.replay_times.borrow_mut().pop_front() {
                return t as f64;
            }
            let t = crate::time::now_ms();
            let _ = hn.tx.send(FromEngine::Time(t));
            t as f64
        }),
    )?;
    h.set("seed", seed)?;
    let prelude: Function = ctx.eval(PRELUDE)?;
    prelude.call((h,))
}
