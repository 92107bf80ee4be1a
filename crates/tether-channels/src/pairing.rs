//! Pairing: an unknown sender gets a one-time code (reused while it is pending and
//! fresh); an operator approves it (`tether pair approve <code>` or the API), which
//! allows that user on that channel and tells them so through the outbox.

use serde::{Deserialize, Serialize};
use tether_proto::{PersonId, Role};
use tether_store::{NewOutbox, NewPerson, Pairing, PersonRow, Store, now_ms};

use crate::ChannelError;
use crate::channel::OutMessage;
use crate::core::SharedCore;
use crate::inbound::Inbound;

/// A pending code older than this is replaced by a new one and cannot be approved.
pub const CODE_TTL_MS: i64 = 60 * 60 * 1000;
/// At most this many fresh codes wait per channel: a flood of unknown senders stops
/// costing rows (and replies) here; later senders get a code once older ones expire or
/// are approved.
pub const MAX_PENDING: i64 = 64;

/// A pairing as the API and the CLI show it (no chat address).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = Pairing)]
pub struct PairingView {
    pub code: String,
    pub channel: String,
    pub user_id: String,
    pub user_name: String,
    pub status: String,
    pub created_at_ms: i64,
    #[serde(default)]
    pub approved_at_ms: Option<i64>,
    #[serde(default)]
    pub approved_by: Option<String>,
    /// Past its time to live while still pending: can no longer be approved.
    pub expired: bool,
}

impl From<Pairing> for PairingView {
    fn from(p: Pairing) -> Self {
        let expired = p.status == "pending" && now_ms() - p.created_at_ms > CODE_TTL_MS;
        PairingView {
            code: p.code,
            channel: p.channel,
            user_id: p.user_id,
            user_name: p.user_name,
            status: p.status,
            created_at_ms: p.created_at_ms,
            approved_at_ms: p.approved_at_ms,
            approved_by: p.approved_by,
            expired,
        }
    }
}

/// `ABCD2345` → `ABCD-2345`.
pub fn display(code: &str) -> String {
    tether_store::display_code(code)
}

/// What a person typed → the stored spelling (upper case, no separators).
pub fn normalize(code: &str) -> String {
    tether_store::normalize_code(code)
}

/// The sender's pending code, or a new one; `None` when [`MAX_PENDING`] fresh codes
/// already wait. Expired codes are deleted first.
pub(crate) async fn code_for(
    core: &SharedCore,
    msg: &Inbound,
    chat_key: &str,
) -> Result<Option<Pairing>, ChannelError> {
    if let Some(p) = core
        .store
        .channels()
        .pending_pairing(core.name(), &msg.sender.id)
        .await?
        && now_ms() - p.created_at_ms <= CODE_TTL_MS
    {
        return Ok(Some(p));
    }
    let fresh_since = now_ms() - CODE_TTL_MS;
    core.store
        .channels()
        .prune_pairings(core.name(), fresh_since)
        .await?;
    loop {
        let p = Pairing {
            code: tether_store::new_code(),
            channel: core.name().to_string(),
            user_id: msg.sender.id.clone(),
            user_name: msg.sender.name.clone(),
            chat_key: chat_key.to_string(),
            address: serde_json::to_string(&msg.address())?,
            status: "pending".to_string(),
            created_at_ms: now_ms(),
            approved_at_ms: None,
            approved_by: None,
        };
        if core
            .store
            .channels()
            .insert_pairing_capped(&p, fresh_since, MAX_PENDING)
            .await?
        {
            tracing::info!(
                channel = core.name(),
                user = p.user_id,
                code = p.code,
                "pairing code issued; approve with `tether pair approve`"
            );
            return Ok(Some(p));
        }
        if core
            .store
            .channels()
            .count_pending_pairings(core.name(), fresh_since)
            .await?
            >= MAX_PENDING
        {
            tracing::warn!(
                channel = core.name(),
                user = msg.sender.id,
                "no pairing code issued: {MAX_PENDING} codes are already pending"
            );
            return Ok(None);
        }
        // The code was taken: draw another.
    }
}

