//! A JSON value read into a typed request strictly: serde's derived structs also accept the sequence form
//! (`{"inner": [1, "x"]}` read positionally into `Inner { amount, name }`), which no published schema
//! describes and no client means. [`Strict`] walks a parsed [`Value`] and refuses an array wherever a struct
//! is expected, at every depth; everything else reads as `serde_json` reads it.

use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, IntoDeserializer, MapAccess, SeqAccess, Unexpected, VariantAccess,
    Visitor,
};
use serde_json::{Map, Value};

/// A deserializer over a parsed JSON value that takes a struct only from a JSON object.
pub struct Strict<'de>(pub &'de Value);

type Error = serde_json::Error;

fn unexpected(v: &Value) -> Unexpected<'_> {
    match v {
        Value::Null => Unexpected::Unit,
        Value::Bool(b) => Unexpected::Bool(*b),
        Value::Number(_) => Unexpected::Other("number"),
        Value::String(s) => Unexpected::Str(s),
        Value::Array(_) => Unexpected::Seq,
        Value::Object(_) => Unexpected::Map,
    }
}

struct Seq<'de>(std::slice::Iter<'de, Value>);

impl<'de> SeqAccess<'de> for Seq<'de> {
    type Error = Error;
    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, Error> {
        self.0.next().map(|v| seed.deserialize(Strict(v))).transpose()
    }
    fn size_hint(&self) -> Option<usize> {
        Some(self.0.len())
    }
}

struct Members<'de> {
    iter: serde_json::map::Iter<'de>,
    value: Option<&'de Value>,
}

impl<'de> MapAccess<'de> for Members<'de> {
    type Error = Error;
    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, Error> {
        match self.iter.next() {
            Some((k, v)) => {
                self.value = Some(v);
                seed.deserialize(k.as_str().into_deserializer()).map(Some)
            }
            None => Ok(None),
        }
    }
    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        match self.value.take() {
            Some(v) => seed.deserialize(Strict(v)),
            None => Err(de::Error::custom("a value is read before its key")),
        }
    }
    fn size_hint(&self) -> Option<usize> {
        Some(self.iter.len())
    }
}

fn members(map: &Map<String, Value>) -> Members<'_> {
    Members { iter: map.iter(), value: None }
}

/// An externally tagged enum: `"variant"` or `{"variant": content}`.
struct Variant<'de> {
    name: &'de str,
    content: Option<&'de Value>,
}

impl<'de> EnumAccess<'de> for Variant<'de> {
    type Error = Error;
    type Variant = Self;
    fn variant_seed<V: DeserializeSeed<'de>>(self, seed: V) -> Result<(V::Value, Self), Error> {
        let name: de::value::BorrowedStrDeserializer<'de, Error> = de::value::BorrowedStrDeserializer::new(self.name);
        Ok((seed.deserialize(name)?, self))
    }
}

impl<'de> VariantAccess<'de> for Variant<'de> {
    type Error = Error;
    fn unit_variant(self) -> Result<(), Error> {
        match self.content {
            None | Some(Value::Null) => Ok(()),
            Some(v) => Err(de::Error::invalid_type(unexpected(v), &"a unit variant")),
        }
    }
    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, Error> {
        match self.content {
            Some(v) => seed.deserialize(Strict(v)),
            None => Err(de::Error::invalid_type(Unexpected::UnitVariant, &"a newtype variant")),
        }
    }
    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, Error> {
        match self.content {
            Some(Value::Array(items)) => visitor.visit_seq(Seq(items.iter())),
            Some(v) => Err(de::Error::invalid_type(unexpected(v), &"a tuple variant")),
            None => Err(de::Error::invalid_type(Unexpected::UnitVariant, &"a tuple variant")),
        }
    }
    fn struct_variant<V: Visitor<'de>>(self, _fields: &'static [&'static str], visitor: V) -> Result<V::Value, Error> {
        match self.content {
            Some(Value::Object(map)) => visitor.visit_map(members(map)),
            Some(v) => Err(de::Error::invalid_type(unexpected(v), &"a JSON object")),
            None => Err(de::Error::invalid_type(Unexpected::UnitVariant, &"a JSON object")),
        }
    }
}

macro_rules! as_serde_json_reads {
    ($($method:ident)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
            self.0.$method(visitor)
        }
    )*};
}

