//! Decoding of pgoutput protocol version 1 messages (PostgreSQL manual, "Logical Replication
//! Message Formats"), borrowing from the message bytes.
//!
//! `pgwire-replication` already turns Begin (`B`), Commit (`C`) and logical decoding
//! messages (`M`) into events; the messages that reach this module are Relation (`R`),
//! Type (`Y`), Origin (`O`), Insert (`I`), Update (`U`), Delete (`D`) and Truncate (`T`).
//! Anything else (streaming or two-phase messages, which faucet never asks for) is an error.

/// One column of a tuple (`TupleData`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Datum<'a> {
    /// `n`: SQL NULL.
    Null,
    /// `u`: an unchanged TOASTed value; the server did not send it (case 01).
    UnchangedToast,
    /// `t`: the value in text format.
    Text(&'a [u8]),
    /// `b`: the value in binary format (only sent with `binary 'true'`, which faucet never
    /// requests).
    Binary(&'a [u8]),
}

/// A tuple: one [`Datum`] per column of the relation, in the Relation message's order.
pub(crate) type Tuple<'a> = Vec<Datum<'a>>;

/// One column of a Relation message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RelationColumn {
    /// Part of the replica identity (flag bit 1; every column with REPLICA IDENTITY FULL).
    pub(crate) key: bool,
    /// The column name.
    pub(crate) name: String,
    /// The type OID.
    pub(crate) type_oid: u32,
    /// The type modifier (`atttypmod`: a varchar's length, a numeric's precision), -1 for
    /// none.
    pub(crate) type_mod: i32,
    /// The built-in type OID its text is decoded as: `type_oid` as parsed, set by the
    /// stream from [`crate::postgres::type_catalog`] before the relation is used.
    pub(crate) decode_oid: u32,
    /// The type as PostgreSQL spells it (`format_type`: `character varying(20)`), set by
    /// the stream with `decode_oid`; empty until then.
    pub(crate) source_type: String,
    /// The column's `attnum` in the catalog when the Relation message was read (found by
    /// name), 0 when not found: what tells a rename from a drop and an add.
    pub(crate) attnum: i64,
}

impl RelationColumn {
    /// A column as a Relation message describes it, before the stream resolves its type.
    pub(crate) fn new(key: bool, name: String, type_oid: u32, type_mod: i32) -> Self {
        Self {
            key,
            name,
            type_oid,
            type_mod,
            decode_oid: type_oid,
            source_type: String::new(),
            attnum: 0,
        }
    }
}

/// Which old row an Update or Delete carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OldKind {
    /// `K`: the replica identity key columns (other columns are null).
    Key,
    /// `O`: the whole old row (REPLICA IDENTITY FULL).
    Full,
}

