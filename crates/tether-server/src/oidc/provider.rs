//! The OpenID Connect relying party (issue 28), on the `openidconnect` crate: discovery
//! (`<issuer>/.well-known/openid-configuration`, kept, read again when an ID token names
//! a key the kept JWKS lacks: key rotation), the authorization code flow with PKCE
//! (S256), `state` and `nonce`, and the ID token's checks (signature by the provider's
//! keys, issuer, audience, expiry, nonce). Outgoing requests follow no redirects (SSRF).

use std::sync::Arc;

use openidconnect::core::{
    CoreAuthenticationFlow, CoreClient, CoreIdToken, CoreJwsSigningAlgorithm, CoreProviderMetadata,
};
use openidconnect::{
    AuthorizationCode, ClaimsVerificationError, ClientId, ClientSecret, CsrfToken, IssuerUrl,
    Nonce, PkceCodeChallenge, PkceCodeVerifier, RedirectUrl, Scope, SignatureVerificationError,
    TokenResponse,
};
use tokio::sync::RwLock;

use crate::OidcConfig;

/// Why a sign-in failed (the page shows `code()`; the detail goes to the log and the
/// audit log).
#[derive(Debug, thiserror::Error)]
pub(crate) enum OidcError {
    #[error("the provider cannot be reached or its discovery document is bad: {0}")]
    Discovery(String),
    #[error("the provider refused the sign-in: {0}")]
    Provider(String),
    #[error("the ID token does not verify: {0}")]
    BadToken(String),
    #[error("the sign-in was started elsewhere, used already or is too old")]
    State,
    #[error("the provider gave no verified email address")]
    NoEmail,
    #[error("{0} may not sign in here")]
    Domain(String),
    #[error("{0}")]
    Config(String),
}

impl OidcError {
    /// A stable code the page shows (`/#signin_error=<code>`).
    pub(crate) fn code(&self) -> &'static str {
        match self {
            OidcError::Discovery(_) => "provider_unreachable",
            OidcError::Provider(_) => "provider_refused",
            OidcError::BadToken(_) => "bad_id_token",
            OidcError::State => "bad_state",
            OidcError::NoEmail => "no_verified_email",
            OidcError::Domain(_) => "domain_not_allowed",
            OidcError::Config(_) => "misconfigured",
        }
    }
}

/// What a verified ID token says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Claims {
    pub email: String,
    pub name: String,
    /// The values of the configured role claim (a string or a list of strings).
    pub role_values: Vec<String>,
}

/// One provider, its metadata kept.
pub(crate) struct Provider {
    pub(crate) config: OidcConfig,
    http: reqwest::Client,
    metadata: RwLock<Option<Arc<CoreProviderMetadata>>>,
}

/// A sign-in to send the browser on: the provider's URL and what its callback needs.
pub(crate) struct Started {
    pub url: String,
    pub state: String,
    pub nonce: String,
    pub verifier: String,
}

impl Provider {
    pub(crate) fn new(config: OidcConfig) -> Result<Provider, OidcError> {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(std::time::Duration::from_secs(10))
            .build()
            .map_err(|e| OidcError::Config(e.to_string()))?;
        Ok(Provider {
            config,
            http,
            metadata: RwLock::new(None),
        })
    }

    /// The provider's metadata and keys: kept, or discovered now (again when `fresh`).
    async fn metadata(&self, fresh: bool) -> Result<Arc<CoreProviderMetadata>, OidcError> {
        if !fresh && let Some(m) = self.metadata.read().await.as_ref() {
            return Ok(m.clone());
        }
        let issuer = IssuerUrl::new(self.config.issuer.clone())
            .map_err(|e| OidcError::Config(format!("issuer: {e}")))?;
        let m = CoreProviderMetadata::discover_async(issuer, &self.http)
            .await
            .map_err(|e| OidcError::Discovery(e.to_string()))?;
        let m = Arc::new(m);
        *self.metadata.write().await = Some(m.clone());
        Ok(m)
    }

    fn client(
        &self,
        m: &CoreProviderMetadata,
        redirect: &str,
    ) -> Result<
        CoreClient<
            openidconnect::EndpointSet,
            openidconnect::EndpointNotSet,
            openidconnect::EndpointNotSet,
            openidconnect::EndpointNotSet,
            openidconnect::EndpointMaybeSet,
            openidconnect::EndpointMaybeSet,
        >,
        OidcError,
    > {
        let redirect = RedirectUrl::new(redirect.to_owned())
            .map_err(|e| OidcError::Config(format!("redirect_url: {e}")))?;
        Ok(CoreClient::from_provider_metadata(
            m.clone(),
            ClientId::new(self.config.client_id.clone()),
            self.config.client_secret.clone().map(ClientSecret::new),
        )
        .set_redirect_uri(redirect))
    }

