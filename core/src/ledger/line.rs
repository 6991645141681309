//! A ledger line, its charge [`Term`] and its CSV form (also the canonical form the close hash covers).

use serde::{Deserialize, Serialize};

use crate::{
    confidence::Confidence,
    decimal::Decimal,
    ids::{DepartmentId, TenantId},
    interval::Period,
};

/// Charge terms, in the order lines are listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Term {
    /// Committed quota × hours × guaranteed rate.
    Guaranteed,
    /// Allocation above quota × borrowed rate.
    Borrowed,
    /// Attributed energy × price.
    Energy,
    /// Share of a shared endpoint.
    Service,
    /// Share of the platform overhead.
    Overhead,
    /// Approved credit.
    Credit,
    /// Correction of a closed period.
    Adjustment,
}

impl Term {
    /// Name as written in lines and exports.
    pub const fn as_str(&self) -> &'static str {
        match self {
            Term::Guaranteed => "guaranteed",
            Term::Borrowed => "borrowed",
            Term::Energy => "energy",
            Term::Service => "service",
            Term::Overhead => "overhead",
            Term::Credit => "credit",
            Term::Adjustment => "adjustment",
        }
    }
}

/// One ledger line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerLine {
    /// `PERIOD/term/holder/detail`, unique in the period.
    pub line_id: String,
    /// Month.
    pub period: Period,
    /// Department.
    pub department_id: DepartmentId,
    /// Department name.
    pub department: String,
    /// Tenant (none for a department-level guarantee).
    pub tenant_id: Option<TenantId>,
    /// Tenant name (empty for a department-level line).
    pub tenant: String,
    /// Charge term.
    pub term: Term,
    /// GPU class (empty when not class-specific).
    pub gpu_class: String,
    /// Quantity.
    pub quantity: Decimal,
    /// Unit of the quantity.
    pub unit: String,
    /// Rate per unit.
    pub rate: Decimal,
    /// Amount (rounded to cents).
    pub amount: Decimal,
    /// Currency.
    pub currency: String,
    /// Weakest confidence of its inputs.
    pub confidence: Confidence,
    /// Policy version that priced it.
    pub policy_version: u32,
    /// Where its evidence is.
    pub evidence: String,
    /// What it corrects, for credits and adjustments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub corrects: Option<String>,
    /// One sentence with its numbers.
    pub explanation: String,
}

/// CSV header of [`LedgerLine::csv_row`].
pub const CSV_HEADER: &str = "line_id,period,department_id,department,tenant_id,tenant,term,gpu_class,quantity,unit,\
rate,amount,currency,confidence,policy_version,evidence,corrects,explanation";

fn csv_field(out: &mut String, s: &str) {
    if s.contains([',', '"', '\n', '\r']) {
        out.push('"');
        out.push_str(&s.replace('"', "\"\""));
        out.push('"');
    } else {
        out.push_str(s);
    }
}

impl LedgerLine {
    /// The line as one CSV row (no newline), columns as in [`CSV_HEADER`]; also its canonical form for the hash.
    pub fn csv_row(&self) -> String {
        let fields = [
            self.line_id.clone(),
            self.period.to_string(),
            self.department_id.to_string(),
            self.department.clone(),
            self.tenant_id.map(|t| t.to_string()).unwrap_or_default(),
            self.tenant.clone(),
            self.term.as_str().to_string(),
            self.gpu_class.clone(),
            self.quantity.to_string(),
            self.unit.clone(),
            self.rate.to_string(),
            self.amount.to_string(),
            self.currency.clone(),
            self.confidence.as_str().to_string(),
            self.policy_version.to_string(),
            self.evidence.clone(),
            self.corrects.clone().unwrap_or_default(),
            self.explanation.clone(),
        ];
        let mut out = String::with_capacity(256);
        for (i, f) in fields.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            csv_field(&mut out, f);
        }
        out
    }
}
