//! Wake-ups of forwarded commands on PostgreSQL (issue 12): one `LISTEN` connection per
//! node on the commands and replies channels (`sqlx`'s `PgListener`, which reconnects by
//! itself). Notices sent while it was reconnecting are lost, which is why callers poll
//! as well; [`Wakeup::Reconnected`] tells them to look at once.

use sqlx::postgres::PgListener;

use crate::Result;
use crate::cluster::commands::{COMMANDS_CHANNEL, REPLIES_CHANNEL, Wakeup};

/// A node's listening connection.
pub struct Wakeups {
    listener: PgListener,
}

impl Wakeups {
    pub(crate) async fn connect(url: &str) -> Result<Wakeups> {
        let mut listener = PgListener::connect(url).await?;
        listener
            .listen_all([COMMANDS_CHANNEL, REPLIES_CHANNEL])
            .await?;
        Ok(Wakeups { listener })
    }

    /// The next wake-up; an error only when the server cannot be reached again.
    pub async fn next(&mut self) -> Result<Wakeup> {
        match self.listener.try_recv().await? {
            None => Ok(Wakeup::Reconnected),
            Some(n) if n.channel() == COMMANDS_CHANNEL => Ok(Wakeup::Command(n.payload().into())),
            Some(n) => Ok(Wakeup::Reply(n.payload().into())),
        }
    }
}
