//! Memory benchmarks: embedding one sentence with all-MiniLM-L6-v2 (int8, ONNX Runtime, one
//! thread); recall's top 3 by cosine over 1k, 10k and 100k stored summaries — the 8-bit scan
//! alone, and `Recall::rank` (the scan's 16 candidates re-ranked with their exact vectors read
//! from a real store), checked against the exact f32 top 3 (goal: ≤ 8 ms at 100k, exact);
//! `search_records`' full-text search over 100,000 records (goal: ≤ 5 ms); and assembling the
//! backend request for a chat of 10,000 records (goal: ≤ 5 ms).
//!
//! Run: `cargo bench --bench memory` (models from `scripts/models memory`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use jarvis::config::Config;
use jarvis::memory::embed::{cosine, normalised, Embedder, MiniLm};
use jarvis::memory::recall::{Recall, SummaryIndex};
use jarvis::prompt::{build_request, system_prompt, Locale, Mode, State};
use jarvis::store::{ChatId, Record, RecordId, Role, Store};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn model_dir() -> PathBuf {
    match std::env::var("JARVIS_TEST_MODELS") {
        Ok(dir) => PathBuf::from(dir),
        Err(_) => {
            Config::installed_model_dir(&|k| std::env::var(k).ok()).expect("a home directory")
        }
    }
}

/// Top `k` of `index` by cosine with `query`: one pass, a small sorted list.
fn top_k(index: &[(i64, Vec<f32>)], query: &[f32], k: usize) -> Vec<(i64, f32)> {
    let mut best: Vec<(i64, f32)> = Vec::with_capacity(k + 1);
    for (id, v) in index {
        let score = cosine(query, v);
        if best.len() < k || score > best[best.len() - 1].1 {
            let at = best.partition_point(|(_, s)| *s >= score);
            best.insert(at, (*id, score));
            best.truncate(k);
        }
    }
    best
}

