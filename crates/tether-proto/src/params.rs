//! Arguments of the delegation tools, as typed structs whose JSON schemas are derived
//! (they are the tools' `inputSchema`), and [`parse_params`], which reads them so that a
//! missing, mistyped or unknown argument is `invalid_params` naming it — never a silent
//! `""`. The people's continue/close routes read their bodies ([`ContinueRequest`],
//! [`CloseRequest`]) the same way; the tools take those bodies plus a `task_id`
//! ([`TaskArgs`]).
//!
//! Unknown arguments: the schemas say `additionalProperties: false`, but the tools ignore
//! arguments they do not know (MCP arguments stay tolerant, as before); the HTTP bodies
//! refuse them (`deny_unknown_fields`, like every request body).

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::TaskId;

/// `get_delegation_status` arguments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct StatusArgs {
    /// task_id values returned by delegate_to_agent.
    #[schemars(length(min = 1))]
    pub task_ids: Vec<TaskId>,
    /// Omit: answer at once. > 0: wait up to this many ms (capped at 60000). 0: wait
    /// without limit.
    #[serde(default)]
    pub wait_ms: Option<u64>,
}

/// The task a tool acts on (`cancel_delegation`'s arguments, and the first part of
/// [`TaskArgs`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct TaskRef {
    /// The task: a task_id returned by delegate_to_agent.
    pub task_id: TaskId,
}

/// A tool's arguments: the task it acts on, and the rest, which is the body of the
/// matching HTTP route (`continue_with_session`: [`ContinueRequest`]; `close_session`:
/// [`CloseRequest`]). Read with [`TaskArgs::parse`]: the body type is parsed on its own,
/// so its errors still name the argument (serde's `flatten` would lose the name), from
/// the arguments its schema names (the body type refuses unknown fields; the tool
/// ignores them).
#[derive(Debug, Clone, PartialEq, Eq, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct TaskArgs<T> {
    /// The task: a task_id returned by delegate_to_agent.
    pub task_id: TaskId,
    #[schemars(flatten)]
    pub rest: T,
}

impl<T: DeserializeOwned + JsonSchema> TaskArgs<T> {
    /// Reads `task_id` and the rest of `args`.
    pub fn parse(args: &Map<String, Value>) -> Result<Self, ParamsError> {
        let task_id = parse_params::<TaskRef>(&Value::Object(args.clone()))?.task_id;
        let schema = schemars::schema_for!(T);
        let known = schema.get("properties").and_then(Value::as_object);
        let rest: Map<String, Value> = args
            .iter()
            .filter(|(k, _)| known.is_some_and(|known| known.contains_key(*k)))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let rest = parse_params(&Value::Object(rest))?;
        Ok(TaskArgs { task_id, rest })
    }
}

/// An argument that is missing, of the wrong type or unknown. The message names it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ParamsError {
    /// The argument (`task_ids[0]` for an element), when known.
    pub argument: Option<String>,
    pub message: String,
}

/// Reads `T` from a JSON value; a failure names the argument at fault.
pub fn parse_params<T: DeserializeOwned>(value: &Value) -> Result<T, ParamsError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        // At the top level serde names the field itself ("missing field `x`", "unknown
        // field `x`, expected ..."); deeper down the path does.
        let argument = if path == "." {
            first_quoted(&inner)
        } else {
            Some(path)
        };
        let message = match &argument {
            Some(arg) if !inner.contains(&format!("`{arg}`")) => {
                format!("argument `{arg}`: {inner}")
            }
            _ => inner,
        };
        ParamsError { argument, message }
    })
}

/// The first `quoted` word of serde's "missing field" / "unknown field" messages.
fn first_quoted(message: &str) -> Option<String> {
    if !(message.starts_with("missing field") || message.starts_with("unknown field")) {
        return None;
    }
    let (_, rest) = message.split_once('`')?;
    let (name, _) = rest.split_once('`')?;
    Some(name.to_owned())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::ContinueRequest;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => Map::new(),
        }
    }

    #[test]
    fn errors_name_the_argument() {
        let e = TaskArgs::<ContinueRequest>::parse(&obj(
            json!({"task_id": "t", "continuation_id": "c"}),
        ))
        .unwrap_err();
        assert_eq!(e.argument.as_deref(), Some("message"), "{e}");
        let e = TaskArgs::<ContinueRequest>::parse(&obj(
            json!({"task_id": "t", "message": 5, "continuation_id": "c"}),
        ))
        .unwrap_err();
        assert_eq!(e.argument.as_deref(), Some("message"), "{e}");
        assert!(e.message.contains("`message`"), "{e}");
        let e = TaskArgs::<ContinueRequest>::parse(&obj(
            json!({"message": "m", "continuation_id": "c"}),
        ))
        .unwrap_err();
        assert_eq!(e.argument.as_deref(), Some("task_id"), "{e}");
        let e = TaskArgs::<ContinueRequest>::parse(&obj(
            json!({"task_id": 7, "message": "m", "continuation_id": "c"}),
        ))
        .unwrap_err();
        assert_eq!(e.argument.as_deref(), Some("task_id"), "{e}");
        let e = parse_params::<StatusArgs>(&json!({"task_ids": ["a", 1]})).unwrap_err();
        assert_eq!(e.argument.as_deref(), Some("task_ids[1]"), "{e}");
        let e = parse_params::<ContinueRequest>(
            &json!({"message": "m", "continuation_id": "c", "x": 1}),
        )
        .unwrap_err();
        assert_eq!(e.argument.as_deref(), Some("x"), "{e}");
        // The tools ignore unknown arguments.
        let ok = TaskArgs::<ContinueRequest>::parse(&obj(
            json!({"task_id": "t", "message": "m", "continuation_id": "c", "x": 1}),
        ))
        .unwrap();
        assert!(parse_params::<StatusArgs>(&json!({"task_ids": ["a"], "wait": 1})).is_ok());
        assert_eq!((ok.task_id.as_str(), ok.rest.message.as_str()), ("t", "m"));
    }
}