/// A decoded pgoutput message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Message<'a> {
    /// `R`: a relation's current shape, sent before its first change in a session and again
    /// after every change of its shape (case 26).
    Relation {
        /// The relation OID.
        oid: u32,
        /// The schema (empty for `pg_catalog`).
        namespace: String,
        /// The relation name.
        name: String,
        /// The replica identity setting: `d` default, `n` nothing, `f` full, `i` index.
        replica_identity: u8,
        /// The columns, in order.
        columns: Vec<RelationColumn>,
    },
    /// `I`: a new row.
    Insert {
        /// The relation OID.
        oid: u32,
        /// The new row.
        new: Tuple<'a>,
    },
    /// `U`: a changed row.
    Update {
        /// The relation OID.
        oid: u32,
        /// The old key or row, when the server sent one.
        old: Option<(OldKind, Tuple<'a>)>,
        /// The new row.
        new: Tuple<'a>,
    },
    /// `D`: a removed row.
    Delete {
        /// The relation OID.
        oid: u32,
        /// The old key or row.
        old: (OldKind, Tuple<'a>),
    },
    /// `T`: one TRUNCATE statement over one or more relations (case 17).
    Truncate {
        /// Bit 1: CASCADE; bit 2: RESTART IDENTITY.
        options: u8,
        /// The relation OIDs, in the statement's order.
        oids: Vec<u32>,
    },
    /// `Y`, `O`: carries nothing a change record needs (a type's name; a replication origin).
    Ignored,
}

/// Why a message could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DecodeError(pub(crate) String);

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DecodeError {}

struct Reader<'a> {
    buf: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    fn truncated(&self) -> DecodeError {
        DecodeError(format!("pgoutput {} message is truncated", self.what))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.buf.len() < n {
            return Err(self.truncated());
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, DecodeError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn cstring(&mut self) -> Result<String, DecodeError> {
        let end = self
            .buf
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| self.truncated())?;
        let s = std::str::from_utf8(&self.buf[..end])
            .map_err(|_| DecodeError(format!("pgoutput {} message: name is not UTF-8", self.what)))?
            .to_owned();
        self.buf = &self.buf[end + 1..];
        Ok(s)
    }

    fn tuple(&mut self) -> Result<Tuple<'a>, DecodeError> {
        let n = usize::from(self.u16()?);
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let datum = match self.u8()? {
                b'n' => Datum::Null,
                b'u' => Datum::UnchangedToast,
                kind @ (b't' | b'b') => {
                    let len = self.u32()? as usize;
                    let bytes = self.take(len)?;
                    if kind == b't' {
                        Datum::Text(bytes)
                    } else {
                        Datum::Binary(bytes)
                    }
                }
                other => {
                    return Err(DecodeError(format!(
                        "pgoutput {} message: unknown column kind {:?}",
                        self.what,
                        char::from(other)
                    )));
                }
            };
            out.push(datum);
        }
        Ok(out)
    }

    fn old_tuple(&mut self, tag: u8) -> Result<(OldKind, Tuple<'a>), DecodeError> {
        let kind = match tag {
            b'K' => OldKind::Key,
            b'O' => OldKind::Full,
            other => {
                return Err(DecodeError(format!(
                    "pgoutput {} message: expected K or O, got {:?}",
                    self.what,
                    char::from(other)
                )));
            }
        };
        Ok((kind, self.tuple()?))
    }

    fn expect(&mut self, tag: u8) -> Result<(), DecodeError> {
        let got = self.u8()?;
        if got == tag {
            Ok(())
        } else {
            Err(DecodeError(format!(
                "pgoutput {} message: expected {:?}, got {:?}",
                self.what,
                char::from(tag),
                char::from(got)
            )))
        }
    }
}

