//! Launch to chat window ready, and resident memory at idle, of `jarvis-desktop` against Tauri's
//! hello world (`examples/hello.rs`) built alike, alternating in one run. Needs a display: run
//! `scripts/bench-desktop`, which also builds the example.
//!
//! Figures: the time from spawning the process to (a) its first page having loaded — the measure
//! both apps share — and (b) for Jarvis, the chat window listing the chats (usable); and the
//! memory of the app's process and every process it started (WebKit's web and network
//! processes): RSS summed, and PSS summed (shared pages counted once), 3 s after ready. With
//! `JARVIS_BENCH_VOICE=1`, also the memory of the app idle with its voice loop listening for the
//! wake word, every voice model loaded (needs `scripts/models voice`, PulseAudio and xdotool).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const RUNS: usize = 5;

struct Launch {
    loaded_ms: f64,
    ready_ms: Option<f64>,
    rss_mib: f64,
    pss_mib: f64,
}

fn main() {
    if std::env::var_os("DISPLAY").is_none() {
        eprintln!("launch bench: no display; run scripts/bench-desktop");
        std::process::exit(2);
    }
    let app = PathBuf::from(env!("CARGO_BIN_EXE_jarvis-desktop"));
    let hello = app
        .parent()
        .expect("a target folder")
        .join("examples/hello");
    assert!(
        hello.exists(),
        "build the baseline first: cargo build --release -p jarvis-desktop --example hello"
    );
    let mut jarvis_runs = Vec::new();
    let mut hello_runs = Vec::new();
    for run in 0..=RUNS {
        let j = launch(&app, "chat page loaded", Some("chat window ready"));
        let h = launch(&hello, "hello page loaded", None);
        // The first of each warms the disk cache and WebKit's caches; it is not counted.
        if run > 0 {
            jarvis_runs.push(j);
            hello_runs.push(h);
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let j_loaded = median(jarvis_runs.iter().map(|l| l.loaded_ms).collect());
    let j_ready = median(jarvis_runs.iter().filter_map(|l| l.ready_ms).collect());
    let h_loaded = median(hello_runs.iter().map(|l| l.loaded_ms).collect());
    let j_rss = median(jarvis_runs.iter().map(|l| l.rss_mib).collect());
    let h_rss = median(hello_runs.iter().map(|l| l.rss_mib).collect());
    let j_pss = median(jarvis_runs.iter().map(|l| l.pss_mib).collect());
    let h_pss = median(hello_runs.iter().map(|l| l.pss_mib).collect());
    println!("median of {RUNS} launches each, alternating");
    println!("| | page loaded | chat window ready | RSS, all processes | PSS, all processes |");
    println!("|---|---|---|---|---|");
    println!(
        "| jarvis-desktop | {j_loaded:.0} ms | {j_ready:.0} ms | {j_rss:.0} MiB | {j_pss:.0} MiB |"
    );
    println!("| Tauri hello world | {h_loaded:.0} ms | — | {h_rss:.0} MiB | {h_pss:.0} MiB |");
    println!(
        "| ratio | {:.2}× | | {:.2}× | {:.2}× |",
        j_loaded / h_loaded,
        j_rss / h_rss,
        j_pss / h_pss
    );
    if std::env::var_os("JARVIS_BENCH_VOICE").is_some() {
        let listening: Vec<(f64, f64)> = (0..3).map(|_| listening(&app)).collect();
        let rss = median(listening.iter().map(|m| m.0).collect());
        let pss = median(listening.iter().map(|m| m.1).collect());
        println!(
            "| jarvis-desktop listening for the wake word, every voice model loaded (median of 3) | | | {rss:.0} MiB | {pss:.0} MiB |"
        );
    }
}

/// RSS and PSS (MiB) of the app idle with its voice loop listening for the wake word on a
/// private PulseAudio server's microphone: whisper, the speech detector, the end-of-turn model,
/// the wake word's three models and Piper's voice loaded (the installed models), 5 s after the
/// microphone opened.
fn listening(binary: &Path) -> (f64, f64) {
    let pulse = jarvis::voice::pulse::Pulse::start().expect("a PulseAudio server");
    let data = tempfile::tempdir().expect("temp dir");
    let models = jarvis::config::Config::installed_model_dir(&|k| std::env::var(k).ok())
        .expect("a home directory");
    assert!(
        models
            .join(jarvis::config::SpeechModel::TinyEn.file_name())
            .is_file(),
        "the voice models (scripts/models voice)"
    );
    std::fs::create_dir_all(data.path().join("data")).unwrap();
    std::os::unix::fs::symlink(&models, data.path().join("data/models")).unwrap();
    std::fs::write(
        data.path().join("settings.toml"),
        "[voice]\nmode = \"wake\"\n",
    )
    .unwrap();
    let (mut child, rx) = start(
        binary,
        data.path(),
        &[("PULSE_SERVER", pulse.server())],
        "warn,jarvis_desktop::launch=debug,jarvis::voice::pipeline=debug",
    );
    let wait_for = |what: &str| {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (line, _) = rx
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .unwrap_or_else(|_| panic!("the app did not log {what:?}"));
            if line.contains(what) {
                return;
            }
        }
    };
    wait_for("shortcut registered");
    // The push-to-talk shortcut switches the microphone on in wake mode.
    for step in ["keydown", "keyup"] {
        let status = Command::new("xdotool")
            .args([step, "ctrl+alt+space"])
            .status()
            .expect("xdotool");
        assert!(status.success(), "xdotool {step}");
    }
    wait_for("listening, its models loaded");
    std::thread::sleep(Duration::from_secs(5));
    let (rss_kib, pss_kib) = memory_of_tree(child.id());
    stop(&mut child);
    (rss_kib as f64 / 1024.0, pss_kib as f64 / 1024.0)
}

/// Starts the app on the data folder `data` (its settings file, its data, its home), with a
/// remote backend that has no key — nothing is loaded or started for the model — `extra`
/// environment and the log filter `log`: the app, and its log lines as they come, each with when.
fn start(
    binary: &Path,
    data: &Path,
    extra: &[(&str, String)],
    log: &str,
) -> (Child, std::sync::mpsc::Receiver<(String, Instant)>) {
    let mut child = Command::new(binary)
        .env("HOME", data)
        .env("XDG_CONFIG_HOME", data.join("config"))
        .env("JARVIS_DATA_DIR", data.join("data"))
        .env("JARVIS_CONFIG", data.join("settings.toml"))
        .env("JARVIS_KEYRING", "off")
        .env("JARVIS_BACKEND", "openai")
        .env("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
        .env("NO_AT_BRIDGE", "1")
        .envs(extra.iter().map(|(k, v)| (*k, v.as_str())))
        .env("JARVIS_LOG", log)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the app");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send((line, Instant::now())).is_err() {
                break;
            }
        }
    });
    (child, rx)
}

