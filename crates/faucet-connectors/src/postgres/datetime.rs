//! Years outside 0001–9999 in dates and timestamps: PostgreSQL's text (`4713-01-01 BC`,
//! `10000-01-01`) ↔ faucet's one form, ISO 8601 with expanded years and astronomical year
//! numbering (README, "Values"):
//!
//! | PostgreSQL | faucet |
//! |---|---|
//! | `2024-02-29` | `2024-02-29` (years 1–9999: four digits, no sign) |
//! | `0001-01-01 BC` | `0000-01-01` (1 BC is year 0) |
//! | `4713-01-01 00:00:00 BC` | `-4712-01-01T00:00:00` (n BC is year 1 − n) |
//! | `10000-01-01`, `294276-12-31 23:59:59+00` | `+10000-01-01`, `+294276-12-31T23:59:59Z` |
//!
//! [`iso_from_pg`] is applied by the decoders of date, timestamp and timestamptz (every read
//! path); [`pg_from_iso`] by the sink's encoder, so a value read as `-4712-01-01` is written
//! back as `4713-01-01 BC`.

use std::borrow::Cow;

/// PostgreSQL's output text of a date, timestamp or timestamptz (ISO DateStyle) with the
/// year in faucet's expanded form and the ` BC` suffix removed: `4713-01-01 00:00:00 BC` →
/// `-4712-01-01 00:00:00`, `10000-01-01` → `+10000-01-01`; years 1–9999 (and `infinity`)
/// are returned unchanged, without allocating.
pub(crate) fn iso_from_pg(text: &str) -> Cow<'_, str> {
    let (body, bc) = match text.strip_suffix(" BC") {
        Some(body) => (body, true),
        None => (text, false),
    };
    let digits = body.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || body.as_bytes().get(digits) != Some(&b'-') || (!bc && digits <= 4) {
        return Cow::Borrowed(text);
    }
    let Ok(year) = body[..digits].parse::<i64>() else {
        return Cow::Borrowed(text);
    };
    let year = if bc { 1 - year } else { year };
    Cow::Owned(format!("{}{}", format_year(year), &body[digits..]))
}

/// A year in ISO 8601 form: `0044`, `0000`, `-0043`, `-4712`, `+10000`.
fn format_year(year: i64) -> String {
    if year < 0 {
        format!("-{:04}", -year)
    } else if year > 9999 {
        format!("+{year}")
    } else {
        format!("{year:04}")
    }
}

/// The inverse of [`iso_from_pg`], for PostgreSQL's input: `-4712-01-01T00:00:00` →
/// `4713-01-01T00:00:00 BC`, `0000-01-01` → `0001-01-01 BC`, `+10000-01-01` →
/// `10000-01-01`; anything else (years 1–9999, `infinity`, `-infinity`) unchanged.
pub(crate) fn pg_from_iso(text: &str) -> Cow<'_, str> {
    let (sign, rest) = match text.as_bytes().first() {
        Some(b'+') => (1, &text[1..]),
        Some(b'-') => (-1, &text[1..]),
        _ => (1, text),
    };
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits < 4 || rest.as_bytes().get(digits) != Some(&b'-') {
        return Cow::Borrowed(text);
    }
    let Ok(year) = rest[..digits].parse::<i64>() else {
        return Cow::Borrowed(text);
    };
    let year = sign * year;
    let tail = &rest[digits..];
    if year >= 1 {
        if sign == 1 && text.starts_with('+') {
            return Cow::Owned(format!("{year:04}{tail}"));
        }
        return Cow::Borrowed(text);
    }
    Cow::Owned(format!("{:04}{tail} BC", 1 - year))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn years_outside_the_common_range_are_expanded_both_ways() {
        for (pg, iso) in [
            ("4713-01-01 BC", "-4712-01-01"),
            ("4714-11-24 00:00:00+00 BC", "-4713-11-24 00:00:00+00"),
            ("0001-12-31 23:59:59.5 BC", "0000-12-31 23:59:59.5"),
            ("0044-03-15 BC", "-0043-03-15"),
            ("10000-01-01", "+10000-01-01"),
            (
                "294276-12-31 23:59:59.999999",
                "+294276-12-31 23:59:59.999999",
            ),
            ("5874897-12-31", "+5874897-12-31"),
        ] {
            assert_eq!(iso_from_pg(pg), iso, "{pg}");
            assert_eq!(pg_from_iso(iso), pg, "{iso}");
        }
        for same in [
            "2024-02-29",
            "0001-01-01 00:00:00",
            "infinity",
            "-infinity",
            "9999-12-31",
        ] {
            assert!(matches!(iso_from_pg(same), Cow::Borrowed(s) if s == same));
            assert!(matches!(pg_from_iso(same), Cow::Borrowed(s) if s == same));
        }
        assert_eq!(
            pg_from_iso("-4712-01-01T00:00:00Z"),
            "4713-01-01T00:00:00Z BC"
        );
        assert_eq!(pg_from_iso("+0044-01-01"), "0044-01-01");
    }
}
