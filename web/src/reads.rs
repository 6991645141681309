//! What pages read from the server's features, as typed requests with typed answers.
//!
//! A page asks for a [`Read`] — the REST operation's own parameter types (`gpuledger_api::params`), so a page never
//! formats a URL — and gets the contract's answer type back:
//!
//! ```ignore
//! let ledger: Ledger = read(Read::Ledger(LedgerParams { period, tenant: None, .. })).await?;
//! ```
//!
//! One enum rather than a trait method per read: [`crate::PortalData`] stays one object-safe method, a fake answers
//! every read in one `match`, and a new read is one line here. The server answers each read by calling the
//! function its REST handler calls (`server/src/portal/reads.rs`), with the same authorization.

use gpuledger_api::{
    Items,
    analytics::Sessions,
    auth::{AuditLog, ProviderSettings, RoleMappings},
    close::{Evidence, Findings, Periods},
    costs::{CostImport, ImportParams},
    disputes::{DisputeDetail, DisputePage},
    foresight::{Budgets, Delivery, Forecast, IdleList, Webhook},
    ledger::{Ledger, Months, Summaries},
    orgs::OrganizationSettings,
    params::{
        AuditParams, DisputeListParams, DisputePath, EvidenceParams, IdPath, LedgerParams, MonthParams, MonthsParams,
        OptionalMonthParams, PeriodPath, QuotaParams, SessionsParams, VersionPath,
    },
    policy::{Impact, PolicyList, QuotaList},
    telemetry::Coverage,
    tenancy::{Department, NamespaceRule, Tenant},
};
use serde::de::IntoDeserializer;

use crate::data::{PortalDataHandle, PortalError};

