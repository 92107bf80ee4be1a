//! The five delegation tools: descriptions that teach a model when to use them, input
//! schemas derived from the argument types in `tether-proto` (`params.rs`), argument
//! parsing (a missing or mistyped argument is `invalid_params` naming it), and the calls
//! into the runtime. Results are JSON text (and structured content); failures carry a
//! stable `error_code`.

use std::sync::Arc;

use rmcp::handler::server::tool::schema_for_input;
use rmcp::model::{CallToolResult, JsonObject, Tool};
use rmcp::schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tether_proto::{
    CloseRequest, ContinueRequest, DelegateRequest, ErrorCode, ParamsError, StatusArgs, TaskArgs,
    TaskRef, parse_params,
};
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

/// The derived input schema of `T` (JSON Schema 2020-12, root `type: object`), its
/// argument descriptions (the field docs, wrapped in the source) as one line each.
fn input_schema<T: JsonSchema + 'static>() -> Arc<JsonObject> {
    match schema_for_input::<T>() {
        Ok(schema) => {
            let mut schema = schema.as_ref().clone();
            if let Some(Value::Object(props)) = schema.get_mut("properties") {
                for prop in props.values_mut() {
                    if let Some(Value::String(d)) = prop.get_mut("description") {
                        *d = d.replace('\n', " ");
                    }
                }
            }
            Arc::new(schema)
        }
        Err(e) => {
            // Only a non-object argument type could fail; ours are all structs.
            tracing::error!("tool input schema: {e}");
            Arc::new(JsonObject::new())
        }
    }
}

/// `delegate_to_agent`'s schema, with the configured agents as the choices of
/// `agent_type` (known only at run time).
fn delegate_schema(agents: &[String], agent_list: &str) -> Arc<JsonObject> {
    let mut schema = input_schema::<DelegateRequest>().as_ref().clone();
    if let Some(Value::Object(agent_type)) = schema
        .get_mut("properties")
        .and_then(|p| p.get_mut("agent_type"))
    {
        agent_type.insert("enum".to_owned(), json!(agents));
        agent_type.insert(
            "description".to_owned(),
            json!(format!("Which agent does the work: one of {agent_list}.")),
        );
    }
    Arc::new(schema)
}

/// The tool list; `agents` are the configured agent names.
pub fn tools(agents: &[String]) -> Vec<Tool> {
    let agent_list = agents.join(", ");
    vec![
        Tool::new(
            DELEGATE,
            format!(
                "Use this instead of a built-in Task/sub-agent tool when the person wants a \
                 sub-agent they can interact with, keep on standby or check on later, or when \
                 the work suits another agent. Hands a self-contained sub-task to another \
                 coding agent. The child runs in its own session — a sub-conversation the \
                 person can watch, answer and continue — while you keep working: this returns \
                 at once with a task_id and status \"running\". Collect the result later \
                 with get_delegation_status (pass wait_ms to wait for it). To follow \
                 up on a task you already delegated, call continue_with_session with its \
                 task_id instead of delegating again: the child remembers its earlier turns. \
                 The child sees nothing of your conversation: put everything it needs in \
                 `task`. Agents: {agent_list}. Errors: invalid_params (an argument is \
                 missing or of the wrong type), invalid_agent_type, invalid_task, \
                 invalid_working_dir, depth_limit, concurrency_limit, rebuilding."
            ),
            delegate_schema(agents, &agent_list),
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
            input_schema::<StatusArgs>(),
        ),
        Tool::new(
            CANCEL,
            "Cancel the running turn of a delegated task and return its final status \
             (canceled). If the task already finished, this changes nothing and returns its \
             final result. The session stays continuable; use close_session to release it.",
            input_schema::<TaskRef>(),
        ),
        Tool::new(
            CONTINUE,
            "Send a follow-up message to a delegated task: a new turn in the same child \
             session, which remembers everything from its earlier turns (same task_id, \
             turn_version + 1). Prefer this over delegate_to_agent for follow-ups on a task. \
             Returns at once with status \"running\"; collect the reply with \
             get_delegation_status. Only allowed while the task is not running. Errors: \
             invalid_params (an argument is missing or of the wrong type), \
             session_still_running (wait first), session_released (it was closed), \
             not_continuable, resume_unavailable (the child's session could not be resumed; \
             nothing was sent), spawn_failed and start_timeout (the child's agent could not \
             be started; nothing was sent), concurrency_limit (too many children running), \
             continuation_conflict, rebuilding (retry shortly).",
            input_schema::<TaskArgs<ContinueRequest>>(),
        ),
        Tool::new(
            CLOSE,
            "Release a delegated task's session once you need it no more: cancels a running \
             turn, ends the child's process and refuses further continuation \
             (session_released); its history stays visible to the person. Idempotent by \
             continuation_id like continue_with_session.",
            input_schema::<TaskArgs<CloseRequest>>(),
        ),
    ]
}

