//! The result table: one row per figure (some figures print two), with the goal of
//! issues 7 and 11 and whether it was met. Figures are printed, never asserted.

use std::fmt::Write;

/// How a row compares with its goal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Met,
    Missed,
    /// No goal: the figure is informative.
    Info,
    /// Not run (e.g. the real CLIs are not installed).
    Skipped,
    /// The measurement itself failed.
    Error,
}

impl Verdict {
    pub fn of(met: bool) -> Verdict {
        if met { Verdict::Met } else { Verdict::Missed }
    }

    fn label(self) -> &'static str {
        match self {
            Verdict::Met => "met",
            Verdict::Missed => "**missed**",
            Verdict::Info => "—",
            Verdict::Skipped => "skipped",
            Verdict::Error => "**error**",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Row {
    /// Figure number (`1`..`9`, as in the README's Performance table).
    pub fig: &'static str,
    pub what: String,
    pub result: String,
    pub goal: String,
    pub verdict: Verdict,
    /// The same figure in the previous README table (commit [`BEFORE`]), for
    /// comparison; empty when it was not measured then.
    pub before: &'static str,
}

/// The commit of the README table the `before` column quotes.
pub const BEFORE: &str = "83ccb25";

impl Row {
    pub fn new(
        fig: &'static str,
        what: impl Into<String>,
        result: impl Into<String>,
        goal: impl Into<String>,
        verdict: Verdict,
    ) -> Row {
        Row {
            fig,
            what: what.into(),
            result: result.into(),
            goal: goal.into(),
            verdict,
            before: "",
        }
    }

    /// The figure before issue 11 (see [`Row::before`]).
    pub fn was(mut self, before: &'static str) -> Row {
        self.before = before;
        self
    }
}

/// A Markdown table (renders in the README as is).
pub fn table(rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| # | figure | result | goal | | before (`{BEFORE}`) |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|");
    for r in rows {
        let cell = |s: &str| s.replace('|', "\\|").replace('\n', "<br>");
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} |",
            r.fig,
            cell(&r.what),
            cell(&r.result),
            cell(&r.goal),
            r.verdict.label(),
            if r.before.is_empty() { "—" } else { r.before },
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_escapes_cells() {
        let t = table(&[Row::new("1", "a|b", "x\ny", "g", Verdict::Met).was("3 ms")]);
        assert!(t.contains("| 1 | a\\|b | x<br>y | g | met | 3 ms |"), "{t}");
    }
}
