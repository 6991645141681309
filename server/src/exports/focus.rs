//! The month's ledger as a FinOps FOCUS cost-and-usage dataset (`GET /api/v1/exports/focus.csv`).
//!
//! Versions: **1.2** (ratified 2025-05-29; the default — the newest ratified version whose column list could be
//! confirmed from the specification's own sources) and **1.0** (`version=1.0`, what the FinOps Foundation's
//! `focus-validator` 1.0.0 checks). FOCUS 1.3 (2025-12) and 1.4 (2026-06) were announced as ratified, but their
//! column lists could not be confirmed here, so they are not offered.
//!
//! One row per ledger line. `ChargeCategory` is `Usage` for the capacity, energy, service and overhead terms,
//! `Credit` for approved dispute credits and `Adjustment` for late-data corrections of a closed month — those
//! carry `ChargeClass = Correction` and the corrected month as their charge period. `ConsumedQuantity` is the
//! line's quantity in its unit (GPU-hours for the capacity terms). Custom columns are `x_`-prefixed: confidence,
//! GPU class, term, and the ledger's own identifiers.
//!
//! focus-validator 1.0.0 checks FOCUS 1.0 under five pre-1.0 column names (`ChargeType`, `InvoiceIssuer`,
//! `Provider`, `Publisher`, `ResourceID`); the 1.0 file carries them too, with the same values as the
//! specification's `ChargeCategory`, `InvoiceIssuerName`, `ProviderName`, `PublisherName` and `ResourceId`.

use std::borrow::Cow;

use axum::{extract::State, http::HeaderMap, response::Response};
use gpuledger_core::ledger::{LedgerLine, Term};
use serde_json::json;
use time::OffsetDateTime;

use super::{
    CsvFilter, CsvQuery, audit_export,
    cells::{self, Cell},
    csv_response, month_lines,
};
use crate::http::Params;
use crate::{app::AppState, error::AppError, exports::reader};

/// A FOCUS version this export writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// FOCUS 1.0 (2024-06).
    V1_0,
    /// FOCUS 1.2 (2025-05).
    V1_2,
}

impl Version {
    /// The default: the newest ratified version whose columns are confirmed.
    pub const DEFAULT: Self = Self::V1_2;

    /// `1.0` or `1.2`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "1.0" => Some(Self::V1_0),
            "1.2" => Some(Self::V1_2),
            _ => None,
        }
    }

    /// As written.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::V1_0 => "1.0",
            Self::V1_2 => "1.2",
        }
    }

    /// The specification's columns, in its order.
    pub fn columns(self) -> &'static [&'static str] {
        match self {
            Self::V1_0 => V1_0,
            Self::V1_2 => V1_2,
        }
    }
}

/// FOCUS 1.0's 43 columns.
const V1_0: &[&str] = &[
    "AvailabilityZone",
    "BilledCost",
    "BillingAccountId",
    "BillingAccountName",
    "BillingCurrency",
    "BillingPeriodEnd",
    "BillingPeriodStart",
    "ChargeCategory",
    "ChargeClass",
    "ChargeDescription",
    "ChargeFrequency",
    "ChargePeriodEnd",
    "ChargePeriodStart",
    "CommitmentDiscountCategory",
    "CommitmentDiscountId",
    "CommitmentDiscountName",
    "CommitmentDiscountStatus",
    "CommitmentDiscountType",
    "ConsumedQuantity",
    "ConsumedUnit",
    "ContractedCost",
    "ContractedUnitPrice",
    "EffectiveCost",
    "InvoiceIssuerName",
    "ListCost",
    "ListUnitPrice",
    "PricingCategory",
    "PricingQuantity",
    "PricingUnit",
    "ProviderName",
    "PublisherName",
    "RegionId",
    "RegionName",
    "ResourceId",
    "ResourceName",
    "ResourceType",
    "ServiceCategory",
    "ServiceName",
    "SkuId",
    "SkuPriceId",
    "SubAccountId",
    "SubAccountName",
    "Tags",
];

/// The names focus-validator 1.0.0 requires for FOCUS 1.0 (pre-1.0 spellings), added to the 1.0 file.
const V1_0_VALIDATOR_ALIASES: &[&str] = &["ChargeType", "InvoiceIssuer", "Provider", "Publisher", "ResourceID"];

