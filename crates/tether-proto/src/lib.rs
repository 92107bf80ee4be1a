//! Wire types of tether: HTTP DTOs, the event envelope and the stable [`ErrorCode`]s.
//!
//! This crate holds data only. It must not depend on tokio, sqlx, axum or any other
//! I/O crate; logic over these types lives in `tether-core`.

mod accounts;
mod attachment;
mod audit;
mod cluster;
mod delegation;
mod dto;
mod error;
mod event;
mod ids;
mod pages;
mod params;
mod people;
mod schedules;
mod status;
mod usage;

pub use accounts::*;
pub use attachment::*;
pub use audit::*;
pub use cluster::*;
pub use delegation::*;
pub use dto::*;
pub use error::*;
pub use event::*;
pub use ids::*;
pub use pages::*;
pub use params::*;
pub use people::*;
pub use schedules::*;
pub use status::*;
pub use usage::*;
