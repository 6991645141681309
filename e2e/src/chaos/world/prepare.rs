//! The seed's prepared database: migrated and seeded once by the real server, with the cluster's tokens, the
//! scenario's tenants and a cost policy, so both runs clone the same organization (and their close hashes compare).

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
    time::Duration,
};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use super::{CLUSTER, KillOnDrop, Seeded, cli, kill9, psql, spawn_server, wait_ready};
use crate::{
    chaos::{pg::Postgres, scenario::Scenario},
    process::free_port,
};

/// Migrates and seeds the demo organization once, creates the cluster's tokens and the scenario's tenants, and
/// leaves it as the template both runs clone.
pub async fn prepare(pg: &Postgres, s: &Scenario, root: &Path) -> Result<Seeded> {
    psql(&pg.url("postgres"), "CREATE DATABASE seeded").await?;
    let url = pg.url("seeded");
    let port = free_port()?;
    let base = format!("http://127.0.0.1:{port}");
    let mut server = KillOnDrop(Some(spawn_server(&url, port, &root.join("prepare.log"))?));
    let http = reqwest::Client::builder().timeout(Duration::from_secs(30)).build()?;
    wait_ready(&http, &base, Duration::from_secs(120)).await?;
    let agent_token = cli(&url, &["token", "create", "--org", "demo", "--scope", &format!("agent:{CLUSTER}")])?;
    let admin_token = cli(&url, &["token", "create", "--org", "demo", "--scope", "admin"])?;
    // Tenants exist before any fact names them, so both runs give them the same IDs (and the same close hashes).
    let mut tenants: BTreeMap<String, &str> = BTreeMap::new();
    for i in 0..s.namespaces {
        tenants.insert(format!("tenant-{:02}", i % 25), if i % 2 == 0 { "Research" } else { "Engineering" });
    }
    tenants.insert(s.reassignment.1.clone(), "Research");
    for dept in ["Research", "Engineering"] {
        let _ = http
            .post(format!("{base}/api/v1/departments"))
            .bearer_auth(&admin_token)
            .json(&json!({"name": dept}))
            .send()
            .await?;
    }
    for (name, dept) in &tenants {
        let r = http
            .post(format!("{base}/api/v1/tenants"))
            .bearer_auth(&admin_token)
            .json(&json!({"name": name, "department": dept}))
            .send()
            .await?;
        if !(r.status().is_success() || r.status().as_u16() == 409) {
            bail!("creating tenant {name}: {} {}", r.status(), r.text().await.unwrap_or_default());
        }
    }
    // A cost policy for the inventory's classes, effective from the earliest month the scenario closes.
    let inventory: Value =
        http.get(format!("{base}/api/v1/inventory")).bearer_auth(&admin_token).send().await?.json().await?;
    let mut classes = BTreeSet::new();
    collect_classes(&inventory, &mut classes);
    if classes.is_empty() {
        bail!("the demo inventory names no GPU class: {inventory}");
    }
    let rates: Vec<Value> = classes
        .iter()
        .enumerate()
        .map(|(i, c)| json!({"gpu_class": c, "guaranteed": format!("{}.25", i + 1), "borrowed": format!("{}.75", i + 2)}))
        .collect();
    let policy = json!({
        "currency": "USD",
        "classes": rates,
        "energy": {"per_kwh": "0.14", "pue": "1.35"},
        "services": [],
        "token_weights": [{"model": "*", "input": "1", "output": "4"}],
        "overhead": {"fixed": [{"name": "platform team", "amount": "1000.00"}], "unallocated_capacity": false,
                     "key": {"kind": "allocated_gpu_hours"}}
    });
    let r = http
        .post(format!("{base}/api/v1/policies"))
        .bearer_auth(&admin_token)
        .json(&json!({"effective_from": s.earlier.name, "note": "chaos", "policy": policy}))
        .send()
        .await?;
    let code = r.status();
    let draft: Value = r.json().await.unwrap_or_default();
    let v = draft["version"].as_i64().with_context(|| format!("creating the policy: {code} {draft}"))?;
    let r = http
        .post(format!("{base}/api/v1/policies/{v}/approve"))
        .bearer_auth(&admin_token)
        .json(&json!({"reason": "chaos"}))
        .send()
        .await?;
    if !r.status().is_success() {
        bail!("approving the policy: {} {}", r.status(), r.text().await.unwrap_or_default());
    }
    if let Some(c) = server.0.as_mut() {
        crate::process::signal(c.id(), "TERM")?;
        let _ = c.wait();
    }
    kill9(&mut server.0);
    Ok(Seeded { template: "seeded".into(), agent_token, admin_token })
}

/// Every `gpu_class` value anywhere in `v`.
fn collect_classes(v: &Value, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(o) => {
            for (k, x) in o {
                match (k.as_str(), x) {
                    ("gpu_class", Value::String(c)) => {
                        out.insert(c.clone());
                    }
                    _ => collect_classes(x, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| collect_classes(x, out)),
        _ => {}
    }
}
