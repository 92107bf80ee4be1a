//! The layout of `tether-runtime` shows its design (docs/architecture.md, code map):
//! `session/` and `delegation/`, no file over 500 lines, no import circle between its
//! files, commands to a session actor built only inside `session/` (one typed handle, one
//! time-out policy), a turn's end built only by `TurnEnding`, time read only from the
//! `Clock`, and every mutating call through `Runtime::call`.

use std::path::PathBuf;

fn src() -> PathBuf {
    tether_testkit::repo_root().join("crates/tether-runtime/src")
}

mod layout;
use layout::*;

fn sources() -> std::io::Result<Sources> {
    sources_of(&src())
}

#[test]
fn the_runtime_is_in_two_modules_session_and_delegation() {
    let all = sources().unwrap();
    for f in [
        "session/actor/mod.rs",
        "session/handle.rs",
        "session/mailbox.rs",
        "session/actors.rs",
        "session/router.rs",
        "session/routing.rs",
        "session/pool.rs",
        "session/ending.rs",
        "delegation/mod.rs",
        "delegation/registry.rs",
        "delegation/continuation.rs",
        "delegation/close.rs",
        "delegation/status.rs",
        "delegation/watch.rs",
    ] {
        assert!(all.contains_key(f), "{f} is missing: {:?}", all.keys());
    }
}

#[test]
fn no_file_of_the_runtime_is_over_500_lines() {
    for (f, text) in sources().unwrap() {
        let n = text.lines().count();
        assert!(n <= 500, "{f} has {n} lines");
    }
}

#[test]
fn the_runtimes_files_import_each_other_in_no_circle() {
    let graph = import_graph(&sources().unwrap());
    // The graph is read, not empty: the actor's parts import the actor.
    assert!(
        graph["session/actor/turn.rs"].contains("session/actor/mod.rs"),
        "{graph:?}"
    );
    assert!(graph["api.rs"].contains("ctx.rs"), "{graph:?}");
    assert_eq!(a_circle(&graph), None);
}

#[test]
fn only_the_session_module_builds_actor_commands_and_replies() {
    let all = sources().unwrap();
    for (f, text) in all.iter().filter(|(f, _)| !f.starts_with("session/")) {
        let text = code(text);
        for word in ["ActorCmd", "oneshot"] {
            assert!(
                !text.contains(word),
                "{f} uses {word}: talk to a session actor through session::handle"
            );
        }
    }
}

#[test]
fn only_turn_ending_builds_the_end_of_a_turn() {
    let all = sources().unwrap();
    for (f, text) in all
        .iter()
        .filter(|(f, _)| f.as_str() != "session/ending.rs")
    {
        let text = code(text);
        for built in [
            "TurnEnd {",
            "TurnFailed {",
            "TurnCompleted {",
            "TurnCancelled {",
        ] {
            assert!(
                !text.contains(built),
                "{f} builds `{built}` by hand: use session::ending::TurnEnding"
            );
        }
    }
}

/// No crate decides anything by the store backend's name (issue 27 item 2): whether the
/// store is one node's or a cluster's is `Store::topology`, a type; the name is only
/// for people (logs, `doctor`, the cluster view).
#[test]
fn nothing_compares_the_store_backends_name() {
    let crates = tether_testkit::repo_root().join("crates");
    let mut all = Sources::new();
    rust_files(&crates, &crates, &mut all).unwrap();
    let compared: Vec<&String> = all
        .iter()
        .filter(|(path, _)| path.contains("/src/"))
        .filter(|(_, text)| {
            text.contains("backend_name() ==") || text.contains("backend_name() !=")
        })
        .map(|(path, _)| path)
        .collect();
    assert!(
        compared.is_empty(),
        "compare Store::topology() instead: {compared:?}"
    );
}

/// Wall-clock time in the runtime comes from its `Clock` (issue 27 item 2), so leases,
/// placement, presence and deadlines run on the clock an in-process test sets: no
/// `now_ms()` function call outside `seams.rs` (the system clock), only `.now_ms()` on
/// a clock.
#[test]
fn the_runtime_reads_the_time_only_from_its_clock() {
    let all = sources().unwrap();
    for (f, text) in all.iter().filter(|(f, _)| f.as_str() != "seams.rs") {
        let text = code(text);
        let bare = text
            .match_indices("now_ms()")
            .filter(|(i, _)| !text[..*i].ends_with('.'))
            .count();
        assert_eq!(bare, 0, "{f} calls now_ms() instead of its Clock");
        assert!(
            !text.contains("tether_store::now_ms") && !text.contains("SystemTime::now"),
            "{f} reads the system clock instead of its Clock"
        );
    }
}

/// Every mutating call goes through `Runtime::call` (issue 27 item 1): only the
/// dispatcher and the placement run a call here, and only `call.rs` defines commands.
#[test]
fn every_command_runs_through_runtime_call() {
    let all = sources().unwrap();
    for (f, text) in &all {
        let text = code(text);
        if !matches!(f.as_str(), "dispatch.rs" | "cluster/routed.rs") {
            assert!(
                !text.contains(".run_here(") && !text.contains(".routed("),
                "{f} runs a call around Runtime::call"
            );
        }
        if f != "call.rs" {
            assert!(
                !text.contains("enum Command "),
                "{f} defines commands outside call.rs"
            );
        }
    }
}

/// The runtime's methods are its facade, in one file (issue 27 item 1): the work is done
/// by services (`Conversations`, `Router`, `Delegations`, `Attachments`, `Placement`,
/// `Feed`, `Dispatch`), each a view of the runtime in its own module, so a feature adds
/// a service or a method on one, never another `impl Runtime` somewhere.
#[test]
fn only_the_facade_holds_impl_runtime() {
    let all = sources().unwrap();
    let holders: Vec<&String> = all
        .iter()
        .filter(|(_, text)| code(text).lines().any(|l| l.starts_with("impl Runtime {")))
        .map(|(f, _)| f)
        .collect();
    assert_eq!(holders, vec!["api.rs"], "impl Runtime outside the facade");
}
