//! Reading a platform's payload into its wire type (`slack/wire.rs`, `discord/wire.rs`,
//! `feishu/wire.rs`): the wire types default every field and ignore unknown ones, so a
//! payload parses unless it does not have the type's shape at all.

use serde::de::DeserializeOwned;
use serde_json::Value;

/// `v` as a `T`, without copying it; `None` when it does not have `T`'s shape.
pub(crate) fn parse<T: DeserializeOwned>(v: &Value) -> Option<T> {
    T::deserialize(v).ok()
}

/// For a wire type's nested objects and lists: what does not have the field's shape
/// (`null`, a string where an object belongs) reads as the default, as a missing field
/// does, instead of failing the whole payload.
pub(crate) fn lenient<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: DeserializeOwned + Default,
{
    let v = <Value as serde::Deserialize>::deserialize(d)?;
    Ok(T::deserialize(&v).unwrap_or_default())
}
