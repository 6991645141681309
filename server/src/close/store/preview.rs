//! An open month computed a part at a time, as the close computes it (docs/scaling.md, "The streamed close"): the
//! refresh worker's snapshot and its "to date" cut hold a part's allocations, never the month's.

use gpuledger_core::{
    Period,
    ledger::{Ledger, LedgerInput, LedgerParts},
};
use time::OffsetDateTime;

use super::{energy::MonthEnergy, priced_header};
use crate::{db::OrgTx, error::AppError};

/// An open month's ledger as it would close now, and the same month cut at the snapshot's time.
pub(crate) struct PartsPreview {
    /// The month's input without its allocations and energy (policy, tenants, quotas, adjustments, …).
    pub header: LedgerInput,
    /// The month's lines as they would close now.
    pub ledger: Ledger,
    /// The lines of what the month has used so far (every allocation and quota cut at the snapshot's time): the
    /// forecast's "to date".
    pub to_date: Ledger,
}

/// Computes `period` with the approved policy, approved credits and late-data adjustments — the figures
/// [`crate::close::preview`] computes — reading and pricing its allocations a part (in start order) at a time,
/// and, from the same parts, the month cut at `now`.
pub(crate) async fn preview_in_parts(
    tx: &mut OrgTx,
    period: Period,
    now: OffsetDateTime,
) -> Result<PartsPreview, AppError> {
    let (header, _, _) = priced_header(tx, period).await?;
    // The header holds no allocations: cutting it cuts the quotas.
    let cut_header = crate::figures::cut_at(header.clone(), now);
    let (ledger, to_date) = price_in_parts(tx, period, &header, Some((&cut_header, now))).await?;
    let to_date = to_date.ok_or_else(|| AppError::Internal("the month cut at the snapshot was not priced".into()))?;
    Ok(PartsPreview { header, ledger, to_date })
}

/// `period` priced with `header` (an input without allocations and energy) a part (in start order) at a time;
/// with `cut`, from the same reads, also the month cut at an instant (`cut`'s header: `header` cut there).
pub(super) async fn price_in_parts(
    tx: &mut OrgTx,
    period: Period,
    header: &LedgerInput,
    cut: Option<(&LedgerInput, OffsetDateTime)>,
) -> Result<(Ledger, Option<Ledger>), AppError> {
    let started = std::time::Instant::now();
    let (from, to) = crate::ledger::bounds(tx, period).await?;
    let energy = MonthEnergy::read(tx, header, from, to).await?;
    let energy_ms = started.elapsed().as_millis() as u64;
    let mut count = 0_u64;
    let mut whole = LedgerParts::new(header).map_err(AppError::computing)?;
    let mut so_far = match cut {
        Some((cut_header, at)) => Some((LedgerParts::new(cut_header).map_err(AppError::computing)?, at)),
        None => None,
    };
    let mut parts = super::month_parts(tx, period, false).await?;
    while let Some(mut part) = parts.next(tx).await? {
        count += 1;
        // The cut part reaches no hour the whole part does not.
        let part_energy = energy.for_part(&part)?;
        whole.add(&part, &part_energy).map_err(AppError::computing)?;
        if let Some((ledger, at)) = &mut so_far {
            crate::figures::cut_allocations(&mut part, *at);
            ledger.add(&part, &part_energy).map_err(AppError::computing)?;
        }
    }
    let so_far = match so_far {
        Some((ledger, _)) => Some(ledger.finish().map_err(AppError::computing)?),
        None => None,
    };
    let whole = whole.finish().map_err(AppError::computing)?;
    // Where a month's pricing goes (the refresh's log line has the rest): the energy pass, then the parts read and
    // priced.
    tracing::info!(period = %period, energy_ms, energy_hours = energy.hours(), parts = count,
                   parts_ms = started.elapsed().as_millis() as u64 - energy_ms, "month priced in parts");
    Ok((whole, so_far))
}
