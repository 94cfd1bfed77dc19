//! Deserializing `{type: <name>, config: {...}}` into a registry enum.
//!
//! Like serde's adjacently tagged enums, but: `config` may be left out (it then means `{}`,
//! so `state: {type: memory}` works), unknown keys beside `type` and `config` are refused, and
//! the config is deserialized in place so a bad field is reported with its full path
//! (`pipeline.sink.config.pathh`) when `type` comes first, as it does in every example.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, DeserializeOwned, DeserializeSeed, Deserializer, MapAccess, Visitor};

/// A registry enum: `Kind` is the closed set of type names.
pub(crate) trait Tagged: Sized {
    /// What the enum configures, for messages: `source`, `sink`, `state store`.
    const WHAT: &'static str;
    /// The type names, deserialized from `type` (an unknown name lists the known ones).
    type Kind: DeserializeOwned + Copy;
    /// Deserializes the config of a connector of type `kind`.
    fn from_config<'de, D: Deserializer<'de>>(
        kind: Self::Kind,
        config: D,
    ) -> Result<Self, D::Error>;
}

/// The `deserialize` of a [`Tagged`] enum.
pub(crate) fn deserialize<'de, T: Tagged, D: Deserializer<'de>>(d: D) -> Result<T, D::Error> {
    d.deserialize_map(TaggedVisitor::<T>(PhantomData))
}

#[derive(serde::Deserialize)]
#[serde(field_identifier, rename_all = "lowercase")]
enum Key {
    Type,
    Config,
}

struct TaggedVisitor<T>(PhantomData<T>);

impl<'de, T: Tagged> Visitor<'de> for TaggedVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a {} as a mapping `{{type: <name>, config: {{...}}}}`",
            T::WHAT
        )
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
        let mut kind: Option<T::Kind> = None;
        let mut built: Option<T> = None;
        let mut early_config: Option<serde_json::Value> = None;
        let mut seen_config = false;
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Type => {
                    if kind.is_some() {
                        return Err(de::Error::duplicate_field("type"));
                    }
                    kind = Some(map.next_value()?);
                }
                Key::Config => {
                    if seen_config {
                        return Err(de::Error::duplicate_field("config"));
                    }
                    seen_config = true;
                    match kind {
                        Some(k) => built = Some(map.next_value_seed(ConfigSeed::<T>(k))?),
                        None => early_config = Some(map.next_value()?),
                    }
                }
            }
        }
        let kind = kind.ok_or_else(|| de::Error::missing_field("type"))?;
        if let Some(t) = built {
            return Ok(t);
        }
        let config = early_config.unwrap_or_else(|| serde_json::Value::Object(Default::default()));
        T::from_config(kind, MapOnly(config)).map_err(|e| de::Error::custom(format!("config: {e}")))
    }
}

struct ConfigSeed<T: Tagged>(T::Kind);

impl<'de, T: Tagged> DeserializeSeed<'de> for ConfigSeed<T> {
    type Value = T;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<T, D::Error> {
        T::from_config(self.0, MapOnly(d))
    }
}

/// A connector's `config` deserializer that accepts only a mapping: serde's derived structs
/// also accept a sequence (fields by position), so `config: [./out.jsonl]` would silently be
/// a path, and other shapes would be reported as `invalid length 2, expected struct X`.
struct MapOnly<D>(D);

impl<'de, D: Deserializer<'de>> Deserializer<'de> for MapOnly<D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.0.deserialize_map(MapVisitor(visitor))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map struct enum
        identifier ignored_any
    }
}

/// Passes a mapping on; anything else is "expected the connector's settings as a mapping".
struct MapVisitor<V>(V);

impl<'de, V: Visitor<'de>> Visitor<'de> for MapVisitor<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the connector's settings as a mapping `{ name: value, ... }`")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.0.visit_map(map)
    }
}
