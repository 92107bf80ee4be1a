//! Channel errors and their stable wire codes.

use tether_proto::ErrorCode;

#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    #[error("storage error: {0}")]
    Store(#[from] tether_store::StoreError),
    #[error(transparent)]
    Runtime(#[from] tether_runtime::RuntimeError),
    #[error("JSON error: {0}")]
    Json(#[from] serde_json::Error),
    #[error("{0} not found")]
    NotFound(String),
    #[error("{0}")]
    BadRequest(String),
    #[error("cannot reach the platform: {0}")]
    Platform(String),
}

impl ChannelError {
    pub fn code(&self) -> ErrorCode {
        match self {
            ChannelError::Store(e) if e.is_unavailable() => ErrorCode::StoreUnavailable,
            ChannelError::Store(tether_store::StoreError::Duplicate { .. }) => ErrorCode::Conflict,
            ChannelError::Store(_) | ChannelError::Json(_) | ChannelError::Platform(_) => {
                ErrorCode::Internal
            }
            ChannelError::Runtime(e) => e.code(),
            ChannelError::NotFound(_) => ErrorCode::NotFound,
            ChannelError::BadRequest(_) => ErrorCode::BadRequest,
        }
    }
}
