//! The operator's `org` commands: create, list, suspend, resume, limits, setup links, export, delete, log.

use crate::db::Database;
use clap::Subcommand;
use std::path::PathBuf;

/// Organization commands (the operator's; docs/operations.md, "Onboarding an organization").
#[derive(Debug, Subcommand)]
pub enum OrgCommand {
    /// Create an organization and print its first admin's one-time setup link (valid 24 h, single use).
    Create {
        /// The organization's slug: a DNS label (lowercase letters, digits, hyphens; at most 63), taken once.
        #[arg(long)]
        slug: String,
        /// Its display name.
        #[arg(long)]
        name: String,
        /// The portal's public base URL the setup link starts with (as `serve --public-url`).
        #[arg(long, env = "GPULEDGER_PUBLIC_URL")]
        public_url: Option<String>,
    },
    /// List organizations: slug, name, created, state, clusters, users, last ingest.
    List,
    /// Suspend an organization: sign-in, setup links, API tokens and agent ingest are refused; its data is kept.
    Suspend {
        /// The organization's slug.
        slug: String,
        /// Why (kept in the audit and operator logs).
        #[arg(long, default_value = "")]
        reason: String,
    },
    /// Resume a suspended organization.
    Resume {
        /// The organization's slug.
        slug: String,
    },
    /// Set an organization's limits (its admins see them, read-only): a number, or `none` for no limit.
    Limits {
        /// The organization's slug.
        slug: String,
        /// API requests per minute (tokens and browser sessions, per server process).
        #[arg(long)]
        rate_limit_per_minute: Option<String>,
        /// Facts its agents may send per UTC day; batches beyond it are refused with 429 (agents retry later).
        #[arg(long)]
        ingest_facts_per_day: Option<String>,
    },
    /// Print a new one-time setup link for an organization's first admin (the previous one expired or was lost).
    SetupLink {
        /// The organization's slug.
        slug: String,
        /// The portal's public base URL the setup link starts with (as `serve --public-url`).
        #[arg(long, env = "GPULEDGER_PUBLIC_URL")]
        public_url: Option<String>,
    },
    /// Export everything an organization holds as JSON Lines (docs/operations.md, "Organization export format").
    Export {
        /// The organization's slug.
        slug: String,
        /// The file to write.
        #[arg(long)]
        output: PathBuf,
    },
    /// Delete an organization and every row it holds. Refused unless it is suspended and exported since its last
    /// change; its slug is never given out again.
    Delete {
        /// The organization's slug.
        slug: String,
        /// The slug again, to confirm.
        #[arg(long)]
        confirm: String,
    },
    /// Show the operator log (newest first).
    Log {
        /// Only this organization's entries.
        slug: Option<String>,
        /// How many entries.
        #[arg(long, default_value_t = 50)]
        limit: i32,
    },
}

/// An organization operation's error in the CLI's words: a refused value names its flag (`--slug: …`).
pub(crate) fn operator_error(e: crate::error::AppError) -> anyhow::Error {
    use crate::error::AppError;
    match e {
        AppError::Invalid { field, reason } => anyhow::anyhow!("--{}: {reason}", field.replace('_', "-")),
        AppError::Conflict(m) | AppError::NotFound(m) => anyhow::anyhow!("{m}"),
        other => anyhow::anyhow!("{other}"),
    }
}

/// The base of setup links: `--public-url`, else the default local portal (`serve`'s default listen address).
pub(crate) fn setup_base(public_url: Option<&str>) -> anyhow::Result<String> {
    match public_url.map(str::trim).filter(|u| !u.is_empty()) {
        Some(url) if url.starts_with("https://") || url.starts_with("http://") => {
            Ok(url.trim_end_matches('/').to_string())
        }
        Some(url) => anyhow::bail!("--public-url: expected an http(s) URL, got {url:?}"),
        None => {
            eprintln!(
                "note: no --public-url (GPULEDGER_PUBLIC_URL): the link below points at a local `serve` on its \
                 default address; give the portal's public URL for a link others can open"
            );
            Ok("http://127.0.0.1:8080".into())
        }
    }
}

pub(crate) fn utc_minute(t: time::OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    format!("{} {:02}:{:02} UTC", t.date(), t.hour(), t.minute())
}

