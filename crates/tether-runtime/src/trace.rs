//! One trace per turn (issue 31): spans through the `tracing` crate, bridged to
//! OpenTelemetry by the binary when `[telemetry] otlp_endpoint` is set (without it these
//! spans are plain `tracing` spans and the contexts below are empty). A call carries its
//! W3C `traceparent` when it is forwarded to another node ([`crate::TraceContext`]); a
//! turn starts under the context of the call that queued it; an agent's own calls back
//! into tether (a delegation, from the MCP server) join the trace of its running turn.

use std::collections::HashMap;
use std::sync::Mutex;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tether_proto::SessionId;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The W3C trace context of the current span (`None` when tracing is off).
pub(crate) fn current_traceparent() -> Option<String> {
    let cx = tracing::Span::current().context();
    if !cx.span().span_context().is_valid() {
        return None;
    }
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&cx, &mut carrier);
    carrier.remove("traceparent")
}

/// The W3C trace context of `span` (`None` when tracing is off).
pub(crate) fn traceparent_of(span: &tracing::Span) -> Option<String> {
    span.in_scope(current_traceparent)
}

/// Makes `span` a child of the trace `traceparent` names (what a channel sends for a
/// turn joins the turn's trace).
pub fn join(span: &tracing::Span, traceparent: &str) {
    let _ = span.set_parent(context_of(traceparent));
}

/// The context a `traceparent` names.
pub(crate) fn context_of(traceparent: &str) -> opentelemetry::Context {
    let carrier = HashMap::from([("traceparent".to_owned(), traceparent.to_owned())]);
    TraceContextPropagator::new().extract(&carrier)
}

/// Makes `span` a child of `parent` (when it names a trace) and records its trace id
/// (JSON logs carry it).
pub(crate) fn adopt(span: &tracing::Span, parent: Option<opentelemetry::Context>) {
    if let Some(cx) = parent.filter(|cx| cx.span().span_context().is_valid()) {
        let _ = span.set_parent(cx);
    }
    let trace_id = span.context().span().span_context().trace_id();
    if trace_id != opentelemetry::trace::TraceId::INVALID {
        span.record("trace_id", tracing::field::display(trace_id));
    }
}

/// The running turns' contexts by session: what an agent's call back into tether joins.
#[derive(Default)]
pub(crate) struct TurnTraces(Mutex<HashMap<SessionId, opentelemetry::Context>>);

impl TurnTraces {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, opentelemetry::Context>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn started(&self, session: &SessionId, span: &tracing::Span) {
        let cx = span.context();
        if cx.span().span_context().is_valid() {
            self.lock().insert(session.clone(), cx);
        }
    }

    pub fn ended(&self, session: &SessionId) {
        self.lock().remove(session);
    }

    pub fn of(&self, session: &SessionId) -> Option<opentelemetry::Context> {
        self.lock().get(session).cloned()
    }
}
