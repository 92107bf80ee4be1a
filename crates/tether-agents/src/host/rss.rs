//! Resident memory of an agent's process group (an agent may run children of its own:
//! gemini relaunches node with a larger heap), read from `/proc`.

/// The summed `VmRSS` of every process whose group is `pgid` (tether starts each agent as
/// its own group leader); `None` where `/proc` cannot be read.
pub fn group_rss_bytes(pgid: u32) -> Option<u64> {
    let entries = std::fs::read_dir("/proc").ok()?;
    let mut total = None;
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if group_of(pid) != Some(pgid) {
            continue;
        }
        if let Some(kb) = rss_kb(pid) {
            *total.get_or_insert(0) += kb * 1024;
        }
    }
    total
}

/// The process group of `pid` (field 5 of `/proc/<pid>/stat`, after the command in
/// parentheses, which may itself hold spaces and parentheses).
fn group_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(2)?.parse().ok()
}

fn rss_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_group_has_memory() {
        let me = std::process::id();
        let group = group_of(me).unwrap_or(0);
        assert!(group > 0);
        assert!(group_rss_bytes(group).unwrap_or(0) > 0);
    }
}
