//! The state every handler shares: the database door, sign-in settings, limits, the page cache.

use std::sync::Arc;

use axum::extract::FromRef;
use gpuledger_core::ids::OrgId;
use leptos::prelude::LeptosOptions;

use crate::{auth::AuthState, db::Database};

/// Shared state of every handler.
#[derive(Clone)]
pub struct AppState {
    /// The database door.
    pub db: Database,
    /// The organization the portal shows without sign-in (the demo's), if any.
    pub featured_org: Option<OrgId>,
    /// Leptos's options (needed by its router integration).
    pub leptos: LeptosOptions,
    /// Sign-in settings, rate limits, provider cache.
    pub auth: Arc<AuthState>,
    /// Limits on what one request may make the server do.
    pub limits: Arc<crate::limits::ServerLimits>,
    /// Rendered pages of stored figures ([`crate::pagecache`]).
    pub pages: Arc<crate::pagecache::PageCache>,
    /// Agents' telemetry batches waiting for their cluster's group commit ([`crate::groups`]).
    pub ingest: Arc<crate::groups::Groups>,
}

impl AppState {
    /// State with default sign-in settings.
    pub fn new(db: Database, featured_org: Option<OrgId>) -> Self {
        Self::with_auth(db, featured_org, AuthState::default())
    }

    /// State of a `demo` run: `org` featured and the demo sign-in offered (tests use it the same way).
    pub fn demo(db: Database, org: OrgId) -> Self {
        Self::with_auth(db, Some(org), AuthState { demo_mode: true, ..AuthState::default() })
    }

    /// State with the given sign-in settings.
    pub fn with_auth(db: Database, featured_org: Option<OrgId>, auth: AuthState) -> Self {
        Self {
            db,
            featured_org,
            leptos: leptos_options(),
            auth: Arc::new(auth),
            limits: Arc::new(crate::limits::ServerLimits::default()),
            pages: Arc::new(crate::pagecache::PageCache::default()),
            ingest: Arc::new(crate::groups::Groups::default()),
        }
    }

    /// The same state with these request limits.
    pub fn with_limits(mut self, limits: crate::limits::ServerLimits) -> Self {
        self.limits = Arc::new(limits);
        self
    }
}

impl FromRef<AppState> for LeptosOptions {
    fn from_ref(state: &AppState) -> Self {
        state.leptos.clone()
    }
}

/// Leptos options for a server-rendered portal (no client bundle yet).
pub fn leptos_options() -> LeptosOptions {
    LeptosOptions::builder().output_name(Arc::<str>::from("gpuledger")).build()
}
