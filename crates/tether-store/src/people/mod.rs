//! People and their personal API tokens (issue 28; migration 0018 / PostgreSQL 0010).
//! A person has a role; a token belongs to one person, carries scopes, may expire and
//! is revocable. Only the SHA-256 of a token's secret is stored: the secret is shown
//! once, when the token is made, and a request's token is found by its hash
//! (`sql.rs`). The store keeps at least one enabled owner.

pub mod secret;

use tether_proto::{PersonId, Role, TokenScope};

/// A person of the team.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PersonRow {
    pub id: PersonId,
    pub name: String,
    pub email: Option<String>,
    pub role: Role,
    pub disabled: bool,
    pub created_at_ms: i64,
    pub last_seen_at_ms: Option<i64>,
}

/// A person to add.
#[derive(Debug, Clone)]
pub struct NewPerson {
    pub id: PersonId,
    pub name: String,
    pub email: Option<String>,
    pub role: Role,
}

/// A personal API token, as listed (never its secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRow {
    pub id: String,
    pub person_id: PersonId,
    pub name: String,
    pub scopes: Vec<TokenScope>,
    pub created_at_ms: i64,
    pub expires_at_ms: Option<i64>,
    pub revoked_at_ms: Option<i64>,
    pub last_used_at_ms: Option<i64>,
}

impl TokenRow {
    /// Whether it admits a request at `now_ms`: not revoked, not expired.
    pub fn usable(&self, now_ms: i64) -> bool {
        self.revoked_at_ms.is_none() && self.expires_at_ms.is_none_or(|at| now_ms < at)
    }
}

/// A token to store: its secret's hash, never the secret.
#[derive(Debug, Clone)]
pub struct NewToken {
    pub id: String,
    pub person_id: PersonId,
    pub name: String,
    pub hash: String,
    pub scopes: Vec<TokenScope>,
    pub expires_at_ms: Option<i64>,
}

/// The scopes as stored: their names, comma-separated.
pub(crate) fn scopes_text(scopes: &[TokenScope]) -> String {
    scopes
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

/// An entry to append to the audit log (`sql_audit.rs`; `at` set by the store).
#[derive(Debug, Clone)]
pub struct NewAudit {
    pub action: tether_proto::AuditAction,
    pub person_id: Option<PersonId>,
    pub by: String,
    pub target: Option<String>,
    pub detail: Option<String>,
}

/// A channel account linked to a person (`sql_accounts.rs`): at most one person per
/// account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountRow {
    pub channel: String,
    pub user_id: String,
    pub user_name: String,
    pub person_id: PersonId,
    pub linked_at_ms: i64,
    /// Who confirmed it: the person (`alice on web`) or an admin.
    pub linked_by: String,
}

/// A one-time link code, by the hash of its code: made on a channel (the account is
/// known, the person is not) or on the page (the other way round).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkCodeRow {
    pub hash: String,
    pub account: Option<(String, String, String)>,
    pub person_id: Option<PersonId>,
    pub created_at_ms: i64,
    pub expires_at_ms: i64,
}

/// A browser's sign-in session (`sql_sessions.rs`), by the hash of its cookie's secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebSessionRow {
    pub person_id: PersonId,
    /// What the page sends back in `X-Tether-CSRF` with every change.
    pub csrf: String,
    pub created_at_ms: i64,
    pub expires_at_ms: i64,
}

/// An OpenID Connect sign-in in flight, as its callback takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OidcLoginRow {
    pub nonce: String,
    pub verifier: String,
}
