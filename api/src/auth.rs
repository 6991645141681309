//! Who the caller is, API tokens, the identity provider, role mappings, the audit log, agent join
//! (`/api/v1/me`, `/api/v1/tokens`, `/api/v1/identity/…`, `/api/v1/audit`, `/api/v1/agents/join`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::input::{HttpUrl, Int, Line, List, OidcScopes, TokenScope};

/// `GET /api/v1/me`: who the caller is and what it may do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Me {
    /// The caller's organization.
    pub organization: Organization,
    /// The caller as the audit log names it (`user:ada@example.test`, `token:…`).
    pub actor: String,
    /// `user` (a browser session) or `token` (an API token).
    pub kind: crate::states::CallerKind,
    /// A user's roles (`admin`, `finance`, `department_manager`, `viewer`), or a token's scope.
    pub roles: Vec<String>,
    /// The organization's department names when the caller is limited to departments; null: the whole organization.
    pub departments: Option<Vec<String>>,
    /// A session's CSRF token (send it as `X-CSRF-Token` on state-changing requests); null for tokens.
    pub csrf_token: Option<String>,
}

/// An organization's names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Organization {
    /// URL-safe name.
    pub slug: String,
    /// Display name.
    pub name: String,
}

/// `GET /api/v1/tokens`: the organization's API tokens, newest first (never their secrets).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TokenList {
    /// The tokens.
    pub tokens: Vec<TokenInfo>,
}

/// An API token as admins see it (never its secret).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TokenInfo {
    /// The token's ID (UUID).
    pub token_id: String,
    /// What it is for.
    pub name: String,
    /// `admin`, `export`, `agent` or `join`.
    pub scope: crate::states::TokenScope,
    /// The cluster of an agent or join token.
    pub cluster: Option<String>,
    /// The departments a limited export token may read (empty: all).
    pub departments: Vec<String>,
    /// Who created it.
    pub created_by: String,
    /// When it was created (RFC 3339).
    pub created_at: String,
    /// When it expires (RFC 3339); null: never.
    pub expires_at: Option<String>,
    /// Its last use, to the minute (RFC 3339).
    pub last_used_at: Option<String>,
    /// When it was revoked (RFC 3339); null while valid.
    pub revoked_at: Option<String>,
}

/// `POST /api/v1/tokens`: a new token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NewToken {
    /// What it is for.
    pub name: Line<200>,
    /// `admin`, `export`, `agent:CLUSTER` or `join:CLUSTER` (a new cluster name is registered).
    pub scope: TokenScope,
    /// Department names an export token is limited to (only for `export`: else 409).
    #[serde(default)]
    pub departments: List<Line<100>, 0, 100>,
    /// Days until it expires; absent: never.
    #[serde(default)]
    pub expires_in_days: Option<Int<1, 3650>>,
}

/// `POST /api/v1/tokens` (201): the token created, the only time its secret is shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CreatedToken {
    /// The token's ID (UUID).
    pub token_id: String,
    /// What it is for.
    pub name: String,
    /// `admin`, `export`, `agent` or `join`.
    pub scope: crate::states::TokenScope,
    /// The secret (`glt_…`): store it now, it is never shown again.
    pub token: String,
    /// When it expires (RFC 3339); null: never.
    pub expires_at: Option<String>,
}

/// `POST /api/v1/tokens/{id}/revoke`: revoked (at once; revoking twice is no error).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Revoked {
    /// The token's ID as given.
    pub token_id: String,
    /// Always true.
    pub revoked: bool,
}

/// `GET/PUT /api/v1/identity/provider`: the organization's OpenID provider settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ProviderSettings {
    /// The configured provider; null: none (demo login or tokens only).
    pub provider: Option<Provider>,
    /// Whether the demo login is on (a demo organization without a provider).
    pub demo_login: bool,
    /// The redirect URI to register at the provider.
    pub redirect_uri: String,
}

/// A configured OpenID provider (its client secret is never returned).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Provider {
    /// The issuer URL.
    pub issuer: String,
    /// The client registered for GPU Ledger.
    pub client_id: String,
    /// Always true: a provider cannot be configured without a secret.
    pub client_secret_set: bool,
    /// Where the secret comes from: `file` (the mounted secrets directory) or `database`.
    pub client_secret_source: String,
    /// The claim that lists the user's groups.
    pub groups_claim: String,
    /// Requested scopes, space-separated.
    pub scopes: String,
}

/// `PUT /api/v1/identity/provider`: the provider to use (discovery at the issuer is checked).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProviderBody {
    /// The issuer URL (a trailing `/` is dropped). Which issuers may be reached is the operator's rule, and
    /// discovery must succeed there (409 otherwise).
    pub issuer: HttpUrl,
    /// The client registered for GPU Ledger.
    pub client_id: Line<400>,
    /// The client's secret; absent keeps the stored one (required the first time unless mounted: else 409).
    #[serde(default)]
    pub client_secret: Option<Line<4096>>,
    /// The claim that lists the user's groups (default `groups`).
    #[serde(default)]
    pub groups_claim: Option<Line<200>>,
    /// Requested scopes, space-separated, including `openid` (default `openid email profile groups`).
    #[serde(default)]
    pub scopes: Option<OidcScopes>,
}

