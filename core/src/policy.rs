//! The cost policy: rates per GPU class, energy price, shared-endpoint pricing, token weights, the shared-overhead
//! pool and its distribution key, and the currency. Versioned and approved by finance before it prices a period;
//! an approved version is never edited (the server enforces the states, this module the content).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::{decimal::Decimal, error::DomainError, fraction::Fraction, ids::TenantId};

/// A cost policy's content (the part finance edits while it is a draft).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostPolicy {
    /// Version number, assigned by the server (1, 2, …); part of every line it prices.
    #[serde(default)]
    pub version: u32,
    /// ISO 4217 code, e.g. `USD`.
    pub currency: String,
    /// Rates per GPU class, per GPU-hour.
    #[serde(default)]
    pub classes: Vec<ClassRates>,
    /// Energy price, when energy is charged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy: Option<EnergyPrice>,
    /// Shared model-serving endpoints whose cost is split by weighted productive work.
    #[serde(default)]
    pub services: Vec<ServicePricing>,
    /// How tokens are weighted, per model (`*` = any other model). Without an entry a token weighs 1.
    #[serde(default)]
    pub token_weights: Vec<TokenWeight>,
    /// The shared-overhead pool and its distribution key.
    #[serde(default)]
    pub overhead: OverheadPolicy,
    /// When a reservation counts as idle (for the idle list and its notifications; never billed). Absent from a
    /// document that keeps the defaults, so earlier policies read and hash as they always did.
    #[serde(default, skip_serializing_if = "IdlePolicy::is_default")]
    pub idle: IdlePolicy,
    /// Which device faults earn a credit, after what grace, and whether credits are proposed (docs/finance.md).
    /// Absent from a document that keeps the defaults.
    #[serde(default, skip_serializing_if = "crate::faults::FaultPolicy::is_default")]
    pub faults: crate::faults::FaultPolicy,
}

/// When an allocation holding GPUs counts as an idle reservation: activity below `threshold_pct` for at least
/// `min_hours` (default: below 5 % for 2 hours).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdlePolicy {
    /// Percent of the GPU's activity (0–100) below which time is idle.
    pub threshold_pct: Decimal,
    /// Hours of idle time before a reservation is listed.
    pub min_hours: Decimal,
}

impl Default for IdlePolicy {
    fn default() -> Self {
        Self {
            threshold_pct: Decimal::from_scaled(5, 0).unwrap_or(Decimal::ZERO),
            min_hours: Decimal::from_scaled(2, 0).unwrap_or(Decimal::ZERO),
        }
    }
}

impl IdlePolicy {
    /// Whether these are the defaults (not written into documents).
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// Rates of one GPU class.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassRates {
    /// GPU class (as in the approved inventory).
    pub gpu_class: String,
    /// Per guaranteed GPU-hour (committed quota, used or not).
    pub guaranteed: Decimal,
    /// Per borrowed GPU-hour (allocation above quota).
    pub borrowed: Decimal,
    /// Price the class at **actual cost**: the month's imported cloud bill for the nodes holding this class's GPUs
    /// (FOCUS EffectiveCost, commitment discounts included) is spread over the class's charged GPU-hours, so the
    /// tenants split the real bill to the cent. `guaranteed` and `borrowed` are then the fallback for a month with no
    /// bill imported (a finding says so). Absent when false, so earlier policies read and hash as they always did.
    #[serde(default, skip_serializing_if = "is_false")]
    pub actual_cost: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Price of energy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnergyPrice {
    /// Per kWh.
    pub per_kwh: Decimal,
    /// Power usage effectiveness multiplier (≥ 1), when facility overhead is charged with the energy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pue: Option<Decimal>,
}

/// How a shared endpoint is priced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServicePricing {
    /// Endpoint name (the `endpoint` attribution label of its pods).
    pub endpoint: String,
    /// A fixed price per million weighted tokens. Without it, the endpoint's own cost (its GPU-hours at the
    /// guaranteed rate of their class, plus their energy) is split by weighted tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_million_weighted_tokens: Option<Decimal>,
}

/// Token weights of one model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenWeight {
    /// Model name, or `*` for any model without its own entry.
    pub model: String,
    /// Weight of an input (prompt) token.
    pub input: Decimal,
    /// Weight of an output (generated) token, e.g. 4 when an output token costs four input tokens.
    pub output: Decimal,
}

