//! Organizations as a product: what the operator does from the CLI (`gpuledger-server org create | list | suspend |
//! resume | limits | setup-link | export | delete`, the CLI), the first admin's one-time setup link
//! ([`setup`]), and the settings an organization's admins keep ([`settings`]).
//!
//! Every change to one organization runs in that organization's own transaction ([`crate::db::OrgTx`]) and is
//! audited twice in it: in the organization's audit log and in the operator log (`operator_log`, reached through the
//! SECURITY DEFINER functions of migration 16 — the operator's door, [`crate::db::Database::cross_org_operator`],
//! lists organizations and reads that log). `demo` creates its organization through [`create`] as well.
//!
//! - **Suspended** organizations keep their data; sign-in, setup links, API tokens and agent ingest are refused with
//!   a problem naming the suspension ([`AppError::Suspended`]).
//! - **Export** ([`export`]) writes everything the organization holds as JSON Lines (docs/operations.md) and records
//!   a fingerprint of every row; **delete** is refused unless the organization is suspended and that fingerprint
//!   still matches (nothing changed since the export), then removes every row of the organization from every table
//!   with an `org_id` column, discovered from the catalog, in one transaction, and retires the slug for good.

pub mod export;
pub mod settings;
pub mod setup;
mod store;

use gpuledger_core::ids::OrgId;
use serde_json::json;
use time::OffsetDateTime;

pub use crate::auth::store::{check_rate, ensure_active, suspension};
pub use store::{IngestCount, count_ingest};

use crate::{db::Database, error::AppError};

/// How long a setup link stays valid.
pub const SETUP_LINK_TTL: time::Duration = time::Duration::hours(24);

/// Checks a slug against the DNS label rules (RFC 1123): 1 to 63 characters, lowercase letters, digits and
/// hyphens, starting and ending with a letter or digit. Errors name the field `slug`.
pub fn validate_slug(slug: &str) -> Result<(), AppError> {
    let bad = |reason: String| Err(AppError::invalid("slug", reason));
    if slug.is_empty() {
        return bad("a slug is required (a DNS label such as `acme`)".into());
    }
    if slug.len() > 63 {
        return bad(format!("{slug:?} is {} characters long; a slug has at most 63 (a DNS label)", slug.len()));
    }
    if let Some(c) = slug.chars().find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')) {
        let hint = if c.is_ascii_uppercase() { " (use lowercase)" } else { "" };
        return bad(format!(
            "{slug:?} contains {c:?}{hint}: a slug is a DNS label of lowercase letters, digits and hyphens"
        ));
    }
    if slug.starts_with('-') || slug.ends_with('-') {
        return bad(format!(
            "{slug:?} starts or ends with a hyphen: a DNS label starts and ends with a letter or digit"
        ));
    }
    Ok(())
}

/// Checks an organization's display name with the API's guard for it (`SettingsBody::display_name`): 1 to 200
/// characters, no control characters, read trimmed. Errors name `field`.
pub fn validate_name(field: &str, name: &str) -> Result<String, AppError> {
    gpuledger_api::input::Line::<200>::new(name)
        .map(|n| n.into_inner())
        .map_err(|reason| AppError::invalid(field, reason))
}

/// Who the operator is in the audit and operator logs: `operator:<OS user>` (`operator:cli` when unknown).
pub fn operator_actor() -> String {
    let user = std::env::var("SUDO_USER")
        .ok()
        .filter(|u| !u.is_empty())
        .or_else(|| std::env::var("USER").ok().filter(|u| !u.is_empty()))
        .unwrap_or_else(|| "cli".into());
    format!("operator:{}", user.chars().filter(|c| !c.is_control()).take(100).collect::<String>())
}

/// A new organization and its first admin's setup link.
#[derive(Debug, Clone)]
pub struct Created {
    /// The organization.
    pub org: OrgId,
    /// The one-time setup token (the path is `/setup/<token>`); shown once, only its hash is stored.
    pub setup_token: String,
    /// When the link expires.
    pub setup_expires_at: OffsetDateTime,
}

