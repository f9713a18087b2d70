//! Memory benchmarks: embedding one sentence with all-MiniLM-L6-v2 (int8, ONNX Runtime, one
//! thread); recall as a brute-force top-3 by cosine over 1k, 10k and 100k stored summary vectors
//! held in memory (goal: ≤ 20 ms at 100k); and assembling the backend request for a chat of
//! 10,000 records (goal: ≤ 5 ms).
//!
//! Run: `cargo bench --bench memory` (models from `scripts/models memory`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use jarvis::config::Config;
use jarvis::memory::embed::{cosine, normalised, Embedder, MiniLm, DIMENSIONS};
use jarvis::memory::recall::SummaryIndex;
use jarvis::prompt::{build_request, system_prompt, Locale, Mode, State};
use jarvis::store::{ChatId, Record, RecordId, Role};

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

    println!(
        "\n## Recall: brute-force top 3 by cosine over stored summaries (384 dims, in memory)"
    );
    let mut seed: u32 = 42;
    let mut random_vector = || {
        normalised(
            (0..DIMENSIONS)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 17;
                    seed ^= seed << 5;
                    (seed as f32 / u32::MAX as f32) - 0.5
                })
                .collect(),
        )
    };
    let query = model.embed(&sentence).unwrap().remove(0);
    println!("| summaries | f32, a Vec per vector (baseline) | i8, one flat array (`SummaryIndex`) | same top 3 |");
    for n in [1_000, 10_000, 100_000] {
        let vectors: Vec<(i64, Vec<f32>)> = (0..n as i64).map(|i| (i, random_vector())).collect();
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
        let flat = time(&|| {
            std::hint::black_box(index.top(&query, 3, None));
        });
        let same = top_k(&vectors, &query, 3)
            .iter()
            .map(|(id, _)| *id)
            .collect::<Vec<_>>()
            == index
                .top(&query, 3, None)
                .iter()
                .map(|(id, _)| *id)
                .collect::<Vec<_>>();
        println!(
            "| {n} | {:.2} ms | {:.2} ms | {same} |",
            baseline.as_secs_f64() * 1000.0,
            flat.as_secs_f64() * 1000.0
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