fn main() {
    println!("## Embedding one sentence (all-MiniLM-L6-v2 int8, 1 thread)");
    let model = MiniLm::load(&model_dir()).unwrap_or_else(|e| panic!("{e}"));
    let sentence = vec!["The user asked how to train their dog Bruno to sit and stay.".to_string()];
    model.embed(&sentence).unwrap();
    let times: Vec<Duration> = (0..30)
        .map(|_| {
            let t = Instant::now();
            model.embed(&sentence).unwrap();
            t.elapsed()
        })
        .collect();
    println!(
        "median {:.2} ms (30 runs)",
        median(times).as_secs_f64() * 1000.0
    );

    println!("\n## Recall: top 3 by cosine over stored summaries (384 dims)");
    let mut seed: u32 = 42;
    let mut random = move || {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        seed as f32 / u32::MAX as f32
    };
    let query = model.embed(&sentence).unwrap().remove(0);
    let model: std::sync::Arc<dyn Embedder> = std::sync::Arc::new(model);
    // Summaries more or less related to the question, as real ones are: the top scores crowd
    // within a few hundredths, the hard case for an 8-bit scan.
    let mut related = |query: &[f32]| {
        let share = random();
        normalised(
            query
                .iter()
                .map(|q| q * share + (random() - 0.5) * 0.1)
                .collect(),
        )
    };
    println!("| summaries | exact f32 scan (baseline) | 8-bit scan alone | `Recall::rank`: scan + exact re-rank from the store | rank's top 3 = exact top 3 (51 queries) |");
    for n in [1_000, 10_000, 100_000] {
        let vectors: Vec<(i64, Vec<f32>)> = (1..=n as i64).map(|i| (i, related(&query))).collect();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("recall.db");
        drop(Store::open(&path, Duration::from_secs(5)).unwrap());
        {
            let mut conn = rusqlite::Connection::open(&path).unwrap();
            let tx = conn.transaction().unwrap();
            for (id, v) in &vectors {
                tx.execute(
                    "INSERT INTO chats (id, title, created_at, updated_at) VALUES (?1, 'c', 0, 0)",
                    [id],
                )
                .unwrap();
                let blob: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                tx.execute(
                    "INSERT INTO summaries (chat_id, text, vector, updated_at, upto) VALUES (?1, 's', ?2, 0, 1)",
                    rusqlite::params![id, blob],
                )
                .unwrap();
            }
            tx.commit().unwrap();
        }
        let store = Store::open(&path, Duration::from_secs(5)).unwrap();
        let recall = Recall::new(model.clone(), &store).unwrap();
        let mut index = SummaryIndex::new();
        for (id, v) in &vectors {
            index.upsert(*id, v);
        }
        let time = |f: &dyn Fn()| {
            median(
                (0..20)
                    .map(|_| {
                        let t = Instant::now();
                        f();
                        t.elapsed()
                    })
                    .collect(),
            )
        };
        let baseline = time(&|| {
            std::hint::black_box(top_k(&vectors, &query, 3));
        });
        let scan = time(&|| {
            std::hint::black_box(index.top(&query, 3, None));
        });
        let ranked = time(&|| {
            std::hint::black_box(recall.rank(&store, &query, ChatId(0)).unwrap());
        });
        let mut queries = vec![query.clone()];
        queries.extend((0..50).map(|_| related(&query)));
        let same = queries
            .iter()
            .filter(|q| {
                // (Recall mentions nothing below its similarity floor.)
                let exact: Vec<i64> = top_k(&vectors, q, 3)
                    .iter()
                    .filter(|(_, score)| *score >= jarvis::memory::recall::MIN_SIMILARITY)
                    .map(|(id, _)| *id)
                    .collect();
                let got: Vec<i64> = recall
                    .rank(&store, q, ChatId(0))
                    .unwrap()
                    .iter()
                    .map(|s| s.chat.0)
                    .collect();
                exact == got
            })
            .count();
        println!(
            "| {n} | {:.2} ms | {:.2} ms | {:.2} ms | {same} of {} |",
            baseline.as_secs_f64() * 1000.0,
            scan.as_secs_f64() * 1000.0,
            ranked.as_secs_f64() * 1000.0,
            queries.len()
        );
    }

    println!("\n## search_records over 100,000 records (1,000 chats of 100)");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("search.db");
    drop(Store::open(&path, Duration::from_secs(5)).unwrap());
    let vocabulary: Vec<String> = (0..5_000)
        .map(|i| {
            let syllables = [
                "ka", "lo", "mi", "ren", "tor", "vi", "sa", "ne", "pu", "dal",
            ];
            format!(
                "{}{}{}",
                syllables[i % 10],
                syllables[(i / 10) % 10],
                syllables[(i / 100) % 10]
            ) + &(i / 1000).to_string()
        })
        .collect();
    let started = Instant::now();
    {
        let mut conn = rusqlite::Connection::open(&path).unwrap();
        let tx = conn.transaction().unwrap();
        let mut word = 0usize;
        for chat in 1..=1_000i64 {
            tx.execute(
                "INSERT INTO chats (id, title, created_at, updated_at, history_since) VALUES (?1, 'c', 0, 0, 101)",
                [chat],
            )
            .unwrap();
            for seq in 1..=100i64 {
                // Zipf-like: a few words are everywhere, most are rare.
                let mut text = String::from("the user said that");
                for _ in 0..12 {
                    word = (word * 7 + 13) % 5_000;
                    let pick = (word * word) % 5_000 / (1 + word % 7);
                    text.push(' ');
                    text.push_str(&vocabulary[pick]);
                }
                if chat == 500 && seq == 3 {
                    text.push_str(" and the boat is called Albatross");
                }
                tx.execute(
                    "INSERT INTO records (chat_id, seq, role, text, created_at) VALUES (?1, ?2, 'user', ?3, 0)",
                    rusqlite::params![chat, seq, text],
                )
                .unwrap();
            }
        }
        tx.commit().unwrap();
    }
    println!(
        "(100,000 records written and indexed in {:.1} s)",
        started.elapsed().as_secs_f64()
    );
    let store = Store::open(&path, Duration::from_secs(5)).unwrap();
    println!("| query | matches in the chat | median (50 runs) |");
    for query in [
        "Albatross",
        "boat called",
        vocabulary[0].as_str(),
        "the user said",
    ] {
        let found = store.search_records(ChatId(500), query, 101, 8).unwrap();
        let times: Vec<Duration> = (0..50)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(store.search_records(ChatId(500), query, 101, 8).unwrap());
                t.elapsed()
            })
            .collect();
        println!(
            "| \"{query}\" | {} | {:.2} ms |",
            found.len(),
            median(times).as_secs_f64() * 1000.0
        );
    }

    println!("\n## Request assembly for a 10,000-record chat");
    let start = chrono::DateTime::parse_from_rfc3339("2026-01-01T09:00:00+01:00").unwrap();
    let history: Vec<Record> = (0..10_000)
        .map(|i| Record {
            id: RecordId(i),
            chat: ChatId(1),
            seq: i,
            role: if i % 2 == 0 {
                Role::User
            } else {
                Role::Assistant
            },
            text: format!(
                "Message number {i}: a sentence or two of ordinary conversation about the day."
            ),
            reply: None,
            // An exchange every 20 minutes: days of history.
            created_at: start.timestamp_millis() + i * 10 * 60_000,
            fact: None,
        })
        .collect();
    let mut state = State::now(Mode::Typed);
    state.locale = Locale::English;
    let times: Vec<Duration> = (0..20)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(build_request(
                &history,
                system_prompt(&[], "Ada"),
                &state,
                "m",
                512,
            ));
            t.elapsed()
        })
        .collect();
    println!(
        "median {:.2} ms (20 runs)",
        median(times).as_secs_f64() * 1000.0
    );
}
