//! `[prices]` and `[agents.NAME] account` of the config file: what the usage ledger
//! (issue 29) records beside the tokens.
//!
//! ```toml
//! [prices]
//! version = "team-2026-12"        # recorded with every ledger row (default: the built-in
//!                                 # table's version, or "config" once a model is given)
//! [prices.models."gpt-5*"]        # an exact model name, or a prefix ending in `*`
//! input = 1.25                    # US dollars per million tokens
//! cached_input = 0.125
//! output = 10.0
//! cache_write = 1.25              # default: input
//!
//! [limits]                        # turns stopped by a vendor's usage limit
//! unknown_reset_secs = 300        # the wait when the vendor does not say (default 300)
//! attempts = 2                    # continuations of one parked turn (default 2)
//! horizon_hours = 24              # a later reset is not waited for
//! stagger_secs = 3                # sessions parked on one account wake this far apart
//!
//! [agents.claude]
//! account = "team-anthropic"      # the vendor account (default: the agent's name)
//! ```

use std::collections::BTreeMap;

use anyhow::{Result, bail};
use serde::Deserialize;
use tether_core::usage::{Price, Prices};
use tether_runtime::UsageConfig;

/// `[prices]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PricesFile {
    pub version: Option<String>,
    #[serde(default)]
    pub models: BTreeMap<String, PriceFile>,
}

/// `[limits]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsFile {
    pub unknown_reset_secs: Option<u64>,
    pub attempts: Option<u32>,
    pub horizon_hours: Option<u64>,
    pub stagger_secs: Option<u64>,
}

fn limits(file: Option<LimitsFile>) -> Result<tether_runtime::LimitsConfig> {
    use std::time::Duration;
    let d = tether_runtime::LimitsConfig::default();
    let f = file.unwrap_or_default();
    let l = tether_runtime::LimitsConfig {
        unknown_reset_wait: f
            .unknown_reset_secs
            .map_or(d.unknown_reset_wait, Duration::from_secs),
        attempts: f.attempts.unwrap_or(d.attempts),
        horizon: f
            .horizon_hours
            .map_or(d.horizon, |h| Duration::from_secs(h * 3600)),
        stagger: f.stagger_secs.map_or(d.stagger, Duration::from_secs),
    };
    if l.unknown_reset_wait.is_zero() || l.unknown_reset_wait > Duration::from_secs(86_400) {
        bail!("[limits] unknown_reset_secs must be between 1 and 86400");
    }
    if !(1..=10).contains(&l.attempts) {
        bail!("[limits] attempts must be between 1 and 10");
    }
    if !(1..=168).contains(&(l.horizon.as_secs() / 3600)) {
        bail!("[limits] horizon_hours must be between 1 and 168");
    }
    Ok(l)
}

/// One model's prices, in US dollars per million tokens.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceFile {
    pub input: f64,
    pub output: f64,
    pub cached_input: Option<f64>,
    pub cache_write: Option<f64>,
}

/// Dollars per million tokens as micro-dollars per million (exact for prices given to
/// the micro-dollar).
fn micros(model: &str, what: &str, dollars: f64) -> Result<u64> {
    if !dollars.is_finite() || !(0.0..=1_000_000.0).contains(&dollars) {
        bail!(
            "[prices.models.{model:?}] {what} must be between 0 and 1000000 dollars per million tokens (got {dollars})"
        );
    }
    Ok((dollars * 1_000_000.0).round() as u64)
}

/// `[prices]` over the built-in table, and each agent's account.
pub fn resolve(
    file: Option<PricesFile>,
    limits_file: Option<LimitsFile>,
    accounts: BTreeMap<String, String>,
) -> Result<UsageConfig> {
    let mut prices = Prices::defaults();
    if let Some(file) = file {
        let given = !file.models.is_empty();
        for (model, p) in file.models {
            if model.trim().is_empty() || model == "*" {
                bail!("[prices.models] needs a model name or a prefix such as \"gpt-5*\"");
            }
            let input = micros(&model, "input", p.input)?;
            let price = Price {
                input,
                output: micros(&model, "output", p.output)?,
                cached_input: match p.cached_input {
                    Some(d) => micros(&model, "cached_input", d)?,
                    None => input,
                },
                cache_write: match p.cache_write {
                    Some(d) => micros(&model, "cache_write", d)?,
                    None => input,
                },
            };
            prices.models.insert(model, price);
        }
        match file.version {
            Some(v) if v.trim().is_empty() => bail!("[prices] version must not be empty"),
            Some(v) => prices.version = v,
            None if given => prices.version = "config".to_owned(),
            None => {}
        }
    }
    for (agent, account) in &accounts {
        if account.trim().is_empty() {
            bail!("[agents.{agent}] account must not be empty");
        }
    }
    Ok(UsageConfig {
        prices,
        accounts,
        limits: limits(limits_file)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_prices_override_the_defaults_and_name_their_version() {
        let file: PricesFile = toml::from_str(
            "version = \"team-1\"\n[models.\"gpt-5*\"]\ninput = 2.0\noutput = 8.5\n",
        )
        .unwrap();
        let usage = resolve(Some(file), None, BTreeMap::new()).unwrap();
        assert_eq!(usage.prices.version, "team-1");
        let p = usage.prices.price("gpt-5-codex").unwrap();
        assert_eq!(
            (p.input, p.cached_input, p.output),
            (2_000_000, 2_000_000, 8_500_000)
        );
        assert!(
            usage.prices.price("claude-sonnet-4-5").is_some(),
            "defaults stay"
        );
        assert_eq!(usage.account("codex"), "codex");
    }

    #[test]
    fn bad_prices_are_refused_naming_the_field() {
        let file: PricesFile =
            toml::from_str("[models.\"m\"]\ninput = -1.0\noutput = 1.0\n").unwrap();
        let err = resolve(Some(file), None, BTreeMap::new())
            .unwrap_err()
            .to_string();
        assert!(err.contains("input"), "{err}");
        assert!(toml::from_str::<PricesFile>("[models.m]\ninput = 1.0\n").is_err());
    }
}