    /// Starts a sign-in that returns to `redirect`.
    pub(crate) async fn start(&self, redirect: &str) -> Result<Started, OidcError> {
        let m = self.metadata(false).await?;
        let client = self.client(&m, redirect)?;
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let (url, state, nonce) = client
            .authorize_url(
                CoreAuthenticationFlow::AuthorizationCode,
                CsrfToken::new_random,
                Nonce::new_random,
            )
            .add_scope(Scope::new("email".to_owned()))
            .add_scope(Scope::new("profile".to_owned()))
            .set_pkce_challenge(challenge)
            .url();
        Ok(Started {
            url: url.to_string(),
            state: state.secret().clone(),
            nonce: nonce.secret().clone(),
            verifier: verifier.secret().clone(),
        })
    }

    /// Trades the callback's `code` for an ID token and verifies it.
    pub(crate) async fn finish(
        &self,
        redirect: &str,
        code: &str,
        nonce: &str,
        verifier: &str,
    ) -> Result<Claims, OidcError> {
        let m = self.metadata(false).await?;
        let client = self.client(&m, redirect)?;
        let response = client
            .exchange_code(AuthorizationCode::new(code.to_owned()))
            .map_err(|e| OidcError::Config(e.to_string()))?
            .set_pkce_verifier(PkceCodeVerifier::new(verifier.to_owned()))
            .request_async(&self.http)
            .await
            .map_err(|e| OidcError::Provider(e.to_string()))?;
        let token = response
            .id_token()
            .ok_or_else(|| OidcError::Provider("no ID token in the answer".to_owned()))?;
        match self.verify(&m, token, nonce) {
            // A key the kept set lacks: the provider rotated its keys.
            Err(Retry::NewKeys(_)) => {
                let m = self.metadata(true).await?;
                self.verify(&m, token, nonce).map_err(Retry::into_error)
            }
            other => other.map_err(Retry::into_error),
        }
    }

    /// Verifies `token` against metadata `m` and `nonce`.
    pub(crate) fn verify(
        &self,
        m: &CoreProviderMetadata,
        token: &CoreIdToken,
        nonce: &str,
    ) -> Result<Claims, Retry> {
        let verifier = openidconnect::IdTokenVerifier::new_confidential_client(
            ClientId::new(self.config.client_id.clone()),
            ClientSecret::new(self.config.client_secret.clone().unwrap_or_default()),
            m.issuer().clone(),
            m.jwks().clone(),
        )
        // What the provider says it signs with (RS256 alone is the crate's default), never
        // `none`.
        .set_allowed_algs(
            m.id_token_signing_alg_values_supported()
                .iter()
                .filter(|a| **a != CoreJwsSigningAlgorithm::None)
                .cloned(),
        );
        let claims = token
            .claims(&verifier, &Nonce::new(nonce.to_owned()))
            .map_err(|e| match e {
                ClaimsVerificationError::SignatureVerification(
                    SignatureVerificationError::NoMatchingKey,
                ) => Retry::NewKeys(e.to_string()),
                other => Retry::Bad(other.to_string()),
            })?;
        let email = claims
            .email()
            .filter(|_| claims.email_verified() == Some(true))
            .map(|e| e.as_str().trim().to_lowercase())
            .ok_or(Retry::NoEmail)?;
        let name = claims
            .name()
            .and_then(|n| n.get(None))
            .map(|n| n.as_str().to_owned())
            .unwrap_or_else(|| email.clone());
        let role_values = match &self.config.role_claim {
            Some(claim) => claim_values(&token.to_string(), claim),
            None => Vec::new(),
        };
        Ok(Claims {
            email,
            name,
            role_values,
        })
    }
}

/// A verification that failed, and whether fresh keys could help.
#[derive(Debug)]
pub(crate) enum Retry {
    NewKeys(String),
    Bad(String),
    NoEmail,
}

impl Retry {
    fn into_error(self) -> OidcError {
        match self {
            Retry::NewKeys(e) | Retry::Bad(e) => OidcError::BadToken(e),
            Retry::NoEmail => OidcError::NoEmail,
        }
    }
}

/// The string values of claim `name` in a (verified) JWT's payload: a string, or a list
/// of strings (like `groups`).
fn claim_values(jwt: &str, name: &str) -> Vec<String> {
    use base64::Engine as _;
    let Some(payload) = jwt.split('.').nth(1) else {
        return Vec::new();
    };
    let Ok(bytes) = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload) else {
        return Vec::new();
    };
    let Ok(json) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
        return Vec::new();
    };
    match &json[name] {
        serde_json::Value::String(s) => vec![s.clone()],
        serde_json::Value::Array(a) => a
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
#[path = "provider_tests.rs"]
mod tests;
