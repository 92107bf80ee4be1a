//! Ids the runtime makes.

/// A new random id (32 hex digits).
pub(crate) fn new_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}
