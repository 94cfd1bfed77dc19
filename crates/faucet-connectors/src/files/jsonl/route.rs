//! A routed `jsonl` sink: `path: "out/{table}.jsonl"` writes each source table's change
//! records into its own file.
//!
//! * The path is a [`TableTemplate`] (the placeholders of every routing sink: `{table}`,
//!   `{schema}` / `{database}`, `{source_table}`), rendered for a record's `table` field. A
//!   record without one (a plain row of a file or a query, or a change record whose `table`
//!   is null) is a [`FaucetError::Data`] naming the record.
//! * Safe names: the source table must make a file name inside the template's directories,
//!   so a name with `/`, `\`, `..`, NUL or another control character, or with an empty part
//!   (`public.`), is a [`FaucetError::Data`] naming the table: a table named `../x` never
//!   escapes the directory.
//! * One table a file: a second source table rendering a file another one's records went
//!   to (`{table}` for `a.orders` and `b.orders`, matched by patterns the registry could not
//!   check offline) is a [`FaucetError::Data`] naming both, as the SQL sinks refuse a taken
//!   target.
//! * Files are opened on their table's first record (created with their directories when
//!   missing, their torn last line repaired as a single file's is) and kept open; past
//!   `max_open_files` open, the least recently written one is made durable (fsynced) and
//!   closed, and reopened (inspected and repaired again) when its table comes back. So 200
//!   tables work with 64 descriptors; each open file holds up to two 256 KiB buffers.
//! * Durability: `flush` makes every file written since the last flush durable (its data,
//!   and every directory whose entries it created), all syncs running at once, before the
//!   run loop persists the bookmark.
//! * The lost-bookmark guard ([`faucet_core::SinkWriter::holds_data`]): when every
//!   placeholder is in the file name (`out/{table}.jsonl`), the template's directory is
//!   listed and any file there the template could name that holds a record counts as data;
//!   with a placeholder in a directory (`out/{schema}/{table}.jsonl`) the answer is unknown
//!   (`None`) and the run proceeds, as for other routed sinks.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use faucet_core::change::{ChangeLayout, TABLE};
use faucet_core::route::TableTemplate;
use faucet_core::{FaucetError, Page, Value, fault};

use super::file::{OpenFile, holds_records, write_error};
use super::keys::NestedKeys;
use super::output::{Output, SyncTask};
use super::sink::{CONNECTOR, absolute, push_line};
use crate::files::blocking;

/// One file a routed sink writes.
struct Target {
    /// The source table whose records it holds.
    table: String,
    path: PathBuf,
    /// The absolute path as text (`.` and `..` applied lexically), the target's name in
    /// per-target counts.
    label: String,
    /// `Some` while open.
    output: Option<Output>,
    /// When it was last written ([`Routed::clock`]), for closing the least recently used.
    used: u64,
    /// Records of the page being written.
    count: u64,
}

/// The open files of a routed sink (module docs).
pub(super) struct Routed {
    template: TableTemplate,
    max_open: usize,
    /// Every file met, by the order first met.
    targets: Vec<Target>,
    /// Source table → its target.
    by_table: HashMap<String, usize>,
    /// Rendered path → its target (a second table rendering a taken file is refused).
    by_path: HashMap<PathBuf, usize>,
    /// How many targets are open.
    open: usize,
    clock: u64,
}

impl Routed {
    /// A routed writer of `template` keeping at most `max_open` (≥ 1) files open.
    pub(super) fn new(template: TableTemplate, max_open: usize) -> Self {
        Self {
            template,
            max_open: max_open.max(1),
            targets: Vec::new(),
            by_table: HashMap::new(),
            by_path: HashMap::new(),
            open: 0,
            clock: 0,
        }
    }

