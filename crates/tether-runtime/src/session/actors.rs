//! The registry of running session actors. A mailbox is bounded; every command goes
//! through [`Actors::send`] (or [`ActorHandle::send`] for a handle held already) with
//! the one time-out policy of `mailbox`.
//!
//! A dormant, idle actor leaves the registry and ends ([`Actors::retire`]), so a dormant
//! session costs no task and no map entry; the next command spawns a fresh actor. No
//! command is lost to that exit: a sender either finds the mailbox closed (and spawns a
//! successor) or its command is in the mailbox, which the exiting actor drains to the
//! end and hands to its successor.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use tether_agents::AgentSpec;
use tether_proto::{ConversationId, Session, SessionId};
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, oneshot};

use crate::RuntimeError;
use crate::ctx::Ctx;
use crate::ownership::OwnerGuard;
use crate::session::command::ActorCmd;
use crate::session::mailbox::{ActorHandle, Undelivered, busy, reply_within};

/// How often a sender retries when the actor it found was exiting.
const RESPAWN_TRIES: usize = 4;

/// Starts the actor of a session and returns its handle (`Actor::spawn`; passed in, so
/// that the registry and the actor it starts do not import each other). The guard keeps
/// the session's conversation this node's while the actor runs (issue 12).
pub(crate) type Spawn = fn(
    Arc<Ctx>,
    Weak<Actors>,
    Session,
    AgentSpec,
    ConversationId,
    Option<OwnerGuard>,
) -> ActorHandle;

/// Who receives a command.
#[derive(Clone, Copy)]
pub(crate) enum To<'a> {
    /// The session's actor, spawned if none runs (`owner`: its pool owner).
    Session {
        session: &'a Session,
        owner: &'a ConversationId,
    },
    /// The session's actor only if one runs (an absent actor has nothing to act on).
    Running(&'a SessionId),
}

impl To<'_> {
    fn session_id(&self) -> &SessionId {
        match self {
            To::Session { session, .. } => &session.id,
            To::Running(id) => id,
        }
    }
}

/// The running actors by session id.
pub(crate) struct Actors {
    map: Mutex<HashMap<SessionId, ActorHandle>>,
    /// Set at shutdown: no actor starts afterwards.
    closing: AtomicBool,
    spawn: Spawn,
}

enum Attempt {
    Sent,
    NoActor,
    Retry(ActorCmd),
    Wait(ActorHandle, ActorCmd),
}

