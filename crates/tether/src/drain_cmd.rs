//! `tether drain`: asks a running node to drain (issue 31; the same as sending it
//! SIGTERM): it takes no new work, hands its channels over, lets running turns finish
//! within `[server] drain_grace_secs` and exits. Waits until it has, printing progress.

use std::io::Write as _;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::config::Settings;
use crate::daemon_record::{self, Found, Identity};

/// How often the draining node is asked how far it is.
const LOOK: Duration = Duration::from_millis(500);

/// Drains the node at `url` (default: this data directory's daemon); waits for it to
/// exit unless `no_wait`.
pub async fn run(settings: &Settings, url: Option<String>, no_wait: bool) -> Result<()> {
    let (base, pid) = match url {
        Some(u) => (u.trim_end_matches('/').to_owned(), None),
        None => match daemon_record::find(&settings.data_dir) {
            Found::Running(record) => {
                match daemon_record::identify(&record.base_url(), Some(&record.instance_id)).await {
                    Identity::Verified => (record.base_url(), Some(record.pid)),
                    Identity::Other | Identity::Unreachable => bail!(
                        "the daemon of {} (pid {}) does not answer at {}; pass --url",
                        settings.data_dir.display(),
                        record.pid,
                        record.base_url()
                    ),
                }
            }
            Found::None | Found::Stale(_) => bail!(
                "no daemon runs on {} (pass --url to drain another node)",
                settings.data_dir.display()
            ),
        },
    };
    let token = crate::token::for_command(settings).await?;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()?;
    let resp = client
        .post(format!("{base}/api/v1/drain"))
        .bearer_auth(token.trim())
        .send()
        .await
        .with_context(|| format!("cannot reach {base}"))?;
    if !resp.status().is_success() {
        let status = resp.status();
        let body: serde_json::Value = resp.json().await.unwrap_or_default();
        bail!(
            "{base} refused to drain ({status}): {}",
            body["error"]["message"]
                .as_str()
                .unwrap_or("no reason given")
        );
    }
    let first: tether_proto::DrainStatus = resp.json().await?;
    say(&format!(
        "{base} drains: {} session(s) live, {} running a turn",
        first.live_sessions, first.busy_sessions
    ));
    if no_wait {
        return Ok(());
    }
    let started = Instant::now();
    let mut last = String::new();
    loop {
        tokio::time::sleep(LOOK).await;
        if pid.is_some_and(|p| !crate::datadir::process_alive(p)) {
            break;
        }
        let Ok(r) = client.get(format!("{base}/api/v1/ready")).send().await else {
            // Nobody answers any more: it stopped.
            break;
        };
        let ready: tether_proto::Readiness = r.json().await.unwrap_or(tether_proto::Readiness {
            status: "stopping".to_owned(),
            store: String::new(),
            message: None,
        });
        let line = ready.message.unwrap_or(ready.status);
        if line != last {
            say(&line);
            last = line;
        }
    }
    say(&format!(
        "{base} stopped after {:.1} s",
        started.elapsed().as_secs_f64()
    ));
    Ok(())
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}
