//! Figures 7 and 8 (and 14, `records.rs`): reading a big store through the API. One generated store
//! (`generate.rs`: figure 4's, served by a real `tether serve`) holds C conversations plus
//! one with E events.
//!
//! 7 — listing: `GET /api/v1/conversations?limit=100`, the first page again and again,
//! then every page in turn by following `X-Next-Cursor` to the end (each conversation
//! must come exactly once); each page is timed on its own.
//!
//! 8 — opening the latest page of the long conversation the way the web UI does
//! (`assets/js/spans.js`): `GET .../events/page?limit=300` (the last turn fits in it) and
//! `GET .../messages?before_id=<max>&limit=200`, one after the other; the pair is timed.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use serde_json::Value;

use crate::daemon::{BenchDaemon, Home, Spec, write_config};
use crate::generate::{big_store, dir_size, long_conversation, spread_owners, visible_to};
use crate::report::{Row, Verdict};
use crate::stats::{Samples, count, mb, ms, secs};

/// People the conversations belong to, and the member who lists them (issue 28).
const PEOPLE: usize = 1000;
const MEMBER: &str = "p1";
/// Page size of the listing figure.
const LIST_PAGE: u32 = 100;
/// Times the first page is fetched.
const FIRST_PAGES: usize = 200;
/// Times the long conversation is opened.
const OPENS: usize = 100;
/// Page sizes the web UI uses (`spans.js`).
const UI_EVENTS_PAGE: u32 = 300;
const UI_MESSAGES_PAGE: u32 = 200;

pub async fn run(conversations: usize, events: usize, long_events: usize) -> Result<Vec<Row>> {
    let home = Home::new()?;
    let config = write_config(home.path(), &Spec::default())?;
    let data = home.path().join("data");
    // Ten events per conversation: figure 4's store (copied when it ran before).
    let gen_time = big_store(&data, conversations, events).await?;
    let t_long = Instant::now();
    let long = long_conversation(&data.join("tether.db"), long_events).await?;
    let long_time = t_long.elapsed();
    spread_owners(&data.join("tether.db"), PEOPLE).await?;
    let member_sees = visible_to(&data.join("tether.db"), MEMBER).await?;
    crate::records::fill(&data.join("tether.db"), conversations).await?;
    let db_size = dir_size(&data);
    let d = BenchDaemon::launch(home.path(), &config).await?;
    let total = conversations + 1;
    let store_note = format!(
        "store of {} conversations with {} events + one of {} events, {}, generated in {} + {}",
        count(conversations as f64),
        count(events as f64),
        count(long_events as f64),
        mb(db_size / 1024),
        secs(gen_time),
        secs(long_time)
    );
    let mut rows = vec![listing(&d, None, total, &store_note).await?];
    // The same list as one member of PEOPLE (their own and the team's conversations).
    let token = d
        .post(
            "/api/v1/tokens",
            serde_json::json!({"name": "bench", "person_id": MEMBER}),
        )
        .await?;
    let secret = token["secret"].as_str().unwrap_or_default().to_owned();
    let note = format!("{store_note}; owned by {PEOPLE} people, a tenth shared with the team");
    rows.push(listing(&d, Some(&secret), member_sees, &note).await?);
    rows.push(latest_page(&d, &long, long_events, &store_note).await?);
    rows.extend(crate::records::rows(&d, conversations, &store_note).await?);
    d.stop().await?;
    Ok(rows)
}

/// One page of the list: (conversation ids, next cursor).
async fn list_page(
    d: &BenchDaemon,
    token: Option<&str>,
    cursor: Option<&str>,
) -> Result<(Vec<String>, Option<String>)> {
    let mut url = d.url(&format!("/api/v1/conversations?limit={LIST_PAGE}"));
    if let Some(c) = cursor {
        url.push_str("&cursor=");
        url.push_str(c);
    }
    let req = match token {
        // Its own token only: a second Authorization header would not replace the first.
        Some(t) => d.client.get(url).bearer_auth(t),
        None => d.authed(d.client.get(url)),
    };
    let resp = req.send().await?;
    if !resp.status().is_success() {
        bail!("list: HTTP {}", resp.status());
    }
    let next = resp
        .headers()
        .get("x-next-cursor")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let page: Vec<Value> = resp.json().await?;
    let ids = page
        .iter()
        .filter_map(|c| c["id"].as_str().map(str::to_owned))
        .collect();
    Ok((ids, next))
}

