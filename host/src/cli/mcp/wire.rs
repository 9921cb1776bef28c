//! JSON-RPC messages as the proxy relays them: top-level fields in the
//! order they were sent, each value's bytes kept as they came
//! ([`RawValue`]), so a message the proxy rewrites (an id, a result's
//! `_meta`) is otherwise byte for byte the one it read: key order, number
//! spellings and escapes deeper down are untouched.
//!
//! [`strict`] (`cli/strict_json.rs`, shared with `effects serve`) is the
//! client side's gate: a line is read only if every parser would read it
//! the same way, so nothing a more lenient parser upstream accepts (a
//! duplicate key, whose first or last copy parsers disagree on; invalid
//! UTF-8; a lone surrogate) can smuggle a call past the claim.

use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

pub(super) use crate::cli::strict_json::strict;

/// One message's top-level fields, in order.
#[derive(Debug)]
pub struct Message {
    fields: Vec<(String, Box<RawValue>)>,
}

/// A line: one message, or a batch of them.
pub enum Line {
    One(Message),
    Batch(Vec<Message>),
}

impl Line {
    /// Reads `bytes` as a message or a batch (of objects).
    pub fn parse(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        let raw: &RawValue = serde_json::from_slice(bytes)?;
        if raw.get().starts_with('[') {
            let items: Vec<&RawValue> = serde_json::from_str(raw.get())?;
            let batch = items.into_iter().map(Message::of).collect::<Result<_, _>>()?;
            Ok(Line::Batch(batch))
        } else {
            Ok(Line::One(Message::of(raw)?))
        }
    }
}

impl Message {
    /// The object `raw`, field by field.
    pub fn of(raw: &RawValue) -> Result<Self, serde_json::Error> {
        Ok(Self { fields: serde_json::from_str::<Fields>(raw.get())?.0 })
    }

    /// A field's raw value.
    pub fn get(&self, key: &str) -> Option<&RawValue> {
        self.fields.iter().find(|(k, _)| k == key).map(|(_, v)| &**v)
    }

    /// The top-level keys, in order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.fields.iter().map(|(key, _)| key.as_str())
    }

    /// A field that is a string.
    pub fn text(&self, key: &str) -> Option<String> {
        self.get(key).and_then(|raw| serde_json::from_str(raw.get()).ok())
    }

    /// The method of a request or notification.
    pub fn method(&self) -> Option<String> {
        self.text("method")
    }

    /// Sets `key` to `value`, in place where it was, else last.
    pub fn set(&mut self, key: &str, value: Box<RawValue>) {
        match self.fields.iter_mut().find(|(k, _)| k == key) {
            Some((_, slot)) => *slot = value,
            None => self.fields.push((key.to_owned(), value)),
        }
    }

    /// The message as one JSON object.
    pub fn to_raw(&self) -> Box<RawValue> {
        let mut text = String::from("{");
        for (i, (key, value)) in self.fields.iter().enumerate() {
            if i > 0 {
                text.push(',');
            }
            text.push_str(&serde_json::to_string(key).expect("a string serializes"));
            text.push(':');
            text.push_str(value.get());
        }
        text.push('}');
        RawValue::from_string(text).expect("fields of valid JSON make valid JSON")
    }
}

/// `value` as a raw JSON value.
pub fn raw(value: &impl serde::Serialize) -> Box<RawValue> {
    serde_json::value::to_raw_value(value).expect("a JSON value serializes")
}

/// Messages as one line: a batch as an array, one message alone.
pub fn line(messages: &[Box<RawValue>], batch: bool) -> Vec<u8> {
    let parts: Vec<&str> = messages.iter().map(|m| m.get()).collect();
    let mut text = if batch { format!("[{}]", parts.join(",")) } else { parts.concat() };
    text.push('\n');
    text.into_bytes()
}

/// An object's fields in order (no check for duplicates: see [`strict`]).
struct Fields(Vec<(String, Box<RawValue>)>);

impl<'de> Deserialize<'de> for Fields {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Object;
        impl<'de> Visitor<'de> for Object {
            type Value = Fields;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Fields, A::Error> {
                let mut fields = Vec::new();
                while let Some((key, value)) = map.next_entry::<String, Box<RawValue>>()? {
                    fields.push((key, value));
                }
                Ok(Fields(fields))
            }
        }
        deserializer.deserialize_map(Object)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rewritten_message_keeps_every_other_byte() {
        let sent = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"z":1.50,"a":"\u00e9","n":123456789012345678901234}}"#;
        let Line::One(mut message) = Line::parse(sent).unwrap() else { panic!("one message") };
        message.set("id", raw(&"ep-1"));
        let out = message.to_raw();
        assert_eq!(
            out.get(),
            r#"{"jsonrpc":"2.0","id":"ep-1","method":"tools/call","params":{"z":1.50,"a":"\u00e9","n":123456789012345678901234}}"#
        );
        assert_eq!(message.method().as_deref(), Some("tools/call"));
    }

    #[test]
    fn a_batch_is_read_message_by_message() {
        let Line::Batch(batch) = Line::parse(br#"[{"id":1,"method":"a"},{"id":2,"method":"b"}]"#).unwrap()
        else {
            panic!("a batch")
        };
        let methods: Vec<_> = batch.iter().map(|m| m.method().unwrap()).collect();
        assert_eq!(methods, ["a", "b"]);
        let out: Vec<_> = batch.iter().map(Message::to_raw).collect();
        assert_eq!(line(&out, true), b"[{\"id\":1,\"method\":\"a\"},{\"id\":2,\"method\":\"b\"}]\n");
    }
}
