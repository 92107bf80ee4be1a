//! The few Bot API types and calls tether uses, over plain reqwest. Types tolerate
//! unknown fields; errors are classified for the outbox (429 with `retry_after` and 5xx
//! are retried, other 4xx are permanent). The bot token is part of every URL, so
//! transport errors are logged without their URL.

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::channel::SendError;

#[derive(Debug, Clone, Deserialize)]
pub struct ApiResponse<T> {
    pub ok: bool,
    pub result: Option<T>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub error_code: Option<i64>,
    #[serde(default)]
    pub parameters: Option<ResponseParameters>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct ResponseParameters {
    #[serde(default)]
    pub retry_after: Option<u64>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Update {
    pub update_id: i64,
    #[serde(default)]
    pub message: Option<Message>,
    #[serde(default)]
    pub callback_query: Option<CallbackQuery>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Message {
    pub message_id: i64,
    #[serde(default)]
    pub from: Option<User>,
    pub chat: Chat,
    #[serde(default)]
    pub message_thread_id: Option<i64>,
    #[serde(default)]
    pub is_topic_message: Option<bool>,
    #[serde(default)]
    pub text: Option<String>,
    /// The text of a photo or document message.
    #[serde(default)]
    pub caption: Option<String>,
    /// A photo in several sizes, smallest first.
    #[serde(default)]
    pub photo: Option<Vec<PhotoSize>>,
    #[serde(default)]
    pub document: Option<Document>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct PhotoSize {
    pub file_id: String,
    #[serde(default)]
    pub file_size: Option<u64>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Document {
    pub file_id: String,
    #[serde(default)]
    pub file_name: Option<String>,
    #[serde(default)]
    pub mime_type: Option<String>,
    #[serde(default)]
    pub file_size: Option<u64>,
}

/// `getFile`'s answer: where the file can be downloaded.
#[derive(Debug, Clone, Deserialize)]
pub struct File {
    #[serde(default)]
    pub file_size: Option<u64>,
    #[serde(default)]
    pub file_path: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct User {
    pub id: i64,
    #[serde(default)]
    pub is_bot: bool,
    #[serde(default)]
    pub first_name: String,
    #[serde(default)]
    pub last_name: Option<String>,
    #[serde(default)]
    pub username: Option<String>,
}

impl User {
    /// `@username`, else the first (and last) name, else the id.
    pub fn display(&self) -> String {
        if let Some(u) = self.username.as_deref().filter(|u| !u.is_empty()) {
            return format!("@{u}");
        }
        let name = match &self.last_name {
            Some(last) => format!("{} {last}", self.first_name),
            None => self.first_name.clone(),
        };
        if name.trim().is_empty() {
            self.id.to_string()
        } else {
            name.trim().to_string()
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct Chat {
    pub id: i64,
    #[serde(rename = "type", default)]
    pub kind: String,
    #[serde(default)]
    pub title: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct CallbackQuery {
    pub id: String,
    pub from: User,
    #[serde(default)]
    pub message: Option<Message>,
    #[serde(default)]
    pub data: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct BotCommand {
    pub command: &'static str,
    pub description: &'static str,
}

/// A Bot API client for one bot.
#[derive(Clone)]
pub struct Bot {
    http: reqwest::Client,
    /// `<base_url>/bot<token>`.
    base: String,
    /// `<base_url>/file/bot<token>`: where `getFile`'s paths are downloaded.
    file_base: String,
}

impl std::fmt::Debug for Bot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bot").finish_non_exhaustive()
    }
}

impl Bot {
    pub fn new(base_url: &str, token: &str) -> Result<Bot, SendError> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| SendError::Permanent(format!("HTTP client: {}", e.without_url())))?;
        Ok(Bot {
            http,
            base: format!("{}/bot{token}", base_url.trim_end_matches('/')),
            file_base: format!("{}/file/bot{token}", base_url.trim_end_matches('/')),
        })
    }

    /// Downloads a file by its `file_id` (`getFile`, then the file path), at most
    /// `limit` bytes: a bot may download files up to 20 MB.
    pub async fn download(
        &self,
        file_id: &str,
        limit: u64,
        timeout: Duration,
    ) -> Result<Vec<u8>, crate::channel::FetchError> {
        use crate::channel::FetchError;
        let file: File = self
            .call(
                "getFile",
                &serde_json::json!({ "file_id": file_id }),
                timeout,
            )
            .await
            .map_err(|e| FetchError::Unavailable(e.to_string()))?;
        if let Some(size) = file.file_size.filter(|s| *s > limit) {
            return Err(FetchError::TooLarge { size, limit });
        }
        let Some(path) = file.file_path.filter(|p| !p.is_empty()) else {
            return Err(FetchError::Unavailable("getFile: no file_path".to_owned()));
        };
        let unavailable =
            |e: reqwest::Error| FetchError::Unavailable(crate::net::describe("download", &e));
        let mut resp = self
            .http
            .get(format!("{}/{path}", self.file_base))
            .timeout(timeout)
            .send()
            .await
            .map_err(unavailable)?;
        if !resp.status().is_success() {
            return Err(FetchError::Unavailable(format!(
                "download: HTTP {}",
                resp.status().as_u16()
            )));
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(unavailable)? {
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

    /// Calls `method` with a JSON body; `timeout` bounds the whole request.
    pub async fn call<T: DeserializeOwned>(
        &self,
        method: &str,
        body: &Value,
        timeout: Duration,
    ) -> Result<T, SendError> {
        let resp = self
            .http
            .post(format!("{}/{method}", self.base))
            .json(body)
            .timeout(timeout)
            .send()
            .await
            .map_err(|e| crate::net::transport(method, &e))?;
        reply(method, resp).await
    }

    /// Calls an upload method (`sendDocument`, `sendPhoto`) as `multipart/form-data`: the
    /// text `fields`, then the file in `file_field`.
    pub async fn upload<T: DeserializeOwned>(
        &self,
        method: &str,
        fields: &[(&str, String)],
        file: (&str, &str, Vec<u8>),
        timeout: Duration,
    ) -> Result<T, SendError> {
        let (file_field, file_name, bytes) = file;
        let (content_type, body) = crate::multipart::form(fields, file_field, file_name, &bytes);
        let resp = self
            .http
            .post(format!("{}/{method}", self.base))
            .header("content-type", content_type)
            .body(body)
            .timeout(timeout)
            .send()
            .await
            .map_err(|e| crate::net::transport(method, &e))?;
        reply(method, resp).await
    }
}

/// A Bot API reply: its `result`, or the error classified for the outbox.
async fn reply<T: DeserializeOwned>(method: &str, resp: reqwest::Response) -> Result<T, SendError> {
    let status = resp.status().as_u16();
    let text = resp
        .text()
        .await
        .map_err(|e| crate::net::transport(method, &e))?;
    let parsed: Result<ApiResponse<T>, _> = serde_json::from_str(&text);
    match parsed {
        Ok(r) if r.ok => r
            .result
            .ok_or_else(|| SendError::Permanent(format!("{method}: no result"))),
        Ok(r) => Err(classify(
            method,
            r.error_code.map_or(status, |c| c as u16),
            r.description.unwrap_or_default(),
            r.parameters.and_then(|p| p.retry_after),
        )),
        Err(_) => Err(classify(
            method,
            status,
            format!("unreadable reply (HTTP {status})"),
            None,
        )),
    }
}

/// 429 and 5xx (and anything unexpected below 400) are worth retrying; other 4xx not.
pub fn classify(
    method: &str,
    code: u16,
    description: String,
    retry_after: Option<u64>,
) -> SendError {
    let reason = format!("{method}: {code} {description}");
    match code {
        429 => SendError::Retry {
            after: Some(Duration::from_secs(retry_after.unwrap_or(1))),
            reason,
        },
        400..=499 => SendError::Permanent(reason),
        _ => SendError::Retry {
            after: None,
            reason,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn updates_tolerate_unknown_fields() {
        let u: Update = serde_json::from_str(
            r#"{"update_id":5,"new_field":1,"message":{"message_id":9,"date":0,
            "chat":{"id":-100,"type":"supergroup","is_forum":true},"message_thread_id":3,
            "is_topic_message":true,"from":{"id":7,"is_bot":false,"first_name":"Ann"},
            "text":"/status","entities":[]}}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let m = u.message.unwrap_or_else(|| panic!("message"));
        assert_eq!((m.chat.id, m.message_thread_id), (-100, Some(3)));
        assert_eq!(m.from.map(|f| f.display()).as_deref(), Some("Ann"));
    }

    #[test]
    fn errors_are_classified() {
        assert_eq!(
            classify("sendMessage", 429, "Too Many Requests".into(), Some(3)),
            SendError::Retry {
                after: Some(Duration::from_secs(3)),
                reason: "sendMessage: 429 Too Many Requests".into()
            }
        );
        assert!(matches!(
            classify("m", 500, String::new(), None),
            SendError::Retry { after: None, .. }
        ));
        assert!(matches!(
            classify("m", 403, String::new(), None),
            SendError::Permanent(_)
        ));
    }
}
