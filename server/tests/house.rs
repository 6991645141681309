//! The house rules of `docs/architecture.md`, checked on the source tree: a feature's handlers are its own (never
//! `pub`, never named from another feature), every feature folder keeps its SQL in `store.rs`, no source file
//! grows past 800 lines before its tests, and the top-level modules import one way (no cycle among them).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::{
    collections::{BTreeMap, BTreeSet},
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
        let text = [root.join(feat).join("store.rs"), root.join(feat).join("store").join("mod.rs")]
            .iter()
            .find_map(|store| src.get(store))
            .unwrap_or_else(|| panic!("{feat}/ has no store.rs or store/mod.rs"));
        assert!(text.contains("sqlx::"), "{feat}/store holds no SQL");
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

/// The text of a file before its first `#[cfg(test)]` (tests may reach anywhere).
fn before_tests(text: &str) -> &str {
    text.split("#[cfg(test)]").next().unwrap_or_default()
}

/// Whether `c` may continue a module name (`[a-z0-9_]`).
fn name_char(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'
}

/// The module name starting at byte `at` of `text` (`[a-z_][a-z0-9_]*`, longest), if one starts there.
fn name_at(text: &str, at: usize) -> Option<&str> {
    let rest = &text[at..];
    let first = rest.chars().next()?;
    if !(first.is_ascii_lowercase() || first == '_') {
        return None;
    }
    let end = rest.find(|c: char| !name_char(c)).unwrap_or(rest.len());
    Some(&rest[..end])
}

/// The names a source text refers to as `crate::name`, and the first names of the paths in its
/// `use crate::{…}` groups, each with the byte offset it was found at. The same reading as the acceptance check
/// of issue 34: every `crate::x` (after a non-word character), and inside a group every name after `{`, `,`, a
/// space or the group's start that is followed by `::`, `,`, `}` or the group's end (so `auth::store` counts
/// `auth`, not `store`).
fn references(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (i, _) in text.match_indices("crate::") {
        let boundary = text[..i].chars().next_back().is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
        if let (true, Some(name)) = (boundary, name_at(text, i + "crate::".len())) {
            out.push((i, name.to_string()));
        }
    }
    let mut from = 0;
    while let Some(found) = text[from..].find("use crate::{") {
        let open = from + found + "use crate::{".len();
        from = open;
        // The group runs to the last `}` before the statement's `;`.
        let stop = text[open..].find(';').map_or(text.len(), |s| open + s);
        let Some(close) = text[open..stop].rfind('}').map(|c| open + c) else { continue };
        let group = &text[open..close];
        // Names one after another, each match taking its terminator (a name right after another's `,` with no
        // space between is not read, as the regular expression of the check does not).
        let mut at = 0;
        while at < group.len() {
            let (start, lead) = if at == 0 && name_at(group, 0).is_some() {
                (0, 0)
            } else {
                match group[at..].chars().next() {
                    Some(c) if c == ',' || c == '{' || c.is_whitespace() => (at + c.len_utf8(), c.len_utf8()),
                    Some(c) => {
                        at += c.len_utf8();
                        continue;
                    }
                    None => break,
                }
            };
            let Some(name) = name_at(group, start) else {
                at += lead.max(1);
                continue;
            };
            let after = start + name.len();
            let rest = group[after..].trim_start();
            let taken = group.len() - rest.len();
            let end = if rest.starts_with("::") {
                Some(taken + 2)
            } else if rest.starts_with(',') || rest.starts_with('}') {
                Some(taken + 1)
            } else if rest.is_empty() {
                Some(group.len())
            } else {
                None
            };
            match end {
                Some(end) => {
                    out.push((open + start, name.to_string()));
                    at = end;
                }
                None => at += lead.max(1),
            }
        }
    }
    out
}

/// The import graph of the top-level modules of `src/` (`x.rs` or `x/`; not `lib.rs` or `main.rs`): module →
/// module → where (`file:line`) it refers to it, outside tests.
fn module_graph() -> BTreeMap<String, BTreeMap<String, Vec<String>>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let src = sources();
    let modules: BTreeSet<String> = src
        .keys()
        .filter(|p| !(p.parent() == Some(root.as_path()) && (p.ends_with("lib.rs") || p.ends_with("main.rs"))))
        .map(|p| feature(p))
        .collect();
    let mut graph: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    for (path, text) in &src {
        let from = feature(path);
        if !modules.contains(&from) {
            continue;
        }
        let text = before_tests(text);
        for (at, to) in references(text) {
            if to != from && modules.contains(&to) {
                let line = text[..at].matches('\n').count() + 1;
                let rel = path.strip_prefix(&root).unwrap().display();
                graph.entry(from.clone()).or_default().entry(to).or_default().push(format!("{rel}:{line}"));
            }
        }
        graph.entry(from).or_default();
    }
    graph
}

/// The strongly connected components of `graph` with more than one module (Tarjan's algorithm).
fn cycles(graph: &BTreeMap<String, BTreeMap<String, Vec<String>>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        graph: &'a BTreeMap<String, BTreeMap<String, Vec<String>>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.graph[v].keys() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.out.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.out
}

#[test]
fn the_reference_reading_matches_the_check() {
    let text = "use crate::{\n    auth::{self, store},\n    db::OrgTx,\n    error::AppError,\n    health, ingest,\n};\n\
                let x = crate::ledger::bounds(tx); // not my_crate::close\nuse crate::{a,b, c};";
    let names: Vec<String> = references(text).into_iter().map(|(_, n)| n).collect();
    assert_eq!(names, ["ledger", "auth", "self", "store", "db", "error", "health", "ingest", "a", "c"]);
}

#[test]
fn top_level_modules_import_one_way() {
    let graph = module_graph();
    assert!(graph.len() >= 30, "the scan found only {} modules: is it still reading src/?", graph.len());
    assert!(
        graph.get("app").is_some_and(|to| to.contains_key("state")),
        "the scan no longer sees `app`'s use of `state`: is it still reading `use crate::{{…}}` groups?"
    );
    let mut problems = Vec::new();
    for component in cycles(&graph) {
        let mut edges = Vec::new();
        for from in &component {
            for (to, at) in &graph[from] {
                if component.contains(to) {
                    edges.push(format!("  {from} -> {to}: {}", at.join(" ")));
                }
            }
        }
        problems.push(format!(
            "{} modules import each other: {}\n{}",
            component.len(),
            component.join(", "),
            edges.join("\n")
        ));
    }
    assert!(
        problems.is_empty(),
        "import cycle among the top-level modules of server/src (docs/architecture.md, \"Layers\"): the shared \
         bottom imports no feature, a feature no composition module; move what a lower module needs down to it\n{}",
        problems.join("\n")
    );
}
