//! The ledger side of the contract: representative answers survive a round trip unchanged, and request bodies
//! refuse fields they do not know.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use gpuledger_api::{
    close::{PeriodEntry, Periods},
    disputes::{AcceptRequest, ApprovalRequest, CommentRequest, DisputeDetail, OpenDispute, ReasonRequest},
    ledger::{Ledger, Summaries},
    usage::AliasesRequest,
};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::{Value, json};

fn round_trip<T: Serialize + DeserializeOwned>(answer: Value) {
    let typed: T = serde_json::from_value(answer.clone()).expect("parses");
    assert_eq!(serde_json::to_value(&typed).unwrap(), answer);
}

fn line() -> Value {
    json!({"line_id": "2026-10/borrowed/nlp/H100", "period": "2026-10", "department_id": "d1", "department": "Research",
           "tenant_id": "t1", "tenant": "nlp", "term": "borrowed", "gpu_class": "H100", "quantity": "10.000000",
           "unit": "GPU-hour", "rate": "2.10", "amount": "21.00", "currency": "USD", "confidence": "exact",
           "policy_version": 1, "evidence": "/api/v1/periods/2026-10/evidence", "explanation": "10 × 2.10"})
}

#[test]
fn ledger_answers_round_trip() {
    let mut credit = line();
    credit["corrects"] = json!("2026-09/borrowed/nlp/H100");
    round_trip::<Ledger>(json!({
        "period": "2026-10", "state": "open", "starts_at": "2026-09-30T15:00:00Z", "ends_at": "2026-10-31T15:00:00Z",
        "time_zone": "Asia/Tokyo", "continues_from": "2026-09-30T22:00:00Z", "policy_version": 1, "currency": "USD", "hash": null,
        "as_of": "2026-10-05T00:00:00Z", "provisional": true, "stale": false, "total": "21.00",
        "totals_by_term": {"borrowed": "21.00"}, "notes": {"gaps": 1}, "count": 2, "page": 1, "per_page": 1000,
        "lines": [line(), credit]}));
    round_trip::<Summaries>(json!({"period": "2026-10", "pending": true, "utilization": null, "inference": null,
        "training": {"period": "2026-10", "basis": "b", "workloads": [], "as_of": "x", "computed_at": "y"}}));
}

#[test]
fn a_month_without_a_record_has_no_record_fields() {
    let periods = json!({"total": 2, "items": [
        {"period": "2026-11", "state": "open"},
        {"period": "2026-10", "state": "closed", "closed_at": "2026-11-01T00:00:00Z", "closed_by": "token:1",
         "policy_version": 1, "hash": "ab", "lines": 3, "total": "9.00", "currency": "USD", "previous_hash": null,
         "bundle": "/api/v1/periods/2026-10/bundle"}]});
    let typed: Periods = serde_json::from_value(periods.clone()).unwrap();
    let open = PeriodEntry { period: "2026-11".into(), state: gpuledger_api::states::PeriodState::Open, record: None };
    assert_eq!(serde_json::to_value(&open).unwrap(), periods["items"][0]);
    assert_eq!(serde_json::to_value(&typed.items[1]).unwrap(), periods["items"][1]);
}

#[test]
fn dispute_detail_round_trips() {
    round_trip::<DisputeDetail>(json!({
        "id": "u1", "number": 1, "period": "2026-10", "line_ids": ["l1"], "state": "accepted", "reason": "r",
        "opened_by": "a", "opened_at": "2026-11-02T00:00:00Z", "resolved_by": "b", "resolved_at": null,
        "resolution": null, "credit_amount": "5.00", "adjustment_id": "a1", "credit_state": "pending_approval",
        "disputed_amount": "21.00", "currency": "USD", "lines": [], "credit": null,
        "events": [{"id": "e1", "at": "2026-11-02T00:00:00Z", "actor": "a", "action": "opened", "body": "r",
                    "details": {}}]}));
}

#[test]
fn request_bodies_refuse_unknown_fields() {
    assert!(serde_json::from_str::<OpenDispute>(r#"{"period": "2026-10", "lines": []}"#).is_err());
    assert!(serde_json::from_str::<CommentRequest>(r#"{"text": "x"}"#).is_err());
    assert!(serde_json::from_str::<AcceptRequest>(r#"{"reason": "x", "credit": "1"}"#).is_err());
    assert!(serde_json::from_str::<ReasonRequest>(r#"{"why": "x"}"#).is_err());
    assert!(
        serde_json::from_str::<AliasesRequest>(
            r#"{"aliases": [{"kind": "team", "alias": "a", "tenant": "t", "x": 1}]}"#
        )
        .is_err()
    );
    // A missing required field is refused by the type, naming it; an optional reason reads as empty.
    let missing = serde_json::from_str::<ReasonRequest>("{}").unwrap_err().to_string();
    assert!(missing.contains("missing field `reason`"), "{missing}");
    assert_eq!(serde_json::from_str::<ApprovalRequest>("{}").unwrap().reason.as_str(), "");
}

#[test]
fn a_policys_fault_settings_are_an_object_or_nothing() {
    use gpuledger_api::policy::PolicyDocument;
    let doc = |faults: serde_json::Value| {
        serde_json::from_value::<PolicyDocument>(json!({"currency": "USD", "faults": faults}))
    };
    assert!(doc(json!([null, null])).is_err(), "serde would read a struct from an array");
    assert!(doc(json!({"grace_minutes": 10})).is_ok());
    assert!(doc(serde_json::Value::Null).unwrap().faults.is_none());
    assert!(doc(json!({"grace_minutes": 5000})).is_err());
}
