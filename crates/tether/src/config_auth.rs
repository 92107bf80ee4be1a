//! `[auth.oidc]` of the config file: sign-in on the page with OpenID Connect (issue 28).
//!
//! ```toml
//! [auth.oidc]
//! issuer = "https://accounts.example.com"   # discovery: <issuer>/.well-known/openid-configuration
//! client_id = "tether"
//! client_secret = "…"                       # or TETHER_OIDC_CLIENT_SECRET
//! redirect_url = "https://tether.example.org/api/v1/auth/oidc/callback"  # default: from the Host
//! allowed_domains = ["example.com"]         # who may be added at first sign-in (empty: anyone
//!                                           # the provider vouches for)
//! role_claim = "groups"                     # a claim of the ID token (string or list)
//! roles = { "tether-admins" = "admin", "contractors" = "viewer" }
//! default_role = "member"                   # a new person without a mapped claim
//! session_hours = 168                       # how long a sign-in lasts
//! secure_cookies = true                     # default: when redirect_url is https
//! ```

use std::collections::BTreeMap;

use anyhow::{Context, Result, bail};
use serde::Deserialize;
use tether_proto::Role;
use tether_server::OidcConfig;

/// `[auth]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthFile {
    pub oidc: Option<OidcFile>,
}

/// `[auth.oidc]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OidcFile {
    pub issuer: String,
    pub client_id: String,
    pub client_secret: Option<String>,
    pub redirect_url: Option<String>,
    #[serde(default)]
    pub allowed_domains: Vec<String>,
    pub role_claim: Option<String>,
    #[serde(default)]
    pub roles: BTreeMap<String, String>,
    pub default_role: Option<String>,
    pub session_hours: Option<u64>,
    pub secure_cookies: Option<bool>,
}

fn role(name: &str, what: &str) -> Result<Role> {
    Role::parse(name).with_context(|| {
        format!("[auth.oidc] {what}: unknown role {name:?} (owner, admin, member or viewer)")
    })
}

/// `[auth.oidc]` resolved; `secret_env` is `TETHER_OIDC_CLIENT_SECRET`.
pub fn resolve(file: Option<AuthFile>, secret_env: Option<String>) -> Result<Option<OidcConfig>> {
    let Some(f) = file.and_then(|a| a.oidc) else {
        return Ok(None);
    };
    let issuer = f.issuer.trim().trim_end_matches('/').to_owned();
    if !(issuer.starts_with("https://") || issuer.starts_with("http://")) {
        bail!("[auth.oidc] issuer must be an http(s) URL, not {issuer:?}");
    }
    if f.client_id.trim().is_empty() {
        bail!("[auth.oidc] client_id must not be empty");
    }
    let client_secret = secret_env.or(f.client_secret).filter(|s| !s.is_empty());
    let mut roles = BTreeMap::new();
    for (value, name) in &f.roles {
        roles.insert(value.clone(), role(name, &format!("roles.{value}"))?);
    }
    let default_role = match f.default_role.as_deref() {
        Some(r) => role(r, "default_role")?,
        None => Role::Member,
    };
    if default_role == Role::Owner {
        bail!("[auth.oidc] default_role cannot be owner");
    }
    let hours = f.session_hours.unwrap_or(168);
    if hours == 0 {
        bail!("[auth.oidc] session_hours must be greater than 0");
    }
    let secure = f.secure_cookies.unwrap_or_else(|| {
        f.redirect_url
            .as_deref()
            .is_some_and(|u| u.starts_with("https://"))
    });
    Ok(Some(OidcConfig {
        issuer,
        client_id: f.client_id,
        client_secret,
        redirect_url: f.redirect_url,
        allowed_domains: f
            .allowed_domains
            .iter()
            .map(|d| d.trim().trim_start_matches('@').to_lowercase())
            .collect(),
        role_claim: f.role_claim,
        roles,
        default_role,
        session_ttl: std::time::Duration::from_secs(hours * 3600),
        secure_cookies: secure,
    }))
}
