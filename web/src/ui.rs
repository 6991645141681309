//! Building blocks the pages share: calling the API in-process, formatting, confidence marks, and
//! server-rendered, accessible SVG charts.

use leptos::prelude::*;
use serde_json::Value;

use crate::data::{PortalDataHandle, PortalError};

/// The signed-in person, if any.
pub async fn session() -> Option<crate::data::SessionView> {
    match use_context::<PortalDataHandle>() {
        Some(h) => h.0.session().await,
        None => None,
    }
}

/// Sets the response's status (403, 404) when the server provided the hook.
pub fn set_status(code: u16) {
    if let Some(status) = use_context::<crate::data::ResponseStatus>() {
        status.set(code);
    }
}

/// The panel for a page the person's role does not open (status 403).
pub fn forbidden(what: &str) -> AnyView {
    set_status(403);
    view! {
        <section class="panel error" role="alert">
            <h1>"Not available to your role"</h1>
            <p>{what.to_string()}</p>
        </section>
    }
    .into_any()
}

/// `GET` on the REST API as the signed-in person.
pub async fn api_get(path: String) -> Result<Value, PortalError> {
    let handle = use_context::<PortalDataHandle>()
        .ok_or_else(|| PortalError { message: "the portal has no data source configured".into() })?;
    handle.0.api("GET", path, None).await?.ok()
}

