//! In-process harness for the runtime: a scripted agent (the test answers every start
//! and every prompt itself), a clock the test sets, and a runtime on a temporary SQLite
//! store. No daemon, no process.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tether_agents::{
    AgentDriver, AgentError, AgentEvent, AgentSession, AgentSpec, DriverKind, StartRequest,
    StopReason, TurnOutcome,
};
use tether_agents::{PermissionReply, PermissionRequest};
use tether_proto::Decision;
use tether_proto::{ConversationId, CreateConversation, EventEnvelope, EventPayload, SendMessage};
use tether_runtime::{
    Clock, CoalesceConfig, DelegationConfig, Drivers, PoolConfig, Runtime, RuntimeConfig, Seams,
};
use tether_store::Store;
use tether_testkit::within;
use tokio::sync::{mpsc, oneshot, watch};

/// A wall clock that stands still until the test moves it.
pub struct ManualClock {
    now: watch::Sender<i64>,
}

impl ManualClock {
    pub fn new(start_ms: i64) -> Arc<ManualClock> {
        Arc::new(ManualClock {
            now: watch::Sender::new(start_ms),
        })
    }

    pub fn advance(&self, ms: i64) {
        self.now.send_modify(|n| *n += ms);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        *self.now.borrow()
    }

    fn sleep_until(&self, at_ms: i64) -> tether_runtime::Wait {
        let mut rx = self.now.subscribe();
        Box::pin(async move {
            // The sender lives as long as the clock; if it is gone, nothing will ever be due.
            if rx.wait_for(|now| *now >= at_ms).await.is_err() {
                std::future::pending::<()>().await;
            }
        })
    }
}

/// What the scripted agent did, in order.
#[derive(Default)]
pub struct Log(Mutex<Vec<String>>);

impl Log {
    fn push(&self, line: String) {
        self.0.lock().unwrap().push(line);
    }

    pub fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }

    pub fn count(&self, prefix: &str) -> usize {
        self.lines()
            .iter()
            .filter(|l| l.starts_with(prefix))
            .count()
    }
}

/// A start the driver was asked for; the test answers it (or lets it hang).
pub struct StartCall {
    pub req: StartRequest,
    reply: oneshot::Sender<Result<String, AgentError>>,
}

impl StartCall {
    /// The agent is up with this external id.
    pub fn ok(self, external_id: &str) {
        let _ = self.reply.send(Ok(external_id.to_string()));
    }

    pub fn fail(self, err: AgentError) {
        let _ = self.reply.send(Err(err));
    }

    /// Resolves when the runtime abandoned this start (dropped its future).
    pub async fn abandoned(&mut self) {
        self.reply.closed().await;
    }
}

/// A prompt the agent got; the test streams its events and ends it.
pub struct PromptCall {
    pub text: String,
    pub external_id: String,
    pub events: mpsc::UnboundedSender<AgentEvent>,
    end: oneshot::Sender<Result<TurnOutcome, AgentError>>,
}

impl PromptCall {
    pub fn say(&self, ev: AgentEvent) {
        self.events.send(ev).expect("the runtime stopped listening");
    }

    pub fn delta(&self, text: &str) {
        self.say(AgentEvent::MessageDelta(text.to_string()));
    }

    /// Ends the turn normally with `text` as its result.
    pub fn complete(self, text: &str) {
        let _ = self.end.send(Ok(TurnOutcome {
            stop_reason: StopReason::EndTurn,
            text: text.to_string(),
            usage: None,
        }));
    }

    pub fn fail(self, err: AgentError) {
        let _ = self.end.send(Err(err));
    }
}

struct Shared {
    log: Arc<Log>,
    starts: mpsc::UnboundedSender<StartCall>,
    prompts: mpsc::UnboundedSender<PromptCall>,
    /// Cancels to lose (as an agent loses a cancel that arrives before it registered
    /// the prompt).
    lose_cancels: AtomicUsize,
}

struct ScriptedDriver(Arc<Shared>);

