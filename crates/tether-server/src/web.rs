//! The web chat page: plain HTML/CSS/JS files from `crates/tether-server/assets/`,
//! embedded in the binary at compile time (no JavaScript build step) and served without
//! auth at `/` and `/assets/*`. The page itself asks for the API token and sends it as a
//! bearer header (and as `?token=` on the SSE stream, which `EventSource` needs).

use std::sync::LazyLock;

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use tether_proto::ErrorCode;

use crate::error::ApiError;

/// One embedded file.
struct Asset {
    name: &'static str,
    mime: &'static str,
    body: &'static [u8],
}

macro_rules! asset {
    ($name:literal, $mime:expr) => {
        Asset {
            name: $name,
            mime: $mime,
            body: include_bytes!(concat!("../assets/", $name)),
        }
    };
}

const JS: &str = "text/javascript; charset=utf-8";

/// Every file the page loads; `index.html` is served at `/`.
static ASSETS: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("style.css", "text/css; charset=utf-8"),
    asset!("icon.svg", "image/svg+xml"),
    asset!("js/app.js", JS),
    asset!("js/api.js", JS),
    asset!("js/dom.js", JS),
    asset!("js/markdown.js", JS),
    asset!("js/sidebar.js", JS),
    asset!("js/chat.js", JS),
    asset!("js/composer.js", JS),
    asset!("js/timeline.js", JS),
    asset!("js/activity.js", JS),
    asset!("js/delegate.js", JS),
    asset!("js/tasks.js", JS),
    asset!("js/spans.js", JS),
    asset!("js/people.js", JS),
    asset!("js/usage.js", JS),
    asset!("js/schedules.js", JS),
    asset!("js/worktree.js", JS),
];

/// Strong validators, computed once: FNV-1a of each file's bytes.
static ETAGS: LazyLock<Vec<String>> = LazyLock::new(|| {
    ASSETS
        .iter()
        .map(|a| format!("\"{:016x}\"", fnv1a(a.body)))
        .collect()
});

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Scripts, styles and connections only from this origin; nothing may frame the page.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'self'; \
                   frame-ancestors 'none'";

/// `/` and `/assets/*`, needing no token.
pub(crate) fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(index))
        .route("/assets/{*file}", get(asset_route))
}

/// The web chat page.
#[utoipa::path(
    get,
    path = "/",
    tag = "page",
    responses(
        (status = 200, description = "The page (HTML)", content_type = "text/html"),
        (status = 304, description = "Not modified (`If-None-Match`)"),
    )
)]
pub(crate) async fn index(headers: HeaderMap) -> Response {
    serve("index.html", &headers).unwrap_or_else(|| not_found("/"))
}

/// A file of the page (scripts, style, icon).
#[utoipa::path(
    get,
    path = "/assets/{file}",
    tag = "page",
    params(("file" = String, Path, description = "File path under assets/, e.g. js/app.js")),
    responses(
        (status = 200, description = "The file, with an ETag"),
        (status = 304, description = "Not modified (`If-None-Match`)"),
        (status = 404, description = "No such file", body = tether_proto::ErrorBody),
    )
)]
pub(crate) async fn asset_route(Path(file): Path<String>, headers: HeaderMap) -> Response {
    let found = if file == "index.html" {
        None
    } else {
        serve(&file, &headers)
    };
    found.unwrap_or_else(|| not_found(&format!("/assets/{file}")))
}

fn not_found(path: &str) -> Response {
    ApiError::new(ErrorCode::NotFound, format!("no such route: {path}")).into_response()
}

fn serve(name: &str, headers: &HeaderMap) -> Option<Response> {
    let index = ASSETS.iter().position(|a| a.name == name)?;
    let asset = &ASSETS[index];
    let etag = ETAGS.get(index)?;
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    let mut resp = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, asset.mime)], asset.body).into_response()
    };
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(etag) {
        h.insert(header::ETAG, v);
    }
    // Revalidate every time: the files change with the binary, and a 304 is cheap.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    if name == "index.html" {
        h.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CSP),
        );
        h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    }
    Some(resp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    async fn get(uri: &str, etag: Option<&str>) -> Response {
        let mut req = Request::builder().uri(uri);
        if let Some(t) = etag {
            req = req.header(header::IF_NONE_MATCH, t);
        }
        routes::<()>()
            .oneshot(req.body(Body::empty()).unwrap())
            .await
            .unwrap()
    }

    #[test]
    fn every_asset_is_embedded_and_typed() {
        for a in ASSETS {
            assert!(!a.body.is_empty(), "{} is empty", a.name);
            assert!(a.mime.contains('/'), "{}", a.name);
        }
    }

    #[test]
    fn every_script_file_is_embedded() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/assets/js");
        for entry in std::fs::read_dir(dir).unwrap() {
            let name = format!("js/{}", entry.unwrap().file_name().to_string_lossy());
            assert!(
                ASSETS.iter().any(|a| a.name == name),
                "{name} is not in ASSETS"
            );
        }
    }

    #[tokio::test]
    async fn index_is_html_with_csp() {
        let resp = get("/", None).await;
        assert_eq!(resp.status(), StatusCode::OK);
        let h = resp.headers();
        assert!(
            h[header::CONTENT_TYPE]
                .to_str()
                .unwrap()
                .starts_with("text/html")
        );
        assert!(
            h[header::CONTENT_SECURITY_POLICY]
                .to_str()
                .unwrap()
                .contains("script-src 'self'")
        );
    }

    #[tokio::test]
    async fn assets_are_served_with_etag_and_revalidated() {
        let resp = get("/assets/js/app.js", None).await;
        assert_eq!(resp.status(), StatusCode::OK);
        assert!(
            resp.headers()[header::CONTENT_TYPE]
                .to_str()
                .unwrap()
                .starts_with("text/javascript")
        );
        let etag = resp.headers()[header::ETAG].to_str().unwrap().to_owned();
        let again = get("/assets/js/app.js", Some(&etag)).await;
        assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
    }

    #[tokio::test]
    async fn unknown_assets_are_404() {
        assert_eq!(
            get("/assets/nope.js", None).await.status(),
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            get("/assets/../Cargo.toml", None).await.status(),
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            get("/assets/index.html", None).await.status(),
            StatusCode::NOT_FOUND
        );
    }
}
