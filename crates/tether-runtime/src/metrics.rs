//! The runtime's Prometheus series (issue 31), named once here. Events are recorded
//! where they happen through the `metrics` facade (a no-op until the binary installs a
//! recorder); what is a count of the present (sessions, approvals pending, nodes,
//! leaders) is read when scraped ([`Runtime::refresh_gauges`]). Every series is listed
//! with its meaning in the README ("Operating tether").

use std::time::Duration;

use tether_proto::{ErrorCode, TurnStatus};

use crate::Runtime;

pub const TURNS: &str = "tether_turns_total";
pub const TURN_SECONDS: &str = "tether_turn_duration_seconds";
pub const TURN_OWN_SECONDS: &str = "tether_turn_own_seconds";
pub const APPROVAL_WAIT: &str = "tether_approval_wait_seconds";
pub const RESUMES: &str = "tether_resumes_total";
pub const TAKEOVERS: &str = "tether_takeovers_total";
pub const FORWARDED: &str = "tether_forwarded_commands_total";
pub const FORWARD_SECONDS: &str = "tether_forward_seconds";
pub const QUEUE_DEPTH: &str = "tether_queue_depth";
pub const APPROVALS_PENDING: &str = "tether_approvals_pending";
pub const QUESTIONS_PENDING: &str = "tether_questions_pending";
pub const SESSIONS: &str = "tether_sessions";
pub const LIVE_HERE: &str = "tether_live_sessions";
pub const AGENT_PROCESSES: &str = "tether_agent_processes";
pub const AGENT_RSS: &str = "tether_agent_rss_bytes";
pub const EVICTIONS: &str = "tether_pool_evictions_total";
pub const OUTBOX_BACKLOG: &str = "tether_outbox_backlog";
pub const OUTBOX_AGE: &str = "tether_outbox_oldest_age_seconds";
pub const DB_CONNECTIONS: &str = "tether_db_connections";
pub const FENCED: &str = "tether_fenced_writes_total";
pub const NODES: &str = "tether_cluster_nodes";
pub const OWNED: &str = "tether_owned_conversations";
pub const LEADER: &str = "tether_channel_leader";
pub const READY: &str = "tether_ready";
pub const DRAINING: &str = "tether_draining";

/// A turn ended: its agent, status (and error code when it failed), how long it took
/// and tether's own part of that (all but the agent's start and prompt time).
pub(crate) fn turn_ended(
    agent: &str,
    status: TurnStatus,
    code: Option<ErrorCode>,
    total: Duration,
    agent_time: Duration,
) {
    let code = code.map_or("", ErrorCode::as_str);
    metrics::counter!(TURNS, "agent" => agent.to_owned(), "outcome" => status.as_str(), "code" => code)
        .increment(1);
    metrics::histogram!(TURN_SECONDS, "agent" => agent.to_owned()).record(total.as_secs_f64());
    metrics::histogram!(TURN_OWN_SECONDS, "agent" => agent.to_owned())
        .record(total.saturating_sub(agent_time).as_secs_f64());
}

/// A strict resume of an agent session ended (`ok`: the agent came back in it).
pub(crate) fn resumed(agent: &str, ok: bool) {
    let outcome = if ok { "ok" } else { "failed" };
    metrics::counter!(RESUMES, "agent" => agent.to_owned(), "outcome" => outcome).increment(1);
}

/// An approval or question was decided (or expired) after `waited_ms`.
pub(crate) fn decided(kind: &'static str, waited_ms: i64) {
    metrics::histogram!(APPROVAL_WAIT, "kind" => kind).record(waited_ms.max(0) as f64 / 1000.0);
}

/// This node took over a conversation whose owner was gone.
pub(crate) fn took_over() {
    metrics::counter!(TAKEOVERS).increment(1);
}

/// A command was forwarded to another node and ended (`replied`, `rerouted`, `error`).
pub(crate) fn forwarded(outcome: &'static str, took: Duration) {
    metrics::counter!(FORWARDED, "outcome" => outcome).increment(1);
    metrics::histogram!(FORWARD_SECONDS).record(took.as_secs_f64());
}

