//! Reads stay under 100 ms (issue 31), against real PostgreSQL as the app role: a closed month's evidence pages come
//! from the index written at close (or built once from the bundle for an older month) and answer exactly what
//! decoding the bundle answered, for every sort, filter and department scope; a closed month's forecast is its
//! stored figures; `GET /api/v1/idle` is the one the read model's worker stored with the snapshot.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use axum::{
    body::{Body, to_bytes},
    http::{Request, StatusCode},
};
use gpuledger_core::{
    Period,
    ids::{DepartmentId, MigProfile, OrgId},
    ledger::AllocationRecord,
    sharing::SharingMode,
    wire::{
        AgentInfo, AllocationEnd, AllocationStart, AttributionLabels, Batch, DeviceFact, EndReason, Fact, FactBody,
        Holder, MigDeviceFact, NamespaceFact, Stat, TelemetryRollup, WIRE_VERSION, event_id,
    },
};
use gpuledger_server::{
    app::{self, AppState, HttpOptions},
    auth::{self, Scope},
    db::Database,
    readmodel::worker::{self, Wait},
};
use serde_json::{Value, json};
use time::{Duration, OffsetDateTime};
use tower::ServiceExt;
use uuid::Uuid;

const H100: &str = "NVIDIA H100 80GB HBM3";
const A100: &str = "NVIDIA A100-SXM4-80GB";
const RESEARCH: Uuid = Uuid::from_u128(0xd1);
const PLATFORM: Uuid = Uuid::from_u128(0xd2);
const NLP: Uuid = Uuid::from_u128(0xa1);
const VISION: Uuid = Uuid::from_u128(0xa2);
const INFRA: Uuid = Uuid::from_u128(0xb2);

struct Env {
    app: axum::Router,
    /// The app's kept answers (`pagecache`).
    pages: std::sync::Arc<gpuledger_server::pagecache::PageCache>,
    db: Database,
    org: OrgId,
    agent: String,
    admin: String,
    /// An export token limited to Research.
    research: String,
    test_db: gpuledger_e2e::TestDatabase,
}

