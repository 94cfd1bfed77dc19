//! [`RecordReader`]: CSV records from a file, through `csv-core`'s tokenizer (the engine of
//! the `csv` crate) over a buffer this module manages.
//!
//! Managing the buffer ourselves gives three things `csv::Reader` hides:
//! * the raw bytes of the current record, kept contiguous across refills, so we can tell a
//!   quoted `""` from an empty unquoted field (`null_values` compare unquoted fields only);
//! * exact byte positions for bookmarks, and the line each record starts on;
//! * control of the UTF-8 BOM: only one at byte 0 of the file is dropped. `csv-core` drops a
//!   BOM at the start of whatever input it sees first (after a seek too, and not at all if
//!   its first input is shorter than 3 bytes), so we strip it ourselves and *prime* the
//!   tokenizer with one `\n` — an empty line it skips — before any file byte reaches it.
//!
//! Records end at LF, CR or CRLF (`csv-core`'s `Terminator::CRLF`); quoted fields may hold
//! delimiters, doubled quotes and line breaks, split across any number of reads. Empty lines
//! between records are skipped, as `csv-core` does.
//!
//! At the end of the file, a record cut off without a terminator is held back (not
//! consumed) when the reader is told to ([`RecordReader::with_limits`]), a quoted field still
//! open in it included; when not told to, that open field is an error at the line of its
//! opening quote. A field longer than the limit is an error (checked while it is read, so
//! memory stays bounded by a few times the limit), and so is text after a closing quote
//! (`"bob"x`, which `csv-core` alone would read as `bobx`).

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};

use csv_core::{ReadRecordResult, Terminator};

const BOM: &[u8; 3] = b"\xef\xbb\xbf";

/// What [`RecordReader::read_record`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Next {
    /// A record (its fields are readable).
    Record,
    /// The end of the file.
    End,
    /// The last record has no terminator yet and was held back: the reader is positioned
    /// before it, at its line ([`RecordReader::line_after`]); asking again holds it back
    /// again.
    HeldBack,
}

/// Why a record could not be read.
#[derive(Debug)]
pub(super) enum ReadError {
    /// The file could not be read.
    Io(io::Error),
    /// Field `column` (1-based) of the record starting at `line` is longer than the limit.
    FieldTooLong { line: u64, column: usize },
    /// A quote opened at `line` is still open at the end of the file; the record began at
    /// `record_line`.
    UnclosedQuote { line: u64, record_line: u64 },
    /// Field `column` (1-based), quoted, has text after its closing quote (`"bob"x`), on
    /// `line`: `csv-core` would read it as `bobx`, dropping the quotes without a word.
    TextAfterQuote { line: u64, column: usize },
}

impl From<io::Error> for ReadError {
    fn from(e: io::Error) -> Self {
        Self::Io(e)
    }
}

/// Reads CSV records from a file.
pub(super) struct RecordReader {
    file: File,
    core: csv_core::Reader,
    delimiter: u8,
    quote: u8,
    /// Raw input; valid bytes are `buf[..end]`.
    buf: Vec<u8>,
    /// The most bytes one `read` asks for.
    read_size: usize,
    /// Next byte for the tokenizer.
    pos: usize,
    end: usize,
    /// Where the current record's raw bytes begin (leading empty lines included).
    rec_start: usize,
    /// The file offset of `buf[0]`.
    base: u64,
    eof: bool,
    /// Unescaped field bytes of the current record, and where each field ends.
    fields: Vec<u8>,
    ends: Vec<usize>,
    nfields: usize,
    /// The line the current record starts on.
    line: u64,
    /// Whether each field of the current record was quoted; computed on demand.
    quoted: Vec<bool>,
    quoted_valid: bool,
    /// Hold back a last record without a terminator instead of returning it.
    hold_unterminated: bool,
    /// The longest field allowed, in unquoted bytes.
    max_field: usize,
    /// The line of the quote still open in the record last held back, if one was.
    held_open_quote: Option<u64>,
}

