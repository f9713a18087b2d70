//! A follow-up on the local default model (SmolLM2-135M through `jarvis-llm`, one reply at a
//! time), its time to first token: asked the moment the answer ended, with that answer's summary
//! due (the summary has taken the free backend, and must give way), against the same follow-up
//! asked once the summary is written (the baseline), alternated in one run. Goal: the ratio ≈ 1 —
//! the follow-up never waits for housekeeping. A second row shows the same follow-up with
//! earlier conversations off (no recall, no summary), for what recall itself costs.
//!
//! Run: `cargo bench -p jarvis-llm --bench followup` (models from `scripts/models`, the server
//! from `cargo build --release -p jarvis-llm`, or `JARVIS_LLM_SERVER`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use jarvis::config::{BackendKind, Config, Settings};
use jarvis::{Event, Service, ServiceOptions, Store};

const ROUNDS: usize = 5;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
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

struct Rig {
    _dir: tempfile::TempDir,
    store: Store,
    service: Service,
}

fn rig(server: &Path, earlier_conversations: bool) -> Rig {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut settings = Settings {
        backend: BackendKind::Local,
        ..Settings::default()
    };
    let models = model_dir();
    settings.local.model = models
        .join(jarvis::config::DEFAULT_MODEL)
        .display()
        .to_string();
    settings.local.temperature = 0.0;
    settings.local.seed = Some(7);
    settings.local.max_tokens = 40;
    settings.local.threads = 2;
    settings.memory.earlier_conversations = earlier_conversations;
    let config = Config {
        settings,
        path: dir.path().join("settings.toml"),
        data_dir: dir.path().to_path_buf(),
        file_found: false,
    };
    let server = server.display().to_string();
    let backend = jarvis::llm::from_config(&config, &|k: &str| {
        (k == "JARVIS_LLM_SERVER")
            .then(|| server.clone())
            .or_else(|| std::env::var(k).ok())
    })
    .expect("the local backend");
    let store = Store::open(&dir.path().join("jarvis.db"), Duration::from_secs(5)).expect("store");
    let options = ServiceOptions::from_settings(&config.settings).with_recall(&store, &models);
    assert!(
        options.recall.is_some(),
        "the sentence embedder (scripts/models memory)"
    );
    let service = Service::start(store.clone(), backend, options);
    Rig {
        _dir: dir,
        store,
        service,
    }
}

/// Asks in `chat`; returns the seconds to the first token and waits for the end.
async fn ask(service: &Service, chat: jarvis::ChatId, text: &str) -> f64 {
    let asked = Instant::now();
    let reply = service.ask(chat, text).await.expect("asked");
    let mut attachment = service.attach(chat).await.expect("attached");
    let mut first = None;
    while let Some(event) = attachment.next().await {
        match event {
            Event::Delta { .. } if first.is_none() => first = Some(asked.elapsed().as_secs_f64()),
            Event::ReplyEnded {
                reply: r,
                state,
                reason,
            } if r == reply => {
                assert_eq!(state, jarvis::ReplyState::Done, "{reason:?}");
                break;
            }
            _ => {}
        }
    }
    first.expect("a first token")
}

/// Waits until nothing runs in the background (the summary of the last answer is written).
async fn settle(rig: &Rig, chat: jarvis::ChatId, summarised: bool) {
    if summarised {
        let last = rig
            .store
            .records(chat)
            .expect("records")
            .last()
            .map_or(0, |r| r.seq);
        let until = Instant::now() + Duration::from_secs(120);
        while Instant::now() < until {
            if rig
                .store
                .summaries_of(&[chat])
                .expect("summaries")
                .first()
                .is_some_and(|s| s.upto >= last)
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the summary was never written");
    }
}

fn main() {
    let exe = std::env::current_exe().expect("bench executable");
    let target = exe.parent().and_then(Path::parent).expect("target dir");
    let server = std::env::var("JARVIS_LLM_SERVER")
        .map(PathBuf::from)
        .unwrap_or_else(|_| target.join("jarvis-llm"));
    assert!(
        server.is_file(),
        "build the server first: cargo build --release -p jarvis-llm"
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let off = rig(&server, false);
        let on = rig(&server, true);
        // [summary due, summary written, earlier conversations off]
        let mut times = [Vec::new(), Vec::new(), Vec::new()];
        // The first round loads each model; it is not counted.
        for round in 0..=ROUNDS {
            for (case, times) in times.iter_mut().enumerate() {
                let rig = if case == 2 { &off } else { &on };
                let chat = rig.service.new_chat(None).await.expect("chat").id;
                ask(&rig.service, chat, "Name three things to see in Paris.").await;
                if case == 1 {
                    settle(rig, chat, true).await;
                }
                // Case 0: at once, while the summary of that answer is due.
                let follow_up = ask(&rig.service, chat, "And which one is best in the rain?").await;
                settle(rig, chat, case != 2).await;
                if round > 0 {
                    times.push(follow_up);
                }
            }
        }
        let [due, written, off] = times.map(median);
        println!("SmolLM2-135M Q4_1 on 2 threads, medians of {ROUNDS} rounds, alternated");
        println!("| follow-up's first token | baseline | measured | ratio |");
        println!("|---|---|---|---|");
        println!(
            "| summary due (asked the moment the answer ended) vs written (asked after it) | {:.0} ms | {:.0} ms | {:.2} |",
            written * 1000.0,
            due * 1000.0,
            due / written
        );
        println!(
            "| earlier conversations on (summary written) vs off | {:.0} ms | {:.0} ms | {:.2} |",
            off * 1000.0,
            written * 1000.0,
            written / off
        );
    });
}
