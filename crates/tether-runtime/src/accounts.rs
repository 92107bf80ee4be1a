//! One person across channels (issue 28): channel accounts linked to people, confirmed by
//! the person with a one-time code, either way round: `/link` on a channel gives a code
//! that the signed-in person enters on the page ([`People::redeem_link_code`]), or the
//! page gives a code the person sends on the channel as `/link <code>`
//! ([`People::redeem_on_channel`]). Codes live ten minutes, are taken once (only their
//! hash is stored) and every failed try is the caller's to count (the server's guessing
//! limit, the channel's per-account one). Admins link and unlink anyone's accounts.
//! What a linked account sends acts as its person ([`People::account_identity`]).

use tether_core::authz::Action;
use tether_proto::{AccountList, AuditAction, ChannelAccount, LinkAccount, LinkCode, PersonId};
use tether_store::{AccountRow, display_code, hash_secret, new_code, normalize_code};

use crate::RuntimeError;
use crate::call::Identity;
use crate::error::Result;
use crate::people::People;

/// How long a link code can be used.
pub const LINK_CODE_TTL_MS: i64 = 10 * 60 * 1000;

/// Who a channel account acts as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AccountStatus {
    /// Linked to this (enabled) person.
    Linked(Identity),
    /// Linked to a person who is disabled: nothing they send is taken.
    Disabled,
    /// Not linked: the channel's own allowlist and pairing decide.
    Unlinked,
}

fn account(a: AccountRow) -> ChannelAccount {
    ChannelAccount {
        channel: a.channel,
        user_id: a.user_id,
        user_name: a.user_name,
        person_id: a.person_id,
        linked_at_ms: a.linked_at_ms,
        linked_by: a.linked_by,
    }
}

fn no_code() -> RuntimeError {
    RuntimeError::NotFound {
        what: "link code",
        id: "unknown, used or expired".to_owned(),
    }
}