/// FOCUS 1.2's 57 columns (specification/columns at tag v1.2).
const V1_2: &[&str] = &[
    "AvailabilityZone",
    "BilledCost",
    "BillingAccountId",
    "BillingAccountName",
    "BillingAccountType",
    "BillingCurrency",
    "BillingPeriodEnd",
    "BillingPeriodStart",
    "CapacityReservationId",
    "CapacityReservationStatus",
    "ChargeCategory",
    "ChargeClass",
    "ChargeDescription",
    "ChargeFrequency",
    "ChargePeriodEnd",
    "ChargePeriodStart",
    "CommitmentDiscountCategory",
    "CommitmentDiscountId",
    "CommitmentDiscountName",
    "CommitmentDiscountQuantity",
    "CommitmentDiscountStatus",
    "CommitmentDiscountType",
    "CommitmentDiscountUnit",
    "ConsumedQuantity",
    "ConsumedUnit",
    "ContractedCost",
    "ContractedUnitPrice",
    "EffectiveCost",
    "InvoiceId",
    "InvoiceIssuerName",
    "ListCost",
    "ListUnitPrice",
    "PricingCategory",
    "PricingCurrency",
    "PricingCurrencyContractedUnitPrice",
    "PricingCurrencyEffectiveCost",
    "PricingCurrencyListUnitPrice",
    "PricingQuantity",
    "PricingUnit",
    "ProviderName",
    "PublisherName",
    "RegionId",
    "RegionName",
    "ResourceId",
    "ResourceName",
    "ResourceType",
    "ServiceCategory",
    "ServiceName",
    "ServiceSubcategory",
    "SkuId",
    "SkuMeter",
    "SkuPriceDetails",
    "SkuPriceId",
    "SubAccountId",
    "SubAccountName",
    "SubAccountType",
    "Tags",
];

/// The custom columns, after the specification's.
const CUSTOM: &[&str] = &[
    "x_Confidence",
    "x_GpuClass",
    "x_Term",
    "x_LineId",
    "x_Period",
    "x_DepartmentId",
    "x_Department",
    "x_TenantId",
    "x_Tenant",
    "x_PolicyVersion",
    "x_Corrects",
    "x_Evidence",
];

/// Every column of a version's file, in order.
pub fn header(v: Version) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = v.columns().to_vec();
    if v == Version::V1_0 {
        out.extend_from_slice(V1_0_VALIDATOR_ALIASES);
    }
    out.extend_from_slice(CUSTOM);
    out
}

/// What every row shares.
pub struct Context {
    /// Organization id (the billing account).
    pub org_id: String,
    /// Organization name (account, provider, publisher and invoice issuer).
    pub org_name: String,
}

fn month_bounds(p: gpuledger_core::Period) -> (OffsetDateTime, OffsetDateTime) {
    (p.start(), super::sources::next_month(p.start()))
}

/// FOCUS's ChargeDescription is ASCII only: the explanation with its symbols spelled in ASCII (`×` → `x`,
/// `−` → `-`) and Latin letters without their accents; anything else becomes `?`.
fn ascii(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            c if c.is_ascii() => out.push(c),
            '×' => out.push('x'),
            '−' | '–' | '—' | '‐' => out.push('-'),
            '…' => out.push_str("..."),
            '≈' => out.push('~'),
            '≤' => out.push_str("<="),
            '≥' => out.push_str(">="),
            '‘' | '’' => out.push('\''),
            '“' | '”' => out.push('"'),
            '\u{a0}' | '\u{202f}' | '\u{2009}' => out.push(' '),
            'À'..='Å' => out.push('A'),
            'à'..='å' => out.push('a'),
            'È'..='Ë' => out.push('E'),
            'è'..='ë' => out.push('e'),
            'Ì'..='Ï' => out.push('I'),
            'ì'..='ï' => out.push('i'),
            'Ò'..='Ö' | 'Ø' => out.push('O'),
            'ò'..='ö' | 'ø' => out.push('o'),
            'Ù'..='Ü' => out.push('U'),
            'ù'..='ü' => out.push('u'),
            'Ç' => out.push('C'),
            'ç' => out.push('c'),
            'Ñ' => out.push('N'),
            'ñ' => out.push('n'),
            'ß' => out.push_str("ss"),
            _ => out.push('?'),
        }
    }
    out
}

/// A decimal as FOCUS tools read it: always with a fractional part (pandas reads `2` as an integer column).
fn decimal(s: String) -> Cell<'static> {
    if s.contains('.') { Cell::Num(Cow::Owned(s)) } else { Cell::Num(Cow::Owned(format!("{s}.0"))) }
}

fn category(t: Term) -> &'static str {
    match t {
        Term::Credit => "Credit",
        Term::Adjustment => "Adjustment",
        _ => "Usage",
    }
}

fn consumed_unit(unit: &str) -> String {
    match unit {
        "GPU-hour" => "GPU-Hours".to_string(),
        "kWh" => "kWh".to_string(),
        "million weighted tokens" => "Million Weighted Tokens".to_string(),
        "share" => "Share".to_string(),
        other => other.to_string(),
    }
}

