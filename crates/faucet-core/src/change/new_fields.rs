//! [`NewFields`]: a source of plain rows (a file, a query) whose records gain a field
//! delivers the same schema-change record (`op: "s"`, [`super::schema`]) a change source
//! delivers for an added column, right before the first record that has the field.
//!
//! A file or a query has no catalog and no DDL to read: its shape is the fields of its pages
//! (a CSV file's header, a JSONL line's keys, a result's columns). The wrapper keeps the
//! shape it last delivered — every field seen so far, in the order first seen — and compares
//! each page's fields with it by name:
//!
//! * a field not seen before is an **added column**: a page of one `s` record goes first
//!   (`table` the source's name, `before` the columns so far, `after` the columns with the
//!   new ones at the end and one `add` change each, typed by the page's field — or its
//!   first non-null value when the field's type is not known — `type` being faucet's type
//!   name, the source has no other);
//! * a field a page lacks is **not** a drop: a JSONL line may leave a key out, a CSV file
//!   after a wider one may be narrower; the target keeps the column and the rows leave it
//!   NULL. Nor is a field whose type differs from the one first seen a type change (a JSONL
//!   field's type is its values' in the page). Renames cannot be told from a drop and an add
//!   without a catalog, so a renamed field is an added one.
//!
//! The first shape (the first page of a first run) is taken as it is. The shape travels in
//! the bookmark (`"shapes": {"<table>": [...]}`, [`super::schema::add_shapes_to`]), durable
//! with the page that delivered it, so a restart after the `s` page neither repeats it nor
//! misses it, and a source re-run later (a query over a table that gained a column, a file
//! read after a wider one) compares with what it delivered last. The `s` page carries the
//! bookmark before the page that has the new field (the inner source's position is not
//! moved, only the shape): resuming from it reads that page again, with the field known.
//! The wrapped source never sees the `shapes` member.
//!
//! Only a sink that alters its tables wants these records (the SQL sinks: the CLI wraps a
//! file or query source when the pipeline's sink is one); a file or a bus takes the rows as
//! they come.

use std::sync::Arc;

use async_trait::async_trait;

use super::schema::{
    ChangeKind, ColumnChange, ColumnShape, Identified, SHAPES, SchemaChange, Shapes, add_shapes_to,
    before_value, data_type_name, shapes_from_bookmark,
};
use super::{Op, record_schema};
use crate::FaucetError;
use crate::keys::TableKeys;
use crate::page::{Bookmark, Page, PageBuilder};
use crate::value::{Schema, Value};
use crate::{PageStream, ReadOptions, ReplayGuarantee, RetentionMonitor, Source};

/// A source of plain rows that delivers a schema-change record before the first record with
/// a new field (module docs). Everything else is the wrapped source's.
pub struct NewFields {
    inner: Box<dyn Source>,
    table: String,
}

impl NewFields {
    /// Wraps `inner`; `table` names its records' table in the `s` records and in the
    /// bookmark's shapes (a file source's path, a query source's table or `query`).
    pub fn new(inner: Box<dyn Source>, table: impl Into<String>) -> Self {
        Self {
            inner,
            table: table.into(),
        }
    }
}

/// `bookmark` without its `shapes` member, and the shapes it held.
///
/// # Errors
/// [`FaucetError::Bookmark`] when `shapes` is malformed.
fn split_shapes(
    connector: &str,
    bookmark: Option<Bookmark>,
) -> Result<(Option<Bookmark>, Shapes), FaucetError> {
    let Some(mut b) = bookmark else {
        return Ok((None, Shapes::new()));
    };
    let shapes = shapes_from_bookmark(connector, &b)?;
    if let Some(obj) = b.as_object_mut() {
        obj.remove(SHAPES);
    }
    Ok((Some(b), shapes))
}

#[async_trait]
impl Source for NewFields {
    fn connector(&self) -> &str {
        self.inner.connector()
    }

    fn replay(&self) -> ReplayGuarantee {
        self.inner.replay()
    }

    fn resumes_without_bookmark(&self) -> bool {
        self.inner.resumes_without_bookmark()
    }

    fn reads_in_task(&self) -> bool {
        self.inner.reads_in_task()
    }