/// The platform's shared costs and how they are distributed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverheadPolicy {
    /// Fixed monthly amounts (licenses, staff, storage…).
    #[serde(default)]
    pub fixed: Vec<FixedCost>,
    /// Add the cost of capacity nobody held or reserved (GPU-hours × the class's guaranteed rate).
    #[serde(default)]
    pub unallocated_capacity: bool,
    /// Distribution key.
    #[serde(default)]
    pub key: OverheadKey,
}

/// A fixed monthly cost in the overhead pool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FixedCost {
    /// What it is.
    pub name: String,
    /// Amount per month.
    pub amount: Decimal,
}

/// How the overhead pool is distributed among tenants.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum OverheadKey {
    /// Proportional to each tenant's allocated GPU-hours in the period (equal when nobody allocated anything).
    #[default]
    AllocatedGpuHours,
    /// Equal shares among the organization's tenants.
    Equal,
    /// Declared shares (normalized to their sum).
    FixedShares {
        /// Tenant and share.
        shares: Vec<FixedShare>,
    },
}

/// One tenant's declared share of the overhead.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FixedShare {
    /// Tenant.
    pub tenant: TenantId,
    /// Share (any non-negative number; shares are normalized).
    pub share: Decimal,
}

fn non_negative(field: String, d: &Decimal) -> Result<(), DomainError> {
    if d.is_negative() {
        return Err(DomainError::invalid_at(field, format!("{d} is negative")));
    }
    Ok(())
}

fn invalid(field: String, reason: impl Into<String>) -> DomainError {
    DomainError::invalid_at(field, reason)
}

impl CostPolicy {
    /// Checks the content; the error names the field (`classes[1].borrowed`) and the reason.
    pub fn validate(&self) -> Result<(), DomainError> {
        if self.currency.len() != 3 || !self.currency.bytes().all(|b| b.is_ascii_uppercase()) {
            return Err(invalid("currency".into(), format!("{:?} is not an ISO 4217 code like USD", self.currency)));
        }
        let mut seen = BTreeSet::new();
        for (i, c) in self.classes.iter().enumerate() {
            if c.gpu_class.trim().is_empty() || c.gpu_class.chars().count() > 100 {
                return Err(invalid(format!("classes[{i}].gpu_class"), "must be 1 to 100 characters"));
            }
            if !seen.insert(c.gpu_class.as_str()) {
                return Err(invalid(format!("classes[{i}].gpu_class"), format!("{} is listed twice", c.gpu_class)));
            }
            non_negative(format!("classes[{i}].guaranteed"), &c.guaranteed)?;
            non_negative(format!("classes[{i}].borrowed"), &c.borrowed)?;
        }
        if let Some(e) = &self.energy {
            non_negative("energy.per_kwh".into(), &e.per_kwh)?;
            if let Some(pue) = &e.pue
                && pue.value() < Fraction::ONE
            {
                return Err(invalid("energy.pue".into(), format!("{pue} is below 1")));
            }
        }
        let pct = self.idle.threshold_pct.value();
        if pct <= Fraction::ZERO || pct > Fraction::from_integer(100)? {
            return Err(invalid("idle.threshold_pct".into(), "must be above 0 and at most 100"));
        }
        let hours = self.idle.min_hours.value();
        if hours <= Fraction::ZERO || hours > Fraction::from_integer(24 * 31)? {
            return Err(invalid("idle.min_hours".into(), "must be above 0 and at most 744 (a month)"));
        }
        if self.faults.grace_minutes > 24 * 60 {
            return Err(invalid("faults.grace_minutes".into(), "at most 1440 (a day)"));
        }
        if self.faults.xids.len() > 256 {
            return Err(invalid("faults.xids".into(), "at most 256 codes"));
        }
        if let Some((i, x)) = self.faults.xids.iter().enumerate().find(|(_, x)| **x == 0 || **x > 65_535) {
            return Err(invalid(format!("faults.xids[{i}]"), format!("{x} is not an XID code (1 to 65535)")));
        }
        let mut seen = BTreeSet::new();
        for (i, s) in self.services.iter().enumerate() {
            if s.endpoint.trim().is_empty() || s.endpoint.chars().count() > 200 {
                return Err(invalid(format!("services[{i}].endpoint"), "must be 1 to 200 characters"));
            }
            if !seen.insert(s.endpoint.as_str()) {
                return Err(invalid(format!("services[{i}].endpoint"), format!("{} is listed twice", s.endpoint)));
            }
            if let Some(r) = &s.per_million_weighted_tokens {
                non_negative(format!("services[{i}].per_million_weighted_tokens"), r)?;
            }
        }
        let mut seen = BTreeSet::new();
        for (i, w) in self.token_weights.iter().enumerate() {
            if w.model.trim().is_empty() {
                return Err(invalid(format!("token_weights[{i}].model"), "must not be empty (use * for any model)"));
            }
            if !seen.insert(w.model.as_str()) {
                return Err(invalid(format!("token_weights[{i}].model"), format!("{} is listed twice", w.model)));
            }
            non_negative(format!("token_weights[{i}].input"), &w.input)?;
            non_negative(format!("token_weights[{i}].output"), &w.output)?;
        }
        for (i, f) in self.overhead.fixed.iter().enumerate() {
            if f.name.trim().is_empty() {
                return Err(invalid(format!("overhead.fixed[{i}].name"), "must not be empty"));
            }
            non_negative(format!("overhead.fixed[{i}].amount"), &f.amount)?;
        }
        if let OverheadKey::FixedShares { shares } = &self.overhead.key {
            let mut total = Fraction::ZERO;
            let mut seen = BTreeSet::new();
            for (i, s) in shares.iter().enumerate() {
                non_negative(format!("overhead.key.shares[{i}].share"), &s.share)?;
                if !seen.insert(s.tenant) {
                    return Err(invalid(format!("overhead.key.shares[{i}].tenant"), "tenant listed twice"));
                }
                total = total.checked_add(s.share.value())?;
            }
            if total.is_zero() {
                return Err(invalid("overhead.key.shares".into(), "shares must add up to more than zero"));
            }
        }
        Ok(())
    }

