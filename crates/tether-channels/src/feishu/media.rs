//! Feishu messages that carry files: `image` (`image_key`), `file` (`file_key`,
//! `file_name`) and rich-text `post`s (their text, and the images among it). The files
//! are fetched as message resources
//! (`GET /open-apis/im/v1/messages/{message_id}/resources/{key}?type=image|file`).

use serde_json::Value;

use super::wire::{Content, Post};
use crate::inbound::{InFile, InKind};
use crate::json::parse;

/// What a non-text message says, or `None` for kinds tether does not take.
pub(crate) fn kind(message_type: &str, message_id: &str, content: &Value) -> Option<InKind> {
    let resource = |key: &str, kind: &str, name: String| InFile {
        name,
        declared: None,
        size: None,
        source: format!("{message_id}/{key}/{kind}"),
    };
    match message_type {
        "image" => {
            let key = parse::<Content>(content)?.image_key?;
            let key = key.as_str();
            Some(InKind::Files {
                caption: String::new(),
                files: vec![resource(key, "image", format!("image-{key}"))],
            })
        }
        "file" => {
            let c = parse::<Content>(content)?;
            let key = c.file_key?;
            let key = key.as_str();
            let name = c.file_name.unwrap_or_else(|| format!("file-{key}"));
            Some(InKind::Files {
                caption: String::new(),
                files: vec![resource(key, "file", name)],
            })
        }
        "post" => {
            let (text, images) = post(content);
            if images.is_empty() {
                return Some(InKind::Text(text));
            }
            let files = images
                .iter()
                .map(|k| resource(k, "image", format!("image-{k}")))
                .collect();
            Some(InKind::Files {
                caption: text,
                files,
            })
        }
        _ => None,
    }
}

/// A post's text (its title, then each paragraph's text runs and links, mentions left
/// out) and its image keys in order. Received posts are `{title, content}`; posts in the
/// send format nest that under a locale (`zh_cn`, `en_us`, …): the first one is read.
fn post(content: &Value) -> (String, Vec<String>) {
    let body = if content.get("content").is_some() {
        content
    } else {
        content
            .as_object()
            .and_then(|m| m.values().find(|v| v.get("content").is_some()))
            .unwrap_or(content)
    };
    let body: Post = parse(body).unwrap_or_default();
    let mut lines = Vec::new();
    if let Some(t) = body.title.as_deref().filter(|t| !t.trim().is_empty()) {
        lines.push(t.trim().to_owned());
    }
    let mut images = Vec::new();
    for paragraph in &body.content {
        let mut line = String::new();
        for el in paragraph {
            match el.tag.as_deref() {
                Some("text") | Some("a") | Some("code_block") | Some("md") => {
                    line.push_str(el.text.as_deref().unwrap_or_default());
                }
                Some("img") => {
                    if let Some(k) = &el.image_key {
                        images.push(k.clone());
                    }
                }
                _ => {}
            }
        }
        let line = line.trim();
        if !line.is_empty() {
            lines.push(line.to_owned());
        }
    }
    (lines.join("\n"), images)
}

/// The resource path of an [`InFile::source`] (`message_id/key/type`); `None` when it
/// is not one of ours (each part is an id: no `/`, `?` or `..`).
pub(crate) fn resource_path(source: &str) -> Option<String> {
    let mut parts = source.split('/');
    let (id, key, kind) = (parts.next()?, parts.next()?, parts.next()?);
    let plain = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    };
    if parts.next().is_some() || !plain(id) || !plain(key) || !matches!(kind, "image" | "file") {
        return None;
    }
    Some(format!(
        "/open-apis/im/v1/messages/{id}/resources/{key}?type={kind}"
    ))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{kind, resource_path};
    use crate::inbound::InKind;

    #[test]
    fn posts_give_their_text_and_images() {
        let content = json!({"title": "Bug", "content": [
            [{"tag": "text", "text": "the page "}, {"tag": "a", "text": "here", "href": "x"}],
            [{"tag": "img", "image_key": "img_1"}],
            [{"tag": "at", "user_id": "ou_bot"}, {"tag": "text", "text": "fails"}],
        ]});
        let Some(InKind::Files { caption, files }) = kind("post", "om_1", &content) else {
            panic!("files expected");
        };
        assert_eq!(caption, "Bug\nthe page here\nfails");
        assert_eq!(files[0].source, "om_1/img_1/image");
        let nested = json!({"zh_cn": {"title": "", "content": [[{"tag": "text", "text": "hi"}]]}});
        assert_eq!(
            kind("post", "om_2", &nested),
            Some(InKind::Text("hi".into()))
        );
        assert_eq!(
            resource_path("om_1/img_1/image").as_deref(),
            Some("/open-apis/im/v1/messages/om_1/resources/img_1?type=image")
        );
        assert_eq!(resource_path("om_1/../x/image"), None);
        assert_eq!(resource_path("om_1/k/other"), None);
    }
}
