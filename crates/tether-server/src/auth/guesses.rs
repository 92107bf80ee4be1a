//! Token guessing is rate-limited (issue 28): an address that presented
//! [`MAX_FAILURES`] (`[server] token_failures_per_minute`) refused credentials within a
//! [`WINDOW`] is refused
//! (`too_many_attempts`, with `Retry-After`) until its window ends, whatever it presents,
//! so guessing learns nothing more. Tokens are compared in constant time or found by
//! their hash; this bounds how fast anyone can try. Kept per node, in memory (a guesser
//! spread over nodes is slowed per node).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Refused credentials an address may present per window, by default.
pub(crate) const MAX_FAILURES: u32 = 20;

/// How long an address's count lasts.
pub(crate) const WINDOW: Duration = Duration::from_secs(60);

/// Addresses tracked before the expired ones are forgotten.
const PRUNE_AT: usize = 10_000;

/// What happened when a refusal was counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Counted {
    /// The first refusal of the address's window (worth an audit entry).
    First,
    /// The refusal that used the window's allowance up (worth an audit entry).
    Blocked,
    /// Any other.
    More,
}

#[derive(Debug)]
pub(crate) struct Guesses {
    /// 0: no limit.
    max: u32,
    by_addr: Mutex<HashMap<Option<IpAddr>, (Instant, u32)>>,
}

impl Guesses {
    pub(crate) fn new(max: u32) -> Self {
        Guesses {
            max,
            by_addr: Mutex::default(),
        }
    }

    pub(crate) fn max(&self) -> u32 {
        self.max
    }

    /// How long `addr` must still wait, when it used its allowance up.
    pub(crate) fn blocked(&self, addr: Option<IpAddr>, now: Instant) -> Option<Duration> {
        let map = self
            .by_addr
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (start, failures) = map.get(&addr)?;
        let left = WINDOW.checked_sub(now.duration_since(*start))?;
        (self.max > 0 && *failures >= self.max && !left.is_zero()).then_some(left)
    }

    /// Counts a refused credential from `addr`.
    pub(crate) fn failed(&self, addr: Option<IpAddr>, now: Instant) -> Counted {
        let mut map = self
            .by_addr
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if map.len() >= PRUNE_AT {
            map.retain(|_, (start, _)| now.duration_since(*start) < WINDOW);
        }
        let entry = map.entry(addr).or_insert((now, 0));
        if now.duration_since(entry.0) >= WINDOW {
            *entry = (now, 0);
        }
        entry.1 += 1;
        match entry.1 {
            1 => Counted::First,
            n if n == self.max => Counted::Blocked,
            _ => Counted::More,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_refused_after_its_allowance_until_the_window_ends() {
        let g = Guesses::new(MAX_FAILURES);
        let t0 = Instant::now();
        let a: Option<IpAddr> = Some("10.0.0.1".parse().unwrap());
        let b: Option<IpAddr> = Some("10.0.0.2".parse().unwrap());
        assert_eq!(g.failed(a, t0), Counted::First);
        for _ in 2..MAX_FAILURES {
            assert_eq!(g.failed(a, t0), Counted::More);
            assert_eq!(g.blocked(a, t0), None);
        }
        assert_eq!(g.failed(a, t0), Counted::Blocked);
        let later = t0 + Duration::from_secs(10);
        assert_eq!(g.blocked(a, later), Some(WINDOW - Duration::from_secs(10)));
        assert_eq!(g.blocked(b, later), None, "another address is not affected");
        let after = t0 + WINDOW;
        assert_eq!(g.blocked(a, after), None, "the window ended");
        assert_eq!(g.failed(a, after), Counted::First, "a new window");
    }

    #[test]
    fn no_limit_never_blocks() {
        let g = Guesses::new(0);
        let t0 = Instant::now();
        for _ in 0..100 {
            g.failed(None, t0);
        }
        assert_eq!(g.blocked(None, t0), None);
    }
}
