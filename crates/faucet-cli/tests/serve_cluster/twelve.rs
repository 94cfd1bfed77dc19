//! Twelve pipelines on three members: SIGKILL one, its rows resume on the others within the
//! ttl and every target equals its source; the killed member rejoins and gets exactly its rows
//! back; a SIGTERMed member hands over within a heartbeat.

use super::*;

/// The three CSV → PostgreSQL append rows (`a0`…), the three CSV → JSON Lines rows
/// (`j0`…), the four query → upsert rows (`q0`…), the CDC rows `cdcup` and `cdcaudit`.
const CSV_ROWS: [&str; 6] = ["a0", "a1", "a2", "j0", "j1", "j2"];

/// What the sources hold, so the targets can be checked.
struct Sources {
    /// Rows in every CSV file (ids 1..=n).
    csv: u64,
    /// Rows in `src` (ids 1..=n, v = `v{id}`).
    src: i64,
    /// Every change made to `csrc`: (op, id, v).
    changes: Vec<(String, i64, i64)>,
}

fn setup(c: &mut Cluster) -> Sources {
    let s = c.schema.clone();
    let suffix = unique_suffix();
    let slots = [format!("cl_up_{suffix}"), format!("cl_audit_{suffix}")];
    let pubs = [
        format!("cl_pub_up_{suffix}"),
        format!("cl_pub_audit_{suffix}"),
    ];
    c.slots.extend(slots.iter().cloned());
    c.publications.extend(pubs.iter().cloned());
    c.sql(&format!(
        "CREATE TABLE {s}.src (id int PRIMARY KEY, v text NOT NULL);
         INSERT INTO {s}.src SELECT g, 'v' || g FROM generate_series(1, 100) g;
         CREATE TABLE {s}.csrc (id int PRIMARY KEY, v int NOT NULL);"
    ));
    for f in CSV_ROWS {
        c.dir.write(&format!("{f}.csv"), numbered_csv(1, 100, true));
    }
    let state = c.state_yaml();
    let url = "\"${env:FAUCET_CL_PG_URL}\"";
    let every = "schedule: \"*/1 * * * * *\"";
    let matrix = |rows: &[&str], row: &dyn Fn(&str) -> String| {
        rows.iter()
            .map(|r| format!("  - {}\n", row(r)))
            .collect::<String>()
    };
    let eo = "  delivery: effectively_once\n";
    // Pipeline `name`, every second, with a matrix of one row per `rows` item.
    let write = |name: &str,
                 source: &str,
                 sink: &str,
                 delivery: &str,
                 rows: &[&str],
                 row: &dyn Fn(&str) -> String| {
        let tail = format!(
            "{delivery}  batch_size: 7\n  {every}\nmatrix:\n{}",
            matrix(rows, row)
        );
        c.dir.write(
            &format!("pipelines/{name}.yaml"),
            config_yaml(name, source, sink, &state, &tail),
        );
    };
    write(
        "csvpg",
        "{ type: csv, config: { path: ../a0.csv, columns: { id: int } } }",
        &format!(
            "{{ type: postgres, config: {{ connection_url: {url}, table: {s}.a0, create_table: true }} }}"
        ),
        eo,
        &["a0", "a1", "a2"],
        &|r| {
            format!(
                "{{ id: {r}, source: {{ config: {{ path: ../{r}.csv }} }}, sink: {{ config: {{ table: {s}.{r} }} }} }}"
            )
        },
    );
    write(
        "csvjl",
        "{ type: csv, config: { path: ../j0.csv } }",
        "{ type: jsonl, config: { path: ../out/j0.jsonl } }",
        "",
        &["j0", "j1", "j2"],
        &|r| {
            format!(
                "{{ id: {r}, source: {{ config: {{ path: ../{r}.csv }} }}, sink: {{ config: {{ path: ../out/{r}.jsonl }} }} }}"
            )
        },
    );
    write(
        "query",
        &format!(
            "{{ type: postgres, config: {{ connection_url: {url}, table: {s}.src, replication_method: incremental, replication_key: [id] }} }}"
        ),
        &format!(
            "{{ type: postgres, config: {{ connection_url: {url}, table: {s}.q0, create_table: true, write_mode: upsert, key: [id] }} }}"
        ),
        eo,
        &["q0", "q1", "q2", "q3"],
        &|r| format!("{{ id: {r}, sink: {{ config: {{ table: {s}.{r} }} }} }}"),
    );
    for (i, (name, sink)) in [
        (
            "cdcup",
            format!("{{ connection_url: {url}, table: {s}.cdcup, create_table: true, write_mode: upsert, key: [id] }}"),
        ),
        (
            "cdcaudit",
            format!("{{ connection_url: {url}, table: {s}.cdcaudit, create_table: true }}"),
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let source = format!(
            "{{ type: postgres-cdc, config: {{ connection_url: {url}, slot_name: {}, publication: {}, tables: [{s}.csrc], create_publication: true, continuous: true, slot_in_use: terminate }} }}",
            slots[i], pubs[i]
        );
        c.dir.write(
            &format!("pipelines/{name}.yaml"),
            config_yaml(
                name,
                &source,
                &format!("{{ type: postgres, config: {sink} }}"),
                &state,
                "  delivery: effectively_once\n  batch_size: 7\n",
            ),
        );
    }
    Sources {
        csv: 100,
        src: 100,
        changes: Vec::new(),
    }
}

/// Waits until both CDC rows hold their slots, so every later change reaches them.
fn wait_for_slots(c: &Cluster) {
    // Streaming, not merely there: a slot still being created shows already, and a change
    // committed before its consistent point is never streamed.
    let sql = format!(
        "SELECT count(*)::bigint, NULL::text FROM pg_replication_slots \
         WHERE slot_name IN ('{}', '{}') AND {}",
        c.slots[0],
        c.slots[1],
        crate::support::pg::SLOT_STREAMING
    );
    eventually("both CDC slots stream", Duration::from_secs(90), || {
        let n = c.rows(&sql)[0].0;
        if n == 2 {
            Ok(())
        } else {
            Err(format!("{n} slots"))
        }
    });
}

/// More data in every source: `csv` more CSV lines, `src` more rows, CDC inserts of
/// `inserts` and updates of ids `updates`.
fn write(
    c: &Cluster,
    sources: &mut Sources,
    csv: u64,
    src: i64,
    inserts: std::ops::RangeInclusive<i64>,
    updates: &[i64],
) {
    let s = &c.schema;
    for f in CSV_ROWS {
        c.dir.append(
            &format!("{f}.csv"),
            &numbered_csv(sources.csv + 1, csv, false),
        );
    }
    sources.csv += csv;
    c.sql(&format!(
        "INSERT INTO {s}.src SELECT g, 'v' || g FROM generate_series({}, {}) g",
        sources.src + 1,
        sources.src + src
    ));
    sources.src += src;
    for id in inserts {
        c.sql(&format!("INSERT INTO {s}.csrc VALUES ({id}, {id})"));
        sources.changes.push(("c".to_owned(), id, id));
    }
    for &id in updates {
        c.sql(&format!("UPDATE {s}.csrc SET v = v + 1000 WHERE id = {id}"));
        let v: i64 = c.rows(&format!(
            "SELECT v::bigint, NULL::text FROM {s}.csrc WHERE id = {id}"
        ))[0]
            .0;
        sources.changes.push(("u".to_owned(), id, v));
    }
}

/// `Ok` when every target equals its source: EO targets exactly (nothing lost, nothing
/// doubled), JSON Lines nothing lost.
fn check(c: &Cluster, sources: &Sources) -> Result<(), String> {
    let s = &c.schema;
    let want_csv: Vec<i64> = (1..=i64::try_from(sources.csv).expect("i64")).collect();
    let table_ids = |t: &str| -> Vec<i64> {
        let sql = format!("SELECT id::bigint, NULL::text FROM {s}.{t} ORDER BY id");
        c.rt.block_on(sqlx::query_as::<_, (i64, Option<String>)>(&sql).fetch_all(&c.pool))
            .map(|rows| rows.into_iter().map(|r| r.0).collect())
            .unwrap_or_default()
    };
    for t in ["a0", "a1", "a2"] {
        let got = table_ids(t);
        if got != want_csv {
            return Err(format!(
                "{t}: {} rows, {} distinct, want {}",
                got.len(),
                got.iter().collect::<BTreeSet<_>>().len(),
                want_csv.len()
            ));
        }
    }
    for j in ["j0", "j1", "j2"] {
        let got: BTreeSet<u64> = ids(&c.dir.jsonl(&format!("out/{j}.jsonl")))
            .into_iter()
            .collect();
        if got != (1..=sources.csv).collect() {
            return Err(format!(
                "{j}: {} distinct ids of {}",
                got.len(),
                sources.csv
            ));
        }
    }
    let src = c.rows(&format!("SELECT id::bigint, v FROM {s}.src ORDER BY id"));
    for q in ["q0", "q1", "q2", "q3"] {
        let sql = format!("SELECT id::bigint, v FROM {s}.{q} ORDER BY id");
        let got =
            c.rt.block_on(sqlx::query_as::<_, (i64, Option<String>)>(&sql).fetch_all(&c.pool))
                .unwrap_or_default();
        if got != src {
            return Err(format!("{q}: {} rows of {}", got.len(), src.len()));
        }
    }
    let csrc = c.rows(&format!(
        "SELECT id::bigint, v::text FROM {s}.csrc ORDER BY id"
    ));
    let sql = format!("SELECT id::bigint, v::text FROM {s}.cdcup ORDER BY id");
    let got =
        c.rt.block_on(sqlx::query_as::<_, (i64, Option<String>)>(&sql).fetch_all(&c.pool))
            .unwrap_or_default();
    if got != csrc {
        return Err(format!("cdcup: {} rows of {}", got.len(), csrc.len()));
    }
    let sql = format!("SELECT op, (after->>'id')::bigint, (after->>'v')::bigint FROM {s}.cdcaudit");
    let mut got: Vec<(String, i64, i64)> =
        c.rt.block_on(sqlx::query_as(&sql).fetch_all(&c.pool))
            .unwrap_or_default();
    got.sort();
    let mut want = sources.changes.clone();
    want.sort();
    if got != want {
        return Err(format!("cdcaudit: {} changes of {}", got.len(), want.len()));
    }
    Ok(())
}

/// Waits up to `within` until `watcher` places no row on `gone` (and every row somewhere).
fn moved_off(watcher: &Server, gone: &str, within: Duration) {
    eventually(&format!("{gone}'s rows placed elsewhere"), within, || {
        let now = owners(watcher);
        match now
            .iter()
            .find(|(_, o)| o.as_deref() == Some(gone) || o.is_none())
        {
            Some(row) => Err(format!("{row:?}")),
            None => Ok(()),
        }
    });
}

/// Waits until every target equals its source (`what` names the moment), naming the rows'
/// errors when they do not.
fn converge(c: &Cluster, sources: &Sources, members: &BTreeMap<&str, Server>, what: &str) {
    eventually(what, Duration::from_secs(90), || {
        check(c, sources).map_err(|e| format!("{e}{}", errors(members)))
    });
}

#[test]
fn sigkill_one_of_three_members_its_pipelines_resume_elsewhere_and_every_target_equals_its_source()
{
    let mut c = Cluster::new("kill");
    let mut sources = setup(&mut c);
    let mut members: BTreeMap<&str, Server> = ["m1", "m2", "m3"]
        .into_iter()
        .map(|m| (m, c.member(m, "1s")))
        .collect();
    wait_for_slots(&c);
    write(&c, &mut sources, 0, 0, 1..=30, &[]);
    converge(&c, &sources, &members, "every target equals its source");

    // Every row has an owner, the same on every member; the member owning the most is killed.
    let before = eventually(
        "the members agree on the placement",
        Duration::from_secs(30),
        || {
            let views: Vec<_> = members.values().map(owners).collect();
            if views.windows(2).all(|w| w[0] == w[1]) && views[0].values().all(Option::is_some) {
                Ok(views[0].clone())
            } else {
                Err(format!("{views:?}"))
            }
        },
    );
    assert_eq!(before.len(), 12, "{before:?}");
    let mut count: BTreeMap<&str, usize> = BTreeMap::new();
    for o in before.values() {
        *count
            .entry(o.as_deref().expect("every row is placed"))
            .or_default() += 1;
    }
    let victim = *count.iter().max_by_key(|(_, n)| **n).expect("owners").0;
    let theirs: BTreeSet<String> = before
        .iter()
        .filter(|(_, o)| o.as_deref() == Some(victim))
        .map(|(k, _)| k.clone())
        .collect();
    c.wait_started_as_placed(&before, || errors(&members));
    let moves_before = c.moves();
    let killed_at = Instant::now();
    members.remove(victim).expect("victim").kill();
    let updates: Vec<i64> = (1..=10).collect();
    write(&c, &mut sources, 30, 50, 31..=50, &updates);

    // Within the ttl (plus a heartbeat period and a run), another member owns its rows.
    let survivor = members.values().next().expect("a survivor");
    moved_off(survivor, victim, 3 * TTL);
    let placed_after = killed_at.elapsed();
    converge(
        &c,
        &sources,
        &members,
        "every target equals its source after the kill",
    );
    eprintln!(
        "killed {victim} owning {} of 12 rows: placed elsewhere after {placed_after:?}, targets equal after {:?}",
        theirs.len(),
        killed_at.elapsed()
    );
    // Each of its rows moved once; no other row moved.
    let moves_after = c.moves();
    for (key, n) in &moves_after {
        let delta = n - moves_before.get(key).copied().unwrap_or(0);
        let want = i64::from(theirs.contains(key));
        assert_eq!(
            delta, want,
            "{key} moved {delta} times (the victim's: {theirs:?})"
        );
    }

    // The killed member comes back: after its settle it gets exactly its rows back.
    let (code, doc) = survivor.json("GET", "/members", None);
    assert_eq!(code, 200, "{doc}");
    let dead = doc["members"]
        .as_array()
        .and_then(|a| a.iter().find(|m| m["name"] == victim))
        .cloned()
        .expect("the killed member's row");
    assert_eq!(dead["alive"], false, "{doc}");
    assert_eq!(dead["pipelines"], 0, "{doc}");
    let back = c.member(victim, "1s");
    eventually(
        "the rejoined member owns its rows again",
        Duration::from_secs(30),
        || {
            let now = owners(&back);
            if now == before {
                Ok(())
            } else {
                Err(format!("{now:?}"))
            }
        },
    );
    let updates: Vec<i64> = (11..=12).collect();
    write(&c, &mut sources, 10, 10, 51..=55, &updates);
    converge(
        &c,
        &sources,
        &members,
        "every target equals its source after the rejoin",
    );
    c.wait_started_as_placed(&before, || errors(&members));
    let moves_back = c.moves();
    for (key, n) in &moves_back {
        let delta = n - moves_after.get(key).copied().unwrap_or(0);
        let want = i64::from(theirs.contains(key));
        assert_eq!(delta, want, "{key} moved {delta} times on the rejoin");
    }
    members.insert(victim, back);

    // A graceful leave: SIGTERM hands the rows over within a heartbeat (plus the run's start).
    let leaver = *members
        .keys()
        .find(|m| **m != victim)
        .expect("another member");
    let left_at = Instant::now();
    let (code, stderr) = members.remove(leaver).expect("leaver").terminate();
    assert_eq!(code, 0, "{stderr}");
    let watcher = &members[victim];
    moved_off(watcher, leaver, TTL);
    eprintln!(
        "SIGTERMed {leaver}: its rows placed elsewhere after {:?}",
        left_at.elapsed()
    );
    let updates: Vec<i64> = (13..=14).collect();
    write(&c, &mut sources, 10, 10, 56..=60, &updates);
    converge(
        &c,
        &sources,
        &members,
        "every target equals its source after the leave",
    );
    for (_, m) in members {
        let (code, stderr) = m.terminate();
        assert_eq!(code, 0, "{stderr}");
    }
}
