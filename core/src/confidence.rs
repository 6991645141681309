//! How much a number can be trusted.
//!
//! Every derived number carries the weakest confidence of its inputs
//! (DESIGN.md: `exact` > `modeled` > `estimated`).

use std::fmt;

use serde::{Deserialize, Serialize};

/// Confidence of a fact or derived number. Ordered `Estimated < Modeled < Exact`, so the
/// weakest of several is their minimum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Confidence {
    /// Partly inferred (e.g. an interval end guessed after an object vanished unobserved).
    Estimated,
    /// Derived from a declared model rather than measured (time-slicing replicas, shared
    /// endpoint splits).
    Modeled,
    /// Taken from the control plane and approved inventory as-is.
    Exact,
}

impl Confidence {
    /// The weaker of two confidences.
    pub fn combine(self, other: Confidence) -> Confidence {
        self.min(other)
    }

    /// The weakest of many; `Exact` for none, since no input weakens a result.
    pub fn weakest<I: IntoIterator<Item = Confidence>>(iter: I) -> Confidence {
        iter.into_iter().fold(Confidence::Exact, Confidence::combine)
    }

    /// Lowercase name as used in exports (`exact`, `modeled`, `estimated`).
    pub const fn as_str(&self) -> &'static str {
        match self {
            Confidence::Estimated => "estimated",
            Confidence::Modeled => "modeled",
            Confidence::Exact => "exact",
        }
    }
}

impl fmt::Display for Confidence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use Confidence::*;

    #[test]
    fn order_and_weakest() {
        assert!(Exact > Modeled && Modeled > Estimated);
        assert_eq!(Exact.combine(Modeled), Modeled);
        assert_eq!(Estimated.combine(Exact), Estimated);
        assert_eq!(Confidence::weakest([Exact, Modeled, Exact]), Modeled);
        assert_eq!(Confidence::weakest([Exact, Estimated, Modeled]), Estimated);
        assert_eq!(Confidence::weakest([]), Exact);
    }

    #[test]
    fn serde_lowercase() {
        assert_eq!(serde_json::to_string(&Modeled).unwrap(), "\"modeled\"");
        assert_eq!(serde_json::from_str::<Confidence>("\"estimated\"").unwrap(), Estimated);
        assert_eq!(Exact.to_string(), "exact");
    }
}