/// One cell of a FOCUS row.
pub fn value<'l>(column: &str, ctx: &'l Context, l: &'l LedgerLine) -> Cell<'l> {
    let usage = category(l.term) == "Usage";
    let (bill_start, bill_end) = month_bounds(l.period);
    // A correction's charge period is the month it corrects (`corrects` starts with that month).
    let (charge_start, charge_end) = match (l.term, l.corrects.as_deref()) {
        (Term::Adjustment, Some(c)) => c
            .split('/')
            .next()
            .and_then(|m| gpuledger_core::Period::parse(m).ok())
            .map_or((bill_start, bill_end), month_bounds),
        _ => (bill_start, bill_end),
    };
    let holder_id = l.tenant_id.map_or_else(|| l.department_id.to_string(), |t| t.to_string());
    let holder_name = if l.tenant.is_empty() { l.department.as_str() } else { l.tenant.as_str() };
    let owned = |s: String| Cell::Text(Cow::Owned(s));
    let when_usage = |c: Cell<'l>| if usage { c } else { Cell::Null };
    match column {
        "BilledCost" | "EffectiveCost" | "ListCost" | "ContractedCost" | "PricingCurrencyEffectiveCost" => {
            decimal(l.amount.to_string())
        }
        "BillingAccountId" => Cell::text(&ctx.org_id),
        "BillingAccountName" | "InvoiceIssuerName" | "InvoiceIssuer" | "ProviderName" | "Provider"
        | "PublisherName" | "Publisher" => Cell::text(&ctx.org_name),
        "BillingAccountType" => Cell::text("Organization"),
        "BillingCurrency" | "PricingCurrency" => Cell::text(&l.currency),
        "BillingPeriodStart" => Cell::Time(bill_start),
        "BillingPeriodEnd" => Cell::Time(bill_end),
        "ChargePeriodStart" => Cell::Time(charge_start),
        "ChargePeriodEnd" => Cell::Time(charge_end),
        "ChargeCategory" | "ChargeType" => Cell::text(category(l.term)),
        "ChargeClass" => {
            if l.term == Term::Adjustment {
                Cell::text("Correction")
            } else {
                Cell::Null
            }
        }
        "ChargeDescription" => owned(ascii(&l.explanation)),
        "ChargeFrequency" => Cell::text(match l.term {
            Term::Guaranteed | Term::Overhead => "Recurring",
            Term::Borrowed | Term::Energy | Term::Service => "Usage-Based",
            Term::Credit | Term::Adjustment => "One-Time",
        }),
        "ConsumedQuantity" | "PricingQuantity" => when_usage(decimal(l.quantity.to_string())),
        "ConsumedUnit" | "PricingUnit" => when_usage(owned(consumed_unit(&l.unit))),
        "ContractedUnitPrice"
        | "ListUnitPrice"
        | "PricingCurrencyContractedUnitPrice"
        | "PricingCurrencyListUnitPrice" => when_usage(decimal(l.rate.to_string())),
        // Showback issues no invoice: FOCUS says InvoiceId MUST be null then (a closed month is not an invoice).
        "InvoiceId" => Cell::Null,
        "PricingCategory" => when_usage(Cell::text("Standard")),
        "ResourceId" | "ResourceID" => {
            if l.gpu_class.is_empty() {
                owned(holder_id)
            } else {
                owned(format!("{holder_id}/{}", l.gpu_class))
            }
        }
        "ResourceName" => {
            if l.gpu_class.is_empty() {
                Cell::text(holder_name)
            } else {
                owned(format!("{holder_name} {}", l.gpu_class))
            }
        }
        "ResourceType" => Cell::text(match l.term {
            Term::Energy => "GPU Energy",
            Term::Service => "Shared Model Endpoint",
            Term::Overhead => "Platform Overhead",
            _ => "GPU Capacity",
        }),
        "ServiceCategory" => Cell::text(if l.term == Term::Service { "AI and Machine Learning" } else { "Compute" }),
        "ServiceSubcategory" => Cell::text(if l.term == Term::Service { "Generative AI" } else { "Containers" }),
        "ServiceName" => Cell::text(match l.term {
            Term::Guaranteed => "GPU Guaranteed Capacity",
            Term::Borrowed => "GPU Borrowed Capacity",
            Term::Energy => "GPU Energy",
            Term::Service => "Shared Model Serving",
            Term::Overhead => "GPU Platform Overhead",
            Term::Credit | Term::Adjustment => "GPU Capacity",
        }),
        "SkuId" => when_usage(owned(if l.gpu_class.is_empty() {
            l.term.as_str().to_string()
        } else {
            format!("{}/{}", l.gpu_class, l.term.as_str())
        })),
        "SkuPriceId" => when_usage(owned(format!(
            "policy-{}/{}/{}",
            l.policy_version,
            if l.gpu_class.is_empty() { "-" } else { l.gpu_class.as_str() },
            l.term.as_str()
        ))),
        "SkuMeter" => when_usage(Cell::text(match l.term {
            Term::Energy => "Energy",
            Term::Service => "Weighted Tokens",
            Term::Overhead => "Overhead Share",
            _ => "GPU Hours",
        })),
        "SubAccountId" => owned(holder_id),
        "SubAccountName" => Cell::text(holder_name),
        "SubAccountType" => Cell::text(if l.tenant_id.is_some() { "Tenant" } else { "Department" }),
        "Tags" => {
            let mut tags = serde_json::Map::new();
            tags.insert("gpuledger/department".into(), json!(l.department));
            if !l.tenant.is_empty() {
                tags.insert("gpuledger/tenant".into(), json!(l.tenant));
            }
            if !l.gpu_class.is_empty() {
                tags.insert("gpuledger/gpu_class".into(), json!(l.gpu_class));
            }
            owned(serde_json::Value::Object(tags).to_string())
        }
        "x_Confidence" => Cell::text(l.confidence.as_str()),
        "x_GpuClass" => Cell::text_or_null(&l.gpu_class),
        "x_Term" => Cell::text(l.term.as_str()),
        "x_LineId" => Cell::text(&l.line_id),
        "x_Period" => owned(l.period.to_string()),
        "x_DepartmentId" => Cell::Guid(l.department_id.as_uuid()),
        "x_Department" => Cell::text(&l.department),
        "x_TenantId" => l.tenant_id.map_or(Cell::Null, |t| Cell::Guid(t.as_uuid())),
        "x_Tenant" => Cell::text_or_null(&l.tenant),
        "x_PolicyVersion" => Cell::Int(i64::from(l.policy_version)),
        "x_Corrects" => l.corrects.as_deref().map_or(Cell::Null, Cell::text),
        "x_Evidence" => Cell::text(&l.evidence),
        // AvailabilityZone, capacity reservations, commitment discounts, regions, SKU price details: none here.
        _ => Cell::Null,
    }
}

