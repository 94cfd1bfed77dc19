//! State key validation, shared by every store (docs/specification.md, "State stores", "Validated keys").

use crate::error::FaucetError;

/// The longest valid state key, in bytes.
pub const MAX_STATE_KEY_LEN: usize = 256;

/// Checks a state key: 1 to 256 ASCII letters, digits, `_`, `-`, `:` or `.`, not starting
/// with a dot (so a key is also a safe file name: no `/`, no `..`, no hidden files).
///
/// # Errors
/// [`FaucetError::Config`] on field `state key`, saying what is wrong with which key.
pub fn validate_state_key(key: &str) -> Result<(), FaucetError> {
    let fail = |why: &str| {
        Err(FaucetError::config(
            "state key",
            format!("{} {why}", shown_key(key)),
        ))
    };
    if key.is_empty() {
        return fail("is empty; a state key has 1 to 256 characters");
    }
    if key.len() > MAX_STATE_KEY_LEN {
        return fail(&format!(
            "is {} characters long; the limit is {MAX_STATE_KEY_LEN}",
            key.len()
        ));
    }
    if key.starts_with('.') {
        return fail("starts with a dot");
    }
    if let Some(c) = key
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | ':' | '.')))
    {
        return fail(&format!(
            "contains {c:?}; allowed are ASCII letters, digits and `_ - : .`"
        ));
    }
    Ok(())
}

/// How many characters of a key a message shows.
const SHOWN_CHARS: usize = 60;

/// `key` for a message: quoted, and cut to its first 60 characters plus `… (N bytes)` when
/// longer, so a huge key does not flood the terminal.
pub fn shown_key(key: &str) -> String {
    if key.chars().count() <= SHOWN_CHARS {
        format!("{key:?}")
    } else {
        let head: String = key.chars().take(SHOWN_CHARS).collect();
        format!("{head:?}… ({} bytes)", key.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_documented_alphabet() {
        for ok in [
            "a",
            "orders::eu",
            "postgres-cdc:faucet_slot",
            "a.b",
            &"k".repeat(256),
        ] {
            assert!(validate_state_key(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn rejects_everything_else_with_the_key_named() {
        for bad in [
            "",
            "a/b",
            "a b",
            ".hidden",
            "é",
            "a\0",
            &"k".repeat(257),
            "../x",
        ] {
            let err = validate_state_key(bad).expect_err(bad).to_string();
            assert!(err.contains("state key"), "{err}");
        }
    }
}
