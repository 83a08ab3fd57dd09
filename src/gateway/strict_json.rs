//! The one JSON reader for messages from a run: a JSON-RPC message is parsed into a value
//! with every object key unique and nesting bounded, so what the gateway checked is the
//! only reading of the message (a duplicate key could mean one thing to Airlock and
//! another to an upstream that keeps the first). What is forwarded is this value,
//! re-serialized, never the original bytes.

use std::cell::Cell;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Deepest nesting of arrays and objects accepted.
pub const MAX_DEPTH: usize = 64;

/// Most JSON values (each scalar, array and object counts one) in an answer from a
/// connector's upstream: a value in memory is several times its text, so a 16 MiB answer
/// of `[0,0,...]` would cost half a gigabyte.
pub const MAX_ANSWER_VALUES: usize = 1 << 18;

/// Why a message was refused. Names no value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StrictError {
    Syntax,
    DuplicateKey,
    TooDeep,
    TooMany,
}

impl fmt::Display for StrictError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StrictError::Syntax => "not valid JSON",
            StrictError::DuplicateKey => "an object has the same key twice",
            StrictError::TooDeep => "nested deeper than 64 levels",
            StrictError::TooMany => "more than 262144 values",
        })
    }
}

/// Parse `bytes` as one JSON value, strictly (see the module doc).
pub fn parse(bytes: &[u8]) -> Result<Value, StrictError> {
    parse_bounded(bytes, usize::MAX)
}

/// [`parse`], refusing a value of more than [`MAX_ANSWER_VALUES`] values before it is
/// built: for what a connector's upstream sends.
pub fn parse_answer(bytes: &[u8]) -> Result<Value, StrictError> {
    parse_bounded(bytes, MAX_ANSWER_VALUES)
}

fn parse_bounded(bytes: &[u8], max_values: usize) -> Result<Value, StrictError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let left = Cell::new(max_values);
    let v = Seed {
        depth: 0,
        left: &left,
    }
    .deserialize(&mut de)
    .map_err(|e| classify(&e))?;
    de.end().map_err(|_| StrictError::Syntax)?;
    Ok(v)
}

fn classify(e: &serde_json::Error) -> StrictError {
    let msg = e.to_string();
    if msg.starts_with(DUPLICATE) {
        StrictError::DuplicateKey
    } else if msg.starts_with(DEEP) {
        StrictError::TooDeep
    } else if msg.starts_with(MANY) {
        StrictError::TooMany
    } else {
        StrictError::Syntax
    }
}

const DUPLICATE: &str = "airlock: duplicate key";
const DEEP: &str = "airlock: too deep";
const MANY: &str = "airlock: too many values";

struct Seed<'a> {
    depth: usize,
    /// Values still allowed in the whole message.
    left: &'a Cell<usize>,
}

impl<'de> DeserializeSeed<'de> for Seed<'_> {
    type Value = Value;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        match self.left.get().checked_sub(1) {
            Some(n) => self.left.set(n),
            None => return Err(de::Error::custom(MANY)),
        }
        d.deserialize_any(self)
    }
}

impl<'a> Seed<'a> {
    fn deeper<E: de::Error>(&self) -> Result<Seed<'a>, E> {
        if self.depth >= MAX_DEPTH {
            return Err(E::custom(DEEP));
        }
        Ok(Seed {
            depth: self.depth + 1,
            left: self.left,
        })
    }
}

impl<'de> Visitor<'de> for Seed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        serde_json::Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("not a finite number"))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let inner = self.deeper()?;
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(Seed {
            depth: inner.depth,
            left: inner.left,
        })? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let inner = self.deeper()?;
        let mut out = Map::new();
        while let Some(k) = map.next_key::<String>()? {
            let v = map.next_value_seed(Seed {
                depth: inner.depth,
                left: inner.left,
            })?;
            if out.insert(k, v).is_some() {
                return Err(de::Error::custom(DUPLICATE));
            }
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicates_depth_and_trailing_bytes_are_refused() {
        assert_eq!(
            parse(br#"{"a":1,"b":{"c":[1,2,{"d":null}]}}"#).unwrap()["b"]["c"][2]["d"],
            Value::Null
        );
        assert_eq!(parse(br#"{"a":1,"a":2}"#), Err(StrictError::DuplicateKey));
        assert_eq!(
            parse(br#"{"x":{"name":"a","name":"b"}}"#),
            Err(StrictError::DuplicateKey)
        );
        let deep = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
        assert_eq!(parse(deep.as_bytes()), Err(StrictError::TooDeep));
        let ok = "[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH);
        assert!(parse(ok.as_bytes()).is_ok());
        assert_eq!(parse(b"{} {}"), Err(StrictError::Syntax));
        assert_eq!(parse(b"{\"a\":"), Err(StrictError::Syntax));
        let many = format!("[{}0]", "0,".repeat(MAX_ANSWER_VALUES));
        assert_eq!(parse_answer(many.as_bytes()), Err(StrictError::TooMany));
        assert!(parse(many.as_bytes()).is_ok());
        let enough = format!("[{}0]", "0,".repeat(MAX_ANSWER_VALUES - 2));
        assert!(parse_answer(enough.as_bytes()).is_ok());
        // A key spelled with an escape is the same key.
        assert_eq!(
            parse(br#"{"name":1,"n\u0061me":2}"#),
            Err(StrictError::DuplicateKey)
        );
    }
}
