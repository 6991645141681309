//! Inference efficiency of shared model-serving endpoints: per tenant, the work done (requests, tokens), the
//! GPU-hours that work is attributed, tokens per GPU-hour and the mean time to first token.
//!
//! **Analytics only, never billed.** The attribution is the ledger's (see `ledger`, the service term): an endpoint's
//! GPU-hours are split between its tenants in proportion to their weighted tokens (input and output tokens times the
//! cost policy's weights for the model; 1 and 1 without a policy). So the attributed hours are `modeled`, and a
//! tenant's tokens per GPU-hour differs from its neighbours' only through the input/output mix: the figure that
//! varies between endpoints and months is the endpoint's own throughput, and the one that varies between tenants is
//! their latency (TTFT) and volume.

use std::collections::BTreeMap;

use crate::{Confidence, DomainError, Fraction, NANOS_PER_HOUR, ids::TenantId};

/// One tenant's period totals on one endpoint and model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointUsage {
    /// The tenant (usage of tenants that are not defined is not attributed).
    pub tenant: TenantId,
    /// Endpoint name.
    pub endpoint: String,
    /// Model.
    pub model: String,
    /// Requests.
    pub requests: u64,
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Time to first token summed over `ttft_count` requests, milliseconds (0 and 0 when not reported).
    pub ttft_ms_sum: u64,
    /// Requests `ttft_ms_sum` covers.
    pub ttft_count: u64,
}

/// An endpoint's GPU time in the period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndpointTime {
    /// GPU-nanoseconds (GPU fraction × held time) of the endpoint's pods.
    pub gpu_nanos: Fraction,
    /// The least certain of its allocations' confidences.
    pub confidence: Confidence,
}

/// One tenant's efficiency on one endpoint (all its models together).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantEfficiency {
    /// The tenant.
    pub tenant: TenantId,
    /// The endpoint.
    pub endpoint: String,
    /// Models the tenant used there, sorted.
    pub models: Vec<String>,
    /// Requests.
    pub requests: u64,
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// The tenant's share of the endpoint's weighted tokens (0..=1).
    pub share: Fraction,
    /// The endpoint's GPU-hours times `share`.
    pub gpu_hours: Fraction,
    /// (Input + output) tokens per attributed GPU-hour; `None` when no GPU-hours are attributed.
    pub tokens_per_gpu_hour: Option<Fraction>,
    /// Output tokens per attributed GPU-hour.
    pub output_tokens_per_gpu_hour: Option<Fraction>,
    /// Mean time to first token, milliseconds; `None` when the model server did not report it.
    pub mean_ttft_ms: Option<Fraction>,
    /// `modeled` at best (the split is a model), lowered by the endpoint's allocations.
    pub confidence: Confidence,
}

/// An endpoint's totals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointEfficiency {
    /// The endpoint.
    pub endpoint: String,
    /// Its GPU-hours in the period (0 when its pods were not seen: usage without allocations).
    pub gpu_hours: Fraction,
    /// Requests of all tenants.
    pub requests: u64,
    /// Input + output tokens of all tenants.
    pub tokens: u64,
    /// Tokens per GPU-hour.
    pub tokens_per_gpu_hour: Option<Fraction>,
    /// Mean time to first token over all reported requests, milliseconds.
    pub mean_ttft_ms: Option<Fraction>,
    /// The endpoint's allocations' confidence.
    pub confidence: Confidence,
}

/// The analysis: endpoints, and tenants on them (sorted by endpoint, then tenant).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InferenceEfficiency {
    /// Per endpoint.
    pub endpoints: Vec<EndpointEfficiency>,
    /// Per tenant and endpoint.
    pub tenants: Vec<TenantEfficiency>,
}

fn ratio(num: Fraction, den: Fraction) -> Result<Option<Fraction>, DomainError> {
    if den.is_zero() { Ok(None) } else { num.checked_div(den).map(Some) }
}

fn count(n: u64) -> Fraction {
    Fraction::from(n)
}

