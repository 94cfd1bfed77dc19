//! Reading `COPY ... TO STDOUT` text format (PostgreSQL manual, "COPY", "Text Format"):
//! one row per line ending in `\n`, columns separated by a tab, `\N` for NULL, and backslash
//! escapes inside values (`\\`, `\n`, `\r`, `\t`, `\b`, `\f`, `\v`, `\NNN` octal, `\xHH`
//! hex). A raw newline or tab never occurs inside a value, so lines and columns split on the
//! bytes. What is left after unescaping is the type's text output, for
//! [`crate::postgres::types::decode_text`].

use std::borrow::Cow;

/// One column of a line: `None` for `\N` (NULL), else the unescaped bytes.
pub(crate) fn fields(line: &[u8]) -> impl Iterator<Item = Option<Cow<'_, [u8]>>> {
    line.split(|&b| b == b'\t').map(|raw| {
        if raw == b"\\N" {
            None
        } else if raw.contains(&b'\\') {
            Some(Cow::Owned(unescape(raw)))
        } else {
            Some(Cow::Borrowed(raw))
        }
    })
}

/// Resolves the backslash escapes of one COPY text value.
fn unescape(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let b = raw[i];
        if b != b'\\' || i + 1 == raw.len() {
            out.push(b);
            i += 1;
            continue;
        }
        let c = raw[i + 1];
        i += 2;
        match c {
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'b' => out.push(0x08),
            b'f' => out.push(0x0c),
            b'v' => out.push(0x0b),
            b'0'..=b'7' => {
                let mut n = u32::from(c - b'0');
                let mut taken = 0;
                while taken < 2 && i < raw.len() && (b'0'..=b'7').contains(&raw[i]) {
                    n = n * 8 + u32::from(raw[i] - b'0');
                    i += 1;
                    taken += 1;
                }
                out.push((n & 0xff) as u8);
            }
            b'x' if i < raw.len() && raw[i].is_ascii_hexdigit() => {
                let mut n = 0u32;
                let mut taken = 0;
                while taken < 2 && i < raw.len() && raw[i].is_ascii_hexdigit() {
                    n = n * 16 + (raw[i] as char).to_digit(16).unwrap_or(0);
                    i += 1;
                    taken += 1;
                }
                out.push(n as u8);
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cols(line: &[u8]) -> Vec<Option<Vec<u8>>> {
        fields(line).map(|f| f.map(|c| c.into_owned())).collect()
    }

    #[test]
    fn splits_columns_nulls_and_escapes() {
        assert_eq!(
            cols(b"1\t\\N\ta\\tb\\nc\\\\d\t"),
            vec![
                Some(b"1".to_vec()),
                None,
                Some(b"a\tb\nc\\d".to_vec()),
                Some(b"".to_vec())
            ]
        );
        // bytea in COPY text: `\\x` + hex.
        assert_eq!(cols(b"\\\\xdeadbeef"), vec![Some(b"\\xdeadbeef".to_vec())]);
        assert_eq!(
            cols(b"\\r\\b\\f\\v\\101\\x41\\q"),
            vec![Some(b"\r\x08\x0c\x0bAAq".to_vec())]
        );
        // `\\N` is the two characters `\N`, not NULL.
        assert_eq!(cols(b"\\\\N"), vec![Some(b"\\N".to_vec())]);
    }
}
