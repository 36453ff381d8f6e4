//! brainloop — a worker daemon that runs LLM work, shell commands and code for autonomous agents,
//! driven only by SQLite files.
//!
//! Data flows one way: producers write `brainloop.input.db`; the [`supervisor`] claims each job
//! into `brainloop.lifecycle.db`, runs it through the [`actions`] registry, and publishes the
//! result, heartbeat and metrics in `brainloop.output.db`. See ARCHITECTURE.md for the map.

pub mod actions;
pub mod ask;
pub mod bash;
pub mod classify;
pub mod cli;
pub mod clients;
pub mod config;
pub mod db;
pub mod decision;
pub mod egress;
pub mod fs;
pub mod heartbeat;
pub mod hooks;
pub mod horos;
pub mod infer;
pub mod job;
pub mod llm;
pub mod lockfile;
pub mod mcp;
pub mod memory;
pub mod permset;
pub mod programs;
pub mod quote;
pub mod registry;
pub mod retention;
pub mod retry;
pub mod runcode;
pub mod sandbox;
pub mod schedules;
pub mod shown;
pub mod shutdown;
pub mod stats;
pub mod supervisor;
pub mod systemd;
pub mod telemetry;
pub mod time;
