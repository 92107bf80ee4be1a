//! tether-channels: Telegram, Feishu (Lark), Slack and Discord adapters. Inbound messages are verified,
//! deduplicated and normalized, then handed to the same router as the web API
//! ([`tether_runtime::Runtime::send_message`]); what the agents do comes back as events,
//! which are turned into outbox rows and delivered by a durable, per-chat ordered,
//! retrying dispatcher.
//!
//! Talks to the runtime only through its public API and to the store for its own rows;
//! must not depend on the agents or the web server (it only offers axum routes that the
//! server mounts).

pub mod channel;
pub mod config;
pub mod discord;
pub mod doctor;
pub mod feishu;
pub mod format;
pub mod inbound;
pub mod pairing;
pub mod progress;
pub mod render;
pub mod slack;
pub mod telegram;

mod api;
mod body;
mod buttons;
mod chats;
mod core;
mod error;
mod hex;
mod identity;
mod inbound_files;
mod intake;
mod json;
mod lanes;
mod leader;
pub mod metrics;
mod multipart;
mod net;
mod outbox;
mod pump;
mod registry;
mod route;
mod signed;
mod sweep;
mod tries;

use std::collections::HashMap;
use std::sync::Arc;

use tether_runtime::Runtime;
use tether_store::Store;

pub use config::{
    ChannelsConfig, DiscordConfig, DiscordMode, FeishuConfig, FeishuMode, GroupMode, SlackConfig,
    SlackMode, TelegramConfig, TelegramMode, Tuning,
};
pub use error::ChannelError;
pub use leader::ClusterNode;

use crate::core::SharedCore;
use crate::registry::Inbound;

/// The running channels: their tasks and the routes they add to the HTTP server.
pub struct Channels {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// Set when the node drains: the leaders hand their leases over.
    resign: HandOver,
    hooks: axum::Router,
    api: axum::Router,
}

impl std::fmt::Debug for Channels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channels")
            .field("tasks", &self.tasks.len())
            .finish_non_exhaustive()
    }
}

impl Channels {
    /// Starts every configured channel. On every node: its webhook route and the workers
    /// behind it. On the channel's leader only (see `leader`): its long-lived connection
    /// (poller, long connection, socket, gateway), its outbox dispatcher (resuming rows
    /// left by an earlier run), its event pump (catching up from each chat's cursor) and
    /// its sweep.
    pub async fn start(
        runtime: Runtime,
        store: Store,
        cfg: ChannelsConfig,
        node: ClusterNode,
    ) -> Result<Channels, ChannelError> {
        let mut tasks = Vec::new();
        let mut hooks = axum::Router::new();
        let mut cores: HashMap<&'static str, SharedCore> = HashMap::new();
        let (resign, resigned) = tokio::sync::watch::channel(false);
        let ctx = registry::Ctx {
            runtime: &runtime,
            store: &store,
            cfg: &cfg,
        };
        for factory in registry::FACTORIES {
            let Some(adapter) = factory(&ctx).await? else {
                continue;
            };
            run_channel(
                &adapter.core,
                &node,
                adapter.inbound,
                (&mut tasks, &mut hooks),
                resigned.clone(),
            );
            if let Some(h) = adapter.extra_hook {
                hooks = hooks.merge(h);
            }
            cores.insert(adapter.core.name(), adapter.core);
            match adapter.mode {
                Some(mode) => tracing::info!(mode, "{}", adapter.started),
                None => tracing::info!("{}", adapter.started),
            }
        }
        let api = api::pairing_routes(store, Arc::new(cores));
        Ok(Channels {
            tasks,
            resign: HandOver(Arc::new(resign)),
            hooks,
            api,
        })
    }

    /// Webhook routes (`POST /hooks/...`): public, verified by the channels themselves.
    pub fn hook_routes(&self) -> axum::Router {
        self.hooks.clone()
    }

    /// The pairing API (`/api/v1/pairings...`): mount behind the bearer token.
    pub fn api_routes(&self) -> axum::Router {
        self.api.clone()
    }

    /// For when the node drains (issue 31): on a cluster, [`HandOver::now`] makes the
    /// channels this node leads stop their connections and give their leases up, so
    /// another node takes them at its next look (about a third of a lease); webhooks keep
    /// working until the node stops. On SQLite nothing changes: no other node would take
    /// over.
    pub fn hand_over(&self) -> HandOver {
        self.resign.clone()
    }

    /// Stops every channel task (rows not yet sent stay in the outbox for next time).
    pub fn shutdown(self) {
        for t in self.tasks {
            t.abort();
        }
    }
}

/// Hands the channels' leases over when called (see [`Channels::hand_over`]).
#[derive(Debug, Clone)]
pub struct HandOver(Arc<tokio::sync::watch::Sender<bool>>);

impl HandOver {
    /// Every leader of this node stops and gives its lease up.
    pub fn now(&self) {
        let _ = self.0.send(true);
    }
}

/// Starts a channel's every-node part now and its leader's part under its lease.
fn run_channel(
    core: &SharedCore,
    node: &ClusterNode,
    inbound: Inbound,
    (tasks, hooks): (&mut Vec<tokio::task::JoinHandle<()>>, &mut axum::Router),
    resign: leader::Resign,
) {
    let led_inbound = match inbound {
        Inbound::Led(start) => Some(start),
        Inbound::EveryNode(every, hook) => {
            tasks.extend(every);
            if let Some(h) = hook {
                *hooks = std::mem::take(hooks).merge(h);
            }
            None
        }
    };
    let (term_core, node_id) = (core.clone(), node.id.clone());
    let term: leader::Start = Arc::new(move || {
        let mut t = spawn_delivery(&term_core, &node_id);
        if let Some(start) = &led_inbound {
            t.extend(start());
        }
        t
    });
    let lease = format!("channel:{}", core.name());
    tasks.push(leader::lead(
        core.store.clone(),
        node.clone(),
        lease,
        term,
        resign,
    ));
}

/// The outbox dispatcher, the event pump and the hourly clean-up of one channel; on a
/// cluster also the pick-up of chats mapped on other nodes (webhooks).
fn spawn_delivery(core: &SharedCore, node_id: &str) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = vec![
        tokio::spawn(outbox::run(core.clone(), node_id.to_owned())),
        tokio::spawn(pump::run(core.clone())),
        tokio::spawn(sweep::run(core.clone())),
    ];
    if core.store.topology() != tether_store::Topology::Single {
        tasks.push(tokio::spawn(core::refresh_chats(core.clone())));
    }
    tasks
}

/// The OpenAPI paths the channels add: the pairing API and the webhooks.
pub fn openapi() -> utoipa::openapi::OpenApi {
    use utoipa::OpenApi as _;
    api::ChannelsDoc::openapi()
}
