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
mod core;
mod error;
mod inbound_files;
mod json;
mod lanes;
mod leader;
mod multipart;
mod net;
mod outbox;
mod pump;
mod sweep;

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

use crate::core::{Core, SharedCore};

/// The running channels: their tasks and the routes they add to the HTTP server.
pub struct Channels {
    tasks: Vec<tokio::task::JoinHandle<()>>,
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
        if let Some(tc) = &cfg.telegram {
            let tg = Arc::new(
                telegram::Telegram::new(tc).map_err(|e| ChannelError::Platform(e.to_string()))?,
            );
            let core = Core::new(
                tg.clone(),
                runtime.clone(),
                store.clone(),
                tc.allowed_users.clone(),
                tc.group_mode,
                cfg.tuning,
                format::utf16,
            )
            .await?;
            let inbound = match tc.mode {
                TelegramMode::Polling => {
                    let (core, tc) = (core.clone(), Arc::new(tc.clone()));
                    Inbound::Led(Arc::new(move || {
                        telegram::start(core.clone(), tg.clone(), &tc).tasks
                    }))
                }
                TelegramMode::Webhook => {
                    let started = telegram::start(core.clone(), tg, tc);
                    Inbound::EveryNode(started.tasks, started.hook)
                }
            };
            run_channel(&core, &node, inbound, &mut tasks, &mut hooks);
            cores.insert("telegram", core);
            tracing::info!(mode = ?tc.mode, "telegram channel started");
        }
        if let Some(fc) = &cfg.feishu {
            let fs = Arc::new(
                feishu::Feishu::new(fc).map_err(|e| ChannelError::Platform(e.to_string()))?,
            );
            let core = Core::new(
                fs,
                runtime.clone(),
                store.clone(),
                fc.allowed_users.clone(),
                fc.group_mode,
                cfg.tuning,
                format::chars,
            )
            .await?;
            let inbound = match fc.mode {
                FeishuMode::LongConnection => {
                    let (core, fc) = (core.clone(), Arc::new(fc.clone()));
                    Inbound::Led(Arc::new(move || feishu::start(core.clone(), &fc).tasks))
                }
                FeishuMode::Webhook => {
                    let started = feishu::start(core.clone(), fc);
                    Inbound::EveryNode(started.tasks, started.hook)
                }
            };
            run_channel(&core, &node, inbound, &mut tasks, &mut hooks);
            cores.insert("feishu", core);
            match fc.mode {
                FeishuMode::Webhook => {
                    tracing::info!("feishu channel started (webhook mode: POST /hooks/feishu)")
                }
                FeishuMode::LongConnection => {
                    tracing::info!("feishu channel started (long connection, no public URL)")
                }
            }
        }
        if let Some(sc) = &cfg.slack {
            let sl =
                Arc::new(slack::Slack::new(sc).map_err(|e| ChannelError::Platform(e.to_string()))?);
            let core = Core::new(
                sl.clone(),
                runtime.clone(),
                store.clone(),
                sc.allowed_users.clone(),
                sc.group_mode,
                cfg.tuning,
                slack::blocks::units,
            )
            .await?;
            let inbound = match sc.mode {
                SlackMode::Socket => {
                    let (core, sc) = (core.clone(), Arc::new(sc.clone()));
                    Inbound::Led(Arc::new(move || {
                        slack::start(core.clone(), sl.clone(), &sc).tasks
                    }))
                }
                SlackMode::Events => {
                    let started = slack::start(core.clone(), sl, sc);
                    Inbound::EveryNode(started.tasks, started.hook)
                }
            };
            run_channel(&core, &node, inbound, &mut tasks, &mut hooks);
            cores.insert("slack", core);
            tracing::info!(mode = ?sc.mode, "slack channel started");
        }
        if let Some(dc) = &cfg.discord {
            let discord = Arc::new(
                discord::Discord::new(dc).map_err(|e| ChannelError::Platform(e.to_string()))?,
            );
            // A thread is the conversation: a group never splits by member.
            let core = Core::new(
                discord.clone(),
                runtime.clone(),
                store.clone(),
                dc.allowed_users.clone(),
                GroupMode::Chat,
                cfg.tuning,
                format::chars,
            )
            .await?;
            // Messages always come over the Gateway (one per bot: the leader's); button
            // presses in HTTP mode are webhooks every node takes.
            let hook = discord::interaction_routes(core.clone(), discord.clone(), dc);
            let gateway = {
                let core = core.clone();
                Inbound::Led(Arc::new(move || {
                    discord::start(core.clone(), discord.clone())
                }))
            };
            run_channel(&core, &node, gateway, &mut tasks, &mut hooks);
            if let Some(h) = hook {
                hooks = hooks.merge(h);
            }
            cores.insert("discord", core);
            tracing::info!(mode = ?dc.mode, "discord channel started");
        }
        let api = api::pairing_routes(store, Arc::new(cores));
        Ok(Channels { tasks, hooks, api })
    }

    /// Webhook routes (`POST /hooks/...`): public, verified by the channels themselves.
    pub fn hook_routes(&self) -> axum::Router {
        self.hooks.clone()
    }

    /// The pairing API (`/api/v1/pairings...`): mount behind the bearer token.
    pub fn api_routes(&self) -> axum::Router {
        self.api.clone()
    }

    /// Stops every channel task (rows not yet sent stay in the outbox for next time).
    pub fn shutdown(self) {
        for t in self.tasks {
            t.abort();
        }
    }
}

/// Where a channel's inbound side runs.
enum Inbound {
    /// A connection the platform allows once per bot (polling, long connection, socket,
    /// gateway): started on the channel's leader, again for each leadership term.
    Led(leader::Start),
    /// Webhooks (their route and the workers behind it): on every node.
    EveryNode(Vec<tokio::task::JoinHandle<()>>, Option<axum::Router>),
}

/// Starts a channel's every-node part now and its leader's part under its lease.
fn run_channel(
    core: &SharedCore,
    node: &ClusterNode,
    inbound: Inbound,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
    hooks: &mut axum::Router,
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
    tasks.push(leader::lead(core.store.clone(), node.clone(), lease, term));
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

/// Equal contents, in time independent of where they differ.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}
