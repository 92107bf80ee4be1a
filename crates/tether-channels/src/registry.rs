//! The channel registry: one factory per platform, which `Channels::start` runs in turn.
//! A factory builds its adapter and its [`Core`] when the platform is configured, and
//! says where its inbound side runs ([`Inbound`]): on the channel's leader (a connection
//! the platform allows once per bot) or on every node (webhooks).

use std::sync::Arc;

use futures::future::BoxFuture;
use tether_runtime::Runtime;
use tether_store::Store;

use crate::config::{ChannelsConfig, FeishuMode, GroupMode, SlackMode, TelegramMode};
use crate::core::{Core, SharedCore};
use crate::{ChannelError, discord, feishu, format, leader, slack, telegram};

/// What every factory is given.
pub(crate) struct Ctx<'a> {
    pub runtime: &'a Runtime,
    pub store: &'a Store,
    pub cfg: &'a ChannelsConfig,
}

/// Where a channel's inbound side runs.
pub(crate) enum Inbound {
    /// A connection the platform allows once per bot (polling, long connection, socket,
    /// gateway): started on the channel's leader, again for each leadership term.
    Led(leader::Start),
    /// Webhooks (their route and the workers behind it): on every node.
    EveryNode(Vec<tokio::task::JoinHandle<()>>, Option<axum::Router>),
}

/// A configured channel, built and ready to run.
pub(crate) struct Adapter {
    pub core: SharedCore,
    pub inbound: Inbound,
    /// A route every node serves besides the inbound side's (Discord's interactions).
    pub extra_hook: Option<axum::Router>,
    /// What the log says once it runs, and the mode it runs in (if it has modes).
    pub started: &'static str,
    pub mode: Option<String>,
}

/// Builds one platform's channel; `None` when it is not configured.
pub(crate) type Factory = for<'a> fn(&'a Ctx<'a>) -> BoxFuture<'a, Built>;

pub(crate) type Built = Result<Option<Adapter>, ChannelError>;

/// Every platform's factory, in the order the channels start.
pub(crate) const FACTORIES: [Factory; 4] = [
    |ctx| Box::pin(telegram_channel(ctx)),
    |ctx| Box::pin(feishu_channel(ctx)),
    |ctx| Box::pin(slack_channel(ctx)),
    |ctx| Box::pin(discord_channel(ctx)),
];

fn platform_error(e: impl std::fmt::Display) -> ChannelError {
    ChannelError::Platform(e.to_string())
}

async fn telegram_channel(ctx: &Ctx<'_>) -> Built {
    let Some(tc) = &ctx.cfg.telegram else {
        return Ok(None);
    };
    let tg = Arc::new(telegram::Telegram::new(tc).map_err(platform_error)?);
    let core = Core::new(
        tg.clone(),
        ctx.runtime.clone(),
        ctx.store.clone(),
        tc.allowed_users.clone(),
        tc.group_mode,
        ctx.cfg.tuning,
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
    Ok(Some(Adapter {
        core,
        inbound,
        extra_hook: None,
        started: "telegram channel started",
        mode: Some(format!("{:?}", tc.mode)),
    }))
}

async fn feishu_channel(ctx: &Ctx<'_>) -> Built {
    let Some(fc) = &ctx.cfg.feishu else {
        return Ok(None);
    };
    let fs = Arc::new(feishu::Feishu::new(fc).map_err(platform_error)?);
    let core = Core::new(
        fs,
        ctx.runtime.clone(),
        ctx.store.clone(),
        fc.allowed_users.clone(),
        fc.group_mode,
        ctx.cfg.tuning,
        format::chars,
    )
    .await?;
    let (inbound, started) = match fc.mode {
        FeishuMode::LongConnection => {
            let (core, fc) = (core.clone(), Arc::new(fc.clone()));
            let start = Arc::new(move || feishu::start(core.clone(), &fc).tasks);
            let why = "feishu channel started (long connection, no public URL)";
            (Inbound::Led(start), why)
        }
        FeishuMode::Webhook => {
            let started = feishu::start(core.clone(), fc);
            let why = "feishu channel started (webhook mode: POST /hooks/feishu)";
            (Inbound::EveryNode(started.tasks, started.hook), why)
        }
    };
    Ok(Some(Adapter {
        core,
        inbound,
        extra_hook: None,
        started,
        mode: None,
    }))
}

async fn slack_channel(ctx: &Ctx<'_>) -> Built {
    let Some(sc) = &ctx.cfg.slack else {
        return Ok(None);
    };
    let sl = Arc::new(slack::Slack::new(sc).map_err(platform_error)?);
    let core = Core::new(
        sl.clone(),
        ctx.runtime.clone(),
        ctx.store.clone(),
        sc.allowed_users.clone(),
        sc.group_mode,
        ctx.cfg.tuning,
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
    Ok(Some(Adapter {
        core,
        inbound,
        extra_hook: None,
        started: "slack channel started",
        mode: Some(format!("{:?}", sc.mode)),
    }))
}

async fn discord_channel(ctx: &Ctx<'_>) -> Built {
    let Some(dc) = &ctx.cfg.discord else {
        return Ok(None);
    };
    let discord = Arc::new(discord::Discord::new(dc).map_err(platform_error)?);
    // A thread is the conversation: a group never splits by member.
    let core = Core::new(
        discord.clone(),
        ctx.runtime.clone(),
        ctx.store.clone(),
        dc.allowed_users.clone(),
        GroupMode::Chat,
        ctx.cfg.tuning,
        format::chars,
    )
    .await?;
    // Messages always come over the Gateway (one per bot: the leader's); button
    // presses in HTTP mode are webhooks every node takes.
    let extra_hook = discord::interaction_routes(core.clone(), discord.clone(), dc);
    let gateway = {
        let core = core.clone();
        Inbound::Led(Arc::new(move || {
            discord::start(core.clone(), discord.clone())
        }))
    };
    Ok(Some(Adapter {
        core,
        inbound: gateway,
        extra_hook,
        started: "discord channel started",
        mode: Some(format!("{:?}", dc.mode)),
    }))
}
