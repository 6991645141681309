//! The house rules of `docs/architecture.md`, checked on the source tree: a feature's handlers are its own (never
//! `pub`, never named from another feature), every feature folder keeps its SQL in `store.rs`, and no source file
//! grows past 800 lines before its tests.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

fn sources() -> BTreeMap<PathBuf, String> {
    fn walk(dir: &Path, out: &mut BTreeMap<PathBuf, String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.insert(path.clone(), std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut out);
    out
}

/// The feature a file belongs to: its first path component under `src/` (`ledger/store.rs` → `ledger`).
fn feature(path: &Path) -> String {
    let rel = path.strip_prefix(Path::new(env!("CARGO_MANIFEST_DIR")).join("src")).unwrap();
    let first = rel.components().next().unwrap().as_os_str().to_string_lossy().to_string();
    first.trim_end_matches(".rs").to_string()
}

/// Identifiers after `prefix` (e.g. `get(`) up to the closing parenthesis, when they are a plain path.
fn calls<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(prefix) {
        let before = rest[..i].chars().last();
        rest = &rest[i + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let end = rest.find(')').unwrap_or(0);
        let arg = &rest[..end];
        if !arg.is_empty() && arg.chars().all(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            out.push(arg);
        }
    }
    out
}

/// `(router file, handler name)` of every handler a router registers.
fn handlers(src: &BTreeMap<PathBuf, String>) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    for (path, text) in src {
        // rustfmt keeps each `.route(path, get(a).post(b))` on one line.
        for line in text.lines().filter(|l| l.contains(".route(")) {
            for prefix in ["get(", "post(", "put(", "delete(", "patch("] {
                for call in calls(line, prefix) {
                    let name = call.rsplit("::").next().unwrap().to_string();
                    out.push((path.clone(), name));
                }
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

#[test]
fn handlers_are_private_to_their_feature() {
    let src = sources();
    let handlers = handlers(&src);
    assert!(handlers.len() >= 50, "the scan found only {} handlers: is it still reading the routers?", handlers.len());
    let mut problems = Vec::new();
    for (router, name) in &handlers {
        let feat = &feature(router);
        let def = format!("async fn {name}(");
        // A handler named without a path is the router file's own; else look through the feature's files.
        let defs: Vec<(&PathBuf, &String)> = if src[router].contains(&def) {
            vec![(router, &src[router])]
        } else {
            src.iter().filter(|(p, t)| feature(p) == *feat && t.contains(&def)).collect()
        };
        if defs.is_empty() {
            problems.push(format!("{feat}: handler {name} is not defined inside the feature"));
        }
        for (path, text) in defs {
            for line in text.lines().filter(|l| l.contains(&def)) {
                let line = line.trim_start();
                if line.starts_with("pub ") || line.starts_with("pub(crate) ") {
                    problems.push(format!("{}: handler {name} is {line:?}; keep it private to {feat}", path.display()));
                }
            }
        }
        for (path, text) in src.iter().filter(|(p, _)| feature(p) != *feat) {
            if text.contains(&format!("{feat}::{name}(")) || text.contains(&format!("{feat}::{name},")) {
                problems.push(format!("{} names {feat}'s handler {name}", path.display()));
            }
        }
    }
    assert!(problems.is_empty(), "house rule broken:\n{}", problems.join("\n"));
}

#[test]
fn feature_folders_keep_their_sql_in_store() {
    let src = sources();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for feat in ["ledger", "close", "policy", "tenancy", "training", "disputes"] {
        let store = root.join(feat).join("store.rs");
        let text = src.get(&store).unwrap_or_else(|| panic!("{feat}/ has no store.rs"));
        assert!(text.contains("sqlx::"), "{feat}/store.rs holds no SQL");
    }
}

#[test]
fn no_source_file_is_over_800_lines_before_its_tests() {
    let mut long = Vec::new();
    for (path, text) in sources() {
        let before_tests = text.split("#[cfg(test)]").next().unwrap_or_default();
        let n = before_tests.lines().count();
        if n > 800 {
            long.push(format!("{} ({n} lines)", path.display()));
        }
    }
    assert!(long.is_empty(), "split these: {long:?}");
}
