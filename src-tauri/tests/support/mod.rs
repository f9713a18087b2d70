//! Starting the app under tauri-driver, finding its windows, and reading what they show.
#![allow(dead_code)]

use std::future::Future;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use jarvis::store::{Role, Store};
use jarvis::ReplyState;
use jarvis_stub::Stub;
use serde_json::{json, Value};

/// No wait in these tests is longer than this.
pub const LIMIT: Duration = Duration::from_secs(30);

const APP: &str = env!("CARGO_BIN_EXE_jarvis-desktop");

static ONE_APP: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The app is single-instance: tests take turns.
pub async fn one_app_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    ONE_APP.lock().await
}

/// A temporary home, data folder and settings file.
pub struct Data {
    dir: tempfile::TempDir,
    /// Extra environment for the app (a PulseAudio server).
    extra: Vec<(String, String)>,
}

impl Data {
    pub fn new() -> Data {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        std::fs::create_dir_all(dir.path().join("data")).unwrap();
        std::fs::write(
            dir.path().join("settings.toml"),
            "backend = \"openai\"\n[openai]\nrequires_key = false\nmodel = \"stub-model\"\n",
        )
        .unwrap();
        Data {
            dir,
            extra: Vec::new(),
        }
    }

    /// The app is started with `name` set to `value` (over what [`Data::env`] sets).
    pub fn set_env(&mut self, name: &str, value: &str) {
        self.extra.push((name.into(), value.into()));
    }

    /// A data folder whose models are the installed ones (the voice models among them), the orb
    /// listening hands-free, and the audio devices of `pulse`.
    pub fn with_voice(pulse: &jarvis::voice::pulse::Pulse) -> Data {
        let mut data = Data::with_models();
        assert!(
            installed_models()
                .join(jarvis::config::SpeechModel::TinyEn.file_name())
                .is_file(),
            "the voice models are missing: run scripts/models voice"
        );
        let mut settings = std::fs::read_to_string(data.dir.path().join("settings.toml")).unwrap();
        settings.push_str("[voice]\nmode = \"hands_free\"\n");
        std::fs::write(data.dir.path().join("settings.toml"), settings).unwrap();
        data.extra.push(("PULSE_SERVER".into(), pulse.server()));
        data
    }