/// Declares [`Read`], [`Answer`] and each answer type's [`Reply`]: every answer type belongs to one read, so the
/// type a page asks for says which answer it takes.
macro_rules! reads {
    ($( $(#[$doc:meta])* $name:ident ( $($param:ty),* ) => $answer:ty ; )*) => {
        /// A read a page makes: the REST operation's parameters, typed.
        #[derive(Debug, Clone, PartialEq)]
        pub enum Read {
            $( $(#[$doc])* $name($($param),*), )*
        }

        /// What a [`Read`] answers: the contract's type of that operation's answer.
        #[derive(Debug, Clone)]
        // An answer is moved once, from the data source to its page: boxing every variant would buy nothing.
        #[allow(clippy::large_enum_variant)]
        pub enum Answer {
            $( $(#[$doc])* $name($answer), )*
        }

        impl Answer {
            /// `read`'s answer from its JSON form (the REST API's body), for data sources that hold JSON (test
            /// fakes, recorded answers).
            pub fn from_json(read: &Read, body: serde_json::Value) -> Result<Self, serde_json::Error> {
                Ok(match read {
                    $( Read::$name(..) => Self::$name(serde_json::from_value(body)?), )*
                })
            }
        }

        $(
            impl Reply for $answer {
                fn take(answer: Answer) -> Option<Self> {
                    match answer {
                        Answer::$name(a) => Some(a),
                        _ => None,
                    }
                }
            }
        )*
    };
}

reads! {
    /// `GET /api/v1/periods`.
    Periods() => Periods;
    /// `GET /api/v1/ledger`.
    Ledger(LedgerParams) => Ledger;
    /// `GET /api/v1/ledger/months`.
    Months(MonthsParams) => Months;
    /// `GET /api/v1/ledger/summaries`.
    Summaries(MonthParams) => Summaries;
    /// `GET /api/v1/forecast`.
    Forecast(OptionalMonthParams) => Forecast;
    /// `GET /api/v1/idle`.
    Idle() => IdleList;
    /// `GET /api/v1/periods/{period}/evidence`.
    Evidence(PeriodPath, EvidenceParams) => Evidence;
    /// `GET /api/v1/analytics/sessions`.
    Sessions(SessionsParams) => Sessions;
    /// `GET /api/v1/budgets`.
    Budgets(OptionalMonthParams) => Budgets;
    /// `GET /api/v1/notifications/webhooks`.
    Webhooks() => Items<Webhook>;
    /// `GET /api/v1/notifications/webhooks/{id}/deliveries`.
    Deliveries(IdPath) => Items<Delivery>;
    /// `GET /api/v1/disputes`.
    Disputes(DisputeListParams) => DisputePage;
    /// `GET /api/v1/disputes/{id}`.
    Dispute(DisputePath) => DisputeDetail;
    /// `GET /api/v1/periods/{period}/findings`.
    Findings(PeriodPath) => Findings;
    /// `GET /api/v1/tenants`.
    Tenants() => Items<Tenant>;
    /// `GET /api/v1/departments`.
    Departments() => Items<Department>;
    /// `GET /api/v1/tenancy/namespace-rules`.
    NamespaceRules() => Items<NamespaceRule>;
    /// `GET /api/v1/policies`.
    Policies() => PolicyList;
    /// `GET /api/v1/quotas`.
    Quotas(QuotaParams) => QuotaList;
    /// `GET /api/v1/policies/{version}/impact`.
    PolicyImpact(VersionPath, MonthParams) => Impact;
    /// `GET /api/v1/organization/settings`.
    Settings() => OrganizationSettings;
    /// `GET /api/v1/costs/imports` (404: no bill imported for the month).
    CostImport(ImportParams) => CostImport;
    /// `GET /api/v1/identity/provider`.
    Provider() => ProviderSettings;
    /// `GET /api/v1/identity/role-mappings`.
    RoleMappings() => RoleMappings;
    /// `GET /api/v1/audit`.
    Audit(AuditParams) => AuditLog;
    /// `GET /api/v1/telemetry/coverage`: the month as given (`None`: this month), parsed by the operation itself.
    Coverage(Option<String>) => Coverage;
}

/// An answer type, taken out of the [`Answer`] of the one read that gives it.
pub trait Reply: Sized {
    /// The answer, if `answer` is this type's.
    fn take(answer: Answer) -> Option<Self>;
}

/// Why a read was refused: what the REST API would have answered (its status and the problem's detail).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The HTTP status the operation answers with (403, 404, 422, …).
    pub status: u16,
    /// The problem's detail, safe to show.
    pub detail: String,
}

impl From<Refusal> for PortalError {
    fn from(r: Refusal) -> Self {
        PortalError { message: r.detail }
    }
}

fn handle() -> Result<PortalDataHandle, Refusal> {
    leptos::prelude::use_context::<PortalDataHandle>()
        .ok_or_else(|| Refusal { status: 500, detail: "the portal has no data source configured".into() })
}

async fn answer<T: Reply>(request: Read) -> Result<T, Refusal> {
    let answer = handle()?.0.read(request).await?;
    T::take(answer).ok_or_else(|| Refusal { status: 500, detail: "the server answered a different read".into() })
}

/// `request`'s answer as `T`; a refusal's detail is the error.
pub async fn read<T: Reply>(request: Read) -> Result<T, PortalError> {
    answer(request).await.map_err(PortalError::from)
}

/// `request`'s answer as `T`, `None` when the operation answers 404 (nothing there, e.g. no bill imported).
pub async fn read_found<T: Reply>(request: Read) -> Result<Option<T>, PortalError> {
    match answer(request).await {
        Ok(a) => Ok(Some(a)),
        Err(r) if r.status == 404 => Ok(None),
        Err(r) => Err(r.into()),
    }
}

/// The month's ledger (`GET /api/v1/ledger`): `tenant`'s lines only (its name or ID) or every line the caller may
/// see, `per_page` lines at most (the totals always cover every line).
pub async fn month_ledger(period: &str, tenant: Option<&str>, per_page: i64) -> Result<Ledger, PortalError> {
    let params = LedgerParams {
        period: param("period", period)?,
        tenant: tenant.map(|t| param("tenant", t)).transpose()?,
        department: None,
        term: None,
        page: None,
        per_page: Some(whole("per_page", per_page)?),
    };
    read(Read::Ledger(params)).await
}

/// A page of 25 of a tenant's allocation records of the month (`GET /api/v1/periods/{period}/evidence`), sorted by
/// `sort` and limited to the GPU class `class` unless it is empty.
pub async fn tenant_evidence(
    period: &str,
    tenant: &str,
    class: &str,
    sort: &str,
    page: u32,
) -> Result<Evidence, PortalError> {
    let path = PeriodPath { period: param("period", period)? };
    let params = EvidenceParams {
        tenant: Some(param("tenant", tenant)?),
        gpu_class: if class.is_empty() { None } else { Some(param("gpu_class", class)?) },
        endpoint: None,
        sort: Some(param("sort", sort)?),
        page: Some(whole("page", i64::from(page))?),
        per_page: Some(whole("per_page", 25)?),
    };
    read(Read::Evidence(path, params)).await
}

/// A parameter the page got as text (from its own URL), read by its type's guard as the API's extractor reads it;
/// refused as the API refuses it (`field: reason`), so a bad value in a portal URL shows the API's sentence.
pub fn param<T: serde::de::DeserializeOwned>(field: &str, value: &str) -> Result<T, PortalError> {
    let value: serde::de::value::StrDeserializer<'_, serde::de::value::Error> = value.into_deserializer();
    T::deserialize(value).map_err(|e| PortalError { message: format!("{field}: {e}") })
}

/// A whole number for a parameter of type `Int<MIN, MAX>`, refused as the API refuses one out of its bounds.
pub fn whole<const MIN: i64, const MAX: i64>(
    field: &str,
    n: i64,
) -> Result<gpuledger_api::input::Int<MIN, MAX>, PortalError> {
    gpuledger_api::input::Int::new(n).map_err(|e| PortalError { message: format!("{field}: {e}") })
}
