//! Character sets: which bytes-to-UTF-8 transcoding a collation id needs. Result sets carry
//! the collation of `character_set_results` (utf8mb4 here, see
//! [`SESSION_SETUP`](crate::mysql::connection::SESSION_SETUP)) or 63 (`binary`); the binlog
//! carries every column's own collation, so every charset the server has must be known.
//! [`Collations::load`] reads the server's own `information_schema.COLLATIONS` (MariaDB has
//! ids above 255 that no static table keeps up with); [`Collations::builtin`] knows only the
//! common defaults, for use without a server.

use std::collections::HashMap;
use std::sync::Arc;

use encoding_rs::Encoding;
use mysql_async::prelude::Queryable as _;

/// The collation id of the `binary` charset (BINARY, VARBINARY, BLOB, and MySQL's JSON).
pub const BINARY_COLLATION: u16 = 63;

/// How a column's bytes become text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Charset {
    /// `binary`: bytes, not text.
    Binary,
    /// utf8mb4, and utf8mb3 (`utf8` before MySQL 8.0.30 / MariaDB 10.6: UTF-8 of the Basic
    /// Multilingual Plane): already UTF-8 (checked).
    Utf8,
    /// A single- or multi-byte legacy charset decoded by `encoding_rs` (latin1 is
    /// windows-1252, as MySQL defines it).
    Legacy(&'static Encoding),
    /// ucs2 and utf16: UTF-16 big-endian.
    Utf16Be,
    /// utf16le.
    Utf16Le,
    /// utf32: UTF-32 big-endian.
    Utf32Be,
    /// A charset faucet cannot transcode (dec8, hp8, swe7, keybcs2, armscii8, geostd8,
    /// cp850, cp852, macce): a value of it is an error naming the charset, never garbled.
    Unsupported(Arc<str>),
}

/// The message of text that is not UTF-8 from byte `at` on.
fn utf8_error(at: usize) -> String {
    format!("invalid UTF-8 at byte {at} of a utf8mb4 value")
}

impl Charset {
    /// The charset called `name` (`information_schema.CHARACTER_SETS.CHARACTER_SET_NAME`).
    pub fn from_name(name: &str) -> Self {
        use encoding_rs as e;
        let legacy = match name {
            "binary" => return Self::Binary,
            "utf8mb4" | "utf8mb3" | "utf8" => return Self::Utf8,
            "ucs2" | "utf16" => return Self::Utf16Be,
            "utf16le" => return Self::Utf16Le,
            "utf32" => return Self::Utf32Be,
            // ASCII columns only hold 0x00..0x7f; windows-1252 decodes those the same.
            "latin1" | "ascii" => e::WINDOWS_1252,
            "latin2" => e::ISO_8859_2,
            "latin5" => e::WINDOWS_1254,
            "latin7" => e::ISO_8859_13,
            "greek" => e::ISO_8859_7,
            "hebrew" => e::ISO_8859_8,
            "cp1250" => e::WINDOWS_1250,
            "cp1251" => e::WINDOWS_1251,
            "cp1256" => e::WINDOWS_1256,
            "cp1257" => e::WINDOWS_1257,
            "koi8r" => e::KOI8_R,
            "koi8u" => e::KOI8_U,
            "cp866" => e::IBM866,
            "macroman" => e::MACINTOSH,
            "tis620" => e::WINDOWS_874,
            "sjis" | "cp932" => e::SHIFT_JIS,
            "ujis" | "eucjpms" => e::EUC_JP,
            "euckr" => e::EUC_KR,
            "gb2312" | "gbk" => e::GBK,
            "gb18030" => e::GB18030,
            "big5" => e::BIG5,
            other => return Self::Unsupported(Arc::from(other)),
        };
        Self::Legacy(legacy)
    }

    /// Whether the bytes are text.
    pub fn is_text(&self) -> bool {
        !matches!(self, Self::Binary)
    }

    /// `bytes` as UTF-8 text.
    ///
    /// # Errors
    /// A message naming the charset when the bytes are not valid in it (never replacement
    /// characters), or when the charset is [`Charset::Unsupported`] or `binary`.
    pub fn decode_text(&self, bytes: &[u8]) -> Result<faucet_core::Text, String> {
        match self {
            // Checked in place: up to 24 bytes are then stored inline, without allocating.
            Self::Utf8 => std::str::from_utf8(bytes)
                .map(faucet_core::Text::from)
                .map_err(|e| utf8_error(e.valid_up_to())),
            _ => self.decode(bytes.to_vec()).map(faucet_core::Text::from),
        }
    }