pub(crate) async fn org_command(db: &Database, command: &OrgCommand) -> anyhow::Result<()> {
    use crate::orgs;
    let actor = orgs::operator_actor();
    match command {
        OrgCommand::Create { slug, name, public_url } => {
            orgs::validate_slug(slug).map_err(operator_error)?;
            let base = setup_base(public_url.as_deref())?;
            let id = gpuledger_core::ids::OrgId::from_uuid(uuid::Uuid::new_v4());
            let created = orgs::create(db, id, slug, name, &actor).await.map_err(operator_error)?;
            eprintln!("created organization {slug:?} ({}, id {})", name.trim(), created.org.as_uuid());
            eprintln!(
                "the first admin's one-time setup link (single use, valid until {}); it signs them in as admin to \
                 configure the identity provider and role mappings. It is shown once:",
                utc_minute(created.setup_expires_at)
            );
            println!("{base}/setup/{}", created.setup_token);
            Ok(())
        }
        OrgCommand::SetupLink { slug, public_url } => {
            let base = setup_base(public_url.as_deref())?;
            let created = orgs::new_setup_link(db, slug, &actor).await.map_err(operator_error)?;
            eprintln!(
                "a new one-time setup link for {slug:?} (single use, valid until {}); it is shown once:",
                utc_minute(created.setup_expires_at)
            );
            println!("{base}/setup/{}", created.setup_token);
            Ok(())
        }
        OrgCommand::List => {
            let rows = orgs::list(db).await.map_err(operator_error)?;
            let mut table = vec![[
                "SLUG".to_string(),
                "NAME".into(),
                "CREATED".into(),
                "STATE".into(),
                "CLUSTERS".into(),
                "USERS".into(),
                "LAST INGEST".into(),
            ]];
            for r in &rows {
                table.push([
                    r.org.slug.clone(),
                    r.org.name.clone(),
                    utc_minute(r.org.created_at),
                    r.org.state.clone(),
                    r.clusters.to_string(),
                    r.users.to_string(),
                    r.last_ingest.map(utc_minute).unwrap_or_else(|| "never".into()),
                ]);
            }
            let widths: Vec<usize> =
                (0..7).map(|i| table.iter().map(|row| row[i].chars().count()).max().unwrap_or(0)).collect();
            for row in &table {
                let cells: Vec<String> = row
                    .iter()
                    .zip(&widths)
                    .enumerate()
                    .map(|(i, (cell, w))| if i == 4 || i == 5 { format!("{cell:>w$}") } else { format!("{cell:<w$}") })
                    .collect();
                println!("{}", cells.join("  ").trim_end());
            }
            if rows.is_empty() {
                eprintln!("no organization yet: `gpuledger-server org create --slug SLUG --name NAME`");
            }
            Ok(())
        }
        OrgCommand::Suspend { slug, reason } => {
            if orgs::set_state(db, slug, true, reason, &actor).await.map_err(operator_error)? {
                eprintln!(
                    "suspended {slug:?}: sign-in, setup links, API tokens and agent ingest are refused (agents keep \
                     their facts and retry); its data is kept. `org resume {slug}` lifts it"
                );
            } else {
                eprintln!("{slug:?} was already suspended");
            }
            Ok(())
        }
        OrgCommand::Resume { slug } => {
            if orgs::set_state(db, slug, false, "", &actor).await.map_err(operator_error)? {
                eprintln!("resumed {slug:?}: sign-in, API tokens and ingest work again");
            } else {
                eprintln!("{slug:?} was not suspended");
            }
            Ok(())
        }
        OrgCommand::Limits { slug, rate_limit_per_minute, ingest_facts_per_day } => {
            let rate = orgs::LimitChange::parse(
                "rate-limit-per-minute",
                rate_limit_per_minute.as_deref(),
                orgs::MAX_RATE_LIMIT_PER_MINUTE,
            )
            .map_err(operator_error)?;
            let ingest = orgs::LimitChange::parse(
                "ingest-facts-per-day",
                ingest_facts_per_day.as_deref(),
                orgs::MAX_INGEST_FACTS_PER_DAY,
            )
            .map_err(operator_error)?;
            let (rate, ingest) = orgs::set_limits(db, slug, rate, ingest, &actor).await.map_err(operator_error)?;
            let show = |v: Option<i64>| v.map(|n| n.to_string()).unwrap_or_else(|| "none".into());
            eprintln!(
                "limits of {slug:?}: rate-limit-per-minute {}, ingest-facts-per-day {}",
                show(rate),
                show(ingest)
            );
            Ok(())
        }
        OrgCommand::Export { slug, output } => {
            let exported = orgs::export::export(db, slug, output, &actor).await.map_err(operator_error)?;
            eprintln!(
                "exported {slug:?}: {} rows of {} tables to {} (sha256 {})",
                exported.rows,
                exported.tables,
                exported.path.display(),
                exported.sha256
            );
            Ok(())
        }
        OrgCommand::Delete { slug, confirm } => {
            let removed = orgs::delete(db, slug, confirm, &actor).await.map_err(operator_error)?;
            let total: i64 = removed.iter().map(|r| r.rows).sum();
            let tables = removed.iter().filter(|r| r.rows > 0).count();
            eprintln!(
                "deleted {slug:?}: {total} rows from {tables} tables; no table keeps a row of it. The slug is \
                 retired for good; the operator log keeps the record"
            );
            Ok(())
        }
        OrgCommand::Log { slug, limit } => {
            let entries = db.cross_org_operator().log(slug.as_deref(), (*limit).clamp(1, 10_000)).await?;
            for e in entries {
                println!(
                    "{}  {:<16}  {:<20}  {}  {}",
                    gpuledger_core::time_fmt::rfc3339(e.at),
                    e.action,
                    e.org_slug,
                    e.actor,
                    e.details
                );
            }
            Ok(())
        }
    }
}