impl People<'_> {
    /// Who the account `user_id` on `channel` acts as.
    pub async fn account_identity(&self, channel: &str, user_id: &str) -> Result<AccountStatus> {
        let store = &self.rt.ctx().store;
        let Some(a) = store.people().channel_account(channel, user_id).await? else {
            return Ok(AccountStatus::Unlinked);
        };
        let p = store.people().get_person(&a.person_id).await?;
        Ok(match p {
            Some(p) if !p.disabled => AccountStatus::Linked(Identity {
                person: p.id,
                name: p.name,
                role: p.role,
                scopes: tether_proto::TokenScope::ALL.to_vec(),
            }),
            _ => AccountStatus::Disabled,
        })
    }

    /// `/link` on a channel: a code for the account, to enter on the page.
    pub async fn link_code_for_account(
        &self,
        channel: &str,
        user_id: &str,
        user_name: &str,
    ) -> Result<LinkCode> {
        self.make_code(Some((channel, user_id, user_name)), None)
            .await
    }

    /// A code for the acting person, to send on a channel as `/link <code>`.
    pub async fn link_code_for_me(&self) -> Result<LinkCode> {
        let who = self.actor();
        self.may(&who, Action::LinkSelf)?;
        self.make_code(None, Some(&who.person)).await
    }

    async fn make_code(
        &self,
        account: Option<(&str, &str, &str)>,
        person: Option<&PersonId>,
    ) -> Result<LinkCode> {
        let code = new_code();
        let store = &self.rt.ctx().store;
        let expires_at_ms = store
            .people()
            .add_link_code(&hash_secret(&code), account, person, LINK_CODE_TTL_MS)
            .await?;
        let shown = display_code(&code);
        Ok(LinkCode {
            send: format!("/link {shown}"),
            code: shown,
            expires_at_ms,
        })
    }

    /// The signed-in person enters the code `/link` gave on a channel: that account
    /// becomes theirs. An unknown, used or expired code is `not_found`.
    pub async fn redeem_link_code(&self, code: &str) -> Result<ChannelAccount> {
        let who = self.actor();
        self.may(&who, Action::LinkSelf)?;
        let store = &self.rt.ctx().store;
        let row = store
            .people()
            .take_link_code(&hash_secret(&normalize_code(code)))
            .await?;
        let Some((channel, user_id, user_name)) = row.and_then(|r| r.account) else {
            return Err(no_code());
        };
        self.link(&who, &who.person, &channel, &user_id, &user_name, "")
            .await
    }

    /// `/link <code>` sent on a channel with a code the page gave: the sending account
    /// becomes the code's person's.
    pub async fn redeem_on_channel(
        &self,
        channel: &str,
        user_id: &str,
        user_name: &str,
        code: &str,
    ) -> Result<ChannelAccount> {
        let store = &self.rt.ctx().store;
        let row = store
            .people()
            .take_link_code(&hash_secret(&normalize_code(code)))
            .await?;
        let Some(person) = row.and_then(|r| r.person_id) else {
            return Err(no_code());
        };
        let p = self.get(&person).await?;
        let who = Identity {
            person: p.id.clone(),
            name: p.name.clone(),
            role: p.role,
            scopes: tether_proto::TokenScope::ALL.to_vec(),
        };
        let by = format!("{} on {channel}", p.name);
        self.link(&who, &person, channel, user_id, user_name, &by)
            .await
    }

    /// Links an account to `person` without a code (admins).
    pub async fn link_account(
        &self,
        person: &PersonId,
        req: LinkAccount,
    ) -> Result<ChannelAccount> {
        let who = self.actor();
        self.may(&who, Action::LinkOthers)?;
        self.get(person).await?;
        let channel = req.channel.trim();
        let user_id = req.user_id.trim();
        if channel.is_empty() || user_id.is_empty() {
            return Err(RuntimeError::BadRequest(
                "channel and user_id must not be empty".into(),
            ));
        }
        let name = req.user_name.as_deref().unwrap_or(user_id).trim();
        self.link(&who, person, channel, user_id, name, "").await
    }

    async fn link(
        &self,
        who: &Identity,
        person: &PersonId,
        channel: &str,
        user_id: &str,
        user_name: &str,
        by: &str,
    ) -> Result<ChannelAccount> {
        let by_name = if by.is_empty() { who.name.as_str() } else { by };
        let row = self
            .rt
            .ctx()
            .store
            .people()
            .link_account(channel, user_id, user_name, person, by_name)
            .await?;
        let target = format!("{channel}:{user_id}");
        let detail = format!("{user_name:?} to person {person}");
        self.record(
            Some(who),
            by,
            AuditAction::AccountLinked,
            Some(&target),
            Some(detail),
        )
        .await;
        Ok(account(row))
    }

    /// The accounts of `person` (`None`: the acting person's own; someone else's:
    /// admins).
    pub async fn accounts(&self, person: Option<&PersonId>) -> Result<AccountList> {
        let who = self.actor();
        let of = self.whose(&who, person)?;
        let rows = self
            .rt
            .ctx()
            .store
            .people()
            .list_accounts(Some(&of))
            .await?;
        Ok(AccountList {
            accounts: rows.into_iter().map(account).collect(),
        })
    }

    /// Unlinks an account of `person` (`None`: the acting person's own; someone else's:
    /// admins). Its messages are then a stranger's (or the channel allowlist's) again.
    pub async fn unlink_account(
        &self,
        person: Option<&PersonId>,
        channel: &str,
        user_id: &str,
    ) -> Result<ChannelAccount> {
        let who = self.actor();
        let of = self.whose(&who, person)?;
        let store = &self.rt.ctx().store;
        let not_linked = || RuntimeError::NotFound {
            what: "linked account",
            id: format!("{channel}:{user_id}"),
        };
        match store.people().channel_account(channel, user_id).await? {
            Some(a) if a.person_id == of => {}
            _ => return Err(not_linked()),
        }
        let gone = store.people().unlink_account(channel, user_id).await?;
        let gone = gone.ok_or_else(not_linked)?;
        let target = format!("{channel}:{user_id}");
        let detail = format!("from person {of}");
        self.record(
            Some(&who),
            "",
            AuditAction::AccountUnlinked,
            Some(&target),
            Some(detail),
        )
        .await;
        Ok(account(gone))
    }

    /// Whose accounts a call is about: one's own (linking oneself), or someone else's
    /// (admins).
    fn whose(&self, who: &Identity, person: Option<&PersonId>) -> Result<PersonId> {
        match person {
            Some(p) if p != &who.person => {
                self.may(who, Action::LinkOthers)?;
                Ok(p.clone())
            }
            _ => {
                self.may(who, Action::LinkSelf)?;
                Ok(who.person.clone())
            }
        }
    }
}
