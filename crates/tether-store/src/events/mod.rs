//! Events: appended per session with a gap-free `seq` (`sql.rs`, with the conversation
//! history), stored in group commits (`append`, `sql_append.rs`) and published to their
//! followers at commit (`feed`, `sql_feed.rs`). Rows are keyed by integer numbers of
//! their session and conversation (`numbers`).

pub(crate) mod append;
pub(crate) mod feed;
pub(crate) mod numbers;
