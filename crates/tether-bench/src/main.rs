//! `tether-bench`: tether's benchmarks (issues 7 and 11), one build, one command, one
//! table: `cargo build --release && target/release/tether-bench` (a subset with
//! `--only overhead,ingest`; `cargo run --release -p tether-bench` works as well and
//! also builds once, see `Cargo.toml`).
//!
//! Every figure runs a real `tether serve` process (the release build of this workspace)
//! in a temporary home, with the fake agent or the real `codex` / `claude` CLIs against
//! the mock model server. Before the first figure the bench runs the same workspace build
//! (`cargo build --release`; nothing to do after the command above) unless `--no-build`.
//! Figures are printed, never asserted; the process exits 0 even when a goal is missed
//! (the table says so). Not part of the product; nothing depends on it.

mod acp_client;
mod browse;
mod cluster;
mod daemon;
mod db_restart;
mod fanout;
mod generate;
mod ingest;
mod memory;
mod overhead;
mod records;
mod recovery;
mod report;
mod schedules;
mod shared;
mod spare;
mod sse_count;
mod stats;
mod throughput;
mod warm_cold;
mod worktrees;

use std::process::ExitCode;
use std::time::Instant;

/// The daemon's allocator (D278), so the figures that run tether's store in this process
/// (3, store only) run it as `tether serve` does.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use anyhow::{Context, Result, bail};
use clap::{Parser, ValueEnum};

use crate::report::{Row, Verdict};

/// The figures of issues 7 and 11.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Figure {
    /// 1: tether's share of a turn (HTTP in → SSE out).
    Overhead,
    /// 2: turns/s and peak RSS with many live sessions (also figure 6's per-live-session memory).
    Throughput,
    /// 3: streamed deltas persisted per second (end to end and store only).
    Ingest,
    /// 4: start to serving on a big store.
    Recovery,
    /// 5: warm vs dormant vs per-turn process with the real codex and claude.
    WarmCold,
    /// 6: RSS per dormant conversation, over 100 000 dormant since start and 10 000 that
    /// went dormant in the daemon.
    Memory,
    /// 7 and 8: listing conversations in a store of 100 000, and opening the latest page
    /// of a conversation with 1 000 000 events.
    Browse,
    /// 9: fan-out to 1 000 SSE subscribers of one conversation.
    Fanout,
    /// 10: live codex and gemini sessions within 4 GB of agent RSS, a process per
    /// session vs shared processes.
    Shared,
    /// Issue 12: turns/s and tether's share of a turn on SQLite, PostgreSQL with one node
    /// and three nodes; cross-node command latency; failover time.
    Cluster,
    /// 11: a new Claude session's time to its first event, the warm spare vs a cold start.
    Spare,
    /// Issue 25: a node's time from a PostgreSQL restart to the first answered message.
    DbRestart,
    /// Issue 30: the due-time check's cost with 10 000 schedules stored, and how late
    /// scheduled runs start.
    Schedules,
    /// Issue 32: an isolated worktree of a repository of 10 000 files, its disk and its
    /// snapshot, beside a plain `git worktree add`.
    Worktrees,
}

