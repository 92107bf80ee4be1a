//! `tether doctor`: the Discord channel's credentials, checked against Discord itself
//! (`GET /users/@me` with the bot token).

use std::fmt::Write as _;

use crate::config::Settings;

/// The Discord section of the report (empty when Discord is not configured).
pub async fn report(settings: &Settings) -> String {
    let Some(dc) = &settings.channels.discord else {
        return String::new();
    };
    let mut out = String::from("\ndiscord:\n");
    let _ = writeln!(out, "  application id: {}", dc.application_id);
    let _ = writeln!(out, "  mode:           {:?}", dc.mode);
    match tether_channels::discord::check_credentials(dc).await {
        Ok(me) => {
            let _ = writeln!(out, "  [ok] bot token: signed in as {me}");
        }
        Err(e) => {
            let _ = writeln!(out, "  [--] bot token: REFUSED or unreachable ({e})");
        }
    }
    out
}
