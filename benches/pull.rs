//! Model download throughput over loopback: `jarvis::models::pull` (the file written and hashed
//! as it comes, then its size, GGUF header and sha256 checked, then renamed into place) against
//! `curl -o` of the same file from the same server, and against `curl -o` then `sha256sum` (the
//! same work with the usual tools), alternating, in one run — once as fast as loopback goes, once
//! with the server sending at 100 MB/s (a fast home connection). The server is this process's own
//! (axum, the file streamed from disk).
//!
//! Run: `cargo bench --bench pull` (`JARVIS_BENCH_PULL_MB`, default 512: the file's size).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::State;
use axum::http::header;
use axum::response::Response;
use futures::StreamExt;
use jarvis::models::{self, PullOptions, Source};
use sha2::Digest;
use tokio_util::sync::CancellationToken;

const ROUNDS: usize = 5;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The served file, and the rate it is sent at (bytes a second; none: as fast as it goes).
#[derive(Clone)]
struct Served {
    path: PathBuf,
    rate: Option<f64>,
}

async fn serve(State(served): State<Served>) -> Response {
    let file = tokio::fs::File::open(&served.path)
        .await
        .expect("the served file");
    let len = file.metadata().await.expect("its size").len();
    let started = tokio::time::Instant::now();
    let mut sent = 0u64;
    let chunks = tokio_util::io::ReaderStream::with_capacity(file, 1 << 16).then(move |chunk| {
        if let Ok(chunk) = &chunk {
            sent += chunk.len() as u64;
        }
        let due = served
            .rate
            .map(|rate| started + Duration::from_secs_f64(sent as f64 / rate));
        async move {
            if let Some(due) = due {
                tokio::time::sleep_until(due).await;
            }
            chunk
        }
    });
    Response::builder()
        .header(header::CONTENT_LENGTH, len)
        .body(Body::from_stream(chunks))
        .expect("a response")
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mb: u64 = std::env::var("JARVIS_BENCH_PULL_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(512);
    let dir = tempfile::tempdir().expect("temp dir");
    let served = dir.path().join("served.gguf");
    // A GGUF header, then bytes that do not compress or repeat in any way a cache could use.
    let mut hasher = sha2::Sha256::new();
    {
        use std::io::Write;
        let mut out = std::io::BufWriter::new(std::fs::File::create(&served).unwrap());
        let mut rng = fastrand::Rng::with_seed(7);
        let mut block = vec![0u8; 1 << 20];
        block[..8].copy_from_slice(b"GGUF\x03\0\0\0");
        for i in 0..mb {
            let from = if i == 0 { 8 } else { 0 };
            rng.fill(&mut block[from..]);
            hasher.update(&block);
            out.write_all(&block).unwrap();
        }
    }
    let sha256 = models::hex_digest(hasher);
    for rate in [None, Some(100e6)] {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/m/model.gguf", listener.local_addr().unwrap());
        let app = axum::Router::new()
            .route("/m/model.gguf", axum::routing::get(serve))
            .with_state(Served {
                path: served.clone(),
                rate,
            });
        tokio::spawn(async move { axum::serve(listener, app).await });
        let how = match rate {
            None => "as fast as loopback goes".to_string(),
            Some(rate) => format!("sent at {:.0} MB/s", rate / 1e6),
        };
        let source = Source {
            url,
            file: "model.gguf".into(),
            size: Some(mb << 20),
            sha256: Some(sha256.clone()),
        };
        measure(dir.path(), &source, &format!("a {mb} MiB file, {how}")).await;
    }
}

/// Runs a command to its end; its wall time in seconds.
async fn timed(cmd: &mut tokio::process::Command) -> f64 {
    let started = Instant::now();
    let status = cmd.status().await.expect("the command");
    assert!(status.success());
    started.elapsed().as_secs_f64()
}

async fn measure(dir: &Path, source: &Source, what: &str) {
    let size = source.size.expect("a size");
    let out = dir.join("curl.gguf");
    let (mut pull_s, mut curl_s, mut checked_s) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let into = dir.join("models");
        let started = Instant::now();
        models::pull(
            source,
            &into,
            &PullOptions::default(),
            &mut |_| {},
            &CancellationToken::new(),
        )
        .await
        .expect("the pull");
        pull_s.push(started.elapsed().as_secs_f64());
        std::fs::remove_dir_all(&into).unwrap();

        let mut curl = tokio::process::Command::new("curl");
        curl.args(["-sS", "--fail", "-o"])
            .arg(&out)
            .arg(&source.url);
        curl_s.push(timed(&mut curl).await);
        assert_eq!(std::fs::metadata(&out).unwrap().len(), size);
        std::fs::remove_file(&out).unwrap();

        // The same work with the usual tools: download, then check the sha256 the hub publishes.
        let mut checked = tokio::process::Command::new("sh");
        checked
            .args([
                "-c",
                "curl -sS --fail -o \"$1\" \"$2\" && sha256sum \"$1\" > /dev/null",
                "sh",
            ])
            .arg(&out)
            .arg(&source.url);
        checked_s.push(timed(&mut checked).await);
        std::fs::remove_file(&out).unwrap();
    }
    let (pull, curl, checked) = (median(pull_s), median(curl_s), median(checked_s));
    let rate = |s: f64| size as f64 / s / 1e6;
    println!("\n{what}, over loopback, median of {ROUNDS}, alternating");
    println!("| | time | throughput |");
    println!("|---|---|---|");
    println!(
        "| `jarvis::models::pull` (checks included) | {pull:.2} s | {:.0} MB/s |",
        rate(pull)
    );
    println!("| `curl -o` | {curl:.2} s | {:.0} MB/s |", rate(curl));
    println!(
        "| `curl -o`, then `sha256sum` | {checked:.2} s | {:.0} MB/s |",
        rate(checked)
    );
    println!("| ratio (throughput, pull / curl) | | {:.2} |", curl / pull);
    println!(
        "| ratio (throughput, pull / curl then sha256sum) | | {:.2} |",
        checked / pull
    );
}
