//! [`Json`]: a json / jsonb value held as its JSON text (compact, or verbatim).

use std::fmt;

/// Objects and arrays nested deeper than this take the exact (tree-building) check, which
/// refuses what serde_json's tree parser refuses (it stops at 128 levels).
const DEEP: usize = 100;

/// A json / jsonb value as valid, compact JSON text (docs/values.md, "Values and their JSON
/// form": json is embedded as itself).
///
/// A page carries json values from a source to a sink that writes them out as text again
/// (the jsonl sink embeds them, the postgres sink copies them into a `jsonb` column), so the
/// value is kept as text — one allocation — instead of a parsed tree: no tree is built on
/// the way in and none is serialized on the way out. The text is always valid JSON; built
/// by [`Json::parse`] it is compact (no whitespace outside strings), built by
/// [`Json::verbatim`] it is byte for byte the source's (PostgreSQL's `json` type: the text
/// as stored, whitespace included); everything else is kept exactly as the source
/// spelled it: numbers keep their digits (`1.10`, `1e400`, `-0`), strings their escapes
/// (`\u00e9` stays `\u00e9`), objects their key order and duplicate keys (PostgreSQL's
/// `json` type keeps those too; [`Json::to_value`] keeps the last, as serde_json does).
///
/// Build it with [`Json::parse`] (text from a source: validated, then compacted),
/// [`Json::verbatim`] (validated, kept as given) or [`Json::from_value`] (a `serde_json`
/// tree); read it with [`Json::as_str`] or
/// [`Json::to_value`]. Equality is equality of the texts: `{"a":1,"b":2}` and
/// `{"b":2,"a":1}` differ (PostgreSQL's `jsonb` output has one canonical key order, so two
/// readings of the same jsonb value are equal). 16 bytes.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Json(Box<str>);

impl Json {
    /// Validates `text` as one JSON value (surrounding whitespace allowed) and keeps it
    /// compact: whitespace outside strings is dropped, every other byte is kept as is.
    ///
    /// It accepts exactly what `serde_json::from_str::<serde_json::Value>` accepts (numbers
    /// of any size, nesting up to 128 levels, no lone UTF-16 surrogate escapes), without
    /// building the tree: a validation pass that allocates nothing, then one compaction pass.
    ///
    /// # Errors
    /// serde_json's error (with line and column in `text`; the tree parser's wording) when
    /// `text` is not valid JSON.
    pub fn parse(text: &str) -> Result<Self, serde_json::Error> {
        let mut out = String::with_capacity(text.len());
        validate(text, Some(&mut out))?;
        Ok(Self(out.into_boxed_str()))
    }

    /// Validates `text` as one JSON value, exactly as [`Json::parse`] does, and keeps it
    /// byte for byte, whitespace included (the JSON writer turns line breaks between tokens
    /// into spaces, so a JSON Lines record stays on one line: in valid JSON a raw line break
    /// is always insignificant whitespace).
    ///
    /// # Errors
    /// As [`Json::parse`].
    pub fn verbatim(text: &str) -> Result<Self, serde_json::Error> {
        validate(text, None)?;
        Ok(Self(text.into()))
    }

    /// The compact text of a `serde_json` tree (object keys in the tree's order; numbers as
    /// the tree holds them, exact with serde_json's `arbitrary_precision`).
    pub fn from_value(value: &serde_json::Value) -> Self {
        // A tree always serializes (its map keys are strings).
        Self(value.to_string().into_boxed_str())
    }

    /// The JSON text (compact, or verbatim: see [`Json::verbatim`]).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The value parsed into a `serde_json` tree (on demand: the text is not kept parsed).
    ///
    /// # Errors
    /// Only for a value built by [`Json::from_value`] from a tree nested deeper than the
    /// 128 levels serde_json's parser accepts; text from [`Json::parse`] always parses.
    pub fn to_value(&self) -> Result<serde_json::Value, serde_json::Error> {
        serde_json::from_str(&self.0)
    }
}

impl fmt::Display for Json {
    /// The JSON text.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Json {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Json({})", self.0)
    }
}

