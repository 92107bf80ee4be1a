//! People and their personal API tokens (issue 28), as the adapters reach them through
//! [`crate::Runtime::people`]: finding who a token stands for, and managing people and
//! tokens for the person the runtime acts as, checked with the same table as every
//! other action (`tether_core::authz`). A runtime acting for nobody is tether's own (the
//! CLI on the data directory): it acts as the install's owner.

use tether_core::authz::{Action, Denied, decide, may_set_role};
use tether_proto::{
    ApiToken, AuditAction, CreatedToken, Me, NewApiToken, NewPersonRequest, Person, PersonId, Role,
    TokenScope, UpdatePerson,
};
use tether_store::{NewPerson, NewToken, PersonRow, TokenRow};

use crate::RuntimeError;
use crate::call::Identity;
use crate::error::Result;
use crate::ids::new_id;

/// A token's last use is written at most this often (a busy client does not write on
/// every request).
const TOUCH_EVERY_MS: i64 = 60_000;

/// The longest name of a token or a person.
const MAX_NAME_CHARS: usize = 100;

/// People and tokens: a view of the runtime (cheap, `Copy`), reached through
/// `Runtime::people()`.
#[derive(Clone, Copy)]
pub struct People<'a> {
    pub(crate) rt: &'a crate::Runtime,
}

impl<'a> People<'a> {
    pub(crate) fn new(rt: &'a crate::Runtime) -> Self {
        People { rt }
    }
}

fn person(p: PersonRow) -> Person {
    Person {
        id: p.id,
        name: p.name,
        email: p.email,
        role: p.role,
        disabled: p.disabled,
        created_at_ms: p.created_at_ms,
        last_seen_at_ms: p.last_seen_at_ms,
    }
}

fn token(t: TokenRow) -> ApiToken {
    ApiToken {
        id: t.id,
        person_id: t.person_id,
        name: t.name,
        scopes: t.scopes,
        created_at_ms: t.created_at_ms,
        expires_at_ms: t.expires_at_ms,
        revoked_at_ms: t.revoked_at_ms,
        last_used_at_ms: t.last_used_at_ms,
    }
}

fn scopes_of(t: &TokenRow) -> String {
    let names: Vec<_> = t.scopes.iter().map(|s| s.as_str()).collect();
    names.join(",")
}

fn checked_name(name: &str, what: &str) -> Result<String> {
    let name = name.trim();
    if name.is_empty()
        || name.chars().count() > MAX_NAME_CHARS
        || name.chars().any(char::is_control)
    {
        return Err(RuntimeError::BadRequest(format!(
            "{what} must be 1 to {MAX_NAME_CHARS} characters, without control characters"
        )));
    }
    Ok(name.to_owned())
}