#[derive(Debug, Parser)]
#[command(name = "tether-bench", about = "tether's benchmarks: prints one table")]
struct Args {
    /// Run only these figures (comma-separated); all by default.
    #[arg(long, value_delimiter = ',')]
    only: Vec<Figure>,
    /// Figure 1: timed turns.
    #[arg(long, default_value_t = 1000)]
    overhead_turns: usize,
    /// Figure 2: conversations with live sessions.
    #[arg(long, default_value_t = 200)]
    conversations: usize,
    /// Figure 2: turns in all.
    #[arg(long, default_value_t = 10_000)]
    turns: usize,
    /// Figure 3: deltas streamed in all.
    #[arg(long, default_value_t = 300_000)]
    ingest_events: usize,
    /// Figure 3: events appended in the store-only figure (half of them one per call).
    #[arg(long, default_value_t = 100_000)]
    store_events: usize,
    /// Figure 3: concurrent streaming sessions (the fake agent streams without a pause,
    /// `rate K 0`).
    #[arg(long, default_value_t = 100)]
    ingest_streams: usize,
    /// Figures 4, 6, 7: conversations in the generated store (made once, copied for each).
    #[arg(long, default_value_t = 100_000)]
    big_conversations: usize,
    /// Figures 4, 6, 7: events in the generated store.
    #[arg(long, default_value_t = 1_000_000)]
    big_events: usize,
    /// Figures 5 and 11: rounds (warm, per-turn process, dormant) per agent; (spare, cold).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Figure 6: conversations that each run a turn and go dormant in the daemon.
    #[arg(long, default_value_t = 10_000)]
    dormant_turns: usize,
    /// Figure 8: events of the long conversation.
    #[arg(long, default_value_t = 1_000_000)]
    long_events: usize,
    /// Figure 9: SSE subscribers of the one conversation.
    #[arg(long, default_value_t = 1000)]
    subscribers: usize,
    /// Figure 9: deltas streamed to them.
    #[arg(long, default_value_t = 10_000)]
    fanout_events: usize,
    /// Figure 9: deltas per second.
    #[arg(long, default_value_t = 10_000)]
    fanout_rate: u64,
    /// Figure 9: deltas per second of the series the goal is judged on (a rate the
    /// machine carries with the bench's own readers).
    #[arg(long, default_value_t = 500)]
    fanout_carried_rate: u64,
    /// Figure 10: live sessions of each agent (each way).
    #[arg(long, default_value_t = 20)]
    shared_sessions: usize,
    /// Cluster: sequential turns for the share of a turn (each store setup).
    #[arg(long, default_value_t = 200)]
    cluster_turns: usize,
    /// Cluster: conversations at once for turns/s.
    #[arg(long, default_value_t = 30)]
    cluster_conversations: usize,
    /// Cluster: turns per conversation for turns/s.
    #[arg(long, default_value_t = 20)]
    cluster_per_conversation: usize,
    /// Cluster: failovers (each SIGKILLs a node and waits out its lease, 10 s).
    #[arg(long, default_value_t = 5)]
    cluster_failovers: usize,
    /// Cluster: messages each way (owner, another node) for the cross-node latency.
    #[arg(long, default_value_t = 100)]
    cluster_cross: usize,
    /// Issue 25: database restarts (each 2 s down).
    #[arg(long, default_value_t = 10)]
    db_restarts: usize,
    /// Issue 30: schedules stored.
    #[arg(long, default_value_t = 10_000)]
    schedules_stored: usize,
    /// Issue 30: scheduled runs timed.
    #[arg(long, default_value_t = 40)]
    schedule_runs: usize,
    /// Issue 32: files in the repository a worktree is made of.
    #[arg(long, default_value_t = 10_000)]
    worktree_files: usize,
    /// Do not run the workspace build (`cargo build --release`) first.
    #[arg(long)]
    no_build: bool,
}

fn main() -> ExitCode {
    let started = Instant::now();
    let args = Args::parse();
    if !args.no_build
        && let Err(e) = build_binaries()
    {
        eprintln!("tether-bench: {e:#}");
        return ExitCode::FAILURE;
    }
    eprintln!(
        "tether-bench: first figure {} after start",
        stats::secs(started.elapsed())
    );
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tether-bench: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let rows = runtime.block_on(async {
        let rows = run(&args).await;
        generate::drop_cache().await;
        rows
    });
    println!();
    println!("{}", header());
    println!();
    print!("{}", report::table(&rows));
    ExitCode::SUCCESS
}