/// A string field of a JSON value ("" when absent).
pub fn s(v: &Value, key: &str) -> String {
    match &v[key] {
        Value::String(x) => x.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// Percent-encodes a query parameter value.
pub fn q(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Parses a decimal string into (units, scale) for charts only — never for money arithmetic shown to people.
pub fn approx(amount: &str) -> f64 {
    amount.trim().parse::<f64>().unwrap_or(0.0)
}

/// Adds thousands separators to a decimal string, keeping it exact: `1234567.80` → `1,234,567.80`.
pub fn grouped(amount: &str) -> String {
    let (sign, rest) = match amount.strip_prefix('-') {
        Some(r) => ("-", r),
        None => ("", amount),
    };
    let (int, frac) = match rest.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (rest, None),
    };
    let mut grouped = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    match frac {
        Some(f) => format!("{sign}{grouped}.{f}"),
        None => format!("{sign}{grouped}"),
    }
}

/// Sums decimal strings exactly (fixed scale of the widest operand).
pub fn sum_decimals<'a>(values: impl IntoIterator<Item = &'a str>) -> String {
    let mut total: i128 = 0;
    let mut scale: u32 = 0;
    let items: Vec<&str> = values.into_iter().collect();
    for v in &items {
        if let Some((_, f)) = v.split_once('.') {
            scale = scale.max(f.len() as u32);
        }
    }
    for v in items {
        let negative = v.starts_with('-');
        let body = v.trim_start_matches('-');
        let (int, frac) = body.split_once('.').unwrap_or((body, ""));
        let mut digits = format!("{int}{frac}");
        for _ in frac.len() as u32..scale {
            digits.push('0');
        }
        let n: i128 = digits.parse().unwrap_or(0);
        total += if negative { -n } else { n };
    }
    let negative = total < 0;
    let abs = total.unsigned_abs().to_string();
    let text = if scale == 0 {
        abs
    } else {
        let padded = format!("{abs:0>width$}", width = scale as usize + 1);
        let (i, f) = padded.split_at(padded.len() - scale as usize);
        format!("{i}.{f}")
    };
    if negative { format!("-{text}") } else { text }
}

/// The mark next to a figure that is not exact, with its reason one click away (`<details>`, no script).
#[component]
pub fn Confidence(level: String, #[prop(optional)] reason: Option<String>) -> impl IntoView {
    let general = match level.as_str() {
        "modeled" => {
            "Modeled: derived by a documented rule (e.g. a time-sliced share, an endpoint split by weighted tokens), not measured per workload."
        }
        "estimated" => {
            "Estimated: part of the data is missing (an agent gap, an end time not yet observed); the figure is the best estimate and may be corrected after close."
        }
        _ => "",
    };
    if level == "exact" || level.is_empty() {
        return view! { <span class="conf exact" title="exact">""</span> }.into_any();
    }
    view! {
        <details class=format!("conf {level}")>
            <summary>{level.clone()}</summary>
            <p>{reason.unwrap_or_else(|| general.to_string())}</p>
        </details>
    }
    .into_any()
}

/// A horizontal bar chart: labelled bars, each with a `<title>`, described for screen readers, with the exact
/// figures in the table beside it (the chart is a picture of the table).
#[component]
pub fn BarChart(title: String, rows: Vec<(String, String)>, unit: String) -> impl IntoView {
    let max = rows.iter().map(|(_, v)| approx(v).abs()).fold(0.0_f64, f64::max).max(f64::MIN_POSITIVE);
    let height = 28 * rows.len().max(1) + 8;
    let summary = rows.iter().map(|(k, v)| format!("{k}: {v} {unit}")).collect::<Vec<_>>().join("; ");
    view! {
        <svg class="chart" role="img" aria-label=format!("{title}. {summary}") viewBox=format!("0 0 680 {height}")
             width="100%" preserveAspectRatio="xMinYMin meet" focusable="false">
            <title>{title.clone()}</title>
            {rows.into_iter().enumerate().map(|(i, (label, value))| {
                let w = (approx(&value).abs() / max * 360.0).max(1.0);
                let y = 4 + i * 28;
                view! {
                    <g>
                        <title>{format!("{label}: {value} {unit}")}</title>
                        <text x="0" y=y + 17 class="label">{label.clone()}</text>
                        <rect x="200" y=y width=format!("{w:.1}") height="20" class="bar" />
                        <text x=format!("{:.1}", 206.0 + w) y=y + 15 class="value">{grouped(&value)}</text>
                    </g>
                }
            }).collect_view()}
        </svg>
    }
}

/// Vertical bars over time (the trend): one bar per month.
#[component]
pub fn TrendChart(title: String, points: Vec<(String, String)>, unit: String) -> impl IntoView {
    let max = points.iter().map(|(_, v)| approx(v).abs()).fold(0.0_f64, f64::max).max(f64::MIN_POSITIVE);
    let n = points.len().max(1);
    let step = 560.0 / n as f64;
    // A month without figures says so ("no data"), with no unit and no bar.
    let said = |v: &str| if v.parse::<f64>().is_ok() { format!("{v} {unit}") } else { v.to_string() };
    let summary = points.iter().map(|(k, v)| format!("{k}: {}", said(v))).collect::<Vec<_>>().join("; ");
    view! {
        <svg class="chart trend" role="img" aria-label=format!("{title}. {summary}") viewBox="0 0 600 220"
             width="100%" preserveAspectRatio="xMinYMin meet" focusable="false">
            <title>{title.clone()}</title>
            {points.into_iter().enumerate().map(|(i, (label, value))| {
                let h = approx(&value).abs() / max * 160.0;
                let x = 20.0 + i as f64 * step;
                view! {
                    <g>
                        <title>{format!("{label}: {}", said(&value))}</title>
                        <rect x=format!("{:.1}", x) y=format!("{:.1}", 180.0 - h) width=format!("{:.1}", step * 0.7)
                              height=format!("{:.1}", h.max(1.0)) class="bar" />
                        <text x=format!("{:.1}", x) y="200" class="label">{label.clone()}</text>
                    </g>
                }
            }).collect_view()}
        </svg>
    }
}

/// An error panel.
pub fn error_panel(e: &PortalError) -> AnyView {
    view! { <section class="panel error" role="alert"><p>{e.message.clone()}</p></section> }.into_any()
}

/// The months before `period` (`YYYY-MM`), oldest first, `count` of them including `period`.
pub fn months_back(period: &str, count: usize) -> Vec<String> {
    let (y, m) = period.split_once('-').unwrap_or(("2026", "01"));
    let (mut y, mut m): (i32, i32) = (y.parse().unwrap_or(2026), m.parse().unwrap_or(1));
    let mut out = Vec::new();
    for _ in 0..count {
        out.push(format!("{y:04}-{m:02}"));
        m -= 1;
        if m == 0 {
            m = 12;
            y -= 1;
        }
    }
    out.reverse();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_sums_and_grouping() {
        assert_eq!(sum_decimals(["1.10", "2.2", "-0.30"]), "3.00");
        assert_eq!(sum_decimals(["-5.00", "1.00"]), "-4.00");
        assert_eq!(sum_decimals(Vec::<&str>::new()), "0");
        assert_eq!(grouped("1234567.80"), "1,234,567.80");
        assert_eq!(grouped("-999.5"), "-999.5");
        assert_eq!(months_back("2026-02", 3), ["2025-12", "2026-01", "2026-02"]);
        assert_eq!(q("a b&c"), "a%20b%26c");
    }
}
