//! Scratch files for month-sized work that must not be held in memory (a close's energy and bundle, a month's
//! utilization timelines): unnamed temporary files.

use std::fs::File;

/// An unnamed file in the temporary directory: created new, its name removed at once (the open file stays until it
/// is dropped, and nothing is left behind if the process dies).
pub(crate) fn unnamed_file(what: &str) -> std::io::Result<File> {
    let path = std::env::temp_dir().join(format!("gpuledger-{what}-{}", uuid::Uuid::new_v4()));
    let file = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&path)?;
    std::fs::remove_file(&path)?;
    Ok(file)
}