async fn run(args: &Args) -> Vec<Row> {
    let all = [
        Figure::Overhead,
        Figure::Throughput,
        Figure::Ingest,
        Figure::Recovery,
        Figure::WarmCold,
        Figure::Browse,
        Figure::Fanout,
        Figure::Memory,
        Figure::Shared,
        Figure::Cluster,
        Figure::Spare,
        Figure::DbRestart,
        Figure::Schedules,
        Figure::Worktrees,
    ];
    let mut rows = Vec::new();
    for fig in all {
        if !args.only.is_empty() && !args.only.contains(&fig) {
            continue;
        }
        eprintln!("tether-bench: running {fig:?} ...");
        let t = Instant::now();
        let result = match fig {
            Figure::Overhead => overhead::run(args.overhead_turns).await,
            Figure::Throughput => throughput::run(args.conversations, args.turns).await,
            Figure::Ingest => {
                ingest::run(args.ingest_events, args.ingest_streams, args.store_events).await
            }
            Figure::Recovery => recovery::run(args.big_conversations, args.big_events).await,
            Figure::WarmCold => warm_cold::run(args.rounds).await,
            Figure::Memory => {
                memory::run(args.big_conversations, args.big_events, args.dormant_turns).await
            }
            Figure::Browse => {
                browse::run(args.big_conversations, args.big_events, args.long_events).await
            }
            Figure::Fanout => {
                fanout::run(
                    args.subscribers,
                    args.fanout_events,
                    args.fanout_rate,
                    args.fanout_carried_rate,
                )
                .await
            }
            Figure::Shared => shared::run(args.shared_sessions).await,
            Figure::Cluster => {
                cluster::run(cluster::Counts {
                    turns: args.cluster_turns,
                    conversations: args.cluster_conversations,
                    per_conversation: args.cluster_per_conversation,
                    failovers: args.cluster_failovers,
                    cross: args.cluster_cross,
                })
                .await
            }
            Figure::Spare => spare::run(args.rounds).await,
            Figure::DbRestart => db_restart::run(args.db_restarts).await,
            Figure::Schedules => schedules::run(args.schedules_stored, args.schedule_runs).await,
            Figure::Worktrees => worktrees::run(args.worktree_files).await,
        };
        eprintln!("tether-bench: {fig:?} took {}", stats::secs(t.elapsed()));
        match result {
            Ok(r) => {
                for row in &r {
                    eprintln!("  {}: {}", row.what, row.result.replace('\n', " "));
                }
                rows.extend(r);
            }
            Err(e) => {
                eprintln!("  {fig:?} failed: {e:#}");
                rows.push(Row::new(
                    "?",
                    format!("{fig:?}"),
                    format!("failed: {e:#}"),
                    "",
                    Verdict::Error,
                ));
            }
        }
    }
    rows
}

/// Where and what was measured.
fn header() -> String {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown CPU".to_string());
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(tether_testkit::repo_root())
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .unwrap_or_default();
    format!(
        "tether-bench on {cpus} CPU(s) ({cpu}, load average {load} at the end), tether {} at {commit}, {} build",
        env!("CARGO_PKG_VERSION"),
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    )
}

/// Runs the workspace build (`cargo build --release`, the same command that builds this
/// binary): the `tether` and `fake-agent` binaries the figures run come out of it with
/// the features and profile of this build, so after that command there is nothing to
/// do, and after `cargo run --release -p tether-bench` only the binaries themselves are
/// compiled (the bench's dependencies resolve features as the workspace does).
fn build_binaries() -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let mut cmd = std::process::Command::new(cargo);
    cmd.arg("build").current_dir(tether_testkit::repo_root());
    if cfg!(debug_assertions) {
        eprintln!("tether-bench: warning: a debug build measures nothing useful; use --release");
    } else {
        cmd.arg("--release");
    }
    eprintln!("tether-bench: cargo build (the workspace, as this binary was built) ...");
    let status = cmd.status().context("running cargo build")?;
    if !status.success() {
        bail!("cargo build failed ({status})");
    }
    Ok(())
}
