//! Attachments: multipart upload into a conversation (the ids then go with
//! `POST …/messages`), and download of a stored attachment's bytes.

use crate::auth::Api;
use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::extract::multipart::{Multipart, MultipartError, MultipartRejection};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tether_proto::{
    AttachmentId, ConversationId, ErrorBody, ErrorCode, TurnFiles, TurnId, Uploaded,
};
use tether_runtime::{AttachmentName, NewAttachment};

use crate::error::ApiError;
use crate::extract::ApiPath;

fn multipart_error(e: &MultipartError) -> ApiError {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::new(
            ErrorCode::AttachmentTooLarge,
            format!("the upload is larger than allowed: {}", e.body_text()),
        )
    } else {
        ApiError::bad_request(format!("bad multipart body: {}", e.body_text()))
    }
}

#[utoipa::path(
    post,
    path = "/api/v1/conversations/{id}/attachments",
    tag = "attachments",
    params(("id" = String, Path, description = "Conversation id")),
    request_body(
        content_type = "multipart/form-data",
        description = "One part per file, each with its file name (`filename=`); a part's \
            content type, if given, must match the bytes. Send the returned ids with the \
            next message (`attachments` of `POST …/messages`)."
    ),
    responses(
        (status = 201, description = "Stored, in the order of the parts", body = Uploaded),
        (status = 400, description = "`attachment_bad_name` (a path, control characters, \
            empty) or a bad multipart body", body = ErrorBody),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
        (status = 404, description = "No such conversation", body = ErrorBody),
        (status = 409, description = "The conversation is archived", body = ErrorBody),
        (status = 408, description = "The upload took longer than `[server] \
            upload_deadline_secs`", body = ErrorBody),
        (status = 413, description = "`attachment_too_large`: over the per-file or \
            per-message limit, or more files than `[attachments] max_files`", body = ErrorBody),
        (status = 503, description = "`server_busy`: more uploads at once than \
            `[server] max_uploads`", body = ErrorBody),
        (status = 415, description = "`attachment_type_mismatch`: the name or content type \
            claims another type than the bytes are", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn upload(
    Api(s): Api,
    ApiPath(id): ApiPath<ConversationId>,
    multipart: Result<Multipart, MultipartRejection>,
) -> Result<(StatusCode, Json<Uploaded>), ApiError> {
    let mut multipart =
        multipart.map_err(|e| ApiError::bad_request(format!("expected a multipart body: {e}")))?;
    let limits = s.runtime.attachment_limits();
    let mut files = Vec::new();
    let mut total: u64 = 0;
    while let Some(mut field) = multipart
        .next_field()
        .await
        .map_err(|e| multipart_error(&e))?
    {
        if files.len() >= limits.max_files {
            return Err(ApiError::new(
                ErrorCode::AttachmentTooLarge,
                format!(
                    "more than {} files in one upload (the limit per message)",
                    limits.max_files
                ),
            ));
        }
        let Some(name) = field.file_name().map(str::to_owned) else {
            return Err(ApiError::new(
                ErrorCode::AttachmentBadName,
                "every part needs a file name (filename=)",
            ));
        };
        let declared = field.content_type().map(str::to_owned);
        let mut bytes = Vec::new();
        // Read chunk by chunk so an oversized file is refused without being kept.
        while let Some(chunk) = field.chunk().await.map_err(|e| multipart_error(&e))? {
            bytes.extend_from_slice(&chunk);
            let size = bytes.len() as u64;
            if size > limits.max_file_bytes {
                return Err(ApiError::new(
                    ErrorCode::AttachmentTooLarge,
                    format!(
                        "{name}: over the limit of {} bytes per file",
                        limits.max_file_bytes
                    ),
                ));
            }
            if total + size > limits.max_message_bytes {
                return Err(ApiError::new(
                    ErrorCode::AttachmentTooLarge,
                    format!(
                        "the files are together over the limit of {} bytes per message",
                        limits.max_message_bytes
                    ),
                ));
            }
        }
        total += bytes.len() as u64;
        files.push((name, declared, bytes));
    }
    if files.is_empty() {
        return Err(ApiError::bad_request("no file in the upload"));
    }
    let new: Vec<NewAttachment<'_>> = files
        .iter()
        .map(|(name, declared, bytes)| NewAttachment {
            name: AttachmentName::Given(name),
            declared: declared.as_deref(),
            bytes,
        })
        .collect();
    let attachments = s.runtime.add_attachments(&id, &new).await?;
    Ok((StatusCode::CREATED, Json(Uploaded { attachments })))
}

/// Admits an upload while fewer than the semaphore's permits run; else 503 `server_busy`.
pub(crate) async fn one_of_few(
    State(slots): State<std::sync::Arc<tokio::sync::Semaphore>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Result<Response, ApiError> {
    let Ok(_permit) = slots.try_acquire() else {
        return Err(ApiError::new(
            ErrorCode::ServerBusy,
            "too many uploads at once; try again in a moment",
        ));
    };
    Ok(next.run(req).await)
}

#[utoipa::path(
    get,
    path = "/api/v1/attachments/{id}",
    tag = "attachments",
    params(("id" = String, Path, description = "Attachment id")),
    responses(
        (status = 200, description = "The bytes, with the sniffed type; images inline, \
            other files as a download", content_type = "application/octet-stream"),
        (status = 401, description = "Missing or wrong token (header or `?token=`)", body = ErrorBody),
        (status = 404, description = "No such attachment", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn download(
    Api(s): Api,
    ApiPath(id): ApiPath<AttachmentId>,
) -> Result<Response, ApiError> {
    let (a, bytes) = s.runtime.attachment(&id).await?;
    let mut resp = Body::from(bytes).into_response();
    let h = resp.headers_mut();
    let mime = HeaderValue::from_str(&a.mime)
        .unwrap_or_else(|_| HeaderValue::from_static("application/octet-stream"));
    h.insert(header::CONTENT_TYPE, mime);
    // The type is the sniffed one; a browser must not guess another (HTML in a "text").
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'none'; sandbox"),
    );
    let disposition = match a.kind {
        tether_proto::AttachmentKind::Image => "inline",
        tether_proto::AttachmentKind::File => "attachment",
    };
    set_disposition(h, disposition, &a.name);
    Ok(resp)
}

/// `Content-Disposition` with the file's name made plain ASCII (anything else, quotes and
/// backslashes become `_`), so no name can break out of the header.
fn set_disposition(h: &mut axum::http::HeaderMap, disposition: &str, name: &str) {
    let ascii: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() && c != '"' && c != '\\' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if let Ok(v) = HeaderValue::from_str(&format!("{disposition}; filename=\"{ascii}\"")) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
}

#[utoipa::path(
    get,
    path = "/api/v1/turns/{id}/files",
    tag = "attachments",
    params(("id" = String, Path, description = "Turn id")),
    responses(
        (status = 200, description = "The files the agent created or changed in the turn \
            (from its file-change and edit tool events), as they are now", body = TurnFiles),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
        (status = 404, description = "No such turn", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn turn_files(
    Api(s): Api,
    ApiPath(id): ApiPath<TurnId>,
) -> Result<Json<TurnFiles>, ApiError> {
    Ok(Json(s.runtime.turn_files(&id).await?))
}

#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct FileQuery {
    /// The file, relative to the turn's working directory (as listed).
    path: String,
}

#[utoipa::path(
    get,
    path = "/api/v1/turns/{id}/files/content",
    tag = "attachments",
    params(("id" = String, Path, description = "Turn id"), FileQuery),
    responses(
        (status = 200, description = "The file's bytes (a download)",
            content_type = "application/octet-stream"),
        (status = 401, description = "Missing or wrong token (header or `?token=`)", body = ErrorBody),
        (status = 400, description = "`bad_request`: the path is empty or contains `..`", body = ErrorBody),
        (status = 403, description = "`file_refused`: the file is outside the working \
            directory (a symlink or hard link out, absolute elsewhere), in tether's data \
            directory, config or the agents' credentials, not a regular file, or the working \
            directory was swapped for a link", body = ErrorBody),
        (status = 404, description = "No such turn, or no such file in the working directory", body = ErrorBody),
        (status = 413, description = "`attachment_too_large`: over the per-file limit", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn turn_file(
    Api(s): Api,
    ApiPath(id): ApiPath<TurnId>,
    crate::extract::ApiQuery(q): crate::extract::ApiQuery<FileQuery>,
) -> Result<Response, ApiError> {
    let (name, bytes) = s.runtime.working_file(&id, &q.path).await?;
    let mut resp = Body::from(bytes).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    set_disposition(h, "attachment", &name);
    Ok(resp)
}
