//! A running Jarvis as a shell holds it: the settings in force, the service, the backend the
//! settings choose (or why it cannot answer), the voice supervisor, and what a saved Settings
//! form changes. The desktop's commands translate to it; the core's tests drive it as they are.

pub mod autostart;
pub mod doctor;
mod models;
pub mod settings;
pub mod shortcut;
pub mod startup;
#[cfg(feature = "test-support")]
pub mod test_portal;
pub mod tools;
pub mod voice;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use secrecy::SecretString;
use thiserror::Error;

use crate::config::{self, Config, ConfigError, KeyringError, SettingValue, Settings};
use crate::llm::{self, Backend, Unusable};
use crate::memory::recall::Recall;
use crate::service::{blocking, Service, ServiceError, ServiceOptions};
use crate::store::{ChatId, Store, StoreError};

pub use models::{
    ModelEntry, ModelState, ModelsView, PullStatus, ServedModel, ServerModels, PROGRESS_EVERY,
};
pub use settings::{AppInfo, Applied, Asked, Endpoint, SettingsForm, SettingsView};
pub use startup::{move_database_aside, StartupProblem};
pub use voice::{device_parts, PartsMaker, VoiceSupervisor};

/// How long Settings waits for the OS keyring to say where a key is before it shows what it
/// knows without it ([`Session::view`]).
pub const KEYRING_WAIT: Duration = Duration::from_secs(3);

/// Runs `ask`, a question to the OS keyring, on a thread of its own, left to itself: a keyring
/// that never answers (one locked, its unlock prompt unanswered) holds that thread only, never
/// a runtime's, whose shutdown would wait for it.
fn ask_keyring<T: Send + 'static>(
    ask: impl FnOnce() -> T + Send + 'static,
) -> tokio::sync::oneshot::Receiver<T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    on_keyring_thread(move || {
        let _ = tx.send(ask());
    });
    rx
}

/// Runs `ask` on a thread of its own, left to itself (see [`ask_keyring`]).
fn on_keyring_thread(ask: impl FnOnce() + Send + 'static) {
    let spawned = std::thread::Builder::new()
        .name("keyring".into())
        .spawn(ask);
    if let Err(err) = spawned {
        tracing::warn!(%err, "no thread to ask the OS keyring on");
    }
}

/// The backend to start with. Its key may have to come from the OS keyring, which may wait for
/// an unlock (or hang): it is made on a thread of its own, and when the keyring has not
/// answered within [`KEYRING_WAIT`] the app starts anyway, on a [`llm::Deferred`] backend that
/// takes the real one once the keyring has given the key.
fn backend_at_start(config: &Config, env: &Env) -> (Arc<dyn Backend>, Option<String>) {
    let Some(var) = needed_key(&config.settings, config.settings.backend) else {
        return backend_for(config, &**env);
    };
    let made = Arc::new(std::sync::OnceLock::new());
    let (tx, rx) = std::sync::mpsc::channel();
    {
        let (config, env, made) = (config.clone(), env.clone(), made.clone());
        on_keyring_thread(move || {
            let (backend, problem) = backend_for(&config, &*env);
            let _ = made.set(backend.clone());
            let _ = tx.send((backend, problem));
        });
    }
    match rx.recv_timeout(KEYRING_WAIT) {
        Ok(made) => made,
        Err(_) => {
            tracing::warn!(
                "the OS keyring did not give {var} within {} s: starting without it",
                KEYRING_WAIT.as_secs()
            );
            // The shape (model, limits) of the backend to come, made with a stand-in key that
            // is never sent anywhere.
            let stand_in = |name: &str| match name {
                n if n == var => Some("stand-in".to_string()),
                n => env(n),
            };
            let (shape, _) = backend_for(config, &stand_in);
            (Arc::new(llm::Deferred::new(&*shape, var, made)), None)
        }
    }
}

/// The key `kind` cannot answer without under `settings`, by its variable's name; none for the
/// local model and a keyless OpenAI-compatible server.
fn needed_key(settings: &Settings, kind: config::BackendKind) -> Option<&'static str> {
    match kind {
        config::BackendKind::Openai if !settings.openai.requires_key => None,
        kind => kind.key_var(),
    }
}

/// Where a key's save to the OS keyring stands: a save given up (the keyring did not answer in
/// time) is undone by the keyring's thread if the keyring takes the key after all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeySave {
    Waiting,
    GivenUp,
    Answered,
}

