//! Issue 25's figure: a node on a PostgreSQL server of its own (private, started here),
//! the server stopped (`fast` and `immediate` in turn) for two seconds and started again
//! on the same port, repeatedly. Measured from the server's return (`pg_ctl start`
//! returned) to the first message that is accepted and answered with a completed turn,
//! through the public API only. A message refused meanwhile must be `store_unavailable`
//! (503); anything else is an error.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::json;
use tether_testkit::postgres::{PgServer, StopMode};

use crate::daemon::{BenchDaemon, Home, Spec, str_field, wait_turn_end};
use crate::report::{Row, Verdict};
use crate::stats::{Samples, ms};

/// How long the server stays down each time.
const DOWN_FOR: Duration = Duration::from_secs(2);
/// The goal: every node serves again within 10 s of the database's return.
const GOAL: Duration = Duration::from_secs(10);

pub async fn run(restarts: usize) -> Result<Vec<Row>> {
    let pg = PgServer::start().context("a private PostgreSQL server")?;
    let home = Home::new()?;
    let spec = Spec {
        extra_config: format!("[store]\nurl = {:?}\n", pg.url()),
        ..Spec::default()
    };
    let d = BenchDaemon::start(home.path(), &spec).await?;
    let conv = d.new_conversation(None).await?;
    let mut sse = d.events(&conv).await?;
    d.turn(&conv, &mut sse, "warm up").await?;

    let mut back = Vec::new();
    for i in 0..restarts {
        let mode = if i % 2 == 0 {
            StopMode::Fast
        } else {
            StopMode::Immediate
        };
        pg.stop(mode).context("stopping PostgreSQL")?;
        tokio::time::sleep(DOWN_FOR).await;
        pg.start_again().context("starting PostgreSQL again")?;
        let returned = Instant::now();
        let turn_id = loop {
            let resp = d
                .authed(
                    d.client
                        .post(d.url(&format!("/api/v1/conversations/{conv}/messages"))),
                )
                .json(&json!({ "text": format!("after restart {i}") }))
                .send()
                .await
                .context("POST a message")?;
            let status = resp.status().as_u16();
            let body: serde_json::Value = resp.json().await.unwrap_or_default();
            match status {
                200 => break str_field(&body, "turn_id")?,
                503 if body["error"]["code"] == "store_unavailable" => {}
                other => bail!("HTTP {other} after the database came back: {body}"),
            }
            if returned.elapsed() > Duration::from_secs(60) {
                bail!("not serving 60 s after the database came back");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        // The SSE stream broke with the database or not: read the end from a fresh one.
        sse = d.events(&conv).await?;
        wait_turn_end(&mut sse, &turn_id).await?;
        back.push(returned.elapsed());
    }
    d.stop().await?;
    let s = Samples::new(back);
    let verdict = if s.p99() <= GOAL {
        Verdict::Met
    } else {
        Verdict::Missed
    };
    Ok(vec![Row::new(
        "25",
        format!(
            "database restart ({} times, fast and immediate in turn, {} s down): from the \
             database's return to the first answered message",
            s.len(),
            DOWN_FOR.as_secs()
        ),
        format!("p50 {} · p99 {}", ms(s.p50()), ms(s.p99())),
        "p99 ≤ 10 s",
        verdict,
    )])
}
