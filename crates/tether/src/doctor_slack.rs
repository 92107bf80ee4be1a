//! `tether doctor` for Slack: the credentials are checked against the Web API
//! (`auth.test` for the bot token; in Socket Mode `apps.connections.open` for the
//! app-level token).

use crate::config::Settings;

/// The Slack section of the report (empty when Slack is not configured).
pub async fn report(settings: &Settings) -> String {
    let Some(cfg) = &settings.channels.slack else {
        return String::new();
    };
    match tether_channels::slack::check(cfg).await {
        Ok(ok) => format!("\nslack: ok: {ok}\n"),
        Err(e) => format!("\nslack: ERROR: {e}\n"),
    }
}
