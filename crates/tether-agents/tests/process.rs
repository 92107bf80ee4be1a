//! Process supervision: explicit environment, stderr tail, exit watch, and a shutdown that
//! escalates to SIGKILL for a group that ignores SIGTERM.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use tether_agents::process::{AgentProcess, ProcessSpec};
use tokio::io::{AsyncBufReadExt, BufReader};

const LIMIT: Duration = Duration::from_secs(20);

fn sh(script: &str, env: &[(&str, &str)]) -> ProcessSpec {
    ProcessSpec {
        agent: "sh".to_owned(),
        program: "sh".to_owned(),
        args: vec!["-c".to_owned(), script.to_owned()],
        pass_env: Vec::new(),
        records: None,
        ceiling: None,
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>(),
        cwd: std::env::temp_dir(),
    }
}

/// Running (not a zombie).
fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

#[tokio::test]
async fn environment_is_explicit_and_group_is_killed() {
    let script = "trap '' TERM; sleep 30 & echo \"$! sandbox=$IS_SANDBOX extra=$EXTRA \
                  manifest=$CARGO_MANIFEST_DIR pwd=$(pwd)\"; echo oops >&2; wait";
    let spawned = AgentProcess::spawn(&sh(script, &[("EXTRA", "yes")])).unwrap();
    let process = spawned.process;
    let mut stdout = BufReader::new(spawned.stdout).lines();
    let line = tokio::time::timeout(LIMIT, stdout.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let (sleeper, rest) = line.split_once(' ').unwrap();
    let sleeper: u32 = sleeper.parse().unwrap();
    let tmp = std::env::temp_dir();
    assert_eq!(
        rest,
        format!("sandbox= extra=yes manifest= pwd={}", tmp.display())
    );
    assert!(process.is_alive());
    assert!(running(sleeper));

    // stdin is still open here; the shell ignores SIGTERM, so only SIGKILL ends it.
    drop(spawned.stdin);
    let info = tokio::time::timeout(LIMIT, process.shutdown_with(Duration::from_millis(100)))
        .await
        .unwrap();
    assert_eq!(info.signal, Some(9), "{info:?}");
    assert!(!process.is_alive());
    assert!(process.stderr_tail().snapshot().contains("oops"));
    for _ in 0..100 {
        if !running(sleeper) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!running(sleeper), "group member survived");
}

#[tokio::test]
async fn exit_is_published_with_the_stderr_tail() {
    let script = "i=0; while [ $i -lt 100 ]; do echo \"line $i\" >&2; i=$((i+1)); done; exit 7";
    let spawned = AgentProcess::spawn(&sh(script, &[])).unwrap();
    let process = spawned.process;
    let mut exit = process.exit_watch();
    tokio::time::timeout(LIMIT, exit.wait_for(Option::is_some))
        .await
        .unwrap()
        .unwrap();
    let (status, tail) = tokio::time::timeout(LIMIT, process.crash_report(LIMIT))
        .await
        .unwrap();
    assert_eq!(status, "exit status: 7");
    let lines: Vec<&str> = tail.lines().collect();
    assert_eq!(lines.len(), 40);
    assert_eq!(lines.last(), Some(&"line 99"));
    assert_eq!(process.exit_info().and_then(|i| i.code), Some(7));
}

/// Issue 24 S6: a process holds its ceiling slot until it has ended and been reaped.
#[tokio::test]
async fn a_process_holds_its_ceiling_slot_until_reaped() {
    let ceiling = tether_agents::ProcessCeiling::new(1);
    let spec = ProcessSpec {
        ceiling: Some(ceiling.clone()),
        ..sh("sleep 30", &[])
    };
    let first = AgentProcess::spawn(&spec).unwrap();
    assert_eq!(ceiling.running(), 1);
    match AgentProcess::spawn(&spec) {
        Err(tether_agents::AgentError::ProcessCeiling { limit: 1 }) => {}
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a second process past the ceiling of 1"),
    }
    let mut freed = ceiling.freed();
    drop(first.stdin);
    tokio::time::timeout(
        LIMIT,
        first.process.shutdown_with(Duration::from_millis(100)),
    )
    .await
    .unwrap();
    tokio::time::timeout(LIMIT, freed.changed())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ceiling.running(), 0);
    let again = AgentProcess::spawn(&spec).unwrap();
    tokio::time::timeout(
        LIMIT,
        again.process.shutdown_with(Duration::from_millis(100)),
    )
    .await
    .unwrap();
}
