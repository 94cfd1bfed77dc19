//! Decimal digits written straight into a `String`, without `format!` and its formatter:
//! the temporal values and DECIMALs of every row go through here (both paths).

/// Appends `n` in decimal, zero-padded to at least `width` digits (as
/// `format!("{n:0width$}")`).
pub(crate) fn push_padded(out: &mut String, n: u64, width: usize) {
    let mut buf = [0u8; 20];
    out.push_str(padded_digits(n, width, &mut buf));
}

/// `n`'s decimal digits, zero-padded on the left to at least `width` (at most 20), in `buf`.
pub(crate) fn padded_digits(mut n: u64, width: usize, buf: &mut [u8; 20]) -> &str {
    *buf = [b'0'; 20];
    let mut start = buf.len();
    loop {
        start -= 1;
        buf[start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let start = start.min(buf.len() - width.min(buf.len()));
    // Only ASCII digits were written.
    std::str::from_utf8(&buf[start..]).unwrap_or_default()
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
                let mut out = String::from("x");
                push_padded(&mut out, n, width);
                assert_eq!(out, format!("x{n:0width$}"));
            }
        }
    }
}