/// Creates an organization with `slug` (taken once: refused when it exists or belonged to a deleted organization),
/// its settings, and a one-time setup link for its first admin. Audited in its log and the operator log.
pub async fn create(db: &Database, id: OrgId, slug: &str, name: &str, actor: &str) -> Result<Created, AppError> {
    validate_slug(slug)?;
    let name = validate_name("name", name)?;
    // The organization row first, in its own transaction. On Citus `organizations` is a reference table written by
    // gpuledger_directory (the SECURITY DEFINER door) over its own connections to the workers, and the rows below
    // are written by gpuledger_app over others: a worker checks their foreign key to `organizations` against its
    // copy, which shows the new row only once committed (docs/scaling.md, "Creating an organization"). Should what
    // follows fail, `ensure` finds the organization and `org setup-link` completes its settings.
    let mut tx = db.begin_org(id).await?;
    store::create_org(&mut tx, slug, &name).await?;
    tx.commit_quiet().await?;
    let mut tx = db.begin_org(id).await?;
    store::init_settings(&mut tx, actor).await?;
    let (setup_token, setup_expires_at) = store::issue_setup_link(&mut tx, actor, SETUP_LINK_TTL).await?;
    let details = json!({"slug": slug, "name": name, "setup_link_expires_at": gpuledger_core::time_fmt::rfc3339(setup_expires_at)});
    tx.audit(actor, "org.create", slug, "", details.clone()).await?;
    store::operator_log(&mut tx, actor, "org.create", slug, details).await?;
    tx.commit_quiet().await?;
    Ok(Created { org: id, setup_token, setup_expires_at })
}

/// The organization with `slug`, created through [`create`] when it does not exist yet (what `demo` does at every
/// start; the setup link of a new one is not shown — the demo has its own sign-in).
pub async fn ensure(db: &Database, id: OrgId, slug: &str, name: &str, actor: &str) -> Result<OrgId, AppError> {
    if let Some(existing) = db.cross_org_directory().org_id_by_slug(slug).await? {
        return Ok(existing);
    }
    Ok(create(db, id, slug, name, actor).await?.org)
}

/// The organization with this slug, or a clear error naming it.
pub async fn resolve(db: &Database, slug: &str) -> Result<OrgId, AppError> {
    db.cross_org_directory()
        .org_id_by_slug(slug)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("no organization with slug {slug:?} (see `org list`)")))
}

/// A new setup link for an organization's first admin (the first one expired or was lost). Audited.
pub async fn new_setup_link(db: &Database, slug: &str, actor: &str) -> Result<Created, AppError> {
    let org = resolve(db, slug).await?;
    let mut tx = db.begin_org(org).await?;
    store::init_settings(&mut tx, actor).await?;
    ensure_active(&mut tx).await?;
    let (setup_token, setup_expires_at) = store::issue_setup_link(&mut tx, actor, SETUP_LINK_TTL).await?;
    let details = json!({"setup_link_expires_at": gpuledger_core::time_fmt::rfc3339(setup_expires_at)});
    tx.audit(actor, "org.setup_link", slug, "", details.clone()).await?;
    store::operator_log(&mut tx, actor, "org.setup_link", slug, details).await?;
    tx.commit_quiet().await?;
    Ok(Created { org, setup_token, setup_expires_at })
}

/// One row of `org list`.
#[derive(Debug, Clone)]
pub struct Listed {
    /// What the operator's door tells about it.
    pub org: crate::db::OperatorOrg,
    /// Registered clusters.
    pub clusters: i64,
    /// People who signed in at least once.
    pub users: i64,
    /// The newest agent contact.
    pub last_ingest: Option<OffsetDateTime>,
}

/// Every organization with its counts (each read in the organization's own transaction).
pub async fn list(db: &Database) -> Result<Vec<Listed>, AppError> {
    let mut out = Vec::new();
    for org in db.cross_org_operator().organizations().await? {
        let mut tx = db.begin_org(org.org).await?;
        let (clusters, users, last_ingest) = store::counts(&mut tx).await?;
        tx.rollback().await?;
        out.push(Listed { org, clusters, users, last_ingest });
    }
    Ok(out)
}