impl RecordReader {
    /// A reader of `file` from its start: a UTF-8 BOM at byte 0 is skipped. Reads at most
    /// `read_size` bytes at a time (the buffer grows only for a longer record).
    pub(super) fn new(file: File, delimiter: u8, quote: u8, read_size: usize) -> io::Result<Self> {
        let core = csv_core::ReaderBuilder::new()
            .delimiter(delimiter)
            .quote(quote)
            .double_quote(true)
            .terminator(Terminator::CRLF)
            .build();
        let read_size = read_size.max(1);
        let mut reader = Self {
            file,
            core,
            delimiter,
            quote,
            buf: vec![0; read_size],
            read_size,
            pos: 0,
            end: 0,
            rec_start: 0,
            base: 0,
            eof: false,
            fields: vec![0; 1024],
            ends: vec![0; 64],
            nfields: 0,
            line: 1,
            quoted: Vec::new(),
            quoted_valid: false,
            hold_unterminated: false,
            max_field: usize::MAX,
            held_open_quote: None,
        };
        let mut head = [0u8; 3];
        let n = read_up_to(&mut reader.file, &mut head)?;
        let start = if n == 3 && &head == BOM { 3 } else { 0 };
        reader.seek(start, 1)?;
        Ok(reader)
    }

    /// Holds back a last record without a terminator when `hold_unterminated`; refuses a
    /// field longer than `max_field` bytes. (By default: neither.)
    pub(super) fn with_limits(mut self, hold_unterminated: bool, max_field: usize) -> Self {
        self.hold_unterminated = hold_unterminated;
        self.max_field = max_field.max(1);
        self
    }

    /// Continues at file offset `offset`, which is at line `line` (a record boundary).
    pub(super) fn seek(&mut self, offset: u64, line: u64) -> io::Result<()> {
        self.file.seek(SeekFrom::Start(offset))?;
        self.base = offset;
        self.pos = 0;
        self.end = 0;
        self.rec_start = 0;
        self.eof = false;
        self.nfields = 0;
        self.quoted_valid = false;
        self.core.reset();
        // Prime: the tokenizer skips this empty line and will never strip a BOM again.
        let (res, nin, _, _) = self
            .core
            .read_record(b"\n", &mut self.fields, &mut self.ends);
        debug_assert!(res == ReadRecordResult::InputEmpty && nin == 1);
        self.core.set_line(line);
        self.line = line;
        Ok(())
    }

    /// The open file (for checks that read it directly; call [`RecordReader::seek`] after).
    pub(super) fn file_mut(&mut self) -> &mut File {
        &mut self.file
    }

    /// Reads the next record.
    ///
    /// # Errors
    /// [`ReadError`]: a failed read, a field over the limit, a quote open at the end.
    pub(super) fn read_record(&mut self) -> Result<Next, ReadError> {
        self.rec_start = self.pos;
        self.quoted_valid = false;
        let line_before = self.core.line();
        let (mut nout, mut nend) = (0, 0);
        loop {
            if self.pos == self.end && !self.eof {
                self.refill()?;
            }
            // Only an empty input (the end of the file) ends a record without a terminator.
            let at_end = self.pos == self.end;
            let (res, nin, o, e) = self.core.read_record(
                &self.buf[self.pos..self.end],
                &mut self.fields[nout..],
                &mut self.ends[nend..],
            );
            self.pos += nin;
            nout += o;
            nend += e;
            let done_fields = if nend == 0 { 0 } else { self.ends[nend - 1] };
            if nout - done_fields > self.max_field {
                return Err(self.too_long(line_before, nend));
            }
            match res {
                ReadRecordResult::InputEmpty => {}
                ReadRecordResult::OutputFull => {
                    let n = self.fields.len() * 2;
                    self.fields.resize(n, 0);
                }
                ReadRecordResult::OutputEndsFull => {
                    let n = self.ends.len() * 2;
                    self.ends.resize(n, 0);
                }
                ReadRecordResult::Record => {
                    self.nfields = nend;
                    self.line = line_before + self.leading_newlines();
                    if let Some(i) = (0..nend).find(|i| {
                        let (start, end) = self.bounds(*i);
                        end - start > self.max_field
                    }) {
                        return Err(self.too_long(line_before, i));
                    }
                    if let Some((line, column)) = self.text_after_quote(line_before) {
                        return Err(ReadError::TextAfterQuote { line, column });
                    }
                    if at_end {
                        return self.finish_unterminated(line_before);
                    }
                    return Ok(Next::Record);
                }
                ReadRecordResult::End => {
                    self.nfields = 0;
                    return Ok(Next::End);
                }
            }
        }
    }

