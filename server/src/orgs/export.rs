//! `org export SLUG --output FILE`: everything an organization holds, as one JSON Lines file (docs/operations.md,
//! "Organization export format").
//!
//! ```text
//! {"format":"gpuledger-organization-export","version":1,"organization":{…},"exported_at":"…","tables":{"audit_log":12,…},…}
//! {"table":"audit_log","row":{"org_id":"…","audit_id":"…",…}}
//! …
//! {"end":true,"rows":1234,"fingerprint":"…"}
//! ```
//!
//! Tables come from the catalog (every table with an `org_id` column, by name), rows in primary-key order, each row
//! as PostgreSQL's `to_jsonb` writes it (timestamps in RFC 3339, numerics as numbers, `bytea` as `\x…` hex). The
//! credential material in [`REDACTED`] is written as `null`. Everything is read in one `REPEATABLE READ` snapshot,
//! which also computes the fingerprint recorded with the export: `org delete` compares it with what the
//! organization holds then.

use std::{
    io::Write,
    path::{Path, PathBuf},
};

use serde_json::json;
use sha2::{Digest, Sha256};

use super::store;
use crate::{db::Database, error::AppError};

/// Columns written as `null`: hashes of credentials (tokens, sessions, setup links, pending sign-ins), the identity
/// provider's client secret, and the secrets of sign-ins in flight. Nothing else is left out.
pub const REDACTED: &[&str] =
    &["secret_sha256", "client_secret", "pkce_verifier", "nonce", "csrf_token", "id_token_hint"];

/// The name of the format, in the header line.
pub const FORMAT: &str = "gpuledger-organization-export";

/// What an export wrote.
#[derive(Debug, Clone)]
pub struct Exported {
    /// The file.
    pub path: PathBuf,
    /// Rows written (not counting the header and end lines).
    pub rows: i64,
    /// Tables that hold the organization's rows (empty ones included in the header).
    pub tables: usize,
    /// SHA-256 of the file.
    pub sha256: String,
}

fn io_error(path: &Path, e: std::io::Error) -> AppError {
    AppError::invalid("output", format!("{}: {e}", path.display()))
}

/// Writes the organization with `slug` to `output` (written to `output.partial`, renamed when complete) and records
/// the export. Audited in the organization's log and the operator log.
pub async fn export(db: &Database, slug: &str, output: &Path, actor: &str) -> Result<Exported, AppError> {
    let org = super::resolve(db, slug).await?;
    let partial = {
        let mut name = output.as_os_str().to_owned();
        name.push(".partial");
        PathBuf::from(name)
    };
    let file = std::fs::File::create(&partial).map_err(|e| io_error(&partial, e))?;
    let mut sink = Sink { out: std::io::BufWriter::new(file), hasher: Sha256::new(), path: partial.clone() };

    let result = async {
        let mut tx = db.begin_org_snapshot(org).await?;
        tx.allow_long_statements().await?;
        // The export records its own making: the audit record is part of what it writes.
        tx.audit(actor, "org.export", slug, "", json!({"output": output.display().to_string()})).await?;
        let fingerprint = store::fingerprint(&mut tx).await?;
        let org_uuid = org.as_uuid();
        let (name, created_at, state) = store::organization(&mut tx).await?;
        let tables = store::org_tables(&mut tx).await?;
        let mut counts = serde_json::Map::new();
        for t in &tables {
            let n = store::row_count(&mut tx, t).await?;
            counts.insert(t.clone(), json!(n));
        }
        let now = time::OffsetDateTime::now_utc();
        let header = json!({
            "format": FORMAT,
            "version": 1,
            "organization": {"org_id": org_uuid, "slug": slug, "name": name,
                             "created_at": gpuledger_core::time_fmt::rfc3339(created_at), "state": state},
            "exported_at": gpuledger_core::time_fmt::rfc3339(now),
            "exported_by": actor,
            "tables": counts,
            "redacted_columns": REDACTED,
            "fingerprint": fingerprint,
        });
        sink.line(&header.to_string())?;
        let mut rows = 0i64;
        for t in &tables {
            let (columns, key) = store::columns(&mut tx, t).await?;
            let nulls: serde_json::Map<String, serde_json::Value> = columns
                .iter()
                .filter(|c| REDACTED.contains(&c.as_str()))
                .map(|c| (c.clone(), serde_json::Value::Null))
                .collect();
            rows += store::export_rows(&mut tx, t, &key, nulls, |text| sink.line(text)).await?;
        }
        sink.line(&json!({"end": true, "rows": rows, "fingerprint": fingerprint}).to_string())?;
        let sha = sink.finish()?;
        let table_count = i32::try_from(tables.len()).unwrap_or(i32::MAX);
        store::record_export(&mut tx, actor, rows, table_count, &fingerprint, &sha).await?;
        let details = json!({"output": output.display().to_string(), "rows": rows, "tables": tables.len(),
                             "sha256": sha, "fingerprint": fingerprint});
        store::operator_log(&mut tx, actor, "org.export", slug, details).await?;
        std::fs::rename(&partial, output).map_err(|e| io_error(output, e))?;
        // An export changes no figure (and must not mark the organization changed: delete compares fingerprints).
        tx.commit_quiet().await?;
        Ok(Exported { path: output.to_path_buf(), rows, tables: tables.len(), sha256: sha })
    }
    .await;
    if result.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    result
}

/// The file being written, and its running SHA-256.
struct Sink {
    out: std::io::BufWriter<std::fs::File>,
    hasher: Sha256,
    path: PathBuf,
}

impl Sink {
    fn line(&mut self, text: &str) -> Result<(), AppError> {
        self.hasher.update(text.as_bytes());
        self.hasher.update(b"\n");
        self.out
            .write_all(text.as_bytes())
            .and_then(|()| self.out.write_all(b"\n"))
            .map_err(|e| io_error(&self.path, e))
    }

    /// Flushes and syncs the file; returns its SHA-256.
    fn finish(&mut self) -> Result<String, AppError> {
        self.out.flush().map_err(|e| io_error(&self.path, e))?;
        self.out.get_ref().sync_all().map_err(|e| io_error(&self.path, e))?;
        Ok(hex::encode(std::mem::take(&mut self.hasher).finalize()))
    }
}

/// A table or column name from the catalog, quoted as an SQL identifier.
#[cfg(test)]
mod tests {
    use super::store::ident;

    #[test]
    fn identifiers_are_quoted() {
        assert_eq!(ident("audit_log"), "\"audit_log\"");
        assert_eq!(ident("we\"ird"), "\"we\"\"ird\"");
    }
}
