//! What an operation takes, read from its handler's signature: each extractor says what it adds to the document
//! ([`Describe`]) — `Caller<N>` the credential and the answers every authenticated call may get (401, 403, 429,
//! 503), `Params<T>` one query parameter per field of `T` with that field's schema, `PathParams<T>` the path's
//! parameters, `JsonBody<T>` the request body's schema and 413/422 — so the published parameters, bodies and
//! statuses are the ones the code reads, and cannot drift from it.
//!
//! Each feature lists its handlers with [`inputs`] (a handler stays private to its feature; the feature hands out
//! only what its signature describes), and `crate::describe::document` joins them to the operations' summaries and answers.

use std::collections::BTreeSet;

use axum::{
    body::Bytes,
    extract::State,
    http::{HeaderMap, Uri},
};
use gpuledger_api::schemars::{JsonSchema, SchemaGenerator};
use serde_json::Value;

use crate::{
    http::{Caller, JsonBody, Need, OptionalJsonBody, Params, PathParams},
    state::AppState,
};

/// A schema generator's entry point for one contract type.
pub type SchemaOf = fn(&mut SchemaGenerator) -> Value;

/// The schema of `T` itself (an object's properties, not a reference to it): what parameters are made of.
pub fn object_of<T: JsonSchema>(g: &mut SchemaGenerator) -> Value {
    T::json_schema(g).to_value()
}

/// The reference to `T` among the components (added there with what it refers to).
fn reference_of<T: JsonSchema>(g: &mut SchemaGenerator) -> Value {
    g.subschema_for::<T>().to_value()
}

/// What one operation's handler takes, as its extractors describe it.
#[derive(Default)]
pub struct Inputs {
    /// `get`, `post`, … as in the document.
    pub method: &'static str,
    /// The path template.
    pub path: &'static str,
    /// Needs a credential with this capability (`None`: public, or the handler authenticates itself).
    pub capability: Option<&'static str>,
    /// The query parameters: the fields of this type.
    pub query: Option<SchemaOf>,
    /// The path parameters: the fields of this type.
    pub path_params: Option<SchemaOf>,
    /// The JSON body's type, and whether it must be present.
    pub body: Option<(SchemaOf, bool)>,
    /// Statuses the extractors may answer with.
    pub errors: BTreeSet<u16>,
}

/// What an extractor adds to the description of the operation it serves.
pub trait Describe {
    /// Adds to `inputs`.
    fn describe(_inputs: &mut Inputs) {}
}

impl Describe for State<AppState> {}
impl Describe for HeaderMap {}
impl Describe for Uri {}
/// A body the handler reads itself (NDJSON, a gzip'd batch): the operation describes it.
impl Describe for Bytes {}
/// The whole request, read by the handler itself (after it checked the credential): the operation describes it.
impl Describe for axum::extract::Request {}

impl<N: Need> Describe for Caller<N> {
    fn describe(inputs: &mut Inputs) {
        inputs.capability = Some(N::CAP.needs());
        // No or a bad credential; one without the capability, or the organization suspended; the organization's
        // request rate; the database unavailable.
        inputs.errors.extend([401, 403, 429, 503]);
    }
}

impl<T: JsonSchema> Describe for Params<T> {
    fn describe(inputs: &mut Inputs) {
        inputs.query = Some(object_of::<T>);
        inputs.errors.insert(422);
    }
}

impl<T: JsonSchema> Describe for PathParams<T> {
    fn describe(inputs: &mut Inputs) {
        inputs.path_params = Some(object_of::<T>);
        inputs.errors.insert(422);
    }
}

impl<T: JsonSchema> Describe for JsonBody<T> {
    fn describe(inputs: &mut Inputs) {
        inputs.body = Some((reference_of::<T>, true));
        inputs.errors.extend([413, 422]);
    }
}

impl<T: JsonSchema> Describe for OptionalJsonBody<T> {
    fn describe(inputs: &mut Inputs) {
        inputs.body = Some((reference_of::<T>, false));
        inputs.errors.extend([413, 422]);
    }
}

/// A handler whose arguments are all [`Describe`] extractors (`A` is their tuple, `R` what it returns).
pub trait HandlerInputs<A, R> {
    /// Adds what each argument describes.
    fn describe(inputs: &mut Inputs);
}

