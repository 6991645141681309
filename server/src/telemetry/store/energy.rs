//! The close's energy from the hours' sums: whole-GPU hours with energy overlapping a month, as spans per device.

use gpuledger_core::ledger::{DeviceEnergy, EnergySpan};
use time::OffsetDateTime;

use super::unix_ms;
use crate::db::{DbError, OrgTx};

/// Whole-GPU hours with energy that overlap `[start, end)`: the close's energy, one span per device-hour, devices
/// by UUID and spans by start (streamed from the database, kept compact: 24 bytes an hour).
pub async fn energy_hours(
    tx: &mut OrgTx,
    start: OffsetDateTime,
    end: OffsetDateTime,
) -> Result<Vec<DeviceEnergy>, DbError> {
    let mut out = Vec::new();
    energy_hours_each(tx, start, end, |d| {
        out.push(d);
        Ok(())
    })
    .await?;
    Ok(out)
}

/// [`energy_hours`] of some devices (`None`: every device), handed to `each` a device at a time as they arrive.
pub async fn energy_hours_each(
    tx: &mut OrgTx,
    start: OffsetDateTime,
    end: OffsetDateTime,
    mut each: impl FnMut(DeviceEnergy) -> Result<(), DbError>,
) -> Result<(), DbError> {
    use futures::TryStreamExt;
    let mut rows = sqlx::query_as::<_, (String, OffsetDateTime, i32, i32, i64)>(
        "SELECT s.gpu_uuid, h.hour, h.span_from_ms, h.span_to_ms, h.energy_j
           FROM telemetry_gpu_hours h JOIN telemetry_series s ON s.org_id = h.org_id AND s.series_id = h.series_id
          WHERE h.org_id = $3 AND s.org_id = $3 AND h.energy_ms > 0
            AND h.hour >= $1 - interval '1 day' AND h.hour < $2
            AND h.hour + make_interval(secs => h.span_to_ms / 1000.0) > $1
          ORDER BY s.gpu_uuid, h.hour",
    )
    .bind(start)
    .bind(end)
    .bind(tx.org().as_uuid())
    .fetch(tx.conn());
    let mut device: Option<DeviceEnergy> = None;
    let done = |mut d: DeviceEnergy| {
        d.spans.sort_by_key(|s| (s.start_us, s.end_us, s.joules));
        d
    };
    while let Some((gpu, hour, from, to, j)) = rows.try_next().await? {
        let h = unix_ms(hour) * 1_000;
        let span = EnergySpan {
            start_us: h + i64::from(from) * 1_000,
            end_us: h + i64::from(to) * 1_000,
            joules: u64::try_from(j).unwrap_or(0),
        };
        match &mut device {
            Some(d) if d.gpu_uuid == gpu => d.spans.push(span),
            _ => {
                if let Some(d) = device.replace(DeviceEnergy { gpu_uuid: gpu, spans: vec![span] }) {
                    each(done(d))?;
                }
            }
        }
    }
    if let Some(d) = device {
        each(done(d))?;
    }
    Ok(())
}
