//! The session actor's delegation command `Close` (a child module of `actor`, so it
//! shares the actor's state): release a session for good. (`EnsureLive` is in `live`.)

use tokio::sync::oneshot;

use super::Actor;

impl Actor {
    /// Releases the session: stops a running turn; the run loop ends the process and the
    /// actor once no turn runs ([`Actor::finish_close`]).
    pub(super) async fn close(&mut self, reply: oneshot::Sender<()>) {
        self.closing.push(reply);
        while self.queue.pop().is_some() {}
        if self.current.is_some() {
            self.stop().await;
        }
    }

    /// Ends the process and answers the waiting `Close` requests.
    pub(super) async fn finish_close(&mut self) {
        self.go_dormant("released").await;
        for r in self.closing.drain(..) {
            let _ = r.send(());
        }
    }
}