/// Whom an approved pairing's account becomes (issue 28): a person of the team, or a new
/// one named after the account.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ApprovePairing {
    /// An existing person (enabled).
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub person_id: Option<PersonId>,
    /// With no `person_id`: the new person's role, `member` (default) or `viewer`.
    #[serde(default)]
    pub role: Option<Role>,
}

/// Approves a pending, fresh code: the account is linked to the chosen person (or a new
/// member named after it), allowed on its channel, and told so.
pub async fn approve(
    store: &Store,
    code: &str,
    by: &str,
    to: &ApprovePairing,
) -> Result<PairingView, ChannelError> {
    let code = normalize(code);
    let current = store
        .channels()
        .get_pairing(&code)
        .await?
        .ok_or_else(|| ChannelError::NotFound(format!("pairing code {code}")))?;
    if current.status != "pending" {
        return Err(ChannelError::BadRequest(format!(
            "pairing code {code} is already {}",
            current.status
        )));
    }
    if now_ms() - current.created_at_ms > CODE_TTL_MS {
        return Err(ChannelError::BadRequest(format!(
            "pairing code {code} has expired; the person gets a new one with their next message"
        )));
    }
    if let Some(a) = store
        .people()
        .channel_account(&current.channel, &current.user_id)
        .await?
    {
        return Err(ChannelError::BadRequest(format!(
            "{}:{} is linked to person {} already",
            a.channel, a.user_id, a.person_id
        )));
    }
    let person = person_for(store, &current, to).await?;
    store
        .people()
        .link_account(
            &current.channel,
            &current.user_id,
            &current.user_name,
            &person.id,
            by,
        )
        .await?;
    let body = serde_json::to_string(&OutMessage::plain(format!(
        "✅ You are paired as {}: send a message or /new <task> to start.",
        person.name
    )))?;
    let approved = store
        .channels()
        .approve_pairing(&code, by, |p| NewOutbox {
            channel: p.channel.clone(),
            chat_key: p.chat_key.clone(),
            dedupe_key: format!("pair:{}:approved", p.code),
            op: "send".to_string(),
            target_key: None,
            address: p.address.clone(),
            body,
            replace: false,
            traceparent: None,
        })
        .await?
        .ok_or_else(|| ChannelError::BadRequest(format!("pairing code {code} is not pending")))?;
    Ok(approved.into())
}

/// The person an approved pairing's account is linked to.
async fn person_for(
    store: &Store,
    p: &Pairing,
    to: &ApprovePairing,
) -> Result<PersonRow, ChannelError> {
    if let Some(id) = &to.person_id {
        return match store.people().get_person(id).await? {
            Some(person) if !person.disabled => Ok(person),
            Some(_) => Err(ChannelError::BadRequest(format!("person {id} is disabled"))),
            None => Err(ChannelError::NotFound(format!("person {id}"))),
        };
    }
    let role = to.role.unwrap_or(Role::Member);
    if !matches!(role, Role::Member | Role::Viewer) {
        return Err(ChannelError::BadRequest(
            "a pairing makes a member or a viewer; change the role afterwards".to_owned(),
        ));
    }
    let name: String = p.user_name.chars().take(100).collect();
    Ok(store
        .people()
        .add_person(&NewPerson {
            id: PersonId::from(uuid::Uuid::new_v4().simple().to_string()),
            name: if name.trim().is_empty() {
                p.user_id.clone()
            } else {
                name
            },
            email: None,
            role,
        })
        .await?)
}

/// Pairings, newest first; only pending ones unless `all`.
pub async fn list(store: &Store, all: bool) -> Result<Vec<PairingView>, ChannelError> {
    let status = (!all).then_some("pending");
    Ok(store
        .channels()
        .list_pairings(status)
        .await?
        .into_iter()
        .map(PairingView::from)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_readable_and_normalized() {
        let c = tether_store::new_code();
        assert_eq!(c.len(), tether_store::CODE_LEN);
        assert!(
            c.bytes()
                .all(|b| b.is_ascii_uppercase() || (b'2'..=b'9').contains(&b))
        );
        assert!(!c.contains(['0', 'O', '1', 'I', 'L']));
        assert_eq!(display("ABCD2345"), "ABCD-2345");
        assert_eq!(normalize(" abcd-2345 "), "ABCD2345");
    }
}
