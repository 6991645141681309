//! Running the migrations on a Citus coordinator (docs/scaling.md, "Migrations on Citus").
//!
//! sqlx sends each migration file as one simple-query string. On Citus that breaks in two ways:
//! * with `citus.propagate_set_commands = 'local'` (which the server's `SET LOCAL app.org_id` needs), a `SET LOCAL`
//!   inside a file (`SET LOCAL ROLE gpuledger_owner`) is forwarded to the workers as the *whole query string* — the
//!   whole file — which the workers then run as a nested distributed query and refuse (`cannot execute a
//!   distributed query from a query on a shard`);
//! * with DDL propagation on, objects created under `SET LOCAL ROLE gpuledger_owner` are propagated over
//!   connections opened as that role, which cannot log in before `deploy/citus/distribute.sql` allows it.
//!
//! So on a coordinator:
//! * **before distribution** (no distributed table yet) the migrations run as they do on PostgreSQL, with
//!   `citus.enable_ddl_propagation = off` and `citus.propagate_set_commands = 'none'` for the session: the schema is
//!   built on the coordinator alone, and `distribute.sql` later copies to the workers what the distributed tables
//!   need (roles, extensions, trigger functions, policies, grants, shards);
//! * **after distribution** (an upgrade) DDL must reach the shards, so propagation stays on and each migration is run
//!   statement by statement in one transaction ([`split_statements`]); Citus then forwards each statement, never the
//!   file.
//!
//! Either way the bookkeeping is sqlx's own: the same `_sqlx_migrations` rows with the same checksums, so a database
//! migrated here and one migrated by `Migrator::run` are indistinguishable, and plain PostgreSQL never takes this path.

use sqlx::{
    Connection, Executor, PgConnection,
    migrate::{Migrate, MigrateError, Migrator},
};
use std::collections::HashMap;

/// Where a database stands with respect to Citus.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CitusState {
    /// No citus extension: plain PostgreSQL.
    Absent,
    /// The extension exists, no table is distributed yet (a fresh coordinator).
    Coordinator,
    /// Tables are distributed (`deploy/citus/distribute.sql` has run).
    Distributed,
}

/// Reads whether `conn` is a Citus coordinator, and whether anything is distributed yet.
pub async fn state(conn: &mut PgConnection) -> Result<CitusState, sqlx::Error> {
    let has: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')")
        .fetch_one(&mut *conn)
        .await?;
    if !has {
        return Ok(CitusState::Absent);
    }
    let distributed: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_dist_partition").fetch_one(&mut *conn).await?;
    Ok(if distributed > 0 { CitusState::Distributed } else { CitusState::Coordinator })
}

/// Applies `migrator`'s pending migrations on a Citus coordinator (see the module's documentation).
pub async fn migrate(conn: &mut PgConnection, migrator: &Migrator, state: CitusState) -> Result<(), MigrateError> {
    match state {
        CitusState::Absent => migrator.run(conn).await,
        CitusState::Coordinator => {
            (&mut *conn)
                .execute("SET citus.enable_ddl_propagation = off; SET citus.propagate_set_commands = 'none'")
                .await?;
            let result = migrator.run(&mut *conn).await;
            (&mut *conn).execute("RESET citus.enable_ddl_propagation; RESET citus.propagate_set_commands").await?;
            result
        }
        CitusState::Distributed => {
            (&mut *conn).execute("SET citus.propagate_set_commands = 'none'").await?;
            let result = run_statementwise(&mut *conn, migrator).await;
            (&mut *conn).execute("RESET citus.propagate_set_commands").await?;
            result
        }
    }
}

/// `Migrator::run`, with each migration's statements sent one at a time (in one transaction per migration).
async fn run_statementwise(conn: &mut PgConnection, migrator: &Migrator) -> Result<(), MigrateError> {
    conn.ensure_migrations_table().await?;
    if migrator.locking {
        conn.lock().await?;
    }
    let result: Result<(), MigrateError> = async {
        if let Some(version) = conn.dirty_version().await? {
            return Err(MigrateError::Dirty(version));
        }
        let applied: HashMap<i64, Vec<u8>> =
            conn.list_applied_migrations().await?.into_iter().map(|m| (m.version, m.checksum.into_owned())).collect();
        if !migrator.ignore_missing
            && let Some(v) = applied.keys().find(|v| !migrator.iter().any(|m| m.version == **v))
        {
            return Err(MigrateError::VersionMissing(*v));
        }
        for migration in migrator.iter().filter(|m| !m.migration_type.is_down_migration()) {
            match applied.get(&migration.version) {
                Some(checksum) if checksum.as_slice() != &*migration.checksum => {
                    return Err(MigrateError::VersionMismatch(migration.version));
                }
                Some(_) => {}
                None => {
                    let started = std::time::Instant::now();
                    let mut tx = Connection::begin(&mut *conn).await?;
                    // One connection per worker for the whole migration: Citus refuses DDL on a function (CREATE
                    // FUNCTION, propagated) after a statement that used parallel connections to a distributed table
                    // in the same transaction — migration 31 failed so on a distributed database (found by
                    // server/tests/citus_upgrade.rs).
                    (&mut *tx).execute("SET LOCAL citus.multi_shard_modify_mode TO 'sequential'").await?;
                    for statement in split_statements(&migration.sql) {
                        (&mut *tx)
                            .execute(statement)
                            .await
                            .map_err(|e| MigrateError::ExecuteMigration(e, migration.version))?;
                    }
                    // The row sqlx's own `apply` writes (sqlx-postgres 0.8, migrate.rs).
                    sqlx::query(
                        "INSERT INTO _sqlx_migrations ( version, description, success, checksum, execution_time ) \
                         VALUES ( $1, $2, TRUE, $3, -1 )",
                    )
                    .bind(migration.version)
                    .bind(&*migration.description)
                    .bind(&*migration.checksum)
                    .execute(&mut *tx)
                    .await?;
                    tx.commit().await?;
                    let elapsed = i64::try_from(started.elapsed().as_nanos()).unwrap_or(i64::MAX);
                    sqlx::query("UPDATE _sqlx_migrations SET execution_time = $1 WHERE version = $2")
                        .bind(elapsed)
                        .bind(migration.version)
                        .execute(&mut *conn)
                        .await?;
                    tracing::info!(version = migration.version, description = %migration.description,
                        "migration applied statement by statement (Citus)");
                }
            }
        }
        Ok(())
    }
    .await;
    if migrator.locking {
        conn.unlock().await?;
    }
    result
}