impl<'de> Deserializer<'de> for Strict<'de> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Array(items) => visitor.visit_seq(Seq(items.iter())),
            Value::Object(map) => visitor.visit_map(members(map)),
            other => other.deserialize_any(visitor),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(self, _name: &'static str, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.0 {
            Value::Object(map) => visitor.visit_map(members(map)),
            other => Err(de::Error::invalid_type(unexpected(other), &"a JSON object")),
        }
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Object(map) => visitor.visit_map(members(map)),
            other => Err(de::Error::invalid_type(unexpected(other), &"a JSON object")),
        }
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Array(items) => visitor.visit_seq(Seq(items.iter())),
            other => Err(de::Error::invalid_type(unexpected(other), &"a JSON array")),
        }
    }

    fn deserialize_tuple<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.0 {
            Value::String(name) => visitor.visit_enum(Variant { name, content: None }),
            Value::Object(map) if map.len() == 1 => match map.iter().next() {
                Some((name, content)) => visitor.visit_enum(Variant { name, content: Some(content) }),
                None => Err(de::Error::invalid_length(0, &"an object with one member")),
            },
            other => Err(de::Error::invalid_type(unexpected(other), &"a variant name or an object with one member")),
        }
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(self, _name: &'static str, visitor: V) -> Result<V::Value, Error> {
        self.0.deserialize_unit(visitor)
    }

    as_serde_json_reads! {
        deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64 deserialize_i128
        deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64 deserialize_u128 deserialize_f32
        deserialize_f64 deserialize_char deserialize_str deserialize_string deserialize_bytes
        deserialize_byte_buf deserialize_unit deserialize_identifier deserialize_ignored_any
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Inner {
        amount: u32,
        #[serde(default)]
        name: Option<String>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "snake_case")]
    enum Kind {
        Plain,
        Boxed(Inner),
        Shaped { inner: Inner },
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Outer {
        inner: Option<Inner>,
        #[serde(default)]
        list: Vec<Inner>,
        #[serde(default)]
        kinds: Vec<Kind>,
        #[serde(default)]
        tags: std::collections::BTreeMap<String, u8>,
    }

    fn read(v: Value) -> Result<Outer, String> {
        serde_path_to_error::deserialize(Strict(&v)).map_err(|e| format!("{}: {}", e.path(), e.inner()))
    }

    #[test]
    fn the_object_form_reads_as_serde_json_reads_it() {
        let v = serde_json::json!({
            "inner": {"amount": 3, "name": "x"},
            "list": [{"amount": 1}, {"amount": 2, "name": null}],
            "kinds": ["plain", {"boxed": {"amount": 4}}, {"shaped": {"inner": {"amount": 5}}}],
            "tags": {"a": 1},
        });
        let strict = read(v.clone()).unwrap();
        assert_eq!(strict, serde_json::from_value::<Outer>(v).unwrap());
        assert_eq!(strict.kinds[2], Kind::Shaped { inner: Inner { amount: 5, name: None } });
    }

    #[test]
    fn a_struct_sent_as_an_array_is_refused_at_every_depth_naming_where() {
        // serde_json itself reads each of these positionally.
        let nested = serde_json::json!({"inner": [3, "x"]});
        assert!(serde_json::from_value::<Outer>(nested.clone()).is_ok());
        let err = read(nested).unwrap_err();
        assert!(err.starts_with("inner: invalid type: sequence, expected a JSON object"), "{err}");
        let err = read(serde_json::json!({"inner": null, "list": [{"amount": 1}, [2]]})).unwrap_err();
        assert!(err.starts_with("list[1]: invalid type: sequence"), "{err}");
        let err = read(serde_json::json!({"inner": null, "kinds": [{"shaped": [[5]]}]})).unwrap_err();
        assert!(err.contains("sequence"), "{err}");
        let err = read(serde_json::json!({"inner": null, "kinds": [{"shaped": {"inner": [5]}}]})).unwrap_err();
        assert!(err.contains("sequence"), "{err}");
        assert!(read(serde_json::json!([null])).unwrap_err().contains("sequence"));
    }

    #[test]
    fn wrong_types_unknown_fields_and_missing_fields_are_still_named() {
        let err = read(serde_json::json!({"inner": {"amount": "3"}})).unwrap_err();
        assert!(err.starts_with("inner.amount: invalid type: string"), "{err}");
        let err = read(serde_json::json!({"inner": {"amount": 3, "other": 1}})).unwrap_err();
        assert!(err.contains("unknown field `other`"), "{err}");
        let err = read(serde_json::json!({"inner": {}})).unwrap_err();
        assert!(err.contains("missing field `amount`"), "{err}");
        let err = read(serde_json::json!({"inner": null, "tags": {"a": 300}})).unwrap_err();
        assert!(err.starts_with("tags.a: invalid value"), "{err}");
    }
}
