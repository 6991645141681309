//! The admin pages' forms for the organization, tenancy and inventory: each calls its feature's service as the
//! signed-in person ([`act`]), the function its REST operation calls.

use super::{
    act::{act, refused, refused_with},
    field, form_refused, pairs,
};
use crate::{
    error::AppError,
    http::{Administer, Caller, ManagePolicy},
    orgs::settings,
    policy,
    state::AppState,
    tenancy::service as tenancy,
};
use axum::{
    extract::{Path, State},
    http::StatusCode,
    response::{IntoResponse, Redirect, Response},
};

/// `/admin/organization`'s form: the settings through `PUT /api/v1/organization/settings` (its errors name the field).
pub(super) async fn settings_form(
    State(state): State<AppState>,
    caller: Result<Caller<Administer>, AppError>,
    body: axum::body::Bytes,
) -> Response {
    let f = pairs(&body);
    let back = "/admin/organization";
    let months = field(&f, "retention_months");
    let Ok(retention_months) = months.parse::<i32>() else {
        return form_refused(&format!("retention_months: a whole number of months, 12 to 120; got {months:?}"), back);
    };
    let mut request = serde_json::json!({
        "display_name": field(&f, "display_name"),
        "default_currency": field(&f, "default_currency"),
        "retention_months": retention_months,
        "platform_gl_account": clearable(&f, "platform_gl_account"),
        "platform_cost_center": clearable(&f, "platform_cost_center"),
    });
    let zone = field(&f, "time_zone");
    if !zone.is_empty() {
        request["time_zone"] = serde_json::Value::String(zone);
    }
    act(caller, back, request, |p, body| async move { settings::save(&state, &p, body).await }, |_| back.into()).await
}

pub(super) async fn department_form(
    State(state): State<AppState>,
    caller: Result<Caller<Administer>, AppError>,
    body: axum::body::Bytes,
) -> Response {
    let f = pairs(&body);
    let request = serde_json::json!({ "name": field(&f, "name") });
    act(
        caller,
        "/admin/inventory",
        request,
        |p, body| async move { tenancy::create_department(&state, &p, body).await },
        |_| "/admin/inventory#tenancy".into(),
    )
    .await
}

pub(super) async fn tenant_form(
    State(state): State<AppState>,
    caller: Result<Caller<Administer>, AppError>,
    body: axum::body::Bytes,
) -> Response {
    let f = pairs(&body);
    let request = serde_json::json!({ "name": field(&f, "name"), "department": field(&f, "department") });
    act(
        caller,
        "/admin/inventory",
        request,
        |p, body| async move { tenancy::create_tenant(&state, &p, body).await },
        |_| "/admin/inventory#tenancy".into(),
    )
    .await
}

/// "Reassign from…": a namespace to a tenant from a UTC instant, with the reason.
pub(super) async fn reassign_form(
    State(state): State<AppState>,
    caller: Result<Caller<Administer>, AppError>,
    body: axum::body::Bytes,
) -> Response {
    let f = pairs(&body);
    let request = serde_json::json!({
        "cluster": field(&f, "cluster"), "namespace": field(&f, "namespace"), "tenant": field(&f, "tenant"),
        "valid_from": instant(&field(&f, "valid_from")), "reason": field(&f, "reason"),
    });
    act(
        caller,
        "/admin/inventory",
        request,
        |p, body| async move { tenancy::reassign(&state, &p, body).await },
        |_| "/admin/inventory#ownership".into(),
    )
    .await
}

/// "Add rule": namespaces without labels whose name is or starts with a pattern → a tenant, from a date.
pub(super) async fn rule_form(
    State(state): State<AppState>,
    caller: Result<Caller<Administer>, AppError>,
    body: axum::body::Bytes,
) -> Response {
    let f = pairs(&body);
    let cluster = field(&f, "cluster");
    let request = serde_json::json!({
        "cluster": (!cluster.trim().is_empty()).then_some(cluster), "match": field(&f, "match"),
        "pattern": field(&f, "pattern"), "tenant": field(&f, "tenant"),
        "valid_from": instant(&field(&f, "valid_from")), "reason": field(&f, "reason"),
    });
    act(
        caller,
        "/admin/inventory",
        request,
        |p, body| async move { tenancy::add_rule(&state, &p, body).await },
        |_| "/admin/inventory#ownership".into(),
    )
    .await
}