/// Splits a migration file into its top-level statements (without the `;`), as psql does: a `;` inside a string,
/// a quoted identifier, a dollar-quoted body (`$$ … $$`, `$fn$ … $fn$`) or a comment does not end a statement.
/// Statements that are only whitespace and comments are dropped.
pub fn split_statements(sql: &str) -> Vec<&str> {
    let bytes = sql.as_bytes();
    let mut out = Vec::new();
    let mut start = 0;
    let mut i = 0;
    let mut has_code = false;
    while i < bytes.len() {
        let c = bytes[i];
        match c {
            b'-' if bytes.get(i + 1) == Some(&b'-') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                let mut depth = 0usize;
                while i < bytes.len() {
                    if bytes[i] == b'/' && bytes.get(i + 1) == Some(&b'*') {
                        depth += 1;
                        i += 2;
                    } else if bytes[i] == b'*' && bytes.get(i + 1) == Some(&b'/') {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
                continue;
            }
            b'\'' => {
                // E'…' strings take backslash escapes; standard strings only the doubled quote.
                let escapes = i > 0 && matches!(bytes[i - 1], b'E' | b'e') && (i < 2 || !is_ident(bytes[i - 2]));
                has_code = true;
                i += 1;
                while i < bytes.len() {
                    if escapes && bytes[i] == b'\\' {
                        i += 2;
                        continue;
                    }
                    if bytes[i] == b'\'' {
                        if bytes.get(i + 1) == Some(&b'\'') {
                            i += 2;
                            continue;
                        }
                        break;
                    }
                    i += 1;
                }
            }
            b'"' => {
                has_code = true;
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += 1;
                }
            }
            b'$' if i == 0 || !is_ident(bytes[i - 1]) => {
                // A dollar quote: $tag$ where tag is empty or an identifier not starting with a digit.
                let mut j = i + 1;
                while j < bytes.len() && is_ident(bytes[j]) {
                    j += 1;
                }
                let tag_ok = bytes.get(j) == Some(&b'$') && !bytes.get(i + 1).is_some_and(u8::is_ascii_digit);
                if tag_ok {
                    let tag = &sql[i..=j];
                    has_code = true;
                    match sql[j + 1..].find(tag) {
                        Some(end) => i = j + 1 + end + tag.len() - 1,
                        None => i = bytes.len(),
                    }
                } else {
                    has_code = true;
                }
            }
            b';' => {
                if has_code {
                    out.push(sql[start..i].trim());
                }
                start = i + 1;
                has_code = false;
            }
            c if !c.is_ascii_whitespace() => has_code = true,
            _ => {}
        }
        i += 1;
    }
    if has_code && start < sql.len() {
        out.push(sql[start..].trim());
    }
    out
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80
}

#[cfg(test)]
mod tests {
    use super::split_statements;

    #[test]
    fn splits_like_psql() {
        let sql = "-- a comment; not a statement\nCREATE TABLE t (a text DEFAULT ';');\n\
                   DO $$ BEGIN RAISE NOTICE 'x;y'; END $$;\n\
                   CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $fn$ SELECT 1; $fn$;\n\
                   /* block; /* nested; */ */ SELECT \"a;b\" FROM t; SELECT E'it\\'s;'; SELECT $1::int;\n\
                   -- trailing comment only\n";
        let got = split_statements(sql);
        assert_eq!(
            got,
            vec![
                "-- a comment; not a statement\nCREATE TABLE t (a text DEFAULT ';')",
                "DO $$ BEGIN RAISE NOTICE 'x;y'; END $$",
                "CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $fn$ SELECT 1; $fn$",
                "/* block; /* nested; */ */ SELECT \"a;b\" FROM t",
                "SELECT E'it\\'s;'",
                "SELECT $1::int",
            ]
        );
    }

    #[test]
    fn every_migration_splits_into_statements_that_rejoin_to_the_file() {
        for m in crate::db::MIGRATOR.iter() {
            let parts = split_statements(&m.sql);
            assert!(!parts.is_empty(), "migration {} split into nothing", m.version);
            // Nothing but whitespace, comments and the separating semicolons is lost.
            let kept: usize = parts.iter().map(|p| p.len()).sum();
            assert!(kept * 10 >= m.sql.len() * 5, "migration {} lost too much text", m.version);
            for p in &parts {
                assert!(!p.ends_with(';'), "migration {}: {p:?}", m.version);
            }
        }
    }
}
