//! Wrong `/link <code>` tries, counted per channel account (issue 28): at most
//! [`MAX_LINK_FAILURES`] in [`LINK_FAILURE_WINDOW`], then the account waits. In memory on
//! the node that took the message: a code is 8 characters of 31 and lives ten minutes, so
//! the count is there to stop a script, not to be exact across a cluster.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Wrong link codes one account may send within [`LINK_FAILURE_WINDOW`].
pub const MAX_LINK_FAILURES: u32 = 5;
pub const LINK_FAILURE_WINDOW: Duration = Duration::from_secs(600);

/// Wrong `/link <code>` tries per account.
#[derive(Default)]
pub(crate) struct LinkFailures(Mutex<HashMap<String, (Instant, u32)>>);

impl LinkFailures {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, u32)>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn blocked(&self, user: &str, now: Instant) -> bool {
        self.lock().get(user).is_some_and(|(since, n)| {
            now.duration_since(*since) < LINK_FAILURE_WINDOW && *n >= MAX_LINK_FAILURES
        })
    }

    pub(crate) fn failed(&self, user: &str, now: Instant) {
        let mut map = self.lock();
        map.retain(|_, (since, _)| now.duration_since(*since) < LINK_FAILURE_WINDOW);
        map.entry(user.to_owned()).or_insert((now, 0)).1 += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_account_waits_after_five_wrong_codes_and_the_window_forgets() {
        let tries = LinkFailures::default();
        let t0 = Instant::now();
        for _ in 0..MAX_LINK_FAILURES {
            assert!(!tries.blocked("ann", t0));
            tries.failed("ann", t0);
        }
        assert!(tries.blocked("ann", t0));
        assert!(!tries.blocked("bob", t0), "per account");
        let later = t0 + LINK_FAILURE_WINDOW;
        assert!(!tries.blocked("ann", later), "the window passed");
    }
}
