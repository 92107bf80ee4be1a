//! How a platform call that did not get an answer is described (issue 24, first use 8):
//! the host it went to and the cause (`connection refused`, `dns error`, a time-out),
//! never the URL (Telegram's carries the bot token); and what `tether doctor` advises for
//! each kind of failure (a wrong address is not fixed by retrying later).

use crate::channel::SendError;

/// `what: cannot connect to host:port: tcp connect error: Connection refused (os error
/// 111)`.
pub(crate) fn describe(what: &str, e: &reqwest::Error) -> String {
    let host = e
        .url()
        .and_then(|u| {
            let h = u.host_str()?;
            Some(match u.port() {
                Some(p) => format!("{h}:{p}"),
                None => h.to_owned(),
            })
        })
        .map_or_else(String::new, |h| format!(" {h}"));
    let kind = if e.is_timeout() {
        "no answer in time from"
    } else if e.is_connect() {
        "cannot connect to"
    } else if e.is_decode() || e.is_body() {
        "unreadable answer from"
    } else {
        "request failed to"
    };
    let mut causes: Vec<String> = Vec::new();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let text = s.to_string();
        if !causes.iter().any(|c| c.contains(&text)) {
            causes.push(text);
        }
        source = s.source();
    }
    let causes = if causes.is_empty() {
        String::new()
    } else {
        format!(": {}", causes.join(": "))
    };
    format!("{what}: {kind}{host}{causes}")
}

/// A call that got no answer: worth retrying (the platform or the network may be back).
pub(crate) fn transport(what: &str, e: &reqwest::Error) -> SendError {
    SendError::Retry {
        after: None,
        reason: describe(what, e),
    }
}

/// What `tether doctor` says of a failed credential check: no answer points at the
/// address and the network, a refusal at the credential (`fix`).
pub(crate) fn check_failed(e: SendError, fix: &str) -> String {
    match e {
        SendError::Retry { reason, .. } => {
            format!("{reason} (is `base_url` right, and the network up?)")
        }
        SendError::Permanent(reason) => format!("{reason} ({fix})"),
    }
}
