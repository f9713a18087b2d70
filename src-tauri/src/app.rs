//! Start-up: settings, store, backend and service, then the Tauri app with its windows, tray,
//! shortcut and the single-instance hand-over.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use jarvis::config::{BackendKind, Config};
use jarvis::llm::{self, Backend, Unusable};
use jarvis::voice::device::{CpalSource, RodioSink};
use jarvis::voice::pipeline::{VoiceOptions, VoiceParts};
use jarvis::voice::{models, AudioSink, Espeak, Recorder, VoiceLoop};
use jarvis::{Service, ServiceOptions, Store};
use tauri::async_runtime::JoinHandle;
use tauri::Manager;

use crate::tray::Action;

/// What every command and handler shares.
pub struct AppState {
    pub service: Service,
    pub config: Mutex<Config>,
    /// What went wrong at start-up (a malformed settings file, a missing key), shown in the chat
    /// window until fixed.
    pub problem: Mutex<Option<String>>,
    /// Each window's forwarding tasks (its attachments), by window label and kind; aborting one
    /// detaches the window and never touches a reply.
    forwarders: Mutex<HashMap<(String, &'static str), JoinHandle<()>>>,
    /// The voice loop (microphone, speech-to-text, speech, ducking) once it started, or why it
    /// could not.
    pub voice: Mutex<Result<Arc<VoiceLoop>, String>>,
    /// Why Jarvis cannot listen or speak right now (a missing speech model, a microphone that
    /// failed to open), for the orb; `None` while the voice works.
    pub voice_problem: tokio::sync::watch::Sender<Option<String>>,
    /// How loud the microphone and Jarvis's voice are now (the newest loop's), for the orb's ring.
    pub voice_levels: tokio::sync::watch::Sender<jarvis::voice::pipeline::Levels>,
    /// Counts voice loop starts, so only the newest loop reports its problems.
    voice_starts: std::sync::atomic::AtomicU64,
    /// Counts what was asked of the voice loop to say (Play, Read aloud), so that a restart
    /// waiting for quiet does not drop a replay asked for just before it would have begun.
    pub voice_asked: std::sync::atomic::AtomicU64,
    /// The service's recall (its embedder and summary index), shared with "What the model sees".
    pub recall: Option<Arc<jarvis::memory::recall::Recall>>,
}

impl AppState {
    /// Replaces the window's forwarder of this kind (a page that attaches again detaches first).
    pub fn forward(&self, label: &str, kind: &'static str, task: JoinHandle<()>) {
        let mut forwarders = self.forwarders.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = forwarders.insert((label.to_string(), kind), task) {
            old.abort();
        }
    }

    /// Detaches a window: ends all its forwarders.
    pub fn detach(&self, label: &str) {
        let mut forwarders = self.forwarders.lock().unwrap_or_else(|e| e.into_inner());
        forwarders.retain(|(window, _), task| {
            let keep = window != label;
            if !keep {
                task.abort();
            }
            keep
        });
    }

    pub fn settings(&self) -> jarvis::config::Settings {
        self.config
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .settings
            .clone()
    }
}

/// The real environment, in the shape the core's loaders take.
pub fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// The backend the settings choose, or one that says why it cannot answer.
pub fn backend_for(config: &Config) -> (Arc<dyn Backend>, Option<String>) {
    match llm::from_config(config, &env) {
        Ok(backend) => (backend, None),
        Err(err) => {
            let reason = err.to_string();
            let kind: BackendKind = config.settings.backend;
            let unusable = Unusable::new(kind, config.settings.model(), reason.clone());
            (Arc::new(unusable), Some(reason))
        }
    }
}

/// Once the chat window is usable: the orb is made and the shortcut registered. Both hold the main
/// thread (a new webview starts its WebKit process; grabbing a key takes ~100 ms), on which the
/// chat page's first calls wait: done during start-up they delayed the chat window by 0.5 s each
/// (measured).
pub fn chat_window_ready(app: &tauri::AppHandle) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let handle = app.clone();
        let _ = app.run_on_main_thread(move || crate::windows::create_orb(&handle));
        let handle = app.clone();
        tauri::async_runtime::spawn_blocking(move || register_shortcut(&handle));
        let handle = app.clone();
        tauri::async_runtime::spawn(async move { start_voice(&handle).await });
    });
}

