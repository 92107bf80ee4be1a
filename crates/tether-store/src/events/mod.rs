//! Events: appended per session with a gap-free `seq` (`sql.rs`, with the conversation
//! history), stored in group commits (`append`, `sql_append.rs`) and published to their
//! followers at commit (`feed`, `sql_feed.rs`).

pub(crate) mod append;
pub(crate) mod feed;