/// Figure 7 as the bootstrap owner (`token` `None`: every conversation), 7b as a member
/// with a personal token (`total`: what they may see).
async fn listing(
    d: &BenchDaemon,
    token: Option<&str>,
    total: usize,
    store_note: &str,
) -> Result<Row> {
    let mut first = Vec::with_capacity(FIRST_PAGES);
    for _ in 0..FIRST_PAGES {
        let t = Instant::now();
        let (ids, _) = list_page(d, token, None).await?;
        first.push(t.elapsed());
        if ids.len() != LIST_PAGE as usize {
            bail!("the first page has {} conversations", ids.len());
        }
    }
    let mut seen = HashSet::with_capacity(total);
    let mut deeper = Vec::new();
    let mut cursor: Option<String> = None;
    let t_walk = Instant::now();
    loop {
        let t = Instant::now();
        let (ids, next) = list_page(d, token, cursor.as_deref()).await?;
        if cursor.is_some() {
            deeper.push(t.elapsed());
        }
        for id in ids {
            if !seen.insert(id.clone()) {
                bail!("conversation {id} listed twice");
            }
        }
        match next {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    let walk = t_walk.elapsed();
    if seen.len() != total {
        bail!(
            "walking the list found {} conversations of {total}",
            seen.len()
        );
    }
    let first = Samples::new(first);
    let last_page = deeper.last().copied().unwrap_or_default();
    let deeper = Samples::new(deeper);
    let p99 = first.p99().max(deeper.p99());
    let (figure, what) = match token {
        None => ("7", format!("with {} in the store", count(total as f64))),
        Some(_) => (
            "7b",
            format!(
                "as one member of {PEOPLE} (personal token; {} of theirs and the team's)",
                count(total as f64)
            ),
        ),
    };
    Ok(Row::new(
        figure,
        format!(
            "listing conversations {what} (`GET /api/v1/conversations?limit={LIST_PAGE}`, deeper pages with `cursor`)"
        ),
        format!(
            "p99 {} per page\n(first page p50 {} / p99 {} over {FIRST_PAGES}; the {} deeper pages p50 {} / p99 {} / max {}, the last one {}; all {} listed once each in {}; {store_note})",
            ms(p99),
            ms(first.p50()),
            ms(first.p99()),
            deeper.len(),
            ms(deeper.p50()),
            ms(deeper.p99()),
            ms(deeper.pct(100.0)),
            ms(last_page),
            count(total as f64),
            secs(walk),
        ),
        "p99 ≤ 20 ms per page",
        Verdict::of(p99 <= Duration::from_millis(20)),
    ))
}

async fn latest_page(d: &BenchDaemon, long: &str, events: usize, store_note: &str) -> Result<Row> {
    let events_url = format!("/api/v1/conversations/{long}/events/page?limit={UI_EVENTS_PAGE}");
    let messages_url = format!(
        "/api/v1/conversations/{long}/messages?before_id={}&limit={UI_MESSAGES_PAGE}",
        i64::MAX
    );
    let mut opens = Vec::with_capacity(OPENS);
    let mut event_times = Vec::with_capacity(OPENS);
    for _ in 0..OPENS {
        let t = Instant::now();
        let page = d.get(&events_url).await?;
        let te = t.elapsed();
        let messages = d.get(&messages_url).await?;
        opens.push(t.elapsed());
        event_times.push(te);
        let got = page["events"].as_array().map(Vec::len).unwrap_or(0);
        let last_seq = page["events"]
            .as_array()
            .and_then(|e| e.last())
            .and_then(|e| e["seq"].as_i64());
        if got != UI_EVENTS_PAGE as usize || last_seq != Some(events as i64) {
            bail!("the latest page has {got} events ending at seq {last_seq:?}");
        }
        if messages.as_array().map(Vec::len) != Some(UI_MESSAGES_PAGE as usize) {
            bail!("the latest history page is not full: {messages}");
        }
    }
    let cold = opens.first().copied().unwrap_or_default();
    let opens = Samples::new(opens);
    let event_times = Samples::new(event_times);
    let worst = opens.p99().max(cold);
    Ok(Row::new(
        "8",
        format!(
            "opening the latest page of a conversation with {} events (as the web UI does: `events/page?limit={UI_EVENTS_PAGE}` + `messages?before_id=…&limit={UI_MESSAGES_PAGE}`)",
            count(events as f64)
        ),
        format!(
            "first open {} · p50 {} / p99 {} over {OPENS}\n(the events page alone p50 {} / p99 {}; {store_note})",
            ms(cold),
            ms(opens.p50()),
            ms(opens.p99()),
            ms(event_times.p50()),
            ms(event_times.p99()),
        ),
        "≤ 50 ms",
        Verdict::of(worst <= Duration::from_millis(50)),
    ))
}