/// "Rename / retire" a tenant: either or both.
pub(super) async fn tenant_update_form(
    State(state): State<AppState>,
    caller: Result<Caller<Administer>, AppError>,
    body: axum::body::Bytes,
) -> Response {
    let f = pairs(&body);
    let (name, retired) = (field(&f, "name"), field(&f, "retired_from"));
    let request = serde_json::json!({
        "name": (!name.trim().is_empty()).then_some(name),
        "retired_from": (!retired.trim().is_empty()).then(|| instant(&retired)),
        "reason": field(&f, "reason"),
    });
    let Some(tenant) = segment(&f, "tenant") else { return form_refused("tenant: choose one", "/admin/inventory") };
    act(
        caller,
        "/admin/inventory",
        request,
        |p, body| async move { tenancy::update_tenant(&state, &p, &tenant, body).await },
        |_| "/admin/inventory#tenancy".into(),
    )
    .await
}

/// A department's journal accounts (one form per row of the departments table): both fields, an empty one cleared.
pub(super) async fn department_update_form(
    State(state): State<AppState>,
    caller: Result<Caller<Administer>, AppError>,
    body: axum::body::Bytes,
) -> Response {
    let f = pairs(&body);
    let request = serde_json::json!({
        "cost_center": clearable(&f, "cost_center"),
        "gl_account": clearable(&f, "gl_account"),
        "reason": field(&f, "reason"),
    });
    let Some(department) = segment(&f, "department") else {
        return form_refused("department: choose one", "/admin/inventory");
    };
    act(
        caller,
        "/admin/inventory",
        request,
        |p, body| async move { tenancy::update_department(&state, &p, &department, body).await },
        |_| "/admin/inventory#tenancy".into(),
    )
    .await
}

/// A form field the API takes as "clear when `null`": an empty (or blank) field is `null`, anything else as typed.
fn clearable(f: &[(String, String)], name: &str) -> serde_json::Value {
    let v = field(f, name);
    if v.trim().is_empty() { serde_json::Value::Null } else { serde_json::Value::String(v) }
}

/// A form's choice of the object a change is about (a department's or tenant's name or ID), read as the REST
/// path's segment is; `None` when empty.
fn segment(f: &[(String, String)], name: &str) -> Option<String> {
    Some(field(f, name)).filter(|v| !v.is_empty())
}

/// The fields of each inventory form, as the page's preview reads them back from its query string.
const INVENTORY_FIELDS: [(&str, &[&str]); 3] = [
    ("models", &["model", "gpu_class", "valid_from"]),
    ("profiles", &["kind", "model", "profile", "fraction", "valid_from"]),
    ("timeslicing", &["cluster", "name", "replicas", "valid_from"]),
];

/// The inventory forms: a GPU model's class, a MIG or vGPU profile's fraction, a time-slicing declaration. The
/// "Preview impact" button (`intent=preview`) saves nothing: it goes back to the inventory page with the fields
/// in its query string, and the page shows the change's impact (`POST /api/v1/inventory/impact`) with a button
/// that saves it.
pub(super) async fn inventory_form(
    State(state): State<AppState>,
    caller: Result<Caller<ManagePolicy>, AppError>,
    Path(what): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    let f = pairs(&body);
    if field(&f, "intent") == "preview" {
        let Some((_, names)) = INVENTORY_FIELDS.iter().find(|(w, _)| *w == what) else {
            return (StatusCode::NOT_FOUND, "no such form").into_response();
        };
        let mut query = form_urlencoded::Serializer::new(String::new());
        query.append_pair("preview", &what);
        for name in *names {
            query.append_pair(name, &field(&f, name));
        }
        return Redirect::to(&format!("/admin/inventory?{}#preview", query.finish())).into_response();
    }
    let from = instant(&field(&f, "valid_from"));
    let back = "/admin/inventory";
    fn next<T>(_: &T) -> String {
        "/admin/inventory#inventory".into()
    }
    match what.as_str() {
        "models" => {
            let request = serde_json::json!({"model": field(&f, "model"), "gpu_class": field(&f, "gpu_class"), "valid_from": from});
            act(caller, back, request, |p, body| async move { tenancy::add_model(&state, &p, body).await }, next).await
        }
        "profiles" => {
            let request = serde_json::json!({"kind": field(&f, "kind"), "model": field(&f, "model"),
                "profile": field(&f, "profile"), "fraction": field(&f, "fraction"), "valid_from": from});
            act(caller, back, request, |p, body| async move { tenancy::add_profile(&state, &p, body).await }, next)
                .await
        }
        "timeslicing" => {
            let replicas = field(&f, "replicas");
            let Ok(replicas) = replicas.parse::<i32>() else {
                return form_refused(&format!("replicas: {replicas:?} is not a whole number"), back);
            };
            let request = serde_json::json!({"cluster": field(&f, "cluster"), "name": field(&f, "name"),
                "replicas": replicas, "valid_from": from});
            act(caller, back, request, |p, body| async move { tenancy::add_timeslicing(&state, &p, body).await }, next)
                .await
        }
        _ => (StatusCode::NOT_FOUND, "no such form").into_response(),
    }
}

