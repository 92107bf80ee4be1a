//! `[schedules]` of the config file (issue 30): the limits of scheduled turns.
//!
//! ```toml
//! [schedules]
//! min_interval_secs = 60        # no schedule runs more often (default 60)
//! max_per_conversation = 20     # schedules one conversation may have (default 20)
//! max_failures = 3              # failed runs in a row before it pauses (0: never)
//! missed_after_secs = 60        # a run this late was missed: its policy decides
//! time_zone = "Europe/Berlin"   # for schedules that name none (default: the server's)
//! ```

use anyhow::{Result, bail};
use serde::Deserialize;
use tether_runtime::SchedulesConfig;

/// `[schedules]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchedulesFile {
    pub min_interval_secs: Option<u64>,
    pub max_per_conversation: Option<usize>,
    pub max_failures: Option<u32>,
    pub missed_after_secs: Option<u64>,
    pub time_zone: Option<String>,
}

/// The server's own time zone (`TZ`, else the system's), by its IANA name; UTC when it
/// has none.
fn server_zone() -> String {
    jiff::tz::TimeZone::system()
        .iana_name()
        .map_or_else(|| "UTC".to_owned(), str::to_owned)
}

pub fn resolve(file: Option<SchedulesFile>) -> Result<SchedulesConfig> {
    use std::time::Duration;
    let d = SchedulesConfig::default();
    let f = file.unwrap_or_default();
    let time_zone = f.time_zone.unwrap_or_else(server_zone);
    if tether_core::schedule::zone(&time_zone).is_err() {
        bail!("[schedules] time_zone: {time_zone:?} is not a known time zone");
    }
    let c = SchedulesConfig {
        min_interval: f
            .min_interval_secs
            .map_or(d.min_interval, Duration::from_secs),
        max_per_conversation: f.max_per_conversation.unwrap_or(d.max_per_conversation),
        max_failures: f.max_failures.unwrap_or(d.max_failures),
        missed_after: f
            .missed_after_secs
            .map_or(d.missed_after, Duration::from_secs),
        time_zone,
    };
    if c.min_interval.is_zero() {
        bail!("[schedules] min_interval_secs must be at least 1");
    }
    if c.max_per_conversation == 0 {
        bail!("[schedules] max_per_conversation must be at least 1");
    }
    Ok(c)
}
