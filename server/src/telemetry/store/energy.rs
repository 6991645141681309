//! The close's energy from the hours' sums: whole-GPU hours with energy overlapping a month, as spans per device.

use std::collections::HashMap;

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
    energy_hours_each(tx, start, end, None, |d| {
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
    devices: Option<&[String]>,
    mut each: impl FnMut(DeviceEnergy) -> Result<(), DbError>,
) -> Result<(), DbError> {
    use futures::TryStreamExt;
    if let Some(devices) = devices {
        return energy_hours_of(tx, start, end, devices, each).await;
    }
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

/// [`energy_hours_each`] of some devices: their series first, then their hours by the hours' key (series, hour) —
/// one statement joining the two read the whole month's hours for every part of a close (2.3 s a part at 1,000
/// GPUs, whatever the part's size).
async fn energy_hours_of(
    tx: &mut OrgTx,
    start: OffsetDateTime,
    end: OffsetDateTime,
    devices: &[String],
    mut each: impl FnMut(DeviceEnergy) -> Result<(), DbError>,
) -> Result<(), DbError> {
    use futures::TryStreamExt;
    let org = tx.org().as_uuid();
    let series: Vec<(i64, String)> =
        sqlx::query_as("SELECT series_id, gpu_uuid FROM telemetry_series WHERE org_id = $1 AND gpu_uuid = ANY($2)")
            .bind(org)
            .bind(devices)
            .fetch_all(tx.conn())
            .await?;
    if series.is_empty() {
        return Ok(());
    }
    let ids: Vec<i64> = series.iter().map(|(id, _)| *id).collect();
    let names: HashMap<i64, String> = series.into_iter().collect();
    let mut spans: std::collections::BTreeMap<String, Vec<EnergySpan>> = Default::default();
    let mut rows = sqlx::query_as::<_, (i64, OffsetDateTime, i32, i32, i64)>(
        "SELECT h.series_id, h.hour, h.span_from_ms, h.span_to_ms, h.energy_j
           FROM telemetry_gpu_hours h
          WHERE h.org_id = $3 AND h.series_id = ANY($4) AND h.energy_ms > 0
            AND h.hour >= $1 - interval '1 day' AND h.hour < $2
            AND h.hour + make_interval(secs => h.span_to_ms / 1000.0) > $1",
    )
    .bind(start)
    .bind(end)
    .bind(org)
    .bind(&ids)
    .fetch(tx.conn());
    while let Some((series, hour, from, to, j)) = rows.try_next().await? {
        let Some(gpu) = names.get(&series) else { continue };
        let h = unix_ms(hour) * 1_000;
        spans.entry(gpu.clone()).or_default().push(EnergySpan {
            start_us: h + i64::from(from) * 1_000,
            end_us: h + i64::from(to) * 1_000,
            joules: u64::try_from(j).unwrap_or(0),
        });
    }
    drop(rows);
    for (gpu_uuid, mut spans) in spans {
        spans.sort_by_key(|s| (s.start_us, s.end_us, s.joules));
        each(DeviceEnergy { gpu_uuid, spans })?;
    }
    Ok(())
}
