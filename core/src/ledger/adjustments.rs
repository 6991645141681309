//! Approved credits and adjustments: their lines, and the late adjustments a closed period's changed facts call for.

use std::collections::{BTreeMap, BTreeSet};

use super::{AMOUNT_SCALE, AdjustmentKind, AdjustmentRecord, LedgerLine, Term, context::Ctx};
use crate::{decimal::Decimal, error::DomainError};

/// Adds one line per credit or adjustment.
pub(super) fn lines(ctx: &mut Ctx<'_>) -> Result<(), DomainError> {
    let input = ctx.input;
    let policy = &input.policy;
    for (i, adj) in input.adjustments.iter().enumerate() {
        if let Some(t) = adj.tenant
            && ctx.department_of(t)? != adj.department
        {
            return Err(DomainError::invalid_at(format!("adjustments[{i}].department"), "is not the tenant's"));
        }
        let term = match adj.kind {
            AdjustmentKind::Credit => Term::Credit,
            AdjustmentKind::LateData => Term::Adjustment,
        };
        let amount = adj
            .amount
            .with_scale(AMOUNT_SCALE)
            .map_err(|e| DomainError::invalid_at(format!("adjustments[{i}].amount"), e.to_string()))?;
        let mut line = ctx.base_line(term, adj.tenant, adj.department, &adj.gpu_class, &adj.id)?;
        line.quantity = Decimal::from_integer(1)?;
        line.unit = "adjustment".into();
        line.rate = amount;
        line.amount = amount;
        line.evidence = adj.corrects.clone();
        line.corrects = Some(adj.corrects.clone());
        line.explanation =
            format!("{}: {} {} correcting {}", adj.reason, amount.grouped(), policy.currency, adj.corrects);
        ctx.lines.push(line);
    }
    Ok(())
}

/// differs from what was closed plus the adjustments already issued for it, each pointing at the line it corrects
/// (`PERIOD/...` line ID). Lines that appear only in the recomputation are corrected from zero.
pub fn late_adjustments(
    closed: &[LedgerLine],
    already_adjusted: &[AdjustmentRecord],
    recomputed: &[LedgerLine],
) -> Result<Vec<AdjustmentRecord>, DomainError> {
    let zero = Decimal::from_scaled(0, AMOUNT_SCALE)?;
    let mut charged: BTreeMap<&str, Decimal> = BTreeMap::new();
    for l in closed {
        charged.insert(l.line_id.as_str(), l.amount);
    }
    let mut adjusted: BTreeMap<&str, Decimal> = BTreeMap::new();
    for a in already_adjusted.iter().filter(|a| a.kind == AdjustmentKind::LateData) {
        let v = adjusted.entry(a.corrects.as_str()).or_insert(zero);
        *v = v.checked_add(&a.amount)?;
    }
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    let mut push = |line: &LedgerLine, now: Decimal| -> Result<(), DomainError> {
        let before = charged
            .get(line.line_id.as_str())
            .copied()
            .unwrap_or(zero)
            .checked_add(&adjusted.get(line.line_id.as_str()).copied().unwrap_or(zero))?;
        if now == before {
            return Ok(());
        }
        let cents = now.checked_sub(&before)?.with_scale(AMOUNT_SCALE)?.scaled_units();
        // A second late fact for the same line gets its own ID, so both can land in one period.
        let issued = already_adjusted
            .iter()
            .filter(|a| a.kind == AdjustmentKind::LateData && a.corrects == line.line_id)
            .count();
        out.push(AdjustmentRecord {
            id: if issued == 0 {
                format!("late:{}", line.line_id)
            } else {
                format!("late:{}#{}", line.line_id, issued + 1)
            },
            kind: AdjustmentKind::LateData,
            tenant: line.tenant_id,
            department: line.department_id,
            gpu_class: line.gpu_class.clone(),
            amount: Decimal::from_scaled(cents, AMOUNT_SCALE)?,
            corrects: line.line_id.clone(),
            reason: format!(
                "Facts received after {} closed change {} {} from {} to {}",
                line.period,
                line.term.as_str(),
                if line.tenant.is_empty() { line.department.as_str() } else { line.tenant.as_str() },
                before.with_scale(AMOUNT_SCALE)?,
                now.with_scale(AMOUNT_SCALE)?
            ),
        });
        Ok(())
    };
    for l in recomputed {
        // Credits and adjustments are not recomputed from facts.
        if matches!(l.term, Term::Credit | Term::Adjustment) {
            continue;
        }
        seen.insert(l.line_id.as_str());
        push(l, l.amount)?;
    }
    for l in closed {
        if !matches!(l.term, Term::Credit | Term::Adjustment) && !seen.contains(l.line_id.as_str()) {
            push(l, zero)?;
        }
    }
    Ok(out)
}
