//! Metrics parsing: the Prometheus text exposition format, and what the agent makes of the scrapes it reads.
//!
//! - [`prom`]: a single-pass parser for the text exposition format 0.0.4 → [`prom::Sample`]s.
//! - [`dcgm`]: DCGM Exporter scrapes → [`DeviceFact`](gpuledger_core::wire::DeviceFact)s and per-window
//!   [`TelemetryRollup`](gpuledger_core::wire::TelemetryRollup)s (utilization: analytics only, never money).
//! - [`modelserver`]: vLLM, Triton, TGI and NIM scrapes → [`modelserver::ModelServerSnapshot`]s (productive work),
//!   window totals (the `endpoint_totals` facts of [`crate::scrape`]; the server reconciles them with tenants' usage).
//! - [`faults`]: DCGM's XID, retired-page and device-presence series → `device_fault` facts (credits when the
//!   hardware failed).
//! - [`discovery`]: model-server pods (by their annotations) → [`discovery::ScrapeTarget`]s.
//!
//! Nothing here reads a clock: scrape and observation times are parameters.

pub mod dcgm;
pub mod discovery;
pub mod faults;
pub mod modelserver;
pub mod prom;

/// A line of exposition text that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("metrics text, line {line}: {reason}")]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// What was wrong with it.
    pub reason: ParseErrorReason,
}

/// Why a line of exposition text was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseErrorReason {
    /// A metric or label name is missing or starts with a character names cannot start with.
    #[error("expected a {what} name, found {found:?}")]
    InvalidName {
        /// `metric` or `label`.
        what: &'static str,
        /// The text where the name should start.
        found: String,
    },
    /// A specific character was expected.
    #[error("expected {expected}, found {found:?}")]
    Expected {
        /// What should have come.
        expected: &'static str,
        /// The text found instead (or `end of line`).
        found: String,
    },
    /// A label value's closing quote is missing.
    #[error("unterminated label value")]
    UnterminatedLabelValue,
    /// An escape other than `\\`, `\"` and `\n` in a label value.
    #[error("invalid escape sequence \\{0} in label value")]
    InvalidEscape(char),
    /// The same label name twice in one sample.
    #[error("duplicate label {0:?}")]
    DuplicateLabel(String),
    /// The sample value is not a float (`NaN`, `+Inf`, `-Inf` are accepted).
    #[error("invalid sample value {0:?}")]
    InvalidValue(String),
    /// The timestamp is not an integer number of milliseconds.
    #[error("invalid timestamp {0:?}")]
    InvalidTimestamp(String),
    /// Text after the timestamp.
    #[error("unexpected text after the sample: {0:?}")]
    TrailingText(String),
    /// `# HELP` or `# TYPE` without a metric name, or `# TYPE` without a type.
    #[error("incomplete # {0} line")]
    IncompleteDescriptor(&'static str),
    /// A limit of [`prom`] was crossed (samples per scrape, labels per sample, line length).
    #[error("{0}")]
    Limit(String),
}

#[cfg(test)]
pub(crate) mod fixtures {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    //! Reading the shared fixtures: `<manifest>/../../shared/fixtures` (CI clones `shared/` beside the repo).

    use std::path::PathBuf;

    /// The fixtures directory, or a panic saying where it was looked for.
    pub fn dir(kind: &str) -> PathBuf {
        let base = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures");
        assert!(
            base.is_dir(),
            "fixtures directory {} is missing: clone the `shared` repository beside this one",
            base.display()
        );
        base.join(kind)
    }

    /// The text of one fixture file.
    pub fn read(kind: &str, file: &str) -> String {
        let path = dir(kind).join(file);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading fixture {}: {e}", path.display()))
    }

    /// Every fixture file of a kind, as (file name, text), sorted by name.
    pub fn all(kind: &str) -> Vec<(String, String)> {
        let mut files: Vec<_> = std::fs::read_dir(dir(kind))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "no fixtures under {kind}");
        files.into_iter().map(|f| (f.clone(), read(kind, &f))).collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    /// Every shared DCGM and model-server fixture parses, with one sample per non-comment line.
    #[test]
    fn every_fixture_parses() {
        let mut seen = 0;
        for kind in ["dcgm", "modelserver"] {
            for (file, text) in super::fixtures::all(kind) {
                assert!(text.starts_with("# SOURCE: "), "{file}");
                let parsed = super::prom::parse(&text).unwrap_or_else(|e| panic!("{kind}/{file}: {e}"));
                let lines = text.lines().filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#')).count();
                assert_eq!(parsed.samples.len(), lines, "{kind}/{file}");
                assert!(lines > 0, "{kind}/{file}");
                seen += 1;
            }
        }
        assert_eq!(seen, 9);
    }
}
