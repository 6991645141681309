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

/// The organization's whole-GPU series in UUID order (byte order): the GPUs' UUIDs, and per series its ID and its
/// GPU's index among them (`k`: a UUID seen in two clusters is one device). Whole GPUs only: a GPU-hour row is keyed
/// by its GPU's series (MIG instances' sums ride in it), so an instance's series would be an index probe that finds
/// nothing — most of the probes in a MIG-heavy fleet.
async fn gpus_in_uuid_order(tx: &mut OrgTx) -> Result<(Vec<String>, Vec<i64>, Vec<i32>), DbError> {
    let mut series: Vec<(i64, String)> =
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
    Ok((uuids, ids, ks))
}

/// [`energy_hours`], handed to `each` a device at a time as they arrive (devices by UUID, byte order).
pub async fn energy_hours_each(
    tx: &mut OrgTx,
    start: OffsetDateTime,
    end: OffsetDateTime,
    mut each: impl FnMut(DeviceEnergy) -> Result<(), DbError>,
) -> Result<(), DbError> {
    use futures::TryStreamExt;
    // The organization's series in UUID order, and for each in turn its hours by the primary key: the rows arrive in
    // the device order the bundle wants with nothing sorted. (Sorting the month's hours by UUID text in one statement
    // — millions of rows at 10,000 GPUs, a UUID sent with each — cost twice as much: docs/scaling.md, "The evidence
    // orders and a sort-free energy pass".)
    let (uuids, ids, ks) = gpus_in_uuid_order(tx).await?;
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

/// The hourly utilization of every GPU of the organization and of its MIG instances over `[start, end)` (hours from a
/// day before, as [`super::utilization_hours`] reads them), a GPU at a time in UUID order: `each(uuid, rows)` with
/// the GPU's rows (`gpu_instance_id` −1) and its instances' — the same rows `utilization_hours` gives for the GPUs
/// it is asked about, read as the energy pass reads (series by series on the primary key, nothing sorted).
pub async fn utilization_hours_each(
    tx: &mut OrgTx,
    start: OffsetDateTime,
    end: OffsetDateTime,
    mut each: impl FnMut(&str, Vec<super::HourRow>) -> Result<(), DbError>,
) -> Result<(), DbError> {
    use futures::TryStreamExt;
    let (uuids, ids, ks) = gpus_in_uuid_order(tx).await?;
    #[allow(clippy::type_complexity)]
    let mut rows = sqlx::query_as::<_, (i32, OffsetDateTime, i32, i32, i64, i32, Option<Vec<u8>>)>(
        "SELECT m.k, h.hour, h.span_from_ms, h.span_to_ms, h.util_sum, h.util_ms, h.inst_sums
           FROM unnest($4::int8[], $5::int4[]) AS m (series_id, k)
          CROSS JOIN LATERAL (
                SELECT h.hour, h.span_from_ms, h.span_to_ms, h.util_sum, h.util_ms,
                       CASE WHEN h.instances <> 0 THEN h.inst_sums END AS inst_sums
                  FROM telemetry_gpu_hours h
                 WHERE h.org_id = $3 AND h.series_id = m.series_id AND (h.util_ms > 0 OR h.instances <> 0)
                   AND h.hour >= $1 - interval '1 day' AND h.hour < $2
                 ORDER BY h.hour) h",
    )
    .bind(start)
    .bind(end)
    .bind(tx.org().as_uuid())
    .bind(&ids)
    .bind(&ks)
    .fetch(tx.conn());
    let uuid_of = |k: i32| usize::try_from(k).ok().and_then(|k| uuids.get(k)).cloned().unwrap_or_default();
    let mut device: Option<(i32, Vec<super::HourRow>)> = None;
    while let Some((k, hour, from, to, sum, ms, inst)) = rows.try_next().await? {
        if device.as_ref().is_some_and(|(at, _)| k < *at) {
            return Err(DbError::Data("the month's utilization arrived out of device order".into()));
        }
        if device.as_ref().is_none_or(|(at, _)| *at != k)
            && let Some((at, done)) = device.replace((k, Vec::new()))
        {
            each(&uuid_of(at), done)?;
        }
        let Some((_, out)) = device.as_mut() else { continue };
        let gpu_uuid = uuid_of(k);
        let h = unix_ms(hour);
        if let Some(inst) = inst {
            let inst = gpuledger_core::telemetry::decode_instance_sums(&inst)
                .map_err(|e| DbError::Data(format!("instance sums of {hour}: {e}")))?;
            for (gi, s) in inst {
                let row = super::HourRow {
                    gpu_uuid: gpu_uuid.clone(),
                    gpu_instance_id: gi,
                    from: super::at_ms(h + s.span_from_ms),
                    to: super::at_ms(h + s.span_to_ms),
                    util_avg_pct: s.util_avg_pct(),
                };
                if s.util_ms > 0 && row.to > start {
                    out.push(row);
                }
            }
        }
        if ms > 0 {
            let row = super::HourRow {
                gpu_uuid,
                gpu_instance_id: -1,
                from: super::at_ms(h + i64::from(from)),
                to: super::at_ms(h + i64::from(to)),
                util_avg_pct: Some(sum as f64 / f64::from(ms) / 10.0),
            };
            if row.to > start {
                out.push(row);
            }
        }
    }
    if let Some((at, done)) = device {
        each(&uuid_of(at), done)?;
    }
    Ok(())
}