/// A date (`YYYY-MM-DD`, midnight UTC) or a full RFC 3339 time, as the quotas API takes it.
/// A form's date (`2026-09-16`) or UTC date and time (`2026-09-16T06:00`, from `datetime-local`) as RFC 3339.
pub(super) fn instant(value: &str) -> String {
    match value.len() {
        10 => format!("{value}T00:00:00Z"),
        16 => format!("{value}:00Z"),
        19 => format!("{value}Z"),
        _ => value.to_string(),
    }
}

pub(super) async fn quota_form(
    State(state): State<AppState>,
    caller: Result<Caller<ManagePolicy>, AppError>,
    body: axum::body::Bytes,
) -> Response {
    let f = pairs(&body);
    let holder = field(&f, "holder");
    let holder_kind = match field(&f, "holder_kind").as_str() {
        "department" => "department",
        _ => "tenant",
    };
    let mut request = serde_json::json!({
        "gpu_class": field(&f, "gpu_class"),
        "gpus": field(&f, "gpus"),
        "valid_from": instant(&field(&f, "valid_from")),
    });
    request[holder_kind] = serde_json::Value::String(holder);
    let valid_to = field(&f, "valid_to");
    if !valid_to.is_empty() {
        request["valid_to"] = serde_json::Value::String(instant(&valid_to));
    }
    act(
        caller,
        "/admin/policies",
        request,
        |p, body| async move { policy::create_quota(&state, &p, body).await },
        |_| "/admin/policies#quotas".into(),
    )
    .await
}

/// `/admin/costs`'s upload form (multipart/form-data: `period` and the `bill` file, a FOCUS CSV or its gzip): calls
/// the cloud bill's service ([`crate::costs::import_bill`]) as the signed-in person, then shows the stored import.
/// The CSRF token travels in the action's query string (the guard does not read file bodies).
pub(super) async fn cost_import_form(
    State(state): State<AppState>,
    caller: Result<crate::http::Caller<crate::http::ManagePolicy>, crate::error::AppError>,
    uri: axum::http::Uri,
    multipart: Result<axum::extract::Multipart, axum::extract::multipart::MultipartRejection>,
) -> Response {
    let back = "/admin/costs";
    // Who asks first: a visitor without a session goes to sign in, whatever the body.
    let caller = match caller {
        Ok(c) => c,
        Err(e) => return refused(e, back),
    };
    let Ok(mut multipart) = multipart else {
        return refused_with(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "bill: send the file as multipart/form-data (the Cloud bill page's form), or use POST /api/v1/costs/imports",
            back,
        );
    };
    let mut period = uri
        .query()
        .and_then(|q| form_urlencoded::parse(q.as_bytes()).find(|(k, _)| k == "period").map(|(_, v)| v.into_owned()))
        .unwrap_or_default();
    let mut bill: Option<axum::body::Bytes> = None;
    loop {
        match multipart.next_field().await {
            Ok(Some(f)) => {
                let name = f.name().unwrap_or_default().to_string();
                match name.as_str() {
                    "period" => match f.text().await {
                        Ok(t) if t.len() <= 16 => period = t.trim().to_string(),
                        _ => return form_refused("period: a month like 2026-11", back),
                    },
                    "bill" => match f.bytes().await {
                        Ok(b) => bill = Some(b),
                        Err(e) => {
                            return form_refused(&format!("bill: the file could not be read: {}", e.body_text()), back);
                        }
                    },
                    _ => {}
                }
            }
            Ok(None) => break,
            Err(e) => {
                return refused_with(e.status(), &format!("the upload could not be read: {}", e.body_text()), back);
            }
        }
    }
    let Ok(parsed) = gpuledger_core::Period::parse(&period) else {
        return form_refused(&format!("period: a month like 2026-11; got {period:?}"), back);
    };
    let Some(bill) = bill.filter(|b| !b.is_empty()) else {
        return form_refused("bill: choose the month's FOCUS CSV export (.csv or .csv.gz)", back);
    };
    match crate::costs::import_bill(&state, &caller, parsed, bill, false).await {
        Ok(_) => Redirect::to(&format!("/admin/costs?period={parsed}&imported=1")).into_response(),
        Err(e) => refused(e, &format!("{back}?period={parsed}")),
    }
}