macro_rules! handler_inputs {
    ($($t:ident),*) => {
        impl<F, R, $($t: Describe),*> HandlerInputs<($($t,)*), R> for F
        where
            F: FnOnce($($t),*) -> R,
        {
            fn describe(_inputs: &mut Inputs) {
                $($t::describe(_inputs);)*
            }
        }
    };
}

handler_inputs!();
handler_inputs!(T1);
handler_inputs!(T1, T2);
handler_inputs!(T1, T2, T3);
handler_inputs!(T1, T2, T3, T4);
handler_inputs!(T1, T2, T3, T4, T5);
handler_inputs!(T1, T2, T3, T4, T5, T6);
handler_inputs!(T1, T2, T3, T4, T5, T6, T7);

/// What `handler`, serving `method` at `path`, takes.
pub fn inputs<H: HandlerInputs<A, R>, A, R>(method: &'static str, path: &'static str, _handler: H) -> Inputs {
    let mut inputs = Inputs { method, path, ..Inputs::default() };
    H::describe(&mut inputs);
    inputs
}

/// The parameter objects for the fields of an object schema (`location`: `query` or `path`): one per property,
/// required as the type says (path parameters always), its schema without the `null` an `Option` adds (a query
/// string has no null), its description from the field's documentation.
pub fn parameters(object: &Value, location: &str) -> Vec<Value> {
    let required: BTreeSet<&str> =
        object["required"].as_array().map(|r| r.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    let Some(properties) = object["properties"].as_object() else { return Vec::new() };
    properties
        .iter()
        .map(|(name, schema)| {
            let mut schema = without_null(schema.clone());
            let description = schema.as_object_mut().and_then(|s| s.remove("description"));
            let mut p = serde_json::json!({
                "name": name,
                "in": location,
                "required": location == "path" || required.contains(name.as_str()),
                "schema": schema,
            });
            if let (Some(d), Some(p)) = (description, p.as_object_mut()) {
                p.insert("description".into(), d);
            }
            p
        })
        .collect()
}

/// A schema without its `null` alternative: `{"type": ["string", "null"]}` → `{"type": "string"}`,
/// `{"anyOf": [X, {"type": "null"}]}` → `X` (with the outer description kept).
fn without_null(mut schema: Value) -> Value {
    let Some(obj) = schema.as_object_mut() else { return schema };
    if let Some(Value::Array(types)) = obj.get("type") {
        let rest: Vec<Value> = types.iter().filter(|t| *t != "null").cloned().collect();
        let single = (rest.len() == 1).then(|| rest[0].clone());
        obj.insert("type".into(), single.unwrap_or(Value::Array(rest)));
    }
    if let Some(Value::Array(any)) = obj.get("anyOf") {
        let rest: Vec<Value> = any.iter().filter(|s| s.get("type").is_none_or(|t| t != "null")).cloned().collect();
        if rest.len() == 1 {
            let mut inner = rest[0].clone();
            obj.remove("anyOf");
            if let Some(inner) = inner.as_object_mut() {
                for (k, v) in obj.iter() {
                    inner.entry(k.clone()).or_insert_with(|| v.clone());
                }
            }
            return inner;
        }
        obj.insert("anyOf".into(), Value::Array(rest));
    }
    // `enum` lists with the null an `Option` of a unit-variant enum adds.
    if let Some(Value::Array(values)) = obj.get("enum") {
        let rest: Vec<Value> = values.iter().filter(|v| !v.is_null()).cloned().collect();
        obj.insert("enum".into(), Value::Array(rest));
    }
    schema
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use serde_json::json;

    use super::*;

    #[test]
    fn an_option_loses_its_null_in_a_parameter() {
        assert_eq!(
            without_null(json!({"type": ["integer", "null"], "minimum": 1})),
            json!({"type": "integer", "minimum": 1})
        );
        assert_eq!(
            without_null(json!({"anyOf": [{"$ref": "#/components/schemas/X"}, {"type": "null"}], "description": "d"})),
            json!({"$ref": "#/components/schemas/X", "description": "d"})
        );
        assert_eq!(without_null(json!({"enum": ["a", null]})), json!({"enum": ["a"]}));
    }
}
