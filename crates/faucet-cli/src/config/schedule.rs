//! `pipeline.schedule`: when `faucet serve` starts a bounded run of a row. `faucet run`
//! ignores it (a run started by hand or by cron runs now); `faucet validate` prints it.
//!
//! Two forms:
//!
//! ```yaml
//! schedule: "*/5 * * * *"                                  # cron, in UTC
//! schedule: { cron: "0 6 * * 1-5", timezone: Europe/Berlin } # cron in an IANA time zone
//! ```
//!
//! The cron expression is parsed by the `croner` crate: five fields (minute hour day month
//! weekday) or six with seconds first (`*/10 * * * * *`), ranges, steps, names, `L`, `#`,
//! `W` and the `@hourly`-style aliases. A time zone is an IANA name (`chrono-tz`'s database);
//! a local time a daylight-saving change skips runs once at the next valid instant, one it
//! repeats runs once. Both are checked when the file is loaded, so a typo is an error naming
//! `pipeline.schedule.cron` or `pipeline.schedule.timezone`, never a schedule that never fires.

use std::str::FromStr as _;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use croner::Cron;
use serde::{Deserialize, Deserializer};

/// A parsed, checked schedule.
#[derive(Debug, Clone)]
pub(crate) struct Schedule {
    /// The expression as written.
    pub(crate) cron_text: String,
    cron: Cron,
    /// The time zone the expression is read in (UTC by default).
    pub(crate) timezone: Tz,
}

/// The mapping form, as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScheduleMap {
    /// The cron expression (5 fields, or 6 with seconds first).
    cron: CronText,
    /// An IANA time zone name; default `UTC`.
    #[serde(default)]
    timezone: Option<TzName>,
}

/// A cron expression that parsed.
struct CronText(String, Cron);

impl<'de> Deserialize<'de> for CronText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        parse_cron(&text)
            .map(|c| Self(text, c))
            .map_err(serde::de::Error::custom)
    }
}

/// An IANA time zone name that exists.
struct TzName(Tz);

impl<'de> Deserialize<'de> for TzName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Tz::from_str(&text).map(Self).map_err(|_| {
            serde::de::Error::custom(format!(
                "{:?} is not an IANA time zone name; write e.g. `UTC`, `Europe/Berlin`, \
                 `America/New_York`",
                crate::output::clip(&text)
            ))
        })
    }
}

fn parse_cron(text: &str) -> Result<Cron, String> {
    // croner also takes a seventh field (years); the documented forms are five or six.
    let fields = text.split_whitespace().count();
    if !text.trim_start().starts_with('@') && fields > 6 {
        return Err(format!(
            "{:?} has {fields} fields; write five `minute hour day month weekday` \
             (`*/5 * * * *`), or six with seconds first (`*/10 * * * * *`) — a year field is \
             not supported",
            crate::output::clip(text)
        ));
    }
    let cron = Cron::from_str(text).map_err(|e| {
        format!(
            "{:?} is not a cron expression ({e}); write five fields `minute hour day month \
             weekday` (`*/5 * * * *`), or six with seconds first (`*/10 * * * * *`)",
            crate::output::clip(text)
        )
    })?;
    // A pattern that parses but never fires (`0 0 30 2 *`) is refused too.
    cron.find_next_occurrence(&Utc::now(), false)
        .map_err(|e| format!("{:?} never fires ({e})", crate::output::clip(text)))?;
    Ok(cron)
}

impl<'de> Deserialize<'de> for Schedule {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            Text(String),
            Map(serde_json::Map<String, serde_json::Value>),
        }
        let not_a_schedule = || {
            serde::de::Error::custom(
                "a schedule is a cron string (`\"*/5 * * * *\"`, in UTC) or a mapping \
                 `{ cron: \"*/5 * * * *\", timezone: Europe/Berlin }`",
            )
        };
        match Form::deserialize(d).map_err(|_: D::Error| not_a_schedule())? {
            Form::Text(text) => {
                let cron = parse_cron(&text).map_err(serde::de::Error::custom)?;
                Ok(Self {
                    cron_text: text,
                    cron,
                    timezone: Tz::UTC,
                })
            }
            Form::Map(map) => {
                // Deserialized again as the typed mapping, so the error names the field
                // (`pipeline.schedule.cron`).
                let m: ScheduleMap = serde_path_to_error::deserialize(serde_json::Value::Object(
                    map,
                ))
                .map_err(|e| serde::de::Error::custom(format!("{}: {}", e.path(), e.inner())))?;
                Ok(Self {
                    cron_text: m.cron.0,
                    cron: m.cron.1,
                    timezone: m.timezone.map_or(Tz::UTC, |t| t.0),
                })
            }
        }
    }
}

impl Schedule {
    /// The first tick strictly after `after`, in UTC; `None` when the expression has no
    /// further occurrence (refused at load time, so only past year 9999).
    pub(crate) fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let local = after.with_timezone(&self.timezone);
        self.cron
            .find_next_occurrence(&local, false)
            .ok()
            .map(|t| t.with_timezone(&Utc))
    }
}

impl std::fmt::Display for Schedule {
    /// `*/5 * * * * (UTC)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.cron_text, self.timezone.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: serde_json::Value) -> Result<Schedule, String> {
        serde_path_to_error::deserialize(v).map_err(|e| format!("{}: {}", e.path(), e.inner()))
    }

    #[test]
    fn both_forms_parse_and_tick_in_their_time_zone() {
        let utc = parse(json!("0 6 * * *")).expect("string form");
        let at = DateTime::parse_from_rfc3339("2026-07-01T05:00:00Z")
            .expect("time")
            .with_timezone(&Utc);
        assert_eq!(
            utc.next_after(at).expect("next").to_rfc3339(),
            "2026-07-01T06:00:00+00:00"
        );
        let berlin =
            parse(json!({"cron": "0 6 * * *", "timezone": "Europe/Berlin"})).expect("mapping");
        // 06:00 in Berlin in July is 04:00 UTC, already past at 05:00 UTC: the next day.
        assert_eq!(
            berlin.next_after(at).expect("next").to_rfc3339(),
            "2026-07-02T04:00:00+00:00"
        );
        assert_eq!(berlin.to_string(), "0 6 * * * (Europe/Berlin)");
        let seconds = parse(json!("*/1 * * * * *")).expect("six fields");
        assert_eq!(
            seconds.next_after(at).expect("next").to_rfc3339(),
            "2026-07-01T05:00:01+00:00"
        );
    }

    #[test]
    fn mistakes_name_their_field() {
        let e = parse(json!({"cron": "61 * * * *"})).expect_err("bad minute");
        assert!(
            e.contains("cron") && e.contains("not a cron expression"),
            "{e}"
        );
        let e = parse(json!({"cron": "* * * * *", "timezone": "Europe/Berln"})).expect_err("tz");
        assert!(
            e.contains("timezone") && e.contains("not an IANA time zone"),
            "{e}"
        );
        let e = parse(json!({"cron": "* * * * *", "tz": "UTC"})).expect_err("unknown field");
        assert!(e.contains("tz"), "{e}");
        let e = parse(json!(5)).expect_err("a number");
        assert!(e.contains("a cron string"), "{e}");
        let e = parse(json!("0 0 30 2 *")).expect_err("never fires");
        assert!(e.contains("never fires"), "{e}");
    }
}
