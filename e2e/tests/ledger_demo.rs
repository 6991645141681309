//! The ledger on the demo, through the real binaries: both closed demo months' evidence bundles verify offline
//! with `gpuledger-server verify`; `recompute` prints the same lines as CSV; one changed number makes `verify` fail
//! and name the line; the hash chain links the two months; last month has an open dispute.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use gpuledger_e2e::{
    fresh_database,
    process::{binary, create_token, temp_dir},
};
use serde_json::Value;

fn curl(url: &str, token: &str, out: &std::path::Path) -> u16 {
    let o = Command::new("curl")
        .args(["-s", "-m", "60", "-o"])
        .arg(out)
        .args(["-w", "%{http_code}", "-H", &format!("Authorization: Bearer {token}"), url])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).trim().parse().unwrap_or(0)
}

fn server(args: &[&str]) -> (bool, String) {
    let o = Command::new(binary("gpuledger-server").unwrap()).args(args).env_remove("DATABASE_URL").output().unwrap();
    (o.status.success(), format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_demo_months_verify_offline_and_tampering_is_named() {
    let db = fresh_database().await.unwrap();
    let dir = temp_dir("gl-e2e-ledger").unwrap();
    // The demo loads three months through the agent code and closes two of them: minutes in a debug build.
    let mut demo = gpuledger_e2e::process::ServerProcess::start(
        &["demo"],
        &[("DATABASE_URL", Some(db.admin_url.as_str()))],
        None,
        &dir.join("demo.log"),
    )
    .unwrap();
    demo.wait_ready(std::time::Duration::from_secs(900)).unwrap();
    let token = create_token(&db.admin_url, "export").unwrap();

    let now = time::OffsetDateTime::now_utc();
    let current = gpuledger_core::Period::containing(now);
    let last = current.prev().unwrap();
    let before = last.prev().unwrap();

    let mut hashes = Vec::new();
    for month in [before, last] {
        let path = dir.join(format!("{month}.json"));
        let code = curl(&format!("{}/api/v1/periods/{month}/bundle", demo.base), &token, &path);
        assert_eq!(code, 200, "bundle of {month}: {}", demo.log_text());
        let (ok, out) = server(&["verify", path.to_str().unwrap()]);
        assert!(ok, "verify {month}: {out}");
        assert!(out.starts_with("OK demo"), "{out}");
        let bundle: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        hashes.push((bundle["hash"].as_str().unwrap().to_string(), bundle["previous_hash"].clone()));

        // recompute prints the lines as CSV, the same count as the bundle holds, with several terms
        let (ok, csv) = server(&["recompute", path.to_str().unwrap()]);
        assert!(ok, "{csv}");
        let rows: Vec<&str> = csv.lines().collect();
        assert_eq!(rows.len() - 1, bundle["lines"].as_array().unwrap().len());
        assert!(rows.len() > 20, "a 64-GPU month with 8 tenants has more than 20 lines: {}", rows.len());
        let terms: std::collections::BTreeSet<&str> =
            bundle["lines"].as_array().unwrap().iter().map(|l| l["term"].as_str().unwrap()).collect();
        for t in ["guaranteed", "borrowed", "energy", "service", "overhead"] {
            assert!(terms.contains(t), "{month} has no {t} line: {terms:?}");
        }

        // one changed amount → verify fails and names the line
        let mut tampered = bundle.clone();
        let first = tampered["lines"][0]["amount"].as_str().unwrap().to_string();
        let id = tampered["lines"][0]["line_id"].as_str().unwrap().to_string();
        let bumped = gpuledger_core::decimal::Decimal::parse(&first)
            .unwrap()
            .value()
            .checked_add(gpuledger_core::Fraction::ONE)
            .unwrap();
        tampered["lines"][0]["amount"] =
            Value::String(gpuledger_core::decimal::Decimal::round(bumped, 2).unwrap().to_string());
        let bad = dir.join(format!("{month}-tampered.json"));
        std::fs::write(&bad, serde_json::to_vec(&tampered).unwrap()).unwrap();
        let (ok, out) = server(&["verify", bad.to_str().unwrap()]);
        assert!(!ok, "a tampered bundle must not verify");
        assert!(out.contains(&format!("line {id}: amount")), "{out}");

        // one changed input (a rate) → the lines priced with it are named
        let mut tampered = bundle.clone();
        let borrowed_class = bundle["lines"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["term"] == "borrowed")
            .map(|l| l["gpu_class"].as_str().unwrap().to_string())
            .expect("a borrowed line");
        for c in tampered["inputs"]["policy"]["classes"].as_array_mut().unwrap() {
            if c["gpu_class"] == borrowed_class.as_str() {
                c["borrowed"] = Value::String("99.00".into());
            }
        }
        std::fs::write(&bad, serde_json::to_vec(&tampered).unwrap()).unwrap();
        let (ok, out) = server(&["verify", bad.to_str().unwrap()]);
        assert!(!ok && out.contains("/borrowed/"), "{out}");
    }
    assert_eq!(hashes[1].1, Value::String(hashes[0].0.clone()), "last month chains to the month before");

    // the current month is open: no bundle; last month has the demo's open dispute
    let code = curl(&format!("{}/api/v1/periods/{current}/bundle", demo.base), &token, &dir.join("none"));
    assert_eq!(code, 404);
    let list = dir.join("disputes.json");
    assert_eq!(curl(&format!("{}/api/v1/disputes?state=open", demo.base), &token, &list), 200);
    let disputes: Value = serde_json::from_slice(&std::fs::read(&list).unwrap()).unwrap();
    let items = disputes["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{disputes}");
    assert_eq!(items[0]["period"], last.to_string());

    demo.stop("INT", std::time::Duration::from_secs(30)).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
