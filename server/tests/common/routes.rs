//! The route scan: every route the server registers (`.route("/path", get(…).post(…))` in server/src) and every
//! page the portal declares (`<Route path=…>` in web/src), read from the source so that a route added anywhere is
//! found by the tests that must cover every route (the cross-tenant suite, the input classes).

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The text of a source file without its unit-test module (routers built in `#[cfg(test)]` are test fixtures).
fn source(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let tests = text.match_indices("#[cfg(test)]").find(|(i, m)| text[i + m.len()..].trim_start().starts_with("mod "));
    match tests {
        Some((i, _)) => text[..i].to_string(),
        None => text,
    }
}

/// The text up to the parenthesis closing the one already open.
fn until_close(s: &str) -> &str {
    let mut depth = 1;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return &s[..i];
                }
            }
            _ => {}
        }
    }
    s
}

/// The HTTP methods an axum method router expression (`get(a).post(b)`) answers.
fn methods_in(expr: &str) -> Vec<&'static str> {
    let mut out = Vec::new();
    for (word, method) in [
        ("get", "GET"),
        ("post", "POST"),
        ("put", "PUT"),
        ("delete", "DELETE"),
        ("patch", "PATCH"),
        ("head", "HEAD"),
        ("options", "OPTIONS"),
        ("any", "ANY"),
    ] {
        let call = format!("{word}(");
        let found = expr
            .match_indices(&call)
            .any(|(i, _)| expr[..i].chars().next_back().is_none_or(|c| !(c.is_alphanumeric() || c == '_')));
        if found {
            out.push(method);
        }
    }
    out
}

/// (method, path, file) of every `.route("PATH", …)` in the server's source.
pub fn server_routes(root: &Path) -> Vec<(String, String, String)> {
    let mut files = Vec::new();
    rust_files(&root.join("server/src"), &mut files);
    let mut out = Vec::new();
    for file in files {
        let text = source(&file);
        let rel = file.strip_prefix(root).unwrap().display().to_string();
        for unsupported in [".nest(", ".nest_service(", ".route_service("] {
            assert!(
                !text.contains(unsupported),
                "{rel} uses `{unsupported}`: the route scan of server/tests/cross_tenant.rs cannot see the paths it \
                 serves; register full paths with `.route(\"/path\", …)` or teach `server_routes` about it"
            );
        }
        for (i, _) in text.match_indices(".route(") {
            let rest = text[i + ".route(".len()..].trim_start();
            let Some(literal) = rest.strip_prefix('"') else {
                panic!(
                    "{rel}: a `.route(` whose path is not a string literal; the cross-tenant route scan needs literals"
                )
            };
            let end = literal.find('"').unwrap();
            let path = &literal[..end];
            let methods = methods_in(until_close(&literal[end + 1..]));
            assert!(!methods.is_empty(), "{rel}: route {path} answers no method the scan recognizes");
            for m in methods {
                out.push((m.to_string(), path.to_string(), rel.clone()));
            }
        }
    }
    out
}

/// One segment expression of a Leptos route path (`StaticSegment("x")`, `ParamSegment("id")`, …) as a path
/// segment (`x`, `{id}`).
fn leptos_segment(expr: &str, rel: &str) -> String {
    let expr = expr.trim();
    let literal = |e: &str| {
        let start = e.find('"').unwrap_or_else(|| panic!("{rel}: cannot read the route segment {e}"));
        let rest = &e[start + 1..];
        rest[..rest.find('"').unwrap()].to_string()
    };
    if expr.starts_with("StaticSegment") {
        literal(expr)
    } else if expr.starts_with("ParamSegment") || expr.starts_with("OptionalParamSegment") {
        format!("{{{}}}", literal(expr))
    } else if expr.starts_with("WildcardSegment") {
        format!("{{*{}}}", literal(expr))
    } else {
        panic!("{rel}: the cross-tenant route scan does not understand the route segment `{expr}`")
    }
}

fn join_segments(segments: &[String]) -> String {
    let parts: Vec<&str> = segments.iter().flat_map(|s| s.split('/')).filter(|s| !s.is_empty()).collect();
    format!("/{}", parts.join("/"))
}

/// (GET, path, file) of every `<Route path=…>` of the portal.
pub fn portal_routes(root: &Path) -> Vec<(String, String, String)> {
    let mut files = Vec::new();
    rust_files(&root.join("web/src"), &mut files);
    let mut out = Vec::new();
    for file in files {
        let text = source(&file);
        let rel = file.strip_prefix(root).unwrap().display().to_string();
        assert!(
            !text.contains("<ParentRoute"),
            "{rel}: nested portal routes (`<ParentRoute`) are not understood by the route scan of \
             server/tests/cross_tenant.rs; teach `portal_routes` to join their paths"
        );
        for (i, _) in text.match_indices("<Route") {
            let tag = &text[i + "<Route".len()..];
            if !tag.starts_with(char::is_whitespace) {
                continue; // <Routes>, <Router>
            }
            let tag = &tag[..tag.find('>').unwrap_or(tag.len())];
            let expr =
                tag.split_once("path=").unwrap_or_else(|| panic!("{rel}: a <Route> without path=")).1.trim_start();
            let path = if let Some(rest) = expr.strip_prefix("path!(") {
                let lit = until_close(rest).trim().trim_matches('"');
                let segs: Vec<String> = lit
                    .split('/')
                    .map(|s| match (s.strip_prefix(':'), s.strip_prefix('*')) {
                        (Some(p), _) => format!("{{{p}}}"),
                        (_, Some(w)) => format!("{{*{w}}}"),
                        _ => s.to_string(),
                    })
                    .collect();
                join_segments(&segs)
            } else if let Some(rest) = expr.strip_prefix('(') {
                let inner = until_close(rest);
                let mut segs = Vec::new();
                let mut depth = 0;
                let mut start = 0;
                for (j, c) in inner.char_indices() {
                    match c {
                        '(' => depth += 1,
                        ')' => depth -= 1,
                        ',' if depth == 0 => {
                            segs.push(&inner[start..j]);
                            start = j + 1;
                        }
                        _ => {}
                    }
                }
                segs.push(&inner[start..]);
                let segs: Vec<String> =
                    segs.into_iter().filter(|s| !s.trim().is_empty()).map(|s| leptos_segment(s, &rel)).collect();
                join_segments(&segs)
            } else {
                let end = expr.find(')').map_or(expr.len(), |e| e + 1);
                join_segments(&[leptos_segment(&expr[..end], &rel)])
            };
            out.push(("GET".to_string(), path, rel.clone()));
        }
    }
    out
}
