//! The attachment rules, pure: limits, names, the type sniffed from the bytes and what
//! counts as a type that lies about itself.

use tether_proto::{AttachmentKind, ErrorCode};

/// Size limits (`[attachments]` in the config). The defaults fit the platforms: a
/// Telegram bot downloads at most 20 MB per file, Feishu takes images up to 10 MB and
/// files up to 30 MB.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttachmentLimits {
    /// Largest single file in bytes.
    pub max_file_bytes: u64,
    /// Largest sum of the files of one message in bytes.
    pub max_message_bytes: u64,
    /// Most files in one upload and one message.
    pub max_files: usize,
}

impl Default for AttachmentLimits {
    fn default() -> Self {
        AttachmentLimits {
            max_file_bytes: 20 * 1024 * 1024,
            max_message_bytes: 50 * 1024 * 1024,
            max_files: 20,
        }
    }
}

/// Longest file name kept, in bytes (the usual file-system limit).
pub const MAX_NAME_BYTES: usize = 255;

/// A size as people read it: `512 bytes`, `20 MB`, `1.5 MB` (binary units, as the
/// limits are configured in `max_file_mb`).
pub fn size_text(bytes: u64) -> String {
    const KB: u64 = 1024;
    const MB: u64 = 1024 * 1024;
    let (unit, name) = match bytes {
        b if b >= MB => (MB, "MB"),
        b if b >= KB => (KB, "KB"),
        _ => return format!("{bytes} bytes"),
    };
    let tenths = (bytes * 10 + unit / 2) / unit;
    if tenths.is_multiple_of(10) {
        format!("{} {name}", tenths / 10)
    } else {
        format!("{}.{} {name}", tenths / 10, tenths % 10)
    }
}

