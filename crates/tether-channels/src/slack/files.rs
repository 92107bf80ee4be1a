//! Slack files, both ways. In: a message's `files` (`url_private_download`) are
//! downloaded with the bot token, but only from Slack's file host (or the configured API
//! origin), so an event cannot send the token anywhere else; at most `limit` bytes are
//! read, and Slack's HTML sign-in page (a token without `files:read`) is not a file.
//! Out (`/file`): `files.getUploadURLExternal`, the bytes POSTed to the upload URL, then
//! `files.completeUploadExternal` shares the file into the chat (the thread too).

use std::time::Duration;

use serde_json::json;

use super::api::Client;
use super::wire::File;
use crate::channel::{Address, FetchError, SendError};
use crate::inbound::InFile;

/// Where Slack serves private files.
const FILES_HOST: &str = "https://files.slack.com/";
/// Downloads and uploads take longer than one API call.
const TRANSFER_TIMEOUT: Duration = Duration::from_secs(120);

/// `scheme://host[:port]` of a URL.
fn origin(url: &str) -> Option<&str> {
    let after = url.find("://")? + 3;
    let end = url[after..].find('/').map_or(url.len(), |i| after + i);
    Some(&url[..end])
}

/// Whether a file URL from an event may be fetched with the bot token.
pub fn allowed(url: &str, api_base: &str) -> bool {
    if url.starts_with(FILES_HOST) {
        return true;
    }
    match (origin(url), origin(api_base)) {
        (Some(a), Some(b)) => a == b && url.len() > a.len() && url.as_bytes()[a.len()] == b'/',
        _ => false,
    }
}

/// The files of a message event (`files[]`), not fetched yet.
pub fn in_files(files: &[File]) -> Vec<InFile> {
    files
        .iter()
        .filter_map(|f| {
            let url = f
                .url_private_download
                .as_deref()
                .or(f.url_private.as_deref())?;
            Some(InFile {
                name: f.name.as_deref().unwrap_or("file").to_string(),
                declared: f.mimetype.clone(),
                size: f.size,
                source: url.to_string(),
            })
        })
        .collect()
}

impl Client {
    /// Downloads a private file (at most `limit` bytes).
    pub async fn download(&self, file: &InFile, limit: u64) -> Result<Vec<u8>, FetchError> {
        let url = &file.source;
        if !allowed(url, self.base()) {
            return Err(FetchError::Unavailable(
                "not a Slack file URL (refused)".to_string(),
            ));
        }
        let mut resp = self
            .http()
            .get(url)
            .bearer_auth(self.bot_token())
            .timeout(TRANSFER_TIMEOUT)
            .send()
            .await
            .map_err(|e| FetchError::Unavailable(e.to_string()))?;
        let status = resp.status().as_u16();
        let html = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|c| c.starts_with("text/html"));
        if status != 200 || html {
            return Err(FetchError::Unavailable(format!(
                "HTTP {status}{}",
                if html {
                    " (a sign-in page: does the bot have files:read?)"
                } else {
                    ""
                }
            )));
        }
        if let Some(size) = resp.content_length().filter(|s| *s > limit) {
            return Err(FetchError::TooLarge { size, limit });
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = resp
            .chunk()
            .await
            .map_err(|e| FetchError::Unavailable(e.to_string()))?
        {
            bytes.extend_from_slice(&chunk);
            if bytes.len() as u64 > limit {
                return Err(FetchError::TooLarge {
                    size: bytes.len() as u64,
                    limit,
                });
            }
        }
        Ok(bytes)
    }

    /// Uploads `bytes` as `name` and shares it into `to` with `comment`; returns the
    /// file id.
    pub async fn upload(
        &self,
        to: &Address,
        name: &str,
        comment: &str,
        bytes: Vec<u8>,
    ) -> Result<String, SendError> {
        let length = bytes.len().to_string();
        let ticket = self
            .call_form(
                "files.getUploadURLExternal",
                &[("filename", name), ("length", &length)],
            )
            .await?;
        let (Some(upload_url), Some(file_id)) = (ticket.upload_url, ticket.file_id) else {
            return Err(SendError::Permanent(
                "files.getUploadURLExternal: no upload_url or file_id".to_string(),
            ));
        };
        let resp = self
            .http()
            .post(&upload_url)
            .timeout(TRANSFER_TIMEOUT)
            .body(bytes)
            .send()
            .await
            .map_err(|e| SendError::Retry {
                after: None,
                reason: format!("file upload: {e}"),
            })?;
        let status = resp.status().as_u16();
        if status != 200 {
            return Err(super::api::classify(
                "file upload",
                status,
                "upload refused",
                None,
            ));
        }
        let mut body = json!({
            "files": [{"id": file_id, "title": name}],
            "channel_id": to.chat_id,
        });
        if !comment.trim().is_empty() {
            body["initial_comment"] = json!(comment);
        }
        if let Some(t) = &to.thread_id {
            body["thread_ts"] = json!(t);
        }
        self.call("files.completeUploadExternal", &body).await?;
        Ok(file_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_slack_file_urls_get_the_token() {
        let api = "https://slack.com/api";
        assert!(allowed(
            "https://files.slack.com/files-pri/T1-F1/download/a.png",
            api
        ));
        assert!(!allowed("https://files.slack.com.evil.org/x", api));
        assert!(!allowed("https://evil.org/files.slack.com/", api));
        assert!(allowed("https://slack.com/files/x", api));
        assert!(!allowed("https://slack.com.evil.org/files/x", api));
        assert!(allowed(
            "http://127.0.0.1:9/files/F1",
            "http://127.0.0.1:9/api"
        ));
        assert!(!allowed(
            "http://127.0.0.1:99/files/F1",
            "http://127.0.0.1:9/api"
        ));
    }
}
