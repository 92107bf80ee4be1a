//! Schedules' pure rules (issue 30): what a person writes (`/every weekday 09:00 …`,
//! `/every 2h …`, `/at 2026-12-24 18:00 …`, a cron expression) as a [`When`], the next
//! run after a moment in the schedule's time zone (cron through `croner`, which keeps
//! wall-clock times across daylight-saving changes: a time skipped by a jump forward
//! runs at the jump, a time that happens twice runs once), the minimum interval, what a
//! run found late does (the missed-run policy: once, or skipped; never a burst), and when
//! failures in a row pause a schedule. The time zone is resolved by the caller.

use std::str::FromStr;

use jiff::civil::DateTime;
use jiff::tz::TimeZone;
use jiff::{Timestamp, Zoned};

/// When a schedule runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum When {
    /// A cron expression (five fields, or six with seconds first) in the time zone.
    Cron(String),
    /// Every `secs` seconds from the schedule's start.
    Every { secs: u64 },
    /// Once, at this wall-clock time in the time zone.
    At(DateTime),
}

impl When {
    /// The kind and expression as stored (`cron`, `every`, `at`).
    pub fn parts(&self) -> (&'static str, String) {
        match self {
            When::Cron(e) => ("cron", e.clone()),
            When::Every { secs } => ("every", secs.to_string()),
            When::At(at) => ("at", at.strftime("%Y-%m-%dT%H:%M:%S").to_string()),
        }
    }

    /// The stored parts back.
    pub fn from_parts(kind: &str, expr: &str) -> Result<When, ScheduleError> {
        match kind {
            "cron" => cron(expr).map(|_| When::Cron(expr.to_owned())),
            "every" => expr
                .parse()
                .map(|secs| When::Every { secs })
                .map_err(|_| invalid("every", format!("{expr:?} is not a number of seconds"))),
            "at" => DateTime::from_str(expr)
                .map(When::At)
                .map_err(|e| invalid("at", format!("{expr:?}: {e}"))),
            other => Err(invalid(
                "kind",
                format!("{other:?} is not cron, every or at"),
            )),
        }
    }

    /// A short description: "every weekday at 09:00" is not kept, so the expression.
    pub fn describe(&self) -> String {
        match self {
            When::Cron(e) => format!("cron {e}"),
            When::Every { secs } => format!("every {}", span(*secs)),
            When::At(at) => format!("once at {}", at.strftime("%Y-%m-%d %H:%M")),
        }
    }
}

/// A bad schedule, naming the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ScheduleError {
    pub field: &'static str,
    pub message: String,
}

impl ScheduleError {
    /// The stable wire code: bad input.
    pub fn code(&self) -> tether_proto::ErrorCode {
        tether_proto::ErrorCode::BadRequest
    }
}

fn invalid(field: &'static str, message: String) -> ScheduleError {
    ScheduleError { field, message }
}

/// The time zone of this IANA name (from the database built into tether).
pub fn zone(name: &str) -> Result<TimeZone, ScheduleError> {
    TimeZone::get(name)
        .map_err(|_| invalid("time_zone", format!("{name:?} is not a known time zone")))
}

fn cron(expr: &str) -> Result<croner::Cron, ScheduleError> {
    croner::Cron::from_str(expr).map_err(|e| invalid("cron", format!("{expr:?}: {e}")))
}

/// `2h`, `30m`, `90s`, `1d` as seconds.
fn duration(word: &str) -> Option<u64> {
    let split = word.find(|c: char| !c.is_ascii_digit())?;
    let (n, unit) = word.split_at(split);
    let n: u64 = n.parse().ok()?;
    let unit = match unit {
        "s" | "sec" | "secs" => 1,
        "m" | "min" | "mins" => 60,
        "h" | "hour" | "hours" => 3600,
        "d" | "day" | "days" => 86_400,
        _ => return None,
    };
    n.checked_mul(unit).filter(|s| *s > 0)
}