/// `GET/PUT /api/v1/identity/role-mappings`: which identity-provider group gets which role.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RoleMappings {
    /// The mappings, by group, role and department.
    pub mappings: Vec<RoleMapping>,
}

/// One group → role mapping.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RoleMapping {
    /// The group as the provider's groups claim names it.
    pub group: String,
    /// `admin`, `finance`, `department_manager` or `viewer`.
    pub role: RoleName,
    /// A department manager's department; null for the other roles.
    pub department: Option<String>,
}

/// `PUT /api/v1/identity/role-mappings`: the mappings that replace all of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RoleMappingsBody {
    /// The new mappings.
    pub mappings: List<RoleMappingBody, 0, 1000>,
}

/// One mapping of [`RoleMappingsBody`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RoleMappingBody {
    /// The group.
    pub group: Line<400>,
    /// The role its members get.
    pub role: RoleName,
    /// The department's name: required for `department_manager`, refused for the others (409).
    #[serde(default)]
    pub department: Option<Line<100>>,
}

/// A role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RoleName {
    /// Administers the organization.
    Admin,
    /// Prices, closes, approves credits.
    Finance,
    /// Manages one department.
    DepartmentManager,
    /// Reads.
    Viewer,
}

crate::states::names!(RoleName {
    Admin => "admin",
    Finance => "finance",
    DepartmentManager => "department_manager",
    Viewer => "viewer",
});

/// `GET /api/v1/audit`: audit records, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AuditLog {
    /// The records.
    pub items: Vec<AuditRecord>,
    /// Pass as `before` for the next (older) page; null on the last page.
    pub next_before: Option<String>,
}

/// An audit record's action: a dotted lower-case name (`policy.approve`, `login.failure`, `token.use`). The set grows
/// with the product and a log keeps the names earlier releases wrote, so it is a checked name rather than an enum:
/// a reader filters and groups by it, and cannot be handed free text.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct AuditAction(String);

impl AuditAction {
    /// Longest name.
    pub const MAX_LEN: usize = 64;
    /// Its form: lower-case words of letters, digits and `_`, joined by dots.
    pub const PATTERN: &str = "^[a-z][a-z0-9_]*(\\.[a-z][a-z0-9_]*)*$";

    /// Checks a name.
    pub fn new(name: impl Into<String>) -> Result<Self, String> {
        let name = name.into();
        let word = |w: &str| {
            w.starts_with(|c: char| c.is_ascii_lowercase())
                && w.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        };
        if name.len() <= Self::MAX_LEN && name.split('.').all(word) {
            Ok(Self(name))
        } else {
            Err(format!(
                "{name:?} is not an audit action (dotted lower-case words, at most {} characters)",
                Self::MAX_LEN
            ))
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for AuditAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for AuditAction {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Self::new(String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for AuditAction {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "AuditAction".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": Self::PATTERN,
            "maxLength": Self::MAX_LEN,
            "description": "A dotted lower-case name: `policy.approve`, `login.failure`, `token.use`, …"
        })
    }
}

/// One audit record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AuditRecord {
    /// When (RFC 3339).
    pub at: String,
    /// Who.
    pub actor: String,
    /// What (`policy.approve`, `login.failure`, …).
    pub action: AuditAction,
    /// On what (`policy:3`, …).
    pub target: String,
    /// The reason given, if any (else empty).
    pub reason: String,
    /// The action's details; their shape depends on the action.
    pub details: serde_json::Value,
    /// The caller's address, where known (else empty).
    pub source: String,
    /// Records this row stands for: 1, or a folded token's uses that day (`token_use=fold`).
    #[serde(default = "one")]
    pub count: i64,
    /// A folded row's first use that day (RFC 3339); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_at: Option<String>,
}

fn one() -> i64 {
    1
}

/// `POST /api/v1/agents/join`: the cluster's agent credential, shown once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Joined {
    /// The agent token (`glt_…`) for the cluster.
    pub token: String,
    /// The cluster's name.
    pub cluster: String,
}

#[cfg(test)]
mod audit_action_tests {
    #![allow(clippy::unwrap_used)]
    use super::AuditAction;

    #[test]
    fn an_audit_action_is_a_dotted_lower_case_name() {
        for ok in ["token.use", "identity.role_mappings.update", "login", "fault_credit.approved"] {
            assert_eq!(AuditAction::new(ok).unwrap().as_str(), ok);
        }
        for bad in ["", "Policy.approve", "policy..approve", ".x", "x.", "a b", "token.use\u{0}", &"a".repeat(65)] {
            assert!(AuditAction::new(bad).is_err(), "{bad:?}");
        }
        let parsed: AuditAction = serde_json::from_str("\"policy.approve\"").unwrap();
        assert_eq!(serde_json::to_string(&parsed).unwrap(), "\"policy.approve\"");
        assert!(serde_json::from_str::<AuditAction>("\"DROP TABLE\"").is_err());
        // The schema's pattern says the same as `new`.
        let schema = serde_json::to_value(schemars::schema_for!(AuditAction)).unwrap();
        assert_eq!(schema["pattern"], AuditAction::PATTERN);
    }
}
