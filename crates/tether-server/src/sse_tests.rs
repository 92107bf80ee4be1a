//! The SSE encoding and the resume point. Following (replay, live, lagging) is tested on
//! the feed itself (`tether-store/tests/feed.rs`) and end to end (`api_streaming`).

use tether_proto::{EventEnvelope, EventPayload};

use std::time::Duration;

use tokio::time::Instant;

use super::{BUDGET, BURST, Pace, RATE_FLOOR, encode, resume_point};

/// The share of each of 1 000 streams of one conversation.
const RATE: f64 = BUDGET / 1000.0;

fn env(id: i64, text: &str) -> EventEnvelope {
    EventEnvelope {
        id,
        session_id: "s".into(),
        conversation_id: "c".into(),
        seq: id,
        turn_id: None,
        at_ms: 0,
        payload: EventPayload::Status { text: text.into() },
    }
}

#[test]
fn each_event_is_one_sse_message_with_its_id_type_and_envelope() {
    let events = [env(7, "line one\nline two"), env(9, "b")];
    let text = String::from_utf8(encode(&events).to_vec()).unwrap();
    let messages: Vec<&str> = text.split_terminator("\n\n").collect();
    assert_eq!(messages.len(), 2, "{text:?}");
    for (msg, want) in messages.iter().zip(&events) {
        let lines: Vec<&str> = msg.lines().collect();
        assert_eq!(
            lines.len(),
            3,
            "a newline in the data would split it: {msg:?}"
        );
        assert_eq!(lines[0], format!("id: {}", want.id));
        assert_eq!(lines[1], "event: status");
        let data = lines[2].strip_prefix("data: ").unwrap();
        let got: EventEnvelope = serde_json::from_str(data).unwrap();
        assert_eq!(&got, want);
    }
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

#[test]
fn a_burst_goes_at_once_then_writes_keep_the_rate() {
    let t0 = Instant::now();
    let mut pace = Pace::new(t0);
    pace.share(1000, t0);
    for _ in 0..BURST as usize {
        assert_eq!(pace.due(t0), t0, "a write of the burst waits");
        pace.spend(t0);
    }
    let gap = Duration::from_secs_f64(1.0 / RATE);
    let due = pace.due(t0);
    assert!(
        due > t0 + gap - Duration::from_micros(10) && due <= t0 + gap,
        "after the burst the next write is one gap away: {:?}",
        due - t0
    );
    pace.spend(due);
    // Half a gap later the next one waits the other half.
    let half = due + gap / 2;
    let next = pace.due(half);
    assert!(next > half && next <= due + gap, "{:?}", next - half);
}

#[test]
fn an_idle_stream_gets_its_burst_back() {
    let t0 = Instant::now();
    let mut pace = Pace::new(t0);
    pace.share(1000, t0);
    for _ in 0..BURST as usize {
        pace.spend(t0);
    }
    assert!(pace.due(t0) > t0);
    let later = t0 + Duration::from_secs_f64(BURST / RATE);
    for _ in 0..BURST as usize {
        assert_eq!(pace.due(later), later);
        pace.spend(later);
    }
    assert!(pace.due(later) > later, "the burst is at most BURST writes");
}

#[test]
fn a_stream_alone_on_its_conversation_is_not_held_back() {
    let t0 = Instant::now();
    let mut pace = Pace::new(t0);
    for _ in 0..BURST as usize {
        pace.spend(t0);
    }
    pace.share(1, t0);
    let wait = pace.due(t0) - t0;
    assert!(
        wait <= Duration::from_secs_f64(1.0 / BUDGET),
        "one follower has the whole budget: {wait:?}"
    );
    assert!(!pace.share_is_old(t0));
    assert!(pace.share_is_old(t0 + Duration::from_millis(100)));
    // However many follow, a stream keeps the floor.
    pace.share(1_000_000, t0);
    let wait = pace.due(t0) - t0;
    assert!(
        wait <= Duration::from_secs_f64(1.0 / RATE_FLOOR),
        "{wait:?}"
    );
    assert!(wait > Duration::from_secs_f64(0.5 / RATE_FLOOR), "{wait:?}");
}
