//! `faucet doctor`'s drift line with MySQL on either side (issue 24), through the binary:
//!
//! * `mysql-cdc` → MySQL, source and target made with types MariaDB's catalog spells unlike
//!   the binlog's table maps (`int(5) unsigned zerofill`, `tinyint(1)`, `year(4)`,
//!   `float(7,3)`, JSON, `datetime(3)`, an ENUM with upper-case members): no drift while
//!   nothing changed; a column added while faucet was stopped is the change a run delivers
//!   first, with the `ALTER TABLE` it applies — which the run then does.
//! * `postgres-cdc` → MySQL, a target made by hand without one of the source's columns: the
//!   column a run fails on, with the statement that adds it.

use super::doctor::{drift_says, no_drift};
use super::mysql::{cdc_to_mysql, drop_both, mysql_columns, mysql_sink};
use super::{config, faucet};
use crate::support::mariadb::mariadb as binlog_sql;
use crate::support::mysql::{database, mariadb as sink_sql};
use crate::support::output_of_success;
use crate::support::pg::{Names, cleanup, sql};
use crate::support::{pg_pool, runtime};

/// The source's and the target's columns: types whose `COLUMN_TYPE` is not the table map's
/// spelling of them, and some that are; text in charsets whose widest character is 4 (utf16:
/// a table map's byte length over 2 once spelled `varchar(20)`), 3 (utf8mb3) and 2 (gbk)
/// bytes; a MariaDB `uca1400` collation (its id only in
/// `COLLATION_CHARACTER_SET_APPLICABILITY`: once an unsupported charset).
const TABLE: &str = "(id int PRIMARY KEY, v int(5) unsigned zerofill, flag tinyint(1), \
                     y year(4), f float(7,3), j json, d datetime(3), e enum('A','b'), \
                     note varchar(10), u varchar(10) CHARACTER SET utf16, \
                     m varchar(4) CHARACTER SET utf8mb3, g char(6) CHARACTER SET gbk, \
                     k varchar(5) COLLATE utf8mb4_uca1400_ai_ci)";

#[test]
fn doctor_reports_a_mysql_cdc_change_made_while_stopped_and_the_alter_for_a_mysql_target() {
    let db = database("schema_dm");
    let dir = tempfile::tempdir().expect("tempdir");
    crate::support::with_cleanup(
        || {
            cdc_to_mysql(dir.path(), ("schema_dm", 4, 100), &db, TABLE);
            binlog_sql(&format!(
                "INSERT INTO {db}.items VALUES (1, 7, 1, 2024, 1.5, '{{\"a\": 1}}', \
                 '2024-01-02 03:04:05.123', 'A', 'n1', 'u1😀', 'm1é', 'g1', 'k1é')"
            ));
            output_of_success(&mut faucet(dir.path()), "the run of row 1");
            // The bookmark holds the table map's shape; the catalog's is the same table.
            no_drift(dir.path(), &format!("{db}.items → {db}.target: no drift"));

            // Faucet is stopped; the source gains a column.
            binlog_sql(&format!("ALTER TABLE {db}.items ADD COLUMN w varchar(20)"));
            let said = drift_says(
                dir.path(),
                true,
                &[
                    "the source changed since the last run (column `w` added, varchar(20))",
                    &format!(
                        "a run applies: ALTER TABLE `{db}`.`target` ADD COLUMN `w` varchar(20) \
                         NULL"
                    ),
                ],
            );
            assert!(!said.contains("column `v`"), "{said}");

            // The run applies it, as doctor said; then there is nothing left to say.
            binlog_sql(&format!(
                "INSERT INTO {db}.items VALUES (2, 8, 0, 2025, 2.5, '[]', \
                 '2025-01-02 03:04:05.456', 'b', 'n2', 'u2', 'm2', 'g2', 'k2', 'w2')"
            ));
            output_of_success(&mut faucet(dir.path()), "the run after the ADD");
            let columns = mysql_columns(&db, "target");
            assert_eq!(
                columns.last().map(Vec::as_slice),
                Some(["w".to_owned(), "varchar(20)".to_owned()].as_slice()),
                "{columns:?}"
            );
            assert_eq!(
                sink_sql(&format!(
                    "SELECT id, u, m, g, k, w FROM {db}.target ORDER BY id"
                )),
                [
                    ["1", "u1😀", "m1é", "g1", "k1é", "NULL"],
                    ["2", "u2", "m2", "g2", "k2", "w2"]
                ]
                .map(|r| r.map(str::to_owned).to_vec())
                .to_vec(),
            );
            no_drift(dir.path(), "target: no drift");
        },
        || drop_both(&db),
    );
}

#[test]
fn doctor_reports_a_column_a_mysql_target_lacks_for_a_postgres_cdc_source() {
    let rt = runtime();
    let pool = rt.block_on(pg_pool());
    let names = Names::new("schema_dpm");
    let s = names.schema.clone();
    let db = database("schema_dpm");
    let dir = tempfile::tempdir().expect("tempdir");
    crate::support::with_cleanup(
        || {
            sql(&format!(
                "CREATE SCHEMA {s}; CREATE TABLE {s}.items (id int PRIMARY KEY, v integer, \
                 note varchar(10), w text)"
            ));
            sink_sql(&format!(
                "CREATE DATABASE {db}; CREATE TABLE {db}.target (id int PRIMARY KEY, v int, \
                 note varchar(10)) ENGINE=InnoDB"
            ));
            config(dir.path(), &names, &mysql_sink(&db, ""), 100, "");
            output_of_success(&mut faucet(dir.path()), "the first run");
            let said = drift_says(
                dir.path(),
                false,
                &[
                    "column `w` (text) is in the source, not in the target",
                    "a run fails at the first row that has it",
                    &format!("add it: ALTER TABLE `{db}`.`target` ADD COLUMN `w` text NULL"),
                ],
            );
            // `int(11)` holds `integer`, `varchar(10)` holds `character varying(10)`.
            for other in ["column `id`", "column `v`", "column `note`"] {
                assert!(!said.contains(other), "{said}");
            }
            sink_sql(&format!("ALTER TABLE {db}.target ADD COLUMN w text NULL"));
            no_drift(dir.path(), &format!("{s}.items → {db}.target: no drift"));
        },
        || {
            rt.block_on(cleanup(&pool, &names));
            sink_sql(&format!("DROP DATABASE IF EXISTS {db}"));
        },
    );
}
