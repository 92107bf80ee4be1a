//! Small statistics and formatting helpers: percentiles of durations, milliseconds,
//! rates and memory sizes as the table prints them.

use std::time::Duration;

/// Sorted samples with nearest-rank percentiles.
#[derive(Debug, Clone)]
pub struct Samples(Vec<Duration>);

impl Samples {
    pub fn new(mut v: Vec<Duration>) -> Samples {
        v.sort();
        Samples(v)
    }

    /// The `p`-th percentile (0..=100), nearest rank; zero when empty.
    pub fn pct(&self, p: f64) -> Duration {
        if self.0.is_empty() {
            return Duration::ZERO;
        }
        let rank = ((p / 100.0) * self.0.len() as f64).ceil() as usize;
        self.0[rank.clamp(1, self.0.len()) - 1]
    }

    pub fn p50(&self) -> Duration {
        self.pct(50.0)
    }

    pub fn p99(&self) -> Duration {
        self.pct(99.0)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Every sample minus `d` (saturating at zero).
    pub fn minus(&self, d: Duration) -> Samples {
        Samples::new(self.0.iter().map(|s| s.saturating_sub(d)).collect())
    }
}

/// `1.23 ms` (three significant-ish digits).
pub fn ms(d: Duration) -> String {
    let v = d.as_secs_f64() * 1000.0;
    if v >= 10_000.0 {
        format!("{:.1} s", v / 1000.0)
    } else if v >= 100.0 {
        format!("{v:.0} ms")
    } else if v >= 10.0 {
        format!("{v:.1} ms")
    } else {
        format!("{v:.2} ms")
    }
}

/// `123 µs`.
pub fn us(d: Duration) -> String {
    format!("{} µs", d.as_micros())
}

/// `0.123 s` / `12.3 s`.
pub fn secs(d: Duration) -> String {
    let v = d.as_secs_f64();
    if v >= 10.0 {
        format!("{v:.1} s")
    } else {
        format!("{v:.3} s")
    }
}

/// `12 345` (thousands separated by a thin space, as the table prints counts).
pub fn count(n: f64) -> String {
    let n = n.round() as u64;
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

/// KiB → `12.3 MB` (MiB).
pub fn mb(kb: u64) -> String {
    format!("{:.1} MB", kb as f64 / 1024.0)
}

/// Signed KiB → `+12.3 MB` / `-0.4 MB`.
pub fn mb_delta(kb: i64) -> String {
    format!("{:+.1} MB", kb as f64 / 1024.0)
}

/// A ratio `a / b` as `0.42×`.
pub fn ratio(a: Duration, b: Duration) -> String {
    if b.is_zero() {
        return "n/a".to_string();
    }
    format!("{:.2}×", a.as_secs_f64() / b.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let s = Samples::new((1..=100).rev().map(Duration::from_millis).collect());
        assert_eq!(s.p50(), Duration::from_millis(50));
        assert_eq!(s.p99(), Duration::from_millis(99));
        assert_eq!(s.pct(100.0), Duration::from_millis(100));
        assert_eq!(Samples::new(vec![]).p50(), Duration::ZERO);
        let one = Samples::new(vec![Duration::from_millis(7)]);
        assert_eq!(one.p99(), Duration::from_millis(7));
        assert_eq!(one.minus(Duration::from_millis(9)).p50(), Duration::ZERO);
    }

    #[test]
    fn formats() {
        assert_eq!(ms(Duration::from_micros(1234)), "1.23 ms");
        assert_eq!(ms(Duration::from_micros(12345)), "12.3 ms");
        assert_eq!(ms(Duration::from_millis(56_104)), "56.1 s");
        assert_eq!(count(1234567.0), "1 234 567");
        assert_eq!(count(999.0), "999");
        assert_eq!(mb(2048), "2.0 MB");
        assert_eq!(mb_delta(-512), "-0.5 MB");
        assert_eq!(
            ratio(Duration::from_millis(1), Duration::from_millis(4)),
            "0.25×"
        );
    }
}
