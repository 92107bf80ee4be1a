//! The channels' Prometheus series (issue 31; the `metrics` facade, see
//! `tether_runtime::metrics`): messages in and out of each channel, failed deliveries
//! and retries. The outbox's backlog and age are gauges the runtime reads at a scrape.

pub const MESSAGES_IN: &str = "tether_channel_messages_in_total";
pub const MESSAGES_OUT: &str = "tether_channel_messages_out_total";
pub const RETRIES: &str = "tether_channel_delivery_retries_total";
pub const GIVEN_UP: &str = "tether_outbox_given_up_total";

pub(crate) fn message_in(channel: &'static str) {
    metrics::counter!(MESSAGES_IN, "channel" => channel).increment(1);
}

pub(crate) fn message_out(channel: &'static str) {
    metrics::counter!(MESSAGES_OUT, "channel" => channel).increment(1);
}

pub(crate) fn retry(channel: &'static str) {
    metrics::counter!(RETRIES, "channel" => channel).increment(1);
}

/// A message that will never reach the platform: refused for good (`permanent`) or
/// still failing after the last attempt (`retries`).
pub(crate) fn given_up(channel: &'static str, reason: &'static str) {
    metrics::counter!(GIVEN_UP, "channel" => channel, "reason" => reason).increment(1);
}
