//! The streaming parser: one pass over the bytes that keeps only what the wire format
//! names, so hostile input costs at most a small multiple of its own size.
//!
//! Each object is read against a [`Shape`], its fixed list of fields. A key the shape
//! does not name, a repeated key, and a container where a scalar belongs (or a
//! non-object where an object belongs) are refused where they are met: nothing after
//! them is read. Everything else — `type`, `v`, missing fields, codes, UUID spellings,
//! cross-field checks, validation — is judged after the whole document has been read
//! (see `decode.rs`), in the same order as before this parser streamed. No JSON tree is
//! ever built: scalars are kept as they come (strings borrowed from the input when they
//! have no escapes), and the only skipped values are those of a top-level non-object,
//! which is refused anyway.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Number;

use super::encode::write_str;
use super::{DecodeError, MAX_DECODE_BYTES, MAX_FOUND_BYTES};

/// What a field holds on the wire; it fixes the error for a value of the wrong shape.
#[derive(Debug, Clone, Copy)]
pub(super) enum Kind {
    /// A canonical UUID string (absent means nil).
    Uuid,
    /// A string.
    Str,
    /// An RFC 3339 timestamp string.
    Time,
    /// A closed enum's numeric code.
    Code,
    /// A boolean.
    Bool,
    /// A 32-bit integer.
    I32,
    /// The document's `type`.
    Type,
    /// The document's `v`.
    Version,
    /// A nested object of the given shape.
    Object(&'static Shape),
}

/// The fields an object may hold.
#[derive(Debug)]
pub(super) struct Shape {
    /// Every field the object may hold, with its kind.
    pub(super) fields: &'static [(&'static str, Kind)],
    /// The path prefix of this object's keys in errors (`""` or `"notification."`).
    pub(super) prefix: &'static str,
}

/// A JSON scalar as read.
#[derive(Debug)]
pub(super) enum Scalar<'de> {
    Null,
    Bool(bool),
    Number(Number),
    /// Borrowed from the input unless the string has escapes.
    Str(Cow<'de, str>),
}

/// A field's value as read: a scalar, or a nested object of a known shape.
#[derive(Debug)]
pub(super) enum Captured<'de> {
    Scalar(Scalar<'de>),
    Object(Fields<'de>),
}

/// The fields of one object, as read.
#[derive(Debug)]
pub(super) struct Fields<'de> {
    shape: &'static Shape,
    /// One slot per field of the shape, in the shape's order.
    values: Vec<Option<Captured<'de>>>,
}

impl<'de> Fields<'de> {
    /// The path prefix of this object's keys.
    pub(super) fn prefix(&self) -> &'static str {
        self.shape.prefix
    }

    /// Takes the value of `name`, if present.
    pub(super) fn take(&mut self, name: &str) -> Option<Captured<'de>> {
        let i = self.shape.fields.iter().position(|(n, _)| *n == name)?;
        self.values.get_mut(i)?.take()
    }

    /// The names of the fields present and not yet taken.
    pub(super) fn present(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.shape
            .fields
            .iter()
            .zip(&self.values)
            .filter(|(_, v)| v.is_some())
            .map(|((name, _), _)| *name)
    }
}

/// Reads `bytes` as one JSON object of `shape`.
pub(super) fn parse<'de>(
    bytes: &'de [u8],
    shape: &'static Shape,
) -> Result<Fields<'de>, DecodeError> {
    if bytes.len() > MAX_DECODE_BYTES {
        return Err(DecodeError::TooLarge {
            len: bytes.len(),
            max: MAX_DECODE_BYTES,
        });
    }
    // A refusal made inside the parse is parked here; serde_json carries only a marker.
    let mut refused = None;
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let doc = DocSeed {
        shape,
        refused: &mut refused,
    }
    .deserialize(&mut de)
    .and_then(|doc| de.end().map(|()| doc));
    match doc {
        Ok(Some(fields)) => Ok(fields),
        Ok(None) => Err(DecodeError::NotAnObject { field: "" }),
        Err(e) => Err(refused.unwrap_or_else(|| DecodeError::Syntax {
            message: e.to_string(),
        })),
    }
}

/// Parks `err` and returns the marker error that unwinds the parse.
fn refuse<E: de::Error>(refused: &mut Option<DecodeError>, err: DecodeError) -> E {
    *refused = Some(err);
    // Not the error's text: that can be as long as the input (an unknown key's name).
    E::custom("refused")
}

