//! Kill soak: the `jarvis` command-line tool is killed with SIGKILL at a random moment of a
//! streaming reply (the stub over loopback, a delta every 5 ms), the database is opened again as
//! the next start opens it, and each trial checks what a user would find:
//! - the question is there once the request was sent (it is stored before);
//! - the reply is `interrupted` (or `done`, when the kill came after its end) and its text is the
//!   deltas the stub sent, in order, and at most one progress tick plus one write behind by the
//!   writer's own ticks: it holds at least what the process had handed to the store one tick
//!   before its last (its debug log, sizes only, says what and when);
//! - `PRAGMA integrity_check` says ok;
//! - never two assistant records for one reply, and its record is its text.
//!
//! Any failed check fails the run. How far the stored text trailed the stub's writes in wall-clock
//! time at the kill is a figure it reports (BENCHMARKS.md: a loaded machine stretches it with no
//! bug, so it gates nothing). Trials: `JARVIS_SOAK_TRIALS` (100).
//!
//! Run: `cargo bench --bench kill_soak` (release), or as CI does, `cargo test --bench kill_soak`
//! (the debug build the other tests use; the reply's pace, not the build, sets the timing).

use std::process::Stdio;
use std::time::{Duration, Instant};

use jarvis::store::{ReplyState, Role, Store};
use jarvis::ChatId;
use jarvis_stub::{Script, Stub};

const DELTAS: usize = 400;
const PACE: Duration = Duration::from_millis(5);
/// What the reply's progress interval (200 ms) and a write let a stored reply trail what was sent
/// on an unloaded machine: the benchmark's figure is read against it.
const EXPECTED_LAG: Duration = Duration::from_millis(250);

/// How one trial ended.
#[derive(Debug, Default)]
struct Trial {
    /// The kill came before the request reached the stub.
    before_request: bool,
    /// The reply had ended before the kill.
    after_end: bool,
    /// How far the stored text trailed the stub's writes at the kill.
    lag: Duration,
    /// Deltas stored.
    stored: usize,
}