fn span(secs: u64) -> String {
    match secs {
        s if s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s % 3600 == 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// `09:00` as (hour, minute).
fn clock(word: &str) -> Option<(u8, u8)> {
    let (h, m) = word.split_once(':')?;
    let (h, m): (u8, u8) = (h.parse().ok()?, m.parse().ok()?);
    (h < 24 && m < 60 && word.len() <= 5).then_some((h, m))
}

/// The cron day-of-week field of a plain day word (`weekday`, `mon,wed`, …).
fn days(word: &str) -> Option<String> {
    Some(match word {
        "day" | "daily" => "*".to_owned(),
        "weekday" | "weekdays" => "1-5".to_owned(),
        "weekend" | "weekends" => "0,6".to_owned(),
        list => {
            let mut out = Vec::new();
            for d in list.split(',') {
                let n = match d.trim_end_matches('s') {
                    "sun" | "sunday" => 0,
                    "mon" | "monday" => 1,
                    "tue" | "tuesday" => 2,
                    "wed" | "wednesday" => 3,
                    "thu" | "thursday" => 4,
                    "fri" | "friday" => 5,
                    "sat" | "saturday" => 6,
                    _ => return None,
                };
                out.push(n.to_string());
            }
            out.join(",")
        }
    })
}

/// What follows `/every`: `<2h|30m|…> <prompt>`, `<day|weekday|weekend|mon,wed…>
/// <HH:MM> <prompt>`, or `cron <five fields> <prompt>`. The prompt is what is left.
pub fn parse_every(rest: &str) -> Result<(When, String), ScheduleError> {
    let words: Vec<&str> = rest.split_whitespace().collect();
    let usage = || {
        invalid(
            "when",
            "say `/every 2h <prompt>`, `/every weekday 09:00 <prompt>` or `/every cron \
             <m h dom mon dow> <prompt>`"
                .to_owned(),
        )
    };
    let first = words
        .first()
        .map(|w| w.to_ascii_lowercase())
        .ok_or_else(usage)?;
    let (when, used) = if first == "cron" {
        let fields = words.get(1..6).ok_or_else(usage)?.join(" ");
        cron(&fields)?;
        (When::Cron(fields), 6)
    } else if let Some(secs) = duration(&first) {
        (When::Every { secs }, 1)
    } else if let Some(dow) = days(&first) {
        let (h, m) = words.get(1).and_then(|w| clock(w)).ok_or_else(usage)?;
        (When::Cron(format!("{m} {h} * * {dow}")), 2)
    } else {
        return Err(usage());
    };
    Ok((when, words[used.min(words.len())..].join(" ")))
}

/// What follows `/at`: `<YYYY-MM-DD> <HH:MM> <prompt>`.
pub fn parse_at(rest: &str) -> Result<(When, String), ScheduleError> {
    let words: Vec<&str> = rest.split_whitespace().collect();
    let (Some(day), Some(time)) = (words.first(), words.get(1)) else {
        return Err(invalid(
            "at",
            "say `/at 2026-12-24 18:00 <prompt>`".to_owned(),
        ));
    };
    let at = DateTime::from_str(&format!("{day}T{time}"))
        .map_err(|e| invalid("at", format!("{day} {time}: {e}")))?;
    Ok((When::At(at), words[2..].join(" ")))
}

fn ms(z: &Zoned) -> i64 {
    z.timestamp().as_millisecond()
}

/// The first run strictly after `after_ms`, for a schedule started at `start_ms`; `None`
/// when there is none (a one-off in the past).
pub fn next_run(when: &When, tz: &TimeZone, start_ms: i64, after_ms: i64) -> Option<i64> {
    match when {
        When::Every { secs } => {
            let step = i64::try_from(*secs).ok()?.checked_mul(1000)?;
            let k = if after_ms < start_ms {
                0
            } else {
                (after_ms - start_ms) / step + 1
            };
            start_ms.checked_add(k.checked_mul(step)?)
        }
        When::Cron(expr) => {
            let c = cron(expr).ok()?;
            let from = Timestamp::from_millisecond(after_ms)
                .ok()?
                .to_zoned(tz.clone());
            c.find_next_occurrence(&from, false).ok().map(|z| ms(&z))
        }
        When::At(at) => {
            // A time skipped by a jump forward is taken as the instant the clock jumps to;
            // one that happens twice, its first.
            let z = tz.to_ambiguous_zoned(*at).compatible().ok()?;
            let t = ms(&z);
            (t > after_ms).then_some(t)
        }
    }
}

/// The shortest time between two of the next runs (up to 50 looked at): a schedule
/// under the configured minimum is refused. `None` for a one-off.
pub fn shortest_gap(when: &When, tz: &TimeZone, now_ms: i64) -> Option<i64> {
    if let When::Every { secs } = when {
        return i64::try_from(*secs).ok()?.checked_mul(1000);
    }
    let mut last = next_run(when, tz, now_ms, now_ms)?;
    let mut shortest: Option<i64> = None;
    for _ in 0..50 {
        let Some(next) = next_run(when, tz, now_ms, last) else {
            break;
        };
        shortest = Some(shortest.map_or(next - last, |s| s.min(next - last)));
        last = next;
    }
    shortest
}

/// What happens to runs that were due while nothing ran them (the daemon, or the whole
/// cluster, was down).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Missed {
    /// One run when back, however many were missed.
    #[default]
    RunOnce,
    /// None; the schedule goes on at its next time.
    Skip,
}

impl Missed {
    pub fn as_str(self) -> &'static str {
        match self {
            Missed::RunOnce => "run_once",
            Missed::Skip => "skip",
        }
    }

    pub fn parse(s: &str) -> Option<Missed> {
        match s {
            "run_once" => Some(Missed::RunOnce),
            "skip" => Some(Missed::Skip),
            _ => None,
        }
    }
}