/// Suspends (`suspend`) or resumes an organization. Returns `false` when it already was in that state (nothing is
/// written then).
pub async fn set_state(db: &Database, slug: &str, suspend: bool, reason: &str, actor: &str) -> Result<bool, AppError> {
    let org = resolve(db, slug).await?;
    let reason = reason.trim();
    if reason.chars().count() > 500 || reason.chars().any(char::is_control) {
        return Err(AppError::invalid("reason", "at most 500 characters, no control characters"));
    }
    let state = if suspend { "suspended" } else { "active" };
    let mut tx = db.begin_org(org).await?;
    let previous = store::set_state(&mut tx, state, reason).await?;
    if previous == state {
        tx.rollback().await?;
        return Ok(false);
    }
    let action = if suspend { "org.suspend" } else { "org.resume" };
    let details = json!({"from": previous, "to": state});
    tx.audit(actor, action, slug, reason, details.clone()).await?;
    store::operator_log(&mut tx, actor, action, slug, json!({"from": previous, "to": state, "reason": reason})).await?;
    tx.commit_quiet().await?;
    // Identities this process keeps (pages, agents' tokens) are checked again at once.
    crate::auth::revocations::revoked();
    Ok(true)
}

/// A limit to set: keep it, remove it, or set a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitChange {
    /// Leave as it is.
    Keep,
    /// No limit.
    Unlimited,
    /// This value.
    Set(i64),
}

impl LimitChange {
    /// Parses a CLI value: a positive number, or `none` (no limit). `field` names the flag in errors.
    pub fn parse(field: &str, value: Option<&str>, max: i64) -> Result<Self, AppError> {
        let Some(value) = value.map(str::trim) else { return Ok(Self::Keep) };
        if value.eq_ignore_ascii_case("none") {
            return Ok(Self::Unlimited);
        }
        match value.parse::<i64>() {
            Ok(n) if (1..=max).contains(&n) => Ok(Self::Set(n)),
            _ => Err(AppError::invalid(
                field,
                format!("a number from 1 to {max}, or `none` for no limit; got {value:?}"),
            )),
        }
    }

    fn apply(self, current: Option<i64>) -> Option<i64> {
        match self {
            Self::Keep => current,
            Self::Unlimited => None,
            Self::Set(n) => Some(n),
        }
    }
}

/// The largest API rate limit the operator may set (requests per minute).
pub const MAX_RATE_LIMIT_PER_MINUTE: i64 = 1_000_000;
/// The largest ingest limit the operator may set (facts per day).
pub const MAX_INGEST_FACTS_PER_DAY: i64 = 100_000_000_000;

/// Sets an organization's limits (the operator's; admins see them read-only). Returns them as now in force.
pub async fn set_limits(
    db: &Database,
    slug: &str,
    rate: LimitChange,
    ingest: LimitChange,
    actor: &str,
) -> Result<(Option<i64>, Option<i64>), AppError> {
    let org = resolve(db, slug).await?;
    let mut tx = db.begin_org(org).await?;
    let (old_rate, old_ingest) = store::limits(&mut tx).await?;
    let (new_rate, new_ingest) = (rate.apply(old_rate), ingest.apply(old_ingest));
    store::set_limits(&mut tx, new_rate, new_ingest).await?;
    let details = json!({
        "rate_limit_per_minute": {"from": old_rate, "to": new_rate},
        "ingest_facts_per_day": {"from": old_ingest, "to": new_ingest},
    });
    tx.audit(actor, "org.limits", slug, "", details.clone()).await?;
    store::operator_log(&mut tx, actor, "org.limits", slug, details).await?;
    tx.commit_quiet().await?;
    Ok((new_rate, new_ingest))
}

/// Rows removed from one table by [`delete`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removed {
    /// The table.
    pub table: String,
    /// Its rows that belonged to the organization.
    pub rows: i64,
}

