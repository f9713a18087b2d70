//! Relay benchmark: the stub streams 5,000 deltas as fast as it can over loopback; we measure the
//! time from the stub handing a delta to its connection to the subscriber receiving its event
//! (p50, p99) and deltas per second end to end. The same run measures the bare backend stream
//! (HTTP + SSE decoding, no service) as the baseline, so the service's own cost is the ratio.
//!
//! Run: `cargo bench --bench relay`

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use jarvis::config::{BackendKind, Config, Settings};
use jarvis::llm::{self, Backend, LlmEvent, Request};
use jarvis::store::Store;
use jarvis::{Event, Service, ServiceOptions};
use jarvis_stub::{Script, Stub};

const DELTAS: usize = 5_000;
const ROUNDS: usize = 7;

struct Round {
    p50: Duration,
    p99: Duration,
    max: Duration,
    per_sec: f64,
}

fn summarise(written: &[Instant], received: &[(usize, Instant)]) -> Round {
    assert_eq!(received.len(), DELTAS, "every delta arrived");
    assert_eq!(written.len(), DELTAS, "every delta was timed");
    let mut lat: Vec<Duration> = received
        .iter()
        .map(|(i, at)| at.saturating_duration_since(written[*i]))
        .collect();
    lat.sort_unstable();
    let span = received[DELTAS - 1].1 - written[0];
    Round {
        p50: lat[DELTAS / 2],
        p99: lat[DELTAS * 99 / 100],
        max: lat[DELTAS - 1],
        per_sec: DELTAS as f64 / span.as_secs_f64(),
    }
}

fn backend(stub: &Stub, dir: &std::path::Path) -> (Config, Arc<dyn Backend>) {
    let mut settings = Settings {
        backend: BackendKind::Openai,
        ..Settings::default()
    };
    settings.openai.base_url = stub.openai_url();
    settings.openai.requires_key = false;
    let config = Config {
        path: dir.join("settings.toml"),
        file_found: false,
        data_dir: dir.to_path_buf(),
        settings,
    };
    let env = |name: &str| (name == "JARVIS_KEYRING").then(|| "off".to_string());
    let backend = llm::from_config(&config, &env).expect("backend");
    (config, backend)
}

async fn bare(stub: &Stub, backend: &Arc<dyn Backend>) -> Round {
    stub.push(Script::Numbered {
        count: DELTAS,
        pace_ms: 0,
    });
    let before = stub.write_times().len();
    let request = Request {
        system: String::new(),
        messages: vec![],
        tools: vec![],
        model: "m".into(),
        max_tokens: 10,
        housekeeping: false,
        prefill: false,
    };
    let mut stream = backend.stream(request);
    let mut received = Vec::with_capacity(DELTAS);
    while let Some(event) = stream.next().await {
        if let Ok(LlmEvent::TextDelta { text }) = event {
            received.push((text.parse::<usize>().expect("numbered"), Instant::now()));
        }
    }
    summarise(&stub.write_times()[before..], &received)
}

async fn through_service(stub: &Stub, service: &Service) -> Round {
    stub.push(Script::Numbered {
        count: DELTAS,
        pace_ms: 0,
    });
    let before = stub.write_times().len();
    let chat = service.new_chat(None).await.expect("chat").id;
    let mut attachment = service.attach(chat).await.expect("attach");
    let reply = service.ask(chat, "count").await.expect("ask");
    let mut received = Vec::with_capacity(DELTAS);
    while let Some(event) = attachment.next_of(reply).await {
        match event {
            Event::Delta { text, .. } => {
                received.push((text.parse::<usize>().expect("numbered"), Instant::now()))
            }
            Event::ReplyEnded { state, reason, .. } => {
                assert_eq!(state, jarvis::ReplyState::Done, "{reason:?}");
                break;
            }
            _ => {}
        }
    }
    summarise(&stub.write_times()[before..], &received)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn report(flavor: &str, name: &str, rounds: &[Round]) -> (f64, f64, f64) {
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let p50 = median(rounds.iter().map(|r| us(r.p50)).collect());
    let p99 = median(rounds.iter().map(|r| us(r.p99)).collect());
    let max = median(rounds.iter().map(|r| us(r.max)).collect());
    let rate = median(rounds.iter().map(|r| r.per_sec).collect());
    println!("| {flavor} | {name} | {p50:.0} µs | {p99:.0} µs | {max:.0} µs | {rate:.0} |");
    (p50, p99, rate)
}

fn main() {
    // The stub gets a runtime and thread of its own, as a server in another process would.
    let (stub_tx, stub_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("stub runtime");
        rt.block_on(async move {
            let stub = Stub::start().await.expect("stub");
            stub_tx.send(stub).expect("hand over the stub");
            std::future::pending::<()>().await;
        });
    });
    let stub = stub_rx.recv().expect("stub started");

    println!(
        "{DELTAS} deltas per round, median of {ROUNDS} rounds, baseline and service interleaved"
    );
    println!();
    println!("| Jarvis runtime | path | p50 latency | p99 latency | max latency | deltas/s |");
    println!("|---|---|---|---|---|---|");
    let mut verdicts = Vec::new();
    for (flavor, runtime) in [
        (
            "current-thread",
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build(),
        ),
        (
            "multi-thread (2 workers)",
            tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build(),
        ),
    ] {
        let runtime = runtime.expect("runtime");
        let verdict = runtime.block_on(async {
            let dir = tempfile::tempdir().expect("temp dir");
            let (config, backend) = backend(&stub, dir.path());
            let store =
                Store::open(&config.database_path(), Duration::from_secs(5)).expect("store");
            let service = Service::start(
                store,
                backend.clone(),
                ServiceOptions::from_settings(&config.settings),
            );
            // Warm up connections and code paths.
            bare(&stub, &backend).await;
            through_service(&stub, &service).await;
            let mut bare_rounds = Vec::new();
            let mut service_rounds = Vec::new();
            for _ in 0..ROUNDS {
                bare_rounds.push(bare(&stub, &backend).await);
                service_rounds.push(through_service(&stub, &service).await);
            }
            let (_, bare_p99, bare_rate) =
                report(flavor, "backend stream only (baseline)", &bare_rounds);
            let (_, p99, rate) = report(flavor, "stub → service → subscriber", &service_rounds);
            format!(
                "{flavor}: service vs baseline p99 × {:.2}, throughput × {:.2}; p99 ≤ 1000 µs {}, ≥ 20000 deltas/s {}",
                p99 / bare_p99,
                rate / bare_rate,
                if p99 <= 1000.0 { "met" } else { "NOT met" },
                if rate >= 20000.0 { "met" } else { "NOT met" },
            )
        });
        verdicts.push(verdict);
    }
    println!();
    for v in verdicts {
        println!("{v}");
    }
}
