//! The clock port: the domain takes time as `now_ms`; whoever runs it reads it from a
//! [`Clock`] (the runtime's is the system clock; in-process tests set their own).

use std::future::Future;
use std::pin::Pin;

/// A wait handed out by a [`Clock`].
pub type Wait = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The wall clock of the runtime.
pub trait Clock: Send + Sync {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;

    /// Resolves once [`Clock::now_ms`] has reached `at_ms` (at once if it has).
    fn sleep_until(&self, at_ms: i64) -> Wait;
}