/// Why an attachment is refused.
#[derive(Debug, thiserror::Error)]
pub enum AttachmentError {
    #[error("{name}: {} is over the limit of {} per file", size_text(*size), size_text(*limit))]
    FileTooLarge { name: String, size: u64, limit: u64 },
    #[error("the attachments of one message are {}, over the limit of {}", size_text(*size), size_text(*limit))]
    MessageTooLarge { size: u64, limit: u64 },
    #[error("{count} files in one message, over the limit of {limit}")]
    TooMany { count: usize, limit: usize },
    #[error("{name}: the bytes are {actual}, not the {claimed} its {by} claims")]
    TypeMismatch {
        name: String,
        claimed: String,
        actual: String,
        by: &'static str,
    },
    #[error("attachment name {name:?} is refused: {reason}")]
    BadName { name: String, reason: &'static str },
    #[error("cannot fetch {what}: {reason}")]
    Unavailable { what: String, reason: String },
    #[error("attachment {0} is not in this conversation")]
    NotFound(String),
    #[error("attachment {0} was sent already (upload it again to send it again)")]
    AlreadySent(String),
    #[error("attachments go with a message to the agent, not with a command")]
    WithCommand,
    #[error("cannot store the attachment: {0}")]
    Io(#[from] std::io::Error),
}

impl AttachmentError {
    pub fn code(&self) -> ErrorCode {
        match self {
            AttachmentError::FileTooLarge { .. }
            | AttachmentError::MessageTooLarge { .. }
            | AttachmentError::TooMany { .. } => ErrorCode::AttachmentTooLarge,
            AttachmentError::TypeMismatch { .. } => ErrorCode::AttachmentTypeMismatch,
            AttachmentError::BadName { .. } => ErrorCode::AttachmentBadName,
            AttachmentError::Unavailable { .. } => ErrorCode::AttachmentUnavailable,
            AttachmentError::NotFound(_) => ErrorCode::NotFound,
            AttachmentError::AlreadySent(_) | AttachmentError::WithCommand => ErrorCode::BadRequest,
            AttachmentError::Io(_) => ErrorCode::Internal,
        }
    }
}

/// A name given by a person or a client: refused unless it is a plain file name.
pub fn check_name(name: &str) -> Result<&str, AttachmentError> {
    let bad = |reason| AttachmentError::BadName {
        name: name.chars().take(80).collect(),
        reason,
    };
    if name.trim().is_empty() {
        return Err(bad("it is empty"));
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(bad("it is longer than 255 bytes"));
    }
    if name.chars().any(char::is_control) {
        return Err(bad("it contains control characters"));
    }
    if name.chars().any(is_format) {
        return Err(bad(
            "it contains invisible formatting characters (such as direction overrides)",
        ));
    }
    if name.contains('/') || name.contains('\\') {
        return Err(bad("it contains a path separator"));
    }
    if name.chars().any(is_slash_like) {
        return Err(bad(
            "it contains a character that looks like a path separator",
        ));
    }
    if name == "." || name == ".." {
        return Err(bad("it names a directory"));
    }
    Ok(name)
}

/// Unicode format characters (general category Cf: direction marks, embeddings,
/// overrides and isolates, zero-width characters, invisible operators, tags): invisible,
/// and able to make a name read as another (`photo\u{202e}gnp.exe` shows as
/// `photoexe.png`).
fn is_format(c: char) -> bool {
    matches!(
        c,
        '\u{ad}'
            | '\u{600}'..='\u{605}'
            | '\u{61c}'
            | '\u{6dd}'
            | '\u{70f}'
            | '\u{890}'..='\u{891}'
            | '\u{8e2}'
            | '\u{180e}'
            | '\u{200b}'..='\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206f}'
            | '\u{feff}'
            | '\u{fff9}'..='\u{fffb}'
            | '\u{110bd}'
            | '\u{110cd}'
            | '\u{13430}'..='\u{1343f}'
            | '\u{1bca0}'..='\u{1bca3}'
            | '\u{1d173}'..='\u{1d17a}'
            | '\u{e0001}'
            | '\u{e0020}'..='\u{e007f}'
    )
}

/// Characters drawn like `/` or `\` (a name `docs∕passwd` reads as a path).
fn is_slash_like(c: char) -> bool {
    matches!(
        c,
        '\u{2044}' // fraction slash
            | '\u{2215}' // division slash
            | '\u{2216}' // set minus
            | '\u{29f5}' // reverse solidus operator
            | '\u{29f8}' // big solidus
            | '\u{29f9}' // big reverse solidus
            | '\u{fe68}' // small reverse solidus
            | '\u{ff0f}' // fullwidth solidus
            | '\u{ff3c}' // fullwidth reverse solidus
            | '\u{1735}' // philippine single punctuation
            | '\u{2571}' // box drawings light diagonal
            | '\u{2572}'
            | '\u{3033}'
    )
}

/// A name a platform gave (a Telegram document, a Feishu file): made into a plain file
/// name instead of refused, since the person did not type it. Keeps the last path
/// component, replaces control characters, drops leading dots, cuts at 255 bytes.
pub fn sanitize_name(name: &str, fallback: &str) -> String {
    let last = name.rsplit(['/', '\\']).next().unwrap_or("");
    let cleaned: String = last
        .chars()
        .filter(|c| !is_format(*c))
        .map(|c| {
            if c.is_control() || is_slash_like(c) {
                '_'
            } else {
                c
            }
        })
        .collect();
    let cleaned = cleaned.trim().trim_start_matches('.').trim();
    let mut out = String::new();
    for c in cleaned.chars() {
        if out.len() + c.len_utf8() > MAX_NAME_BYTES {
            break;
        }
        out.push(c);
    }
    if out.is_empty() {
        fallback.to_owned()
    } else {
        out
    }
}

/// What the bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sniffed {
    pub mime: String,
    pub kind: AttachmentKind,
    /// The type was recognised from a signature in the bytes (not a fallback).
    pub recognised: bool,
}

/// Images every supported agent takes as image input.
const AGENT_IMAGES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];

/// The type from the bytes' signature (`infer`); UTF-8 without one is `text/plain`,
/// anything else `application/octet-stream`. Only the images agents take count as
/// images; other image formats travel as files.
pub fn sniff(bytes: &[u8]) -> Sniffed {
    match infer::get(bytes) {
        Some(t) => Sniffed {
            mime: t.mime_type().to_owned(),
            kind: if AGENT_IMAGES.contains(&t.mime_type()) {
                AttachmentKind::Image
            } else {
                AttachmentKind::File
            },
            recognised: true,
        },
        None => Sniffed {
            mime: if std::str::from_utf8(bytes).is_ok() {
                "text/plain".to_owned()
            } else {
                "application/octet-stream".to_owned()
            },
            kind: AttachmentKind::File,
            recognised: false,
        },
    }
}

/// The type a file name's extension claims, for the extensions whose bytes have a
/// signature (a `.txt` claims nothing checkable).
fn claimed_by_extension(name: &str) -> Option<&'static str> {
    let ext = name.rsplit_once('.')?.1.to_ascii_lowercase();
    Some(match ext.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "bmp" => "image/bmp",
        "tif" | "tiff" => "image/tiff",
        "pdf" => "application/pdf",
        "gz" => "application/gzip",
        "zip" => "application/zip",
        _ => return None,
    })
}