/// Decodes one pgoutput message.
///
/// # Errors
/// A [`DecodeError`] naming the message kind when the bytes are truncated or malformed, or
/// the message is one faucet does not request.
pub(crate) fn decode(data: &[u8]) -> Result<Message<'_>, DecodeError> {
    let Some((&tag, body)) = data.split_first() else {
        return Err(DecodeError("empty pgoutput message".into()));
    };
    let what = match tag {
        b'R' => "Relation",
        b'I' => "Insert",
        b'U' => "Update",
        b'D' => "Delete",
        b'T' => "Truncate",
        b'Y' | b'O' => return Ok(Message::Ignored),
        other => {
            return Err(DecodeError(format!(
                "unexpected pgoutput message {:?} (faucet uses protocol version 1 without \
                 streaming)",
                char::from(other)
            )));
        }
    };
    let mut r = Reader { buf: body, what };
    match tag {
        b'R' => {
            let oid = r.u32()?;
            let namespace = r.cstring()?;
            let name = r.cstring()?;
            let replica_identity = r.u8()?;
            let n = usize::from(r.u16()?);
            let mut columns = Vec::with_capacity(n);
            for _ in 0..n {
                let flags = r.u8()?;
                let name = r.cstring()?;
                let type_oid = r.u32()?;
                let type_mod = r.u32()?.cast_signed();
                columns.push(RelationColumn::new(
                    flags & 1 == 1,
                    name,
                    type_oid,
                    type_mod,
                ));
            }
            Ok(Message::Relation {
                oid,
                namespace,
                name,
                replica_identity,
                columns,
            })
        }
        b'I' => {
            let oid = r.u32()?;
            r.expect(b'N')?;
            Ok(Message::Insert {
                oid,
                new: r.tuple()?,
            })
        }
        b'U' => {
            let oid = r.u32()?;
            let mut tag = r.u8()?;
            let old = if tag == b'K' || tag == b'O' {
                let old = r.old_tuple(tag)?;
                tag = r.u8()?;
                Some(old)
            } else {
                None
            };
            if tag != b'N' {
                return Err(DecodeError(format!(
                    "pgoutput Update message: expected N, got {:?}",
                    char::from(tag)
                )));
            }
            Ok(Message::Update {
                oid,
                old,
                new: r.tuple()?,
            })
        }
        b'D' => {
            let oid = r.u32()?;
            let tag = r.u8()?;
            Ok(Message::Delete {
                oid,
                old: r.old_tuple(tag)?,
            })
        }
        _ => {
            let n = r.u32()? as usize;
            let options = r.u8()?;
            let mut oids = Vec::with_capacity(n.min(1024));
            for _ in 0..n {
                oids.push(r.u32()?);
            }
            Ok(Message::Truncate { options, oids })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tuple_bytes(cols: &[Option<&[u8]>]) -> Vec<u8> {
        let mut out = (cols.len() as u16).to_be_bytes().to_vec();
        for c in cols {
            match c {
                None => out.push(b'n'),
                Some(b"\xffu") => out.push(b'u'),
                Some(v) => {
                    out.push(b't');
                    out.extend_from_slice(&(v.len() as u32).to_be_bytes());
                    out.extend_from_slice(v);
                }
            }
        }
        out
    }

    #[test]
    fn relation() {
        let mut m = vec![b'R'];
        m.extend_from_slice(&16385u32.to_be_bytes());
        m.extend_from_slice(b"public\0orders\0d");
        m.extend_from_slice(&2u16.to_be_bytes());
        m.push(1);
        m.extend_from_slice(b"id\0");
        m.extend_from_slice(&23u32.to_be_bytes());
        m.extend_from_slice(&(-1i32).to_be_bytes());
        m.push(0);
        m.extend_from_slice(b"note\0");
        m.extend_from_slice(&25u32.to_be_bytes());
        m.extend_from_slice(&(-1i32).to_be_bytes());
        let Message::Relation {
            oid,
            namespace,
            name,
            replica_identity,
            columns,
        } = decode(&m).expect("relation")
        else {
            panic!("not a relation")
        };
        assert_eq!(
            (oid, namespace.as_str(), name.as_str()),
            (16385, "public", "orders")
        );
        assert_eq!(replica_identity, b'd');
        assert_eq!(columns.len(), 2);
        assert!(columns[0].key && !columns[1].key);
        assert_eq!(columns[1].type_oid, 25);
        // Any cut is an error, never a panic.
        for cut in 0..m.len() {
            assert!(decode(&m[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn update_with_old_key_and_unchanged_toast() {
        let mut m = vec![b'U'];
        m.extend_from_slice(&7u32.to_be_bytes());
        m.push(b'K');
        m.extend_from_slice(&tuple_bytes(&[Some(b"1"), None]));
        m.push(b'N');
        m.extend_from_slice(&tuple_bytes(&[Some(b"2"), Some(b"\xffu")]));
        let Message::Update { oid, old, new } = decode(&m).expect("update") else {
            panic!("not an update")
        };
        assert_eq!(oid, 7);
        assert_eq!(
            old,
            Some((OldKind::Key, vec![Datum::Text(b"1"), Datum::Null]))
        );
        assert_eq!(new, vec![Datum::Text(b"2"), Datum::UnchangedToast]);
        for cut in 0..m.len() {
            assert!(decode(&m[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn truncate_of_two_relations() {
        let m = b"T\x00\x00\x00\x02\x00\x00\x00\x40\x7b\x00\x00\x40\x82";
        assert_eq!(
            decode(m).expect("truncate"),
            Message::Truncate {
                options: 0,
                oids: vec![0x407b, 0x4082]
            }
        );
    }

    #[test]
    fn unknown_messages_are_errors() {
        assert!(decode(b"S\x00\x00\x00\x01").is_err());
        assert!(decode(b"").is_err());
        assert_eq!(decode(b"Y\x00").expect("type"), Message::Ignored);
    }
}