impl Kind {
    /// The error for a value of the wrong JSON type in a field of this kind; `found`
    /// renders the value for the kinds whose error quotes it.
    pub(super) fn wrong_type(
        self,
        field: &'static str,
        found: impl FnOnce() -> String,
    ) -> DecodeError {
        let invalid = |expected| DecodeError::InvalidValue { field, expected };
        match self {
            Self::Uuid => invalid("a UUID string"),
            Self::Str | Self::Time => invalid("a string"),
            Self::Bool => invalid("a boolean"),
            Self::I32 => invalid("a 32-bit integer"),
            Self::Type => DecodeError::UnknownType { found: found() },
            Self::Version => DecodeError::UnsupportedVersion { found: found() },
            Self::Code => DecodeError::UnknownCode {
                field,
                found: found(),
            },
            Self::Object(_) => DecodeError::NotAnObject { field },
        }
    }

    fn quotes_found(self) -> bool {
        matches!(self, Self::Type | Self::Version | Self::Code)
    }
}

/// The whole document: `Some` fields for an object, `None` for any other value.
struct DocSeed<'r> {
    shape: &'static Shape,
    refused: &'r mut Option<DecodeError>,
}

impl<'de> DeserializeSeed<'de> for DocSeed<'_> {
    type Value = Option<Fields<'de>>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for DocSeed<'_> {
    type Value = Option<Fields<'de>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON document")
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        read_fields(map, self.shape, self.refused).map(Some)
    }
    // A non-object document is refused once it has been read through, so that a
    // malformed one is still a syntax error. Skipping keeps nothing.
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }
    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

/// Reads an object's entries against `shape`.
fn read_fields<'de, A: MapAccess<'de>>(
    mut map: A,
    shape: &'static Shape,
    refused: &mut Option<DecodeError>,
) -> Result<Fields<'de>, A::Error> {
    let mut values: Vec<Option<Captured<'de>>> = shape.fields.iter().map(|_| None).collect();
    while let Some(i) = map.next_key_seed(KeySeed {
        shape,
        refused: &mut *refused,
    })? {
        let (Some(&(name, kind)), Some(slot)) = (shape.fields.get(i), values.get_mut(i)) else {
            // ok: KeySeed only returns positions within the shape.
            return Err(de::Error::custom("field position out of range"));
        };
        if slot.is_some() {
            return Err(de::Error::custom(format_args!("duplicate key `{name}`")));
        }
        *slot = Some(map.next_value_seed(ValueSeed {
            name,
            kind,
            refused: &mut *refused,
        })?);
    }
    Ok(Fields { shape, values })
}

/// An object key: its position in the shape, or a refusal naming it.
struct KeySeed<'r> {
    shape: &'static Shape,
    refused: &'r mut Option<DecodeError>,
}

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = usize;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<usize, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for KeySeed<'_> {
    type Value = usize;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }
    fn visit_str<E: de::Error>(self, key: &str) -> Result<usize, E> {
        match self.shape.fields.iter().position(|(name, _)| *name == key) {
            Some(i) => Ok(i),
            None => Err(refuse(
                self.refused,
                DecodeError::UnknownField {
                    field: format!("{}{key}", self.shape.prefix),
                },
            )),
        }
    }
}

/// A field's value, read according to its kind.
struct ValueSeed<'r> {
    name: &'static str,
    kind: Kind,
    refused: &'r mut Option<DecodeError>,
}

impl<'de> DeserializeSeed<'de> for ValueSeed<'_> {
    type Value = Captured<'de>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl ValueSeed<'_> {
    /// Refuses a container in this field. The kinds whose error quotes the value read
    /// at most [`MAX_FOUND_BYTES`] of it first.
    fn refuse_container<E: de::Error>(
        self,
        transcribe: impl FnOnce(&mut Transcript) -> Result<(), E>,
    ) -> Result<Captured<'static>, E> {
        let mut t = Transcript::default();
        if self.kind.quotes_found() {
            match transcribe(&mut t) {
                Err(e) if !t.full => return Err(e),
                _ => {}
            }
        }
        let err = self.kind.wrong_type(self.name, || t.finish());
        Err(refuse(self.refused, err))
    }
}

impl<'de> Visitor<'de> for ValueSeed<'_> {
    type Value = Captured<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a value for `{}`", self.name)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(Captured::Scalar(Scalar::Bool(v)))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Captured::Scalar(Scalar::Number(v.into())))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Captured::Scalar(Scalar::Number(v.into())))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
        // JSON has no non-finite numbers; `serde_json::Value` would hold one as null.
        Ok(Captured::Scalar(
            Number::from_f64(v).map_or(Scalar::Null, Scalar::Number),
        ))
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Captured::Scalar(Scalar::Str(Cow::Borrowed(v))))
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Captured::Scalar(Scalar::Str(Cow::Owned(v.to_owned()))))
    }
    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(Captured::Scalar(Scalar::Str(Cow::Owned(v))))
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Captured::Scalar(Scalar::Null))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        if let Kind::Object(shape) = self.kind {
            return read_fields(map, shape, self.refused).map(Captured::Object);
        }
        self.refuse_container(|t| transcribe_map(t, map))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        self.refuse_container(|t| transcribe_seq(t, seq))
    }
}