    /// Opens the wrapped source from `from` without its `shapes`.
    ///
    /// # Errors
    /// [`FaucetError::Bookmark`] for a malformed `shapes`; the wrapped source's errors.
    async fn open(
        &self,
        from: Option<Bookmark>,
        options: ReadOptions,
    ) -> Result<Box<dyn PageStream + '_>, FaucetError> {
        let (from, shapes) = split_shapes(self.connector(), from)?;
        let shape = shapes.get(&self.table).cloned();
        let inner = self.inner.open(from.clone(), options).await?;
        Ok(Box::new(Stream {
            inner,
            table: self.table.clone(),
            shape,
            last: from,
            pending: None,
        }))
    }

    async fn check(&self) -> Result<(), FaucetError> {
        self.inner.check().await
    }

    async fn check_resume(&self, from: &Bookmark) -> Result<Option<String>, FaucetError> {
        let (from, _) = split_shapes(self.connector(), Some(from.clone()))?;
        self.inner
            .check_resume(&from.unwrap_or(Bookmark::Null))
            .await
    }

    fn record_schema(&self) -> Option<Arc<Schema>> {
        self.inner.record_schema()
    }

    async fn table_keys(&self) -> Result<Option<Vec<TableKeys>>, FaucetError> {
        self.inner.table_keys().await
    }

    fn retention_monitor(&self) -> Option<Box<dyn RetentionMonitor>> {
        self.inner.retention_monitor()
    }

    async fn current_shapes(&self) -> Result<Option<Shapes>, FaucetError> {
        self.inner.current_shapes().await
    }
}

/// An open [`NewFields`] read.
struct Stream<'a> {
    inner: Box<dyn PageStream + 'a>,
    table: String,
    /// The shape delivered so far (`None` until the first page).
    shape: Option<Vec<Identified>>,
    /// The wrapped source's bookmark before the next page.
    last: Option<Bookmark>,
    /// The page held back behind its `s` page.
    pending: Option<Page>,
}

impl Stream<'_> {
    /// The bookmark `inner` with the current shape.
    fn with_shape(&self, inner: Option<&Bookmark>) -> Option<Bookmark> {
        let mut b = inner?.clone();
        if let Some(shape) = &self.shape {
            let mut shapes = Shapes::new();
            shapes.insert(self.table.clone(), shape.clone());
            add_shapes_to(&mut b, &shapes);
        }
        Some(b)
    }

    /// The columns of `page` the shape does not have yet, typed (see the module).
    fn added(&self, page: &Page) -> Vec<Identified> {
        let known = |name: &str| {
            self.shape
                .as_ref()
                .is_some_and(|s| s.iter().any(|c| c.shape.name == name))
        };
        page.schema()
            .fields()
            .iter()
            .enumerate()
            .filter(|(_, f)| !known(&f.name))
            .map(|(i, f)| {
                let data_type = page.field_type(i);
                Identified {
                    shape: ColumnShape {
                        name: f.name.clone(),
                        source_type: data_type_name(&data_type),
                        data_type,
                        key: false,
                    },
                    id: 0,
                }
            })
            .collect()
    }

    /// The page of the one `s` record adding `added` to `old`, with `bookmark`.
    fn schema_page(
        &self,
        old: &[Identified],
        added: &[Identified],
        bookmark: Option<Bookmark>,
    ) -> Page {
        let columns: Vec<ColumnShape> = old.iter().chain(added).map(|c| c.shape.clone()).collect();
        let change = SchemaChange {
            changes: added
                .iter()
                .map(|c| ColumnChange {
                    kind: ChangeKind::Add,
                    column: c.shape.name.clone(),
                    from: None,
                    to: None,
                    source_type: Some(c.shape.source_type.clone()),
                    data_type: Some(c.shape.data_type.clone()),
                })
                .collect(),
            columns,
        };
        let before: Vec<ColumnShape> = old.iter().map(|c| c.shape.clone()).collect();
        let mut b = PageBuilder::new(record_schema(Vec::new(), Vec::new()), 1);
        b.push_row([
            Value::Text(Op::Schema.code().into()),
            Value::Text(self.table.as_str().into()),
            Value::Null,
            before_value(&before),
            change.after_value(),
        ]);
        b.finish(bookmark)
    }
}

