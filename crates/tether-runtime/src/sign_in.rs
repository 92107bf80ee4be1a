//! Sign-in on the page (issue 28). Once an adapter has verified who someone is (the
//! server's OpenID Connect callback: signature, issuer, audience, expiry, nonce), they
//! are a person here: found by their email, or added when the provider vouches for an
//! address tether accepts, with the role the provider's claim maps to. Their browser gets
//! a session kept in the store (found by the hash of its cookie's secret) so every node
//! of a cluster accepts it, and signing out deletes it everywhere at once. Each session
//! carries its own CSRF token, which the page sends back with every change.

use tether_core::authz::Denied;
use tether_proto::{AuditAction, PersonId, Role, TokenScope};
use tether_store::{NewPerson, SESSION_PREFIX, StoreError, hash_secret, new_secret_with};

use crate::RuntimeError;
use crate::call::Identity;
use crate::error::Result;
use crate::ids::new_id;
use crate::people::People;

/// Who a provider says signed in, after the adapter verified the ID token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedUser {
    /// Lower case; the provider said it is verified.
    pub email: String,
    pub name: String,
    /// The role the provider's claim maps to (`None`: no mapping applies).
    pub role: Option<Role>,
    /// A new person's role when no mapping applies.
    pub default_role: Role,
    /// Whether a person may be added for this email (its domain is allowed).
    pub may_add: bool,
    /// Where they signed in from (`web`), for the audit log.
    pub via: String,
}

/// A new session: the cookie's secret and the CSRF token (both shown once, here).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedIn {
    pub secret: String,
    pub csrf: String,
    pub person: PersonId,
    pub name: String,
}

impl People<'_> {
    /// Signs a verified user in for `ttl_ms`: their person (added as `role`, else a
    /// member, when none has the email; the role follows the provider's mapping at every
    /// sign-in, keeping an enabled owner), and a new session. A disabled person is
    /// refused.
    pub async fn sign_in(&self, user: &VerifiedUser, ttl_ms: i64) -> Result<SignedIn> {
        let store = &self.rt.ctx().store;
        let found = store.people().person_by_email(&user.email).await?;
        let person = match found {
            Some(p) if p.disabled => {
                self.refuse(user, "the person is disabled").await;
                return Err(Denied::Forbidden.into());
            }
            Some(p) => match user.role {
                Some(role) if role != p.role => {
                    match store.people().set_person_access(&p.id, role, false).await {
                        Ok(Some(changed)) => changed,
                        // The last owner stays an owner.
                        Ok(None) | Err(StoreError::LastOwner) => p,
                        Err(e) => return Err(e.into()),
                    }
                }
                _ => p,
            },
            None if !user.may_add => {
                self.refuse(
                    user,
                    "no person has this email, and its domain is not allowed",
                )
                .await;
                return Err(Denied::Forbidden.into());
            }
            None => {
                let name: String = user.name.chars().take(100).collect();
                let added = store
                    .people()
                    .add_person(&NewPerson {
                        id: new_id(),
                        name: if name.trim().is_empty() {
                            user.email.clone()
                        } else {
                            name
                        },
                        email: Some(user.email.clone()),
                        role: user.role.unwrap_or(user.default_role),
                    })
                    .await?;
                let who = identity(&added);
                let detail = format!(
                    "{:?} as {} at first sign-in",
                    added.name,
                    added.role.as_str()
                );
                self.record(
                    Some(&who),
                    &user.via,
                    AuditAction::PersonAdded,
                    Some(added.id.as_str()),
                    Some(detail),
                )
                .await;
                added
            }
        };
        let (secret, hash) = new_secret_with(SESSION_PREFIX);
        let (csrf, _) = new_secret_with("");
        store
            .people()
            .add_web_session(&hash, &person.id, &csrf, ttl_ms)
            .await?;
        let who = identity(&person);
        let by = format!("{} on {}", person.name, user.via);
        self.record(
            Some(&who),
            &by,
            AuditAction::SignIn,
            Some(&user.email),
            None,
        )
        .await;
        Ok(SignedIn {
            secret,
            csrf,
            person: person.id,
            name: person.name,
        })
    }

    /// Keeps a started sign-in for `ttl_ms`, by the hash of its `state`.
    pub async fn keep_sign_in(
        &self,
        state: &str,
        nonce: &str,
        verifier: &str,
        ttl_ms: i64,
    ) -> Result<()> {
        let store = &self.rt.ctx().store;
        store
            .people()
            .add_oidc_login(&hash_secret(state), nonce, verifier, ttl_ms)
            .await?;
        Ok(())
    }

    /// Takes the started sign-in of `state`, once and before it expires.
    pub async fn take_sign_in(&self, state: &str) -> Result<Option<tether_store::OidcLoginRow>> {
        let store = &self.rt.ctx().store;
        Ok(store.people().take_oidc_login(&hash_secret(state)).await?)
    }

    /// A refused sign-in, for the audit log (the adapter records the ones it refuses
    /// itself: a bad token, a replayed state, a domain not allowed).
    pub async fn refuse(&self, user: &VerifiedUser, why: &str) {
        self.record(
            None,
            &user.via,
            AuditAction::SignInFailed,
            Some(&user.email),
            Some(why.to_owned()),
        )
        .await;
    }

    /// Who the session with cookie secret `secret` is, and its CSRF token; `None` when
    /// unknown, signed out, expired, or its person is disabled.
    pub async fn session_identity(&self, secret: &str) -> Result<Option<(Identity, String)>> {
        if !secret.starts_with(SESSION_PREFIX) {
            return Ok(None);
        }
        let store = &self.rt.ctx().store;
        let Some(s) = store.people().web_session(&hash_secret(secret)).await? else {
            return Ok(None);
        };
        let p = store.people().get_person(&s.person_id).await?;
        Ok(p.filter(|p| !p.disabled).map(|p| (identity(&p), s.csrf)))
    }

    /// Ends the session with cookie secret `secret`, on every node at once.
    pub async fn sign_out(&self, secret: &str) -> Result<()> {
        let who = self.session_identity(secret).await?;
        let ended = self
            .rt
            .ctx()
            .store
            .people()
            .end_web_session(&hash_secret(secret))
            .await?;
        if let (true, Some((who, _))) = (ended, who) {
            self.record(Some(&who), "", AuditAction::SignOut, None, None)
                .await;
            Ok(())
        } else {
            Err(RuntimeError::NotFound {
                what: "session",
                id: "signed out already".to_owned(),
            })
        }
    }
}

fn identity(p: &tether_store::PersonRow) -> Identity {
    Identity {
        person: p.id.clone(),
        name: p.name.clone(),
        role: p.role,
        scopes: TokenScope::ALL.to_vec(),
    }
}