#[async_trait]
impl AgentDriver for ScriptedDriver {
    async fn start(&self, req: StartRequest) -> Result<Box<dyn AgentSession>, AgentError> {
        self.0.log.push(match &req.resume {
            Some(id) => format!("start resume {id}"),
            None => "start new".to_string(),
        });
        let (tx, rx) = oneshot::channel();
        let _ = self.0.starts.send(StartCall { req, reply: tx });
        let external_id = rx.await.map_err(|_| AgentError::Agent {
            message: "the test dropped the start".to_string(),
        })??;
        Ok(Box::new(ScriptedSession {
            shared: self.0.clone(),
            external_id,
            alive: AtomicBool::new(true),
            running: Mutex::new(None),
        }))
    }
}

struct ScriptedSession {
    shared: Arc<Shared>,
    external_id: String,
    alive: AtomicBool,
    /// Set while a prompt runs: a cancel ends it.
    running: Mutex<Option<oneshot::Sender<()>>>,
}

#[async_trait]
impl AgentSession for ScriptedSession {
    fn external_id(&self) -> String {
        self.external_id.clone()
    }

    async fn prompt(
        &self,
        text: &str,
        events: mpsc::UnboundedSender<AgentEvent>,
    ) -> Result<TurnOutcome, AgentError> {
        self.shared
            .log
            .push(format!("prompt {} {text}", self.external_id));
        let (cancel_tx, cancel_rx) = oneshot::channel();
        *self.running.lock().unwrap() = Some(cancel_tx);
        let (end_tx, end_rx) = oneshot::channel();
        let _ = self.shared.prompts.send(PromptCall {
            text: text.to_string(),
            external_id: self.external_id.clone(),
            events,
            end: end_tx,
        });
        let out = tokio::select! {
            end = end_rx => end.unwrap_or_else(|_| Err(AgentError::Crashed {
                status: "the test dropped the prompt".to_string(),
                stderr_tail: String::new(),
            })),
            _ = cancel_rx => Ok(TurnOutcome {
                stop_reason: StopReason::Cancelled,
                text: String::new(),
                usage: None,
            }),
        };
        *self.running.lock().unwrap() = None;
        out
    }

    async fn cancel(&self) -> Result<(), AgentError> {
        let lost = self
            .shared
            .lose_cancels
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        self.shared.log.push(format!(
            "cancel {}{}",
            self.external_id,
            if lost { " (lost)" } else { "" }
        ));
        if !lost && let Some(tx) = self.running.lock().unwrap().take() {
            let _ = tx.send(());
        }
        Ok(())
    }

    fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    async fn shutdown(&self) {
        self.alive.store(false, Ordering::SeqCst);
        self.shared
            .log
            .push(format!("shutdown {}", self.external_id));
    }
}

/// The test's end of the scripted agent.
pub struct Agent {
    pub log: Arc<Log>,
    starts: mpsc::UnboundedReceiver<StartCall>,
    prompts: mpsc::UnboundedReceiver<PromptCall>,
    shared: Arc<Shared>,
}

impl Agent {
    pub fn scripted() -> Agent {
        let (starts_tx, starts) = mpsc::unbounded_channel();
        let (prompts_tx, prompts) = mpsc::unbounded_channel();
        let log = Arc::new(Log::default());
        let shared = Arc::new(Shared {
            log: log.clone(),
            starts: starts_tx,
            prompts: prompts_tx,
            lose_cancels: AtomicUsize::new(0),
        });
        Agent {
            log,
            starts,
            prompts,
            shared,
        }
    }

    pub fn drivers(&self) -> Drivers {
        Drivers::same(Arc::new(ScriptedDriver(self.shared.clone())))
    }

    /// The next start the runtime asks for.
    pub async fn start(&mut self) -> StartCall {
        within("the runtime starts the agent", self.starts.recv())
            .await
            .expect("driver gone")
    }

    /// The next prompt the agent gets.
    pub async fn prompt(&mut self) -> PromptCall {
        within("the agent is prompted", self.prompts.recv())
            .await
            .expect("driver gone")
    }

    /// A prompt that arrived already, if any.
    pub fn prompt_now(&mut self) -> Option<PromptCall> {
        self.prompts.try_recv().ok()
    }

    /// A start asked for already, if any.
    pub fn start_now(&mut self) -> Option<StartCall> {
        self.starts.try_recv().ok()
    }

    pub fn lose_next_cancels(&self, n: usize) {
        self.shared.lose_cancels.store(n, Ordering::SeqCst);
    }
}

/// The configured name of the scripted agent.
pub const AGENT: &str = "scripted";

