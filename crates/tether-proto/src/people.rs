//! People and personal API tokens on the wire (issue 28): `/api/v1/me`,
//! `/api/v1/tokens`, `/api/v1/people`.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::{PersonId, Role, TokenScope};

/// A person of the team.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Person {
    #[schema(value_type = String)]
    pub id: PersonId,
    pub name: String,
    #[serde(default)]
    pub email: Option<String>,
    pub role: Role,
    pub disabled: bool,
    pub created_at_ms: i64,
    #[serde(default)]
    pub last_seen_at_ms: Option<i64>,
}

/// Who the request's credential stands for, and what it may do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Me {
    pub person: Person,
    /// The scopes of the credential used (a sign-in session and the bootstrap token
    /// carry all four).
    pub scopes: Vec<TokenScope>,
}

/// A personal API token as listed: never its secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ApiToken {
    pub id: String,
    #[schema(value_type = String)]
    pub person_id: PersonId,
    pub name: String,
    pub scopes: Vec<TokenScope>,
    pub created_at_ms: i64,
    #[serde(default)]
    pub expires_at_ms: Option<i64>,
    #[serde(default)]
    pub revoked_at_ms: Option<i64>,
    #[serde(default)]
    pub last_used_at_ms: Option<i64>,
}

/// `POST /api/v1/tokens`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewApiToken {
    /// What it is for (shown in lists), 1 to 100 characters.
    pub name: String,
    /// Absent: all four. Never empty.
    #[serde(default)]
    pub scopes: Option<Vec<TokenScope>>,
    /// When it stops working (unix ms, in the future); absent: never.
    #[serde(default)]
    pub expires_at_ms: Option<i64>,
    /// For someone else (admins only); absent: for oneself.
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub person_id: Option<PersonId>,
}

/// A token just made: its secret is shown this once and never again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CreatedToken {
    pub token: ApiToken,
    /// The bearer token (`tth_…`). Only its hash is stored.
    pub secret: String,
}

/// `POST /api/v1/people`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewPersonRequest {
    pub name: String,
    #[serde(default)]
    pub email: Option<String>,
    /// Absent: `member`.
    #[serde(default)]
    pub role: Option<Role>,
}

/// `PATCH /api/v1/people/{id}`: a role, or disabling (a disabled person's tokens and
/// sessions stop working at once).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdatePerson {
    #[serde(default)]
    pub role: Option<Role>,
    #[serde(default)]
    pub disabled: Option<bool>,
}

/// `GET /api/v1/tokens`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TokenList {
    pub tokens: Vec<ApiToken>,
}

/// `GET /api/v1/people`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PeopleList {
    pub people: Vec<Person>,
}
