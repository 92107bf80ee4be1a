//! Signed download links (issue 24 S7). `<img src>` and `<a href download>` cannot send
//! the bearer header, and a token in their address ends up in the browser's history and
//! download list. So the page asks `POST /api/v1/links` for a link per object: the
//! object's own address plus `exp=<unix seconds>&sig=<hex>`, an HMAC-SHA256 over the
//! address and the expiry under a key derived from the API token. A link opens that one
//! object, for [`LIFETIME`]; it never reveals the token. A link made for a person
//! (issue 28) carries `by=<person id>` inside what is signed, and opens its object only as
//! that person may see it, while they are not disabled.

use crate::auth::Api;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::extract::{Request, State};
use axum::http::Uri;
use axum::middleware::Next;
use axum::response::Response;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use tether_proto::{ErrorBody, LinkRequest, PersonId, SignedLink, SignedLinks};

use crate::auth::{self, Auth};
use crate::error::ApiError;
use crate::extract::ApiJson;

/// How long a signed link opens its object.
pub const LIFETIME: Duration = Duration::from_secs(15 * 60);
/// The most links one request may ask for.
pub const MAX_PER_REQUEST: usize = 500;

type HmacSha256 = Hmac<Sha256>;

/// The key links are signed with, derived from the API token (so every node with the
/// same token accepts the same links, and a new token revokes every link).
#[derive(Clone)]
pub(crate) struct Signer {
    key: [u8; 32],
}

impl Signer {
    pub fn new(token: &str) -> Self {
        let mut key = [0u8; 32];
        if let Ok(mut mac) = HmacSha256::new_from_slice(token.as_bytes()) {
            mac.update(b"tether signed link v1");
            key.copy_from_slice(&mac.finalize().into_bytes());
        }
        Signer { key }
    }

    fn mac(&self, address: &str, exp: u64) -> Option<HmacSha256> {
        let mut mac = HmacSha256::new_from_slice(&self.key).ok()?;
        mac.update(exp.to_string().as_bytes());
        mac.update(b"\n");
        mac.update(address.as_bytes());
        Some(mac)
    }

    /// `address` (path and query) signed until `exp` (unix seconds).
    pub fn sign(&self, address: &str, exp: u64) -> Option<String> {
        let sig = hex(&self.mac(address, exp)?.finalize().into_bytes());
        let sep = if address.contains('?') { '&' } else { '?' };
        Some(format!("{address}{sep}exp={exp}&sig={sig}"))
    }

    /// Whether `uri` is a link this signer made that has not expired at `now` (unix
    /// seconds).
    #[cfg(test)]
    pub fn admits(&self, uri: &Uri, now: u64) -> bool {
        self.opened_by(uri, now).is_some()
    }

    /// For a link this signer made that has not expired at `now`: the person it was made
    /// for (`Some(None)`: a link of before people, made with the bootstrap token).
    pub fn opened_by(&self, uri: &Uri, now: u64) -> Option<Option<PersonId>> {
        let pq = uri.path_and_query()?;
        let (address, exp, sig) = split_link(pq.as_str())?;
        let in_time = exp >= now && exp <= now + LIFETIME.as_secs() + 60;
        let expected = hex(&self.mac(address, exp)?.finalize().into_bytes());
        if !(in_time && auth::constant_time_eq(expected.as_bytes(), sig.as_bytes())) {
            return None;
        }
        let by = address
            .rsplit_once(['?', '&'])
            .and_then(|(_, last)| last.strip_prefix("by="))
            .map(|p| PersonId::from(p.to_owned()));
        Some(by)
    }
}

/// `<address>?exp=N&sig=S` or `<address>&exp=N&sig=S` → (address, N, S); the two
/// parameters must come last, in that order (as [`Signer::sign`] writes them).
fn split_link(pq: &str) -> Option<(&str, u64, &str)> {
    let (rest, sig) = pq.rsplit_once("&sig=")?;
    let at = rest.rfind("exp=")?;
    let (address, sep) = (rest.get(..at.checked_sub(1)?)?, rest.get(at - 1..at)?);
    if sep != "?" && sep != "&" {
        return None;
    }
    let exp = rest.get(at + 4..)?.parse().ok()?;
    Some((address, exp, sig))
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The addresses a link may be made for: an attachment's bytes and a turn's file.
fn linkable(address: &str) -> Result<(), String> {
    let uri: Uri = address
        .parse()
        .map_err(|_| format!("not a valid address: {address:?}"))?;
    if uri.scheme().is_some() || uri.authority().is_some() {
        return Err(format!("give the path only, not a full URL: {address:?}"));
    }
    let segments: Vec<&str> = uri.path().split('/').collect();
    let ok = match segments.as_slice() {
        ["", "api", "v1", "attachments", id] => !id.is_empty() && uri.query().is_none(),
        ["", "api", "v1", "turns", id, "files", "content"] => {
            !id.is_empty()
                && uri
                    .query()
                    .is_some_and(|q| q.starts_with("path=") && !q.contains('&'))
        }
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "links are made for /api/v1/attachments/{{id}} and \
             /api/v1/turns/{{id}}/files/content?path=… only, not {address:?}"
        ))
    }
}

