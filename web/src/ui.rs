//! Building blocks the pages share: calling the API in-process, formatting, confidence marks, and
//! server-rendered, accessible SVG charts.

use leptos::prelude::*;

use crate::data::{PortalDataHandle, PortalError};

/// The instant the page is rendered at, from its data source ([`crate::data::PortalData::now`]); the wall clock
/// only outside a render (no data source in context).
pub fn now() -> time::OffsetDateTime {
    use_context::<PortalDataHandle>().map_or_else(time::OffsetDateTime::now_utc, |h| h.0.now())
}

/// Renders `children` with what `future` resolves to, once it has (the page answers only then: every route renders
/// with `SsrMode::Async`). Like Leptos's `Await`, but nothing is serialized into the page: the portal has no client
/// bundle to hydrate, and a month's data serialized beside its own HTML would make each page several times larger.
#[component]
pub fn Awaited<T, Fut, Chil, V>(
    /// What the page waits for.
    future: Fut,
    /// The view of the result.
    children: Chil,
) -> impl IntoView
where
    T: Send + Sync + 'static,
    Fut: std::future::Future<Output = T> + Send + 'static,
    Chil: FnOnce(&T) -> V + Send + 'static,
    V: IntoView + 'static,
{
    view! {
        <Suspense fallback=|| ()>
            {Suspend::new(async move {
                let data = future.await;
                children(&data)
            })}
        </Suspense>
    }
}

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
/// Text that is not a plain decimal (`no data`, `—`) is returned as is.
pub fn grouped(amount: &str) -> String {
    if !is_decimal(amount) {
        return amount.to_string();
    }
    let amount = amount.trim();
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

/// Rounds a decimal string to `places` decimals, half away from zero, by string arithmetic (exact: no floating
/// point). `None` when the text is not a plain decimal. `12.345678` → `12.3` (1 place); `-0.04` → `0.0`.
pub fn round_decimal(value: &str, places: usize) -> Option<String> {
    if !is_decimal(value) {
        return None;
    }
    let v = value.trim();
    let (negative, body) = match v.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, v),
    };
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    let frac: Vec<u8> = frac.bytes().map(|b| b - b'0').collect();
    // The digits kept: the integer part, then `places` decimals (padded with zeros).
    let mut kept: Vec<u8> = int.bytes().map(|b| b - b'0').collect();
    if kept.is_empty() {
        kept.push(0);
    }
    kept.extend((0..places).map(|i| frac.get(i).copied().unwrap_or(0)));
    if frac.get(places).is_some_and(|d| *d >= 5) {
        let mut carry = true;
        for d in kept.iter_mut().rev() {
            if *d == 9 {
                *d = 0;
            } else {
                *d += 1;
                carry = false;
                break;
            }
        }
        if carry {
            kept.insert(0, 1);
        }
    }
    let zero = kept.iter().all(|d| *d == 0);
    let digits: String = kept.iter().map(|d| char::from(b'0' + d)).collect();
    let (int, frac) = digits.split_at(digits.len() - places);
    let int = match int.trim_start_matches('0') {
        "" => "0",
        i => i,
    };
    let sign = if negative && !zero { "-" } else { "" };
    Some(if places == 0 { format!("{sign}{int}") } else { format!("{sign}{int}.{frac}") })
}

/// GPU-hours as people read them: one decimal with thousands separators (`12345.678901` → `12,345.7`), rounded
/// exactly from the decimal string; a figure that is not zero but rounds to it reads `< 0.1`. Other text (`—`,
/// empty) is returned as is.
pub fn hours_text(exact: &str) -> String {
    match round_decimal(exact, 1) {
        Some(r) if r == "0.0" && !is_zero(exact) => {
            if exact.trim().starts_with('-') {
                "> -0.1".into()
            } else {
                "< 0.1".into()
            }
        }
        Some(r) => grouped(&r),
        None => exact.to_string(),
    }
}

fn is_zero(value: &str) -> bool {
    value.bytes().all(|b| matches!(b, b'0' | b'.' | b'-' | b' '))
}