/// A runtime configuration on `dir` with the scripted agent.
pub fn config(dir: &Path) -> RuntimeConfig {
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let spec = AgentSpec {
        name: AGENT.to_string(),
        driver: DriverKind::Acp,
        command: "not-run".to_string(),
        args: Vec::new(),
        pass_env: Vec::new(),
        env: BTreeMap::new(),
    };
    RuntimeConfig {
        agents: BTreeMap::from([(AGENT.to_string(), spec)]),
        default_agent: AGENT.to_string(),
        workspace_roots: vec![work.clone()],
        default_cwd: work,
        data_dir: dir.join("data"),
        private_paths: Vec::new(),
        approval_timeout: Duration::from_secs(60),
        queue_cap: 4,
        start_timeout: Duration::from_secs(5),
        turn_timeout: None,
        store_outage_limit: std::time::Duration::from_secs(300),
        pool: PoolConfig::default(),
        delegation: DelegationConfig::default(),
        coalesce: CoalesceConfig::default(),
        attachments: tether_runtime::AttachmentLimits::default(),
        cluster: tether_runtime::ClusterConfig::default(),
        usage: tether_runtime::UsageConfig::default(),
        schedules: tether_runtime::SchedulesConfig::default(),
        worktrees: tether_runtime::WorktreesConfig::default(),
    }
}

/// A runtime on a store in `dir`, driving the scripted agent with `clock`.
pub async fn runtime(
    dir: &Path,
    config: RuntimeConfig,
    agent: &Agent,
    clock: Arc<ManualClock>,
) -> Runtime {
    let store = within("open the store", Store::open(&dir.join("data")))
        .await
        .unwrap();
    let seams = Seams {
        drivers: Some(agent.drivers()),
        clock,
    };
    within(
        "start the runtime",
        Runtime::start_with(config, store, seams),
    )
    .await
    .unwrap()
}

pub async fn conversation(rt: &Runtime) -> ConversationId {
    within(
        "create a conversation",
        rt.create_conversation(CreateConversation::default()),
    )
    .await
    .unwrap()
    .id
}

pub fn msg(text: &str) -> SendMessage {
    SendMessage {
        text: text.to_string(),
        ..SendMessage::default()
    }
}

/// The conversation's stored events, oldest first.
pub async fn events(rt: &Runtime, conversation_id: &ConversationId) -> Vec<EventEnvelope> {
    within(
        "read events",
        rt.conversation_events(conversation_id, 0, 1000),
    )
    .await
    .unwrap()
}

pub fn kinds(events: &[EventEnvelope]) -> Vec<&'static str> {
    events.iter().map(|e| e.payload.kind()).collect()
}

/// Polls the store until `check` holds for the conversation's events; returns them.
pub async fn events_until(
    rt: &Runtime,
    conversation_id: &ConversationId,
    what: &str,
    check: impl Fn(&[EventEnvelope]) -> bool,
) -> Vec<EventEnvelope> {
    within(what, async {
        loop {
            let evs = rt
                .conversation_events(conversation_id, 0, 1000)
                .await
                .unwrap();
            if check(&evs) {
                return evs;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
}

/// Waits for the conversation's `n`-th turn-ending event; returns all events.
pub async fn turns_ended(
    rt: &Runtime,
    conversation_id: &ConversationId,
    n: usize,
) -> Vec<EventEnvelope> {
    events_until(rt, conversation_id, "turns end", |evs| {
        evs.iter().filter(|e| e.payload.is_turn_terminal()).count() >= n
    })
    .await
}

pub fn count(events: &[EventEnvelope], kind: &str) -> usize {
    events.iter().filter(|e| e.payload.kind() == kind).count()
}

pub fn deltas(events: &[EventEnvelope]) -> String {
    events
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::MessageDelta { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

pub fn temp() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    (dir, path)
}

/// Asks the agent's permission request into the turn of `p`; returns the agent's end.
pub fn ask_permission(p: &PromptCall, title: &str) -> oneshot::Receiver<PermissionReply> {
    let (tx, rx) = oneshot::channel();
    p.say(AgentEvent::Permission(PermissionRequest {
        title: title.to_string(),
        kind: Some("execute".to_string()),
        detail: None,
        options: vec![Decision::Allow, Decision::Deny],
        reply: tx,
    }));
    rx
}
