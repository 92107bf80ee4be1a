//! `tether token create|list|revoke`: personal API tokens on the data directory's store
//! (issue 28), like `tether pair` — the daemon need not run, and what changes is seen by
//! every node at the next request. Acts as the install's owner (whoever may read the
//! data directory is). `tether token` alone prints the bootstrap token.

use std::fmt::Write as _;

use anyhow::{Context, Result, bail};
use tether_proto::{PersonId, TokenScope};
use tether_store::{NewToken, PersonRow, Store, TokenRow};

use crate::config::Settings;

async fn open(settings: &Settings) -> Result<Store> {
    crate::datadir::open_configured_store(settings).await
}

/// The person named or with the id `who`; the install's owner when `None`.
async fn person(store: &Store, who: Option<&str>) -> Result<PersonRow> {
    let people = store.people();
    let Some(who) = who else {
        return Ok(people
            .ensure_owner(&PersonId::from("owner"), "owner")
            .await?);
    };
    let all = people.list_people().await?;
    all.into_iter()
        .find(|p| p.id.as_str() == who || p.name == who)
        .with_context(|| format!("no person named {who:?} (see GET /api/v1/people)"))
}

fn scopes(text: Option<&str>) -> Result<Vec<TokenScope>> {
    let Some(text) = text else {
        return Ok(TokenScope::ALL.to_vec());
    };
    let mut out = Vec::new();
    for s in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match TokenScope::parse(s) {
            Some(scope) if !out.contains(&scope) => out.push(scope),
            Some(_) => {}
            None => bail!("unknown scope {s:?} (read, write, approve, admin)"),
        }
    }
    if out.is_empty() {
        bail!("a token needs at least one scope (read, write, approve, admin)");
    }
    Ok(out)
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Makes a token; its secret is in the output, this once.
pub async fn create(
    settings: &Settings,
    name: &str,
    scope: Option<&str>,
    expires_in_days: Option<u32>,
    who: Option<&str>,
) -> Result<String> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > 100 || name.chars().any(char::is_control) {
        bail!("a token's name must be 1 to 100 characters, without control characters");
    }
    let scopes = scopes(scope)?;
    let store = open(settings).await?;
    let made = async {
        let p = person(&store, who).await?;
        let (secret, hash) = tether_store::new_secret();
        let expires_at_ms = expires_in_days.map(|d| now_ms() + i64::from(d) * 86_400_000);
        let row = store
            .people()
            .add_token(&NewToken {
                id: tether_store::new_token_id(),
                person_id: p.id.clone(),
                name: name.to_owned(),
                hash,
                scopes,
                expires_at_ms,
            })
            .await?;
        anyhow::Ok((row, p, secret))
    }
    .await;
    store.close().await;
    let (row, p, secret) = made?;
    Ok(format!(
        "{secret}\n# {} for {} ({}); shown this once: keep it now\n",
        row.id, p.name, p.role
    ))
}

fn line(t: &TokenRow, now: i64) -> String {
    let state = match (t.revoked_at_ms, t.expires_at_ms) {
        (Some(_), _) => "revoked",
        (None, Some(at)) if at <= now => "expired",
        _ => "active",
    };
    let scopes: Vec<&str> = t.scopes.iter().map(|s| s.as_str()).collect();
    format!(
        "{}  {state:<7}  {:<12}  {}  {}\n",
        t.id,
        t.person_id.as_str(),
        scopes.join(","),
        t.name
    )
}

/// Everyone's tokens, newest first (never their secrets).
pub async fn list(settings: &Settings) -> Result<String> {
    let store = open(settings).await?;
    let tokens = store.people().list_tokens(None).await;
    store.close().await;
    let tokens = tokens?;
    if tokens.is_empty() {
        return Ok("no personal tokens\n".into());
    }
    let now = now_ms();
    let mut out = String::new();
    for t in &tokens {
        let _ = write!(out, "{}", line(t, now));
    }
    Ok(out)
}

/// Revokes token `id`: it stops working at the next request, on every node.
pub async fn revoke(settings: &Settings, id: &str) -> Result<String> {
    let store = open(settings).await?;
    let done = store.people().revoke_token(id, None).await;
    store.close().await;
    if !done? {
        bail!("no active token {id:?} (see `tether token list`)");
    }
    Ok(format!("revoked {id}\n"))
}