fn same_type(a: &str, b: &str) -> bool {
    let norm = |m: &str| match m.trim().to_ascii_lowercase().as_str() {
        "image/jpg" | "image/pjpeg" => "image/jpeg".to_owned(),
        "application/x-gzip" => "application/gzip".to_owned(),
        "application/x-zip-compressed" => "application/zip".to_owned(),
        other => other.to_owned(),
    };
    norm(a) == norm(b)
}

/// Refuses a file whose name or declared content type claims a type its bytes are not:
/// a `.png` or `image/png` that is not a PNG, or image bytes declared as text. A
/// declared `application/octet-stream` (what clients send when they do not know)
/// claims nothing. Zip-based formats (docx, xlsx, ...) may be named `.zip`.
pub fn check_claims(
    name: &str,
    declared: Option<&str>,
    sniffed: &Sniffed,
) -> Result<(), AttachmentError> {
    let lie = |claimed: &str, by| AttachmentError::TypeMismatch {
        name: name.to_owned(),
        claimed: claimed.to_owned(),
        actual: sniffed.mime.clone(),
        by,
    };
    if let Some(claimed) = claimed_by_extension(name) {
        let zip_family = claimed == "application/zip" && sniffed.mime.contains("openxml");
        if !same_type(claimed, &sniffed.mime) && !zip_family {
            return Err(lie(claimed, "name"));
        }
    }
    let declared = declared
        .map(|d| d.split(';').next().unwrap_or("").trim())
        .filter(|d| !d.is_empty() && !same_type(d, "application/octet-stream"));
    if let Some(d) = declared {
        let declared_image = d.to_ascii_lowercase().starts_with("image/");
        let sniffed_image = sniffed.mime.starts_with("image/");
        if (declared_image || sniffed_image) && !same_type(d, &sniffed.mime) {
            return Err(lie(d, "content type"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::attachments::rules::{
        AttachmentKind, check_claims, check_name, sanitize_name, size_text, sniff,
    };

    #[test]
    fn sizes_read_as_people_read_them() {
        assert_eq!(size_text(512), "512 bytes");
        assert_eq!(size_text(2048), "2 KB");
        assert_eq!(size_text(20 * 1024 * 1024), "20 MB");
        assert_eq!(size_text(1024 * 1024 * 3 / 2), "1.5 MB");
    }

    const PNG: &[u8] = &[
        0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 0x0d, b'I', b'H', b'D', b'R',
    ];

    #[test]
    fn names_that_are_paths_or_carry_control_characters_are_refused() {
        for bad in [
            "",
            "  ",
            "../x",
            "a/b",
            "a\\b",
            "..",
            "a\nb",
            "nul\0",
            &"x".repeat(256),
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_name("screenshot 1.png").is_ok());
        assert_eq!(sanitize_name("../../etc/passwd", "file"), "passwd");
        assert_eq!(sanitize_name("..\\..\\boot.ini", "file"), "boot.ini");
        assert_eq!(sanitize_name("a\u{7}b.txt", "file"), "a_b.txt");
        assert_eq!(sanitize_name("...", "file"), "file");
    }

    /// Issue 24 S12: names that read as another name or as a path are refused (typed)
    /// or cleaned (given by a platform).
    #[test]
    fn names_with_direction_overrides_or_look_alike_slashes_are_refused() {
        for bad in [
            "photo\u{202e}gnp.exe",
            "a\u{200b}b.txt",
            "\u{2067}x.txt",
            "x\u{feff}.txt",
            "docs\u{2215}passwd",
            "docs\u{ff0f}passwd",
            "a\u{2044}b",
            "tag\u{e0041}.txt",
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_name("naïve café 日本.txt").is_ok());
        assert_eq!(
            sanitize_name("photo\u{202e}gnp.exe", "file"),
            "photognp.exe"
        );
        assert_eq!(sanitize_name("docs\u{2215}passwd", "file"), "docs_passwd");
        assert_eq!(sanitize_name("\u{200b}\u{200b}", "file"), "file");
    }

    #[test]
    fn a_png_named_or_declared_otherwise_is_a_lie() {
        let s = sniff(PNG);
        assert_eq!(s.mime, "image/png");
        assert_eq!(s.kind, AttachmentKind::Image);
        assert!(check_claims("a.png", Some("image/png"), &s).is_ok());
        assert!(check_claims("a.bin", Some("application/octet-stream"), &s).is_ok());
        assert!(check_claims("a.jpg", None, &s).is_err());
        assert!(check_claims("a", Some("text/plain"), &s).is_err());
        let text = sniff(b"hello");
        assert_eq!(text.mime, "text/plain");
        assert!(check_claims("a.png", None, &text).is_err());
        assert!(check_claims("a.txt", Some("image/png"), &text).is_err());
        assert!(check_claims("notes.md", Some("text/markdown"), &text).is_ok());
    }
}
