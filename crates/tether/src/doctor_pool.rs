//! `tether doctor`'s lines for the running daemon's agent processes: one line per
//! process (agent, pid, shared or own, sessions, resident memory), from `GET /api/v1/pool`.

use std::fmt::Write as _;

use tether_proto::{PoolProcess, PoolSpare};

/// Appends one line per process to `out`.
pub(crate) fn processes(processes: &[PoolProcess], out: &mut String) -> std::fmt::Result {
    for p in processes {
        let pid = p.pid.map_or("?".to_owned(), |pid| pid.to_string());
        let kind = if p.shared { "shared" } else { "own" };
        let rss = p.rss_bytes.map_or("RSS unknown".to_owned(), |b| {
            format!("{} MB", b / (1024 * 1024))
        });
        writeln!(
            out,
            "    {} pid {pid} ({kind}): {} sessions, {rss}",
            p.agent,
            p.sessions.len()
        )?;
    }
    Ok(())
}

/// Appends one line per warm spare (`[pool] claude_spare`) to `out`.
pub(crate) fn spares(spares: &[PoolSpare], out: &mut String) -> std::fmt::Result {
    for s in spares {
        let pid = s.pid.map_or("?".to_owned(), |pid| pid.to_string());
        let state = if s.ready { "ready" } else { "not ready" };
        let rss = s.rss_bytes.map_or("RSS unknown".to_owned(), |b| {
            format!("{} MB", b / (1024 * 1024))
        });
        writeln!(
            out,
            "    {} pid {pid} (warm spare, {state}): {rss}",
            s.agent
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_process() {
        let mut out = String::new();
        let shared = PoolProcess {
            agent: "codex".into(),
            pid: Some(42),
            shared: true,
            sessions: vec!["a".into(), "b".into()],
            rss_bytes: Some(150 * 1024 * 1024),
        };
        processes(&[shared], &mut out).unwrap();
        assert_eq!(out, "    codex pid 42 (shared): 2 sessions, 150 MB\n");
    }

    #[test]
    fn one_line_per_spare() {
        let mut out = String::new();
        let spare = PoolSpare {
            agent: "claude".into(),
            pid: Some(7),
            ready: true,
            rss_bytes: Some(200 * 1024 * 1024),
        };
        spares(&[spare], &mut out).unwrap();
        assert_eq!(out, "    claude pid 7 (warm spare, ready): 200 MB\n");
    }
}
