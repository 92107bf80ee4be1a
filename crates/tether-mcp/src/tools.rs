//! The five delegation tools: their JSON schemas with descriptions that teach a model
//! when to use them, argument parsing, and the calls into the runtime. Results are JSON
//! text (and structured content); failures carry a stable `error_code`.

use std::sync::Arc;

use rmcp::model::{CallToolResult, JsonObject, Tool};
use serde_json::{Value, json};
use tether_proto::ErrorCode;
use tether_runtime::{Caller, MAX_WAIT_MS, MAX_WAITS_PER_CALLER, Runtime, RuntimeError};

pub const DELEGATE: &str = "delegate_to_agent";
pub const STATUS: &str = "get_delegation_status";
pub const CANCEL: &str = "cancel_delegation";
pub const CONTINUE: &str = "continue_with_session";
pub const CLOSE: &str = "close_session";

/// What the server tells a client about itself at `initialize`.
pub const INSTRUCTIONS: &str = "tether delegation: hand sub-tasks to other coding agents that \
run in their own sessions, which people can watch, answer and continue. Delegate with \
delegate_to_agent (returns a task_id at once), collect results with get_delegation_status \
(wait_ms to wait), send follow-ups with continue_with_session (the child keeps its context), \
and release finished work with close_session.";

fn schema(v: Value) -> Arc<JsonObject> {
    match v {
        Value::Object(m) => Arc::new(m),
        _ => Arc::new(JsonObject::new()),
    }
}

fn continuation_id_schema() -> Value {
    json!({
        "type": "string",
        "description": "Your idempotency key for this request, e.g. a fresh UUID. Reuse it \
            only to retry exactly the same request (same task and message): the retry returns \
            the first result and nothing is sent twice. Reusing it with another task or \
            message fails with continuation_conflict."
    })
}

/// The tool list; `agents` are the configured agent names.
pub fn tools(agents: &[String]) -> Vec<Tool> {
    let agent_list = agents.join(", ");
    vec![
        Tool::new(
            DELEGATE,
            format!(
                "Hand a self-contained sub-task to another coding agent. The child runs in its \
                 own session — a sub-conversation the person can watch, answer and continue — \
                 while you keep working: this returns at once with a task_id and \
                 status \"running\". Collect the result later with get_delegation_status \
                 (pass wait_ms to wait for it). Prefer this over a built-in Task/sub-agent \
                 tool when the person wants a sub-agent they can interact with, keep on \
                 standby or check on later, or when the work suits another agent. To follow \
                 up on a task you already delegated, call continue_with_session with its \
                 task_id instead of delegating again: the child remembers its earlier turns. \
                 The child sees nothing of your conversation: put everything it needs in \
                 `task`. Agents: {agent_list}. Errors: invalid_agent_type, invalid_task, \
                 invalid_working_dir, depth_limit, concurrency_limit, rebuilding."
            ),
            schema(json!({
                "type": "object",
                "properties": {
                    "agent_type": {
                        "type": "string",
                        "enum": agents,
                        "description": format!("Which agent does the work: one of {agent_list}.")
                    },
                    "task": {
                        "type": "string",
                        "description": "The complete instructions for the child: goal, \
                            context, files, constraints and what to report back."
                    },
                    "working_dir": {
                        "type": "string",
                        "description": "Absolute directory the child works in; must lie under \
                            tether's workspace roots. Default: your working directory."
                    }
                },
                "required": ["agent_type", "task"],
                "additionalProperties": false
            })),
        ),
        Tool::new(
            STATUS,
            format!(
                "Check delegated tasks. Returns {{tasks:[...]}} in the order asked, each with \
                 task_id, status (running | completed | failed | canceled | unknown), \
                 turn_version, the child's reply `text` when completed, error_code and message \
                 otherwise (subagent_error, child_refusal, child_max_tokens, \
                 child_max_turn_requests, child_empty, child_unknown, canceled, spawn_failed, \
                 start_timeout, resume_unavailable), duration_ms, availability (running, continuable_live, \
                 continuable_resume, released, not_continuable), and blocked_on \
                 {{kind, request_id, title}} while the child waits for a person to approve \
                 something or answer a question. Omit wait_ms for a snapshot; wait_ms > 0 \
                 waits up to that many milliseconds (at most {MAX_WAIT_MS}); wait_ms = 0 \
                 waits without a time limit (it still ends if you disconnect, your session ends or \
                 tether shuts down). A wait returns as soon as any listed running task \
                 finishes or becomes newly blocked. Wait for several tasks in one call: at \
                 most {MAX_WAITS_PER_CALLER} waits may be in flight at once \
                 (concurrency_limit). Turns a person started in the \
                 sub-conversation show up here too (origin \"person\", a higher turn_version)."
            ),
            schema(json!({
                "type": "object",
                "properties": {
                    "task_ids": {
                        "type": "array",
                        "items": {"type": "string"},
                        "minItems": 1,
                        "description": "task_id values returned by delegate_to_agent."
                    },
                    "wait_ms": {
                        "type": "integer",
                        "minimum": 0,
                        "description": "Omit: answer at once. > 0: wait up to this many ms \
                            (capped at 60000). 0: wait without limit."
                    }
                },
                "required": ["task_ids"],
                "additionalProperties": false
            })),
        ),
        Tool::new(
            CANCEL,
            "Cancel the running turn of a delegated task and return its final status \
             (canceled). If the task already finished, this changes nothing and returns its \
             final result. The session stays continuable; use close_session to release it.",
            schema(json!({
                "type": "object",
                "properties": {
                    "task_id": {"type": "string", "description": "The task to cancel."}
                },
                "required": ["task_id"],
                "additionalProperties": false
            })),
        ),
        Tool::new(
            CONTINUE,
            "Send a follow-up message to a delegated task: a new turn in the same child \
             session, which remembers everything from its earlier turns (same task_id, \
             turn_version + 1). Prefer this over delegate_to_agent for follow-ups on a task. \
             Returns at once with status \"running\"; collect the reply with \
             get_delegation_status. Only allowed while the task is not running. Errors: \
             session_still_running (wait first), session_released (it was closed), \
             not_continuable, resume_unavailable (the child's session could not be resumed; \
             nothing was sent), spawn_failed and start_timeout (the child's agent could not \
             be started; nothing was sent), concurrency_limit (too many children running), \
             continuation_conflict, rebuilding (retry shortly).",
            schema(json!({
                "type": "object",
                "properties": {
                    "task_id": {"type": "string", "description": "The task to continue."},
                    "message": {"type": "string", "description": "The follow-up for the child."},
                    "continuation_id": continuation_id_schema()
                },
                "required": ["task_id", "message", "continuation_id"],
                "additionalProperties": false
            })),
        ),
        Tool::new(
            CLOSE,
            "Release a delegated task's session once you need it no more: cancels a running \
             turn, ends the child's process and refuses further continuation \
             (session_released); its history stays visible to the person. Idempotent by \
             continuation_id like continue_with_session.",
            schema(json!({
                "type": "object",
                "properties": {
                    "task_id": {"type": "string", "description": "The task to release."},
                    "continuation_id": continuation_id_schema()
                },
                "required": ["task_id", "continuation_id"],
                "additionalProperties": false
            })),
        ),
    ]
}

