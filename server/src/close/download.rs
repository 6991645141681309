//! `GET /api/v1/periods/{period}/bundle`: the stored bundle streamed as JSON — read a chunk at a time and
//! decompressed as it goes, so a download holds a chunk (1 MiB compressed), not the month: a 10,000-GPU month's
//! bundle is ~510 MB of JSON, a 100,000-GPU month's several GB, and a few downloads at once held whole would take the
//! server's memory.

use std::io::Write;

use axum::{
    body::{Body, Bytes},
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use flate2::write::GzDecoder;
use gpuledger_core::Period;
use tokio::sync::mpsc;

use crate::{
    auth::Principal,
    db::Database,
    error::AppError,
    store::{StoredBundle, bundle_chunk, bundle_layout},
};

/// JSON handed to the connection at a time.
const PIECE: usize = 1 << 16;
/// Pieces waiting for a slow client at most.
const DEPTH: usize = 4;

type Pieces = mpsc::Sender<Result<Bytes, std::io::Error>>;

/// The bundle of `period` as an attachment, or 404 when the period is not closed.
pub(super) async fn respond(db: &Database, p: &Principal, period: Period) -> Result<Response, AppError> {
    let mut tx = p.begin(db).await?;
    let layout = bundle_layout(&mut tx, period).await?;
    let slug = super::org_slug(&mut tx).await?;
    tx.commit().await?;
    let layout = layout.ok_or_else(|| {
        AppError::NotFound(format!("{period} is not closed: only a closed period has an evidence bundle"))
    })?;
    let (pieces, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(DEPTH);
    let (db, p) = (db.clone(), p.clone());
    tokio::spawn(async move {
        if let Err(e) = produce(&db, &p, period, layout, &pieces).await {
            // The answer has started: the client sees a broken transfer, never a silently short file.
            tracing::error!(error = %e, %period, "bundle download failed while streaming");
            let _ = pieces.send(Err(std::io::Error::other("the bundle could not be read; see the server log"))).await;
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) });
    let mut response = (StatusCode::OK, Body::from_stream(stream)).into_response();
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"gpuledger-{slug}-{period}.bundle.json\"")) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    Ok(response)
}

/// Decompresses `gz` into the decoder (on the blocking pool: a chunk is ~10 ms of CPU) and sends what came out;
/// `None` when the client went away.
async fn feed(
    dec: GzDecoder<Vec<u8>>,
    gz: Vec<u8>,
    last: bool,
    pieces: &Pieces,
) -> Result<Option<GzDecoder<Vec<u8>>>, AppError> {
    let broken = |e: std::io::Error| AppError::Internal(format!("stored bundle: {e}"));
    let (dec, out) = tokio::task::spawn_blocking(move || {
        let mut dec = dec;
        dec.write_all(&gz)?;
        if last {
            dec.try_finish()?;
        }
        let out = std::mem::take(dec.get_mut());
        Ok::<_, std::io::Error>((dec, out))
    })
    .await
    .map_err(|e| AppError::Internal(format!("stored bundle: {e}")))?
    .map_err(broken)?;
    let out = Bytes::from(out);
    let mut at = 0;
    while at < out.len() {
        let end = (at + PIECE).min(out.len());
        if pieces.send(Ok(out.slice(at..end))).await.is_err() {
            return Ok(None);
        }
        at = end;
    }
    Ok(Some(dec))
}

async fn produce(
    db: &Database,
    p: &Principal,
    period: Period,
    layout: StoredBundle,
    pieces: &Pieces,
) -> Result<(), AppError> {
    let dec = GzDecoder::new(Vec::new());
    match layout {
        StoredBundle::Inline(gz) => {
            feed(dec, gz, true, pieces).await?;
        }
        StoredBundle::Chunks { chunks, .. } => {
            let mut dec = dec;
            for seq in 0..chunks {
                // A transaction per chunk: the period is closed, its chunks never change, and a slow client does
                // not hold a connection.
                let mut tx = p.begin(db).await?;
                let gz = bundle_chunk(&mut tx, period, seq).await?;
                tx.commit().await?;
                let Some(next) = feed(dec, gz, seq + 1 == chunks, pieces).await? else { return Ok(()) };
                dec = next;
            }
        }
    }
    Ok(())
}