/// The environment as the session reads it (the real one, or a test's).
pub type Env = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// The real environment, with the API keys `keys` taken out of it at start
/// ([`config::take_keys_from_env`]) still found here.
pub fn process_env_with(keys: Vec<(&'static str, String)>) -> Env {
    Arc::new(move |name| {
        keys.iter()
            .find(|(var, _)| *var == name)
            .map(|(_, value)| value.clone())
            .or_else(|| std::env::var(name).ok())
    })
}

/// Why a session could not open or a change could not be made; each says what to do.
#[derive(Debug, Error)]
pub enum SessionError {
    /// No home directory, or the settings could not be written.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The database could not be opened.
    #[error("cannot open {path}: {source}")]
    Database {
        /// The database file.
        path: std::path::PathBuf,
        /// Why.
        source: StoreError,
    },
    /// A Settings form that cannot be saved; nothing was written.
    #[error("{0}")]
    Invalid(String),
    /// A key the OS keyring would not take.
    #[error("cannot store {var} in the OS keyring: {source}")]
    Keyring {
        /// The key's variable.
        var: &'static str,
        /// Why.
        source: KeyringError,
    },
    /// A question that was not taken (the chat is replying, or gone).
    #[error(transparent)]
    Ask(#[from] crate::service::AskError),
    /// The service is gone, or its database failed.
    #[error(transparent)]
    Service(#[from] ServiceError),
    /// A store call failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A model could not be listed, downloaded, used or removed.
    #[error(transparent)]
    Models(#[from] crate::models::ModelsError),
}

/// The backend the settings choose, or one that says why it cannot answer (and that reason).
pub fn backend_for(
    config: &Config,
    env: &dyn Fn(&str) -> Option<String>,
) -> (Arc<dyn Backend>, Option<String>) {
    match llm::from_config(config, env) {
        Ok(backend) => (backend, None),
        Err(err) => {
            let reason = err.to_string();
            let unusable = Unusable::new(
                config.settings.backend,
                config.settings.model(),
                reason.clone(),
            );
            (Arc::new(unusable), Some(reason))
        }
    }
}

/// Settings, service and voice, together.
pub struct Session {
    service: Service,
    config: Mutex<Config>,
    /// What went wrong at start-up or since (a malformed settings file, a missing key, a
    /// shortcut that could not be taken), shown in the chat window until fixed.
    problem: Mutex<Option<String>>,
    /// How the push-to-talk shortcut comes in, as the desktop shell found it.
    shortcut_way: Mutex<Option<String>>,
    recall: Option<Arc<Recall>>,
    /// The user's MCP servers: kept running across settings changes that run the same servers.
    mcp: Mutex<Option<Arc<crate::mcp::Servers>>>,
    /// Servers replaced by a settings change, still held by a reply that was calling them: Quit
    /// stops them too.
    retired_mcp: Mutex<Vec<std::sync::Weak<crate::mcp::Servers>>>,
    voice: VoiceSupervisor,
    env: Env,
    /// A question to the OS keyring is on its way (it may never come back).
    keyring_asked: Arc<AtomicBool>,
    /// Model downloads.
    pulls: models::Pulls,
    /// Held while the settings file is written and what it says put in force, so that two
    /// changes (a saved form, a model put in use as its download ends) never interleave.
    settings_lock: tokio::sync::Mutex<()>,
    /// The runtime the session started on, which its background work runs on (a shell may
    /// call in from a thread of its own).
    runtime: tokio::runtime::Handle,
}

impl Session {
    /// Loads the settings (a bad file gives the defaults and is kept as the problem), opens the
    /// database and starts the service on the current tokio runtime. The voice loop starts only
    /// when asked ([`Session::start_voice`]), with parts from `parts`.
    pub fn open(env: Env, parts: PartsMaker) -> Result<Session, SessionError> {
        let (config, bad_settings) = Config::load_or_defaults(&*env)?;
        let path = config.database_path();
        let store = Store::open(
            &path,
            Duration::from_millis(config.settings.replies.busy_timeout_ms),
        )
        .map_err(|source| SessionError::Database { path, source })?;
        let (backend, bad_backend) = backend_at_start(&config, &env);
        let problem = bad_settings.map(|e| e.to_string()).or(bad_backend);
        if let Some(problem) = &problem {
            tracing::warn!("{problem}");
        }
        // The user's MCP servers start now, in the background, so that their tools are ready by
        // the first question (a reply waits for one still starting).
        let mcp = crate::mcp::Servers::of(&config.settings.mcp);
        if let Some(servers) = mcp.clone() {
            tools::start_in_background(servers);
        }
        let options = ServiceOptions::from_settings(&config.settings)
            .with_recall(&store, &config.model_dir())
            .with_mcp(mcp.clone());
        let recall = options.recall.clone();
        let service = Service::start(store, backend, options);
        let voice = VoiceSupervisor::new(service.clone(), parts);
        Ok(Session {
            service,
            config: Mutex::new(config),
            problem: Mutex::new(problem),
            shortcut_way: Mutex::new(None),
            recall,
            mcp: Mutex::new(mcp),
            retired_mcp: Mutex::new(Vec::new()),
            voice,
            env,
            keyring_asked: Arc::new(AtomicBool::new(false)),
            pulls: models::Pulls::default(),
            settings_lock: tokio::sync::Mutex::new(()),
            runtime: tokio::runtime::Handle::current(),
        })
    }

    /// The service's options for `settings`, with the MCP servers in force: the same servers
    /// while `[mcp]` runs the same ones (a changed approval put in force), new ones when it does
    /// not — each server whose program is unchanged carried over running, the others (the old
    /// stopping once their last call ends) started anew.
    fn options_for(&self, settings: &Settings) -> ServiceOptions {
        let mut mcp = self.mcp.lock().unwrap_or_else(|p| p.into_inner());
        let same = match &*mcp {
            Some(servers) => servers.runs_the_same(&settings.mcp),
            None => settings.mcp.servers.is_empty(),
        };
        if same {
            // Only approvals changed (or nothing): the servers go on.
            if let Some(servers) = &*mcp {
                servers.set_approvals(&settings.mcp);
            }
        } else {
            // Those that run the same program go on; the others start anew.
            let new = match &*mcp {
                Some(old) if !settings.mcp.servers.is_empty() => Some(Arc::new(
                    crate::mcp::Servers::succeeding(old, &settings.mcp),
                )),
                _ => crate::mcp::Servers::of(&settings.mcp),
            };
            if let Some(old) = std::mem::replace(&mut *mcp, new) {
                let mut retired = self.retired_mcp.lock().unwrap_or_else(|p| p.into_inner());
                retired.retain(|servers| servers.strong_count() > 0);
                retired.push(Arc::downgrade(&old));
            }
        }
        ServiceOptions::from_settings(settings).with_mcp(mcp.clone())
    }

    /// Stops the user's MCP servers, at once (Jarvis is quitting): a call in flight fails, and
    /// none starts again.
    pub async fn stop_tools(&self) {
        let mut all: Vec<Arc<crate::mcp::Servers>> = self
            .retired_mcp
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter_map(std::sync::Weak::upgrade)
            .collect();
        all.extend(self.mcp_servers());
        futures::future::join_all(all.iter().map(|servers| servers.stop_all())).await;
    }

    fn locked_config(&self) -> MutexGuard<'_, Config> {
        self.config.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn locked_problem(&self) -> MutexGuard<'_, Option<String>> {
        self.problem.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The conversation service.
    pub fn service(&self) -> &Service {
        &self.service
    }

    /// The voice supervisor.
    pub fn voice(&self) -> &VoiceSupervisor {
        &self.voice
    }

    /// The environment the session reads.
    pub fn env(&self) -> &Env {
        &self.env
    }

    /// The configuration in force.
    pub fn config(&self) -> Config {
        self.locked_config().clone()
    }

    /// The settings in force.
    pub fn settings(&self) -> Settings {
        self.locked_config().settings.clone()
    }

    /// What to fix, when something is wrong with the settings or the backend.
    pub fn problem(&self) -> Option<String> {
        self.locked_problem().clone()
    }

    /// Asks in `chat`, or in a new chat when none is given (the first question names it).
    pub async fn ask(&self, chat: Option<ChatId>, text: String) -> Result<Asked, SessionError> {
        if text.trim().is_empty() {
            return Err(SessionError::Invalid("the question is empty".into()));
        }
        let chat = match chat {
            Some(chat) => chat,
            None => self.service.new_chat(None).await?.id,
        };
        let reply = self.service.ask(chat, text).await?;
        Ok(Asked { chat, reply })
    }

    /// What the pages show at start.
    pub fn app_info(&self) -> AppInfo {
        let settings = self.settings();
        AppInfo {
            backend: settings.backend,
            model: settings.model().to_string(),
            theme: settings.desktop.theme,
            problem: self.problem(),
        }
    }

    /// Readies the backend for the next question in `chat` (none: a new chat) where that makes
    /// its first token come sooner (the local model: [`Service::warm`]).
    pub async fn warm(&self, chat: Option<ChatId>) {
        if let Err(err) = self.service.warm(chat).await {
            tracing::debug!(%err, "no warm-up");
        }
    }

    /// Keeps `problem` to show, unless one is shown already.
    pub fn report_problem(&self, problem: String) {
        self.locked_problem().get_or_insert(problem);
    }

    /// Says how the push-to-talk shortcut comes in (Settings shows it beside the key).
    pub fn set_shortcut_way(&self, way: String) {
        *self.shortcut_way.lock().unwrap_or_else(|p| p.into_inner()) = Some(way);
    }

    /// Starts (or replaces) the voice loop from the settings in force.
    pub async fn start_voice(&self) {
        self.voice.start(self.config()).await;
    }

    /// What the Settings page shows. The OS keyring is asked where a key is on a thread of its
    /// own: a locked keyring waits for the user to unlock it, one that hangs may never answer.
    /// When it has not answered within [`KEYRING_WAIT`] (or an earlier question to it is still
    /// waiting), the view shows the keys the environment holds and says the keyring did not
    /// answer; nothing waits for it.
    pub async fn view(&self) -> SettingsView {
        let mut view = self.view_of_settings().await;
        view.shortcut_way = self
            .shortcut_way
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        view
    }

    async fn view_of_settings(&self) -> SettingsView {
        let config = self.config();
        if !self.keyring_asked.swap(true, Ordering::SeqCst) {
            let asked = {
                let (config, env, flag) =
                    (config.clone(), self.env.clone(), self.keyring_asked.clone());
                ask_keyring(move || {
                    let view = SettingsView::of(&config, &*env);
                    flag.store(false, Ordering::SeqCst);
                    view
                })
            };
            match tokio::time::timeout(KEYRING_WAIT, asked).await {
                Ok(Ok(view)) => return view,
                Ok(Err(_)) => tracing::warn!("asking the OS keyring stopped"),
                Err(_) => tracing::warn!(
                    "the OS keyring did not answer within {} s",
                    KEYRING_WAIT.as_secs()
                ),
            }
        }
        SettingsView::without_keyring(&config, &*self.env)
    }

    /// Saves a Settings form: checks it (nothing is written when it is refused), stores a new
    /// key in the OS keyring, writes the settings file, and puts the change in force — a new
    /// backend for the next reply when the backend's settings, the key or a problem changed (a
    /// reply being written keeps its own), the voice loop restarted once the conversation is
    /// quiet when the speech model, threshold or microphone changed. Says what changed.
    pub async fn apply(&self, form: SettingsForm) -> Result<Applied, SessionError> {
        let changes = form.changes().map_err(SessionError::Invalid)?;
        // Only a voice newly named is checked: one that went missing since (a drive not
        // mounted) does not hold back every other change, and is said on the page.
        let config = self.config();
        if form.piper_voice.trim() != config.settings.voice.piper_voice.trim() {
            if let Some(problem) = form.piper_voice_problem(&config.model_dir()) {
                return Err(SessionError::Invalid(problem));
            }
        }
        let new_key = form.new_key().map(str::to_string);
        if new_key.is_none() {
            self.key_stays_with_its_host(&form).await?;
        }
        if let (Some(var), Some(key)) = (form.backend.key_var(), new_key.clone()) {
            let key = SecretString::from(key);
            // Bounded as the view's wait is: a locked keyring leaves the file as it was — and
            // the keyring too, if it answers after the save was given up.
            let save = Arc::new(std::sync::Mutex::new(KeySave::Waiting));
            let mut asked = {
                let save = save.clone();
                ask_keyring(move || {
                    let before = config::find_key(var, &|_| None).map(|(key, _)| key);
                    let stored = config::store_key(var, &key);
                    let mut save = save.lock().unwrap_or_else(|p| p.into_inner());
                    if stored.is_ok() && *save == KeySave::GivenUp {
                        let restored = match &before {
                            Some(old) => config::store_key(var, old),
                            None => config::delete_key(var).map(drop),
                        };
                        tracing::info!(
                            restored = restored.is_ok(),
                            "a key the keyring took after its save was given up was taken back"
                        );
                    }
                    *save = KeySave::Answered;
                    stored
                })
            };
            if tokio::time::timeout(KEYRING_WAIT, &mut asked)
                .await
                .is_err()
            {
                let mut state = save.lock().unwrap_or_else(|p| p.into_inner());
                if *state == KeySave::Waiting {
                    *state = KeySave::GivenUp;
                    return Err(SessionError::Keyring {
                        var,
                        source: config::KeyringError::NoAnswer(KEYRING_WAIT.as_secs()),
                    });
                }
                // It answered as the wait ran out: that answer stands (and is on its way).
            }
            asked
                .await
                .map_err(|_| SessionError::Invalid("storing the key stopped".into()))?
                .map_err(|source| SessionError::Keyring { var, source })?;
        }
        let _one = self.settings_lock.lock().await;
        self.start_at_login(form.start_at_login)?;
        let (old, config) = self.write(changes).await?;
        let new = &config.settings;
        let backend_changed = old.backend != new.backend
            || old.anthropic != new.anthropic
            || old.openai != new.openai
            || old.local != new.local
            || old.replies != new.replies
            || new_key.is_some()
            // A problem (a bad file, a missing key) may be fixed now: look again.
            || self.problem().is_some();
        let backend = if backend_changed {
            Some(self.backend_now(&config).await?)
        } else {
            None
        };
        let voice_changed = old.voice.speech_model != new.voice.speech_model
            || old.general.language != new.general.language
            || old.voice.wake_threshold != new.voice.wake_threshold
            || old.voice.input_device != new.voice.input_device
            || old.voice.tts != new.voice.tts
            || old.voice.piper_voice != new.voice.piper_voice
            || old.voice.tts_voice != new.voice.tts_voice
            || old.voice.tts_speed != new.voice.tts_speed;
        self.service
            .reconfigure(backend, self.options_for(new))
            .await?;
        if backend_changed {
            // A new backend starts cold: the next question's system prompt is made ready.
            self.warm(None).await;
        }
        if voice_changed {
            self.voice.restart_when_quiet(config.clone());
        }
        Ok(Applied {
            backend: backend_changed,
            voice: voice_changed,
            shortcut: (old.desktop.shortcut != new.desktop.shortcut)
                .then(|| new.desktop.shortcut.clone()),
            theme: new.desktop.theme,
        })
    }

    /// Writes the autostart entry starting this program hidden (`on`: again at each save, so
    /// it follows the program where it moved), or removes it, before the setting is saved:
    /// where the entry cannot be written, nothing is.
    fn start_at_login(&self, on: bool) -> Result<(), SessionError> {
        // Off and off before: an entry the user made by hand is theirs.
        if !on && !self.settings().desktop.start_at_login {
            return Ok(());
        }
        let exe = std::env::current_exe().map_err(|e| {
            SessionError::Invalid(format!("cannot tell where Jarvis is installed: {e}"))
        })?;
        // Replaced on disk while running (a package upgrade): the path it was started from.
        let exe = match exe.to_str().and_then(|p| p.strip_suffix(" (deleted)")) {
            Some(path) => std::path::PathBuf::from(path),
            None => exe,
        };
        autostart::set(&*self.env, on, &exe).map_err(|e| {
            SessionError::Invalid(format!(
                "cannot {} the autostart entry: {e}",
                if on { "write" } else { "remove" }
            ))
        })?;
        Ok(())
    }

    /// The backend `config` chooses, made now (its problem, if any, kept to show). Finding the
    /// key may wait on the OS keyring, never for long: the file is written, so the change is put
    /// in force now — on a backend that takes its key once a keyring that does not answer in
    /// time gives it, as at start.
    async fn backend_now(&self, config: &Config) -> Result<Arc<dyn Backend>, SessionError> {
        let (config, env) = (config.clone(), self.env.clone());
        let (backend, problem) =
            tokio::task::spawn_blocking(move || backend_at_start(&config, &env))
                .await
                .map_err(|_| SessionError::Invalid("finding the key stopped".into()))?;
        *self.locked_problem() = problem;
        Ok(backend)
    }

    /// A key given for one server is never sent to another unasked: a form that moves a keyed
    /// backend to a new scheme, host or port must give its key again.
    async fn key_stays_with_its_host(&self, form: &SettingsForm) -> Result<(), SessionError> {
        let settings = self.settings();
        let Some(var) = needed_key(&settings, form.backend) else {
            return Ok(());
        };
        let current = match form.backend {
            config::BackendKind::Anthropic => settings.anthropic.base_url,
            _ => settings.openai.base_url,
        };
        let Some(wanted) = form
            .base_url
            .as_deref()
            .map(str::trim)
            .filter(|u| !u.is_empty())
        else {
            return Ok(());
        };
        // Where a key goes: the scheme (https to http sends it in the clear), the host and the
        // port (another server on the same machine); a new path on the same server keeps it.
        let origin = |url: &str| {
            reqwest::Url::parse(url).ok().map(|u| {
                let origin = u.origin();
                (origin.is_tuple(), origin.ascii_serialization())
            })
        };
        if origin(&current) != origin(wanted) && self.has_key(var).await {
            return Err(SessionError::Invalid(format!(
                "the base URL now points to {}: enter the key for it again (a key is never sent to a new server unasked)",
                origin(wanted).map_or_else(|| wanted.to_string(), |(_, o)| o)
            )));
        }
        Ok(())
    }

    /// Whether `var` is set in the environment or the OS keyring, asked on a thread of its own.
    /// A keyring that does not answer within [`KEYRING_WAIT`] may hold one: true.
    async fn has_key(&self, var: &'static str) -> bool {
        let env = self.env.clone();
        tokio::time::timeout(
            KEYRING_WAIT,
            ask_keyring(move || config::find_key(var, &*env).is_some()),
        )
        .await
        .map_or(true, |found| found.unwrap_or(false))
    }

    /// "Use earlier conversations": saved, and in force from the next reply on.
    pub async fn set_earlier_conversations(&self, on: bool) -> Result<(), SessionError> {
        let changes = vec![(
            vec!["memory", "earlier_conversations"],
            Some(SettingValue::Bool(on)),
        )];
        let _one = self.settings_lock.lock().await;
        let (_, config) = self.write(changes).await?;
        self.service
            .reconfigure(None, self.options_for(&config.settings))
            .await?;
        Ok(())
    }

    /// Writes `changes` to the settings file and makes the result the settings in force;
    /// returns the settings before and the configuration after.
    async fn write(
        &self,
        changes: Vec<settings::Change>,
    ) -> Result<(Settings, Config), SessionError> {
        let path = self.locked_config().path.clone();
        let mut settings = tokio::task::spawn_blocking(move || {
            config::write_settings(&path, &settings::as_written(&changes))
        })
        .await
        .map_err(|e| SessionError::Invalid(format!("saving the settings stopped: {e}")))??;
        settings.apply_env(&*self.env)?;
        let mut config = self.locked_config();
        let old = std::mem::replace(&mut config.settings, settings);
        config.file_found = true;
        Ok((old, config.clone()))
    }

    /// What the model would be sent for `text` in `chat` (keys redacted): the same as `jarvis
    /// request`, with the running service's recall (its embedder stays loaded).
    pub async fn preview(
        &self,
        chat: Option<ChatId>,
        text: String,
    ) -> Result<serde_json::Value, SessionError> {
        let config = self.config();
        // An unsaved voice conversation is kept in memory, not in the database.
        let store = match chat {
            Some(chat) => self.service.store_of(chat).clone(),
            None => self.service.store().clone(),
        };
        let mut options =
            ServiceOptions::from_settings(&config.settings).with_mcp(self.mcp_servers());
        options.recall = self.recall.clone();
        let env = self.env.clone();
        Ok(
            blocking(move || crate::prompt::preview(&config, &store, &options, chat, &text, &*env))
                .await?,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_taken_out_of_the_environment_are_still_found_by_the_session() {
        let env = process_env_with(vec![("ANTHROPIC_API_KEY", "sk-ant-kept".into())]);
        assert_eq!(env("ANTHROPIC_API_KEY").as_deref(), Some("sk-ant-kept"));
        assert_eq!(env("OPENAI_API_KEY"), std::env::var("OPENAI_API_KEY").ok());
        assert_eq!(env("PATH"), std::env::var("PATH").ok());
    }
}