/// A failed call: `{error_code, message}` as an error result.
pub fn error_result(code: ErrorCode, message: &str) -> CallToolResult {
    CallToolResult::structured_error(json!({"error_code": code, "message": message}))
}

fn ok<T: serde::Serialize>(v: &T) -> CallToolResult {
    match serde_json::to_value(v) {
        Ok(v) => CallToolResult::structured(v),
        Err(e) => error_result(ErrorCode::Internal, &e.to_string()),
    }
}

fn from_err(e: RuntimeError) -> CallToolResult {
    let code = e.code();
    if code == ErrorCode::Internal {
        tracing::error!(error = %e, "delegation tool failed");
    }
    error_result(code, &e.to_string())
}

fn str_arg<'a>(args: &'a JsonObject, key: &str) -> &'a str {
    args.get(key).and_then(Value::as_str).unwrap_or("")
}

/// Runs one tool call for `caller`. `tool_call_id`: the client's id for the call, when
/// it sent one in `_meta`.
pub async fn call(
    rt: &Runtime,
    caller: &Caller,
    name: &str,
    args: &JsonObject,
    tool_call_id: Option<&str>,
) -> CallToolResult {
    let res = match name {
        DELEGATE => {
            let wd = args.get("working_dir").and_then(Value::as_str);
            rt.delegate(
                caller,
                str_arg(args, "agent_type"),
                str_arg(args, "task"),
                wd,
                tool_call_id,
            )
            .await
            .map(|r| ok(&r))
        }
        STATUS => {
            let ids: Option<Vec<String>> = args.get("task_ids").and_then(|v| {
                v.as_array().map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str().map(str::to_string))
                        .collect()
                })
            });
            let Some(ids) = ids else {
                return error_result(
                    ErrorCode::BadRequest,
                    "task_ids must be an array of strings",
                );
            };
            let wait = match args.get("wait_ms") {
                None | Some(Value::Null) => None,
                Some(v) => match v.as_u64() {
                    Some(n) => Some(n),
                    None => {
                        return error_result(
                            ErrorCode::BadRequest,
                            "wait_ms must be a non-negative integer",
                        );
                    }
                },
            };
            rt.delegation_status(caller, &ids, wait)
                .await
                .map(|r| ok(&r))
        }
        CANCEL => rt
            .cancel_task(caller, str_arg(args, "task_id"))
            .await
            .map(|r| ok(&r)),
        CONTINUE => rt
            .continue_task(
                caller,
                str_arg(args, "task_id"),
                str_arg(args, "message"),
                str_arg(args, "continuation_id"),
            )
            .await
            .map(|r| ok(&r)),
        CLOSE => rt
            .close_task(
                caller,
                str_arg(args, "task_id"),
                str_arg(args, "continuation_id"),
            )
            .await
            .map(|r| ok(&r)),
        other => {
            return error_result(ErrorCode::BadRequest, &format!("unknown tool {other:?}"));
        }
    };
    res.unwrap_or_else(from_err)
}
