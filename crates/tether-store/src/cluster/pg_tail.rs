//! The PostgreSQL half of `crate::cluster::tail`: the notifier (this node's commits → `NOTIFY`),
//! the listener and the poll (other nodes' commits → this node's followers).

use std::collections::HashMap;
use std::time::Duration;

use sqlx::ConnectOptions;
use sqlx::postgres::{PgConnection, PgListener, PgPoolOptions};
use tether_proto::{ConversationId, EventEnvelope};
use tokio::sync::mpsc;

use super::{Db, rows};
use crate::Result;
use crate::cluster::tail::{CHANNEL, Committed, Notice, Outbound, TailHandle, TailOptions};

/// Events read per conversation per query.
const PAGE: i64 = 256;
/// How far back (by `updated_at`) the list poll looks: longer than a poll plus a commit,
/// and than the clock skew between nodes it tolerates.
const LIST_WINDOW_MS: i64 = 5_000;
/// The list poll runs every this many event polls (it scans conversations and sessions;
/// a list follows at a slower pace than a conversation anyway).
const LIST_POLL_EVERY: u64 = 4;
/// Notices sent in one statement at most.
const NOTICES_PER_SEND: usize = 512;

impl Db {
    /// Starts the notifier (with notices on) and the tail (see `crate::cluster::tail`).
    pub(crate) async fn start_tail(&self, options: TailOptions) -> Result<TailHandle> {
        let mut tasks = Vec::new();
        let mut listener = None;
        if options.notify {
            if let Some(rx) = self.shared.outbound.open(origin()) {
                tasks.push(tokio::spawn(notifier(self.clone(), rx)));
            }
            // A pool of one: sqlx's listener reconnects through it after a lost connection.
            let pool = PgPoolOptions::new()
                .max_connections(1)
                .max_lifetime(None)
                .idle_timeout(None)
                .connect_with((*self.opts).clone())
                .await?;
            let mut l = PgListener::connect_with(&pool).await?;
            l.listen(CHANNEL).await?;
            listener = Some(l);
        }
        tasks.push(tokio::spawn(self.clone().tail(listener, options.poll)));
        Ok(TailHandle::new(tasks))
    }