/// GPU-hours rounded for reading, with the exact figure one hover away (`title`).
pub fn hours(exact: &str) -> AnyView {
    let exact = exact.trim().to_string();
    if !is_decimal(&exact) {
        return view! { {exact} }.into_any();
    }
    let text = hours_text(&exact);
    view! { <span class="hours" title=format!("{exact} GPU-hours")>{text}</span> }.into_any()
}

/// `2026-12-01T14:05:09.123456Z` (any offset, converted to UTC) → `2026-12-01 14:05 UTC`; `None` when the text
/// is not an RFC 3339 timestamp.
pub fn readable_time(rfc3339: &str) -> Option<String> {
    use time::format_description::well_known::Rfc3339;
    let text = rfc3339.trim();
    let t = time::OffsetDateTime::parse(text, &Rfc3339)
        .or_else(|_| time::OffsetDateTime::parse(&text.replacen(' ', "T", 1), &Rfc3339))
        .ok()?
        .to_offset(time::UtcOffset::UTC);
    Some(format!("{:04}-{:02}-{:02} {:02}:{:02} UTC", t.year(), u8::from(t.month()), t.day(), t.hour(), t.minute()))
}

/// Whether the text is a calendar date, `YYYY-MM-DD`.
fn is_date(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() == 10 && b.iter().enumerate().all(|(i, c)| if i == 4 || i == 7 { *c == b'-' } else { c.is_ascii_digit() })
}

/// A moment as people read it (`2026-12-01 14:05 UTC`) in a `<time>` element that keeps the exact value (in
/// `datetime` for machines, in `title` one hover away). A date stays a date; other text is shown as is.
pub fn when(raw: &str) -> AnyView {
    let raw = raw.trim().to_string();
    match readable_time(&raw) {
        Some(text) => {
            let title = raw.clone();
            view! { <time datetime=raw title=title>{text}</time> }.into_any()
        }
        None if is_date(&raw) => {
            let text = raw.clone();
            view! { <time datetime=raw>{text}</time> }.into_any()
        }
        None => view! { {raw} }.into_any(),
    }
}

/// [`when`] for a moment that may be missing, which reads `none` (e.g. "never").
pub fn when_or(raw: Option<&str>, none: &str) -> AnyView {
    match raw.map(str::trim).filter(|r| !r.is_empty()) {
        Some(r) => when(r),
        None => view! { {none.to_string()} }.into_any(),
    }
}

/// The mark next to a figure that is not exact, with its reason one click away (`<details>`, no script).
#[component]
pub fn Confidence(
    /// How exact the figure is.
    level: gpuledger_api::states::Confidence,
    /// Why, when the answer says (else the level's general explanation).
    #[prop(optional)]
    reason: Option<String>,
) -> impl IntoView {
    use gpuledger_api::states::Confidence as Level;
    let general = match level {
        Level::Modeled => {
            "Modeled: derived by a documented rule (e.g. a time-sliced share, an endpoint split by weighted tokens), not measured per workload."
        }
        Level::Estimated => {
            "Estimated: part of the data is missing (an agent gap, an end time not yet observed); the figure is the best estimate and may be corrected after close."
        }
        Level::Exact => return view! { <span class="conf exact" title="exact">""</span> }.into_any(),
    };
    let level = level.as_str();
    view! {
        <details class=format!("conf {level}")>
            <summary>{level}</summary>
            <p>{reason.unwrap_or_else(|| general.to_string())}</p>
        </details>
    }
    .into_any()
}

/// Chart text size, in user units. Charts are drawn at their own size (`width` = the viewBox width, so one user unit
/// is one CSS pixel) and only shrink on screens narrower than they are: this is the size people read.
pub const CHART_FONT_PX: u32 = 13;
/// A bar chart's width: it fits one column of the showback grid at the portal's normal width (a 64rem main column
/// holds a ~918px panel, two grid columns of ~447px), so it is drawn at 1:1 there.
pub const BAR_CHART_WIDTH: u32 = 440;
/// The trend's width (a full panel holds ~918px).
pub const TREND_CHART_WIDTH: u32 = 600;
/// Characters a bar chart label keeps before it is cut with an ellipsis (the full text is in the bar's `<title>`).
const BAR_LABEL_CHARS: usize = 16;
/// Width of a bar chart's label column, in user units (about [`BAR_LABEL_CHARS`] characters at [`CHART_FONT_PX`]).
const BAR_LABEL_WIDTH: f64 = 132.0;
/// A generous width of one character at [`CHART_FONT_PX`], to reserve room for the figures.
const CHAR_WIDTH: f64 = 8.0;

