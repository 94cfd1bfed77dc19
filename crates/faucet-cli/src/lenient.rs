//! Number and boolean fields that also accept a string, so `batch_size: ${env:BATCH}` works:
//! interpolation only ever produces strings (it cannot change the document's structure), so
//! the few numeric and boolean fields the CLI owns parse a string of digits or `true`/`false`.
//! Connector configs take their numbers literally. Used by the pipeline file's own fields
//! (`crate::config`) and the state stores' CLI configs (`crate::registry`); imports neither.

use std::fmt;
use std::time::Duration;

use serde::Deserializer;
use serde::de::{self, Visitor};

/// A count of at least 1: a YAML integer, or a string of decimal digits.
///
/// # Errors
/// Zero, a negative number, a fraction or a string that is not a positive integer.
pub(crate) fn positive_usize<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    struct V;
    impl Visitor<'_> for V {
        type Value = usize;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a positive integer (or a string of digits)")
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<usize, E> {
            match usize::try_from(v) {
                Ok(0) | Err(_) => Err(E::custom(format!("{v} is out of range: at least 1"))),
                Ok(n) => Ok(n),
            }
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<usize, E> {
            match u64::try_from(v) {
                Ok(u) => self.visit_u64(u),
                Err(_) => Err(E::custom(format!("{v} is out of range: at least 1"))),
            }
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<usize, E> {
            match v.trim().parse::<u64>() {
                Ok(u) => self.visit_u64(u),
                Err(_) => Err(E::invalid_value(de::Unexpected::Str(v), &self)),
            }
        }
    }
    d.deserialize_any(V)
}

/// The longest `max_page_delay` may be: one hour.
pub(crate) const MAX_PAGE_DELAY_LIMIT: Duration = Duration::from_secs(3600);

/// A page delay: a YAML integer or a string of digits (milliseconds), or a duration string
/// (`50ms`, `2s`, `1m`; humantime's units), from 1 ms to [`MAX_PAGE_DELAY_LIMIT`].
///
/// # Errors
/// Zero, a negative number, a fraction, an unreadable duration, or one out of that range.
pub(crate) fn page_delay<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    struct V;
    fn bounded<E: de::Error>(d: Duration) -> Result<Duration, E> {
        if d < Duration::from_millis(1) || d > MAX_PAGE_DELAY_LIMIT {
            return Err(E::custom(format!(
                "{} is out of range: from 1ms to 1h",
                humantime::format_duration(d)
            )));
        }
        Ok(d)
    }
    impl Visitor<'_> for V {
        type Value = Duration;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("milliseconds (an integer) or a duration such as \"50ms\" or \"2s\"")
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Duration, E> {
            bounded(Duration::from_millis(v))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Duration, E> {
            match u64::try_from(v) {
                Ok(u) => self.visit_u64(u),
                Err(_) => Err(E::custom(format!("{v} is out of range: from 1ms to 1h"))),
            }
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
            let v = v.trim();
            if let Ok(ms) = v.parse::<u64>() {
                return self.visit_u64(ms);
            }
            match humantime::parse_duration(v) {
                Ok(d) => bounded(d),
                Err(_) => Err(E::invalid_value(de::Unexpected::Str(v), &self)),
            }
        }
    }
    d.deserialize_any(V)
}

/// A boolean: YAML `true`/`false`, or the strings `"true"`/`"false"`.
///
/// # Errors
/// Anything else.
pub(crate) fn bool_or_string<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    struct V;
    impl Visitor<'_> for V {
        type Value = bool;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("true or false")
        }
        fn visit_bool<E: de::Error>(self, v: bool) -> Result<bool, E> {
            Ok(v)
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<bool, E> {
            match v.trim() {
                "true" => Ok(true),
                "false" => Ok(false),
                _ => Err(E::invalid_value(de::Unexpected::Str(v), &self)),
            }
        }
    }
    d.deserialize_any(V)
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Debug, Deserialize)]
    struct T {
        #[serde(deserialize_with = "super::positive_usize")]
        n: usize,
        #[serde(deserialize_with = "super::bool_or_string")]
        b: bool,
    }

    #[derive(Debug, Deserialize)]
    struct D {
        #[serde(deserialize_with = "super::page_delay")]
        d: std::time::Duration,
    }

    #[test]
    fn page_delays_in_milliseconds_or_durations() {
        use std::time::Duration;
        for (given, want) in [
            (json!(50), Duration::from_millis(50)),
            (json!("250"), Duration::from_millis(250)),
            (json!("2s"), Duration::from_secs(2)),
            (json!(" 10ms "), Duration::from_millis(10)),
            (json!("1h"), Duration::from_secs(3600)),
        ] {
            let d: D = serde_json::from_value(json!({ "d": given })).expect("valid");
            assert_eq!(d.d, want);
        }
        for bad in [
            json!(0),
            json!(-5),
            json!(1.5),
            json!("0s"),
            json!("2h"),
            json!("soon"),
            json!("500us"),
        ] {
            let e = serde_json::from_value::<D>(json!({ "d": bad.clone() }));
            assert!(e.is_err(), "{bad} must be refused");
        }
    }

    #[test]
    fn numbers_and_strings_of_digits() {
        let t: T = serde_json::from_value(json!({"n": 500, "b": true})).expect("literal");
        assert_eq!((t.n, t.b), (500, true));
        let t: T = serde_json::from_value(json!({"n": "500", "b": "false"})).expect("strings");
        assert_eq!((t.n, t.b), (500, false));
        for bad in [json!(0), json!(-3), json!("x"), json!(1.5), json!("0")] {
            assert!(serde_json::from_value::<T>(json!({"n": bad, "b": true})).is_err());
        }
        assert!(serde_json::from_value::<T>(json!({"n": 1, "b": "yes"})).is_err());
    }
}