    /// The error for field `index` (0-based) of the record being read.
    fn too_long(&self, line_before: u64, index: usize) -> ReadError {
        ReadError::FieldTooLong {
            line: line_before + self.leading_newlines(),
            column: index + 1,
        }
    }

    /// The record just read ended at the end of the file, without a terminator: held back
    /// if asked — also when a quoted field is still open, line breaks in it or not: a writer
    /// may be between the two halves of a field spanning lines, and the record is read whole
    /// once it is complete ([`RecordReader::held_open_quote`] says where the quote opened) —
    /// else an error if a quote is still open, else a record.
    fn finish_unterminated(&mut self, line_before: u64) -> Result<Next, ReadError> {
        let raw = &self.buf[self.rec_start..self.pos];
        match open_quote(raw, self.delimiter, self.quote, line_before) {
            open if self.hold_unterminated => {
                self.held_open_quote = open.map(|(line, _)| line);
                self.pos = self.rec_start;
                self.nfields = 0;
                self.core.reset();
                self.core.set_line(line_before);
                Ok(Next::HeldBack)
            }
            Some((line, _)) => Err(ReadError::UnclosedQuote {
                line,
                record_line: self.line,
            }),
            None => Ok(Next::Record),
        }
    }

    /// The first quoted field of the record just read with text between its closing quote
    /// and the next delimiter or line break (`"bob"x`, which the tokenizer reads as `bobx`):
    /// the line of that text and the field's column (1-based). A quote inside a bare field
    /// (`a"b`) is text, kept as written, and not reported.
    ///
    /// Cost: nothing more for a record without a quoted field (its raw length is its fields'
    /// length plus delimiters, checked in O(1)); otherwise a bare field is stepped over by its
    /// length (its raw bytes are its value) and a quoted one is scanned for its closing quote.
    fn text_after_quote(&self, line_before: u64) -> Option<(u64, usize)> {
        let raw = &self.buf[self.rec_start..self.pos];
        let (q, n) = (self.quote, self.nfields);
        let is_break = |b: u8| b == b'\n' || b == b'\r';
        let lead = raw.iter().take_while(|b| is_break(**b)).count();
        let term = usize::from(raw.len() > lead && raw.last().is_some_and(|b| is_break(*b)));
        let values = if n == 0 { 0 } else { self.ends[n - 1] };
        // Every byte of a bare record is a value byte or a delimiter; a quoted field adds at
        // least its two quotes (an open one at the end of the file, whose last line break
        // may be taken for the terminator, at least one minus that one).
        if raw.len() == lead + term + values + n.saturating_sub(1) {
            return None;
        }
        let mut i = lead;
        for column in 0..n {
            if raw.get(i) == Some(&q) {
                // The closing quote: the next quote not doubled.
                let mut j = i + 1;
                loop {
                    j += raw.get(j..)?.iter().position(|b| *b == q)?;
                    if raw.get(j + 1) != Some(&q) {
                        break;
                    }
                    j += 2;
                }
                match raw.get(j + 1) {
                    Some(b) if *b != self.delimiter && !is_break(*b) => {
                        let breaks = raw[..=j].iter().filter(|b| **b == b'\n').count();
                        return Some((line_before + breaks as u64, column + 1));
                    }
                    _ => i = j + 1,
                }
            } else {
                i += self.field(column).len();
            }
            if raw.get(i) != Some(&self.delimiter) {
                return None;
            }
            i += 1;
        }
        None
    }

