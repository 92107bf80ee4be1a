//! `tether pair list` and `tether pair approve <code>`: operator side of channel pairing.
//! Works on the data directory directly (the daemon need not run); a running daemon
//! delivers the "you are paired" message from its outbox.

use std::fmt::Write as _;

use anyhow::Result;
use tether_channels::pairing::{self, PairingView};
use tether_store::Store;

use crate::config::Settings;

async fn open(settings: &Settings) -> Result<Store> {
    crate::datadir::open_configured_store(settings).await
}

fn line(p: &PairingView) -> String {
    let state = if p.expired {
        "expired"
    } else {
        p.status.as_str()
    };
    format!(
        "{}  {}  {} ({})  {}",
        pairing::display(&p.code),
        p.channel,
        p.user_name,
        p.user_id,
        state
    )
}

/// The text `tether pair list` prints.
pub async fn list(settings: &Settings, all: bool) -> Result<String> {
    let store = open(settings).await?;
    let list = pairing::list(&store, all).await?;
    store.close().await;
    if list.is_empty() {
        return Ok(if all {
            "no pairings\n".to_string()
        } else {
            "no pending pairing codes\n".to_string()
        });
    }
    let mut out = String::new();
    for p in &list {
        let _ = writeln!(out, "{}", line(p));
    }
    Ok(out)
}

/// The text `tether pair approve <code>` prints.
pub async fn approve(
    settings: &Settings,
    code: &str,
    to: &pairing::ApprovePairing,
) -> Result<String> {
    let store = open(settings).await?;
    let result = pairing::approve(&store, code, "cli", to).await;
    store.close().await;
    let p = result?;
    Ok(format!(
        "approved: {} ({}) may now use tether on {}, linked to {}\n",
        p.user_name,
        p.user_id,
        p.channel,
        match &to.person_id {
            Some(id) => format!("person {id}"),
            None => "a new member named after the account".to_owned(),
        }
    ))
}
