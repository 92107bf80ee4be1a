//! One [`Store`] over two backends: each public method runs the same method of the
//! backend the store was opened on (`sqlite::Db` or `pg::Db`, the same SQL compiled once
//! for each, see `crate::sql`). A `match` per call is all the SQLite path pays for it.

mod channels;
mod commands;
mod sessions;

use crate::{Store, pg, sqlite};

/// The backend a store was opened on.
#[derive(Clone)]
pub(crate) enum Backend {
    Sqlite(sqlite::Db),
    Postgres(pg::Db),
}

impl Store {
    pub(crate) fn backend(&self) -> &Backend {
        &self.backend
    }
}

/// Calls that PostgreSQL's query time-out does not bound as a whole (see the macro).
pub(crate) const UNBOUNDED: &[&str] = &["append_events", "recover", "recover_conversation"];

/// Defines `Store` methods that run the backend's method of the same name and arguments;
/// on PostgreSQL each within the query time-out (`Store::set_query_timeout`).
macro_rules! forward {
    ($(
        $(#[$meta:meta])*
        $vis:vis async fn $name:ident(&self $(, $arg:ident: $ty:ty)* $(,)?) -> $ret:ty;
    )*) => {
        impl crate::Store {
            $(
                $(#[$meta])*
                $vis async fn $name(&self $(, $arg: $ty)*) -> $ret {
                    self.count_call();
                    match self.backend() {
                        Backend::Sqlite(db) => db.$name($($arg),*).await,
                        // A group commit bounds its own steps (its outcome may be unknown
                        // and is read back); recovery may take long on a large store.
                        Backend::Postgres(db) if $crate::dispatch::UNBOUNDED.contains(&stringify!($name)) => {
                            db.$name($($arg),*).await
                        }
                        Backend::Postgres(db) => db.bounded(db.$name($($arg),*)).await,
                    }
                }
            )*
        }
    };
}
use forward;
