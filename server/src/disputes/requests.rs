//! Request bodies of the disputes API and the checks on their fields, each failure naming its field.

use gpuledger_core::decimal::Decimal;

use crate::error::AppError;

// The bodies are the contract's types: each field's guard is its type (`gpuledger_api::input`), a missing or
// unknown field is refused naming it.
pub(super) use gpuledger_api::disputes::{
    AcceptRequest, ApprovalRequest, CommentRequest, OpenDispute as OpenRequest, ReasonRequest,
};

/// The line IDs, each once (the document says `uniqueItems`); the error names the repeat.
pub(super) fn check_line_ids(line_ids: &[String]) -> Result<(), AppError> {
    for (i, id) in line_ids.iter().enumerate() {
        if let Some(j) = line_ids[..i].iter().position(|other| other == id) {
            return Err(AppError::invalid(format!("line_ids[{i}]"), format!("{id:?} is already listed at [{j}]")));
        }
    }
    Ok(())
}

/// A credit at two decimals (the contract's `Credit`: more than zero, at most two decimals).
pub(super) fn credit_of(request: &AcceptRequest) -> Result<Decimal, AppError> {
    request.credit_amount.decimal().with_scale(2).map_err(|e| AppError::Internal(e.to_string()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    use crate::http::json_body;

    fn accept(credit: &str) -> Result<AcceptRequest, AppError> {
        json_body(serde_json::json!({"reason": "r", "credit_amount": credit}).to_string().as_bytes())
    }

    #[test]
    fn credits_are_positive_cents() {
        assert_eq!(credit_of(&accept("123.45").unwrap()).unwrap().to_string(), "123.45");
        assert_eq!(credit_of(&accept("7").unwrap()).unwrap().to_string(), "7.00");
        for bad in ["0", "0.00", "-1", "1.234", "1e3", "abc", ""] {
            let err = accept(bad).unwrap_err();
            assert!(matches!(&err, AppError::Invalid { field, .. } if field == "credit_amount"), "{bad}: {err}");
        }
        let missing = json_body::<AcceptRequest>(br#"{"reason": "r"}"#).unwrap_err();
        assert!(matches!(&missing, AppError::Invalid { field, .. } if field == "credit_amount"), "{missing}");
    }

    #[test]
    fn line_ids_are_checked_by_position() {
        let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(check_line_ids(&ids(&["a", "b"])).is_ok());
        let err = check_line_ids(&ids(&["a", "b", "a"])).unwrap_err();
        assert!(matches!(&err, AppError::Invalid { field, .. } if field == "line_ids[2]"));
        let open = |ids: serde_json::Value| {
            json_body::<OpenRequest>(
                serde_json::json!({"period": "2026-10", "line_ids": ids, "reason": "r"}).to_string().as_bytes(),
            )
        };
        let err = open(serde_json::json!([])).unwrap_err();
        assert!(matches!(&err, AppError::Invalid { field, .. } if field == "line_ids"), "{err}");
        let err = open(serde_json::json!(["a", " "])).unwrap_err();
        assert!(matches!(&err, AppError::Invalid { field, .. } if field == "line_ids[1]"), "{err}");
    }

    #[test]
    fn bodies_name_the_field() {
        let err = json_body::<AcceptRequest>(br#"{"reason": "x", "credit_amount": 12.5}"#).unwrap_err();
        assert!(matches!(&err, AppError::Invalid { field, .. } if field == "credit_amount"), "{err}");
        let reason = |r: &str| json_body::<ReasonRequest>(serde_json::json!({"reason": r}).to_string().as_bytes());
        assert!(
            matches!(json_body::<ReasonRequest>(b"{}").unwrap_err(), AppError::Invalid { field, .. } if field == "reason")
        );
        assert!(reason("  ").is_err());
        assert_eq!(reason(" why ").unwrap().reason.as_str(), "why");
        assert!(reason(&"x".repeat(gpuledger_api::disputes::MAX_TEXT + 1)).is_err());
        assert!(reason("a\u{0}b").is_err(), "no control characters");
        assert_eq!(json_body::<ApprovalRequest>(b"{}").unwrap().reason.as_str(), "");
    }
}
