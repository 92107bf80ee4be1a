//! `multipart/form-data` bodies for the platforms' upload calls (Telegram `sendDocument`,
//! Feishu file and image uploads), written out here: a few text fields and one file.

use sha2::{Digest, Sha256};

/// (content type, body): the text `fields`, then `bytes` as the file field `field` named
/// `file_name`. The boundary comes from the bytes' hash: it cannot occur in the file (it
/// would have to contain its own hash), and a retry sends the same body.
pub(crate) fn form(
    fields: &[(&str, String)],
    field: &str,
    file_name: &str,
    bytes: &[u8],
) -> (String, Vec<u8>) {
    let boundary = format!(
        "tether-{}",
        crate::hex::encode(&Sha256::digest(bytes)[..16])
    );
    let mut body = Vec::new();
    for (name, value) in fields {
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
            )
            .as_bytes(),
        );
    }
    // Attachment names are checked already; quotes and control characters are replaced
    // anyway so the header cannot be broken.
    let safe: String = file_name
        .chars()
        .map(|c| if c == '"' || c.is_control() { '_' } else { c })
        .collect();
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"{field}\"; \
             filename=\"{safe}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(bytes);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}
