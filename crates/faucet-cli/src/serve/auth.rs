//! The API token guarding mutating routes: from `--token-file PATH` (the file's text, surrounding
//! whitespace trimmed) or else the environment variable `FAUCET_API_TOKEN` — never a
//! command-line value, which any user of the host could read in the process list. The
//! token is registered with the CLI's redaction ([`crate::secret`]), so no message shows it.

use std::path::Path;

use faucet_core::FaucetError;

/// The environment variable holding the token.
pub(crate) const TOKEN_ENV: &str = "FAUCET_API_TOKEN";

/// How to configure a token, for messages.
pub(crate) const HOW: &str = "set the environment variable FAUCET_API_TOKEN, or pass \
--token-file PATH (a file holding the token), then send `Authorization: Bearer <token>`";

/// A bearer token. `Debug` never shows it.
pub(crate) struct Token(String);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(***)")
    }
}

/// The shortest token accepted.
const MIN_LEN: usize = 16;

/// Loads the token: `file` when given, else `FAUCET_API_TOKEN` when set and not empty.
///
/// # Errors
/// [`FaucetError::Config`] on `--token-file` (unreadable, empty) or the variable (shorter than
/// 16 characters) — never showing the text.
pub(crate) fn load(file: Option<&Path>) -> Result<Option<Token>, FaucetError> {
    let (text, field) = match file {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                FaucetError::config(
                    "--token-file",
                    format!("{} cannot be read: {e}", path.display()),
                )
            })?;
            (text, "--token-file")
        }
        None => match std::env::var(TOKEN_ENV) {
            Ok(t) if !t.is_empty() => (t, TOKEN_ENV),
            _ => return Ok(None),
        },
    };
    let token = text.trim();
    if token.chars().count() < MIN_LEN {
        return Err(FaucetError::config(
            field,
            format!(
                "the API token has {} characters; use at least {MIN_LEN} (e.g. `openssl rand -hex 32`)",
                token.chars().count()
            ),
        ));
    }
    // An HTTP header cannot carry a control character: such a token could never be sent.
    if token.chars().any(char::is_control) {
        return Err(FaucetError::config(
            field,
            "the API token contains a control character, which no `Authorization` header \
             can carry; use printable characters (e.g. `openssl rand -hex 32`)",
        ));
    }
    crate::secret::remember_secret(token);
    Ok(Some(Token(token.to_owned())))
}

impl Token {
    /// Whether `header` (the `Authorization` value, as bytes) is `Bearer <this token>`: the
    /// scheme in any case (RFC 9110 §11.1: auth schemes are case-insensitive), the token
    /// compared byte for byte — a token with non-ASCII characters arrives as its UTF-8 bytes,
    /// which `HeaderValue::to_str` would refuse — in time independent of where they differ.
    pub(crate) fn admits(&self, header: &[u8]) -> bool {
        const SCHEME: &[u8] = b"bearer ";
        if header.len() < SCHEME.len() || !header[..SCHEME.len()].eq_ignore_ascii_case(SCHEME) {
            return false;
        }
        let (a, b) = (header[SCHEME.len()..].trim_ascii(), self.0.as_bytes());
        let mut diff = a.len() ^ b.len();
        for (i, x) in b.iter().enumerate() {
            diff |= usize::from(x ^ a.get(i).copied().unwrap_or(0));
        }
        diff == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_bearer_token_is_admitted() {
        let t = Token("0123456789abcdef".to_owned());
        assert!(t.admits(b"Bearer 0123456789abcdef"));
        assert!(t.admits(b"BEARER 0123456789abcdef"));
        assert!(t.admits(b"bEaReR 0123456789abcdef"));
        assert!(!t.admits(b"Bearer 0123456789abcde"));
        assert!(!t.admits(b"Bearer 0123456789abcdefX"));
        assert!(!t.admits(b"Bearer 0123456789ABCDEF"));
        assert!(!t.admits(b"Basic 0123456789abcdef"));
        assert!(!t.admits(b"0123456789abcdef"));
        let u = Token("p\u{e4}sswort-\u{e4}\u{f6}\u{fc}-0123456789".to_owned());
        assert!(u.admits("Bearer p\u{e4}sswort-\u{e4}\u{f6}\u{fc}-0123456789".as_bytes()));
        assert_eq!(format!("{t:?}"), "Token(***)");
    }
}
