//! Ids the runtime makes.

/// A new random id (32 hex digits), as any of the `tether_proto` id types.
pub(crate) fn new_id<T: From<String>>() -> T {
    T::from(uuid::Uuid::new_v4().simple().to_string())
}
