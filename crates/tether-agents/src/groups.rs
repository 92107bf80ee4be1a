//! Records of the agent process groups a daemon started, one small file per group in a
//! directory of the data dir, so that a daemon that was killed (and could not end its
//! agents) has its leftovers ended by the next start ([`GroupRecords::end_leftovers`]).
//!
//! A record is only acted on when the group is provably still ours: the leader is alive
//! with the recorded start time (same boot), or the leader is gone and the group id is
//! still in use — Linux never hands out a process id that is still a group's id, so such
//! a group can only be the recorded one.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// One directory of records (cheap to clone).
#[derive(Debug, Clone)]
pub struct GroupRecords {
    dir: Arc<PathBuf>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Record {
    pid: u32,
    /// Field 22 of `/proc/<pid>/stat` (clock ticks after boot).
    start_time: u64,
    boot_id: String,
    program: String,
}

/// What [`GroupRecords::end_leftovers`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Leftovers {
    /// Groups that were still running and were sent SIGKILL.
    pub ended: Vec<u32>,
    /// Records whose group had ended already or was no longer ours.
    pub stale: usize,
}

impl GroupRecords {
    /// Uses (and creates, mode 0700) `dir`.
    pub fn open(dir: impl Into<PathBuf>) -> io::Result<GroupRecords> {
        use std::os::unix::fs::DirBuilderExt;
        let dir = dir.into();
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)?;
        Ok(GroupRecords { dir: Arc::new(dir) })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, pid: u32) -> PathBuf {
        self.dir.join(format!("{pid}.json"))
    }

    /// Records the group led by `pid` (just spawned). Best effort: a record that cannot be
    /// written only loses the start-up clean-up of this group, so it is logged, not fatal.
    pub(crate) fn record(&self, pid: u32, program: &str) {
        let Some(start_time) = proc_stat(pid).map(|s| s.start_time) else {
            // Already ended (or no /proc): nothing to end later.
            tracing::debug!(pid, "no start time for the agent process; not recorded");
            return;
        };
        let record = Record {
            pid,
            start_time,
            boot_id: boot_id().unwrap_or_default(),
            program: program.to_owned(),
        };
        let written = serde_json::to_vec(&record)
            .map_err(io::Error::other)
            .and_then(|bytes| std::fs::write(self.path(pid), bytes));
        if let Err(e) = written {
            tracing::warn!(pid, error = %e, "cannot record the agent process group");
        }
    }

    /// Drops the record of `pid` (its group has ended).
    pub(crate) fn forget(&self, pid: u32) {
        let _ = std::fs::remove_file(self.path(pid));
    }

    /// Sends SIGKILL to every recorded group that is still ours and removes all records.
    /// Call once at start-up, before any agent of this daemon is spawned.
    pub fn end_leftovers(&self) -> Leftovers {
        let mut out = Leftovers::default();
        let Ok(entries) = std::fs::read_dir(self.dir.as_path()) else {
            return out;
        };
        let boot = boot_id().unwrap_or_default();
        for entry in entries.flatten() {
            let path = entry.path();
            let record = std::fs::read(&path)
                .ok()
                .and_then(|b| serde_json::from_slice::<Record>(&b).ok());
            let _ = std::fs::remove_file(&path);
            match record {
                Some(r) if still_ours(&r, &boot) => {
                    tracing::warn!(pid = r.pid, program = %r.program,
                        "ending an agent process group left by an earlier run");
                    let pgid = nix::unistd::Pid::from_raw(r.pid as i32);
                    let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
                    out.ended.push(r.pid);
                }
                _ => out.stale += 1,
            }
        }
        out
    }
}

fn still_ours(r: &Record, boot: &str) -> bool {
    if r.pid <= 1 || r.boot_id != boot || boot.is_empty() {
        return false;
    }
    match proc_stat(r.pid) {
        // The leader lives: the same process only if it started when recorded.
        Some(stat) => stat.start_time == r.start_time && stat.pgrp == r.pid,
        // The leader is gone: members left in its group (the id cannot have been reused
        // while they exist).
        None => group_has_members(r.pid),
    }
}

struct ProcStat {
    pgrp: u32,
    start_time: u64,
}

/// `pgrp` and `starttime` of a live (not zombie) process, from `/proc/<pid>/stat`.
fn proc_stat(pid: u32) -> Option<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

fn parse_stat(text: &str) -> Option<ProcStat> {
    // `pid (comm) state ppid pgrp ...`: comm may hold spaces and parentheses.
    let after = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    if fields.first() == Some(&"Z") || fields.first() == Some(&"X") {
        return None;
    }
    Some(ProcStat {
        pgrp: fields.get(2)?.parse().ok()?,
        start_time: fields.get(19)?.parse().ok()?,
    })
}

fn group_has_members(pgid: u32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .any(|pid| proc_stat(pid).is_some_and(|s| s.pgrp == pgid))
}

fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_owned())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn stat_fields_after_an_odd_command_name() {
        let line =
            "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        let s = parse_stat(line).unwrap();
        assert_eq!((s.pgrp, s.start_time), (4242, 987654));
        assert!(parse_stat("7 (z) Z 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0").is_none());
    }

    #[test]
    fn records_of_ended_or_foreign_groups_are_stale() {
        let dir = tempfile::tempdir().unwrap();
        let records = GroupRecords::open(dir.path().join("groups")).unwrap();
        // Our own process: alive, but not with the recorded start time.
        let me = std::process::id();
        let foreign = Record {
            pid: me,
            start_time: 1,
            boot_id: boot_id().unwrap(),
            program: "x".into(),
        };
        std::fs::write(records.path(me), serde_json::to_vec(&foreign).unwrap()).unwrap();
        std::fs::write(records.path(1), b"not json").unwrap();
        let out = records.end_leftovers();
        assert_eq!(
            out,
            Leftovers {
                ended: vec![],
                stale: 2
            }
        );
        assert_eq!(std::fs::read_dir(records.dir()).unwrap().count(), 0);
    }
}