    /// Writes `page`'s records, each into its table's file; `written` gets the page's
    /// records per file.
    ///
    /// # Errors
    /// [`FaucetError::Data`] naming the record without a source table, or the table whose
    /// name would not make a safe file name; [`FaucetError::Write`] naming a file that
    /// cannot be created, repaired, written or (closing it) fsynced.
    pub(super) async fn write(
        &mut self,
        page: &Page,
        keys: &[Vec<u8>],
        nested: &mut NestedKeys,
        written: &mut Vec<(String, u64)>,
    ) -> Result<(), FaucetError> {
        self.check_usable()?;
        let schema = page.schema();
        let table_at = ChangeLayout::of(schema).and_then(|_| schema.index_of(TABLE));
        let half = page.len().div_ceil(2);
        for (i, row) in page.rows().enumerate() {
            let values = row.values();
            let table = table_at.and_then(|t| match values.get(t) {
                Some(Value::Text(s)) => Some(s.as_str()),
                _ => None,
            });
            let id = self.target_of(table, i)?;
            let out = self.ready(id).await?;
            push_line(&mut out.buf, keys, nested, values);
            out.write_full().await?;
            self.targets[id].count += 1;
            if i + 1 == half {
                for out in self.targets.iter_mut().filter_map(|t| t.output.as_mut()) {
                    out.write_out().await?;
                    out.wait_written().await?;
                }
                fault::point(fault::MID_PAGE);
            }
        }
        for t in &mut self.targets {
            if t.count > 0 {
                written.push((t.label.clone(), std::mem::take(&mut t.count)));
            }
        }
        Ok(())
    }

    /// Fails when a write to an open file failed earlier.
    fn check_usable(&self) -> Result<(), FaucetError> {
        self.targets
            .iter()
            .filter_map(|t| t.output.as_ref())
            .try_for_each(Output::check_usable)
    }

    /// The target of records of `table` (record `index` of the page, for errors).
    fn target_of(&mut self, table: Option<&str>, index: usize) -> Result<usize, FaucetError> {
        let at = || format!("record {} of the page", index + 1);
        let Some(table) = table else {
            let message = self
                .template
                .render(None)
                .err()
                .unwrap_or_else(|| "the record has no source table".to_owned());
            return Err(FaucetError::data(CONNECTOR, at(), message));
        };
        if let Some(&id) = self.by_table.get(table) {
            return Ok(id);
        }
        let quoted = table.escape_debug().to_string();
        safe_table(table)
            .map_err(|m| FaucetError::data(CONNECTOR, format!("table \"{quoted}\""), m))?;
        let rendered = self
            .template
            .render(Some(table))
            .map_err(|m| FaucetError::data(CONNECTOR, format!("table {table}"), m))?;
        let path = PathBuf::from(rendered);
        let id = match self.by_path.get(&path) {
            Some(&id) => {
                return Err(FaucetError::data(
                    CONNECTOR,
                    format!("table {table}"),
                    format!(
                        "its records would go into `{}`, which holds table {}'s: two source \
                         tables in one file are refused (their lines would be mixed in a file \
                         named for one table); put both placeholders in `path` \
                         (\"{{schema}}_{{table}}.jsonl\") or route them apart",
                        path.display(),
                        self.targets[id].table
                    ),
                ));
            }
            None => {
                self.targets.push(Target {
                    table: table.to_owned(),
                    label: absolute(&path).display().to_string(),
                    path: path.clone(),
                    output: None,
                    used: 0,
                    count: 0,
                });
                self.by_path.insert(path, self.targets.len() - 1);
                self.targets.len() - 1
            }
        };
        self.by_table.insert(table.to_owned(), id);
        Ok(id)
    }

    /// The open output of target `id`: opened (and repaired) now when it is not, after
    /// closing the least recently used file when `max_open` are open.
    async fn ready(&mut self, id: usize) -> Result<&mut Output, FaucetError> {
        self.clock += 1;
        self.targets[id].used = self.clock;
        if self.targets[id].output.is_none() {
            if self.open >= self.max_open {
                self.close_least_recent(id).await?;
            }
            let path = self.targets[id].path.clone();
            let opened = blocking::write(CONNECTOR, move || OpenFile::open(&path)).await??;
            let mut out = Output::new(self.targets[id].path.clone(), opened, false);
            out.prepare().await?;
            self.targets[id].output = Some(out);
            self.open += 1;
        }
        self.targets[id]
            .output
            .as_mut()
            .ok_or_else(|| FaucetError::write(CONNECTOR, "a routed output was not open", None))
    }