/// A label cut to `max` characters with an ellipsis (`None` when it fits as is).
pub fn clipped(label: &str, max: usize) -> Option<String> {
    if label.chars().count() <= max {
        return None;
    }
    let kept: String = label.chars().take(max.saturating_sub(1)).collect();
    Some(format!("{}…", kept.trim_end()))
}

/// A horizontal bar chart: labelled bars, each with a `<title>` (holding a cut label's full text), described for
/// screen readers, with the exact figures in the table beside it (the chart is a picture of the table).
#[component]
pub fn BarChart(
    /// What the chart shows (its accessible name).
    title: String,
    /// Label and exact decimal figure per bar.
    rows: Vec<(String, String)>,
    /// The figures' unit.
    unit: String,
) -> impl IntoView {
    let max = rows.iter().map(|(_, v)| approx(v).abs()).fold(0.0_f64, f64::max).max(f64::MIN_POSITIVE);
    let height = 28 * rows.len().max(1) + 8;
    let said = |v: &str| format!("{} {unit}", grouped(v)).trim_end().to_string();
    let summary = rows.iter().map(|(k, v)| format!("{k}: {}", said(v))).collect::<Vec<_>>().join("; ");
    let width = f64::from(BAR_CHART_WIDTH);
    // Room for the longest figure after its bar; the bars take the rest.
    let figure = rows.iter().map(|(_, v)| grouped(v).chars().count()).max().unwrap_or(4) as f64 * CHAR_WIDTH;
    let bar_x = BAR_LABEL_WIDTH + 8.0;
    let span = (width - bar_x - 6.0 - figure).max(80.0);
    view! {
        <svg class="chart" role="img" aria-label=format!("{title}. {summary}")
             viewBox=format!("0 0 {BAR_CHART_WIDTH} {height}") width=BAR_CHART_WIDTH height=height
             font-size=CHART_FONT_PX preserveAspectRatio="xMinYMin meet" focusable="false">
            <title>{title.clone()}</title>
            {rows.into_iter().enumerate().map(|(i, (label, value))| {
                let w = (approx(&value).abs() / max * span).max(1.0);
                let y = 4 + i * 28;
                let shown = clipped(&label, BAR_LABEL_CHARS).unwrap_or_else(|| label.clone());
                view! {
                    <g>
                        <title>{format!("{label}: {}", said(&value))}</title>
                        <text x="0" y=y + 18 class="label">{shown}</text>
                        <rect x=format!("{bar_x:.1}") y=y width=format!("{w:.1}") height="20" class="bar" />
                        <text x=format!("{:.1}", bar_x + 6.0 + w) y=y + 18 class="value">{grouped(&value)}</text>
                    </g>
                }
            }).collect_view()}
        </svg>
    }
}

/// Whether a figure is a plain decimal number (a month without figures carries the words "no data" instead).
pub fn is_decimal(value: &str) -> bool {
    let body = value.trim().strip_prefix('-').unwrap_or(value.trim());
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    !(int.is_empty() && frac.is_empty())
        && int.bytes().all(|b| b.is_ascii_digit())
        && frac.bytes().all(|b| b.is_ascii_digit())
}

