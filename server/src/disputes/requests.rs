//! Request bodies of the disputes API and the checks on their fields, each failure naming its field.

use gpuledger_core::{Period, decimal::Decimal};

use super::{MAX_LINES, MAX_TEXT};
use crate::error::AppError;

// The bodies are the contract's types (`#[serde(default, deny_unknown_fields)]`: a missing field is named by the
// checks below, an unknown one refused).
pub(super) use gpuledger_api::disputes::{AcceptRequest, CommentRequest, OpenDispute as OpenRequest, ReasonRequest};

/// Parses a JSON body; an empty body reads as `{}` so that missing fields are named by the checks that follow.
pub(super) fn parse_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, AppError> {
    crate::http::json_body(if body.iter().all(u8::is_ascii_whitespace) { b"{}" } else { body })
}

/// A required free text: trimmed, not empty, at most [`MAX_TEXT`] characters.
pub(super) fn required_text(field: &str, value: &str) -> Result<String, AppError> {
    let t = value.trim();
    if t.is_empty() {
        return Err(AppError::invalid(field, "is required and must not be empty"));
    }
    optional_text(field, t)
}

pub(super) fn optional_text(field: &str, value: &str) -> Result<String, AppError> {
    let t = value.trim();
    let chars = t.chars().count();
    if chars > MAX_TEXT {
        return Err(AppError::invalid(field, format!("{chars} characters; at most {MAX_TEXT}")));
    }
    Ok(t.to_string())
}

pub(super) fn parse_period(field: &str, value: &str) -> Result<Period, AppError> {
    Period::parse(value).map_err(|_| AppError::invalid(field, format!("{value:?} is not a month in YYYY-MM form")))
}

pub(super) fn check_line_ids(line_ids: &[String]) -> Result<(), AppError> {
    if line_ids.is_empty() {
        return Err(AppError::invalid("line_ids", "name at least one ledger line"));
    }
    if line_ids.len() > MAX_LINES {
        return Err(AppError::invalid("line_ids", format!("{} lines; at most {MAX_LINES}", line_ids.len())));
    }
    for (i, id) in line_ids.iter().enumerate() {
        if id.trim().is_empty() {
            return Err(AppError::invalid(format!("line_ids[{i}]"), "must not be empty"));
        }
        if let Some(j) = line_ids[..i].iter().position(|other| other == id) {
            return Err(AppError::invalid(format!("line_ids[{i}]"), format!("{id:?} is already listed at [{j}]")));
        }
    }
    Ok(())
}

/// A positive amount with at most two decimals.
pub(super) fn parse_credit(value: Option<&str>) -> Result<Decimal, AppError> {
    let field = "credit_amount";
    let value = value.ok_or_else(|| {
        AppError::invalid(field, "is required: the credit to grant, a decimal string such as \"123.45\"")
    })?;
    let amount = Decimal::parse(value)
        .map_err(|_| AppError::invalid(field, format!("{value:?} is not a decimal number such as \"123.45\"")))?;
    if amount <= Decimal::ZERO {
        return Err(AppError::invalid(field, format!("{value} must be greater than zero")));
    }
    amount.with_scale(2).map_err(|_| AppError::invalid(field, format!("{value} has more than 2 decimals")))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn credits_are_positive_cents() {
        assert_eq!(parse_credit(Some("123.45")).unwrap().to_string(), "123.45");
        assert_eq!(parse_credit(Some("7")).unwrap().to_string(), "7.00");
        for bad in ["0", "0.00", "-1", "1.234", "1e3", "abc", ""] {
            let err = parse_credit(Some(bad)).unwrap_err();
            assert!(matches!(&err, AppError::Invalid { field, .. } if field == "credit_amount"), "{bad}: {err}");
        }
        assert!(parse_credit(None).is_err());
    }

    #[test]
    fn line_ids_are_checked_by_position() {
        let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(check_line_ids(&ids(&["a", "b"])).is_ok());
        let err = check_line_ids(&[]).unwrap_err();
        assert!(matches!(&err, AppError::Invalid { field, .. } if field == "line_ids"));
        let err = check_line_ids(&ids(&["a", " "])).unwrap_err();
        assert!(matches!(&err, AppError::Invalid { field, .. } if field == "line_ids[1]"));
        let err = check_line_ids(&ids(&["a", "b", "a"])).unwrap_err();
        assert!(matches!(&err, AppError::Invalid { field, .. } if field == "line_ids[2]"));
    }

    #[test]
    fn bodies_name_the_field() {
        let err = parse_body::<AcceptRequest>(br#"{"reason": "x", "credit_amount": 12.5}"#).unwrap_err();
        assert!(matches!(&err, AppError::Invalid { field, .. } if field == "credit_amount"), "{err}");
        let ok = parse_body::<ReasonRequest>(b"").unwrap();
        assert_eq!(ok.reason, "");
        assert!(required_text("reason", "  ").is_err());
        assert_eq!(required_text("reason", " why ").unwrap(), "why");
        assert!(required_text("reason", &"x".repeat(MAX_TEXT + 1)).is_err());
    }
}