    /// Makes the least recently written open file (other than `keep`) durable and closes
    /// it. A file whose flush fails stays open (and failed), so the writer refuses to go on.
    async fn close_least_recent(&mut self, keep: usize) -> Result<(), FaucetError> {
        let victim = self
            .targets
            .iter()
            .enumerate()
            .filter(|(i, t)| *i != keep && t.output.is_some())
            .min_by_key(|(_, t)| t.used)
            .map(|(i, _)| i);
        let Some(victim) = victim else {
            return Ok(());
        };
        if let Some(out) = self.targets[victim].output.as_mut() {
            out.flush().await?;
        }
        self.targets[victim].output = None;
        self.open -= 1;
        Ok(())
    }

    /// Makes every file written since the last flush durable; the syncs run at once.
    ///
    /// # Errors
    /// The first file's [`FaucetError::Write`] (every sync is still awaited).
    pub(super) async fn flush(&mut self) -> Result<(), FaucetError> {
        let mut tasks: Vec<(usize, SyncTask)> = Vec::new();
        for (id, t) in self.targets.iter_mut().enumerate() {
            if let Some(out) = t.output.as_mut() {
                out.drain().await?;
                if let Some(task) = out.start_sync() {
                    tasks.push((id, task));
                }
            }
        }
        let mut first = Ok(());
        for (id, task) in tasks {
            if let Some(out) = self.targets[id].output.as_mut() {
                let synced = out.finish_sync(task).await;
                if first.is_ok() {
                    first = synced;
                }
            }
        }
        first
    }

    /// Whether some file the template could name holds a record (module docs), `None` when
    /// a placeholder is in a directory; also `true` when a record waits in a buffer.
    ///
    /// # Errors
    /// [`FaucetError::Write`] when the directory or a matching file cannot be read.
    pub(super) async fn holds_data(&self) -> Result<Option<bool>, FaucetError> {
        if self
            .targets
            .iter()
            .filter_map(|t| t.output.as_ref())
            .any(|o| !o.buf.is_empty())
        {
            return Ok(Some(true));
        }
        let template = self.template.clone();
        blocking::write(CONNECTOR, move || scan(&template)).await?
    }
}

/// Refuses a source table whose name would not make a safe file name (module docs).
fn safe_table(table: &str) -> Result<(), String> {
    let (outer, name) = table.split_once('.').unwrap_or(("x", table));
    let why = if outer.is_empty() || name.is_empty() {
        "has an empty part"
    } else if table.contains(['/', '\\']) {
        "has a `/` or `\\`"
    } else if table.contains("..") {
        "has `..`"
    } else if table.chars().any(char::is_control) {
        "has a NUL or another control character"
    } else {
        return Ok(());
    };
    Err(format!(
        "the source table's name {why}, so it cannot name a file inside the `path` template's \
         directory safely; rename the table, or route it with a fixed `path`"
    ))
}

/// The lost-bookmark scan of [`Routed::holds_data`].
fn scan(template: &TableTemplate) -> Result<Option<bool>, FaucetError> {
    let prefix = template.fixed_prefix();
    let (dir, names_from) = match prefix.rfind('/') {
        Some(0) => (PathBuf::from("/"), 1),
        Some(i) => (PathBuf::from(&prefix[..i]), i + 1),
        None => (PathBuf::from("."), 0),
    };
    let Ok(sample) = template.render(Some("s.t")) else {
        return Ok(None);
    };
    if sample
        .get(names_from..)
        .is_none_or(|rest| rest.contains('/'))
    {
        return Ok(None);
    }
    let entries = match fs::read_dir(&dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Some(false)),
        other => other.map_err(|e| write_error(&dir, "cannot list", e))?,
    };
    for entry in entries {
        let entry = entry.map_err(|e| write_error(&dir, "cannot list", e))?;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        let candidate = format!("{}{name}", &prefix[..names_from]);
        let path = Path::new(&candidate);
        if template.could_render(&candidate)
            && fs::metadata(path).is_ok_and(|m| m.is_file())
            && holds_records(path)?
        {
            return Ok(Some(true));
        }
    }
    Ok(Some(false))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsafe_table_names_are_refused() {
        for bad in [
            "../x", "a/b", "public.", ".x", "a..b", "s.t\u{0}", "s.t\n", "x\\y",
        ] {
            assert!(safe_table(bad).is_err(), "{bad:?}");
        }
        for good in [
            "public.orders",
            "orders",
            "shop.order lines",
            "s.t-1",
            "s.Ünïcode",
        ] {
            assert!(safe_table(good).is_ok(), "{good:?}");
        }
    }
}
