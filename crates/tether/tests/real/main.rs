//! The real agent CLIs (codex, claude, an ACP agent) against the mock model server: the slow tier.
//! One binary per theme (issue 27 item 5): each module was a test binary of its own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/reliability_util.rs"]
mod reliability_util;

mod delegation_real;
mod real_acp;
mod real_attachments;
mod real_claude;
mod real_claude_spare;
mod real_cluster;
mod real_codex;
mod real_daemon_kill;
mod real_limits;
mod real_pool;
mod real_shared;
mod real_usage;
mod real_worktrees;

/// Waits (up to 30 s) until the team's ledger on `d` equals what `model` billed, to the
/// token (reports arrive as the CLIs print them); the team's usage then. Fails with both
/// counts.
pub(crate) async fn ledger_equals_the_models_count(
    d: &tether_testkit::Daemon,
    model: &tether_testkit::MockModel,
) -> serde_json::Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let team = d.get_ok("/api/v1/usage?scope=team").await;
        let t = &team["totals"];
        let n = |k: &str| t[k].as_u64().unwrap();
        let input = n("input_tokens") + n("cached_input_tokens") + n("cache_write_tokens");
        let output = n("output_tokens") + n("reasoning_tokens");
        let billed = model.billed_tokens();
        if (input, output) == billed {
            eprintln!(
                "usage exactness: the mock model billed {} in / {} out; the ledger {t}",
                billed.0, billed.1
            );
            return team;
        }
        if std::time::Instant::now() >= deadline {
            for r in model.billed_requests() {
                eprintln!("billed: {r:?}");
            }
            let rows = d.get_ok("/api/v1/usage?scope=team&bucket=day").await;
            panic!(
                "the ledger ({input} in / {output} out) never equalled the model's count \
                 ({} in / {} out): {rows}",
                billed.0, billed.1
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
