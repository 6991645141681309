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

/// [`energy_hours`], handed to `each` a device at a time as they arrive (devices by UUID, byte order).
pub async fn energy_hours_each(
    tx: &mut OrgTx,
    start: OffsetDateTime,
    end: OffsetDateTime,
    mut each: impl FnMut(DeviceEnergy) -> Result<(), DbError>,
) -> Result<(), DbError> {
    use futures::TryStreamExt;
    // The organization's series in UUID order (byte order; a UUID seen in two clusters is one device, `k`), and for
    // each in turn its hours by the primary key: the rows arrive in the device order the bundle wants with nothing
    // sorted. (Sorting the month's hours by UUID text in one statement — millions of rows at 10,000 GPUs, a UUID
    // sent with each — cost twice as much: docs/scaling.md, "The evidence orders and a sort-free energy pass".)
    let mut series: Vec<(i64, String)> =
        // Whole GPUs' series only: a GPU-hour row is keyed by its GPU's series (MIG instances' sums ride in it), so
        // an instance's series would be an index probe that finds nothing — most of the probes in a MIG-heavy fleet.
        sqlx::query_as("SELECT series_id, gpu_uuid FROM telemetry_series WHERE org_id = $1 AND gpu_instance_id = -1")
            .bind(tx.org().as_uuid())
            .fetch_all(tx.conn())
            .await?;
    series.sort_unstable_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(&b.0)));
    let (mut uuids, mut ids, mut ks) = (Vec::<String>::new(), Vec::with_capacity(series.len()), Vec::new());
    for (id, uuid) in series {
        if uuids.last() != Some(&uuid) {
            uuids.push(uuid);
        }
        ids.push(id);
        ks.push(i32::try_from(uuids.len() - 1).map_err(|_| DbError::Data("too many telemetry series".into()))?);
    }
    // A nested loop over the arrays in their order (the lateral reference makes it one).
    let mut rows = sqlx::query_as::<_, (i32, OffsetDateTime, i32, i32, i64)>(
        "SELECT m.k, h.hour, h.span_from_ms, h.span_to_ms, h.energy_j
           FROM unnest($4::int8[], $5::int4[]) AS m (series_id, k)
          CROSS JOIN LATERAL (
                SELECT h.hour, h.span_from_ms, h.span_to_ms, h.energy_j
                  FROM telemetry_gpu_hours h
                 WHERE h.org_id = $3 AND h.series_id = m.series_id AND h.energy_ms > 0
                   AND h.hour >= $1 - interval '1 day' AND h.hour < $2
                   AND h.hour + make_interval(secs => h.span_to_ms / 1000.0) > $1
                 ORDER BY h.hour) h",
    )
    .bind(start)
    .bind(end)
    .bind(tx.org().as_uuid())
    .bind(&ids)
    .bind(&ks)
    .fetch(tx.conn());
    let done = |k: i32, mut spans: Vec<EnergySpan>| {
        spans.sort_by_key(|s| (s.start_us, s.end_us, s.joules));
        let gpu_uuid = usize::try_from(k).ok().and_then(|k| uuids.get(k)).cloned().unwrap_or_default();
        DeviceEnergy { gpu_uuid, spans }
    };
    let mut device: Option<(i32, Vec<EnergySpan>)> = None;
    while let Some((k, hour, from, to, j)) = rows.try_next().await? {
        if device.as_ref().is_some_and(|(at, _)| k < *at) {
            // Nothing relies on an order the statement does not promise without checking it.
            return Err(DbError::Data("the month's energy arrived out of device order".into()));
        }
        let h = unix_ms(hour) * 1_000;
        let span = EnergySpan {
            start_us: h + i64::from(from) * 1_000,
            end_us: h + i64::from(to) * 1_000,
            joules: u64::try_from(j).unwrap_or(0),
        };
        match &mut device {
            Some((at, spans)) if *at == k => spans.push(span),
            _ => {
                if let Some((at, spans)) = device.replace((k, vec![span])) {
                    each(done(at, spans))?;
                }
            }
        }
    }
    if let Some((at, spans)) = device {
        each(done(at, spans))?;
    }
    Ok(())
}