impl Runtime {
    /// Sets the gauges that count the present (before a scrape renders them). Counts of
    /// the store are the cluster's (every node reports the same: aggregate with `max`);
    /// the pool, the connections, ownership and leadership are this node's. A store that
    /// does not answer leaves its gauges as they were and sets `tether_ready` to 0.
    pub async fn refresh_gauges(&self) {
        let ctx = self.ctx();
        let pool = self.pool_status();
        metrics::gauge!(LIVE_HERE, "state" => "busy").set(pool.busy as f64);
        metrics::gauge!(LIVE_HERE, "state" => "idle").set(pool.idle as f64);
        metrics::counter!(EVICTIONS).absolute(pool.evictions);
        let mut per_agent: std::collections::BTreeMap<&str, (usize, u64)> = Default::default();
        for p in &pool.processes {
            let e = per_agent.entry(p.agent.as_str()).or_default();
            e.0 += 1;
            e.1 += p.rss_bytes.unwrap_or(0);
        }
        for (agent, (n, rss)) in per_agent {
            metrics::gauge!(AGENT_PROCESSES, "agent" => agent.to_owned()).set(n as f64);
            metrics::gauge!(AGENT_RSS, "agent" => agent.to_owned()).set(rss as f64);
        }
        metrics::counter!(FENCED).absolute(ctx.store.fenced_writes());
        metrics::gauge!(DRAINING).set(if self.draining() { 1.0 } else { 0.0 });
        if let Ok(u) = ctx.store.pool_use().await {
            metrics::gauge!(DB_CONNECTIONS, "state" => "in_use").set(u.in_use as f64);
            metrics::gauge!(DB_CONNECTIONS, "state" => "idle")
                .set(u.size.saturating_sub(u.in_use) as f64);
        }
        let ready = ctx.store.ready().await.is_ok() && !self.draining();
        metrics::gauge!(READY).set(if ready { 1.0 } else { 0.0 });
        let now = ctx.clock.now_ms();
        if let Ok(c) = ctx.store.ops_counts().await {
            metrics::gauge!(QUEUE_DEPTH).set(c.queued_turns as f64);
            metrics::gauge!(APPROVALS_PENDING).set(c.pending_approvals as f64);
            metrics::gauge!(QUESTIONS_PENDING).set(c.pending_questions as f64);
            metrics::gauge!(SESSIONS, "status" => "live").set(c.live_sessions as f64);
            metrics::gauge!(SESSIONS, "status" => "dormant").set(c.dormant_sessions as f64);
            for b in &c.outbox {
                let age = b.oldest_created_at_ms.map_or(0, |t| (now - t).max(0));
                metrics::gauge!(OUTBOX_BACKLOG, "channel" => b.channel.clone())
                    .set(b.pending as f64);
                metrics::gauge!(OUTBOX_AGE, "channel" => b.channel.clone())
                    .set(age as f64 / 1000.0);
            }
        }
        self.refresh_cluster_gauges(now).await;
    }

    async fn refresh_cluster_gauges(&self, now: i64) {
        let store = &self.ctx().store;
        let me = self.placement().cluster().node_id().clone();
        if let Ok(nodes) = store.cluster().nodes().await {
            let alive = nodes.iter().filter(|n| n.alive(now)).count();
            metrics::gauge!(NODES).set(alive as f64);
        }
        if let Ok(counts) = store.cluster().owner_counts().await {
            let mine = counts
                .iter()
                .find(|(n, _)| n.as_str() == me.as_str())
                .map_or(0, |(_, c)| *c);
            metrics::gauge!(OWNED).set(mine as f64);
        }
        if let Ok(leaders) = store.cluster().leaders().await {
            for l in leaders {
                let Some(channel) = l.name.strip_prefix("channel:") else {
                    continue;
                };
                let leads = l.node_id.as_str() == me.as_str()
                    && l.lease_until_ms.is_some_and(|until| until > now);
                metrics::gauge!(LEADER, "channel" => channel.to_owned()).set(if leads {
                    1.0
                } else {
                    0.0
                });
            }
        }
    }
}