/// Deletes an organization: `confirm` must repeat its slug; refused unless it is suspended and its last export
/// still matches every row it holds. Removes every row of it from every table with an `org_id` column (from the
/// catalog) and the organization itself, in one transaction, and retires the slug. The operator log keeps the
/// record (the organization's own audit log goes with it; its last export holds it).
pub async fn delete(db: &Database, slug: &str, confirm: &str, actor: &str) -> Result<Vec<Removed>, AppError> {
    if confirm != slug {
        return Err(AppError::invalid(
            "confirm",
            format!("repeat the slug to delete the organization: --confirm {slug} (got {confirm:?})"),
        ));
    }
    let org = resolve(db, slug).await?;
    let mut tx = db.begin_org(org).await?;
    tx.allow_long_statements().await?;
    // Clear refusals first (the erase function checks the same again, in the database).
    let (state, last_export) = store::delete_preconditions(&mut tx).await?;
    if state != "suspended" {
        return Err(AppError::Conflict(format!(
            "organization {slug:?} is {state}: suspend it first (`org suspend {slug}`), then export it, then delete it"
        )));
    }
    let Some(exported_at) = last_export else {
        return Err(AppError::Conflict(format!(
            "organization {slug:?} was never exported: run `org export {slug} --output FILE` first; deleting is \
             refused until an export holds everything it owns"
        )));
    };
    store::retire_slug(&mut tx, slug, actor).await?;
    // The erase function compares the export's fingerprint with every row the organization holds now.
    let removed = store::erase(&mut tx).await.map_err(|e| match e {
        AppError::Conflict(m) => AppError::Conflict(format!(
            "organization {slug:?}: {m} (last export {})",
            gpuledger_core::time_fmt::rfc3339(exported_at)
        )),
        e => e,
    })?;
    let total: i64 = removed.iter().map(|r| r.rows).sum();
    let per_table: serde_json::Map<String, serde_json::Value> =
        removed.iter().filter(|r| r.rows > 0).map(|r| (r.table.clone(), json!(r.rows))).collect();
    store::operator_log(
        &mut tx,
        actor,
        "org.delete",
        slug,
        json!({"rows": total, "tables": per_table, "last_export": gpuledger_core::time_fmt::rfc3339(exported_at)}),
    )
    .await?;
    // The organization is gone: nothing to mark for the read model.
    tx.commit_quiet().await?;
    Ok(removed)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn slugs_follow_dns_label_rules() {
        for ok in ["acme", "a", "acme-corp", "0day", &"a".repeat(63)] {
            assert!(validate_slug(ok).is_ok(), "{ok}");
        }
        for (bad, says) in [
            ("", "required"),
            ("Acme", "lowercase"),
            ("acme_corp", "'_'"),
            ("-acme", "hyphen"),
            ("acme-", "hyphen"),
            ("ac me", "' '"),
            ("acmé", "'é'"),
        ] {
            let err = validate_slug(bad).unwrap_err();
            assert!(matches!(&err, AppError::Invalid { field, .. } if field == "slug"), "{bad}: {err}");
            assert!(err.to_string().contains(says), "{bad}: {err}");
        }
        assert!(validate_slug(&"a".repeat(64)).unwrap_err().to_string().contains("63"));
    }

    #[test]
    fn names_are_trimmed_and_bounded() {
        assert_eq!(validate_name("name", "  Acme Corp ").unwrap(), "Acme Corp");
        assert!(validate_name("name", " ").is_err());
        assert!(validate_name("name", &"x".repeat(201)).is_err());
        assert!(validate_name("display_name", "a\nb").unwrap_err().to_string().starts_with("display_name:"));
    }

    #[test]
    fn the_api_rate_limit_counts_per_organization_and_names_itself() {
        let (a, b) = (OrgId::from_uuid(uuid::Uuid::new_v4()), OrgId::from_uuid(uuid::Uuid::new_v4()));
        assert!(check_rate(a, 2).is_ok() && check_rate(a, 2).is_ok());
        let err = check_rate(a, 2).unwrap_err();
        assert!(matches!(&err, AppError::LimitReached { retry_after, .. } if (1..=60).contains(retry_after)));
        assert!(err.to_string().contains("rate_limit_per_minute"), "{err}");
        assert!(check_rate(b, 2).is_ok(), "another organization has its own allowance");
    }

    #[test]
    fn limits_parse_numbers_and_none() {
        assert_eq!(LimitChange::parse("x", None, 10).unwrap(), LimitChange::Keep);
        assert_eq!(LimitChange::parse("x", Some("none"), 10).unwrap(), LimitChange::Unlimited);
        assert_eq!(LimitChange::parse("x", Some("7"), 10).unwrap(), LimitChange::Set(7));
        for bad in ["0", "11", "-1", "lots"] {
            let err = LimitChange::parse("rate-limit-per-minute", Some(bad), 10).unwrap_err();
            assert!(err.to_string().starts_with("rate-limit-per-minute:"), "{err}");
        }
        assert_eq!(LimitChange::Set(3).apply(Some(1)), Some(3));
        assert_eq!(LimitChange::Keep.apply(Some(1)), Some(1));
        assert_eq!(LimitChange::Unlimited.apply(Some(1)), None);
    }
}