impl From<&serde_json::Value> for Json {
    fn from(value: &serde_json::Value) -> Self {
        Self::from_value(value)
    }
}

impl From<serde_json::Value> for Json {
    fn from(value: serde_json::Value) -> Self {
        Self::from_value(&value)
    }
}

/// Validates `text` as one JSON value (what [`Json::parse`] accepts), appending its compact
/// form to `compact` when given (a verbatim value needs only the verdict: no copy is made).
fn validate(text: &str, compact: Option<&mut String>) -> Result<(), serde_json::Error> {
    // Syntax, strings (control characters, escapes), numbers, trailing characters.
    if let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(text) {
        // The tree parser's message is sometimes more precise ("trailing comma"): the
        // error path can afford it.
        return Err(serde_json::from_str::<serde_json::Value>(text)
            .err()
            .unwrap_or(e));
    }
    let scan = compact_into(text, compact);
    if scan.max_depth > DEEP || scan.surrogate_escape {
        // What the cheap check lets through and the tree parser refuses: deep nesting and
        // unpaired surrogates (`"\ud800"`). Rare: ask the tree parser for the verdict.
        serde_json::from_str::<serde_json::Value>(text)?;
    }
    Ok(())
}

/// What [`compact_into`] saw on its way.
struct Scan {
    /// The deepest nesting of objects and arrays.
    max_depth: usize,
    /// Whether a string holds a `\uD800`–`\uDFFF` escape.
    surrogate_escape: bool,
}

