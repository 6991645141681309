//! The foresight operations: idle reservations, budgets, forecast, webhooks (docs/foresight.md); telemetry coverage.

use gpuledger_api::{
    Items,
    foresight::{Budget, Budgets, CreatedWebhook, Delivery, Forecast, IdleList, Webhook},
};

use gpuledger_api::telemetry::Coverage;

use super::Op;

pub(super) fn operations() -> Vec<Op> {
    vec![
        Op::get(
            "/api/v1/telemetry/coverage",
            "Telemetry coverage of a month per cluster and node: GPUs and MIG instances that reported, GPU-hours held \
             by allocations, GPU-hours with telemetry, windows received, median window seconds, bytes kept per tier \
             (full resolution, hourly), the latest hour, and a status (reporting, partial, silent) with what to do. \
             ?period=YYYY-MM (default: this month). Admins",
        )
        .token()
        // The handler (server/src/telemetry) reads `period` as this type describes it: an optional YYYY-MM.
        .query::<gpuledger_api::params::OptionalMonthParams>()
        .answers::<Coverage>(200, "Clusters and nodes, by name")
        .errors(&[401, 403, 422]),
        Op::get(
            "/api/v1/idle",
            "Idle reservations now: allocations holding GPUs whose activity has stayed below the policy's idle \
             threshold (default 5 %) for at least its minimum (default 2 h), with owner, tenant, devices, since when \
             and what the idle time cost at the class's guaranteed rate. Never billed",
        )
        .token()
        .answers::<IdleList>(200, "The reservations, longest idle first")
        .errors(&[401]),
        Op::get(
            "/api/v1/budgets",
            "A month's budgets per department and tenant (the latest setting of each): ?period=YYYY-MM (default: this \
             month)",
        )
        .token()
        .answers::<Budgets>(200, "The budgets")
        .errors(&[401, 422]),
        Op::post(
            "/api/v1/budgets",
            "Sets a month's budget: {department or tenant (name or ID), period, amount}. Admin or finance; audited",
        )
        .token()
        .answers::<Budget>(201, "the budget as it stands")
        .errors(&[401, 403, 404, 409, 422]),
        Op::get(
            "/api/v1/forecast",
            "The month so far and at its end, per department and tenant: to_date, forecast (the allocations still \
             open priced to the month's end, plus new work at the pace of a regular three-month history), budget, \
             over_budget, method, confidence. ?period=YYYY-MM (default: this month)",
        )
        .token()
        .answers::<Forecast>(200, "The forecast")
        .errors(&[401, 409, 422]),
        Op::get(
            "/api/v1/notifications/webhooks",
            "The organization's webhooks with their delivery counts. Admin or finance",
        )
        .token()
        .answers::<Items<Webhook>>(200, "Active first, newest first")
        .errors(&[401, 403]),
        Op::post(
            "/api/v1/notifications/webhooks",
            "Adds a webhook: {url, events: [budget.forecast_exceeded, idle.reservation, period.closed, \
             dispute.opened, dispute.resolved], format?: json|slack}. https only; loopback, private and link-local \
             targets are refused unless the operator allows them. Bodies are signed: X-GPULedger-Signature: \
             sha256=<hex HMAC-SHA256 of the body with the secret shown once in this answer>. Admin or finance",
        )
        .token()
        .answers::<CreatedWebhook>(201, "the webhook and its secret (shown once)")
        .errors(&[401, 403, 409, 422]),
        Op::get(
            "/api/v1/notifications/webhooks/{id}/deliveries",
            "One webhook's delivery log, newest first (the last 200): event, state, attempts, last status and error",
        )
        .token()
        .answers::<Items<Delivery>>(200, "The deliveries")
        .errors(&[401, 403, 404]),
        Op::post(
            "/api/v1/notifications/webhooks/{id}/disable",
            "Turns a webhook off: nothing more is sent (pending deliveries fail with 'webhook disabled'). Admin or \
             finance",
        )
        .token()
        .answers::<Webhook>(200, "the webhook, disabled")
        .errors(&[401, 403, 404]),
    ]
}
