//! Budgets' pure rules (issue 29): the period a usage report counts in (a UTC day, an
//! ISO week from Monday, a calendar month, or none), and what adding an amount to a
//! budget's counter crosses (the warning line, the hard cap). The store applies them
//! atomically: each report adds to the counter row under a lock and reads the sum back,
//! so the report that crosses a cap is the one told.

const DAY_MS: i64 = 86_400_000;

/// The span a budget's counter covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Period {
    Day,
    Week,
    Month,
    /// One counter for ever.
    Total,
}

impl Period {
    pub fn as_str(self) -> &'static str {
        match self {
            Period::Day => "day",
            Period::Week => "week",
            Period::Month => "month",
            Period::Total => "none",
        }
    }

    pub fn parse(s: &str) -> Option<Period> {
        Some(match s {
            "day" => Period::Day,
            "week" => Period::Week,
            "month" => Period::Month,
            "none" | "total" => Period::Total,
            _ => return None,
        })
    }

    /// The start (Unix ms, UTC) of the period `at_ms` falls in.
    pub fn start(self, at_ms: i64) -> i64 {
        let day = at_ms.div_euclid(DAY_MS);
        match self {
            Period::Day => day * DAY_MS,
            // 1970-01-01 was a Thursday: Monday is 3 days before it.
            Period::Week => (day - (day + 3).rem_euclid(7)) * DAY_MS,
            Period::Month => {
                let (y, m, _) = civil_from_days(day);
                days_from_civil(y, m, 1) * DAY_MS
            }
            Period::Total => 0,
        }
    }
}

/// What a budget limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unit {
    /// Tokens of every kind.
    Tokens,
    /// Cost in nano-dollars (rows without a price add nothing; they are counted apart).
    Cost,
    /// Percent of a subscription account's usage window, as its vendor reports it (Codex's
    /// rate-limit snapshots, Claude's `rate_limit_event`). Not a counter: the account's
    /// latest report is the use, the vendor's window its period.
    Window,
}

impl Unit {
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::Tokens => "tokens",
            Unit::Cost => "cost",
            Unit::Window => "window",
        }
    }

    pub fn parse(s: &str) -> Option<Unit> {
        Some(match s {
            "tokens" => Unit::Tokens,
            "cost" => Unit::Cost,
            "window" => Unit::Window,
            _ => return None,
        })
    }
}

/// What adding to a counter crossed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Crossing {
    /// The counter passed the warning line with this addition.
    pub warned: bool,
    /// The counter is at or over the cap (with this addition or before).
    pub over: bool,
}

/// `used` is the counter after adding `added`.
pub fn crossing(cap: i64, warn_percent: Option<u8>, used: i64, added: i64) -> Crossing {
    let before = used - added;
    let warned = warn_percent.is_some_and(|p| {
        let line = (i128::from(cap) * i128::from(p)).div_euclid(100);
        i128::from(before) < line && i128::from(used) >= line
    });
    Crossing {
        warned,
        over: used >= cap,
    }
}

/// Howard Hinnant's `civil_from_days`: (year, month 1–12, day 1–31) of a day number.
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// The inverse: the day number of a civil date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    // 2026-12-02T15:30:00Z, a Wednesday.
    const AT: i64 = 1_796_225_400_000;

    #[test]
    fn periods_start_at_the_utc_day_the_monday_and_the_first_of_the_month() {
        assert_eq!(Period::Day.start(AT), 1_796_169_600_000); // 2026-12-02
        assert_eq!(Period::Week.start(AT), 1_795_996_800_000); // Monday 2026-11-30
        assert_eq!(Period::Month.start(AT), 1_796_083_200_000); // 2026-12-01
        assert_eq!(Period::Total.start(AT), 0);
        // A Monday is its own week's start; 1 March after a leap February.
        assert_eq!(Period::Week.start(1_795_996_800_000), 1_795_996_800_000);
        let mar_2028 = days_from_civil(2028, 3, 1) * DAY_MS;
        assert_eq!(Period::Month.start(mar_2028 + 5), mar_2028);
        assert_eq!(civil_from_days(days_from_civil(2028, 2, 29)), (2028, 2, 29));
    }

    #[test]
    fn the_report_that_crosses_a_line_is_the_one_told() {
        assert_eq!(crossing(100, Some(80), 79, 10), Crossing::default());
        assert_eq!(
            crossing(100, Some(80), 85, 10),
            Crossing {
                warned: true,
                over: false
            }
        );
        assert_eq!(
            crossing(100, Some(80), 120, 50),
            Crossing {
                warned: true,
                over: true
            }
        );
        // Past the line already: no second warning, still over.
        assert_eq!(
            crossing(100, Some(80), 130, 10),
            Crossing {
                warned: false,
                over: true
            }
        );
        assert!(!crossing(100, None, 90, 90).warned);
    }
}