    /// Moves the current record's raw bytes to the front and reads more.
    fn refill(&mut self) -> io::Result<()> {
        if self.rec_start > 0 {
            self.buf.copy_within(self.rec_start..self.end, 0);
            self.base += self.rec_start as u64;
            self.pos -= self.rec_start;
            self.end -= self.rec_start;
            self.rec_start = 0;
        }
        if self.end == self.buf.len() {
            // One record fills the whole buffer: grow it for this record.
            let n = self.buf.len() * 2;
            self.buf.resize(n, 0);
        }
        let want = (self.buf.len() - self.end).min(self.read_size);
        loop {
            match self.file.read(&mut self.buf[self.end..self.end + want]) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(());
                }
                Ok(n) => {
                    self.end += n;
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// How many `\n` precede the record's first byte (skipped empty lines, the LF of a
    /// CRLF that ended the previous record).
    fn leading_newlines(&self) -> u64 {
        self.buf[self.rec_start..self.pos]
            .iter()
            .take_while(|b| **b == b'\n' || **b == b'\r')
            .filter(|b| **b == b'\n')
            .count() as u64
    }

    /// The file offset right after the last byte consumed (after the current record).
    pub(super) fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// After [`Next::HeldBack`]: the line where a quote still open at the end of the file
    /// opened (`None` when the held-back record has no open quote).
    pub(super) fn held_open_quote(&self) -> Option<u64> {
        self.held_open_quote
    }

    /// The line at [`RecordReader::offset`].
    pub(super) fn line_after(&self) -> u64 {
        self.core.line()
    }

    /// The line the current record starts on (1-based).
    pub(super) fn line(&self) -> u64 {
        self.line
    }

    /// The number of fields in the current record.
    pub(super) fn len(&self) -> usize {
        self.nfields
    }

    /// Field `i` of the current record, unescaped.
    pub(super) fn field(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.fields[start..self.ends[i]]
    }

    /// The byte range of field `i` in [`RecordReader::record_bytes`].
    pub(super) fn bounds(&self, i: usize) -> (usize, usize) {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        (start, self.ends[i])
    }

    /// Every field of the current record, unescaped, back to back.
    pub(super) fn record_bytes(&self) -> &[u8] {
        match self.nfields {
            0 => &[],
            n => &self.fields[..self.ends[n - 1]],
        }
    }

    /// Notes which fields of the current record were written in quotes, for
    /// [`RecordReader::is_quoted`].
    pub(super) fn scan_quotes(&mut self) {
        if self.quoted_valid {
            return;
        }
        self.quoted.clear();
        self.quoted_valid = true;
        let raw = &self.buf[self.rec_start..self.pos];
        let is_term = |b: u8| b == b'\n' || b == b'\r';
        let mut i = raw.iter().take_while(|b| is_term(**b)).count();
        loop {
            let quoted = raw.get(i) == Some(&self.quote);
            self.quoted.push(quoted);
            if quoted {
                i += 1;
                while i < raw.len() {
                    if raw[i] == self.quote {
                        if raw.get(i + 1) == Some(&self.quote) {
                            i += 2;
                            continue;
                        }
                        i += 1;
                        break;
                    }
                    i += 1;
                }
            }
            while i < raw.len() && raw[i] != self.delimiter && !is_term(raw[i]) {
                i += 1;
            }
            if raw.get(i) == Some(&self.delimiter) {
                i += 1;
            } else {
                break;
            }
        }
    }

    /// Whether field `i` of the current record was written in quotes; call
    /// [`RecordReader::scan_quotes`] first (`false` otherwise).
    pub(super) fn is_quoted(&self, i: usize) -> bool {
        self.quoted_valid && self.quoted.get(i).copied().unwrap_or(false)
    }
}

/// Whether a quoted field is still open at the end of `raw` (a record's bytes, leading line
/// breaks included, starting at line `line`): the line of its opening quote, and whether a
/// line break follows it. `csv-core`'s rules: a quote opens a quoted field only at the start
/// of a field; a doubled quote inside is one quote; after the closing quote, the rest of the
/// field is plain text.
fn open_quote(raw: &[u8], delimiter: u8, quote: u8, mut line: u64) -> Option<(u64, bool)> {
    #[derive(PartialEq)]
    enum State {
        FieldStart,
        Bare,
        Quoted,
        QuoteInQuoted,
    }
    let mut state = State::FieldStart;
    let mut opened = (line, false);
    for &b in raw {
        let line_break = b == b'\n' || b == b'\r';
        state = match state {
            State::FieldStart if b == quote => {
                opened = (line, false);
                State::Quoted
            }
            State::FieldStart if b == delimiter || line_break => State::FieldStart,
            State::FieldStart => State::Bare,
            State::Bare if b == delimiter => State::FieldStart,
            State::Bare => State::Bare,
            State::Quoted if b == quote => State::QuoteInQuoted,
            State::Quoted => {
                opened.1 |= line_break;
                State::Quoted
            }
            State::QuoteInQuoted if b == quote => State::Quoted,
            State::QuoteInQuoted if b == delimiter => State::FieldStart,
            State::QuoteInQuoted => State::Bare,
        };
        line += u64::from(b == b'\n');
    }
    (state == State::Quoted).then_some(opened)
}

fn read_up_to(file: &mut File, out: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < out.len() {
        match file.read(&mut out[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    fn reader_over(bytes: &[u8], read_size: usize) -> (tempfile::NamedTempFile, RecordReader) {
        let mut f = tempfile::NamedTempFile::new().expect("temp");
        f.write_all(bytes).expect("write");
        let file = File::open(f.path()).expect("open");
        let r = RecordReader::new(file, b',', b'"', read_size).expect("reader");
        (f, r)
    }

    /// (fields, quoted flags, start line, offset after) of every record.
    fn all(bytes: &[u8], read_size: usize) -> Vec<(Vec<String>, Vec<bool>, u64, u64)> {
        let (_f, mut r) = reader_over(bytes, read_size);
        let mut out = Vec::new();
        while r.read_record().expect("read") == Next::Record {
            let fields = (0..r.len())
                .map(|i| String::from_utf8_lossy(r.field(i)).into_owned())
                .collect();
            r.scan_quotes();
            let quoted = (0..r.len()).map(|i| r.is_quoted(i)).collect();
            out.push((fields, quoted, r.line(), r.offset()));
        }
        out
    }

    #[test]
    fn quoted_newlines_lines_and_offsets_at_every_read_size() {
        let data = b"a,b\r\n\"x\ny\",\"\"\r\n\r\n3,\"q\"\"\"\n4,z";
        let expected = all(data, 1 << 16);
        assert_eq!(
            expected,
            vec![
                (vec!["a".into(), "b".into()], vec![false, false], 1, 4),
                (vec!["x\ny".into(), "".into()], vec![true, true], 2, 14),
                (vec!["3".into(), "q\"".into()], vec![false, true], 5, 25),
                (vec!["4".into(), "z".into()], vec![false, false], 6, 28),
            ]
        );
        for size in 1..12 {
            assert_eq!(all(data, size), expected, "read size {size}");
        }
    }

    #[test]
    fn bom_only_at_byte_zero() {
        let with = all(b"\xef\xbb\xbfid\n1\n", 1);
        assert_eq!(with[0].0, ["id"]);
        let inner = all(b"id\n\xef\xbb\xbfx\n", 1 << 10);
        assert_eq!(inner[1].0, ["\u{feff}x"]);
        // After a seek to a record starting with a BOM, the BOM is data.
        let (_f, mut r) = reader_over(b"id\n\xef\xbb\xbfx\n", 2);
        r.seek(3, 2).expect("seek");
        assert_eq!(r.read_record().expect("read"), Next::Record);
        assert_eq!(r.field(0), "\u{feff}x".as_bytes());
        assert_eq!(r.line(), 2);
    }

    #[test]
    fn the_end_of_the_file_at_every_read_size() {
        for size in 1..12 {
            // A last record without a terminator: held back, the offset before it.
            let (_f, r) = reader_over(b"id\n1,a\n2,b", size);
            let mut r = r.with_limits(true, 1 << 20);
            assert_eq!(r.read_record().expect("header"), Next::Record);
            assert_eq!(r.read_record().expect("1"), Next::Record);
            assert_eq!(r.read_record().expect("2"), Next::HeldBack, "size {size}");
            assert_eq!((r.offset(), r.line_after()), (7, 3), "size {size}");
            assert_eq!(r.read_record().expect("again"), Next::HeldBack);
            assert_eq!(r.offset(), 7, "size {size}");
            // A quote open at the end: an error at its line when the file is complete;
            // held back when the file may still grow (a field spanning lines, half
            // written), wherever the quote opened, the reader before the record.
            let (_f, r) = reader_over(b"id,v\n1,\"a\nb\n2,c\n", size);
            let mut r = r.with_limits(false, 1 << 20);
            assert_eq!(r.read_record().expect("header"), Next::Record);
            match r.read_record() {
                Err(ReadError::UnclosedQuote { line, record_line }) => {
                    assert_eq!((line, record_line), (2, 2), "size {size}");
                }
                other => panic!("size {size}: {other:?}"),
            }
            let (_f, r) = reader_over(b"id,v\n0,z\n1,\"a\nb\n2,c\n", size);
            let mut r = r.with_limits(true, 1 << 20);
            for _ in 0..2 {
                assert_eq!(r.read_record().expect("record"), Next::Record);
            }
            assert_eq!(
                r.read_record().expect("held"),
                Next::HeldBack,
                "size {size}"
            );
            assert_eq!((r.offset(), r.line_after()), (9, 3), "size {size}");
            assert_eq!(r.held_open_quote(), Some(3), "size {size}");
            let (_f, r) = reader_over(b"id,v\n1,\"a", size);
            let mut r = r.with_limits(true, 1 << 20);
            assert_eq!(r.read_record().expect("header"), Next::Record);
            assert_eq!(r.read_record().expect("held"), Next::HeldBack);
            // A field over the limit, inside a quote that never closes.
            let (_f, r) = reader_over(b"id,v\n1,ok\n2,\"xxxxxxxxxxxxxxxxxxxx\n", size);
            let mut r = r.with_limits(false, 8);
            for _ in 0..2 {
                assert_eq!(r.read_record().expect("record"), Next::Record);
            }
            match r.read_record() {
                Err(ReadError::FieldTooLong { line, column }) => {
                    assert_eq!((line, column), (3, 2), "size {size}");
                }
                other => panic!("size {size}: {other:?}"),
            }
        }
    }

    #[test]
    fn open_quotes_follow_csv_core() {
        let q = |raw: &[u8]| open_quote(raw, b',', b'"', 1);
        assert_eq!(q(b"1,\"a"), Some((1, false)));
        assert_eq!(q(b"\n1,\"a\nb"), Some((2, true)));
        assert_eq!(q(b"1,\"a\"\"b\""), None, "a doubled quote, then closed");
        assert_eq!(q(b"1,a\"b"), None, "a quote inside a bare field is text");
        assert_eq!(
            q(b"1,\"a\"b\"c"),
            None,
            "after the closing quote the field is bare"
        );
        assert_eq!(q(b"1,\"a\",\"b"), Some((1, false)));
    }

    /// The first [`ReadError::TextAfterQuote`] reading every record of `bytes` (a complete
    /// file), the same at every read size.
    fn text_after(bytes: &[u8]) -> Option<(u64, usize)> {
        let first = |size| {
            let (_f, mut r) = reader_over(bytes, size);
            loop {
                match r.read_record() {
                    Ok(Next::Record) => {}
                    Ok(_) => return None,
                    Err(ReadError::TextAfterQuote { line, column }) => return Some((line, column)),
                    Err(e) => panic!("{e:?}"),
                }
            }
        };
        let want = first(1 << 16);
        for size in 1..12 {
            assert_eq!(first(size), want, "read size {size}");
        }
        want
    }

    #[test]
    fn text_after_a_closing_quote_is_found() {
        assert_eq!(text_after(b"1,\"bob\"x\n"), Some((1, 2)));
        assert_eq!(
            text_after(b"a,b\n1,\"bob\"x\"\n"),
            Some((2, 2)),
            "a quote after it"
        );
        assert_eq!(
            text_after(b"\n\n\"a\nb\" ,2\n"),
            Some((4, 1)),
            "after empty lines and a line break"
        );
        assert_eq!(
            text_after(b"x,\"\"\"bob\"\"\"x,y\r\n"),
            Some((1, 2)),
            "after doubled quotes"
        );
        assert_eq!(
            text_after(b"\"\"x,1\n"),
            Some((1, 1)),
            "after an empty quoted field"
        );
        assert_eq!(
            text_after(b"\"a\"\"b\",\"\"\r\n\"x,y\",\"\"\"\"\n"),
            None,
            "doubled quotes, empty quoted fields, CRLF"
        );
        assert_eq!(
            text_after(b"a\"b,c\"\"\n"),
            None,
            "quotes inside bare fields are text"
        );
        assert_eq!(
            text_after(b"\"a\"\n\"b\"x\n"),
            Some((2, 1)),
            "the second record"
        );
        assert_eq!(
            text_after(b"x,\"a\""),
            None,
            "closed at the end of the file"
        );
        // Through the reader: an error at the line and column, at every read size.
        for size in 1..12 {
            let (_f, mut r) = reader_over(b"id,name\n1,\"bob\"\n2,\"bob\"x\n", size);
            for _ in 0..2 {
                assert_eq!(
                    r.read_record().expect("record"),
                    Next::Record,
                    "size {size}"
                );
            }
            match r.read_record() {
                Err(ReadError::TextAfterQuote { line, column }) => {
                    assert_eq!((line, column), (3, 2), "size {size}");
                }
                other => panic!("size {size}: {other:?}"),
            }
        }
    }
}
