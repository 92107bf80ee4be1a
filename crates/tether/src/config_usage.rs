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
    Ok(UsageConfig { prices, accounts })
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
        let usage = resolve(Some(file), BTreeMap::new()).unwrap();
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
        let err = resolve(Some(file), BTreeMap::new())
            .unwrap_err()
            .to_string();
        assert!(err.contains("input"), "{err}");
        assert!(toml::from_str::<PricesFile>("[models.m]\ninput = 1.0\n").is_err());
    }
}
