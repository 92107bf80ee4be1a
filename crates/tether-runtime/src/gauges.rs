//! The gauges a scrape reads (issue 31): what is there now, set just before the
//! exporter renders (see `metrics.rs` for the names and the events).

use ::metrics as metrics_rs;

use crate::drain::Ops;
use crate::metrics::*;

impl Ops<'_> {
    /// Sets the gauges that count the present (before a scrape renders them). Counts of
    /// the store are the cluster's (every node reports the same: aggregate with `max`);
    /// the pool, the connections, ownership and leadership are this node's. A store that
    /// does not answer leaves its gauges as they were and sets `tether_ready` to 0.
    pub async fn refresh_gauges(self) {
        let ctx = self.rt.ctx();
        let pool = self.rt.pool_status();
        metrics_rs::gauge!(LIVE_HERE, "state" => "busy").set(pool.busy as f64);
        metrics_rs::gauge!(LIVE_HERE, "state" => "idle").set(pool.idle as f64);
        metrics_rs::counter!(EVICTIONS).absolute(pool.evictions);
        let mut per_agent: std::collections::BTreeMap<&str, (usize, u64)> = Default::default();
        for p in &pool.processes {
            let e = per_agent.entry(p.agent.as_str()).or_default();
            e.0 += 1;
            e.1 += p.rss_bytes.unwrap_or(0);
        }
        for (agent, (n, rss)) in per_agent {
            metrics_rs::gauge!(AGENT_PROCESSES, "agent" => agent.to_owned()).set(n as f64);
            metrics_rs::gauge!(AGENT_RSS, "agent" => agent.to_owned()).set(rss as f64);
        }
        metrics_rs::counter!(FENCED).absolute(ctx.store.fenced_writes());
        metrics_rs::gauge!(DRAINING).set(if self.draining() { 1.0 } else { 0.0 });
        if let Ok(u) = ctx.store.pool_use().await {
            metrics_rs::gauge!(DB_CONNECTIONS, "state" => "in_use").set(u.in_use as f64);
            metrics_rs::gauge!(DB_CONNECTIONS, "state" => "idle")
                .set(u.size.saturating_sub(u.in_use) as f64);
        }
        let ready = ctx.store.ready().await.is_ok() && !self.draining();
        metrics_rs::gauge!(READY).set(if ready { 1.0 } else { 0.0 });
        let now = ctx.clock.now_ms();
        if let Ok(c) = ctx.store.ops_counts().await {
            metrics_rs::gauge!(QUEUE_DEPTH).set(c.queued_turns as f64);
            metrics_rs::gauge!(APPROVALS_PENDING).set(c.pending_approvals as f64);
            metrics_rs::gauge!(QUESTIONS_PENDING).set(c.pending_questions as f64);
            metrics_rs::gauge!(SESSIONS, "status" => "live").set(c.live_sessions as f64);
            metrics_rs::gauge!(SESSIONS, "status" => "dormant").set(c.dormant_sessions as f64);
            for b in &c.outbox {
                let age = b.oldest_created_at_ms.map_or(0, |t| (now - t).max(0));
                metrics_rs::gauge!(OUTBOX_BACKLOG, "channel" => b.channel.clone())
                    .set(b.pending as f64);
                metrics_rs::gauge!(OUTBOX_AGE, "channel" => b.channel.clone())
                    .set(age as f64 / 1000.0);
            }
        }
        self.refresh_cluster_gauges(now).await;
    }

    async fn refresh_cluster_gauges(self, now: i64) {
        let store = &self.rt.ctx().store;
        let me = self.rt.placement().cluster().node_id().clone();
        if let Ok(nodes) = store.cluster().nodes().await {
            let alive = nodes.iter().filter(|n| n.alive(now)).count();
            metrics_rs::gauge!(NODES).set(alive as f64);
        }
        if let Ok(counts) = store.cluster().owner_counts().await {
            let mine = counts
                .iter()
                .find(|(n, _)| n.as_str() == me.as_str())
                .map_or(0, |(_, c)| *c);
            metrics_rs::gauge!(OWNED).set(mine as f64);
        }
        if let Ok(leaders) = store.cluster().leaders().await {
            for l in leaders {
                let Some(channel) = l.name.strip_prefix("channel:") else {
                    continue;
                };
                let leads = l.node_id.as_str() == me.as_str()
                    && l.lease_until_ms.is_some_and(|until| until > now);
                metrics_rs::gauge!(LEADER, "channel" => channel.to_owned()).set(if leads {
                    1.0
                } else {
                    0.0
                });
            }
        }
    }
}