/// A failed call: `{error_code, message}` as an error result.
pub fn error_result(code: ErrorCode, message: &str) -> CallToolResult {
    CallToolResult::structured_error(json!({"error_code": code, "message": message}))
}

/// A call whose arguments do not fit the tool's schema: `invalid_params`, naming the
/// argument (also as `argument`, when known).
fn params_error(e: ParamsError) -> CallToolResult {
    let mut body = json!({"error_code": ErrorCode::InvalidParams, "message": e.message});
    if let Some(argument) = e.argument {
        body["argument"] = json!(argument);
    }
    CallToolResult::structured_error(body)
}

fn ok<T: serde::Serialize>(v: &T) -> CallToolResult {
    match serde_json::to_value(v) {
        Ok(v) => CallToolResult::structured(v),
        Err(e) => error_result(ErrorCode::Internal, &e.to_string()),
    }
}

pub fn from_err(e: RuntimeError) -> CallToolResult {
    let code = e.code();
    if code == ErrorCode::Internal {
        tracing::error!(error = %e, "delegation tool failed");
    }
    error_result(code, &e.to_string())
}

fn args<T: DeserializeOwned>(args: &JsonObject) -> Result<T, ParamsError> {
    parse_params(&Value::Object(args.clone()))
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
    match run(rt, caller, name, args, tool_call_id).await {
        Ok(Ok(result)) => result,
        Ok(Err(e)) => from_err(e),
        Err(e) => params_error(e),
    }
}

/// The call: `Err` for arguments that do not parse, `Ok(Err)` for a runtime failure
/// (an unknown tool is a `bad_request` result).
async fn run(
    rt: &Runtime,
    caller: &Caller,
    name: &str,
    raw: &JsonObject,
    tool_call_id: Option<&str>,
) -> Result<Result<CallToolResult, RuntimeError>, ParamsError> {
    Ok(match name {
        DELEGATE => {
            let a: DelegateRequest = args(raw)?;
            rt.delegate(
                caller,
                &a.agent_type,
                &a.task,
                a.working_dir.as_deref(),
                tool_call_id,
            )
            .await
            .map(|r| ok(&r))
        }
        STATUS => {
            let a: StatusArgs = args(raw)?;
            rt.delegation_status(caller, &a.task_ids, a.wait_ms)
                .await
                .map(|r| ok(&r))
        }
        CANCEL => {
            let a: TaskRef = args(raw)?;
            rt.cancel_task(caller, &a.task_id).await.map(|r| ok(&r))
        }
        CONTINUE => {
            let a = TaskArgs::<ContinueRequest>::parse(raw)?;
            rt.continue_task(caller, &a.task_id, &a.rest.message, &a.rest.continuation_id)
                .await
                .map(|r| ok(&r))
        }
        CLOSE => {
            let a = TaskArgs::<CloseRequest>::parse(raw)?;
            rt.close_task(caller, &a.task_id, &a.rest.continuation_id)
                .await
                .map(|r| ok(&r))
        }
        other => Ok(error_result(
            ErrorCode::BadRequest,
            &format!("unknown tool {other:?}"),
        )),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Issue 26 item 7: the rule for choosing delegate_to_agent over a built-in
    /// Task/sub-agent tool is the description's first sentence.
    #[test]
    fn the_delegate_description_starts_with_when_to_choose_it() {
        let tools = tools(&["codex".to_owned()]);
        let delegate = tools.iter().find(|t| t.name == DELEGATE).unwrap();
        let text = delegate.description.as_deref().unwrap();
        let first = text.split(". ").next().unwrap();
        assert!(
            first.starts_with("Use this instead of a built-in Task/sub-agent tool when"),
            "{text}"
        );
    }
}