    /// Rates of a class.
    pub fn rates(&self, gpu_class: &str) -> Option<&ClassRates> {
        self.classes.iter().find(|c| c.gpu_class == gpu_class)
    }

    /// (input, output) token weights of a model: its own entry, else `*`, else (1, 1).
    pub fn token_weight(&self, model: &str) -> (Fraction, Fraction) {
        let entry = self
            .token_weights
            .iter()
            .find(|w| w.model == model)
            .or_else(|| self.token_weights.iter().find(|w| w.model == "*"));
        entry.map_or((Fraction::ONE, Fraction::ONE), |w| (w.input.value(), w.output.value()))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn policy() -> CostPolicy {
        serde_json::from_value(serde_json::json!({
            "currency": "USD",
            "classes": [{"gpu_class": "H100", "guaranteed": "2.10", "borrowed": "3.00"}],
            "energy": {"per_kwh": "0.12", "pue": "1.3"},
            "services": [{"endpoint": "llm-shared"}],
            "token_weights": [{"model": "*", "input": "1", "output": "4"}],
            "overhead": {"fixed": [{"name": "platform team", "amount": "1000.00"}], "key": {"kind": "equal"}}
        }))
        .unwrap()
    }

    #[test]
    fn a_valid_policy_round_trips() {
        let p = policy();
        p.validate().unwrap();
        let back: CostPolicy = serde_json::from_str(&serde_json::to_string(&p).unwrap()).unwrap();
        assert_eq!(back, p);
        assert_eq!(p.token_weight("llama").1, Fraction::from_integer(4).unwrap());
    }

    #[test]
    fn errors_name_the_field() {
        let mut p = policy();
        p.classes[0].borrowed = Decimal::parse("-1").unwrap();
        assert!(p.validate().unwrap_err().to_string().contains("classes[0].borrowed"));
        let mut p = policy();
        p.currency = "usd".into();
        assert!(p.validate().unwrap_err().to_string().contains("currency"));
        let mut p = policy();
        p.energy.as_mut().unwrap().pue = Some(Decimal::parse("0.9").unwrap());
        assert!(p.validate().unwrap_err().to_string().contains("energy.pue"));
        let bad = serde_json::from_value::<CostPolicy>(serde_json::json!({"currency": "USD", "rates": []}));
        assert!(bad.is_err(), "unknown fields are rejected, not ignored");
    }
}