/// Appends `text` to `out` (when given) without the whitespace outside strings (JSON's
/// insignificant whitespace is space, tab, line feed and carriage return), and notes what
/// [`Scan`] holds. `text` must be valid JSON; runs of kept bytes are copied at once.
fn compact_into(text: &str, mut out: Option<&mut String>) -> Scan {
    let b = text.as_bytes();
    let mut scan = Scan {
        max_depth: 0,
        surrogate_escape: false,
    };
    let mut depth = 0usize;
    let mut run = 0;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b' ' | b'\t' | b'\n' | b'\r' => {
                if let Some(out) = out.as_deref_mut() {
                    out.push_str(&text[run..i]);
                }
                i += 1;
                run = i;
            }
            b'"' => {
                i += 1;
                // To the closing quote: `\` takes the next byte with it (`\"`, `\\`).
                while i < b.len() {
                    match b[i] {
                        b'"' => break,
                        b'\\' => {
                            if b.get(i + 1) == Some(&b'u')
                                && matches!(b.get(i + 2), Some(b'd' | b'D'))
                                && matches!(
                                    b.get(i + 3),
                                    Some(b'8'..=b'9' | b'a'..=b'f' | b'A'..=b'F')
                                )
                            {
                                scan.surrogate_escape = true;
                            }
                            i += 2;
                        }
                        _ => i += 1,
                    }
                }
                i += 1;
            }
            b'[' | b'{' => {
                depth += 1;
                scan.max_depth = scan.max_depth.max(depth);
                i += 1;
            }
            b']' | b'}' => {
                depth = depth.saturating_sub(1);
                i += 1;
            }
            _ => i += 1,
        }
    }
    // `i` may have run past the end by one on an unterminated string; `run` never does.
    if let Some(out) = out {
        out.push_str(&text[run..]);
    }
    scan
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn compact(text: &str) -> String {
        Json::parse(text).expect("valid json").as_str().to_owned()
    }

    #[test]
    fn stays_small() {
        assert!(std::mem::size_of::<Json>() <= 16);
    }

    #[test]
    fn drops_whitespace_outside_strings_only() {
        assert_eq!(
            compact(" {\"k\": 1, \"tags\": [\"a\", 3]}\n"),
            r#"{"k":1,"tags":["a",3]}"#
        );
        assert_eq!(
            compact("{\r\n\t\"a b\" :\t\" x  y \" }"),
            r#"{"a b":" x  y "}"#
        );
        // Escaped quotes and backslashes do not end the string.
        assert_eq!(
            compact(r#"[ "say \"hi , there\" " , "c:\\ dir\\" , " \\\" x" ]"#),
            r#"["say \"hi , there\" ","c:\\ dir\\"," \\\" x"]"#
        );
        // Escapes are kept as written, not decoded or re-encoded.
        assert_eq!(
            compact(r#"[ "\u00e9 \/ \n", "é", "\ud83d\ude00" ]"#),
            r#"["\u00e9 \/ \n","é","\ud83d\ude00"]"#
        );
        assert_eq!(compact("  \"  \"  "), r#""  ""#);
        assert_eq!(compact("true"), "true");
        assert_eq!(compact("{}"), "{}");
    }

    #[test]
    fn verbatim_keeps_every_byte_and_validates() {
        for text in [
            " {\"dup\":1,\"dup\":2, \"sp\" :  1}\n",
            "[ 1.10 ,\r\n\t1e400 ]",
            "\"x\"",
        ] {
            let j = Json::verbatim(text).expect("valid");
            assert_eq!(j.as_str(), text);
            assert_eq!(
                j.to_value().expect("v"),
                serde_json::from_str::<serde_json::Value>(text).expect("v")
            );
        }
        for bad in ["", "{", "[1,]", "\"\\ud800\""] {
            assert!(Json::verbatim(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn numbers_keep_their_text() {
        for n in [
            "1.10",
            "1e400",
            "-0",
            "-0.0",
            "12345678901234567890.5",
            "1E-7",
            "0",
        ] {
            assert_eq!(compact(n), n);
            assert_eq!(compact(&format!("[ {n} ]")), format!("[{n}]"));
        }
        let j = Json::parse(r#"{"a": 1.10, "b": 1e400}"#).expect("json");
        assert_eq!(j.to_string(), r#"{"a":1.10,"b":1e400}"#);
    }

    #[test]
    fn refuses_invalid_json() {
        for bad in [
            "",
            " ",
            "{",
            "[1,]",
            "{\"a\" 1}",
            "{'a': 1}",
            "01",
            "1.",
            "-",
            ".5",
            "nul",
            "\"abc",
            "\"tab\there\"",
            "\"bad \\x escape\"",
            "\"\\u12\"",
            "[1] [2]",
            "{\"a\":1}}",
            "NaN",
            "\"\\ud800\"",
            "\"\\udc00 alone\"",
            "\"\\ud83d\\u0041\"",
        ] {
            assert!(Json::parse(bad).is_err(), "{bad:?}");
        }
        let deep_ok = format!("{}{}", "[".repeat(120), "]".repeat(120));
        assert_eq!(compact(&deep_ok), deep_ok);
        let too_deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert!(Json::parse(&too_deep).is_err());
    }

    #[test]
    fn round_trips_with_trees() {
        let tree = serde_json::json!({"z": 1, "a": [1.5, "x\ny", null, {"q": true}], "n": -0});
        let j = Json::from_value(&tree);
        assert_eq!(
            j.as_str(),
            r#"{"z":1,"a":[1.5,"x\ny",null,{"q":true}],"n":0}"#
        );
        assert_eq!(j.to_value().expect("parses"), tree);
        let parsed = Json::parse(r#"{ "z" : 1 , "a":[1.5, "x\ny", null, {"q": true}], "n": 0}"#)
            .expect("json");
        assert_eq!(parsed, j);
        assert_eq!(
            Json::parse("\"\\u00e9\"")
                .expect("json")
                .to_value()
                .expect("v"),
            "é"
        );
        assert_eq!(format!("{j:?}"), format!("Json({j})"));
        // Duplicate keys are kept in the text; the tree keeps the last value.
        let dup = Json::parse(r#"{"a": 1, "b": 2, "a": 3}"#).expect("json");
        assert_eq!(dup.as_str(), r#"{"a":1,"b":2,"a":3}"#);
        assert_eq!(
            dup.to_value().expect("v"),
            serde_json::json!({"a": 3, "b": 2})
        );
        // Same messages as the tree parser, positions in the text as given.
        for bad in ["{'a': 1}", "[1,\n 2,]", "{\"a\": tru}", "\"x"] {
            assert_eq!(
                Json::parse(bad).expect_err(bad).to_string(),
                serde_json::from_str::<serde_json::Value>(bad)
                    .expect_err(bad)
                    .to_string()
            );
        }
    }

    fn token() -> impl Strategy<Value = &'static str> {
        prop::sample::select(vec![
            "{", "}", "[", "]", ",", ":", " ", "\n", "\t", "\"", "\\", "\\\"", "\\u00e9",
            "\\ud83d", "\\ude00", "a", " b ", "1", "0", "-", ".", "e", "1.10", "1e400", "true",
            "null", "é", "\"k\":", "\"s t\"", "\u{1}",
        ])
    }

    /// Text built from JSON's punctuation, whitespace, escapes and literals (mostly invalid,
    /// some valid), and valid JSON with one token inserted or one character removed (often
    /// still valid, often nearly).
    fn jsonish() -> impl Strategy<Value = String> {
        let tokens = prop::collection::vec(token(), 0..24).prop_map(|t| t.concat());
        let mutated = (
            spaced_json(),
            any::<prop::sample::Index>(),
            token(),
            any::<bool>(),
        )
            .prop_map(|(text, at, token, insert)| {
                let chars: Vec<char> = text.chars().collect();
                let at = at.index(chars.len() + 1);
                let mut out: String = chars[..at].iter().collect();
                if insert {
                    out.push_str(token);
                    out.extend(&chars[at..]);
                } else {
                    out.extend(chars.iter().skip(at + 1));
                }
                out
            });
        prop_oneof![tokens, mutated]
    }

    /// Valid JSON with random whitespace between tokens.
    fn spaced_json() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![
            Just("null".to_owned()),
            Just("1.10".to_owned()),
            Just("-0".to_owned()),
            // (serde_json's tree spells an exponent `e+`; `1e400` would read back as `1e+400`.)
            Just("1e+400".to_owned()),
            "[a-z \"\\\\é]{0,6}".prop_map(|s| serde_json::to_string(&s).unwrap_or_default()),
        ];
        let value = leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4)
                    .prop_map(|v| format!("[ {} ]", v.join(" ,\n"))),
                prop::collection::btree_map("[a-z \"]{0,3}", inner, 0..4).prop_map(|kv| {
                    let fields: Vec<String> = kv
                        .into_iter()
                        .map(|(k, v)| {
                            format!("{}\t: {v}", serde_json::to_string(&k).unwrap_or_default())
                        })
                        .collect();
                    format!("{{ {} }}", fields.join(", "))
                }),
            ]
        });
        value.prop_map(|v| format!(" {v}\r\n"))
    }

    proptest! {
        #[test]
        fn accepts_exactly_what_the_tree_parser_accepts(text in jsonish()) {
            let tree = serde_json::from_str::<serde_json::Value>(&text);
            match Json::parse(&text) {
                Ok(j) => {
                    let tree = tree.expect("the tree parser accepts it too");
                    prop_assert_eq!(j.to_value().expect("parses"), tree);
                    prop_assert!(!j.as_str().contains(['\n', '\t', '\r']));
                }
                Err(e) => match tree {
                    Ok(_) => prop_assert!(false, "refused but valid: {:?}", text),
                    Err(tree_e) => prop_assert_eq!(e.to_string(), tree_e.to_string()),
                },
            }
        }

        #[test]
        fn compaction_keeps_the_value_and_drops_all_insignificant_whitespace(text in spaced_json()) {
            let j = Json::parse(&text).expect("valid");
            let tree: serde_json::Value = serde_json::from_str(&text).expect("valid");
            prop_assert_eq!(j.to_value().expect("parses"), tree.clone());
            // Nothing but numbers' spelling differs from serde_json's own compact form, and
            // this generator's numbers are spelled the way serde_json keeps them.
            prop_assert_eq!(j.as_str(), tree.to_string());
        }
    }
}
