//! The layout of `tether-channels` (docs/architecture.md, code map): no import circle
//! between its files, no file over 500 lines, and one durable intake: only `intake.rs`
//! records, marks and replays inbound deliveries (issue 27 item 3), every channel
//! through it.

use std::path::PathBuf;

fn src() -> PathBuf {
    tether_testkit::repo_root().join("crates/tether-channels/src")
}

mod layout;
use layout::*;

fn sources() -> std::io::Result<Sources> {
    sources_of(&src())
}

#[test]
fn the_channels_files_import_each_other_in_no_circle() {
    let graph = import_graph(&sources().unwrap());
    // The graph is read, not empty: the platforms import the intake.
    for platform in [
        "telegram/updates.rs",
        "slack/intake.rs",
        "discord/events.rs",
        "feishu/events.rs",
    ] {
        assert!(graph[platform].contains("intake.rs"), "{graph:?}");
    }
    assert!(graph["route.rs"].contains("chats.rs"), "{graph:?}");
    assert_eq!(a_circle(&graph), None);
}

#[test]
fn no_file_of_the_channels_is_over_500_lines() {
    for (f, text) in sources().unwrap() {
        let n = text.lines().count();
        assert!(n <= 500, "{f} has {n} lines");
    }
}

/// Accept → lane → handle → mark → replay is written once: no channel records, marks or
/// replays an inbound delivery by itself.
#[test]
fn only_the_intake_records_marks_and_replays_inbound_deliveries() {
    for (f, text) in sources().unwrap() {
        if f == "intake.rs" {
            continue;
        }
        let text = code(&text);
        for call in [
            "accept_inbound(",
            "mark_inbound_handled(",
            "unhandled_inbound(",
        ] {
            assert!(
                !text.contains(call),
                "{f} calls {call}..): go through crate::intake"
            );
        }
    }
}
