//! The HTTP layer shared by every feature: extractors for the caller (with the capability the operation needs)
//! and for strict JSON bodies, so a handler's signature says who may call it and what it reads:
//!
//! ```ignore
//! async fn create(caller: Caller<Administer>, JsonBody(body): JsonBody<TenantBody>) -> Result<…, AppError>
//! ```

use std::{marker::PhantomData, ops::Deref};

use axum::{
    body::Bytes,
    extract::{FromRequest, FromRequestParts, Request},
    http::request::Parts,
};

use crate::{
    app::AppState,
    auth::{self, Capability, Principal},
    error::AppError,
};

/// A capability an operation needs, as a type (so it is part of the handler's signature).
pub trait Need: Send + Sync + 'static {
    /// The capability.
    const CAP: Capability;
}

macro_rules! needs {
    ($($(#[$doc:meta])* $name:ident),* $(,)?) => {$(
        $(#[$doc])*
        #[derive(Debug)]
        pub struct $name;
        impl Need for $name {
            const CAP: Capability = Capability::$name;
        }
    )*};
}

needs! {
    /// Read ledgers, periods, evidence, analytics, disputes, policies (within the caller's departments).
    ReadLedger,
    /// Write cost policies and quotas.
    ManagePolicy,
    /// Close a month.
    Close,
    /// Open disputes and comment on them.
    DisputeParticipate,
    /// Accept or reject disputes.
    DisputeResolve,
    /// Approve or refuse a dispute's credit.
    CreditApprove,
    /// Tokens, sign-in settings, tenancy, the audit log.
    Administer,
    /// Send one cluster's facts.
    Ingest,
    /// Redeem a join token.
    Join,
}

/// The authenticated caller, refused (401/403 problem) unless it may do `N`.
#[derive(Debug)]
pub struct Caller<N: Need>(pub Principal, PhantomData<N>);

impl<N: Need> Caller<N> {
    /// The principal, for code that keeps it.
    pub fn into_inner(self) -> Principal {
        self.0
    }
}

impl<N: Need> Deref for Caller<N> {
    type Target = Principal;
    fn deref(&self) -> &Principal {
        &self.0
    }
}

impl<N: Need> FromRequestParts<AppState> for Caller<N> {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, AppError> {
        let principal = auth::require(&state.db, &parts.headers, N::CAP).await?;
        Ok(Self(principal, PhantomData))
    }
}

/// A JSON request body parsed strictly: at most [`crate::policy::MAX_API_BODY_BYTES`], its shape within the
/// API's JSON limits, unknown fields refused where the type says `deny_unknown_fields`, and every error naming
/// the field (`policy.classes[0].borrowed`) and the reason.
#[derive(Debug)]
pub struct JsonBody<T>(pub T);

impl<T: serde::de::DeserializeOwned + Send> FromRequest<AppState> for JsonBody<T> {
    type Rejection = AppError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, AppError> {
        let bytes = Bytes::from_request(request, state).await.map_err(|e| {
            if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                AppError::PayloadTooLarge(format!(
                    "a JSON body larger than {} bytes",
                    crate::policy::MAX_API_BODY_BYTES
                ))
            } else {
                AppError::invalid("body", e.body_text())
            }
        })?;
        crate::policy::json_body(&bytes).map(Self)
    }
}