/// Starts the voice loop: the speech model, espeak-ng, the speaker and the microphone (opened
/// only while a mode listens). A missing model or device is kept as the reason it cannot listen.
pub async fn start_voice(app: &tauri::AppHandle) {
    let state = app.state::<AppState>();
    let settings = state.settings();
    let models_dir = state
        .config
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .model_dir();
    let voice = settings.voice.clone();
    let loaded = tauri::async_runtime::spawn_blocking(move || {
        let whisper = models::lazy_whisper(&models_dir, voice.speech_model, voice.threads)?;
        let wake = match models::wake_factory(&models_dir) {
            Ok(factory) => Some(factory),
            Err(err) => {
                tracing::warn!(%err, "the wake word is not available");
                None
            }
        };
        let sink: Arc<dyn AudioSink> = match RodioSink::open() {
            Ok(sink) => Arc::new(sink),
            Err(err) => {
                // No speaker: answers are shown, not heard.
                tracing::warn!(%err, "no speaker; replies are not spoken");
                Arc::new(Recorder::new(22_050))
            }
        };
        let source = CpalSource {
            device: (!voice.input_device.is_empty()).then(|| voice.input_device.clone()),
        };
        Ok::<_, jarvis::voice::VoiceError>(VoiceParts {
            source: Arc::new(source),
            sink,
            transcriber: Arc::new(whisper),
            synthesizer: Arc::new(Espeak::new(&voice.tts_voice, voice.tts_speed)),
            wake,
        })
    })
    .await;
    let result = match loaded {
        Ok(Ok(parts)) => {
            let options = VoiceOptions {
                wake_threshold: settings.voice.wake_threshold,
                ..VoiceOptions::default()
            };
            crate::milestone_at("voice loop started");
            Ok(Arc::new(VoiceLoop::start(
                state.service.clone(),
                parts,
                options,
            )))
        }
        Ok(Err(err)) => Err(err.to_string()),
        Err(err) => Err(format!("the voice loop could not start: {err}")),
    };
    use std::sync::atomic::Ordering;
    let start = state.voice_starts.fetch_add(1, Ordering::SeqCst) + 1;
    match &result {
        Err(problem) => {
            tracing::warn!("voice: {problem}");
            state.voice_problem.send_replace(Some(problem.clone()));
            state.voice_levels.send_replace(Default::default());
        }
        Ok(voice) => {
            // The loop's own problems (the microphone failing to open later) go to the orb
            // until a newer loop replaces it.
            let mut problems = voice.problems();
            let mut levels = voice.levels();
            let app = app.clone();
            tauri::async_runtime::spawn(async move {
                loop {
                    let state = app.state::<AppState>();
                    if state.voice_starts.load(Ordering::SeqCst) != start {
                        break;
                    }
                    let problem = problems.borrow_and_update().clone();
                    state.voice_problem.send_if_modified(|p| {
                        let changed = *p != problem;
                        *p = problem;
                        changed
                    });
                    let now = *levels.borrow_and_update();
                    state.voice_levels.send_if_modified(|l| {
                        let changed = *l != now;
                        *l = now;
                        changed
                    });
                    tokio::select! {
                        changed = problems.changed() => if changed.is_err() { break },
                        changed = levels.changed() => if changed.is_err() { break },
                    }
                }
            });
        }
    }
    // Replacing a running loop drops it: its microphone closes; the conversation stays.
    *state.voice.lock().unwrap_or_else(|p| p.into_inner()) = result;
}

/// Registers the push-to-talk shortcut the settings name; a failure is shown as a problem.
fn register_shortcut(app: &tauri::AppHandle) {
    let state = app.state::<AppState>();
    let shortcut = state.settings().desktop.shortcut;
    let registered = crate::shortcut::register(app, &shortcut);
    crate::milestone_at("shortcut registered");
    if let Err(err) = registered {
        tracing::warn!("{err:#}");
        let mut problem = state.problem.lock().unwrap_or_else(|e| e.into_inner());
        problem.get_or_insert_with(|| format!("{err:#}"));
    }
}

