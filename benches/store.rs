//! Store benchmark on a real file (WAL, `synchronous = NORMAL`): record appends per second, reply
//! progress writes per second, and loading a 10,000-record chat. The baseline, in the same run, is
//! a bare rusqlite INSERT of the same row in its own transaction, so the store's own bookkeeping
//! (order number, chat timestamp) shows as a ratio; and the same INSERT into a copy of the table
//! without the full-text search trigger, so the search index's cost shows too.
//!
//! Run: `cargo bench --bench store`

use std::time::{Duration, Instant};

use jarvis::store::{ReplyState, Role, Store};
use rusqlite::params;

const APPENDS: usize = 5_000;
const LOAD_RECORDS: usize = 10_000;
const ROUNDS: usize = 5;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn text(i: usize) -> String {
    format!(
        "Record number {i}: a sentence or two of ordinary chat text, about eighty characters long."
    )
}

fn main() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Store::open(&dir.path().join("bench.db"), Duration::from_secs(5)).expect("store");

    // Baseline: the same table, the same WAL and synchronous settings, a bare INSERT.
    let raw = rusqlite::Connection::open(dir.path().join("bench.db")).expect("raw connection");
    raw.execute_batch("PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;")
        .expect("pragmas");

    // A second baseline: the same INSERT into a copy of the table without the search index's
    // trigger, so the full-text index's own cost shows.
    raw.execute_batch(
        "CREATE TABLE plain_records (id INTEGER PRIMARY KEY, chat_id INTEGER NOT NULL, seq INTEGER NOT NULL,
             role TEXT NOT NULL, text TEXT NOT NULL, reply_id INTEGER, created_at INTEGER NOT NULL,
             UNIQUE (chat_id, seq));",
    )
    .expect("plain table");
    let mut store_rates = Vec::new();
    let mut raw_rates = Vec::new();
    let mut plain_rates = Vec::new();
    let mut progress_rates = Vec::new();
    let mut seq = 1_000_000i64;
    for round in 0..ROUNDS {
        let chat = store.create_chat(&format!("append {round}")).expect("chat");
        let started = Instant::now();
        for i in 0..APPENDS {
            store
                .append_record(chat.id, Role::User, &text(i), None)
                .expect("append");
        }
        store_rates.push(APPENDS as f64 / started.elapsed().as_secs_f64());

        let started = Instant::now();
        for i in 0..APPENDS {
            seq += 1;
            let tx = raw.unchecked_transaction().expect("tx");
            tx.execute(
                "INSERT INTO records (chat_id, seq, role, text, created_at) VALUES (?1, ?2, 'user', ?3, 0)",
                params![chat.id.0, seq, text(i)],
            )
            .expect("insert");
            tx.commit().expect("commit");
        }
        raw_rates.push(APPENDS as f64 / started.elapsed().as_secs_f64());

        let started = Instant::now();
        for i in 0..APPENDS {
            seq += 1;
            let tx = raw.unchecked_transaction().expect("tx");
            tx.execute(
                "INSERT INTO plain_records (chat_id, seq, role, text, created_at) VALUES (?1, ?2, 'user', ?3, 0)",
                params![chat.id.0, seq, text(i)],
            )
            .expect("insert");
            tx.commit().expect("commit");
        }
        plain_rates.push(APPENDS as f64 / started.elapsed().as_secs_f64());

        let q = store
            .append_record(chat.id, Role::User, "question", None)
            .expect("question");
        let reply = store
            .start_reply(chat.id, q.id, ReplyState::Running)
            .expect("reply");
        let mut so_far = String::new();
        let started = Instant::now();
        for i in 0..APPENDS {
            so_far.push_str("word ");
            if i % 50 == 0 {
                so_far.push_str(". ");
            }
            store.save_progress(reply.id, &so_far).expect("progress");
        }
        progress_rates.push(APPENDS as f64 / started.elapsed().as_secs_f64());
        store
            .finish_reply(reply.id, ReplyState::Done, &so_far, None)
            .expect("finish");
    }

    // A 10,000-record chat, loaded whole (what showing a long chat or building its history does).
    let big = store.create_chat("long").expect("chat");
    for i in 0..LOAD_RECORDS {
        let role = if i % 2 == 0 {
            Role::User
        } else {
            Role::Assistant
        };
        store
            .append_record(big.id, role, &text(i), None)
            .expect("append");
    }
    let last = store
        .records(big.id)
        .expect("load")
        .last()
        .expect("records")
        .id;
    let mut loads = Vec::new();
    let mut histories = Vec::new();
    let mut assemblies = Vec::new();
    for _ in 0..ROUNDS * 2 {
        let started = Instant::now();
        let records = store.records(big.id).expect("load");
        loads.push(started.elapsed().as_secs_f64() * 1e3);
        assert_eq!(records.len(), LOAD_RECORDS);
        let started = Instant::now();
        let history = store.history(last).expect("history");
        histories.push(started.elapsed().as_secs_f64() * 1e3);
        assert_eq!(history.len(), LOAD_RECORDS);
        let started = Instant::now();
        let system = jarvis::prompt::system_prompt(&store.facts().expect("facts"), "");
        let request = jarvis::prompt::build_request(
            &history,
            system,
            &jarvis::prompt::State::typed_now(),
            "model",
            1024,
        );
        assemblies.push(started.elapsed().as_secs_f64() * 1e3);
        assert!(!request.messages.is_empty());
    }

    let store_rate = median(store_rates);
    let raw_rate = median(raw_rates);
    println!(
        "median of {ROUNDS} rounds of {APPENDS} writes; loads: median of {} loads",
        ROUNDS * 2
    );
    println!();
    println!("| measure | result |");
    println!("|---|---|");
    println!(
        "| record appends/s (`Store::append_record`, one transaction each) | {store_rate:.0} |"
    );
    println!("| bare INSERT/s, one transaction each (baseline) | {raw_rate:.0} |");
    println!("| append vs baseline | × {:.2} |", store_rate / raw_rate);
    let plain_rate = median(plain_rates);
    println!("| bare INSERT/s into a table without the search index | {plain_rate:.0} |");
    println!(
        "| the search index's cost (indexed vs not, bare INSERTs) | × {:.2} |",
        raw_rate / plain_rate
    );
    println!(
        "| reply progress writes/s (`save_progress`) | {:.0} |",
        median(progress_rates)
    );
    println!(
        "| load a {LOAD_RECORDS}-record chat (`records`) | {:.1} ms |",
        median(loads)
    );
    println!(
        "| build its history (`history`, superseded answers left out) | {:.1} ms |",
        median(histories)
    );
    println!(
        "| assemble its request from that history (`build_request`) | {:.1} ms |",
        median(assemblies)
    );
}
