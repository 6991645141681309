//! GPU Ledger's REST contract: the request and answer types of every `/api/v1` operation.
//!
//! The server's handlers answer with these types, the portal's pages read them, the tests and fakes build them,
//! and the OpenAPI document (`/api/v1/openapi.json`) takes its schemas from their [`schemars::JsonSchema`] derives,
//! so a renamed field breaks the build, not a page at run time.
//!
//! Conventions on the wire (unchanged from the hand-written answers they replace): amounts are decimal strings
//! (`"1234.500000"`), never floats; times are RFC 3339 UTC strings; months are `YYYY-MM`; identifiers are UUID
//! strings. One module per feature, named as the server's feature folders are.
#![deny(missing_docs)]

pub mod analytics;
pub mod auth;
pub mod close;
pub mod common;
pub mod costs;
pub mod disputes;
pub mod exports;
pub mod faults;
pub mod foresight;
pub mod health;
pub mod ingest;
pub mod input;
pub mod ledger;
pub mod orgs;
pub mod params;
pub mod policy;
pub mod states;
pub mod telemetry;
pub mod tenancy;
pub mod training;
pub mod usage;

pub use common::{Items, Page, Problem};
/// Re-exported so users of the contract derive and generate schemas with the same version.
pub use schemars;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn an_answer_round_trips_with_its_field_names() {
        let v = json!({
            "items": [{"version": 2, "state": "draft", "effective_from": "2026-11", "currency": "USD", "note": "n",
                       "document": {"currency": "USD", "classes": []}, "created_at": "2026-10-01T00:00:00Z",
                       "created_by": "user:ada", "approved_at": null, "approved_by": null, "superseded_at": null}],
            "total": 1
        });
        let list: policy::PolicyList = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(list.items[0].version, 2);
        assert_eq!(serde_json::to_value(&list).unwrap(), v, "serialize(deserialize(x)) == x");
        let me = json!({"organization": {"slug": "acme", "name": "Acme"}, "actor": "user:ada", "kind": "user",
                        "roles": ["admin"], "departments": null, "csrf_token": "c"});
        let parsed: auth::Me = serde_json::from_value(me.clone()).unwrap();
        assert_eq!(serde_json::to_value(parsed).unwrap(), me);
    }

    #[test]
    fn request_bodies_refuse_unknown_fields() {
        let unknown = |r: Result<(), serde_json::Error>| r.unwrap_err().to_string();
        let e = unknown(
            serde_json::from_value::<tenancy::TenantBody>(json!({"name": "a", "department": "b", "extra": 1}))
                .map(drop),
        );
        assert!(e.contains("unknown field `extra`"), "{e}");
        assert!(serde_json::from_value::<auth::NewToken>(json!({"name": "a", "scpoe": "admin"})).is_err());
        assert!(serde_json::from_value::<auth::NewToken>(json!({"name": "a", "scope": "admin", "x": 1})).is_err());
        assert!(
            serde_json::from_value::<policy::QuotaBody>(json!({"gpu_class": "c", "gpus": "1",
            "valid_from": "2026-01-01T00:00:00Z", "holder": "x"}))
            .is_err()
        );
        assert!(
            serde_json::from_value::<auth::RoleMappingsBody>(json!({"mappings": [{"group": "g", "rol": "admin"}]}))
                .is_err()
        );
        // What is known parses, with the defaults the server relies on.
        let t: auth::NewToken = serde_json::from_value(json!({"name": "bi", "scope": "export"})).unwrap();
        assert!(serde_json::from_value::<auth::NewToken>(json!({"name": "bi"})).is_err(), "the scope is required");
        assert!(t.departments.is_empty() && t.expires_in_days.is_none());
    }
}
