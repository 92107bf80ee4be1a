//! Per-chat lanes: one task per chat, so a chat's messages are handled in arrival order
//! while a slow chat never holds up the others; a lane that stays idle ends, so chats
//! that wrote once (unknown senders) cost no task afterwards.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use tokio::sync::mpsc;

/// How long a chat's lane task waits for its next message before it ends (the next
/// message starts a new one): chats that wrote once, such as unknown senders, cost
/// nothing after that.
const LANE_IDLE: Duration = Duration::from_secs(60);

/// Runs `handler` for each item: one task per chat lane (`key`), so a chat's messages
/// are handled in arrival order while a slow chat never holds up the others. A lane ends
/// after [`LANE_IDLE`] without messages and is dropped from the table.
pub(crate) async fn run_lanes<T, F, Fut>(rx: mpsc::UnboundedReceiver<(String, T)>, handler: F)
where
    T: Send + 'static,
    F: Fn(T) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    run_lanes_idle(rx, handler, LANE_IDLE).await;
}

/// A lane: its queue and its task (a successor waits for it, so order holds even while
/// an idle lane is finishing).
struct Lane<T> {
    tx: mpsc::UnboundedSender<T>,
    task: tokio::task::JoinHandle<()>,
}

async fn run_lanes_idle<T, F, Fut>(
    mut rx: mpsc::UnboundedReceiver<(String, T)>,
    handler: F,
    idle: Duration,
) where
    T: Send + 'static,
    F: Fn(T) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut lanes: HashMap<String, Lane<T>> = HashMap::new();
    let mut sweep = tokio::time::interval(idle);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let (key, item) = tokio::select! {
            next = rx.recv() => match next {
                Some(next) => next,
                None => break,
            },
            _ = sweep.tick() => {
                lanes.retain(|_, lane| !lane.task.is_finished());
                continue;
            }
        };
        let (item, before) = match lanes.remove(&key) {
            Some(lane) => match lane.tx.send(item) {
                Ok(()) => {
                    lanes.insert(key, lane);
                    continue;
                }
                // The lane went idle and closed: a new one, after it.
                Err(back) => (back.0, Some(lane.task)),
            },
            None => (item, None),
        };
        let (tx, lane) = mpsc::unbounded_channel::<T>();
        let _ = tx.send(item);
        let task = tokio::spawn(lane_task(lane, handler.clone(), idle, before));
        lanes.insert(key, Lane { tx, task });
    }
}

async fn lane_task<T, F, Fut>(
    mut lane: mpsc::UnboundedReceiver<T>,
    handler: F,
    idle: Duration,
    before: Option<tokio::task::JoinHandle<()>>,
) where
    F: Fn(T) -> Fut,
    Fut: Future<Output = ()>,
{
    if let Some(before) = before {
        let _ = before.await;
    }
    loop {
        match tokio::time::timeout(idle, lane.recv()).await {
            Ok(Some(item)) => handler(item).await,
            Ok(None) => return,
            Err(_) => {
                // Refuse new items, then finish the ones that slipped in meanwhile.
                lane.close();
                while let Some(item) = lane.recv().await {
                    handler(item).await;
                }
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    #[tokio::test]
    async fn lanes_keep_order_within_a_chat_and_do_not_block_each_other() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::unbounded_channel();
        let handler = {
            let seen = seen.clone();
            move |(lane, n, wait): (&'static str, u32, u64)| {
                let seen = seen.clone();
                async move {
                    tokio::time::sleep(Duration::from_millis(wait)).await;
                    seen.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((lane, n));
                }
            }
        };
        let runner = tokio::spawn(run_lanes(rx, handler));
        for (lane, n, wait) in [
            ("slow", 1, 300),
            ("slow", 2, 0),
            ("fast", 1, 0),
            ("fast", 2, 0),
        ] {
            let _ = tx.send((lane.to_string(), (lane, n, wait)));
        }
        tokio::time::timeout(Duration::from_secs(5), async {
            while seen.lock().unwrap_or_else(|e| e.into_inner()).len() < 4 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("lanes did not finish"));
        let seen = seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
        assert_eq!(seen, [("fast", 1), ("fast", 2), ("slow", 1), ("slow", 2)]);
        runner.abort();
    }

    #[tokio::test]
    async fn idle_lanes_end_and_a_later_message_starts_a_new_one_in_order() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::unbounded_channel();
        // Every live lane task holds a clone of the handler, so of `seen`.
        let handler = {
            let seen = seen.clone();
            move |n: u32| {
                let seen = seen.clone();
                async move {
                    seen.lock().unwrap_or_else(|e| e.into_inner()).push(n);
                }
            }
        };
        let idle = Duration::from_millis(100);
        let runner = tokio::spawn(run_lanes_idle(rx, handler, idle));
        for (lane, n) in [("a", 1), ("b", 2), ("c", 3)] {
            let _ = tx.send((lane.to_string(), n));
        }
        let wait = |what: &'static str, f: Box<dyn Fn() -> bool + Send>| async move {
            tokio::time::timeout(Duration::from_secs(5), async {
                while !f() {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
            .await
            .unwrap_or_else(|_| panic!("{what}"));
        };
        let counted = seen.clone();
        // Test + dispatcher's handler + three lanes.
        wait(
            "three lanes run",
            Box::new(move || counted.lock().unwrap_or_else(|e| e.into_inner()).len() == 3),
        )
        .await;
        let counted = seen.clone();
        wait(
            "idle lanes end",
            Box::new(move || Arc::strong_count(&counted) == 3),
        )
        .await;
        let _ = tx.send(("a".to_string(), 4));
        let _ = tx.send(("a".to_string(), 5));
        let counted = seen.clone();
        wait(
            "a new lane for a",
            Box::new(move || counted.lock().unwrap_or_else(|e| e.into_inner()).len() == 5),
        )
        .await;
        let got = seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
        assert_eq!(&got[3..], [4, 5]);
        runner.abort();
    }
}
