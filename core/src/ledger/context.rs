//! The state the charge terms share while one ledger is computed: the input, lookups, and the lines so far.

use std::collections::BTreeMap;

use super::{AllocationRecord, DepartmentRef, DeviceEnergy, LedgerInput, LedgerLine, TenantRef, Term};
use crate::{
    confidence::Confidence,
    decimal::Decimal,
    error::DomainError,
    ids::{DepartmentId, TenantId},
};

pub(super) struct Ctx<'a> {
    pub(super) input: &'a LedgerInput,
    /// The allocations this pass reads: the input's, or one part of them (`LedgerParts`).
    pub(super) allocations: &'a [AllocationRecord],
    /// The device energy of those allocations' devices.
    pub(super) energy: &'a [DeviceEnergy],
    pub(super) tenants: BTreeMap<TenantId, &'a TenantRef>,
    pub(super) departments: BTreeMap<DepartmentId, &'a DepartmentRef>,
    pub(super) lines: Vec<LedgerLine>,
}

impl<'a> Ctx<'a> {
    pub(super) fn new(input: &'a LedgerInput, allocations: &'a [AllocationRecord], energy: &'a [DeviceEnergy]) -> Self {
        Ctx {
            input,
            allocations,
            energy,
            tenants: input.tenants.iter().map(|t| (t.id, t)).collect(),
            departments: input.departments.iter().map(|d| (d.id, d)).collect(),
            lines: Vec::new(),
        }
    }

    pub(super) fn base_line(
        &self,
        term: Term,
        tenant: Option<TenantId>,
        department: DepartmentId,
        gpu_class: &str,
        key: &str,
    ) -> Result<LedgerLine, DomainError> {
        let tenant_name = tenant.and_then(|t| self.tenants.get(&t)).map(|t| t.name.clone()).unwrap_or_default();
        let department_name =
            self.departments.get(&department).map(|d| d.name.clone()).ok_or_else(|| {
                DomainError::invalid_at("departments", format!("department {department} is not listed"))
            })?;
        let holder = if tenant.is_some() { tenant_name.clone() } else { format!("department:{department_name}") };
        let mut line_id = format!("{}/{}/{holder}", self.input.period, term.as_str());
        if !key.is_empty() {
            line_id.push('/');
            line_id.push_str(key);
        }
        Ok(LedgerLine {
            line_id,
            period: self.input.period,
            department_id: department,
            department: department_name,
            tenant_id: tenant,
            tenant: tenant_name,
            term,
            gpu_class: gpu_class.to_string(),
            quantity: Decimal::ZERO,
            unit: String::new(),
            rate: Decimal::ZERO,
            amount: Decimal::ZERO,
            currency: self.input.policy.currency.clone(),
            confidence: Confidence::Exact,
            policy_version: self.input.policy.version,
            evidence: String::new(),
            corrects: None,
            explanation: String::new(),
        })
    }

    pub(super) fn department_of(&self, tenant: TenantId) -> Result<DepartmentId, DomainError> {
        self.tenants
            .get(&tenant)
            .map(|t| t.department)
            .ok_or_else(|| DomainError::invalid_at("tenants", format!("tenant {tenant} is not listed")))
    }

    pub(super) fn evidence(&self, query: &str) -> String {
        format!("/api/v1/periods/{}/evidence?{query}", self.input.period)
    }
}
