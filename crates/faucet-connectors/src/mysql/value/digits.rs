//! Decimal digits written straight into a [`Text`], without `format!` and its formatter:
//! the temporal values and DECIMALs of every row go through here (both paths), so the
//! digits are built in a stack buffer and appended at once.

use faucet_core::Text;

/// Appends `n` in decimal, zero-padded to at least `width` digits (as
/// `format!("{n:0width$}")`).
pub(crate) fn push_padded(out: &mut Text, n: u64, width: usize) {
    let mut buf = [b'0'; 20];
    let start = padded_digits(n, width, &mut buf);
    push_ascii(out, &buf[start..]);
}

/// Appends the first `len` (at most `width`) of `n`'s digits zero-padded to `width` (at
/// most 20): `push_leading(out, 123, 6, 2)` appends `00`, the first two digits of `000123`.
pub(crate) fn push_leading(out: &mut Text, n: u64, width: usize, len: usize) {
    let mut buf = [b'0'; 20];
    let start = padded_digits(n, width, &mut buf);
    let end = (start + len).min(buf.len());
    push_ascii(out, &buf[start..end]);
}

/// Writes `n` into `dst` as exactly `dst.len()` digits, zero-padded on the left: the caller
/// checks that `n` has no more digits than that (higher digits would be dropped).
pub(crate) fn put_fixed(dst: &mut [u8], mut n: u32) {
    for b in dst.iter_mut().rev() {
        *b = b'0' + (n % 10) as u8;
        n /= 10;
    }
}

/// Appends ASCII bytes (digits) at once (their UTF-8 check is one pass over a few bytes).
fn push_ascii(out: &mut Text, ascii: &[u8]) {
    out.push_str(std::str::from_utf8(ascii).unwrap_or_default());
}

/// Writes `n`'s decimal digits at the end of `buf` (which holds `b'0'`s), zero-padded on the
/// left to at least `width` (at most 20); returns where they start.
fn padded_digits(mut n: u64, width: usize, buf: &mut [u8; 20]) -> usize {
    let mut start = buf.len();
    loop {
        start -= 1;
        buf[start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    start.min(buf.len() - width.min(buf.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padded_numbers_match_format() {
        for n in [
            0u64,
            7,
            42,
            999,
            1_000,
            65_535,
            999_999,
            1_234_567,
            u64::MAX,
        ] {
            for width in [0usize, 1, 2, 4, 6, 9, 20] {
                let mut out = Text::from("x");
                push_padded(&mut out, n, width);
                assert_eq!(out, format!("x{n:0width$}"));
                if let Ok(small) = u32::try_from(n)
                    && (1..=9).contains(&width)
                    && u64::from(small) < 10u64.pow(width as u32)
                {
                    let mut fixed = vec![b'x'; width];
                    put_fixed(&mut fixed, small);
                    assert_eq!(
                        String::from_utf8(fixed).expect("digits"),
                        format!("{n:0width$}")
                    );
                }
                for len in [0usize, 1, 3, 6, 20] {
                    let mut out = Text::from("x");
                    push_leading(&mut out, n, width, len);
                    let all = format!("{n:0width$}");
                    assert_eq!(out, format!("x{}", &all[..len.min(all.len())]));
                }
            }
        }
    }
}
