//! The chat channels end to end: Telegram, Feishu, Slack and Discord against their fakes.
//! One binary per theme (issue 27 item 5): each module was a test binary of its own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod channels_commands;
mod channels_discord;
mod channels_feishu;
mod channels_feishu_ws;
mod channels_files;
mod channels_people;
mod channels_slack;
mod channels_telegram;