/// A run due at `due_ms`, found at `now_ms`: whether it runs. Later than `grace_ms`
/// it was missed, and the policy decides; the next run is counted from now either way
/// ([`next_run`] after `now_ms`), so missed runs never come as a burst.
pub fn runs(policy: Missed, due_ms: i64, now_ms: i64, grace_ms: i64) -> bool {
    now_ms - due_ms <= grace_ms || policy == Missed::RunOnce
}

/// After a run ended (`failed` or not): the failures in a row, and whether the schedule
/// pauses (at `max` in a row; 0 never).
pub fn after_run(failures: u32, failed: bool, max: u32) -> (u32, bool) {
    let n = if failed {
        failures.saturating_add(1)
    } else {
        0
    };
    (n, max > 0 && n >= max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn berlin() -> TimeZone {
        TimeZone::get("Europe/Berlin").unwrap()
    }

    fn at(tz: &TimeZone, s: &str) -> i64 {
        let dt = DateTime::from_str(s).unwrap();
        tz.to_ambiguous_zoned(dt)
            .compatible()
            .unwrap()
            .timestamp()
            .as_millisecond()
    }

    fn local(tz: &TimeZone, ms: i64) -> String {
        Timestamp::from_millisecond(ms)
            .unwrap()
            .to_zoned(tz.clone())
            .strftime("%Y-%m-%d %H:%M %Z")
            .to_string()
    }

    #[test]
    fn plain_forms_become_cron_or_intervals() {
        let (w, p) = parse_every("weekday 09:00 pull, run the tests").unwrap();
        assert_eq!(w, When::Cron("0 9 * * 1-5".into()));
        assert_eq!(p, "pull, run the tests");
        assert_eq!(
            parse_every("2h check").unwrap().0,
            When::Every { secs: 7200 }
        );
        assert_eq!(
            parse_every("mon,wed 18:30 x").unwrap().0,
            When::Cron("30 18 * * 1,3".into())
        );
        assert_eq!(
            parse_every("cron */15 8-18 * * 1-5 look").unwrap(),
            (When::Cron("*/15 8-18 * * 1-5".into()), "look".into())
        );
        let (w, p) = parse_at("2026-12-24 18:00 wrap the presents").unwrap();
        assert_eq!(w, When::At(DateTime::from_str("2026-12-24T18:00").unwrap()));
        assert_eq!(p, "wrap the presents");
        for bad in [
            "",
            "sometimes 09:00 x",
            "weekday 25:00 x",
            "cron 61 * * * * x",
            "0h x",
        ] {
            assert!(parse_every(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_at("2026-13-01 10:00 x").unwrap_err().field, "at");
        assert_eq!(parse_every("cron 99 * * * * x").unwrap_err().field, "cron");
    }

    #[test]
    fn cron_keeps_wall_clock_time_across_daylight_saving_changes() {
        let tz = berlin();
        let daily = When::Cron("30 2 * * *".into());
        // 2027-03-28: 02:00 → 03:00 (02:30 does not exist): that day's run is at the jump.
        let n = next_run(&daily, &tz, 0, at(&tz, "2027-03-27T12:00")).unwrap();
        assert_eq!(local(&tz, n), "2027-03-28 03:00 CEST");
        let n2 = next_run(&daily, &tz, 0, n).unwrap();
        assert_eq!(local(&tz, n2), "2027-03-29 02:30 CEST");
        // 2026-10-25: 03:00 → 02:00 (02:30 happens twice): one run.
        let first = next_run(&daily, &tz, 0, at(&tz, "2026-10-24T12:00")).unwrap();
        let second = next_run(&daily, &tz, 0, at(&tz, "2026-10-25T00:00")).unwrap();
        let third = next_run(&daily, &tz, 0, second).unwrap();
        assert_eq!(local(&tz, first), "2026-10-25 02:30 CEST");
        assert_eq!(first, second);
        assert_eq!(local(&tz, third), "2026-10-26 02:30 CET");
        // 09:00 stays 09:00 local on both sides of the change (23 h or 25 h apart in UTC).
        let nine = When::Cron("0 9 * * *".into());
        let a = next_run(&nine, &tz, 0, at(&tz, "2027-03-27T08:00")).unwrap();
        let b = next_run(&nine, &tz, 0, a).unwrap();
        assert_eq!(b - a, 23 * 3_600_000);
    }

    #[test]
    fn intervals_count_from_the_start_and_one_offs_run_once() {
        let tz = TimeZone::UTC;
        let every = When::Every { secs: 60 };
        assert_eq!(next_run(&every, &tz, 1_000, 0), Some(1_000));
        assert_eq!(next_run(&every, &tz, 1_000, 1_000), Some(61_000));
        assert_eq!(next_run(&every, &tz, 1_000, 200_000), Some(241_000));
        let once = When::At(DateTime::from_str("2026-12-24T18:00").unwrap());
        let t = at(&tz, "2026-12-24T18:00");
        assert_eq!(next_run(&once, &tz, 0, t - 1), Some(t));
        assert_eq!(next_run(&once, &tz, 0, t), None);
        // A one-off in a gap runs at the jump.
        let gap = When::At(DateTime::from_str("2027-03-28T02:30").unwrap());
        let z = next_run(&gap, &berlin(), 0, 0).unwrap();
        assert_eq!(local(&berlin(), z), "2027-03-28 03:30 CEST");
    }

    #[test]
    fn the_shortest_gap_finds_the_densest_part_of_a_cron() {
        let tz = TimeZone::UTC;
        let gap = shortest_gap(&When::Cron("0,5 9 * * *".into()), &tz, 0).unwrap();
        assert_eq!(gap, 5 * 60_000);
        assert_eq!(
            shortest_gap(&When::Every { secs: 30 }, &tz, 0),
            Some(30_000)
        );
        let once = When::At(DateTime::from_str("2030-01-01T00:00").unwrap());
        assert_eq!(shortest_gap(&once, &tz, 0), None);
    }

    #[test]
    fn a_missed_run_runs_once_or_is_skipped_and_failures_pause() {
        assert!(
            runs(Missed::Skip, 1_000, 30_000, 60_000),
            "late within the grace"
        );
        assert!(!runs(Missed::Skip, 1_000, 3_600_000, 60_000));
        assert!(runs(Missed::RunOnce, 1_000, 3_600_000, 60_000));
        assert_eq!(after_run(0, true, 3), (1, false));
        assert_eq!(after_run(2, true, 3), (3, true));
        assert_eq!(after_run(2, false, 3), (0, false));
        assert_eq!(after_run(9, true, 0), (10, false), "0 never pauses");
    }

    #[test]
    fn stored_parts_round_trip() {
        for w in [
            When::Cron("0 9 * * 1-5".into()),
            When::Every { secs: 7200 },
            When::At(DateTime::from_str("2026-12-24T18:00").unwrap()),
        ] {
            let (kind, expr) = w.parts();
            assert_eq!(When::from_parts(kind, &expr).unwrap(), w);
        }
        assert_eq!(When::from_parts("yearly", "x").unwrap_err().field, "kind");
    }
}
