//! The close's energy from the hours' sums: whole-GPU hours with energy overlapping a month, as spans per device.

use std::collections::{BTreeMap, HashMap};

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

/// The hours with energy that some allocations' windows reach, per device (`windows`: a device's UUID and the spans
/// its allocations cover, within `[start, end)`) — what a part of a close prices, and nothing of the month's other
/// hours: a department's workloads move across the fleet, so reading every hour of the devices a part touches read
/// most of the month for every part (2.3–3 s a part at 1,000 GPUs). The device's series first, then the hours by
/// the hours' key (series, hour); an hour two windows reach is kept once.
pub async fn energy_hours_in(
    tx: &mut OrgTx,
    start: OffsetDateTime,
    end: OffsetDateTime,
    windows: &BTreeMap<String, Vec<(OffsetDateTime, OffsetDateTime)>>,
) -> Result<Vec<DeviceEnergy>, DbError> {
    use futures::TryStreamExt;
    if windows.is_empty() {
        return Ok(Vec::new());
    }
    let org = tx.org().as_uuid();
    let devices: Vec<&str> = windows.keys().map(String::as_str).collect();
    let series: Vec<(i64, String)> =
        sqlx::query_as("SELECT series_id, gpu_uuid FROM telemetry_series WHERE org_id = $1 AND gpu_uuid = ANY($2)")
            .bind(org)
            .bind(&devices)
            .fetch_all(tx.conn())
            .await?;
    // Each series with its device's windows, merged where they overlap or lie within an hour of each other.
    let (mut ids, mut froms, mut tos) = (Vec::new(), Vec::new(), Vec::new());
    for (id, gpu) in &series {
        let Some(spans) = windows.get(gpu) else { continue };
        let mut spans: Vec<(OffsetDateTime, OffsetDateTime)> =
            spans.iter().map(|(s, e)| ((*s).max(start), (*e).min(end))).filter(|(s, e)| s < e).collect();
        spans.sort_unstable();
        let mut merged: Vec<(OffsetDateTime, OffsetDateTime)> = Vec::new();
        for (s, e) in spans {
            match merged.last_mut() {
                Some(last) if s <= last.1 + time::Duration::hours(1) => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        for (s, e) in merged {
            ids.push(*id);
            froms.push(s);
            tos.push(e);
        }
    }
    let names: HashMap<i64, String> = series.into_iter().collect();
    let mut spans: BTreeMap<String, BTreeMap<(i64, i64), EnergySpan>> = BTreeMap::new();
    let mut rows = sqlx::query_as::<_, (i64, OffsetDateTime, i32, i32, i64)>(
        "SELECT h.series_id, h.hour, h.span_from_ms, h.span_to_ms, h.energy_j
           FROM unnest($4::bigint[], $5::timestamptz[], $6::timestamptz[]) AS w(series_id, f, t)
           JOIN telemetry_gpu_hours h ON h.org_id = $3 AND h.series_id = w.series_id
                AND h.hour >= w.f - interval '1 day' AND h.hour < w.t
                AND h.hour + make_interval(secs => h.span_to_ms / 1000.0) > w.f
          WHERE h.org_id = $3 AND h.energy_ms > 0 AND h.hour >= $1 - interval '1 day' AND h.hour < $2",
    )
    .bind(start)
    .bind(end)
    .bind(org)
    .bind(&ids)
    .bind(&froms)
    .bind(&tos)
    .fetch(tx.conn());
    while let Some((series, hour, from, to, j)) = rows.try_next().await? {
        let Some(gpu) = names.get(&series) else { continue };
        let h = unix_ms(hour) * 1_000;
        spans.entry(gpu.clone()).or_default().insert(
            (series, h),
            EnergySpan {
                start_us: h + i64::from(from) * 1_000,
                end_us: h + i64::from(to) * 1_000,
                joules: u64::try_from(j).unwrap_or(0),
            },
        );
    }
    drop(rows);
    Ok(spans
        .into_iter()
        .map(|(gpu_uuid, by_hour)| {
            let mut spans: Vec<EnergySpan> = by_hour.into_values().collect();
            spans.sort_by_key(|s| (s.start_us, s.end_us, s.joules));
            DeviceEnergy { gpu_uuid, spans }
        })
        .collect())
}