/// Vertical bars over time (the trend): one bar per month; a month without figures is a gap that says "no data".
#[component]
pub fn TrendChart(
    /// What the chart shows (its accessible name).
    title: String,
    /// Month and exact decimal figure (or "no data") per bar.
    points: Vec<(String, String)>,
    /// The figures' unit.
    unit: String,
) -> impl IntoView {
    let max = points
        .iter()
        .filter(|(_, v)| is_decimal(v))
        .map(|(_, v)| approx(v).abs())
        .fold(0.0_f64, f64::max)
        .max(f64::MIN_POSITIVE);
    let n = points.len().max(1);
    let step = (f64::from(TREND_CHART_WIDTH) - 40.0) / n as f64;
    // A month without figures says so ("no data"), with no unit and no bar.
    let said =
        |v: &str| if is_decimal(v) { format!("{} {unit}", grouped(v)).trim_end().to_string() } else { v.to_string() };
    let summary = points.iter().map(|(k, v)| format!("{k}: {}", said(v))).collect::<Vec<_>>().join("; ");
    view! {
        <svg class="chart trend" role="img" aria-label=format!("{title}. {summary}")
             viewBox=format!("0 0 {TREND_CHART_WIDTH} 220") width=TREND_CHART_WIDTH height="220"
             font-size=CHART_FONT_PX preserveAspectRatio="xMinYMin meet" focusable="false">
            <title>{title.clone()}</title>
            {points.into_iter().enumerate().map(|(i, (label, value))| {
                let x = 20.0 + i as f64 * step;
                let mark = if is_decimal(&value) {
                    let h = approx(&value).abs() / max * 160.0;
                    view! {
                        <rect x=format!("{x:.1}") y=format!("{:.1}", 180.0 - h.max(1.0)) width=format!("{:.1}", step * 0.7)
                              height=format!("{:.1}", h.max(1.0)) class="bar" />
                    }.into_any()
                } else {
                    view! { <text x=format!("{x:.1}") y="176" class="nodata">{value.clone()}</text> }.into_any()
                };
                view! {
                    <g>
                        <title>{format!("{label}: {}", said(&value))}</title>
                        {mark}
                        <text x=format!("{x:.1}") y="202" class="label">{label.clone()}</text>
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
        // Words are not numbers: they are not grouped.
        assert_eq!(grouped("no data"), "no data");
        assert_eq!(grouped("—"), "—");
    }

    #[test]
    fn hours_round_exactly_from_the_decimal_string() {
        assert_eq!(round_decimal("12.345678", 1).as_deref(), Some("12.3"));
        assert_eq!(round_decimal("12.35", 1).as_deref(), Some("12.4"));
        assert_eq!(round_decimal("99.95", 1).as_deref(), Some("100.0"));
        assert_eq!(
            round_decimal("999999999999999999999999999999999999999.96", 1).as_deref(),
            Some("1000000000000000000000000000000000000000.0")
        );
        assert_eq!(round_decimal("-2.25", 1).as_deref(), Some("-2.3"));
        assert_eq!(round_decimal("-0.04", 1).as_deref(), Some("0.0"));
        assert_eq!(round_decimal("7", 1).as_deref(), Some("7.0"));
        assert_eq!(round_decimal("0.5", 0).as_deref(), Some("1"));
        assert_eq!(round_decimal("n/a", 1), None);
        assert_eq!(hours_text("12345.678901"), "12,345.7");
        assert_eq!(hours_text("1234567.04"), "1,234,567.0");
        assert_eq!(hours_text("0.000000"), "0.0");
        assert_eq!(hours_text("0.001"), "< 0.1");
        assert_eq!(hours_text(""), "");
    }

    #[test]
    fn times_read_in_utc_to_the_minute() {
        assert_eq!(readable_time("2026-12-01T14:05:09.123456Z").as_deref(), Some("2026-12-01 14:05 UTC"));
        assert_eq!(readable_time("2026-12-01T00:30:00-01:00").as_deref(), Some("2026-12-01 01:30 UTC"));
        assert_eq!(readable_time("2026-12-01 14:05:09+00:00").as_deref(), Some("2026-12-01 14:05 UTC"));
        assert_eq!(readable_time("2026-12-01"), None);
        assert_eq!(readable_time(""), None);
        assert_eq!(clipped("short", 16), None);
        assert_eq!(clipped("Research and Development", 16).as_deref(), Some("Research and De…"));
    }
}