/// The FOCUS file of `lines`.
pub fn write(v: Version, ctx: &Context, lines: &[LedgerLine]) -> Vec<u8> {
    let columns = header(v);
    let mut out = Vec::with_capacity(1024 * (lines.len() + 1));
    cells::csv_header(&mut out, columns.iter());
    for l in lines {
        let row: Vec<Cell<'_>> = columns.iter().map(|c| value(c, ctx, l)).collect();
        cells::csv_row(&mut out, row.iter());
    }
    out
}

/// `GET /api/v1/exports/focus.csv?period=YYYY-MM[&version=1.2|1.0][&department=UUID][&tenant=UUID]`.
pub(super) async fn focus_csv(
    State(state): State<AppState>,
    headers: HeaderMap,
    Params(q): Params<CsvQuery>,
) -> Result<Response, AppError> {
    let p = reader(&state, &headers).await?;
    let f = CsvFilter::parse(&q)?;
    let version = match q.version.as_deref().filter(|v| !v.is_empty()) {
        None => Version::DEFAULT,
        Some(s) => Version::parse(s)
            .ok_or_else(|| AppError::invalid("version", "FOCUS 1.2 (the default) and 1.0 are offered"))?,
    };
    let (lines, _closed) = month_lines(&state, &p, &f).await?;
    let mut tx = state.db.begin_org(p.org).await?;
    let org_name: String = sqlx::query_scalar("SELECT name FROM organizations WHERE org_id = $1")
        .bind(p.org.as_uuid())
        .fetch_one(tx.conn())
        .await?;
    tx.commit().await?;
    let mut details = f.details();
    details["version"] = json!(version.as_str());
    details["lines"] = json!(lines.len());
    audit_export(&state.db, &p, "export.focus_csv", &f.period.to_string(), details).await?;
    let ctx = Context { org_id: p.org.as_uuid().to_string(), org_name };
    let body = write(version, &ctx, &lines);
    Ok(csv_response(body.into(), &format!("focus-{}", version.as_str()), f.period))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn charge_descriptions_are_ascii() {
        let s = ascii("1 H100-80GB guaranteed × 720 h × 2.00 USD = 1,440.00 USD; Forschung−Zürich … 東京");
        assert!(s.is_ascii(), "{s}");
        assert_eq!(s, "1 H100-80GB guaranteed x 720 h x 2.00 USD = 1,440.00 USD; Forschung-Zurich ... ??");
    }

    #[test]
    fn column_counts() {
        assert_eq!(V1_0.len(), 43);
        assert_eq!(V1_2.len(), 57);
        for c in CUSTOM {
            assert!(c.starts_with("x_"));
        }
        for v in [Version::V1_0, Version::V1_2] {
            let h = header(v);
            let mut sorted = h.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), h.len(), "duplicate column in {v:?}");
        }
    }
}