impl Actors {
    pub fn new(spawn: Spawn) -> Actors {
        Actors {
            map: Mutex::new(HashMap::new()),
            closing: AtomicBool::new(false),
            spawn,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, ActorHandle>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Actors running now (dormant idle sessions have none).
    pub fn count(&self) -> usize {
        self.lock().values().filter(|h| !h.tx.is_closed()).count()
    }

    /// The actor of a session if one runs.
    pub fn running(&self, session_id: &SessionId) -> Option<ActorHandle> {
        self.lock()
            .get(session_id)
            .filter(|h| !h.tx.is_closed())
            .cloned()
    }

    /// Stops new actors from starting and returns the running ones.
    pub fn close(&self) -> Vec<ActorHandle> {
        let mut map = self.lock();
        self.closing.store(true, Ordering::SeqCst);
        map.drain().map(|(_, h)| h).collect()
    }

    /// Sends `cmd` to the actor of `to`. `Ok(false)`: `To::Running` and none runs.
    pub async fn send(
        self: &Arc<Self>,
        ctx: &Arc<Ctx>,
        to: To<'_>,
        mut cmd: ActorCmd,
    ) -> Result<bool, RuntimeError> {
        // The claim of the conversation an actor spawned here runs under (issue 12).
        let mut claim: Option<OwnerGuard> = None;
        for _ in 0..RESPAWN_TRIES {
            if let To::Session { session, .. } = to
                && claim.is_none()
                && ctx.ownership.clustered()
                && self.running(&session.id).is_none()
            {
                // Before an actor starts: the session runs on its conversation's owner.
                claim = ctx.ownership.claim(&session.conversation_id).await?;
            }
            match self.try_send(ctx, to, cmd, &mut claim)? {
                Attempt::Sent => return Ok(true),
                Attempt::NoActor => return Ok(false),
                Attempt::Retry(c) => cmd = c,
                Attempt::Wait(h, c) => match h.send(c).await {
                    Ok(()) => return Ok(true),
                    // It exited meanwhile; the next try finds its successor or spawns one.
                    Err(Undelivered::Gone(c)) => cmd = c,
                    Err(Undelivered::Busy) => return Err(busy()),
                },
            }
        }
        Err(RuntimeError::Internal(
            "the session actor kept exiting".to_string(),
        ))
    }

    /// Under the map's lock, so that no actor retires between the look-up (or the spawn)
    /// and the send.
    fn try_send(
        self: &Arc<Self>,
        ctx: &Arc<Ctx>,
        to: To<'_>,
        cmd: ActorCmd,
        claim: &mut Option<OwnerGuard>,
    ) -> Result<Attempt, RuntimeError> {
        let id = to.session_id();
        let mut map = self.lock();
        let handle = match map.get(id).filter(|h| !h.tx.is_closed()) {
            Some(h) => h.clone(),
            None => {
                let To::Session { session, owner } = to else {
                    return Ok(Attempt::NoActor);
                };
                if self.closing.load(Ordering::SeqCst) {
                    return Err(RuntimeError::Internal(
                        "tether is shutting down".to_string(),
                    ));
                }
                let spec = ctx
                    .config
                    .agents
                    .get(&session.agent)
                    .cloned()
                    .ok_or_else(|| RuntimeError::UnknownAgent {
                        name: session.agent.clone(),
                        known: ctx
                            .config
                            .agents
                            .keys()
                            .cloned()
                            .collect::<Vec<_>>()
                            .join(", "),
                    })?;
                if ctx.ownership.clustered() && claim.is_none() {
                    // An actor appeared and left between the claim's check and now: the
                    // next try claims.
                    return Ok(Attempt::Retry(cmd));
                }
                let h = (self.spawn)(
                    ctx.clone(),
                    Arc::downgrade(self),
                    session.clone(),
                    spec,
                    owner.clone(),
                    claim.take(),
                );
                map.insert(id.clone(), h.clone());
                h
            }
        };
        Ok(match handle.tx.try_send(cmd) {
            Ok(()) => Attempt::Sent,
            Err(TrySendError::Closed(c)) => {
                map.remove(id);
                Attempt::Retry(c)
            }
            Err(TrySendError::Full(c)) => Attempt::Wait(handle, c),
        })
    }

    /// Sends a request and waits (bounded) for its reply. `Ok(None)`: `To::Running` and
    /// none runs.
    pub async fn request<T>(
        self: &Arc<Self>,
        ctx: &Arc<Ctx>,
        to: To<'_>,
        make: impl FnOnce(oneshot::Sender<T>) -> ActorCmd,
    ) -> Result<Option<T>, RuntimeError> {
        let (tx, rx) = oneshot::channel();
        let cmd = make(tx);
        let bound = cmd.reply_bound(ctx.config.start_timeout);
        if !self.send(ctx, to, cmd).await? {
            return Ok(None);
        }
        reply_within(bound, rx).await.map(Some)
    }

    /// An idle actor with no process leaves: under the map's lock, if its mailbox is
    /// empty, the mailbox closes and the entry goes. `false`: mail came; keep running.
    pub fn retire(&self, rx: &mut mpsc::Receiver<ActorCmd>, session_id: &SessionId) -> bool {
        let mut map = self.lock();
        if !rx.is_empty() {
            return false;
        }
        self.leave_locked(&mut map, rx, session_id);
        true
    }

    /// The actor ends for good (a released session): close its mailbox and drop its entry.
    pub fn leave(&self, rx: &mut mpsc::Receiver<ActorCmd>, session_id: &SessionId) {
        let mut map = self.lock();
        self.leave_locked(&mut map, rx, session_id);
    }

    fn leave_locked(
        &self,
        map: &mut HashMap<SessionId, ActorHandle>,
        rx: &mut mpsc::Receiver<ActorCmd>,
        session_id: &SessionId,
    ) {
        rx.close();
        // Only a closed handle can be ours: a successor's mailbox is open.
        if map.get(session_id).is_some_and(|h| h.tx.is_closed()) {
            map.remove(session_id);
        }
    }

    /// Commands that reached a mailbox after its actor decided to leave (a sender's slot
    /// taken just before the close) go to a successor, so none is lost.
    pub fn hand_over(
        actors: &Weak<Actors>,
        ctx: &Arc<Ctx>,
        session: Session,
        owner: ConversationId,
        left: Vec<ActorCmd>,
    ) {
        // No registry: the runtime is gone, and so is everyone who waits for a reply.
        let Some(actors) = actors.upgrade().filter(|_| !left.is_empty()) else {
            return;
        };
        let ctx = ctx.clone();
        tokio::spawn(async move {
            let to = To::Session {
                session: &session,
                owner: &owner,
            };
            for cmd in left {
                if let Err(e) = actors.send(&ctx, to, cmd).await {
                    tracing::warn!(session = %session.id, error = %e, "a command was not handed over");
                }
            }
        });
    }
}