async fn env() -> Env {
    let (test_db, db) = common::migrated().await;
    let org = db.cross_org_directory().create_org(OrgId::from_uuid(Uuid::new_v4()), "rd", "Reads").await.unwrap();
    let mut tx = db.begin_org(org).await.unwrap();
    let o = org.as_uuid();
    for (id, name) in [(RESEARCH, "Research"), (PLATFORM, "Platform")] {
        sqlx::query("INSERT INTO departments (org_id, department_id, name) VALUES ($1, $2, $3)")
            .bind(o)
            .bind(id)
            .bind(name)
            .execute(tx.conn())
            .await
            .unwrap();
    }
    for (id, dept, name) in [(NLP, RESEARCH, "nlp"), (VISION, RESEARCH, "vision"), (INFRA, PLATFORM, "infra")] {
        sqlx::query("INSERT INTO tenants (org_id, tenant_id, department_id, name) VALUES ($1, $2, $3, $4)")
            .bind(o)
            .bind(id)
            .bind(dept)
            .bind(name)
            .execute(tx.conn())
            .await
            .unwrap();
    }
    for class in ["H100-80GB", "A100-80GB"] {
        sqlx::query("INSERT INTO gpu_classes (org_id, gpu_class) VALUES ($1, $2)")
            .bind(o)
            .bind(class)
            .execute(tx.conn())
            .await
            .unwrap();
    }
    for (model, class) in [(H100, "H100-80GB"), (A100, "A100-80GB")] {
        sqlx::query("INSERT INTO gpu_models (org_id, model, valid_from, gpu_class) VALUES ($1, $2, '2025-01-01', $3)")
            .bind(o)
            .bind(model)
            .bind(class)
            .execute(tx.conn())
            .await
            .unwrap();
    }
    sqlx::query(
        "INSERT INTO mig_profiles (org_id, model, profile, valid_from, fraction_num, fraction_den)
         VALUES ($1, $2, '3g.40gb', '2025-01-01', 3, 7)",
    )
    .bind(o)
    .bind(H100)
    .execute(tx.conn())
    .await
    .unwrap();
    let (cluster, _) = auth::ensure_cluster(&mut tx, "gpu-east").await.unwrap();
    let (_, agent) = auth::create_token(&mut tx, &Scope::Agent { cluster }, "agent", "test", None).await.unwrap();
    let (_, admin) = auth::create_token(&mut tx, &Scope::Admin, "admin", "test", None).await.unwrap();
    let scoped = Scope::Export { departments: vec![DepartmentId::from_uuid(RESEARCH)] };
    let (_, research) = auth::create_token(&mut tx, &scoped, "research-bi", "test", None).await.unwrap();
    tx.commit().await.unwrap();
    let state = AppState::new(db.clone(), None);
    let pages = state.pages.clone();
    let app = app::router(state, &HttpOptions::default());
    let env = Env { app, pages, db, org, agent, admin, research, test_db };
    let (s, v) = call(
        &env,
        "POST",
        "/api/v1/policies",
        &env.admin,
        Some(json!({
            "effective_from": "2025-01", "note": "rates",
            "policy": {"currency": "USD", "classes": [
                {"gpu_class": "H100-80GB", "guaranteed": "3.00", "borrowed": "2.00"},
                {"gpu_class": "A100-80GB", "guaranteed": "1.50", "borrowed": "1.25"}]}
        })),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let (s, v) = call(&env, "POST", "/api/v1/policies/1/approve", &env.admin, Some(json!({"reason": "ok"}))).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    env
}

async fn call(env: &Env, method: &str, uri: &str, token: &str, body: Option<Value>) -> (StatusCode, Value) {
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
        .unwrap();
    let response = env.app.clone().oneshot(req).await.unwrap();
    let status = response.status();
    let bytes = to_bytes(response.into_body(), 1 << 24).await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

async fn send(env: &Env, facts: Vec<Fact>) {
    for chunk in facts.chunks(500) {
        let batch = Batch {
            wire_version: WIRE_VERSION,
            agent: AgentInfo { version: "test".into(), mode: "cluster".into(), node: None, spool: None },
            cluster: None,
            facts: chunk.to_vec(),
        };
        let (s, v) =
            call(env, "POST", "/api/v1/ingest/batches", &env.agent, Some(serde_json::to_value(&batch).unwrap())).await;
        assert_eq!(s, StatusCode::OK, "{v}");
    }
}

fn namespace(uid: Uuid, name: &str, tenant: Option<&str>, since: OffsetDateTime) -> Fact {
    Fact {
        event_id: event_id("namespace", &[&uid.to_string(), tenant.unwrap_or("-"), &since.to_string()]),
        observed_at: since,
        body: FactBody::NamespaceObserved(NamespaceFact {
            namespace_uid: uid,
            name: name.into(),
            created_at: since,
            deleted_at: None,
            labels: AttributionLabels { tenant: tenant.map(Into::into), ..Default::default() },
            labels_since: since,
        }),
    }
}

struct Alloc<'a> {
    pod: String,
    ns: (Uuid, &'a str),
    model: &'a str,
    mode: SharingMode,
    units: u32,
    endpoint: Option<&'a str>,
    from: OffsetDateTime,
    to: Option<OffsetDateTime>,
    /// The device IDs the allocation names (default: one GPU per unit).
    devices: Option<Vec<String>>,
}

fn allocation(a: &Alloc<'_>) -> Vec<Fact> {
    let allocation_id = format!("{}/main/nvidia.com/gpu", a.pod);
    let mut facts = vec![Fact {
        event_id: event_id("alloc-start", &[&allocation_id]),
        observed_at: a.from,
        body: FactBody::AllocationStarted(AllocationStart {
            allocation_id: allocation_id.clone(),
            holder: Holder::Pod,
            holder_uid: Uuid::new_v4(),
            holder_name: a.pod.clone(),
            namespace: a.ns.1.into(),
            namespace_uid: Some(a.ns.0),
            container: Some("main".into()),
            node: Some("node-1".into()),
            resource: "nvidia.com/gpu".into(),
            units: a.units,
            mode: a.mode.clone(),
            gpu_model: Some(a.model.into()),
            device_ids: a
                .devices
                .clone()
                .unwrap_or_else(|| (0..a.units).map(|d| format!("GPU-{}-{d}", a.pod)).collect()),
            started_at: a.from,
            labels: AttributionLabels { endpoint: a.endpoint.map(Into::into), ..Default::default() },
        }),
    }];
    if let Some(to) = a.to {
        facts.push(Fact {
            event_id: event_id("alloc-end", &[&allocation_id]),
            observed_at: to,
            body: FactBody::AllocationEnded(AllocationEnd { allocation_id, ended_at: to, reason: EndReason::Finished }),
        });
    }
    facts
}

/// Last month's allocations, made to tie: equal starts, equal ends, open ends, equal fractions, a namespace that
/// changed owner mid-month (records split with `#n` IDs), one nobody owns, a shared endpoint, two GPU classes.
async fn seed_last_month(env: &Env) -> Period {
    let period = Period::containing(OffsetDateTime::now_utc()).prev().unwrap();
    let start = period.start();
    let (ns_nlp, ns_vision, ns_infra, ns_moved, ns_free) =
        (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let long_ago = start - Duration::days(40);
    let mut facts = vec![
        namespace(ns_nlp, "nlp", Some("nlp"), long_ago),
        namespace(ns_vision, "vision", Some("vision"), long_ago),
        namespace(ns_infra, "infra", Some("infra"), long_ago),
        namespace(ns_moved, "moved", Some("nlp"), long_ago),
        namespace(ns_moved, "moved", Some("infra"), start + Duration::days(10)),
        namespace(ns_free, "free", None, long_ago),
    ];
    let spaces = [(ns_nlp, "nlp"), (ns_vision, "vision"), (ns_infra, "infra"), (ns_moved, "moved"), (ns_free, "free")];
    for i in 0..60u32 {
        let ns = spaces[(i % 5) as usize];
        // Starts repeat every 7 allocations, some before the month; ends repeat every 4, every sixth is open.
        let from = start + Duration::hours(i64::from(i % 7) * 13 - 20);
        let to = (i % 6 != 0).then(|| start + Duration::days(12) + Duration::hours(i64::from(i % 4) * 5));
        let mode = match i % 4 {
            0 => SharingMode::TimeSlice { replicas: 3 },
            1 => SharingMode::TimeSlice { replicas: 7 },
            _ => SharingMode::Exclusive,
        };
        facts.extend(allocation(&Alloc {
            pod: format!("pod-{:02}", (i * 37) % 60),
            ns,
            model: if i % 3 == 0 { A100 } else { H100 },
            mode: mode.clone(),
            units: if matches!(mode, SharingMode::Exclusive) { 1 + i % 2 } else { 1 },
            endpoint: (i % 9 == 0).then_some("chat"),
            from,
            to,
            devices: None,
        }));
    }
    // Devices as agents name them: two MIG slices of one GPU (the records name the GPU, once), and two time-sliced
    // replicas of one GPU held by one pod (`UUID::N`: the GPU, once).
    facts.push(Fact {
        event_id: event_id("device", &["GPU-mig-parent"]),
        observed_at: long_ago,
        body: FactBody::DeviceObserved(DeviceFact {
            node: "node-1".into(),
            gpu_uuid: "GPU-mig-parent".into(),
            model: H100.into(),
            index: Some(3),
            memory_mib: Some(81_559),
            mig_enabled: true,
            mig_devices: ["MIG-b", "MIG-a"]
                .iter()
                .enumerate()
                .map(|(i, uuid)| MigDeviceFact {
                    profile: "3g.40gb".into(),
                    gpu_instance_id: i as u32 + 1,
                    compute_instance_id: Some(0),
                    uuid: Some((*uuid).into()),
                })
                .collect(),
            vgpu_profile: None,
        }),
    });
    let mig = SharingMode::Mig { profile: MigProfile::new("3g.40gb").unwrap() };
    let extra: [(&str, SharingMode, u32, Vec<&str>); 3] = [
        ("mig-one", mig.clone(), 1, vec!["MIG-a"]),
        ("mig-two", mig, 1, vec!["MIG-b"]),
        ("replicas", SharingMode::TimeSlice { replicas: 4 }, 2, vec!["GPU-shared::1", "GPU-shared::0"]),
    ];
    for (pod, mode, units, devices) in extra {
        facts.extend(allocation(&Alloc {
            pod: pod.into(),
            ns: spaces[0],
            model: H100,
            mode,
            units,
            endpoint: None,
            from: start + Duration::hours(3),
            to: Some(start + Duration::days(2)),
            devices: Some(devices.into_iter().map(Into::into).collect()),
        }));
    }
    send(env, facts).await;
    period
}

async fn last_month(env: &Env) -> Period {
    let period = seed_last_month(env).await;
    let (s, v) = call(
        env,
        "POST",
        &format!("/api/v1/periods/{period}/close"),
        &env.admin,
        Some(json!({"acknowledge": "test data"})),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    period
}

/// The evidence answer as the endpoint computed it before the index: the bundle's records, filtered, stably sorted,
/// reversed for descending, paged (details aside).
fn from_bundle(
    records: &[AllocationRecord],
    visible: Option<&[Uuid]>,
    q: &[(&str, String)],
    page: usize,
    per_page: usize,
) -> (usize, Vec<Value>) {
    let get = |k: &str| q.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone());
    let tenant = get("tenant").map(|t| Uuid::parse_str(&t).unwrap());
    let (class, endpoint) = (get("gpu_class"), get("endpoint"));
    let sort = get("sort").unwrap_or_else(|| "start".into());
    let mut rows: Vec<&AllocationRecord> = records
        .iter()
        .filter(|a| visible.is_none_or(|v| a.tenant.is_some_and(|t| v.contains(&t.as_uuid()))))
        .filter(|a| tenant.is_none_or(|t| a.tenant.map(|x| x.as_uuid()) == Some(t)))
        .filter(|a| class.as_deref().is_none_or(|c| a.gpu_class.as_deref() == Some(c)))
        .filter(|a| endpoint.as_deref().is_none_or(|e| a.endpoint.as_deref() == Some(e)))
        .collect();
    let (descending, key) = match sort.strip_prefix('-') {
        Some(k) => (true, k),
        None => (false, sort.as_str()),
    };
    match key {
        "start" => rows.sort_by(|a, b| a.start.cmp(&b.start).then_with(|| a.id.cmp(&b.id))),
        "end" => rows.sort_by(|a, b| a.end.cmp(&b.end).then_with(|| a.id.cmp(&b.id))),
        "fraction" => rows.sort_by(|a, b| a.fraction.cmp(&b.fraction).then_with(|| a.id.cmp(&b.id))),
        "id" => rows.sort_by(|a, b| a.id.cmp(&b.id)),
        other => panic!("{other}"),
    }
    if descending {
        rows.reverse();
    }
    let rfc = gpuledger_core::time_fmt::rfc3339;
    let page = rows
        .iter()
        .skip((page - 1) * per_page)
        .take(per_page)
        .map(|a| {
            let mut v = json!({
                "id": a.id, "tenant": a.tenant.map(|t| t.to_string()), "gpu_class": a.gpu_class,
                "fraction": String::from(a.fraction), "start": rfc(a.start), "end": a.end.map(rfc),
                "confidence": a.confidence.as_str(), "devices": a.devices,
            });
            if let Some(e) = &a.endpoint {
                v["endpoint"] = json!(e);
            }
            v
        })
        .collect();
    (rows.len(), page)
}

/// Every sort, filter, scope and a few pages: the index's answer is the bundle's.
async fn compare_all(env: &Env, period: Period, records: &[AllocationRecord]) -> usize {
    let research_tenants = [NLP, VISION];
    let mut checked = 0;
    let filters: Vec<Vec<(&str, String)>> = vec![
        vec![],
        vec![("tenant", NLP.to_string())],
        vec![("tenant", INFRA.to_string())],
        vec![("gpu_class", "A100-80GB".into())],
        vec![("endpoint", "chat".into())],
        vec![("tenant", NLP.to_string()), ("gpu_class", "H100-80GB".into())],
        vec![("gpu_class", "none".into())],
    ];
    for sort in ["start", "-start", "end", "-end", "fraction", "-fraction", "id", "-id"] {
        for filter in &filters {
            for (token, visible) in [(&env.admin, None), (&env.research, Some(&research_tenants[..]))] {
                for (page, per_page) in [(1, 7), (2, 7), (5, 7), (1, 1000), (40, 3)] {
                    let mut q: Vec<(&str, String)> = filter.clone();
                    q.push(("sort", sort.into()));
                    let query: Vec<String> = q
                        .iter()
                        .map(|(k, v)| format!("{k}={v}"))
                        .chain([format!("page={page}"), format!("per_page={per_page}")])
                        .collect();
                    let uri = format!("/api/v1/periods/{period}/evidence?{}", query.join("&"));
                    let (s, got) = call(env, "GET", &uri, token, None).await;
                    assert_eq!(s, StatusCode::OK, "{uri}: {got}");
                    let (total, expected) = from_bundle(records, visible, &q, page, per_page);
                    assert_eq!(got["total"], json!(total), "{uri}");
                    assert_eq!((got["page"].clone(), got["per_page"].clone()), (json!(page), json!(per_page)));
                    assert_eq!(got["sort"], sort, "{uri}");
                    // Every record is resolved to its workload in the store (its ID names the cluster), parts
                    // under a later owner included.
                    for r in got["allocations"].as_array().unwrap() {
                        let id = r["id"].as_str().unwrap();
                        let d = &r["detail"];
                        assert!(d.is_object(), "{uri}: {id} has no detail: {r}");
                        assert!(id.starts_with(&format!("{}/", d["cluster"].as_str().unwrap())), "{id}: {d}");
                        assert!(!d["holder"].as_str().unwrap().is_empty(), "{id}: {d}");
                    }
                    let rows: Vec<Value> = got["allocations"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|r| {
                            let mut r = r.clone();
                            r.as_object_mut().unwrap().remove("detail");
                            r
                        })
                        .collect();
                    assert_eq!(rows, expected, "{uri}");
                    checked += 1;
                }
            }
        }
    }
    checked
}

async fn bundle_records(env: &Env, period: Period) -> Vec<AllocationRecord> {
    let (s, bundle) = call(env, "GET", &format!("/api/v1/periods/{period}/bundle"), &env.admin, None).await;
    assert_eq!(s, StatusCode::OK);
    serde_json::from_value(bundle["inputs"]["allocations"].clone()).unwrap()
}

#[tokio::test]
async fn closed_evidence_from_the_index_equals_the_bundle_for_every_sort_filter_and_scope() {
    // Closed in parts of one department each (unowned, Research, Platform): the ranks span the parts. The orders
    // other than `start` in chunks of 5 ranks, so that pages of 7 (and of 1,000, and deep ones) cross chunks.
    gpuledger_server::close::set_part_records(1);
    gpuledger_server::close::set_evidence_order_chunk(5);
    let env = env().await;
    let period = last_month(&env).await;
    let records = bundle_records(&env, period).await;
    assert!(records.len() >= 60, "{} records", records.len());
    assert!(records.iter().any(|a| a.id.contains('#')), "a record split at the owner change");
    assert!(records.iter().any(|a| a.tenant.is_none()) && records.iter().any(|a| a.end.is_none()));
    // Devices resolved as the bundle resolves them: MIG slices to their GPU, replicas `UUID::N` to one GPU.
    let devices = |pod: &str| records.iter().find(|a| a.id.contains(pod)).map(|a| a.devices.clone());
    assert_eq!(devices("/mig-one/"), Some(vec!["GPU-mig-parent".to_string()]));
    assert_eq!(devices("/mig-two/"), Some(vec!["GPU-mig-parent".to_string()]));
    assert_eq!(devices("/replicas/"), Some(vec!["GPU-shared".to_string()]));
    let su = common::admin_pool(&env.test_db).await;
    let (n, source): (i32, String) =
        sqlx::query_as("SELECT allocations, source FROM evidence_months WHERE org_id = $1 AND period = $2")
            .bind(env.org.as_uuid())
            .bind(period.first_day())
            .fetch_one(&su)
            .await
            .unwrap();
    assert_eq!((n as usize, source.as_str()), (records.len(), "close"), "written by the close");
    let closes_before = gpuledger_server::close::COMPUTATIONS.load(std::sync::atomic::Ordering::Relaxed);
    let checked = compare_all(&env, period, &records).await;
    assert_eq!(checked, 8 * 7 * 2 * 5);
    assert_eq!(
        gpuledger_server::close::COMPUTATIONS.load(std::sync::atomic::Ordering::Relaxed),
        closes_before,
        "no ledger computed"
    );
    // A closed month's answer is kept: the same page again is not rendered again. An open month's (live facts)
    // is rendered every time.
    let renders = || env.pages.renders.load(std::sync::atomic::Ordering::Relaxed);
    let uri = format!("/api/v1/periods/{period}/evidence?page=2&per_page=5");
    let (s, first) = call(&env, "GET", &uri, &env.admin, None).await;
    let before = renders();
    let (s2, again) = call(&env, "GET", &uri, &env.admin, None).await;
    assert_eq!((s, s2, renders()), (StatusCode::OK, StatusCode::OK, before), "kept");
    assert_eq!(again, first);
    let open = period.next().unwrap();
    let uri = format!("/api/v1/periods/{open}/evidence?per_page=5");
    for i in 1..=2 {
        let (s, v) = call(&env, "GET", &uri, &env.admin, None).await;
        assert_eq!((s, renders()), (StatusCode::OK, before + i), "{v}");
    }
    // Bad input is refused as before.
    let (s, v) = call(&env, "GET", &format!("/api/v1/periods/{period}/evidence?sort=size"), &env.admin, None).await;
    assert_eq!((s, v["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("sort")), "{v}");
    let (s, v) = call(&env, "GET", &format!("/api/v1/periods/{period}/evidence?tenant=x"), &env.admin, None).await;
    assert_eq!((s, v["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("tenant")), "{v}");

    // A month closed before the index existed: built from its bundle by the first read, then the same answers.
    for table in ["evidence_orders", "evidence_months"] {
        sqlx::query(&format!("DELETE FROM {table} WHERE org_id = $1 AND period = $2"))
            .bind(env.org.as_uuid())
            .bind(period.first_day())
            .execute(&su)
            .await
            .unwrap();
    }
    let uri = format!("/api/v1/periods/{period}/evidence?sort=-end");
    let first = call(&env, "GET", &uri, &env.research, None);
    let second = call(&env, "GET", &uri, &env.research, None);
    let ((s1, a1), (s2, a2)) = tokio::join!(first, second);
    assert_eq!((s1, s2), (StatusCode::OK, StatusCode::OK));
    assert_eq!(a1, a2, "concurrent first readers: one build, one answer");
    let (rows, source): (i64, String) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM evidence_allocations a WHERE a.org_id = m.org_id AND a.period = m.period),
                m.source FROM evidence_months m WHERE m.org_id = $1 AND m.period = $2",
    )
    .bind(env.org.as_uuid())
    .bind(period.first_day())
    .fetch_one(&su)
    .await
    .unwrap();
    assert_eq!((rows as usize, source.as_str()), (records.len(), "bundle"));
    assert_eq!(compare_all(&env, period, &records).await, 8 * 7 * 2 * 5);
}

/// The close writes its evidence index on its second connection, beside it (the test above); with no connection
/// to spare it writes the index in its own transaction instead — the same index either way.
#[tokio::test]
async fn without_a_spare_connection_the_close_writes_its_evidence_index_itself() {
    gpuledger_server::close::set_part_records(1);
    let env = env().await;
    let period = seed_last_month(&env).await;
    // Every connection of the pool but one taken: the close gets that one, and no second within its 2 s.
    let mut held = Vec::new();
    while let Ok(Ok(tx)) = tokio::time::timeout(std::time::Duration::from_millis(500), env.db.begin_org(env.org)).await
    {
        held.push(tx);
    }
    let spare = held.pop().unwrap();
    drop(spare);
    let (s, v) = call(
        &env,
        "POST",
        &format!("/api/v1/periods/{period}/close"),
        &env.admin,
        Some(json!({"acknowledge": "test data"})),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    drop(held);
    let records = bundle_records(&env, period).await;
    let su = common::admin_pool(&env.test_db).await;
    let (n, source): (i32, String) =
        sqlx::query_as("SELECT allocations, source FROM evidence_months WHERE org_id = $1 AND period = $2")
            .bind(env.org.as_uuid())
            .bind(period.first_day())
            .fetch_one(&su)
            .await
            .unwrap();
    assert_eq!((n as usize, source.as_str()), (records.len(), "close"), "written by the close");
    assert_eq!(compare_all(&env, period, &records).await, 8 * 7 * 2 * 5);
}

#[tokio::test]
async fn a_month_closed_in_parts_has_the_lines_and_records_of_the_whole_month() {
    gpuledger_server::close::set_part_records(1);
    let env = env().await;
    let period = seed_last_month(&env).await;
    // The month computed whole, as the open month's preview computes it.
    let mut tx = env.db.begin_org(env.org).await.unwrap();
    let whole = gpuledger_server::close::preview(&mut tx, period).await.unwrap();
    tx.rollback().await.unwrap();
    let (s, v) = call(
        &env,
        "POST",
        &format!("/api/v1/periods/{period}/close"),
        &env.admin,
        Some(json!({"acknowledge": "test data"})),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (s, bundle) = call(&env, "GET", &format!("/api/v1/periods/{period}/bundle"), &env.admin, None).await;
    assert_eq!(s, StatusCode::OK);
    let bundle: gpuledger_core::bundle::Bundle = serde_json::from_value(bundle).unwrap();
    assert_eq!(bundle.lines, whole.ledger.lines, "the lines of the whole month");
    assert!(bundle.lines.len() >= 5, "{} lines", bundle.lines.len());
    // The same records, in the parts' order — start order, which the sweep of a quota pool across parts needs (a
    // part of one record here; within a larger part the bundle has them by ID) — with `#1` numbered as the whole
    // month numbers it.
    assert!(bundle.inputs.allocations.windows(2).all(|w| w[0].start <= w[1].start), "the parts came in start order");
    let ids = |records: &[AllocationRecord]| {
        let mut ids: Vec<String> = records.iter().map(|a| serde_json::to_string(a).unwrap()).collect();
        ids.sort();
        ids
    };
    assert_eq!(ids(&bundle.inputs.allocations), ids(&whole.input.allocations));
    assert!(bundle.inputs.allocations.iter().any(|a| a.id.ends_with("#1")));
    let mut header = whole.input.clone();
    header.allocations = bundle.inputs.allocations.clone();
    assert_eq!(bundle.inputs, header, "everything else as the whole month's input");
    let verified = gpuledger_core::bundle::verify(&bundle).unwrap();
    assert!(verified.ok(), "{verified:?}");
}

/// The open month's snapshot is computed a part at a time (issue 31; part size 1 here): its
/// lines are the whole month's preview and its "to date" sums are the whole month cut at the snapshot's time — with
/// energy priced, on devices that departments share, and allocations still running.
#[tokio::test]
async fn the_open_months_snapshot_computed_in_parts_equals_the_whole_month() {
    gpuledger_server::close::set_part_records(1);
    let env = env().await;
    let now = OffsetDateTime::now_utc();
    let period = Period::containing(now);
    let (s, v) = call(
        &env,
        "POST",
        "/api/v1/policies",
        &env.admin,
        Some(json!({
            "effective_from": period.to_string(), "note": "energy priced",
            "policy": {"currency": "USD", "energy": {"per_kwh": "0.12", "pue": "1.3"}, "classes": [
                {"gpu_class": "H100-80GB", "guaranteed": "3.00", "borrowed": "2.00"},
                {"gpu_class": "A100-80GB", "guaranteed": "1.50", "borrowed": "1.25"}]}
        })),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let (s, v) = call(&env, "POST", "/api/v1/policies/2/approve", &env.admin, Some(json!({"reason": "ok"}))).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let long_ago = now - Duration::days(60);
    let spaces =
        [(Uuid::new_v4(), "nlp"), (Uuid::new_v4(), "vision"), (Uuid::new_v4(), "infra"), (Uuid::new_v4(), "free")];
    let mut facts: Vec<Fact> =
        spaces.iter().map(|(uid, name)| namespace(*uid, name, (*name != "free").then_some(*name), long_ago)).collect();
    for i in 0..24i64 {
        let from = now - Duration::minutes(30 + 17 * i);
        let mut started = allocation(&Alloc {
            pod: format!("part-{i:02}"),
            ns: spaces[(i % 4) as usize],
            model: if i % 3 == 0 { A100 } else { H100 },
            mode: SharingMode::TimeSlice { replicas: 8 },
            units: 1,
            endpoint: None,
            from,
            // Every fourth is still running.
            to: (i % 4 != 1).then(|| now - Duration::minutes(5 * i)),
            devices: None,
        });
        // Three devices, each shared by every department's workloads.
        if let FactBody::AllocationStarted(a) = &mut started[0].body {
            a.device_ids = vec![format!("GPU-shared-{}", i % 3)];
        }
        facts.extend(started);
    }
    for d in 0..3 {
        let mut windows = telemetry(&format!("GPU-shared-{d}"), now - Duration::hours(10), now, 50.0);
        for w in &mut windows {
            if let FactBody::Telemetry(t) = &mut w.body {
                let secs = (t.window_end - t.window_start).as_seconds_f64();
                t.power_w = Some(Stat { min: 250.0, avg: 300.0 + f64::from(d) * 10.0, max: 350.0 });
                t.energy_j = Some((300.0 + f64::from(d) * 10.0) * secs);
            }
        }
        facts.extend(windows);
    }
    send(&env, facts).await;
    worker::refresh(&env.db, env.org, Wait::Block).await.unwrap();
    let mut tx = env.db.begin_org(env.org).await.unwrap();
    let whole = gpuledger_server::close::preview(&mut tx, period).await.unwrap();
    tx.rollback().await.unwrap();
    assert!(whole.input.allocations.len() >= 24, "{}", whole.input.allocations.len());
    assert!(!whole.input.energy.is_empty());
    let (s, ledger) =
        call(&env, "GET", &format!("/api/v1/ledger?period={period}&per_page=10000"), &env.admin, None).await;
    assert_eq!(s, StatusCode::OK, "{ledger}");
    let mut stored: Vec<(String, String)> = ledger["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["line_id"].as_str().unwrap().to_string(), l["amount"].as_str().unwrap().to_string()))
        .collect();
    let mut expected: Vec<(String, String)> =
        whole.ledger.lines.iter().map(|l| (l.line_id.clone(), l.amount.with_scale(2).unwrap().to_string())).collect();
    stored.sort();
    expected.sort();
    assert_eq!(stored, expected, "the snapshot's lines are the whole month's");
    assert!(ledger["lines"].as_array().unwrap().iter().any(|l| l["term"] == "energy"), "{ledger}");
    let departments: std::collections::BTreeSet<&str> =
        ledger["lines"].as_array().unwrap().iter().filter_map(|l| l["department"].as_str()).collect();
    assert!(departments.len() >= 2, "several parts: {departments:?}");
    // "To date": the whole month cut at the snapshot's time.
    let su = common::admin_pool(&env.test_db).await;
    let (as_of, to_date): (OffsetDateTime, Value) =
        sqlx::query_as("SELECT as_of, to_date FROM read_months WHERE org_id = $1 AND period = $2")
            .bind(env.org.as_uuid())
            .bind(period.first_day())
            .fetch_one(&su)
            .await
            .unwrap();
    let cut = gpuledger_server::figures::cut_at(whole.input, as_of);
    let so_far = gpuledger_core::ledger::compute(&cut).unwrap();
    assert_eq!(to_date, gpuledger_server::figures::sums_json(&so_far).unwrap());
    assert_ne!(to_date, gpuledger_server::figures::sums_json(&whole.ledger).unwrap(), "running allocations cut");
}

#[tokio::test]
async fn a_closed_months_forecast_is_its_stored_figures() {
    let env = env().await;
    let period = last_month(&env).await;
    // A late fact for the closed month: today's computation would differ; the closed figure does not.
    let ns = Uuid::new_v4();
    let mut late = vec![namespace(ns, "late", Some("nlp"), period.start() - Duration::days(5))];
    late.extend(allocation(&Alloc {
        pod: "late".into(),
        ns: (ns, "late"),
        model: H100,
        mode: SharingMode::Exclusive,
        units: 4,
        endpoint: None,
        from: period.start() + Duration::days(2),
        to: Some(period.start() + Duration::days(9)),
        devices: None,
    }));
    send(&env, late).await;
    let (s, ledger) = call(&env, "GET", &format!("/api/v1/ledger?period={period}"), &env.admin, None).await;
    assert_eq!(s, StatusCode::OK, "{ledger}");
    let before = gpuledger_server::close::COMPUTATIONS.load(std::sync::atomic::Ordering::Relaxed);
    let (s, f) = call(&env, "GET", &format!("/api/v1/forecast?period={period}"), &env.admin, None).await;
    assert_eq!(s, StatusCode::OK, "{f}");
    assert_eq!(
        gpuledger_server::close::COMPUTATIONS.load(std::sync::atomic::Ordering::Relaxed),
        before,
        "read, not computed"
    );
    assert_eq!(f["currency"], "USD");
    assert_eq!(f["total"]["forecast"], ledger["total"], "{f}");
    assert_eq!(f["total"]["to_date"], ledger["total"]);
    // Per department and tenant: the sums of the closed lines, final.
    let lines = ledger["lines"].as_array().unwrap();
    let sum = |pick: &dyn Fn(&Value) -> bool| {
        lines.iter().filter(|l| pick(l)).fold(gpuledger_core::decimal::Decimal::ZERO, |acc, l| {
            acc.checked_add(&gpuledger_core::decimal::Decimal::parse(l["amount"].as_str().unwrap()).unwrap()).unwrap()
        })
    };
    let departments = f["departments"].as_array().unwrap();
    assert_eq!(departments.len(), 2, "{f}");
    for d in departments {
        let id = d["department_id"].as_str().unwrap();
        let expected = sum(&|l: &Value| l["department_id"] == id);
        assert_eq!(d["forecast"].as_str().unwrap(), expected.with_scale(2).unwrap().to_string(), "{d}");
        assert_eq!(d["to_date"], d["forecast"]);
        assert_eq!((d["method"].as_str(), d["confidence"].as_str()), (Some("final"), Some("high")));
    }
    for t in f["tenants"].as_array().unwrap() {
        let id = t["tenant_id"].as_str().unwrap();
        let expected = sum(&|l: &Value| l["tenant_id"] == id);
        assert_eq!(t["forecast"].as_str().unwrap(), expected.with_scale(2).unwrap().to_string(), "{t}");
        assert_eq!(t["method"], "final");
    }
    // A caller limited to Research sees Research only.
    let (s, r) = call(&env, "GET", &format!("/api/v1/forecast?period={period}"), &env.research, None).await;
    assert_eq!(s, StatusCode::OK, "{r}");
    let names: Vec<&str> =
        r["departments"].as_array().unwrap().iter().map(|d| d["department"].as_str().unwrap()).collect();
    assert_eq!(names, ["Research"]);

    // Kept per scope: the same reader again is answered without a render, the same answer.
    let renders = || env.pages.renders.load(std::sync::atomic::Ordering::Relaxed);
    let uri = format!("/api/v1/forecast?period={period}");
    let before = renders();
    let (s, again) = call(&env, "GET", &uri, &env.admin, None).await;
    assert_eq!((s, renders()), (StatusCode::OK, before), "kept");
    assert_eq!(again, f);
    // A budget is a new generation: the next answer is rendered again and shows it.
    let (s, v) = call(
        &env,
        "POST",
        "/api/v1/budgets",
        &env.admin,
        Some(json!({"period": period.to_string(), "department": "Research", "amount": "12345.00"})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let (s, with_budget) = call(&env, "GET", &uri, &env.admin, None).await;
    assert_eq!((s, renders()), (StatusCode::OK, before + 1), "rendered again after the budget");
    assert!(with_budget.to_string().contains("12345.00"), "{with_budget}");
}

/// Hourly rollups of `gpu` at `pct` over `[from, to)`.
fn telemetry(gpu: &str, from: OffsetDateTime, to: OffsetDateTime, pct: f64) -> Vec<Fact> {
    let mut out = Vec::new();
    let mut t = from;
    while t < to {
        let end = (t + Duration::hours(1)).min(to);
        out.push(Fact {
            event_id: event_id("telemetry", &[gpu, &t.unix_timestamp().to_string(), &pct.to_string()]),
            observed_at: end,
            body: FactBody::Telemetry(TelemetryRollup {
                node: "node-1".into(),
                gpu_uuid: gpu.into(),
                gpu_instance_id: None,
                mig_profile: None,
                window_start: t,
                window_end: end,
                samples: 360,
                utilization_pct: Some(Stat { min: pct, avg: pct, max: pct }),
                memory_used_mib: None,
                power_w: None,
                energy_j: None,
                pod: None,
            }),
        });
        t = end;
    }
    out
}

#[tokio::test]
async fn idle_is_read_from_the_snapshot_and_equals_the_computed_answer() {
    let env = env().await;
    let now = OffsetDateTime::now_utc();
    let now_min = now - Duration::seconds(i64::from(now.second())) - Duration::nanoseconds(i64::from(now.nanosecond()));
    let since = now_min - Duration::hours(5);
    let (ns_r, ns_p) = (Uuid::new_v4(), Uuid::new_v4());
    let mut facts = vec![
        namespace(ns_r, "research", Some("nlp"), now - Duration::days(60)),
        namespace(ns_p, "platform", Some("infra"), now - Duration::days(60)),
    ];
    for (pod, ns) in [("notebook", (ns_r, "research")), ("idler", (ns_p, "platform")), ("dark", (ns_r, "research"))] {
        facts.extend(allocation(&Alloc {
            pod: pod.into(),
            ns,
            model: H100,
            mode: SharingMode::Exclusive,
            units: 1,
            endpoint: None,
            from: since,
            to: None,
            devices: None,
        }));
    }
    facts.extend(telemetry("GPU-notebook-0", since, now_min - Duration::hours(3), 60.0));
    facts.extend(telemetry("GPU-notebook-0", now_min - Duration::hours(3), now_min, 1.0));
    facts.extend(telemetry("GPU-idler-0", since, now_min, 0.0));
    send(&env, facts).await;
    // Before the month's first snapshot: computed.
    let (s, computed) = call(&env, "GET", "/api/v1/idle", &env.admin, None).await;
    assert_eq!(s, StatusCode::OK, "{computed}");
    assert_eq!(computed["items"].as_array().unwrap().len(), 2, "{computed}");
    assert_eq!(computed["not_measured"], 1);
    worker::refresh(&env.db, env.org, Wait::Block).await.unwrap();
    let su = common::admin_pool(&env.test_db).await;
    let as_of: OffsetDateTime =
        sqlx::query_scalar("SELECT as_of FROM read_months WHERE org_id = $1 AND period = $2 AND idle IS NOT NULL")
            .bind(env.org.as_uuid())
            .bind(Period::containing(now).first_day())
            .fetch_one(&su)
            .await
            .unwrap();
    // The idle platform pod ends after the snapshot: the answer stays the snapshot's until the next one.
    send(
        &env,
        vec![Fact {
            event_id: event_id("alloc-end", &["idler/main/nvidia.com/gpu"]),
            observed_at: now_min,
            body: FactBody::AllocationEnded(AllocationEnd {
                allocation_id: "idler/main/nvidia.com/gpu".into(),
                ended_at: now_min,
                reason: EndReason::Deleted,
            }),
        }],
    )
    .await;
    let (s, stored) = call(&env, "GET", "/api/v1/idle", &env.admin, None).await;
    assert_eq!(s, StatusCode::OK, "{stored}");
    assert_eq!(stored["as_of"], gpuledger_core::time_fmt::rfc3339(as_of), "as of the snapshot");
    let strip = |mut v: Value| {
        v.as_object_mut().unwrap().remove("as_of");
        v
    };
    assert_eq!(strip(stored.clone()), strip(computed.clone()), "the stored analysis is the computed one");
    // Department scope still applies per caller.
    let (s, scoped) = call(&env, "GET", "/api/v1/idle", &env.research, None).await;
    assert_eq!(s, StatusCode::OK, "{scoped}");
    let holders: Vec<&str> =
        scoped["items"].as_array().unwrap().iter().map(|i| i["holder"].as_str().unwrap()).collect();
    assert_eq!(holders, ["research/notebook"], "{scoped}");
    assert_eq!(scoped["as_of"], stored["as_of"]);
    // The next snapshot computes it again: the ended pod is no longer listed.
    worker::refresh(&env.db, env.org, Wait::Block).await.unwrap();
    let (_, next) = call(&env, "GET", "/api/v1/idle", &env.admin, None).await;
    assert_ne!(next["as_of"], stored["as_of"]);
    let holders: Vec<&str> = next["items"].as_array().unwrap().iter().map(|i| i["holder"].as_str().unwrap()).collect();
    assert_eq!(holders, ["research/notebook"], "{next}");
}

/// Month-sized work takes turns in a process (`limits::month_work`): the open month's refresh waits while a close
/// (here: the test holding the turn) runs, and goes on as soon as the turn is free.
#[tokio::test]
async fn month_sized_work_takes_turns() {
    let env = env().await;
    let turn = gpuledger_server::limits::month_work().await.unwrap();
    let (db, org) = (env.db.clone(), env.org);
    let refresh = tokio::spawn(async move {
        gpuledger_server::readmodel::worker::refresh(&db, org, gpuledger_server::readmodel::worker::Wait::Block).await
    });
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(!refresh.is_finished(), "the refresh waits for the turn");
    drop(turn);
    let done = tokio::time::timeout(std::time::Duration::from_secs(60), refresh).await.unwrap().unwrap();
    assert!(done.unwrap(), "then refreshes");
    // And the turn is free again.
    let again = tokio::time::timeout(std::time::Duration::from_secs(5), gpuledger_server::limits::month_work()).await;
    assert!(again.is_ok());
}

/// Each order of a month's evidence as the sequence of start ranks its chunks hold, read as the superuser.
async fn orders_of(su: &sqlx::PgPool, env: &Env, period: Period) -> Vec<(i16, Vec<i32>)> {
    let rows: Vec<(i16, i32, Vec<i32>)> = sqlx::query_as(
        "SELECT sort, chunk, start_ranks FROM evidence_orders WHERE org_id = $1 AND period = $2 ORDER BY 1, 2",
    )
    .bind(env.org.as_uuid())
    .bind(period.first_day())
    .fetch_all(su)
    .await
    .unwrap();
    let mut out: Vec<(i16, Vec<i32>)> = Vec::new();
    for (sort, _, ranks) in rows {
        match out.last_mut() {
            Some((s, all)) if *s == sort => all.extend(ranks),
            _ => out.push((sort, ranks)),
        }
    }
    out
}

/// Migration 40's backfill (the orders of the months indexed before it, from their rank columns) gives the orders
/// the close writes: the same permutation of start ranks in each order, whatever the chunk size.
#[tokio::test]
async fn the_migrations_orders_backfill_gives_the_orders_the_close_writes() {
    gpuledger_server::close::set_part_records(1);
    gpuledger_server::close::set_evidence_order_chunk(3);
    let env = env().await;
    let period = last_month(&env).await;
    let su = common::admin_pool(&env.test_db).await;
    let written = orders_of(&su, &env, period).await;
    let n = bundle_records(&env, period).await.len();
    assert_eq!(written.iter().map(|(s, r)| (*s, r.len())).collect::<Vec<_>>(), [(1, n), (2, n), (3, n)]);
    for (_, ranks) in &written {
        let mut sorted = ranks.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (1..=n as i32).collect::<Vec<_>>(), "a permutation of the start ranks");
    }
    sqlx::query("DELETE FROM evidence_orders").execute(&su).await.unwrap();
    // The migration's statements, from its file, as the migration runs them (as the owner, policies and all).
    let migration = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations/20261207000040_evidence_orders.sql"),
    )
    .unwrap();
    let from = migration.find("CREATE POLICY orders_backfill_read").unwrap();
    let to = migration.find("DROP INDEX").unwrap();
    let mut tx = su.begin().await.unwrap();
    sqlx::query("SET LOCAL ROLE gpuledger_owner").execute(&mut *tx).await.unwrap();
    sqlx::raw_sql(&migration[from..to]).execute(&mut *tx).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(orders_of(&su, &env, period).await, written);
}
