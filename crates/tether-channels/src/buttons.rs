//! How a button names the decision it stands for, for every platform: the compact
//! callback data of Telegram's inline buttons and Discord's components (`custom_id`),
//! `a:<approval id>:<y|a|n>`, and the decision's wire name in Slack's and Feishu's button
//! values (`allow`, `allow_always`, `deny`).

use tether_proto::Decision;

/// `a:<approval id>:<y|a|n>`: at most 64 bytes (Telegram's limit) for tether's
/// 32-character ids, so within Discord's 100 too.
pub(crate) fn callback_data(approval_id: &str, d: Decision) -> String {
    let c = match d {
        Decision::Allow => 'y',
        Decision::AllowAlways => 'a',
        Decision::Deny => 'n',
    };
    format!("a:{approval_id}:{c}")
}

/// The approval and decision a callback data names, if it is one of tether's.
pub(crate) fn parse_callback(data: &str) -> Option<(String, Decision)> {
    let rest = data.strip_prefix("a:")?;
    let (id, d) = rest.rsplit_once(':')?;
    let d = match d {
        "y" => Decision::Allow,
        "a" => Decision::AllowAlways,
        "n" => Decision::Deny,
        _ => return None,
    };
    (!id.is_empty()).then(|| (id.to_string(), d))
}

/// The decision's wire name in button values.
pub(crate) fn decision_name(d: Decision) -> &'static str {
    match d {
        Decision::Allow => "allow",
        Decision::AllowAlways => "allow_always",
        Decision::Deny => "deny",
    }
}

/// The decision a button value's wire name stands for.
pub(crate) fn decision_from(name: &str) -> Option<Decision> {
    match name {
        "allow" => Some(Decision::Allow),
        "allow_always" => Some(Decision::AllowAlways),
        "deny" => Some(Decision::Deny),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callback_data_round_trips_and_fits() {
        let id = "0123456789abcdef0123456789abcdef";
        for d in [Decision::Allow, Decision::AllowAlways, Decision::Deny] {
            let data = callback_data(id, d);
            assert!(data.len() <= 64);
            assert_eq!(parse_callback(&data), Some((id.to_string(), d)));
        }
        assert_eq!(parse_callback("a::y"), None);
        assert_eq!(parse_callback("x:1:y"), None);
        assert_eq!(parse_callback("a:1:q"), None);
    }

    #[test]
    fn decision_names_round_trip() {
        for d in [Decision::Allow, Decision::AllowAlways, Decision::Deny] {
            assert_eq!(decision_from(decision_name(d)), Some(d));
        }
        assert_eq!(decision_from("maybe"), None);
    }
}
