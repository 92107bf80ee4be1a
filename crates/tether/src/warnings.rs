//! Settings that work but expose something: `serve` logs each at WARN when it starts and
//! `doctor` lists them.

use crate::config::Settings;

/// One sentence per risky setting, saying what is exposed and how to close it.
pub fn risky_settings(settings: &Settings) -> Vec<String> {
    let mut out = Vec::new();
    let ip = settings.listen.ip();
    if !ip.is_loopback() {
        out.push(format!(
            "listen address {} is not a loopback address: the API, the web page and the \
             webhooks are reachable from other machines over plain HTTP (the token travels \
             unencrypted); listen on 127.0.0.1 behind a TLS reverse proxy instead",
            settings.listen
        ));
    }
    // Over the long connection events come on a socket tether opened with the app
    // secret, so plain events expose nothing there.
    if let Some(feishu) = &settings.channels.feishu
        && feishu.mode == tether_channels::FeishuMode::Webhook
        && feishu.encrypt_key.is_none()
    {
        out.push(
            "[channels.feishu] has no encrypt_key: Feishu events arrive in plain mode, \
             unsigned and unencrypted, checked only by the verification token; set \
             encrypt_key (the Encrypt Key of the Feishu app's event settings)"
                .to_owned(),
        );
    }
    out
}
