//! Telemetry in tiers (issue 31): full-resolution windows as one compact block per device and hour, and the hour's
//! exact sums beside it (`store`); what each cluster and node sends and what keeping it costs (`coverage`).

pub mod store;
