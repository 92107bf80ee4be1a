//! A mock model server on loopback that lets the real `codex`, `claude`, `gemini` and
//! `codex-acp` CLIs run offline: OpenAI Responses (`POST /v1/responses`), Anthropic
//! Messages (`POST /v1/messages`) and Gemini (`POST /v1beta/models/{model}:...`), each
//! streamed as the real service streams it.
//!
//! Replies are scripted by the latest user text, the same for every API (see
//! [`Reply::parse_command`]): `shell <command>`, `patch <path> <content>`,
//! `mcp <server> <tool> <json-args>`, `slow <N> <MS>`, `error <status>`; anything else
//! gets `mock reply to: <text> (turn <k>)` with k the number of user messages in the
//! request. After a tool call the next request carries its result and the reply is
//! `done: <first line of the output>`. Tests can queue their own replies
//! ([`MockModel::script`]) and switch every request to an error
//! ([`MockModel::set_error_mode`]). Auxiliary requests the CLIs make on the side (titles,
//! routing, JSON side-queries) get a short answer and never consume the script. Every
//! request is recorded ([`MockModel::requests`]) so tests can check the history an agent
//! sent.

mod anthropic;
mod gemini;
mod openai;
mod script;
mod server;
mod sse;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use serde_json::Value;

pub use script::{Last, Reply, Transcript, default_reply};

/// Which model API a request used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Api {
    OpenAiResponses,
    AnthropicMessages,
    Gemini,
}

/// One request the mock model received.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    pub api: Api,
    /// Method-less path with query, e.g. `/v1/messages?beta=true`.
    pub path: String,
    /// The JSON body (`Null` for a GET).
    pub body: Value,
    pub at: Instant,
    /// A side request (title, routing, token count, model list) outside the scripted flow.
    pub auxiliary: bool,
}

impl RecordedRequest {
    /// The API-neutral view of the request's history.
    pub fn transcript(&self) -> Transcript {
        transcript(self.api, &self.body)
    }

    /// The texts of the user messages in this request, oldest first, without the
    /// context blocks the CLIs inject.
    pub fn user_texts(&self) -> Vec<String> {
        self.transcript().user_texts
    }

    /// The texts of the assistant messages in this request, oldest first.
    pub fn assistant_texts(&self) -> Vec<String> {
        self.transcript().assistant_texts
    }
}

pub(crate) fn transcript(api: Api, body: &Value) -> Transcript {
    match api {
        Api::OpenAiResponses => openai::transcript(body),
        Api::AnthropicMessages => anthropic::transcript(body),
        Api::Gemini => gemini::transcript(body),
    }
}

#[derive(Debug, Default)]
pub(crate) struct State {
    requests: Vec<RecordedRequest>,
    script: VecDeque<Reply>,
    error_mode: Option<u16>,
    counter: u64,
    verbose: bool,
    /// Per request number: the (input, output) tokens its response reported so far.
    billed: std::collections::BTreeMap<u64, (u64, u64)>,
}

pub(crate) type Shared = Arc<Mutex<State>>;

pub(crate) fn lock(s: &Shared) -> MutexGuard<'_, State> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

/// A running mock model server (stopped on drop).
#[derive(Debug)]
pub struct MockModel {
    addr: SocketAddr,
    state: Shared,
    task: tokio::task::JoinHandle<()>,
}

impl MockModel {
    /// Starts the server on `127.0.0.1:0`.
    pub async fn start() -> MockModel {
        MockModel::bind(SocketAddr::from(([127, 0, 0, 1], 0)), false)
            .await
            .unwrap_or_else(|e| panic!("mock model: bind 127.0.0.1:0: {e}"))
    }

    /// Starts the server on `addr`; `verbose` logs every request to stderr.
    pub async fn bind(addr: SocketAddr, verbose: bool) -> std::io::Result<MockModel> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let state: Shared = Arc::new(Mutex::new(State {
            verbose,
            ..State::default()
        }));
        let app = server::router(state.clone());
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                eprintln!("mock model: server error: {e}");
            }
        });
        Ok(MockModel { addr, state, task })
    }

    /// `http://127.0.0.1:PORT` (no trailing slash, no `/v1`).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every request received so far, oldest first.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.state).requests.clone()
    }

    /// The scripted-flow (non-auxiliary) model requests of one API, oldest first.
    pub fn main_requests(&self, api: Api) -> Vec<RecordedRequest> {
        lock(&self.state)
            .requests
            .iter()
            .filter(|r| r.api == api && !r.auxiliary)
            .cloned()
            .collect()
    }

    /// The user texts of the latest non-auxiliary model request (any API).
    pub fn last_user_texts(&self) -> Vec<String> {
        lock(&self.state)
            .requests
            .iter()
            .rev()
            .find(|r| !r.auxiliary)
            .map(RecordedRequest::user_texts)
            .unwrap_or_default()
    }

    /// The user texts of every non-auxiliary request of `api`, one list per request.
    pub fn all_user_texts(&self, api: Api) -> Vec<Vec<String>> {
        self.main_requests(api)
            .iter()
            .map(RecordedRequest::user_texts)
            .collect()
    }

    /// Queues canned replies, answered (first in, first out) to the next non-auxiliary
    /// requests before the default scripting applies again.
    pub fn script(&self, replies: impl IntoIterator<Item = Reply>) {
        lock(&self.state).script.extend(replies);
    }

    /// `Some(status)`: every model request fails with that HTTP status; `None`: normal.
    pub fn set_error_mode(&self, status: Option<u16>) {
        lock(&self.state).error_mode = status;
    }

    /// The model's own count: (input, output) tokens its responses reported, summed
    /// over every response (a stream cut short counts what it had sent).
    pub fn billed_tokens(&self) -> (u64, u64) {
        lock(&self.state)
            .billed
            .values()
            .fold((0, 0), |(i, o), (bi, bo)| (i + bi, o + bo))
    }
}

/// One billed response (see [`MockModel::billed_requests`]).
#[derive(Debug, Clone)]
pub struct Billed {
    pub api: Api,
    pub path: String,
    pub auxiliary: bool,
    /// The request's last user text.
    pub last_user_text: String,
    /// (input, output) tokens its response reported.
    pub tokens: (u64, u64),
}

impl MockModel {
    /// What each billed response reported, by request: to tell which one a ledger missed.
    pub fn billed_requests(&self) -> Vec<Billed> {
        let s = lock(&self.state);
        s.billed
            .iter()
            .filter_map(|(n, b)| {
                let r = s.requests.get(usize::try_from(*n).ok()?.checked_sub(1)?)?;
                Some(Billed {
                    api: r.api,
                    path: r.path.clone(),
                    auxiliary: r.auxiliary,
                    last_user_text: r.user_texts().last().cloned().unwrap_or_default(),
                    tokens: *b,
                })
            })
            .collect()
    }
}

impl Drop for MockModel {
    fn drop(&mut self) {
        self.task.abort();
    }
}
