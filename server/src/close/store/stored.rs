//! The bundle as the close stores it: a part's records ordered for compression, the compressed stream finished, and
//! stored in chunks (`period_bundle_chunks`, migration 41) from its temporary file.

use gpuledger_core::{
    Period,
    bundle::{BundleStream, BundleTail},
};

use super::{BundleWriter, bundle_error};
use crate::{db::OrgTx, error::AppError};

/// A part's records (with their evidence ranks) ordered by record ID.
pub(super) fn by_id(
    part: Vec<gpuledger_core::ledger::AllocationRecord>,
    ranks: Vec<crate::ledger::store::parts::Ranks>,
) -> (Vec<gpuledger_core::ledger::AllocationRecord>, Vec<crate::ledger::store::parts::Ranks>) {
    let mut both: Vec<_> = part.into_iter().zip(ranks).collect();
    both.sort_unstable_by(|a, b| a.0.id.cmp(&b.0.id));
    both.into_iter().unzip()
}

/// The rest of the bundle after its inputs, and the compressed document (its temporary file and length).
pub(super) fn finish_bundle(
    bundle: BundleStream<BundleWriter>,
    tail: &BundleTail<'_>,
) -> Result<(std::fs::File, u64), AppError> {
    bundle.finish(tail).map_err(bundle_error)?.finish().map_err(bundle_error)
}

/// Bytes of a stored bundle chunk: small enough that a chunk in flight is nothing beside a part, large enough that a
/// 100,000-GPU month (~460 MB) is a few hundred rows. At most 1 MiB (migration 41's check).
pub const BUNDLE_CHUNK_BYTES: usize = 1 << 20;

static CHUNK_BYTES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(BUNDLE_CHUNK_BYTES);

/// Sets the bytes per stored bundle chunk of the closes this process runs (tests cut small bundles into several
/// chunks with it), at most [`BUNDLE_CHUNK_BYTES`].
pub fn set_bundle_chunk_bytes(bytes: usize) {
    CHUNK_BYTES.store(bytes.clamp(1, BUNDLE_CHUNK_BYTES), std::sync::atomic::Ordering::Relaxed);
}

/// Stores the compressed bundle from its file in chunks of [`BUNDLE_CHUNK_BYTES`] (`period_bundle_chunks`, in the
/// close's transaction: the month is closed with all of them or none); returns how many.
pub(super) async fn store_bundle(
    tx: &mut OrgTx,
    period: Period,
    mut file: std::fs::File,
    len: u64,
) -> Result<i32, AppError> {
    use std::io::Read;
    let org = tx.org().as_uuid();
    let mut seq: i32 = 0;
    let mut left = len;
    let chunk = CHUNK_BYTES.load(std::sync::atomic::Ordering::Relaxed);
    let mut buf = vec![0_u8; chunk];
    // A gzip stream is never empty (its header): a closed month has at least one chunk.
    while left > 0 {
        let n = usize::try_from(left).unwrap_or(usize::MAX).min(chunk);
        file.read_exact(&mut buf[..n]).map_err(bundle_error)?;
        sqlx::query("INSERT INTO period_bundle_chunks (org_id, period, seq, bytes) VALUES ($1, $2, $3, $4)")
            .bind(org)
            .bind(period.first_day())
            .bind(seq)
            .bind(&buf[..n])
            .execute(tx.conn())
            .await?;
        left -= n as u64;
        seq = seq.checked_add(1).ok_or_else(|| AppError::Internal("bundle of too many chunks".into()))?;
    }
    if seq == 0 {
        return Err(AppError::Internal("the bundle's compressed stream is empty".into()));
    }
    Ok(seq)
}