/// Splits each endpoint's GPU time between the tenants that used it, by weighted tokens. `weight(model)` gives the
/// (input, output) token weights; usage of endpoints missing from `endpoints` gets no GPU-hours (and no ratios).
pub fn inference_efficiency(
    endpoints: &BTreeMap<String, EndpointTime>,
    usage: &[EndpointUsage],
    weight: impl Fn(&str) -> (Fraction, Fraction),
) -> Result<InferenceEfficiency, DomainError> {
    #[derive(Default)]
    struct Acc {
        models: Vec<String>,
        requests: u64,
        input: u64,
        output: u64,
        weighted: Fraction,
        ttft_sum: u64,
        ttft_count: u64,
    }
    let mut by: BTreeMap<(&str, TenantId), Acc> = BTreeMap::new();
    for u in usage {
        let (wi, wo) = weight(&u.model);
        let w = wi
            .checked_mul_int(i128::from(u.input_tokens))?
            .checked_add(wo.checked_mul_int(i128::from(u.output_tokens))?)?;
        let a = by.entry((u.endpoint.as_str(), u.tenant)).or_default();
        if !a.models.contains(&u.model) {
            a.models.push(u.model.clone());
        }
        a.requests = a.requests.saturating_add(u.requests);
        a.input = a.input.saturating_add(u.input_tokens);
        a.output = a.output.saturating_add(u.output_tokens);
        a.weighted = a.weighted.checked_add(w)?;
        a.ttft_sum = a.ttft_sum.saturating_add(u.ttft_ms_sum);
        a.ttft_count = a.ttft_count.saturating_add(u.ttft_count);
    }
    let mut totals: BTreeMap<&str, Acc> = BTreeMap::new();
    for ((endpoint, _), a) in &by {
        let t = totals.entry(endpoint).or_default();
        t.requests = t.requests.saturating_add(a.requests);
        t.input = t.input.saturating_add(a.input);
        t.output = t.output.saturating_add(a.output);
        t.weighted = t.weighted.checked_add(a.weighted)?;
        t.ttft_sum = t.ttft_sum.saturating_add(a.ttft_sum);
        t.ttft_count = t.ttft_count.saturating_add(a.ttft_count);
    }
    let hour = Fraction::from_integer(NANOS_PER_HOUR)?;
    let endpoint_hours = |endpoint: &str| -> Result<(Fraction, Confidence), DomainError> {
        match endpoints.get(endpoint) {
            Some(t) => Ok((t.gpu_nanos.checked_div(hour)?, t.confidence)),
            None => Ok((Fraction::ZERO, Confidence::Estimated)),
        }
    };
    let mut out = InferenceEfficiency::default();
    for (endpoint, t) in &totals {
        let (hours, confidence) = endpoint_hours(endpoint)?;
        let tokens = t.input.saturating_add(t.output);
        out.endpoints.push(EndpointEfficiency {
            endpoint: (*endpoint).to_string(),
            gpu_hours: hours,
            requests: t.requests,
            tokens,
            tokens_per_gpu_hour: ratio(count(tokens), hours)?,
            mean_ttft_ms: ratio(count(t.ttft_sum), count(t.ttft_count))?,
            confidence,
        });
    }
    for ((endpoint, tenant), mut a) in by {
        let (hours, confidence) = endpoint_hours(endpoint)?;
        let total = totals.get(endpoint).map_or(Fraction::ZERO, |t| t.weighted);
        let share = ratio(a.weighted, total)?.unwrap_or(Fraction::ZERO);
        let gpu_hours = hours.checked_mul(share)?;
        a.models.sort();
        out.tenants.push(TenantEfficiency {
            tenant,
            endpoint: endpoint.to_string(),
            models: a.models,
            requests: a.requests,
            input_tokens: a.input,
            output_tokens: a.output,
            share,
            gpu_hours,
            tokens_per_gpu_hour: ratio(count(a.input.saturating_add(a.output)), gpu_hours)?,
            output_tokens_per_gpu_hour: ratio(count(a.output), gpu_hours)?,
            mean_ttft_ms: ratio(count(a.ttft_sum), count(a.ttft_count))?,
            confidence: Confidence::Modeled.combine(confidence),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use proptest::prelude::*;
    use uuid::Uuid;

    use super::*;

    fn tenant(n: u128) -> TenantId {
        TenantId::from_uuid(Uuid::from_u128(n))
    }

    fn use_(t: u128, model: &str, requests: u64, input: u64, output: u64, ttft: (u64, u64)) -> EndpointUsage {
        EndpointUsage {
            tenant: tenant(t),
            endpoint: "llm-shared".into(),
            model: model.into(),
            requests,
            input_tokens: input,
            output_tokens: output,
            ttft_ms_sum: ttft.0,
            ttft_count: ttft.1,
        }
    }

    fn ten_gpu_hours() -> BTreeMap<String, EndpointTime> {
        let nanos = Fraction::from_integer(10 * NANOS_PER_HOUR).unwrap();
        BTreeMap::from([("llm-shared".to_string(), EndpointTime { gpu_nanos: nanos, confidence: Confidence::Exact })])
    }

    #[test]
    fn an_endpoints_hours_are_split_by_weighted_tokens() {
        // Output tokens weigh 3, input 1: A has 1,000 + 3 × 1,000 = 4,000; B 2,000 + 3 × 2,000 = 8,000 → ⅓ and ⅔.
        let usage = [use_(1, "m", 10, 1000, 1000, (2500, 10)), use_(2, "m", 30, 2000, 2000, (9000, 30))];
        let three = |_: &str| (Fraction::ONE, Fraction::from(3u64));
        let r = inference_efficiency(&ten_gpu_hours(), &usage, three).unwrap();
        let (a, b) = (&r.tenants[0], &r.tenants[1]);
        assert_eq!(a.share, Fraction::new(1, 3).unwrap());
        assert_eq!(a.gpu_hours, Fraction::new(10, 3).unwrap());
        assert_eq!(b.gpu_hours, Fraction::new(20, 3).unwrap());
        // 2,000 tokens over 10/3 GPU-hours = 600 per GPU-hour; B the same mix, so the same throughput.
        assert_eq!(a.tokens_per_gpu_hour, Some(Fraction::from(600u64)));
        assert_eq!(b.tokens_per_gpu_hour, Some(Fraction::from(600u64)));
        assert_eq!(a.output_tokens_per_gpu_hour, Some(Fraction::from(300u64)));
        assert_eq!(a.mean_ttft_ms, Some(Fraction::from(250u64)));
        assert_eq!(b.mean_ttft_ms, Some(Fraction::from(300u64)));
        assert_eq!(a.confidence, Confidence::Modeled);
        let e = &r.endpoints[0];
        assert_eq!((e.requests, e.tokens), (40, 6000));
        assert_eq!(e.tokens_per_gpu_hour, Some(Fraction::from(600u64)));
        assert_eq!(e.mean_ttft_ms, Some(Fraction::new(11500, 40).unwrap()));
    }

    #[test]
    fn usage_without_gpu_time_or_ttft_has_no_ratios() {
        let usage = [use_(1, "m", 5, 100, 100, (0, 0))];
        let r = inference_efficiency(&BTreeMap::new(), &usage, |_| (Fraction::ONE, Fraction::ONE)).unwrap();
        let t = &r.tenants[0];
        assert_eq!((t.gpu_hours, t.tokens_per_gpu_hour, t.mean_ttft_ms), (Fraction::ZERO, None, None));
        assert_eq!(t.confidence, Confidence::Estimated, "no allocation seen for the endpoint");
        // No tokens at all: no share, no division by zero.
        let idle = [use_(1, "m", 0, 0, 0, (0, 0))];
        let r = inference_efficiency(&ten_gpu_hours(), &idle, |_| (Fraction::ONE, Fraction::ONE)).unwrap();
        assert_eq!((r.tenants[0].share, r.tenants[0].gpu_hours), (Fraction::ZERO, Fraction::ZERO));
    }

    #[test]
    fn a_tenants_models_on_one_endpoint_are_one_row() {
        let usage = [use_(1, "b", 1, 10, 10, (100, 1)), use_(1, "a", 1, 10, 10, (300, 1))];
        let r = inference_efficiency(&ten_gpu_hours(), &usage, |_| (Fraction::ONE, Fraction::ONE)).unwrap();
        assert_eq!(r.tenants.len(), 1);
        assert_eq!(r.tenants[0].models, vec!["a".to_string(), "b".to_string()]);
        assert_eq!(r.tenants[0].share, Fraction::ONE);
        assert_eq!(r.tenants[0].mean_ttft_ms, Some(Fraction::from(200u64)));
    }

    proptest! {
        /// The tenants' attributed GPU-hours add up exactly to the endpoint's whenever it did any weighted work.
        #[test]
        fn attributed_hours_add_up(rows in prop::collection::vec((1u128..6, 0u64..1_000_000, 0u64..1_000_000), 1..20),
                                   hours in 1i128..10_000) {
            let usage: Vec<EndpointUsage> = rows.iter().map(|(t, i, o)| use_(*t, "m", 1, *i, *o, (0, 0))).collect();
            let nanos = Fraction::from_integer(hours * NANOS_PER_HOUR).unwrap();
            let eps = BTreeMap::from([("llm-shared".to_string(), EndpointTime { gpu_nanos: nanos, confidence: Confidence::Exact })]);
            let r = inference_efficiency(&eps, &usage, |_| (Fraction::ONE, Fraction::from(2u64))).unwrap();
            let sum = r.tenants.iter().try_fold(Fraction::ZERO, |a, t| a.checked_add(t.gpu_hours)).unwrap();
            let worked = rows.iter().any(|(_, i, o)| i + o > 0);
            prop_assert_eq!(sum, if worked { Fraction::from_integer(hours).unwrap() } else { Fraction::ZERO });
        }
    }
}