    /// `bytes` as UTF-8 text, taking the buffer (no copy for UTF-8).
    ///
    /// # Errors
    /// As [`Charset::decode_text`].
    pub fn decode(&self, bytes: Vec<u8>) -> Result<String, String> {
        match self {
            Self::Utf8 => {
                String::from_utf8(bytes).map_err(|e| utf8_error(e.utf8_error().valid_up_to()))
            }
            Self::Legacy(encoding) => encoding
                .decode_without_bom_handling_and_without_replacement(&bytes)
                .map(|c| c.into_owned())
                .ok_or_else(|| format!("bytes that are not valid {}", encoding.name())),
            Self::Utf16Be | Self::Utf16Le => {
                if !bytes.len().is_multiple_of(2) {
                    return Err("an odd number of bytes in a UTF-16 value".into());
                }
                let units = bytes.chunks_exact(2).map(|c| match self {
                    Self::Utf16Le => u16::from_le_bytes([c[0], c[1]]),
                    _ => u16::from_be_bytes([c[0], c[1]]),
                });
                char::decode_utf16(units)
                    .collect::<Result<String, _>>()
                    .map_err(|_| "an unpaired surrogate in a UTF-16 value".into())
            }
            Self::Utf32Be => {
                if !bytes.len().is_multiple_of(4) {
                    return Err("a UTF-32 value whose length is not a multiple of 4".into());
                }
                bytes
                    .chunks_exact(4)
                    .map(|c| {
                        char::from_u32(u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
                            .ok_or_else(|| "an invalid code point in a UTF-32 value".to_owned())
                    })
                    .collect()
            }
            Self::Binary => Err("binary bytes where text was expected".into()),
            Self::Unsupported(name) => Err(format!(
                "character set `{name}` cannot be transcoded to UTF-8 by faucet; convert the \
                 column to utf8mb4 or select it as CONVERT(col USING utf8mb4)"
            )),
        }
    }
}

/// Collation id → [`Charset`] and its widest character in bytes
/// (`information_schema.CHARACTER_SETS.MAXLEN`), for the server at hand, and how that server
/// numbers the charsets of a binlog TABLE_MAP.
#[derive(Debug, Clone, Default)]
pub struct Collations {
    by_id: HashMap<u16, (Charset, u8)>,
    geometry_in_table_map_charsets: bool,
}

impl Collations {
    /// Reads every collation of the connected server with its charset's `MAXLEN`
    /// (`information_schema.COLLATIONS`, and on MariaDB `COLLATION_CHARACTER_SET_APPLICABILITY`,
    /// joined with `CHARACTER_SETS`), and whether it is MariaDB (`SELECT VERSION()`; see
    /// [`Collations::geometry_in_table_map_charsets`]).
    ///
    /// # Errors
    /// The driver's error.
    pub async fn load(conn: &mut mysql_async::Conn) -> Result<Self, mysql_async::Error> {
        let version: Option<String> = conn.query_first("SELECT VERSION()").await?;
        let mariadb = version.is_some_and(|v| v.contains("MariaDB"));
        let mut by_id = HashMap::new();
        for (table, required) in [
            ("COLLATIONS", true),
            // MariaDB 10.10+: the charset-bound ids of its `uca1400` collations (2048 on,
            // `utf8mb4_uca1400_ai_ci`, MariaDB 11.4's default, among them) are only here;
            // `COLLATIONS` lists those collations without an id. Older servers have no `ID`
            // column in it (MySQL 8, MariaDB before 10.10): then there is nothing to add.
            ("COLLATION_CHARACTER_SET_APPLICABILITY", false),
        ] {
            if !required && !mariadb {
                continue;
            }
            let rows: Result<Vec<mysql_async::Row>, _> = conn
                .query(format!(
                    "SELECT c.ID, c.CHARACTER_SET_NAME, s.MAXLEN \
                     FROM information_schema.{table} c \
                     LEFT JOIN information_schema.CHARACTER_SETS s \
                     ON s.CHARACTER_SET_NAME = c.CHARACTER_SET_NAME \
                     WHERE c.ID IS NOT NULL AND c.CHARACTER_SET_NAME IS NOT NULL"
                ))
                .await;
            let rows = match rows {
                Ok(rows) => rows,
                Err(mysql_async::Error::Server(_)) if !required => continue,
                Err(e) => return Err(e),
            };
            let rows = crate::mysql::connection::convert_rows::<(
                Option<u64>,
                Option<String>,
                Option<u64>,
            )>(rows)
            .map_err(|m| mysql_async::Error::Other(m.into()))?;
            by_id.extend(rows.into_iter().filter_map(|(id, name, max_len)| {
                // A charset without a width keeps its byte lengths (1: at least as wide).
                let max_len = max_len
                    .and_then(|n| u8::try_from(n).ok())
                    .unwrap_or(1)
                    .max(1);
                Some((
                    u16::try_from(id?).ok()?,
                    (Charset::from_name(&name?), max_len),
                ))
            }));
        }
        by_id.insert(BINARY_COLLATION, (Charset::Binary, 1));
        Ok(Self {
            by_id,
            geometry_in_table_map_charsets: mariadb,
        })
    }

