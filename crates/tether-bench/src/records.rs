//! Figure 14: a team's records through the API, on figure 7's generated store with a
//! usage ledger of [`LEDGER_ROWS`] rows spread over its conversations and
//! [`RESOLVED`] resolved approvals beside the pending ones (D272, D273).
//!
//! 14a — a conversation's usage (`GET /api/v1/usage?conversation_id=…`: totals, the
//! 30-day series and its budgets), as its page shows it.
//! 14b — the approvals waiting (`GET /api/v1/approvals?status=pending`), as the page's
//! and the channels' lists ask (the generated ones were cancelled by the daemon's
//! recovery with their turns, so it finds none among all the answered ones), and a page of all approvals deep in the history (by its
//! cursor).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use sqlx::Connection;

use crate::daemon::BenchDaemon;
use crate::generate::{connect, counter, id, id_sql};
use crate::report::{Row, Verdict};
use crate::stats::{Samples, count, ms};

/// Usage reports in the ledger.
pub const LEDGER_ROWS: usize = 500_000;
/// Approvals already answered, beside the generated pending ones.
pub const RESOLVED: usize = 100_000;
/// Requests timed per row.
const TIMES: usize = 100;
/// When the resolved approvals were made: approval `i` at `BASE_MS - i` (the newest first).
const BASE_MS: i64 = 1_700_000_000_000;
/// How deep the timed page of all approvals starts.
const DEEP: usize = 95_000;

/// Adds the ledger and the resolved approvals to the generated store at `db` (of
/// `conversations` conversations), before the daemon starts.
pub async fn fill(db: &Path, conversations: usize) -> Result<()> {
    let mut conn = connect(db).await?;
    let c = conversations.max(1);
    let now = tether_store::now_ms();
    let conv = id_sql('c', &format!("(i % {c})"));
    let mut tx = conn.begin().await?;
    sqlx::query(&format!(
        "{} INSERT INTO usage_ledger (at, conversation_id, root_conversation_id, session_id, \
         turn_id, person_id, agent, model, account, input_tokens, cached_input_tokens, \
         cache_write_tokens, output_tokens, reasoning_tokens, cost_nanos, price_version, \
         report_id, unreported) \
         SELECT {now} - i * 1000, {conv}, {conv}, NULL, NULL, 'p' || (i % 1000), 'fake', 'm', \
         NULL, 100, 50, 0, 20, 5, 1000, 'bench', 'r' || i, 0 FROM n",
        counter(LEDGER_ROWS)
    ))
    .execute(&mut *tx)
    .await?;
    sqlx::query(&format!(
        "{} INSERT INTO approvals (id, conversation_id, session_id, turn_id, title, kind, detail, \
         options, status, decided_by, created_at, deadline, resolved_at) \
         SELECT {}, {conv}, {}, {}, 'run make', 'execute', NULL, '[\"allow\",\"deny\"]', \
         'allowed', 'bench', {BASE_MS} - i, {BASE_MS} - i + 1800000, {BASE_MS} - i FROM n",
        counter(RESOLVED),
        id_sql('r', "i"),
        id_sql('s', &format!("(i % {c})")),
        id_sql('t', &format!("(i % {c})")),
    ))
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    sqlx::query("ANALYZE").execute(&mut conn).await?;
    conn.close().await?;
    Ok(())
}

/// Times the two reads on the daemon serving the filled store.
pub async fn rows(d: &BenchDaemon, conversations: usize, store_note: &str) -> Result<Vec<Row>> {
    let c = conversations.max(1);
    let conv = id('c', 7);
    let per_conversation = (LEDGER_ROWS / c + usize::from(7 < LEDGER_ROWS % c)) as i64;
    let mut usage = Vec::with_capacity(TIMES);
    for _ in 0..TIMES {
        let t = Instant::now();
        let view = d
            .get(&format!("/api/v1/usage?conversation_id={conv}"))
            .await?;
        usage.push(t.elapsed());
        let reports = view["totals"]["reports"].as_i64();
        if reports != Some(per_conversation) {
            bail!("the conversation's usage counts {reports:?} reports, not {per_conversation}");
        }
    }
    // The generated pending approvals were their interrupted turns' and are cancelled
    // by the daemon's recovery: the list reads the index of pending ones, and finds few.
    let mut pending_now = 0;
    let deep_cursor = format!("{}.{}", BASE_MS - DEEP as i64, id('r', DEEP));
    let (mut pending, mut deep) = (Vec::with_capacity(TIMES), Vec::with_capacity(TIMES));
    for _ in 0..TIMES {
        let t = Instant::now();
        let list = d.get("/api/v1/approvals?status=pending&limit=100").await?;
        pending.push(t.elapsed());
        let list = list.as_array().cloned().unwrap_or_default();
        if list.iter().any(|a| a["status"] != "pending") {
            bail!("the pending list has an approval of another status");
        }
        pending_now = list.len();
        let t = Instant::now();
        let page = d
            .get(&format!("/api/v1/approvals?limit=100&cursor={deep_cursor}"))
            .await?;
        deep.push(t.elapsed());
        let first = page
            .as_array()
            .and_then(|p| p.first())
            .and_then(|a| a["id"].as_str());
        if first != Some(id('r', DEEP + 1).as_str()) {
            bail!("the deep page starts at {first:?}");
        }
    }
    let (usage, pending, deep) = (
        Samples::new(usage),
        Samples::new(pending),
        Samples::new(deep),
    );
    let records = format!(
        "a ledger of {} usage reports and {} approvals answered, {pending_now} pending; {store_note}",
        count(LEDGER_ROWS as f64),
        count(RESOLVED as f64),
    );
    let worst = pending.p99().max(deep.p99());
    Ok(vec![
        Row::new(
            "14a",
            "a conversation's usage, as its page shows it (`GET /api/v1/usage?conversation_id=…`: totals, 30-day series, budgets)",
            format!(
                "p50 {} / p99 {} over {TIMES}\n({per_conversation} reports of its own; {records})",
                ms(usage.p50()),
                ms(usage.p99())
            ),
            "p99 ≤ 20 ms",
            Verdict::of(usage.p99() <= Duration::from_millis(20)),
        ),
        Row::new(
            "14b",
            format!(
                "approvals: the pending list (`GET /api/v1/approvals?status=pending`) and a page of all of them {} deep (by its `cursor`)",
                count(DEEP as f64)
            ),
            format!(
                "pending p50 {} / p99 {} · deep page p50 {} / p99 {} over {TIMES}\n({records})",
                ms(pending.p50()),
                ms(pending.p99()),
                ms(deep.p50()),
                ms(deep.p99())
            ),
            "p99 ≤ 20 ms",
            Verdict::of(worst <= Duration::from_millis(20)),
        ),
    ])
}
