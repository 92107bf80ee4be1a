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

/// Defines `Store` methods that run the backend's method of the same name and arguments.
macro_rules! forward {
    ($(
        $(#[$meta:meta])*
        $vis:vis async fn $name:ident(&self $(, $arg:ident: $ty:ty)* $(,)?) -> $ret:ty;
    )*) => {
        impl crate::Store {
            $(
                $(#[$meta])*
                $vis async fn $name(&self $(, $arg: $ty)*) -> $ret {
                    match self.backend() {
                        Backend::Sqlite(db) => db.$name($($arg),*).await,
                        Backend::Postgres(db) => db.$name($($arg),*).await,
                    }
                }
            )*
        }
    };
}
use forward;
