use std::sync::{Arc, Mutex};

use tether_proto::{EventEnvelope, EventPayload};
use tokio::sync::{broadcast, mpsc, watch};

use super::{Pump, pump, resume_point};

fn env(id: i64, conversation: &str) -> EventEnvelope {
    EventEnvelope {
        id,
        session_id: "s".into(),
        conversation_id: conversation.into(),
        seq: id,
        turn_id: None,
        at_ms: 0,
        payload: EventPayload::Status {
            text: format!("e{id}"),
        },
    }
}

/// A fake store of events plus the bus, appended in id order like the runtime does.
#[derive(Clone)]
struct Fake {
    events: Arc<Mutex<Vec<EventEnvelope>>>,
    bus: broadcast::Sender<EventEnvelope>,
}

impl Fake {
    fn new(cap: usize) -> Self {
        Fake {
            events: Arc::default(),
            bus: broadcast::channel(cap).0,
        }
    }

    fn append(&self, id: i64, conversation: &str) {
        let e = env(id, conversation);
        self.events.lock().unwrap().push(e.clone());
        let _ = self.bus.send(e);
    }

    fn fetch(
        &self,
    ) -> impl Fn(i64, u32) -> std::future::Ready<Result<Vec<EventEnvelope>, String>> + use<> {
        let events = self.events.clone();
        move |after, limit| {
            let page = events
                .lock()
                .unwrap()
                .iter()
                .filter(|e| e.conversation_id == "c" && e.id > after)
                .take(limit as usize)
                .cloned()
                .collect();
            std::future::ready(Ok(page))
        }
    }
}

async fn recv_ids(rx: &mut mpsc::Receiver<EventEnvelope>, n: usize) -> Vec<i64> {
    let mut ids = Vec::new();
    for _ in 0..n {
        let e = tokio::time::timeout(std::time::Duration::from_secs(5), rx.recv())
            .await
            .expect("timed out waiting for an event")
            .expect("stream ended early");
        ids.push(e.id);
    }
    ids
}

#[tokio::test]
async fn replays_in_pages_then_streams_live_without_duplicates() {
    let fake = Fake::new(64);
    for id in 1..=7 {
        fake.append(id, if id == 4 { "other" } else { "c" });
    }
    let rx = fake.bus.subscribe();
    // Appended after subscribing but possibly also read by the replay: sent once.
    fake.append(8, "c");
    let (tx, mut out) = mpsc::channel(4);
    let task = tokio::spawn(pump(
        Pump {
            rx,
            conversation_id: "c".into(),
            last: 2,
            page: 2,
        },
        fake.fetch(),
        tx,
        None,
    ));
    assert_eq!(recv_ids(&mut out, 5).await, vec![3, 5, 6, 7, 8]);
    fake.append(9, "other");
    fake.append(10, "c");
    assert_eq!(recv_ids(&mut out, 1).await, vec![10]);
    drop(out);
    fake.append(11, "c");
    tokio::time::timeout(std::time::Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn lagging_bus_rereads_the_store_without_gaps() {
    let fake = Fake::new(2);
    let rx = fake.bus.subscribe();
    let (tx, mut out) = mpsc::channel(1);
    let _task = tokio::spawn(pump(
        Pump {
            rx,
            conversation_id: "c".into(),
            last: 0,
            page: 3,
        },
        fake.fetch(),
        tx,
        None,
    ));
    // The pump blocks on the tiny output channel while the bus overflows.
    for id in 1..=20 {
        fake.append(id, "c");
    }
    let ids = recv_ids(&mut out, 20).await;
    assert_eq!(ids, (1..=20).collect::<Vec<_>>());
    fake.append(21, "c");
    assert_eq!(recv_ids(&mut out, 1).await, vec![21]);
}

#[tokio::test]
async fn closing_ends_the_stream() {
    let fake = Fake::new(8);
    let (closing_tx, closing_rx) = watch::channel(false);
    let (tx, mut out) = mpsc::channel(8);
    let task = tokio::spawn(pump(
        Pump {
            rx: fake.bus.subscribe(),
            conversation_id: "c".into(),
            last: 0,
            page: 10,
        },
        fake.fetch(),
        tx,
        Some(closing_rx),
    ));
    closing_tx.send(true).unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap();
    assert!(out.recv().await.is_none());
}

#[tokio::test]
async fn store_error_ends_the_stream() {
    let bus = broadcast::channel::<EventEnvelope>(8).0;
    let (tx, mut out) = mpsc::channel(8);
    let fetch = |_: i64, _: u32| std::future::ready(Err::<Vec<EventEnvelope>, _>("boom"));
    pump(
        Pump {
            rx: bus.subscribe(),
            conversation_id: "c".into(),
            last: 0,
            page: 10,
        },
        fetch,
        tx,
        None,
    )
    .await;
    assert!(out.recv().await.is_none());
}

#[test]
fn resume_point_prefers_last_event_id() {
    let mut h = axum::http::HeaderMap::new();
    assert_eq!(resume_point(&h, None).unwrap(), 0);
    assert_eq!(resume_point(&h, Some(5)).unwrap(), 5);
    h.insert("last-event-id", "42".parse().unwrap());
    assert_eq!(resume_point(&h, Some(5)).unwrap(), 42);
    h.insert("last-event-id", "nope".parse().unwrap());
    assert!(resume_point(&h, None).is_err());
}