#[async_trait]
impl PageStream for Stream<'_> {
    async fn next_page(&mut self) -> Result<Option<Page>, FaucetError> {
        if let Some(page) = self.pending.take() {
            return Ok(Some(page));
        }
        let Some(mut page) = self.inner.next_page().await? else {
            return Ok(None);
        };
        let inner = page.bookmark().cloned();
        let mut schema_page = None;
        if !page.is_empty() {
            let added = self.added(&page);
            match self.shape.take() {
                None => self.shape = Some(added),
                Some(old) if added.is_empty() => self.shape = Some(old),
                Some(old) => {
                    tracing::info!(
                        table = %self.table,
                        added = ?added.iter().map(|c| c.shape.name.as_str()).collect::<Vec<_>>(),
                        "the records gained fields: a schema-change record (added columns) \
                         goes before the first record that has them"
                    );
                    let mut shape = old.clone();
                    shape.extend(added.iter().cloned());
                    self.shape = Some(shape);
                    let before = self.with_shape(self.last.as_ref());
                    schema_page = Some(self.schema_page(&old, &added, before));
                }
            }
        }
        page.set_bookmark(self.with_shape(inner.as_ref()));
        if inner.is_some() {
            self.last = inner;
        }
        match schema_page {
            Some(s) => {
                self.pending = Some(page);
                Ok(Some(s))
            }
            None => Ok(Some(page)),
        }
    }

    async fn bookmark_durable(&mut self, bookmark: &Bookmark) -> Result<(), FaucetError> {
        let (b, _) = split_shapes("", Some(bookmark.clone()))?;
        match b {
            Some(b) => self.inner.bookmark_durable(&b).await,
            None => Ok(()),
        }
    }

    fn reads_ahead(&self) -> bool {
        self.inner.reads_ahead()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::value::{DataType, Field};

    /// A source of one-row pages, page `i` with the fields `pages[i]` (each value `i`), its
    /// bookmark `{"offset": i + 1}`.
    struct Pages(Vec<Vec<&'static str>>);

    struct PagesStream<'a>(&'a Pages, usize);

    #[async_trait]
    impl Source for Pages {
        fn connector(&self) -> &str {
            "pages"
        }
        fn replay(&self) -> ReplayGuarantee {
            ReplayGuarantee::Deterministic
        }
        async fn open(
            &self,
            from: Option<Bookmark>,
            _options: ReadOptions,
        ) -> Result<Box<dyn PageStream + '_>, FaucetError> {
            assert!(from.as_ref().is_none_or(|b| b.get(SHAPES).is_none()));
            let at = from.and_then(|b| b["offset"].as_u64()).unwrap_or(0);
            Ok(Box::new(PagesStream(
                self,
                usize::try_from(at).unwrap_or(0),
            )))
        }
        async fn check(&self) -> Result<(), FaucetError> {
            Ok(())
        }
    }

    #[async_trait]
    impl PageStream for PagesStream<'_> {
        async fn next_page(&mut self) -> Result<Option<Page>, FaucetError> {
            let Some(fields) = self.0.0.get(self.1) else {
                return Ok(None);
            };
            let schema = Arc::new(Schema::new(
                fields
                    .iter()
                    .map(|f| Field::new(*f, DataType::Int))
                    .collect(),
            ));
            let mut b = PageBuilder::new(schema, 1);
            b.push_row(fields.iter().map(|_| Value::Int(self.1 as i64)));
            self.1 += 1;
            Ok(Some(b.finish(Some(json!({"offset": self.1})))))
        }
    }

    /// Each page of a read from `from`: `s+w` for a schema change adding `w`, else its
    /// fields (`id,v`); and the bookmarks.
    async fn read(source: &NewFields, from: Option<Bookmark>) -> (Vec<String>, Vec<Bookmark>) {
        let mut stream = source
            .open(from, ReadOptions::default())
            .await
            .expect("opens");
        let (mut seen, mut bookmarks) = (Vec::new(), Vec::new());
        while let Some(page) = stream.next_page().await.expect("a page") {
            let row = page.row(0).expect("a row").to_json();
            seen.push(if row["op"] == "s" {
                let added: Vec<String> = row["after"]["changes"]
                    .as_array()
                    .expect("changes")
                    .iter()
                    .map(|c| format!("{}{}", c["kind"].as_str().unwrap_or("?"), c["column"]))
                    .collect();
                format!("s {}", added.join(" "))
            } else {
                page.schema().names().collect::<Vec<_>>().join(",")
            });
            bookmarks.push(page.bookmark().cloned().expect("a bookmark"));
        }
        (seen, bookmarks)
    }

    #[tokio::test]
    async fn a_new_field_is_announced_once_before_its_first_page_and_resumes_keep_it() {
        let source = NewFields::new(
            Box::new(Pages(vec![
                vec!["id", "v"],
                vec!["id"],
                vec!["id", "v", "w"],
                vec!["w", "id"],
                vec!["id", "x", "y"],
            ])),
            "t.jsonl",
        );
        let (seen, bookmarks) = read(&source, None).await;
        assert_eq!(
            seen,
            [
                "id,v",
                "id",
                "s add\"w\"",
                "id,v,w",
                "w,id",
                "s add\"x\" add\"y\"",
                "id,x,y"
            ]
        );
        // The `s` page keeps the position before its page, with the new shape.
        assert_eq!(bookmarks[2]["offset"], 2);
        assert_eq!(
            bookmarks[2][SHAPES]["t.jsonl"].as_array().map(Vec::len),
            Some(3)
        );
        assert_eq!(bookmarks[3]["offset"], 3);
        // Resuming from the `s` page's bookmark reads its page again, not the change.
        let (seen, _) = read(&source, Some(bookmarks[2].clone())).await;
        assert_eq!(seen, ["id,v,w", "w,id", "s add\"x\" add\"y\"", "id,x,y"]);
        // Resuming before it (a crash before the `s` page was durable) announces it again.
        let (seen, _) = read(&source, Some(bookmarks[1].clone())).await;
        assert_eq!(seen[0], "s add\"w\"");
        // A bookmark of an older faucet (no shapes): the first page's shape is taken as is.
        let (seen, _) = read(&source, Some(json!({"offset": 3}))).await;
        assert_eq!(seen, ["w,id", "s add\"x\" add\"y\"", "id,x,y"]);
    }
}