    /// Whether the server lists GEOMETRY columns (with the binary collation) among the
    /// columns of a TABLE_MAP's `DEFAULT_CHARSET` / `COLUMN_CHARSET` metadata. MariaDB does:
    /// it lists every column whose binlog type info has a charset and is not ENUM/SET
    /// (`is_character_field` in sql/log_event_server.cc; `Field_geom::binlog_type_info`
    /// carries the binary charset) — seen on MariaDB 10.11, where a POINT column before a
    /// text column shifted every later column's charset until this was taken into account.
    /// MySQL lists only the STRING, VAR_STRING, VARCHAR and BLOB types
    /// (`is_character_type(field->binlog_type())`, libbinlogevents), as mysql_common's
    /// `ColumnType::is_character_type` does.
    pub fn geometry_in_table_map_charsets(&self) -> bool {
        self.geometry_in_table_map_charsets
    }

    /// Whether the server is MariaDB (the same fact as
    /// [`Collations::geometry_in_table_map_charsets`]): only MariaDB has column types the
    /// binlog logs as the storage of another type (UUID, INET4, INET6 as BINARY(n), JSON as
    /// LONGTEXT).
    pub fn is_mariadb(&self) -> bool {
        self.geometry_in_table_map_charsets
    }

    /// The default collations of latin1, utf8mb3 and utf8mb4 on MariaDB and MySQL 8 (8, 47,
    /// 33, 83, 192, 45, 46, 224, 255) and binary; use [`Collations::load`] against a live
    /// server for the rest.
    pub fn builtin() -> Self {
        let latin1 = (Charset::from_name("latin1"), 1);
        let (utf8mb3, utf8mb4) = ((Charset::Utf8, 3), (Charset::Utf8, 4));
        let by_id = [
            (8, latin1.clone()),
            (47, latin1),
            (33, utf8mb3.clone()),
            (83, utf8mb3.clone()),
            (192, utf8mb3),
            (45, utf8mb4.clone()),
            (46, utf8mb4.clone()),
            (224, utf8mb4.clone()),
            (255, utf8mb4),
            (BINARY_COLLATION, (Charset::Binary, 1)),
        ]
        .into_iter()
        .collect();
        Self {
            by_id,
            geometry_in_table_map_charsets: false,
        }
    }

    /// The charset of collation `id`.
    pub fn charset(&self, id: u16) -> Charset {
        if id == BINARY_COLLATION {
            return Charset::Binary;
        }
        match self.by_id.get(&id) {
            Some((c, _)) => c.clone(),
            None => Charset::Unsupported(Arc::from(format!("of collation id {id}").as_str())),
        }
    }

    /// The widest character of collation `id`'s charset, in bytes (`MAXLEN`: utf8mb4 4,
    /// utf8mb3 3, ucs2 2, utf16 4, gbk 2, latin1 and binary 1); 1 for an unknown id. A
    /// `CHAR`/`VARCHAR` of `n` characters is `n × MAXLEN` bytes in a binlog TABLE_MAP and in
    /// a result set's column length.
    pub fn max_len(&self, id: u16) -> u8 {
        self.by_id.get(&id).map_or(1, |(_, w)| *w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charsets_transcode_exactly() {
        let c = Collations::builtin();
        assert_eq!(c.charset(63), Charset::Binary);
        assert_eq!(c.charset(45), Charset::Utf8);
        assert_eq!(c.charset(33), Charset::Utf8);
        assert_eq!((c.max_len(33), c.max_len(45), c.max_len(8)), (3, 4, 1));
        assert_eq!(Charset::from_name("utf8"), Charset::Utf8);
        assert_eq!(
            Charset::from_name("utf8mb3")
                .decode("é€".into())
                .expect("utf8mb3"),
            "é€"
        );
        assert_eq!(c.charset(8), Charset::Legacy(encoding_rs::WINDOWS_1252));
        assert!(matches!(c.charset(9999), Charset::Unsupported(_)));
        let latin1 = c.charset(8);
        assert_eq!(
            latin1
                .decode(vec![0x63, 0x61, 0x66, 0xe9, 0x80])
                .expect("ok"),
            "café€"
        );
        assert_eq!(
            Charset::from_name("cp1251")
                .decode(vec![0xcf, 0xf0, 0xe8])
                .expect("ok"),
            "При"
        );
        assert_eq!(
            Charset::from_name("ucs2")
                .decode(vec![0x00, 0xe9])
                .expect("ok"),
            "é"
        );
        assert_eq!(
            Charset::from_name("utf32")
                .decode(vec![0, 1, 0xf6, 0x00])
                .expect("ok"),
            "😀"
        );
        assert!(Charset::Utf8.decode(vec![0xff]).is_err());
        assert!(Charset::from_name("sjis").decode(vec![0x82]).is_err());
        assert!(Charset::from_name("dec8").decode(vec![0x41]).is_err());
    }
}
