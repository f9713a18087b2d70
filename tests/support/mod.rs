//! Shared helpers: a service wired to the stub LLM server over loopback, a real SQLite file in a
//! temporary directory, and the `jarvis` binary with an isolated environment.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use jarvis::config::{BackendKind, Config, Settings};
use jarvis::llm::{self, Backend};
use jarvis::store::Store;
use jarvis::{Attachment, ChatId, Event, ReplyId, Service, ServiceOptions};
use jarvis_stub::Stub;

/// No test may wait longer than this for a reply to end.
pub const LIMIT: Duration = Duration::from_secs(20);

/// The bound on a wait for a reply of the real local model: a prompt of several hundred tokens,
/// a tool call and a second turn took over 20 s on two cores while other test binaries ran, so
/// this only bounds a hang.
pub const MODEL_LIMIT: Duration = Duration::from_secs(120);

/// The bound on a wait for speech-to-text: a machine with both cores busy slows whisper several
/// fold, so this only bounds a hang.
pub const SPEECH_LIMIT: Duration = Duration::from_secs(60);

/// The code under test logs to the test's output (kept by the harness, shown for a failing test)
/// when `JARVIS_LOG` says what to log, as the app reads it (`JARVIS_LOG=jarvis::voice=debug`
/// shows why a stop said over the voice in a real-time loop test opened nothing); nothing
/// otherwise.
pub fn log_if_asked() {
    if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_env("JARVIS_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_test_writer()
            .try_init();
    }
}

/// Settings for tests: the given backend at the stub, short timeouts and backoffs.
pub fn settings(kind: BackendKind, stub: &Stub) -> Settings {
    let mut s = Settings {
        backend: kind,
        ..Settings::default()
    };
    s.openai.base_url = stub.openai_url();
    s.openai.requires_key = false;
    s.openai.model = "stub-model".into();
    s.anthropic.base_url = stub.anthropic_url();
    s.anthropic.model = "stub-model".into();
    s.timeouts.connect_secs = 2.0;
    s.timeouts.first_token_secs = 5.0;
    s.timeouts.idle_secs = 1.0;
    s.retry.initial_backoff_ms = 20;
    s.retry.max_retries = 3;
    s.replies.progress_ms = 50;
    s
}

/// A temporary data directory with its database path.
pub struct Dir {
    pub dir: tempfile::TempDir,
}

