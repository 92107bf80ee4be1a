//! A log line that may repeat without bound (a refused webhook, a foreign `Host`) is
//! written at most once per window; the next one written says how many were held back
//! (issue 24 S10). Pure: the caller passes the time in.

/// At most one admitted event per `every_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Throttle {
    every_ms: u64,
    next_ms: u64,
    held: u64,
}

impl Throttle {
    pub const fn new(every_ms: u64) -> Throttle {
        Throttle {
            every_ms,
            next_ms: 0,
            held: 0,
        }
    }

    /// `Some(held back since the last one)` when the event at `now_ms` is to be logged,
    /// `None` when it is held back.
    pub fn admit(&mut self, now_ms: u64) -> Option<u64> {
        if now_ms >= self.next_ms {
            self.next_ms = now_ms.saturating_add(self.every_ms);
            Some(std::mem::take(&mut self.held))
        } else {
            self.held += 1;
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Throttle;

    #[test]
    fn one_per_window_and_the_next_counts_the_held() {
        let mut t = Throttle::new(1000);
        assert_eq!(t.admit(5), Some(0));
        assert_eq!(t.admit(10), None);
        assert_eq!(t.admit(900), None);
        assert_eq!(t.admit(1005), Some(2));
        assert_eq!(t.admit(1006), None);
        assert_eq!(t.admit(5000), Some(1));
    }
}