    /// The tail: notices as they come, a poll of every followed conversation every
    /// `poll`, and of the list every [`LIST_POLL_EVERY`] polls while anyone follows it.
    async fn tail(self, mut listener: Option<PgListener>, poll: Duration) {
        let mut tick = tokio::time::interval(poll);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut ticks: u64 = 0;
        let mut listed: HashMap<String, i64> = HashMap::new();
        loop {
            let notice = async {
                match listener.as_mut() {
                    Some(l) => l.recv().await.map(Some),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                got = notice => match got {
                    Ok(Some(n)) => self.on_notice(n.payload()).await,
                    Ok(None) => {}
                    Err(e) => {
                        // sqlx reconnects on the next `recv`; what was missed meanwhile
                        // the poll brings.
                        tracing::debug!(error = %e, "tail: the listener lost its connection");
                        tokio::time::sleep(poll).await;
                    }
                },
                _ = tick.tick() => {
                    ticks += 1;
                    if let Err(e) = self.poll_events().await {
                        tracing::debug!(error = %e, "tail: cannot poll events");
                    }
                    if ticks.is_multiple_of(LIST_POLL_EVERY)
                        && self.shared.changes.receiver_count() > 0
                        && let Err(e) = self.poll_list(&mut listed).await
                    {
                        tracing::debug!(error = %e, "tail: cannot poll the list");
                    }
                }
            }
        }
    }

    async fn on_notice(&self, payload: &str) {
        let Ok(n) = serde_json::from_str::<Notice>(payload) else {
            tracing::debug!(payload, "tail: a notice it cannot read");
            return;
        };
        if n.o == self.shared.outbound.origin() {
            return;
        }
        Outbound::count(&self.shared.outbound.notices_received, 1);
        let id = ConversationId::from(n.c);
        if n.l {
            self.shared.changed_here(&id);
        }
        if n.e > 0
            && self.shared.feed.cursor(&id).is_some_and(|c| c < n.e)
            && let Err(e) = self.tail_one(&id).await
        {
            tracing::debug!(error = %e, "tail: cannot read a conversation's events");
        }
    }

    /// Reads conversation `id`'s events after its topic's cursor and hands them on.
    pub(crate) async fn tail_one(&self, id: &ConversationId) -> Result<()> {
        while let Some(after) = self.shared.feed.cursor(id) {
            let rows = sqlx::query(super::rows::select_events!(
                "WHERE e.conversation_num = (SELECT num FROM conversations WHERE id = $1) \
                     AND e.id > $2 ORDER BY e.id LIMIT $3"
            ))
            .bind(id.as_str())
            .bind(after)
            .bind(PAGE)
            .fetch_all(&self.reader)
            .await?;
            let full = rows.len() as i64 == PAGE;
            let events = rows.iter().map(rows::event).collect::<Result<Vec<_>>>()?;
            self.hand_on(id, events);
            if !full {
                break;
            }
        }
        Ok(())
    }

    /// One query for every followed conversation: the events after each one's cursor.
    async fn poll_events(&self) -> Result<()> {
        let cursors = self.shared.feed.cursors();
        if cursors.is_empty() {
            return Ok(());
        }
        Outbound::count(&self.shared.outbound.polls, 1);
        let (ids, afters): (Vec<String>, Vec<i64>) = cursors
            .into_iter()
            .map(|(id, c)| (id.as_str().to_string(), c))
            .unzip();
        let rows = sqlx::query(
            "SELECT e.id, s.id AS session_id, s.conversation_id, e.seq, e.turn_id, e.at, \
             e.kind, e.payload FROM unnest($1::text[], $2::bigint[]) AS f(conv, after) \
             JOIN conversations c ON c.id = f.conv \
             CROSS JOIN LATERAL (SELECT * FROM events WHERE conversation_num = c.num \
             AND id > f.after ORDER BY id LIMIT $3) e \
             JOIN sessions s ON s.num = e.session_num ORDER BY s.conversation_id, e.id",
        )
        .bind(ids)
        .bind(afters)
        .bind(PAGE)
        .fetch_all(&self.reader)
        .await?;
        let mut by_conv: Vec<(ConversationId, Vec<EventEnvelope>)> = Vec::new();
        for row in &rows {
            let e = rows::event(row)?;
            match by_conv.last_mut() {
                Some((c, events)) if *c == e.conversation_id => events.push(e),
                _ => by_conv.push((e.conversation_id.clone(), vec![e])),
            }
        }
        for (id, events) in by_conv {
            let full = events.len() as i64 == PAGE;
            self.hand_on(&id, events);
            if full {
                self.tail_one(&id).await?;
            }
        }
        Ok(())
    }

    fn hand_on(&self, id: &ConversationId, events: Vec<EventEnvelope>) {
        let n = self.shared.feed.publish_remote(id, events);
        Outbound::count(&self.shared.outbound.events_tailed, n as u64);
    }

    /// Conversations whose row or one of whose sessions changed lately: a list change
    /// for this node's list followers when the stamp differs from the last one seen.
    async fn poll_list(&self, seen: &mut HashMap<String, i64>) -> Result<()> {
        let since = self.now_ms() - LIST_WINDOW_MS;
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT c.id, GREATEST(c.updated_at, COALESCE(s.at, 0)) FROM conversations c \
             LEFT JOIN (SELECT conversation_id, MAX(updated_at) AS at FROM sessions \
             WHERE updated_at > $1 GROUP BY conversation_id) s ON s.conversation_id = c.id \
             WHERE c.updated_at > $1 OR s.at IS NOT NULL",
        )
        .bind(since)
        .fetch_all(&self.reader)
        .await?;
        for (id, at) in rows {
            if seen.get(&id) != Some(&at) {
                self.shared.changed_here(&ConversationId::from(id.clone()));
                seen.insert(id, at);
            }
        }
        seen.retain(|_, at| *at > since);
        Ok(())
    }
}

/// This store's id in notices: distinct per process (pid and start time), which is all
/// it needs (a clash would only make a node ignore another's notices; the poll delivers).
fn origin() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    nanos ^ (u64::from(std::process::id()) << 40)
}

/// Sends what the commit path queued, merged per conversation, in one statement per
/// wake-up, on a connection of its own (reconnecting after an error).
async fn notifier(db: Db, mut rx: mpsc::UnboundedReceiver<Committed>) {
    let origin = db.shared.outbound.origin();
    let mut conn: Option<PgConnection> = None;
    while let Some(first) = rx.recv().await {
        let mut merged: HashMap<ConversationId, (i64, bool)> = HashMap::new();
        let mut add = |c: Committed| match c {
            Committed::Events(id, last) => {
                let entry = merged.entry(id).or_default();
                entry.0 = entry.0.max(last);
            }
            Committed::Changed(id) => merged.entry(id).or_default().1 = true,
        };
        add(first);
        while let Ok(more) = rx.try_recv() {
            add(more);
        }
        let payloads: Vec<String> = merged
            .into_iter()
            .filter_map(|(id, (e, l))| {
                serde_json::to_string(&Notice {
                    o: origin,
                    c: id.as_str().to_string(),
                    e,
                    l,
                })
                .ok()
            })
            .collect();
        for chunk in payloads.chunks(NOTICES_PER_SEND) {
            if conn.is_none() {
                conn = db.opts.connect().await.ok();
            }
            let Some(c) = conn.as_mut() else {
                tracing::debug!("tail: no connection to send notices on; the poll delivers");
                break;
            };
            let sent = sqlx::query("SELECT pg_notify($1, p) FROM unnest($2::text[]) AS t(p)")
                .bind(CHANNEL)
                .bind(chunk)
                .execute(&mut *c)
                .await;
            match sent {
                Ok(_) => Outbound::count(&db.shared.outbound.notices_sent, chunk.len() as u64),
                Err(e) => {
                    tracing::debug!(error = %e, "tail: cannot send notices; the poll delivers");
                    conn = None;
                }
            }
        }
    }
}