#[utoipa::path(
    post,
    path = "/api/v1/links",
    tag = "attachments",
    request_body = LinkRequest,
    responses(
        (status = 200, description = "A signed link per address, in the order asked; each \
            opens its one object without the token, until `expires_at_ms`", body = SignedLinks),
        (status = 400, description = "`bad_request`: an address that is not an attachment \
            or a turn file, or more than 500", body = ErrorBody),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn make_links(
    Api(s): Api,
    ApiJson(req): ApiJson<LinkRequest>,
) -> Result<Json<SignedLinks>, ApiError> {
    let exp = now_secs() + LIFETIME.as_secs();
    let mut links = Vec::with_capacity(req.paths.len());
    let by = s.runtime.identity().map(|who| who.person.clone());
    for path in req.paths {
        linkable(&path).map_err(ApiError::bad_request)?;
        let signed = match &by {
            Some(person) => {
                let sep = if path.contains('?') { '&' } else { '?' };
                format!("{path}{sep}by={}", urlencoding_free(person.as_str()))
            }
            None => path.clone(),
        };
        let url = s
            .links
            .sign(&signed, exp)
            .ok_or_else(|| ApiError::bad_request("cannot sign this address"))?;
        links.push(SignedLink {
            path,
            url,
            expires_at_ms: i64::try_from(exp).unwrap_or(i64::MAX).saturating_mul(1000),
        });
    }
    Ok(Json(SignedLinks { links }))
}

/// Person ids are made of letters, digits, `-` and `_`; anything else would not survive
/// an address unescaped, and is refused by the link check.
fn urlencoding_free(id: &str) -> String {
    id.chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .collect()
}

/// The download routes: the bearer header, or a signed link for this very address (as
/// the person it was made for).
pub(crate) async fn require_header_or_link(
    State((auth, signer)): State<(Auth, Signer)>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let who = match auth::bearer(req.headers()) {
        Some(token) => auth.identify(token, auth::peer(req.extensions())).await?,
        None => match signer.opened_by(req.uri(), now_secs()) {
            None => auth.cookie_identity(req.headers(), req.method()).await?,
            Some(None) => Some(auth.owner()),
            Some(Some(person)) => auth.reader(&person).await?,
        },
    };
    match who {
        Some(who) => auth::admit(&auth, who, req, next).await,
        None => Err(ApiError::unauthorized()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uri(s: &str) -> Uri {
        s.parse().unwrap()
    }

    #[test]
    fn a_link_opens_its_object_until_it_expires() {
        let s = Signer::new("token");
        let link = s.sign("/api/v1/attachments/att_1", 1_000).unwrap();
        assert!(link.starts_with("/api/v1/attachments/att_1?exp=1000&sig="));
        assert!(s.admits(&uri(&link), 1_000));
        assert!(s.admits(&uri(&link), 500));
        assert!(!s.admits(&uri(&link), 1_001), "expired");
        // Far in the future is refused too (no link lives longer than LIFETIME).
        let far = s.sign("/api/v1/attachments/att_1", 1_000_000).unwrap();
        assert!(!s.admits(&uri(&far), 1_000));
    }

    #[test]
    fn a_link_opens_nothing_else() {
        let s = Signer::new("token");
        let link = s
            .sign("/api/v1/turns/t1/files/content?path=a.txt", 1_000)
            .unwrap();
        assert!(link.contains("?path=a.txt&exp=1000&sig="));
        assert!(s.admits(&uri(&link), 900));
        let other = link.replace("a.txt", "b.txt");
        assert!(!s.admits(&uri(&other), 900), "another file");
        let later = link.replace("exp=1000", "exp=1001");
        assert!(!s.admits(&uri(&later), 900), "a changed expiry");
        assert!(
            !Signer::new("other").admits(&uri(&link), 900),
            "another token"
        );
        assert!(!s.admits(&uri("/api/v1/attachments/att_1"), 900));
        assert!(!s.admits(&uri("/api/v1/attachments/att_1?exp=1000&sig=00"), 900));
        assert!(!s.admits(&uri("/api/v1/attachments/att_1xexp=1000&sig=00"), 900));
    }

    #[test]
    fn links_are_made_for_downloads_only() {
        assert!(linkable("/api/v1/attachments/att_1").is_ok());
        assert!(linkable("/api/v1/turns/t1/files/content?path=src%2Fa.rs").is_ok());
        assert!(linkable("/api/v1/conversations").is_err());
        assert!(linkable("/api/v1/attachments/att_1?x=1").is_err());
        assert!(linkable("/api/v1/turns/t1/files/content").is_err());
        assert!(linkable("/api/v1/turns/t1/files/content?path=a&token=x").is_err());
        assert!(linkable("http://evil/api/v1/attachments/att_1").is_err());
        assert!(linkable("/api/v1/attachments/a b").is_err());
    }
}