// ---------------------------------------------------------------------------------------
// Quoting a refused value

/// A refused value rendered as compact JSON, cut after [`MAX_FOUND_BYTES`].
#[derive(Default)]
pub(super) struct Transcript {
    out: String,
    /// The value did not fit: the transcript is cut, and reading stopped.
    full: bool,
}

impl Transcript {
    /// Renders a scalar as `serde_json::Value` would.
    pub(super) fn of(s: &Scalar<'_>) -> String {
        let mut t = Self::default();
        t.scalar(s);
        t.finish()
    }

    /// Appends `s`, or as much as fits; returns whether there is room left.
    fn push(&mut self, s: &str) -> bool {
        let room = (MAX_FOUND_BYTES + 1).saturating_sub(self.out.len());
        if s.len() >= room {
            self.out.push_str(prefix(s, room));
            self.full = true;
        } else {
            self.out.push_str(s);
        }
        !self.full
    }

    fn json_str(&mut self, s: &str) -> bool {
        // Escaping never shortens a string, so a prefix one byte over the room is enough.
        let mut buf = Vec::new();
        write_str(&mut buf, prefix(s, MAX_FOUND_BYTES + 1));
        self.push(&String::from_utf8_lossy(&buf))
    }

    fn scalar(&mut self, s: &Scalar<'_>) -> bool {
        match s {
            Scalar::Null => self.push("null"),
            Scalar::Bool(b) => self.push(if *b { "true" } else { "false" }),
            Scalar::Number(n) => self.push(&n.to_string()),
            Scalar::Str(s) => self.json_str(s),
        }
    }

    fn finish(mut self) -> String {
        if self.full {
            let keep = prefix(&self.out, MAX_FOUND_BYTES).len();
            self.out.truncate(keep);
            self.out.push('…');
        }
        self.out
    }
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
fn prefix(s: &str, max: usize) -> &str {
    let mut end = max.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.get(..end).unwrap_or_default()
}

/// The error that stops reading once the transcript is full.
fn stop<E: de::Error>() -> E {
    E::custom("value quoted up to the limit")
}

fn transcribe_seq<'de, A: SeqAccess<'de>>(t: &mut Transcript, mut seq: A) -> Result<(), A::Error> {
    if !t.push("[") {
        return Err(stop());
    }
    let mut first = true;
    loop {
        if !first && !t.push(",") {
            return Err(stop());
        }
        // A trailing comma written before the end is found is taken back below.
        if seq.next_element_seed(TranscribeSeed(&mut *t))?.is_none() {
            if !first {
                t.out.pop();
            }
            break;
        }
        first = false;
    }
    if t.push("]") { Ok(()) } else { Err(stop()) }
}

fn transcribe_map<'de, A: MapAccess<'de>>(t: &mut Transcript, mut map: A) -> Result<(), A::Error> {
    if !t.push("{") {
        return Err(stop());
    }
    let mut first = true;
    loop {
        if !first && !t.push(",") {
            return Err(stop());
        }
        if map.next_key_seed(TranscribeSeed(&mut *t))?.is_none() {
            if !first {
                t.out.pop();
            }
            break;
        }
        first = false;
        if !t.push(":") {
            return Err(stop());
        }
        map.next_value_seed(TranscribeSeed(&mut *t))?;
    }
    if t.push("}") { Ok(()) } else { Err(stop()) }
}

/// Writes one value into the transcript, stopping the parse when it is full.
struct TranscribeSeed<'t>(&'t mut Transcript);

impl<'de> DeserializeSeed<'de> for TranscribeSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl TranscribeSeed<'_> {
    fn scalar<E: de::Error>(self, s: &Scalar<'_>) -> Result<(), E> {
        if self.0.scalar(s) {
            Ok(())
        } else {
            Err(stop())
        }
    }
}

impl<'de> Visitor<'de> for TranscribeSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        self.scalar(&Scalar::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        self.scalar(&Scalar::Number(v.into()))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        self.scalar(&Scalar::Number(v.into()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        self.scalar(&Number::from_f64(v).map_or(Scalar::Null, Scalar::Number))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.scalar(&Scalar::Str(Cow::Borrowed(v)))
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.scalar(&Scalar::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        transcribe_seq(self.0, seq)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        transcribe_map(self.0, map)
    }
}
