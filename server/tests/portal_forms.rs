//! The admin portal's editing forms through the router, as a signed-in browser (no JavaScript): cost-policy drafts
//! written, corrected and approved, quotas added — each through the REST API's own validation, with refusals that
//! name the field and change nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use axum::http::{StatusCode, header};
use gpuledger_server::{
    app::{self, AppState, HttpOptions},
    demo,
};

use common::{csrf_of, demo_login, form, get, send};

fn enc(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

#[tokio::test]
async fn policy_drafts_and_quotas_are_written_in_the_portal() {
    let (test_db, db) = common::migrated().await;
    let org = demo::seed(&db).await.unwrap();
    let app = app::router(AppState::demo(db, org), &HttpOptions::default());
    let su = common::admin_pool(&test_db).await;
    let (admin, _) = demo_login(&app, "admin").await;

    let page = send(&app, get("/admin/policies", Some(&admin))).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("No cost policy yet"), "{}", page.body);
    assert!(page.body.contains(r#"action="/ui/policies""#), "a new-draft form: {}", page.body);
    let csrf = csrf_of(&page.body);
    let draft = |document: &str, from: &str| {
        format!("csrf={csrf}&effective_from={from}&note={}&document={}", enc("first rates"), enc(document))
    };
    let versions = async || -> Vec<(i32, String, serde_json::Value)> {
        sqlx::query_as("SELECT version, state, document FROM cost_policies WHERE org_id = $1 ORDER BY version")
            .bind(org.as_uuid())
            .fetch_all(&su)
            .await
            .unwrap()
    };

    // Refusals: not JSON, a rate that is not a decimal, a month that is not one. Nothing is stored.
    let not_json = send(&app, form("/ui/policies", Some(&admin), &draft("{currency: USD", "2026-12"), None)).await;
    assert_eq!(not_json.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(not_json.body.contains("document: not valid JSON"), "{}", not_json.body);
    let bad_rate =
        r#"{"currency": "USD", "classes": [{"gpu_class": "H100-80GB", "guaranteed": "cheap", "borrowed": "3"}]}"#;
    let refused = send(&app, form("/ui/policies", Some(&admin), &draft(bad_rate, "2026-12"), None)).await;
    assert_eq!(refused.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", refused.body);
    assert!(refused.body.contains("policy.classes"), "the field is named: {}", refused.body);
    assert!(refused.body.contains(r#"href="/admin/policies""#), "a way back: {}", refused.body);
    let good =
        r#"{"currency": "USD", "classes": [{"gpu_class": "H100-80GB", "guaranteed": "2.50", "borrowed": "3.50"}]}"#;
    let bad_month = send(&app, form("/ui/policies", Some(&admin), &draft(good, "December"), None)).await;
    assert_eq!(bad_month.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(bad_month.body.contains("effective_from"), "{}", bad_month.body);
    assert!(versions().await.is_empty());
    // Without the form's CSRF field the write is refused before anything runs.
    let forged =
        send(&app, form("/ui/policies", Some(&admin), &draft(good, "2026-12").replacen(&csrf, "x", 1), None)).await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN);

    // A draft, then corrected, then approved — all from the page.
    let saved = send(&app, form("/ui/policies", Some(&admin), &draft(good, "2026-12"), None)).await;
    assert_eq!(saved.status, StatusCode::SEE_OTHER, "{}", saved.body);
    assert_eq!(saved.headers[header::LOCATION], "/admin/policies#draft-1");
    let page = send(&app, get("/admin/policies", Some(&admin))).await;
    assert!(page.body.contains(r#"id="draft-1""#) && page.body.contains(r#"action="/ui/policies/1""#), "{}", page.body);
    assert!(page.body.contains("2.50"), "the draft's document is in its edit box: {}", page.body);
    let corrected = good.replace("2.50", "2.75");
    let saved = send(&app, form("/ui/policies/1", Some(&admin), &draft(&corrected, "2026-12"), None)).await;
    assert_eq!(saved.status, StatusCode::SEE_OTHER, "{}", saved.body);
    let stored = versions().await;
    assert_eq!(stored.len(), 1, "saving a draft changes it, not a new version");
    assert_eq!(stored[0].2["classes"][0]["guaranteed"], "2.75", "{:?}", stored[0]);
    let approved = send(&app, form("/ui/policies/1/approve", Some(&admin), &format!("csrf={csrf}"), None)).await;
    assert_eq!(approved.status, StatusCode::SEE_OTHER, "{}", approved.body);
    assert_eq!(versions().await[0].1, "approved");
    // An approved version is not edited in place.
    let late = send(&app, form("/ui/policies/1", Some(&admin), &draft(good, "2026-12"), None)).await;
    assert!(late.status.is_client_error(), "{}", late.status);
    assert_eq!(versions().await[0].2["classes"][0]["guaranteed"], "2.75");
    // The next draft starts from the approved version, and the page shows its difference.
    let page = send(&app, get("/admin/policies", Some(&admin))).await;
    assert!(page.body.contains("2.75"), "{}", page.body);
    let next =
        send(&app, form("/ui/policies", Some(&admin), &draft(&corrected.replace("3.50", "4.00"), "2027-01"), None))
            .await;
    assert_eq!(next.status, StatusCode::SEE_OTHER, "{}", next.body);
    let page = send(&app, get("/admin/policies", Some(&admin))).await;
    assert!(page.body.contains(r#"<span class="add">"#) && page.body.contains("4.00"), "{}", page.body);

    // Quotas: a tenant's guaranteed GPUs from a date; bad input names the field.
    let tenant: String = sqlx::query_scalar("SELECT name FROM tenants WHERE org_id = $1 ORDER BY name LIMIT 1")
        .bind(org.as_uuid())
        .fetch_one(&su)
        .await
        .unwrap();
    let quota = |gpus: &str, holder: &str| {
        format!(
            "csrf={csrf}&holder_kind=tenant&holder={holder}&gpu_class=H100-80GB&gpus={gpus}&valid_from=2026-12-01&valid_to="
        )
    };
    let count = async || -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM quotas WHERE org_id = $1")
            .bind(org.as_uuid())
            .fetch_one(&su)
            .await
            .unwrap()
    };
    let before = count().await;
    let refused = send(&app, form("/ui/quotas", Some(&admin), &quota("-2", &tenant), None)).await;
    assert_eq!(refused.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", refused.body);
    assert!(refused.body.contains("gpus"), "{}", refused.body);
    let unknown = send(&app, form("/ui/quotas", Some(&admin), &quota("2", "no-such-tenant"), None)).await;
    assert!(unknown.status.is_client_error(), "{}", unknown.body);
    assert!(unknown.body.contains("no-such-tenant"), "{}", unknown.body);
    assert_eq!(count().await, before);
    let added = send(&app, form("/ui/quotas", Some(&admin), &quota("2", &tenant), None)).await;
    assert_eq!(added.status, StatusCode::SEE_OTHER, "{}", added.body);
    assert_eq!(added.headers[header::LOCATION], "/admin/policies#quotas");
    assert_eq!(count().await, before + 1);
    // The tenant's quota is seen under the tenant's department (the department scope reads that column).
    let scoped: bool = sqlx::query_scalar(
        "SELECT bool_and(q.scope_department_id = t.department_id)
           FROM quotas q JOIN tenants t USING (org_id, tenant_id) WHERE q.org_id = $1",
    )
    .bind(org.as_uuid())
    .fetch_one(&su)
    .await
    .unwrap();
    assert!(scoped);
    let page = send(&app, get("/admin/policies", Some(&admin))).await;
    assert!(page.body.contains(&format!("<td>{tenant}</td>")), "{}", page.body);

    // A viewer cannot write either.
    let (viewer, _) = demo_login(&app, "viewer").await;
    let viewer_page = send(&app, get("/", Some(&viewer))).await;
    let viewer_csrf = csrf_of(&viewer_page.body);
    let denied =
        send(&app, form("/ui/quotas", Some(&viewer), &quota("2", &tenant).replacen(&csrf, &viewer_csrf, 1), None))
            .await;
    assert_eq!(denied.status, StatusCode::FORBIDDEN, "{}", denied.body);
    assert_eq!(count().await, before + 1);
}

#[tokio::test]
async fn departments_tenants_and_inventory_are_added_in_the_portal() {
    let (test_db, db) = common::migrated().await;
    let org = demo::seed(&db).await.unwrap();
    let app = app::router(AppState::demo(db, org), &HttpOptions::default());
    let su = common::admin_pool(&test_db).await;
    let (admin, _) = demo_login(&app, "admin").await;
    let page = send(&app, get("/admin/inventory", Some(&admin))).await;
    assert_eq!(page.status, StatusCode::OK);
    for form_id in [
        "add-department",
        "add-tenant",
        "add-model",
        "add-profile",
        "add-timeslicing",
        "reassign",
        "add-rule",
        "rename-tenant",
    ] {
        assert!(page.body.contains(&format!(r#"id="{form_id}""#)), "{form_id}: {}", page.body);
    }
    let csrf = csrf_of(&page.body);
    let post = async |path: &str, fields: &str| {
        send(&app, form(path, Some(&admin), &format!("csrf={csrf}&{fields}"), None)).await
    };

    let added = post("/ui/departments", "name=Robotics").await;
    assert_eq!(added.status, StatusCode::SEE_OTHER, "{}", added.body);
    assert_eq!(added.headers[header::LOCATION], "/admin/inventory#tenancy");
    let again = post("/ui/departments", "name=Robotics").await;
    assert_eq!(again.status, StatusCode::CONFLICT, "{}", again.body);
    assert!(again.body.contains("Robotics"), "{}", again.body);
    let added = post("/ui/tenants", "name=arm-control&department=Robotics").await;
    assert_eq!(added.status, StatusCode::SEE_OTHER, "{}", added.body);
    let page = send(&app, get("/admin/inventory", Some(&admin))).await;
    assert!(page.body.contains("<td>Robotics</td><td>arm-control</td>"), "{}", page.body);
    assert!(page.body.contains(r#"<option value="Robotics">"#), "the new department is offered: {}", page.body);

    let added =
        post("/ui/inventory/models", &format!("model={}&gpu_class=B200&valid_from=2026-11-01", enc("NVIDIA B200")))
            .await;
    assert_eq!(added.status, StatusCode::SEE_OTHER, "{}", added.body);
    let refused = post(
        "/ui/inventory/profiles",
        "kind=mig&model=NVIDIA%20B200&profile=1g.23gb&fraction=9%2F7&valid_from=2026-11-01",
    )
    .await;
    // More than one GPU: the inventory's rule refuses it (409), naming the field.
    assert_eq!(refused.status, StatusCode::CONFLICT, "{}", refused.body);
    assert!(refused.body.contains("fraction"), "{}", refused.body);
    let added = post(
        "/ui/inventory/profiles",
        "kind=mig&model=NVIDIA%20B200&profile=1g.23gb&fraction=1%2F7&valid_from=2026-11-01",
    )
    .await;
    assert_eq!(added.status, StatusCode::SEE_OTHER, "{}", added.body);
    let refused =
        post("/ui/inventory/timeslicing", "cluster=nowhere&name=x4&replicas=four&valid_from=2026-11-01").await;
    assert_eq!(refused.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", refused.body);
    assert!(refused.body.contains("replicas"), "{}", refused.body);
    let stored: (String, i64, i64) = sqlx::query_as(
        "SELECT m.gpu_class, p.fraction_num, p.fraction_den FROM gpu_models m JOIN mig_profiles p USING (org_id, model)
          WHERE m.org_id = $1 AND m.model = 'NVIDIA B200'",
    )
    .bind(org.as_uuid())
    .fetch_one(&su)
    .await
    .unwrap();
    assert_eq!(stored, ("B200".to_string(), 1, 7));
    let page = send(&app, get("/admin/inventory", Some(&admin))).await;
    assert!(page.body.contains("NVIDIA B200 1g.23gb"), "{}", page.body);

    // "Reassign from…": a cluster no agent reported is refused (404), naming the field, with the way back.
    let refused = post(
        "/ui/tenancy/reassign",
        "cluster=nowhere&namespace=nlp&tenant=arm-control&valid_from=2026-11-16T06%3A00&reason=moved",
    )
    .await;
    assert_eq!(refused.status, StatusCode::NOT_FOUND, "{}", refused.body);
    assert!(refused.body.contains("cluster") && refused.body.contains("/admin/inventory"), "{}", refused.body);

    // A rule for namespaces without labels, and a rename, through their forms.
    let added = post(
        "/ui/tenancy/rules",
        "cluster=&match=prefix&pattern=arm-&tenant=arm-control&valid_from=2026-11-01&reason=naming%20convention",
    )
    .await;
    assert_eq!(added.status, StatusCode::SEE_OTHER, "{}", added.body);
    let refused =
        post("/ui/tenancy/rules", "match=prefix&pattern=ARM*&tenant=arm-control&valid_from=2026-11-01&reason=x").await;
    assert_eq!(refused.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", refused.body);
    assert!(refused.body.contains("pattern"), "{}", refused.body);
    let renamed =
        post("/ui/tenancy/tenant", "tenant=arm-control&name=arm-ctl&retired_from=&reason=team%20renamed").await;
    assert_eq!(renamed.status, StatusCode::SEE_OTHER, "{}", renamed.body);
    let page = send(&app, get("/admin/inventory", Some(&admin))).await;
    assert!(page.body.contains("starts with arm-"), "the rule is listed: {}", page.body);
    assert!(page.body.contains("<td>arm-ctl</td>") && page.body.contains("arm-control"), "{}", page.body);

    // A department's journal accounts (issue 35): set through its row's form, shown back; an empty field clears.
    let saved =
        post("/ui/tenancy/department", "department=Robotics&cost_center=CC-ROB&gl_account=6100-GPU&reason=coa").await;
    assert_eq!(saved.status, StatusCode::SEE_OTHER, "{}", saved.body);
    let page = send(&app, get("/admin/inventory", Some(&admin))).await;
    assert!(page.body.contains("value=\"CC-ROB\"") && page.body.contains("value=\"6100-GPU\""), "{}", page.body);
    let cleared =
        post("/ui/tenancy/department", "department=Robotics&cost_center=&gl_account=6100-GPU&reason=coa").await;
    assert_eq!(cleared.status, StatusCode::SEE_OTHER, "{}", cleared.body);
    let page = send(&app, get("/admin/inventory", Some(&admin))).await;
    assert!(!page.body.contains("CC-ROB") && page.body.contains("value=\"6100-GPU\""), "{}", page.body);
    let long = "x".repeat(65);
    let refused =
        post("/ui/tenancy/department", &format!("department=Robotics&cost_center={long}&gl_account=&reason=coa")).await;
    assert_eq!(refused.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", refused.body);
    assert!(refused.body.contains("cost_center"), "{}", refused.body);

    // Finance may edit the inventory (it prices), not the tenancy.
    let (finance, _) = demo_login(&app, "finance").await;
    let finance_page = send(&app, get("/finance", Some(&finance))).await;
    let fcsrf = csrf_of(&finance_page.body);
    let denied =
        send(&app, form("/ui/departments", Some(&finance), &format!("csrf={fcsrf}&name=Finance-made"), None)).await;
    assert_eq!(denied.status, StatusCode::FORBIDDEN, "{}", denied.body);
}

/// Issue 21: a draft's impact on a month is on the policies page above its approve button (by default the last
/// closed month, `?impact_period=` for another); an inventory form's "Preview impact" saves nothing and shows the
/// change's impact with a button that saves it.
#[tokio::test]
async fn a_drafts_impact_sits_above_its_approval_and_inventory_changes_preview_before_saving() {
    let (test_db, db) = common::migrated().await;
    let org = demo::seed(&db).await.unwrap();
    let now = time::OffsetDateTime::now_utc();
    let current = gpuledger_core::Period::containing(now);
    let last = current.prev().unwrap();
    demo::ledger::approve_and_close(&db, org, now, &[last], false).await.unwrap();
    let app = app::router(AppState::demo(db, org), &HttpOptions::default());
    let su = common::admin_pool(&test_db).await;
    let (admin, _) = demo_login(&app, "admin").await;

    // A draft doubling the platform team's fixed overhead (18,000.00 → 36,000.00).
    let mut document: serde_json::Value =
        sqlx::query_scalar("SELECT document FROM cost_policies WHERE org_id = $1 AND state = 'approved'")
            .bind(org.as_uuid())
            .fetch_one(&su)
            .await
            .unwrap();
    document["overhead"]["fixed"][0]["amount"] = "36000.00".into();
    let page = send(&app, get("/admin/policies", Some(&admin))).await;
    let csrf = csrf_of(&page.body);
    let body = format!("csrf={csrf}&effective_from={last}&note=more&document={}", enc(&document.to_string()));
    let saved = send(&app, form("/ui/policies", Some(&admin), &body, None)).await;
    assert_eq!(saved.status, StatusCode::SEE_OTHER, "{}", saved.body);

    let page = send(&app, get("/admin/policies", Some(&admin))).await;
    assert_eq!(page.status, StatusCode::OK);
    let b = &page.body;
    assert!(b.contains(&format!("Impact of draft v2 on {last}")), "the last closed month by default: {b}");
    let table = b.find(r#"<table class="impact""#).expect("an impact table");
    let approve = b.find(r#"action="/ui/policies/2/approve""#).expect("an approve form");
    assert!(table < approve, "the impact comes before the approve button");
    let total = &b[b[table..].find("<tfoot").unwrap() + table..];
    assert!(total[..total.find("</tfoot>").unwrap()].contains("18000.00"), "the total difference: {total}");
    assert!(b.contains("is closed"), "the note says the month is closed: {b}");
    // Another month on request; a month no approved policy covers says so instead of a table.
    let page = send(&app, get("/admin/policies?impact_period=2020-01", Some(&admin))).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("Impact of draft v2 on 2020-01"), "{}", page.body);
    assert!(
        page.body.contains("could not be computed") && page.body.contains("no approved cost policy"),
        "{}",
        page.body
    );
    assert_eq!(
        sqlx::query_scalar::<_, String>("SELECT state FROM cost_policies WHERE org_id = $1 AND version = 2")
            .bind(org.as_uuid())
            .fetch_one(&su)
            .await
            .unwrap(),
        "draft",
        "showing the impact approves nothing"
    );

    // Inventory: "Preview impact" on a MIG fraction saves nothing and shows the impact with a save button.
    let profiles = async || -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM mig_profiles WHERE org_id = $1")
            .bind(org.as_uuid())
            .fetch_one(&su)
            .await
            .unwrap()
    };
    let before = profiles().await;
    let page = send(&app, get("/admin/inventory", Some(&admin))).await;
    assert!(page.body.contains(r#"name="intent" value="preview""#), "a preview button: {}", page.body);
    let first_day = format!("{current}-01");
    let fields = format!(
        "kind=mig&model={}&profile=1g.10gb&fraction={}&valid_from={first_day}",
        enc("NVIDIA A100-SXM4-80GB"),
        enc("2/7")
    );
    let preview =
        send(&app, form("/ui/inventory/profiles", Some(&admin), &format!("csrf={csrf}&{fields}&intent=preview"), None))
            .await;
    assert_eq!(preview.status, StatusCode::SEE_OTHER, "{}", preview.body);
    let to = preview.headers[header::LOCATION].to_str().unwrap().to_string();
    assert!(to.starts_with("/admin/inventory?preview=profiles&") && to.ends_with("#preview"), "{to}");
    assert_eq!(profiles().await, before, "a preview saves nothing");
    let page = send(&app, get(to.trim_end_matches("#preview"), Some(&admin))).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains(&format!("Preview: impact on {current}")), "{}", page.body);
    assert!(page.body.contains(r#"<table class="impact""#) && page.body.contains("nothing saved"), "{}", page.body);
    assert!(page.body.contains(r#"id="save-previewed""#) && page.body.contains(r#"value="2/7""#), "{}", page.body);
    assert_eq!(profiles().await, before, "showing the preview saves nothing");
    // The save button posts the same fields, without the preview intent: now it is saved.
    let saved = send(&app, form("/ui/inventory/profiles", Some(&admin), &format!("csrf={csrf}&{fields}"), None)).await;
    assert_eq!(saved.status, StatusCode::SEE_OTHER, "{}", saved.body);
    assert_eq!(profiles().await, before + 1);
}

/// A form acts through its feature's service, which checks the caller's capability itself: a finance session may
/// add a GPU model but not a department (403, the role named, nothing written); without a session, sign in first.
#[tokio::test]
async fn a_forms_service_checks_who_is_asking() {
    let (test_db, db) = common::migrated().await;
    let org = demo::seed(&db).await.unwrap();
    let app = app::router(AppState::demo(db, org), &HttpOptions::default());
    let su = common::admin_pool(&test_db).await;
    let (finance, _) = demo_login(&app, "finance").await;
    let csrf = gpuledger_server::auth::session::csrf_for(&finance);
    let post = async |path: &str, fields: &str| {
        send(&app, form(path, Some(&finance), &format!("csrf={csrf}&{fields}"), None)).await
    };
    let departments = async || -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM departments WHERE name = 'Robotics'").fetch_one(&su).await.unwrap()
    };
    let refused = post("/ui/departments", "name=Robotics").await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.body);
    assert!(refused.body.contains("admin") && refused.body.contains(r#"href="/admin/inventory""#), "{}", refused.body);
    assert_eq!(departments().await, 0, "a refused form writes nothing");
    let added =
        post("/ui/inventory/models", &format!("model={}&gpu_class=h100&valid_from=2020-01-01", enc("Lab GPU X"))).await;
    assert_eq!(added.status, StatusCode::SEE_OTHER, "finance manages the inventory: {}", added.body);
    let anonymous = send(&app, form("/ui/departments", None, "name=Robotics", None)).await;
    assert_ne!(anonymous.status, StatusCode::OK, "{}", anonymous.body);
    assert_eq!(departments().await, 0);
}