impl Dir {
    pub fn new() -> Dir {
        Dir {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
    pub fn db(&self) -> PathBuf {
        self.dir.path().join("jarvis.db")
    }
    pub fn store(&self) -> Store {
        Store::open(&self.db(), Duration::from_secs(2)).expect("open store")
    }
    pub fn config(&self, settings: Settings) -> Config {
        Config {
            path: self.dir.path().join("settings.toml"),
            file_found: false,
            data_dir: self.dir.path().to_path_buf(),
            settings,
        }
    }
}

/// An environment with only `JARVIS_KEYRING=off` plus `extra`.
pub fn env_with(extra: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let extra: Vec<(String, String)> = extra
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |name: &str| {
        if name == "JARVIS_KEYRING" {
            return Some("off".into());
        }
        extra
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    }
}

/// The service over a fresh store in `dir`, answering through the stub.
pub fn service(dir: &Dir, settings: Settings) -> Service {
    let config = dir.config(settings);
    let backend: Arc<dyn Backend> =
        llm::from_config(&config, &env_with(&[("ANTHROPIC_API_KEY", "test-key")]))
            .expect("backend");
    Service::start(
        dir.store(),
        backend,
        ServiceOptions::from_settings(&config.settings),
    )
}

/// Reads `reply`'s events until it ends; panics if that takes longer than [`LIMIT`].
pub async fn until_end(attachment: &mut Attachment, reply: ReplyId) -> Vec<Event> {
    until_end_within(LIMIT, attachment, reply).await
}

/// Reads `reply`'s events until it ends; panics if that takes longer than `limit`.
pub async fn until_end_within(
    limit: Duration,
    attachment: &mut Attachment,
    reply: ReplyId,
) -> Vec<Event> {
    let mut events = Vec::new();
    let read = async {
        while let Some(event) = attachment.next_of(reply).await {
            let end = matches!(event, Event::ReplyEnded { .. });
            events.push(event);
            if end {
                break;
            }
        }
    };
    tokio::time::timeout(limit, read)
        .await
        .unwrap_or_else(|_| panic!("reply {reply} did not end within {limit:?}"));
    events
}

/// Waits until `done` holds, looking every 20 ms; panics naming `what` if it does not within
/// [`LIMIT`] (for what no event announces: a file, another process's store, a recorder).
pub async fn eventually(what: &str, done: impl FnMut() -> bool) {
    eventually_within(LIMIT, what, done).await
}

/// [`eventually`] with a bound of its own, for what takes longer than [`LIMIT`] by design (a
/// thirty-second answer said at real time).
pub async fn eventually_within(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let wait = async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(limit, wait)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what} (bound: {limit:?})"));
}

/// Waits until a stream is held at `gate`; panics if none gets there within [`LIMIT`].
pub async fn reached(gate: &jarvis_stub::Gate) {
    tokio::time::timeout(LIMIT, gate.reached())
        .await
        .unwrap_or_else(|_| panic!("no reply reached its gate within {LIMIT:?}"));
}

/// A voice loop that, when it goes, waits for its listening threads to end: a test process that
/// exits while one still runs the speech models crashes in their libraries' teardown (seen as a
/// SIGSEGV after a passed test).
pub struct Voice(Option<jarvis::voice::VoiceLoop>);

impl Voice {
    pub fn new(voice: jarvis::voice::VoiceLoop) -> Voice {
        Voice(Some(voice))
    }
}

impl std::ops::Deref for Voice {
    type Target = jarvis::voice::VoiceLoop;
    fn deref(&self) -> &Self::Target {
        self.0.as_ref().expect("the loop lives until dropped")
    }
}

impl Drop for Voice {
    fn drop(&mut self) {
        if let Some(voice) = self.0.take() {
            let threads = voice.listening_threads();
            drop(voice);
            if !threads.wait_ended(LIMIT) && !std::thread::panicking() {
                panic!("a listening thread still ran {LIMIT:?} after its loop was dropped");
            }
        }
    }
}

/// The text of a reply's deltas.
pub fn text_of(events: &[Event]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Delta { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// The state and reason a reply ended with.
pub fn ending(events: &[Event]) -> (jarvis::ReplyState, Option<String>) {
    match events.last() {
        Some(Event::ReplyEnded { state, reason, .. }) => (*state, reason.clone()),
        other => panic!("the reply did not end: last event {other:?}"),
    }
}

/// Asks in a new chat and returns the chat, the reply and an attachment.
pub async fn ask_new(service: &Service, text: &str) -> (ChatId, ReplyId, Attachment) {
    let chat = service.new_chat(None).await.expect("new chat").id;
    let reply = service.ask(chat, text).await.expect("ask");
    let attachment = service.attach(chat).await.expect("attach");
    (chat, reply, attachment)
}

/// Reads a command's output until it holds `needle` (the reply is under way); returns what came.
pub async fn read_until(stdout: &mut tokio::process::ChildStdout, needle: &str) -> Vec<u8> {
    read_until_within(LIMIT, stdout, needle).await
}

/// [`read_until`], waiting up to `limit` for each piece of output.
pub async fn read_until_within(
    limit: Duration,
    stdout: &mut tokio::process::ChildStdout,
    needle: &str,
) -> Vec<u8> {
    use tokio::io::AsyncReadExt as _;
    let mut seen = Vec::new();
    let mut buf = [0u8; 64];
    while !String::from_utf8_lossy(&seen).contains(needle) {
        let n = tokio::time::timeout(limit, stdout.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(
            n > 0,
            "it ended before it said {needle:?}: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buf[..n]);
    }
    seen
}

/// `cmd` (made with a cleared environment, as [`jarvis`] makes it) run on a terminal of its
/// own: `script` (util-linux) runs it on a pseudo-terminal that is its controlling terminal (the
/// `/dev/tty` a process asks the user on), passes what is written to script's stdin on to it as
/// typed, and copies what it shows to script's stdout.
pub fn on_a_terminal(cmd: &tokio::process::Command) -> tokio::process::Command {
    let cmd = cmd.as_std();
    let quote = |s: &std::ffi::OsStr| format!("'{}'", s.to_string_lossy().replace('\'', r"'\''"));
    let line: Vec<String> = std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(quote)
        .collect();
    let mut wrapped = tokio::process::Command::new("script");
    wrapped
        .args([
            "--quiet",
            "--return",
            "--command",
            &line.join(" "),
            "/dev/null",
        ])
        .env_clear()
        .kill_on_drop(true);
    for (key, value) in cmd.get_envs() {
        match value {
            Some(value) => wrapped.env(key, value),
            None => wrapped.env_remove(key),
        };
    }
    wrapped
}

/// `cmd` (the `jarvis` binary) asks the stub, as an OpenAI-compatible server, with a test key.
pub fn at_stub(cmd: &mut tokio::process::Command, stub: &Stub) {
    cmd.env("JARVIS_BACKEND", "openai")
        .env("OPENAI_BASE_URL", stub.openai_url())
        .env("OPENAI_API_KEY", "sk-test-key");
}

/// The `jarvis` binary with an environment that touches nothing of the user's.
pub fn jarvis(dir: &Dir) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_jarvis"));
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", dir.path())
        .env("JARVIS_DATA_DIR", dir.path())
        .env("JARVIS_CONFIG", dir.path().join("settings.toml"))
        .env("JARVIS_KEYRING", "off")
        // No model server of the machine's own (Ollama, LM Studio) is asked.
        .env("JARVIS_MODEL_SERVERS", "")
        .kill_on_drop(true);
    cmd
}

/// Runs a command to its end within [`LIMIT`], returning status, stdout and stderr.
pub async fn output(cmd: &mut tokio::process::Command) -> (i32, String, String) {
    output_within(LIMIT, cmd).await
}

/// Runs a command to its end within `limit` (a command that transcribes speech wants more than
/// [`LIMIT`] on a loaded machine), returning status, stdout and stderr.
pub async fn output_within(
    limit: Duration,
    cmd: &mut tokio::process::Command,
) -> (i32, String, String) {
    let out = tokio::time::timeout(limit, cmd.output())
        .await
        .expect("the command did not end in time")
        .expect("the command ran");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The local model file for tests: `JARVIS_TEST_MODEL`, else the default model where
/// `scripts/models` installs it.
pub fn local_model() -> PathBuf {
    let path = std::env::var("JARVIS_TEST_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|_| model_dir().join(jarvis::config::DEFAULT_MODEL));
    assert!(
        path.is_file(),
        "the local model {} is missing: run scripts/models",
        path.display()
    );
    path
}

/// The `jarvis-llm` server for tests: `JARVIS_LLM_SERVER`, else the release build, else the debug one.
pub fn llm_server() -> PathBuf {
    if let Ok(path) = std::env::var("JARVIS_LLM_SERVER") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("test executable");
    let target = exe
        .parent()
        .and_then(Path::parent)
        .and_then(Path::parent)
        .expect("target dir");
    ["release", "debug"]
        .iter()
        .map(|p| target.join(p).join("jarvis-llm"))
        .find(|p| p.is_file())
        .expect("jarvis-llm is not built: run `cargo build --release -p jarvis-llm`")
}

/// Settings for the local model with greedy sampling and a small context.
pub fn local_settings(model: &Path) -> Settings {
    let mut s = Settings {
        backend: BackendKind::Local,
        ..Settings::default()
    };
    s.local.model = model.display().to_string();
    s.local.temperature = 0.0;
    s.local.seed = Some(7);
    s.local.max_tokens = 48;
    s.local.context = 1024;
    s.local.threads = 2;
    s.timeouts.idle_secs = 30.0;
    s.timeouts.first_token_secs = 60.0;
    s
}

/// The service over the local model (its server found by [`llm_server`]).
pub fn local_service(dir: &Dir, settings: Settings) -> Service {
    let config = dir.config(settings);
    let server = llm_server().display().to_string();
    let env = env_with(&[("JARVIS_LLM_SERVER", server.as_str())]);
    let backend = llm::from_config(&config, &env).expect("backend");
    Service::start(
        dir.store(),
        backend,
        ServiceOptions::from_settings(&config.settings),
    )
}

/// The model folder `scripts/models` installs into (`JARVIS_TEST_MODELS` overrides it).
pub fn model_dir() -> PathBuf {
    match std::env::var("JARVIS_TEST_MODELS") {
        Ok(dir) => PathBuf::from(dir),
        Err(_) => jarvis::config::Config::installed_model_dir(&|k| std::env::var(k).ok())
            .expect("a home directory"),
    }
}

/// The installed end-of-turn model with the words, as the voice loop judges pauses; loaded once
/// per test process.
pub fn turn() -> jarvis::voice::TurnJudge {
    static TURN: std::sync::OnceLock<jarvis::voice::TurnJudge> = std::sync::OnceLock::new();
    TURN.get_or_init(|| {
        let (turn, missing) = jarvis::voice::models::turn_judge(&model_dir());
        if let Some(err) = missing {
            panic!("{err}");
        }
        turn
    })
    .clone()
}

/// The installed whisper tiny.en, loaded once per test process. One thread: whisper.cpp's threads
/// wait for each other by spinning, and with both cores busy two of them took 3 to 9 s for what
/// one does in 1.8 s.
pub fn whisper() -> Arc<dyn jarvis::voice::Transcriber> {
    static WHISPER: std::sync::OnceLock<Arc<jarvis::voice::Whisper>> = std::sync::OnceLock::new();
    WHISPER
        .get_or_init(|| {
            Arc::new(
                jarvis::voice::models::load_whisper(
                    &model_dir(),
                    jarvis::config::SpeechModel::TinyEn,
                    1,
                )
                .unwrap_or_else(|e| panic!("{e}")),
            )
        })
        .clone()
}

/// What this process holds (PSS from `/proc/self/smaps_rollup`, KiB).
pub fn held_kib() -> u64 {
    let rollup = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap();
    rollup
        .lines()
        .find_map(|l| l.strip_prefix("Pss:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .expect("a Pss line")
}

/// The text of every tool result in a request body, either wire format.
pub fn tool_results(body: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    for m in body["messages"].as_array().expect("messages") {
        if m["role"] == "tool" {
            out.push(m["content"].as_str().unwrap_or_default().to_string());
        }
        if let Some(blocks) = m["content"].as_array() {
            for b in blocks.iter().filter(|b| b["type"] == "tool_result") {
                out.push(b["content"].as_str().unwrap_or_default().to_string());
            }
        }
    }
    out
}