    /// A data folder whose models are the installed ones (the sentence embedder among them).
    pub fn with_models() -> Data {
        let data = Data::new();
        std::os::unix::fs::symlink(
            installed_models(),
            data.dir.path().join("data").join("models"),
        )
        .unwrap();
        data
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn store(&self) -> Store {
        Store::open(
            &self.dir.path().join("data").join("jarvis.db"),
            Duration::from_secs(5),
        )
        .expect("open the app's store")
    }

    /// The environment the app runs in: nothing of the user's.
    pub fn env(&self, stub: &Stub) -> Vec<(String, String)> {
        let p = |s: &str| self.dir.path().join(s).display().to_string();
        vec![
            ("HOME".into(), p("home")),
            ("XDG_CONFIG_HOME".into(), p("home/.config")),
            ("XDG_DATA_HOME".into(), p("home/.local/share")),
            ("JARVIS_DATA_DIR".into(), p("data")),
            ("JARVIS_CONFIG".into(), p("settings.toml")),
            ("JARVIS_KEYRING".into(), "off".into()),
            ("OPENAI_BASE_URL".into(), stub.openai_url()),
            ("NO_AT_BRIDGE".into(), "1".into()),
            (
                "JARVIS_LOG".into(),
                "warn,jarvis=debug,jarvis_desktop=debug".into(),
            ),
        ]
        .into_iter()
        .chain(self.extra.iter().cloned())
        .collect()
    }

    /// The latest reply of the latest chat: its state and text.
    pub fn last_reply(&self) -> (ReplyState, String) {
        let store = self.store();
        let chat = store.chats().unwrap().first().expect("a chat").id;
        let reply = store.last_reply(chat).unwrap().expect("a reply");
        (reply.state, reply.text)
    }

    /// The latest chat's last answer as stored.
    pub fn last_answer(&self) -> String {
        let store = self.store();
        let chat = store.chats().unwrap().first().expect("a chat").id;
        store
            .records(chat)
            .unwrap()
            .into_iter()
            .rev()
            .find(|r| r.role == Role::Assistant)
            .map(|r| r.text)
            .unwrap_or_default()
    }

    pub async fn wait_for_reply_end(&self) {
        let start = Instant::now();
        loop {
            let ended = {
                let store = self.store();
                let chat = store.chats().unwrap().first().map(|c| c.id);
                chat.and_then(|c| store.last_reply(c).unwrap())
                    .is_some_and(|r| !r.state.is_live())
            };
            if ended {
                return;
            }
            assert!(start.elapsed() < LIMIT, "the reply did not end");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Where `scripts/models` installs models for this user.
pub fn installed_models() -> PathBuf {
    if let Ok(dir) = std::env::var("JARVIS_TEST_MODELS") {
        return PathBuf::from(dir);
    }
    let data = std::env::var("XDG_DATA_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".local/share")
        });
    data.join("jarvis/models")
}

/// A WebDriver call that may not hang a test: `None` when it failed or took over 5 s.
async fn bounded<T, E>(call: impl Future<Output = Result<T, E>>) -> Option<T> {
    tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .ok()
        .and_then(Result::ok)
}

/// A port free now for tauri-driver or WebKitWebDriver to listen on, below the kernel's range of
/// ephemeral ports (`ip_local_port_range`, 32768 and up): a port the kernel handed out as free
/// (`bind(0)`) comes from that range, and an outgoing connection (the app to the stub, the
/// WebDriver client) could take it as its own before the driver listens — seen as WebKitWebDriver's
/// "Unable to listen for HTTP server" in CI.
fn free_port() -> u16 {
    use std::hash::{BuildHasher, Hasher};
    for _ in 0..1000 {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u32(std::process::id());
        let port = 20_000 + (hasher.finish() % 12_000) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port between 20000 and 32000")
}

fn tauri_driver() -> PathBuf {
    if let Ok(path) = std::env::var("TAURI_DRIVER") {
        return path.into();
    }
    let home = std::env::var("HOME").unwrap_or_default();
    let cargo_bin = Path::new(&home).join(".cargo/bin/tauri-driver");
    if cargo_bin.exists() {
        cargo_bin
    } else {
        "tauri-driver".into()
    }
}

/// One window's page, through WebDriver. Cheap to clone.
#[derive(Clone)]
pub struct Page {
    client: Client,
}

/// Which windows a start waits for.
#[derive(Clone, Copy)]
enum Shown {
    /// The chat window and the orb, shown.
    Both,
    /// The chat window, shown.
    Chat,
    /// Both made, neither necessarily shown.
    Hidden,
}

/// The running app and its driver.
pub struct App {
    page: Page,
    driver: Child,
    env: Vec<(String, String)>,
    shots: PathBuf,
}

impl std::ops::Deref for App {
    type Target = Page;
    fn deref(&self) -> &Page {
        &self.page
    }
}

fn kill_app() {
    let _ = Command::new("pkill").args(["-f", APP]).status();
}

fn app_running() -> bool {
    Command::new("pgrep")
        .args(["-f", APP])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl App {
    /// Starts the app and waits for both its windows (the orb comes once the chats are usable).
    pub async fn start(stub: &Stub, data: &Data) -> App {
        App::start_with(stub, data, Shown::Both).await
    }

    /// Starts the app and waits for its chat window only (as when it cannot open its chats).
    pub async fn start_chat_only(stub: &Stub, data: &Data) -> App {
        App::start_with(stub, data, Shown::Chat).await
    }

    /// Starts the app as the autostart entry does (`--start-hidden`) and waits until both its
    /// windows are made, whether shown or not.
    pub async fn start_hidden(stub: &Stub, data: &Data) -> App {
        App::start_with(stub, data, Shown::Hidden).await
    }

    /// Whether a `jarvis-desktop` process runs.
    pub fn running() -> bool {
        app_running()
    }

    /// The pid of the `jarvis-desktop` process started last.
    pub fn newest_pid() -> u32 {
        let out = Command::new("pgrep")
            .args(["-n", "-f", APP])
            .output()
            .expect("pgrep");
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("a jarvis-desktop process")
    }

    async fn start_with(stub: &Stub, data: &Data, shown: Shown) -> App {
        assert!(
            std::env::var_os("DISPLAY").is_some(),
            "no display: run these tests with scripts/e2e"
        );
        let env = data.env(stub);
        let port = free_port();
        let native = std::iter::repeat_with(free_port)
            .find(|&native| native != port)
            .expect("a second port");
        let driver = Command::new(tauri_driver())
            .args([
                "--port",
                &port.to_string(),
                "--native-port",
                &native.to_string(),
            ])
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("tauri-driver (cargo install tauri-driver --version '^2' --locked)");
        let url = format!("http://127.0.0.1:{port}");
        let start = Instant::now();
        let client = loop {
            let mut caps = serde_json::Map::new();
            caps.insert("browserName".into(), json!("wry"));
            let args: &[&str] = match shown {
                Shown::Hidden => &["--start-hidden"],
                _ => &[],
            };
            caps.insert(
                "tauri:options".into(),
                json!({ "application": APP, "args": args }),
            );
            // An app that never shows its window holds the session's start: bounded too.
            let attempt = tokio::time::timeout(
                LIMIT,
                ClientBuilder::native().capabilities(caps).connect(&url),
            )
            .await;
            match attempt {
                Ok(Ok(client)) => break client,
                Ok(Err(_)) if start.elapsed() < LIMIT => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Ok(Err(err)) => panic!("no WebDriver session: {err}"),
                Err(_) => panic!("no WebDriver session within {LIMIT:?}: the app showed no window"),
            }
        };
        let target = std::env::var("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
        let shots = target.join("e2e-screenshots");
        std::fs::create_dir_all(&shots).unwrap();
        let app = App {
            page: Page { client },
            driver,
            env,
            shots,
        };
        // The orb is made once the chat window is ready: wait for both.
        app.wait_for("the app's windows", |p| async move {
            let handles = bounded(p.client.windows()).await.unwrap_or_default();
            let ready = match shown {
                Shown::Both => handles.len() >= 2 && !x_windows("Jarvis orb", true).is_empty(),
                Shown::Chat => !handles.is_empty() && !x_windows("Jarvis", true).is_empty(),
                Shown::Hidden => handles.len() >= 2,
            };
            ready.then_some(())
        })
        .await;
        app
    }

    /// Runs `jarvis-desktop --action NAME` as a second start: it hands the action to this one
    /// (the same path as the tray menu's item) and ends.
    pub async fn action(&self, name: &str) {
        let mut child = tokio::process::Command::new(APP)
            .args(["--action", name])
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("a second start");
        let status = tokio::time::timeout(LIMIT, child.wait())
            .await
            .expect("the second start handed over and ended")
            .unwrap();
        assert!(status.success(), "{status}");
    }

    /// Saves what both windows show, and the whole screen, under `e2e-screenshots/NAME-*.png`,
    /// as the X server has them (WebKitWebDriver's own snapshots hang with WebKit's shared-memory
    /// renderer, which the app uses where there is no GPU).
    pub async fn screenshots(&self, name: &str) {
        for (title, file) in [("Jarvis", "chat"), ("Jarvis orb", "orb")] {
            if let Some(id) = x_windows(title, true).first() {
                let _ = Command::new("import")
                    .args(["-window", id])
                    .arg(self.shots.join(format!("{name}-{file}.png")))
                    .status();
            }
        }
        let _ = Command::new("import")
            .args(["-window", "root"])
            .arg(self.shots.join(format!("{name}-screen.png")))
            .status();
    }

    pub async fn quit(mut self) {
        let _ =
            tokio::time::timeout(Duration::from_secs(10), self.page.client.clone().close()).await;
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        let start = Instant::now();
        while app_running() && start.elapsed() < Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        kill_app();
    }

    pub fn close_window_like_a_user(&self, title: &str) {
        let status = Command::new("wmctrl")
            .args(["-F", "-c", title])
            .status()
            .expect("wmctrl");
        assert!(status.success());
    }

    /// What the X server says of the window: its state, hints and type.
    pub fn window_properties(&self, title: &str) -> String {
        let ids = x_windows(title, false);
        let id = ids.first().unwrap_or_else(|| panic!("no window {title:?}"));
        let out = Command::new("xprop").args(["-id", id]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn active_window_title(&self) -> String {
        let out = Command::new("xdotool")
            .args(["getactivewindow", "getwindowname"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Drop for App {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        kill_app();
    }
}

/// Whether a window with this title is mapped (shown) on the display.
pub fn window_mapped(title: &str) -> bool {
    !x_windows(title, true).is_empty()
}

fn x_windows(title: &str, visible: bool) -> Vec<String> {
    let pattern = format!("^{}$", title);
    let mut args = vec!["search"];
    if visible {
        args.push("--onlyvisible");
    }
    args.extend(["--name", &pattern]);
    let out = Command::new("xdotool").args(&args).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

pub fn xdotool(args: &[&str]) {
    let status = Command::new("xdotool")
        .args(args)
        .status()
        .expect("xdotool");
    assert!(status.success(), "xdotool {args:?}");
}

impl Page {
    /// Switches to the window whose page has this title; `false` if none has.
    pub async fn switch_to(&self, title: &str) -> bool {
        let start = Instant::now();
        loop {
            for handle in bounded(self.client.windows()).await.unwrap_or_default() {
                if bounded(self.client.switch_to_window(handle))
                    .await
                    .is_some()
                    && bounded(self.client.title()).await.as_deref() == Some(title)
                {
                    return true;
                }
            }
            if start.elapsed() > Duration::from_secs(10) {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub async fn chat_window(&self) {
        assert!(self.switch_to("Jarvis").await, "no chat window");
        self.wait_for("the chat page", |p| async move {
            (p.eval("return document.readyState").await == json!("complete")).then_some(())
        })
        .await;
    }

    /// Opens Settings from the chat window and waits until its form is shown. The page wires
    /// its buttons once its start has asked the app whether it can run, a while after the page
    /// has loaded on a busy machine, and a click before that does nothing: the button is
    /// clicked again each second until the form opens.
    pub async fn open_settings(&self) {
        let start = Instant::now();
        loop {
            self.click("#open-settings").await;
            let clicked = Instant::now();
            while clicked.elapsed() < Duration::from_secs(1) {
                if self
                    .eval("return document.getElementById('settings').open")
                    .await
                    == json!(true)
                {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(40)).await;
            }
            assert!(
                start.elapsed() < LIMIT,
                "Settings did not open within {LIMIT:?}"
            );
        }
    }

    pub async fn orb_window(&self) {
        assert!(self.switch_to("Jarvis orb").await, "no orb window");
    }

    pub async fn eval(&self, script: &str) -> Value {
        tokio::time::timeout(LIMIT, self.client.execute(script, vec![]))
            .await
            .unwrap_or_else(|_| panic!("the page did not answer within {LIMIT:?}:\n{script}"))
            .unwrap_or_else(|e| panic!("script failed: {e}\n{script}"))
    }

    /// Polls `check` until it gives a value; panics naming `what` after [`LIMIT`].
    pub async fn wait_for<T, F, Fut>(&self, what: &str, check: F) -> T
    where
        F: Fn(Page) -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        let start = Instant::now();
        loop {
            if let Some(found) = check(self.clone()).await {
                return found;
            }
            assert!(start.elapsed() < LIMIT, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
    }

    /// Waits until the orb's phase is `phase`. A timeout's panic lists each state the orb was
    /// in (phase, microphone, label, when), so a failure says what it did instead.
    pub async fn wait_for_phase(&self, phase: &str, what: &str) {
        let start = Instant::now();
        let mut seen: Vec<(String, f64)> = Vec::new();
        loop {
            let now = self
                .eval(
                    "const c = document.getElementById('orb-card');
                     const label = document.getElementById('phase');
                     return c ? [c.dataset.phase || '', c.dataset.mic || '',
                                 label ? label.textContent : ''] : ['', '', ''];",
                )
                .await;
            let part = |i: usize| now[i].as_str().unwrap_or_default().to_string();
            if part(0) == phase {
                return;
            }
            let state = format!("{} (mic {}, {:?})", part(0), part(1), part(2));
            if seen.last().map(|(s, _)| s) != Some(&state) {
                seen.push((state, start.elapsed().as_secs_f64()));
            }
            if start.elapsed() >= LIMIT {
                let seen: Vec<String> = seen
                    .iter()
                    .map(|(state, at)| format!("{state} at {at:.1} s"))
                    .collect();
                panic!(
                    "timed out waiting for {what}; the orb was: {}",
                    seen.join(" → ")
                );
            }
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
    }

    pub async fn texts(&self, selector: &str) -> Vec<String> {
        let script = format!(
            "return [...document.querySelectorAll({})].map(e => e.innerText.trim())",
            json!(selector)
        );
        serde_json::from_value(self.eval(&script).await).unwrap_or_default()
    }

    pub async fn text(&self, selector: &str) -> String {
        self.texts(selector)
            .await
            .into_iter()
            .next()
            .unwrap_or_default()
    }

    pub async fn count(&self, selector: &str) -> usize {
        let script = format!(
            "return document.querySelectorAll({}).length",
            json!(selector)
        );
        self.eval(&script).await.as_u64().unwrap_or(0) as usize
    }

    pub async fn attr(&self, selector: &str, name: &str) -> String {
        let script = format!(
            "const e = document.querySelector({}); return e ? (e.getAttribute({}) || '') : ''",
            json!(selector),
            json!(name)
        );
        self.eval(&script).await.as_str().unwrap_or("").to_string()
    }

    pub async fn visible(&self, selector: &str) -> bool {
        match self.client.find(Locator::Css(selector)).await {
            Ok(el) => el.is_displayed().await.unwrap_or(false),
            Err(_) => false,
        }
    }

    /// The live reply's text as shown.
    pub async fn live_text(&self) -> String {
        self.eval(
            "const e = [...document.querySelectorAll('.message.assistant[data-reply] .body')].pop();
             return e ? e.innerText : ''",
        )
        .await
        .as_str()
        .unwrap_or("")
        .to_string()
    }

    pub async fn wait_for_state(&self, state: &str) {
        let what = format!("the reply to be {state}");
        self.wait_for(&what, |p| async move {
            let now = p
                .eval(
                    "const e = [...document.querySelectorAll('.message.assistant[data-reply]')].pop();
                     return e ? e.dataset.state : ''",
                )
                .await;
            (now.as_str() == Some(state)).then_some(())
        })
        .await;
    }

    pub async fn type_into(&self, selector: &str, text: &str) {
        let el = self
            .client
            .wait()
            .at_most(LIMIT)
            .for_element(Locator::Css(selector))
            .await
            .unwrap_or_else(|e| panic!("no {selector}: {e}"));
        el.send_keys(&text.replace('\n', "\u{E007}")).await.unwrap();
    }

    /// Types a question in the composer and presses Enter.
    pub async fn type_question(&self, text: &str) {
        self.type_into("#question", &format!("{text}\n")).await;
    }

    /// Clicks the element; if the page replaced it while it was being found or clicked (a list
    /// that re-renders as it loads), finds it again.
    pub async fn click(&self, selector: &str) {
        let stale = |e: &fantoccini::error::CmdError| {
            matches!(e, fantoccini::error::CmdError::Standard(w)
                if w.error == fantoccini::error::ErrorStatus::StaleElementReference)
        };
        // A page whose app holds its main thread never answers: bounded, as `eval` is.
        fn hung(what: &str, selector: &str) -> ! {
            panic!("the page did not {what} {selector} within {LIMIT:?}")
        }
        for attempt in 1.. {
            let found = tokio::time::timeout(LIMIT, self.client.find(Locator::Css(selector)))
                .await
                .unwrap_or_else(|_| hung("find", selector));
            let clicked = match found {
                Ok(el) => tokio::time::timeout(LIMIT, el.click())
                    .await
                    .unwrap_or_else(|_| hung("take the click on", selector)),
                Err(e) if stale(&e) && attempt < 5 => Err(e),
                Err(e) => panic!("no {selector}: {e}"),
            };
            match clicked {
                Ok(()) => return,
                Err(e) if stale(&e) && attempt < 5 => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("cannot click {selector}: {e}"),
            }
        }
    }
}
