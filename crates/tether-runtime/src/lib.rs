//! tether-runtime: session actors (one owner per runtime session, one turn at a time,
//! queue, approvals and questions), the router that applies the binding rules, start-up
//! recovery, and the event bus.
//!
//! Must not depend on a web framework or a channel: adapters call [`Runtime`].

mod actor;
mod answers;
mod api;
mod config;
mod ctx;
mod cwd;
mod error;
mod pool;
mod router;
mod turn_step;
mod views;

pub use api::Runtime;
pub use config::RuntimeConfig;
pub use error::RuntimeError;
pub use pool::{PoolConfig, PoolStatus};