pub fn run() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("JARVIS_LOG").unwrap_or_else(|_| {
                format!(
                    "warn,jarvis=info,jarvis_desktop=info,{}",
                    jarvis::voice::QUIET_LOGS
                )
                .into()
            }),
        )
        .with_writer(std::io::stderr)
        .init();

    crate::milestone_at("process start");
    let (config, bad_settings) = Config::load_or_defaults(&env)?;
    let store = Store::open(
        &config.database_path(),
        Duration::from_millis(config.settings.replies.busy_timeout_ms),
    )
    .with_context(|| format!("cannot open {}", config.database_path().display()))?;
    let (backend, bad_backend) = backend_for(&config);
    let problem = bad_settings.map(|e| e.to_string()).or(bad_backend);
    if let Some(problem) = &problem {
        tracing::warn!("{problem}");
    }
    let options =
        ServiceOptions::from_settings(&config.settings).with_recall(&store, &config.model_dir());
    let recall = options.recall.clone();
    // The service runs on Tauri's own tokio runtime, like every command.
    let service =
        tauri::async_runtime::block_on(async move { Service::start(store, backend, options) });
    let state = AppState {
        service,
        config: Mutex::new(config),
        problem: Mutex::new(problem),
        forwarders: Mutex::new(HashMap::new()),
        voice: Mutex::new(Err("the voice loop is starting".into())),
        voice_problem: tokio::sync::watch::Sender::new(None),
        voice_levels: tokio::sync::watch::Sender::new(Default::default()),
        voice_starts: std::sync::atomic::AtomicU64::new(0),
        voice_asked: std::sync::atomic::AtomicU64::new(0),
        recall,
    };

    crate::milestone_at("service started");
    tauri::Builder::default()
        // First, so a second start hands over its action and ends before anything else starts.
        .plugin(tauri_plugin_single_instance::init(|app, args, _cwd| {
            let action = Action::from_args(&args).unwrap_or(Action::ShowChat);
            crate::tray::perform(app, action);
        }))
        // No page may navigate away from the app's own pages (a link goes to the system browser).
        .plugin(
            tauri::plugin::Builder::<tauri::Wry>::new("navigation-guard")
                .on_navigation(|_webview, url| {
                    let own = url.scheme() == "tauri" || url.host_str() == Some("tauri.localhost");
                    if !own {
                        tracing::warn!("blocked a navigation away from the app");
                    }
                    own
                })
                .build(),
        )
        .plugin(tauri_plugin_dialog::init())
        .plugin(tauri_plugin_opener::init())
        .plugin(crate::shortcut::plugin())
        // Where the orb (and the chat window) was put, and the chat window's size.
        .plugin(
            tauri_plugin_window_state::Builder::default()
                .with_state_flags(
                    tauri_plugin_window_state::StateFlags::POSITION
                        | tauri_plugin_window_state::StateFlags::SIZE,
                )
                .build(),
        )
        .manage(state)
        .invoke_handler(crate::commands::handler())
        .on_page_load(|webview, payload| {
            match payload.event() {
                // A reload (or a navigation) leaves its attachments behind.
                tauri::webview::PageLoadEvent::Started => {
                    webview.state::<AppState>().detach(webview.label())
                }
                tauri::webview::PageLoadEvent::Finished
                    if webview.label() == crate::windows::CHAT =>
                {
                    static LOADED: std::sync::Once = std::sync::Once::new();
                    crate::milestone("chat page loaded", &LOADED);
                }
                tauri::webview::PageLoadEvent::Finished => {}
            }
        })
        .on_window_event(crate::windows::on_event)
        .setup(move |app| {
            crate::milestone_at("setup");
            crate::tray::build(app.handle())?;
            if let Some(action) = Action::from_args(&std::env::args().collect::<Vec<_>>()) {
                crate::tray::perform(app.handle(), action);
            }
            crate::milestone_at("setup done");
            Ok(())
        })
        .build(tauri::generate_context!("../tauri.conf.json"))
        .context("cannot start the desktop app")?
        .run(|app, event| {
            if let tauri::RunEvent::ExitRequested { api, code, .. } = event {
                // Closing the last window keeps Jarvis in the tray; only Quit (code set) ends it.
                if code.is_none() {
                    api.prevent_exit();
                }
            }
            let _ = app;
        });
    Ok(())
}