fn launch(binary: &Path, loaded: &str, ready: Option<&str>) -> Launch {
    let data = tempfile::tempdir().expect("temp dir");
    let started = Instant::now();
    let (mut child, rx) = start(binary, data.path(), &[], "warn,jarvis_desktop::launch=info");
    let mut loaded_ms = None;
    let mut ready_ms = None;
    let deadline = Instant::now() + Duration::from_secs(30);
    while loaded_ms.is_none() || (ready.is_some() && ready_ms.is_none()) {
        let (line, at) = rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .unwrap_or_else(|_| panic!("{} did not get ready", binary.display()));
        let ms = (at - started).as_secs_f64() * 1000.0;
        if line.contains(loaded) {
            loaded_ms = Some(ms);
        }
        if ready.is_some_and(|r| line.contains(r)) {
            ready_ms = Some(ms);
        }
    }
    std::thread::sleep(Duration::from_secs(3));
    let (rss_kib, pss_kib) = memory_of_tree(child.id());
    stop(&mut child);
    Launch {
        loaded_ms: loaded_ms.unwrap_or_default(),
        ready_ms,
        rss_mib: rss_kib as f64 / 1024.0,
        pss_mib: pss_kib as f64 / 1024.0,
    }
}

fn stop(child: &mut Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// RSS and PSS (KiB) of `root` and all its descendants.
fn memory_of_tree(root: u32) -> (u64, u64) {
    let mut parents = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // The parent is the second field after the command's closing parenthesis.
        if let Some(ppid) = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok())
        {
            parents.push((pid, ppid));
        }
    }
    let mut tree = vec![root];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        tree.extend(
            parents
                .iter()
                .filter(|(_, p)| *p == parent)
                .map(|(c, _)| *c),
        );
        i += 1;
    }
    let field = |text: &str, name: &str| -> u64 {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    tree.iter().fold((0, 0), |(rss, pss), pid| {
        let rollup =
            std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
        (rss + field(&rollup, "Rss:"), pss + field(&rollup, "Pss:"))
    })
}