fn main() {
    // `cargo test --bench` passes the harness's arguments; they mean nothing here.
    let trials: usize = std::env::var("JARVIS_SOAK_TRIALS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let results = runtime.block_on(soak(trials));
    report(&results, trials);
}

async fn soak(trials: usize) -> Vec<Result<Trial, String>> {
    let stub = Stub::start().await.expect("stub");
    let mut results = Vec::new();
    for trial in 0..trials {
        results.push(one(&stub, trial).await);
        if let Err(why) = results.last().expect("pushed") {
            eprintln!("trial {trial}: {why}");
        }
    }
    results
}

async fn one(stub: &Stub, trial: usize) -> Result<Trial, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    stub.push(Script::Numbered {
        count: DELTAS,
        pace_ms: PACE.as_millis() as u64,
    });
    let (writes_before, requests_before) = (stub.write_times().len(), stub.received().len());
    let log_path = dir.path().join("jarvis.log");
    let log = std::fs::File::create(&log_path).map_err(|e| e.to_string())?;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_jarvis"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", dir.path())
        .env("JARVIS_DATA_DIR", dir.path())
        .env("JARVIS_CONFIG", dir.path().join("settings.toml"))
        .env("JARVIS_KEYRING", "off")
        .env("JARVIS_BACKEND", "openai")
        .env("OPENAI_BASE_URL", stub.openai_url())
        .env("OPENAI_API_KEY", "sk-soak")
        .env("JARVIS_LOG", "warn,jarvis::service::reply=debug")
        .args(["ask", "--new", &format!("question {trial}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start jarvis: {e}"))?;
    // From before the process has started to after its reply would have ended.
    let wait = Duration::from_millis(fastrand::u64(0..2_600));
    tokio::time::sleep(wait).await;
    let _ = child.start_kill();
    let killed_at = Instant::now();
    let _ = child.wait().await;
    // Let the stub notice the closed connection; what it wrote after the kill is not counted.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let times: Vec<Instant> = stub.write_times()[writes_before..]
        .iter()
        .copied()
        .filter(|t| *t <= killed_at)
        .collect();
    let question = format!("question {trial}");
    let requested = stub.received()[requests_before..]
        .iter()
        .any(|r| r.body.to_string().contains(&question));

    // The next start.
    let store = Store::open(&dir.path().join("jarvis.db"), Duration::from_secs(5))
        .map_err(|e| format!("the database does not open again: {e}"))?;
    let integrity = store.integrity_check().map_err(|e| e.to_string())?;
    if integrity != "ok" {
        return Err(format!("integrity_check: {integrity}"));
    }
    let chat = ChatId(1);
    let records = match store.records(chat) {
        Ok(records) => records,
        Err(_) if !requested => {
            return Ok(Trial {
                before_request: true,
                ..Trial::default()
            })
        }
        Err(e) => return Err(format!("the chat is gone: {e}")),
    };
    if records.first().map(|r| (r.role, r.text.as_str())) != Some((Role::User, question.as_str())) {
        if records.is_empty() && !requested {
            // Killed between making the chat and storing the question: nothing was sent.
            return Ok(Trial {
                before_request: true,
                ..Trial::default()
            });
        }
        return Err(format!(
            "the question is not the chat's first record (killed after {} ms; request sent: {requested}): {records:?}",
            wait.as_millis()
        ));
    }
    let Some(reply) = store.last_reply(chat).map_err(|e| e.to_string())? else {
        return Err("the question has no reply".into());
    };
    let answers: Vec<_> = records
        .iter()
        .filter(|r| r.role == Role::Assistant)
        .collect();
    match (answers.as_slice(), reply.text.is_empty()) {
        ([], true) => {}
        ([one], false) if one.text == reply.text => {}
        _ => {
            return Err(format!(
                "{} assistant records for a reply of {} characters",
                answers.len(),
                reply.text.len()
            ))
        }
    }
    // The text must be deltas 0, 1, 2, … whole and in order.
    let mut stored = 0;
    let mut rest = reply.text.as_str();
    while let Some(after) = rest.strip_prefix(&stored.to_string()) {
        rest = after;
        stored += 1;
    }
    if !rest.is_empty() {
        return Err(format!(
            "the stored text is not the deltas in order: {:?}",
            reply.text
        ));
    }
    let after_end = stored == DELTAS;
    match (reply.state, after_end) {
        (ReplyState::Interrupted, _) | (ReplyState::Done, true) => {}
        (state, _) => return Err(format!("the reply is {state} after the kill")),
    }
    if !requested {
        return Ok(Trial {
            before_request: true,
            ..Trial::default()
        });
    }
    // By the writer's own ticks: the store holds what was handed to it, at least as much as the
    // tick before the last (the last may have been mid-write at the kill).
    let log = std::fs::read_to_string(&log_path).map_err(|e| e.to_string())?;
    let handed: Vec<usize> = log
        .lines()
        .filter(|l| l.contains("progress handed to the store"))
        .filter_map(|l| {
            // (A log written to a file carries no colour codes.)
            l.split("bytes=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .collect();
    let floor = handed.len().checked_sub(2).map_or(0, |i| handed[i]);
    let kept = reply.text.len();
    if !after_end && (kept < floor || (kept > 0 && !handed.contains(&kept))) {
        return Err(format!(
            "the stored text ({kept} bytes) is not what the process handed to the store at its \
             last two ticks ({:?})",
            &handed[handed.len().saturating_sub(2)..]
        ));
    }
    // The oldest delta sent before the kill that was not stored: how far the text trails.
    let lag = times
        .get(stored)
        .map_or(Duration::ZERO, |sent| killed_at - *sent);
    Ok(Trial {
        before_request: false,
        after_end,
        lag,
        stored,
    })
}

fn report(results: &[Result<Trial, String>], trials: usize) {
    let failed = results.iter().filter(|r| r.is_err()).count();
    let ok: Vec<&Trial> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    let mid: Vec<&&Trial> = ok
        .iter()
        .filter(|t| !t.before_request && !t.after_end)
        .collect();
    let mut lags: Vec<f64> = mid.iter().map(|t| t.lag.as_secs_f64() * 1e3).collect();
    lags.sort_by(f64::total_cmp);
    let at = |q: f64| {
        lags.get(((lags.len() as f64 - 1.0) * q).round() as usize)
            .copied()
            .unwrap_or(0.0)
    };
    let mean_stored = mid.iter().map(|t| t.stored).sum::<usize>() as f64 / mid.len().max(1) as f64;
    println!(
        "{trials} trials of SIGKILL during a reply of {DELTAS} deltas, one per {} ms",
        PACE.as_millis()
    );
    println!();
    println!("| killed | trials | stored text behind the stub at the kill (p50 / p95 / max) |");
    println!("|---|---|---|");
    println!(
        "| mid-stream | {} | {:.0} / {:.0} / {:.0} ms (expected ≤ {} ms unloaded; {mean_stored:.0} deltas stored on average) |",
        mid.len(),
        at(0.5),
        at(0.95),
        at(1.0),
        EXPECTED_LAG.as_millis()
    );
    println!(
        "| before the request | {} | — |",
        ok.iter().filter(|t| t.before_request).count()
    );
    println!(
        "| after the reply's end | {} | — |",
        ok.iter().filter(|t| t.after_end).count()
    );
    println!();
    println!(
        "checks failed: {failed} (question kept, reply interrupted, text in order and at most a tick and a write behind the writer, integrity_check ok, one assistant record)"
    );
    if failed > 0 {
        std::process::exit(1);
    }
}