impl People<'_> {
    /// Who acts: the person the runtime acts for, else the install's owner.
    pub(crate) fn actor(&self) -> Identity {
        match self.rt.who.as_deref() {
            Some(who) => who.clone(),
            None => self.rt.owner_identity(),
        }
    }

    pub(crate) fn may(&self, who: &Identity, action: Action) -> Result<()> {
        decide(&who.actor(), action, None).map_err(RuntimeError::from)
    }

    /// Whether the person the runtime acts for may do `action` (read, write, answer) on
    /// conversation `id`: checked where a request is admitted, before its body is read
    /// (the command is checked again where it runs). Tether's own may.
    pub async fn may_on(&self, id: &tether_proto::ConversationId, action: Action) -> Result<()> {
        match self.rt.who.as_deref() {
            Some(who) => self.rt.access().check_on(who, action, id).await,
            None => Ok(()),
        }
    }

    /// The person a personal token's secret stands for, with the token's scopes; `None`
    /// for an unknown, revoked or expired token, or a disabled person (the caller answers
    /// 401 to all alike). Records the use.
    pub async fn identify_token(&self, secret: &str) -> Result<Option<Identity>> {
        let store = &self.rt.ctx().store;
        let hash = tether_store::hash_secret(secret);
        let Some((t, p)) = store.people().token_by_hash(&hash).await? else {
            return Ok(None);
        };
        let now = self.rt.ctx().clock.now_ms();
        if !t.usable(now) || p.disabled {
            return Ok(None);
        }
        // Written at most once a minute: a request whose token and person were seen within
        // it writes nothing (the rows just read say so).
        let stale = |at: Option<i64>| at.is_none_or(|at| at < now - TOUCH_EVERY_MS);
        if stale(t.last_used_at_ms) || stale(p.last_seen_at_ms) {
            store
                .people()
                .touch_token(&t.id, &p.id, TOUCH_EVERY_MS)
                .await?;
        }
        Ok(Some(Identity {
            person: p.id,
            name: p.name,
            role: p.role,
            scopes: t.scopes,
        }))
    }

    /// `person` with the `read` scope only (a signed download link made for them);
    /// `None` when they are disabled or gone.
    pub async fn reader(&self, person: &PersonId) -> Result<Option<Identity>> {
        let p = self.rt.ctx().store.people().get_person(person).await?;
        Ok(p.filter(|p| !p.disabled).map(|p| Identity {
            person: p.id,
            name: p.name,
            role: p.role,
            scopes: vec![TokenScope::Read],
        }))
    }

    /// Whom an agent session of `conversation` acts as (issue 28): the conversation's
    /// owner, with every scope their role has; `None` when they are disabled or gone (the
    /// agent's calls are refused then).
    pub async fn conversation_owner(
        &self,
        conversation: &tether_proto::ConversationId,
    ) -> Result<Option<Identity>> {
        let store = &self.rt.ctx().store;
        let Some(row) = store.conversations().get_conversation(conversation).await? else {
            return Ok(None);
        };
        let Some(owner) = row.owner_id else {
            return Ok(Some(self.rt.owner_identity()));
        };
        let p = store.people().get_person(&owner).await?;
        Ok(p.filter(|p| !p.disabled).map(|p| Identity {
            person: p.id,
            name: p.name,
            role: p.role,
            scopes: TokenScope::ALL.to_vec(),
        }))
    }

    /// Whether the person behind `who` may still act (not disabled, still there): a
    /// stream opened earlier checks it again.
    pub async fn still_allowed(&self, who: &Identity) -> Result<bool> {
        let p = self.rt.ctx().store.people().get_person(&who.person).await?;
        Ok(p.is_some_and(|p| !p.disabled && p.role == who.role))
    }

    /// `GET /api/v1/me`.
    pub async fn me(&self) -> Result<Me> {
        let who = self.actor();
        let p = self.get(&who.person).await?;
        Ok(Me {
            person: person(p),
            scopes: who.scopes,
        })
    }

    pub(crate) async fn get(&self, id: &PersonId) -> Result<PersonRow> {
        let p = self.rt.ctx().store.people().get_person(id).await?;
        p.ok_or_else(|| RuntimeError::NotFound {
            what: "person",
            id: id.to_string(),
        })
    }

    /// Makes a token (its secret in the answer, this once).
    pub async fn create_token(&self, req: NewApiToken) -> Result<CreatedToken> {
        let who = self.actor();
        self.may(&who, Action::ManageOwnTokens)?;
        let owner = match req.person_id {
            Some(p) if p != who.person => {
                self.may(&who, Action::ManageTokens)?;
                self.get(&p).await?.id
            }
            _ => who.person.clone(),
        };
        let name = checked_name(&req.name, "a token's name")?;
        let scopes = match req.scopes {
            None => TokenScope::ALL.to_vec(),
            Some(s) if s.is_empty() => {
                return Err(RuntimeError::BadRequest(
                    "a token needs at least one scope (read, write, approve, admin)".into(),
                ));
            }
            Some(mut s) => {
                s.sort_by_key(|x| TokenScope::ALL.iter().position(|y| y == x));
                s.dedup();
                s
            }
        };
        let now = self.rt.ctx().clock.now_ms();
        if req.expires_at_ms.is_some_and(|at| at <= now) {
            return Err(RuntimeError::BadRequest(
                "expires_at_ms must be in the future".into(),
            ));
        }
        let (secret, hash) = tether_store::new_secret();
        let row = self
            .rt
            .ctx()
            .store
            .people()
            .add_token(&NewToken {
                id: tether_store::new_token_id(),
                person_id: owner,
                name,
                hash,
                scopes,
                expires_at_ms: req.expires_at_ms,
            })
            .await?;
        let detail = format!(
            "{:?} for {}, scopes {}",
            row.name,
            row.person_id,
            scopes_of(&row)
        );
        self.record(
            Some(&who),
            "",
            AuditAction::TokenCreated,
            Some(&row.id),
            Some(detail),
        )
        .await;
        Ok(CreatedToken {
            token: token(row),
            secret,
        })
    }

    /// The acting person's tokens (`all`: everyone's, for admins), newest first.
    pub async fn list_tokens(&self, all: bool) -> Result<Vec<ApiToken>> {
        let who = self.actor();
        self.may(&who, Action::ManageOwnTokens)?;
        let of = if all {
            self.may(&who, Action::ManageTokens)?;
            None
        } else {
            Some(&who.person)
        };
        let rows = self.rt.ctx().store.people().list_tokens(of).await?;
        Ok(rows.into_iter().map(token).collect())
    }

    /// Revokes a token of the acting person's (anyone's, for admins). It stops working at
    /// once on every node: each request looks its hash up.
    pub async fn revoke_token(&self, id: &str) -> Result<()> {
        let who = self.actor();
        self.may(&who, Action::ManageOwnTokens)?;
        let of = match self.may(&who, Action::ManageTokens) {
            Ok(()) => None,
            Err(_) => Some(&who.person),
        };
        if self.rt.ctx().store.people().revoke_token(id, of).await? {
            self.record(Some(&who), "", AuditAction::TokenRevoked, Some(id), None)
                .await;
            Ok(())
        } else {
            Err(RuntimeError::NotFound {
                what: "token (or revoked already)",
                id: id.to_owned(),
            })
        }
    }

    /// Everyone (admins).
    pub async fn list_people(&self) -> Result<Vec<Person>> {
        self.may(&self.actor(), Action::ManagePeople)?;
        let rows = self.rt.ctx().store.people().list_people().await?;
        Ok(rows.into_iter().map(person).collect())
    }

    /// Adds a person (admins add members and viewers; owners anyone).
    pub async fn add_person(&self, req: NewPersonRequest) -> Result<Person> {
        let who = self.actor();
        self.may(&who, Action::ManagePeople)?;
        let role = req.role.unwrap_or(Role::Member);
        if !may_set_role(who.role, Role::Viewer, role) {
            return Err(Denied::Forbidden.into());
        }
        let name = checked_name(&req.name, "a person's name")?;
        let email = req.email.map(|e| e.trim().to_lowercase());
        if email
            .as_deref()
            .is_some_and(|e| !e.contains('@') || e.len() > 254)
        {
            return Err(RuntimeError::BadRequest("not an email address".into()));
        }
        let row = self
            .rt
            .ctx()
            .store
            .people()
            .add_person(&NewPerson {
                id: new_id(),
                name,
                email,
                role,
            })
            .await?;
        let detail = format!("{:?} as {}", row.name, row.role.as_str());
        self.record(
            Some(&who),
            "",
            AuditAction::PersonAdded,
            Some(row.id.as_str()),
            Some(detail),
        )
        .await;
        Ok(person(row))
    }

    /// Changes a person's role or disables them; the team keeps an enabled owner.
    pub async fn update_person(&self, id: &PersonId, req: UpdatePerson) -> Result<Person> {
        let who = self.actor();
        self.may(&who, Action::ManagePeople)?;
        let current = self.get(id).await?;
        let role = req.role.unwrap_or(current.role);
        // Admins touch members and viewers only, never making an admin or an owner.
        if !may_set_role(who.role, current.role, role)
            || (req.disabled.is_some() && !may_set_role(who.role, current.role, current.role))
        {
            return Err(Denied::Forbidden.into());
        }
        if &who.person == id && req.disabled == Some(true) {
            return Err(RuntimeError::BadRequest(
                "you cannot disable yourself".into(),
            ));
        }
        let disabled = req.disabled.unwrap_or(current.disabled);
        let row = self
            .rt
            .ctx()
            .store
            .people()
            .set_person_access(id, role, disabled)
            .await?;
        if row.is_some() && (role != current.role || disabled != current.disabled) {
            let detail = format!(
                "role {} → {}, {}",
                current.role.as_str(),
                role.as_str(),
                if disabled { "disabled" } else { "enabled" }
            );
            self.record(
                Some(&who),
                "",
                AuditAction::PersonChanged,
                Some(id.as_str()),
                Some(detail),
            )
            .await;
        }
        row.map(person).ok_or_else(|| RuntimeError::NotFound {
            what: "person",
            id: id.to_string(),
        })
    }
}
