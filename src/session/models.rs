//! The Models page and the chat window's offer of a better model: the catalog beside what this
//! machine holds, the models of servers already running here, one download at a time in the
//! background (it goes on while windows close or reload; its progress is watched), and
//! switching the model that answers — in force at once, as a saved Settings form is.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::config::{BackendKind, Config, SettingValue};
use crate::models::{self, Catalog, CatalogModel, ModelsError, Progress, PullOptions};

use super::{Session, SessionError};

/// A local model smaller than this is one to offer a better model beside (SmolLM2-135M, the
/// 0.5B models): right for trying Jarvis, not for conversation.
const SMALL_MODEL_BYTES: u64 = 600_000_000;

/// How often a window is told a download's progress (the latest each time).
pub const PROGRESS_EVERY: Duration = Duration::from_millis(100);

/// Whether a model file answers now, is installed, or is not here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum ModelState {
    /// The local backend answers with it.
    InUse,
    /// In the model folder.
    Installed,
    /// Not downloaded (or only partly).
    Absent,
}

/// A model the Models page lists: one of the catalog's, or a model file of the user's own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct ModelEntry {
    /// What download, use and remove take: the catalog's name, or the file's name.
    pub name: String,
    /// What the user reads.
    pub title: String,
    /// The file in the model folder.
    pub file: String,
    /// Its size in bytes.
    pub size: u64,
    /// Its licence (catalog models).
    pub licence: Option<String>,
    /// The memory it wants beside the app, in GiB (catalog models).
    pub memory_gb: Option<u32>,
    /// Whether it offers Jarvis's tools (catalog models).
    pub tools: Option<bool>,
    /// One sentence on it (catalog models).
    pub about: Option<String>,
    /// In use, installed or not here.
    pub state: ModelState,
    /// Bytes an unfinished download left: the next download goes on from there.
    pub partial: Option<u64>,
    /// The catalog's pick for this machine's memory.
    pub recommended: bool,
}

/// A model a server running here offers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct ServedModel {
    /// Its name on the server.
    pub name: String,
    /// Whether Jarvis answers with it now.
    pub in_use: bool,
}

/// A model server running on this machine (Ollama, LM Studio) and what it offers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct ServerModels {
    /// What the user reads.
    pub title: String,
    /// Its OpenAI-compatible base URL.
    pub base_url: String,
    /// Its models.
    pub models: Vec<ServedModel>,
}

/// What the Models page shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct ModelsView {
    /// The catalog's models, then the user's own model files.
    pub models: Vec<ModelEntry>,
    /// The servers found running here.
    pub servers: Vec<ServerModels>,
    /// This machine's memory in GiB, where known.
    pub memory_gb: Option<u64>,
    /// The model folder.
    pub folder: String,
    /// The download, running or last.
    pub pull: PullStatus,
}

/// The download, running or last.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum PullStatus {
    /// None since the app started.
    Idle,
    /// Bytes are coming.
    Downloading {
        /// The model's name.
        name: String,
        /// Its title.
        title: String,
        /// Bytes on disk (an earlier download's among them).
        done: u64,
        /// The file's size, where known.
        total: Option<u64>,
        /// This download's speed, once it can be told.
        bytes_per_second: Option<u64>,
        /// Seconds until the end at that speed.
        seconds_left: Option<u64>,
    },
    /// Every byte is here; size, header and sha256 are being checked.
    Checking {
        /// The model's name.
        name: String,
        /// Its title.
        title: String,
    },
    /// Installed (and put in use where that was asked).
    Done {
        /// The model's name.
        name: String,
        /// Its title.
        title: String,
        /// Whether Jarvis answers with it now.
        in_use: bool,
        /// Why it was not put in use as asked, where it was not (another model was chosen
        /// meanwhile, or the environment decides).
        not_used: Option<String>,
    },
    /// Stopped by the user; what came is kept.
    Stopped {
        /// The model's name.
        name: String,
        /// Its title.
        title: String,
        /// Bytes kept for the next download.
        kept: u64,
    },
    /// It failed, and why.
    Failed {
        /// The model's name.
        name: String,
        /// Its title.
        title: String,
        /// Why.
        reason: String,
    },
}

/// The session's downloads: at most one at a time.
pub(super) struct Pulls {
    status: watch::Sender<PullStatus>,
    /// The running download's stop, while one runs.
    running: Mutex<Option<(String, CancellationToken)>>,
}

impl Default for Pulls {
    fn default() -> Self {
        Pulls {
            status: watch::Sender::new(PullStatus::Idle),
            running: Mutex::new(None),
        }
    }
}

impl Pulls {
    fn running(&self) -> std::sync::MutexGuard<'_, Option<(String, CancellationToken)>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A catalog model as the page lists it.
fn catalog_entry(
    model: &CatalogModel,
    config: &Config,
    installed: &[models::Installed],
    recommended: bool,
) -> ModelEntry {
    let dir = config.model_dir();
    ModelEntry {
        name: model.name.clone(),
        title: model.title.clone(),
        file: model.file.clone(),
        size: model.size,
        licence: Some(model.licence.clone()),
        memory_gb: Some(model.memory_gb),
        tools: Some(model.tools),
        about: Some(model.about.clone()),
        state: state_of(config, &model.file, installed),
        partial: models::partial(&dir, &model.file),
        recommended,
    }
}

fn state_of(config: &Config, file: &str, installed: &[models::Installed]) -> ModelState {
    if config.settings.backend == BackendKind::Local
        && config.local_model_path() == config.model_dir().join(file)
    {
        ModelState::InUse
    } else if installed.iter().any(|i| i.file == file) {
        ModelState::Installed
    } else {
        ModelState::Absent
    }
}

impl Session {
    /// The catalog in force (the app's, or the one `JARVIS_MODEL_CATALOG` names).
    fn catalog(&self) -> Result<Catalog, SessionError> {
        Ok(Catalog::from_env(&*self.env)?)
    }

    /// What the Models page shows; the servers running here are asked what they offer (each
    /// briefly: one not running is simply not listed).
    pub async fn models_view(&self) -> Result<ModelsView, SessionError> {
        let config = self.config();
        let catalog = self.catalog()?;
        let dir = config.model_dir();
        let installed = {
            let (dir, catalog) = (dir.clone(), catalog.clone());
            tokio::task::spawn_blocking(move || models::installed(&dir, &catalog))
                .await
                .map_err(|e| SessionError::Invalid(format!("listing the models stopped: {e}")))??
        };
        let memory_gb = models::machine_memory_gb();
        let recommended = catalog.recommended(memory_gb).map(|m| m.name.clone());
        let mut entries: Vec<ModelEntry> = catalog
            .models()
            .iter()
            .map(|m| {
                let pick = recommended.as_deref() == Some(m.name.as_str());
                catalog_entry(m, &config, &installed, pick)
            })
            .collect();
        for own in installed.iter().filter(|i| i.catalog.is_none()) {
            entries.push(ModelEntry {
                name: own.file.clone(),
                title: own.file.clone(),
                file: own.file.clone(),
                size: own.size,
                licence: None,
                memory_gb: None,
                tools: None,
                about: None,
                state: state_of(&config, &own.file, &installed),
                partial: None,
                recommended: false,
            });
        }
        let servers = models::model_servers(self.env.as_ref()("JARVIS_MODEL_SERVERS").as_deref());
        let servers = models::running(&servers)
            .await
            .into_iter()
            .map(|(server, offered)| ServerModels {
                models: offered
                    .into_iter()
                    .map(|name| ServedModel {
                        in_use: server.answers_with(&config.settings, &name),
                        name,
                    })
                    .collect(),
                title: server.title,
                base_url: server.base_url,
            })
            .collect();
        Ok(ModelsView {
            models: entries,
            servers,
            memory_gb,
            folder: dir.display().to_string(),
            pull: self.pulls.status.borrow().clone(),
        })
    }

    /// The model the chat window offers, once: while the local backend answers with a small
    /// model (or none is installed) and no catalog model is installed, the catalog's pick for
    /// this machine's memory — unless the user said "Not now".
    pub fn model_offer(&self) -> Option<ModelEntry> {
        let config = self.config();
        let settings = &config.settings;
        if !settings.desktop.model_offer || settings.backend != BackendKind::Local {
            return None;
        }
        let small = std::fs::metadata(config.local_model_path())
            .map_or(true, |m| m.len() < SMALL_MODEL_BYTES);
        if !small {
            return None;
        }
        let catalog = self.catalog().ok()?;
        let installed = models::installed(&config.model_dir(), &catalog).ok()?;
        if installed.iter().any(|m| m.catalog.is_some()) {
            return None;
        }
        let model = catalog.recommended(models::machine_memory_gb())?;
        Some(catalog_entry(model, &config, &installed, true))
    }

    /// "Not now": the offer is not made again (`[desktop] model_offer = false`).
    pub async fn dismiss_model_offer(&self) -> Result<(), SessionError> {
        let _one = self.settings_lock.lock().await;
        self.write(vec![(
            vec!["desktop", "model_offer"],
            Some(SettingValue::Bool(false)),
        )])
        .await?;
        Ok(())
    }

    /// The download's progress: the latest status, then each change.
    pub fn watch_pull(&self) -> watch::Receiver<PullStatus> {
        self.pulls.status.subscribe()
    }

    /// Downloads the catalog model `name` in the background — resumed where an earlier
    /// download stopped, checked, then put in place — and, with `then_use`, makes it the model
    /// that answers. One download at a time; it runs on while windows close.
    pub fn pull_model(self: &Arc<Self>, name: &str, then_use: bool) -> Result<(), SessionError> {
        let catalog = self.catalog()?;
        let model = catalog
            .find(name)
            .cloned()
            .ok_or_else(|| ModelsError::Unknown(name.to_string()))?;
        let cancel = {
            let mut running = self.pulls.running();
            if let Some((other, _)) = running.as_ref() {
                return Err(SessionError::Invalid(format!(
                    "{other} is downloading; one download at a time"
                )));
            }
            let cancel = CancellationToken::new();
            *running = Some((model.title.clone(), cancel.clone()));
            cancel
        };
        let source = match models::source_for(&catalog, &model.name, None) {
            Ok(source) => source,
            Err(err) => {
                *self.pulls.running() = None;
                return Err(err.into());
            }
        };
        let dir = self.config().model_dir();
        // Told before this returns: a window that asks for the status next sees it running.
        self.pulls.status.send_replace(PullStatus::Downloading {
            name: model.name.clone(),
            title: model.title.clone(),
            done: models::partial(&dir, &source.file).unwrap_or(0),
            total: source.size,
            bytes_per_second: None,
            seconds_left: None,
        });
        // What answers now: a model chosen meanwhile is not replaced when this one is here.
        let before = answering(&self.settings());
        let session = self.clone();
        self.runtime.spawn(async move {
            let (name, title) = (model.name.clone(), model.title.clone());
            let status = &session.pulls.status;
            let installed = dir.join(&source.file);
            let pulled = if installed.is_file() {
                Ok(installed)
            } else {
                let mut pace = Pace::default();
                let mut told = |progress: Progress| {
                    status.send_replace(pace.status(progress, &name, &title));
                };
                models::pull(&source, &dir, &PullOptions::default(), &mut told, &cancel).await
            };
            let end = match pulled {
                Ok(_) if then_use => {
                    let used = if answering(&session.settings()) != before {
                        Err("another model was chosen meanwhile".to_string())
                    } else {
                        session.use_model(&name).await.map_err(|e| e.to_string())
                    };
                    PullStatus::Done {
                        name,
                        title,
                        in_use: used.is_ok(),
                        not_used: used.err(),
                    }
                }
                Ok(_) => PullStatus::Done {
                    name,
                    title,
                    in_use: false,
                    not_used: None,
                },
                Err(ModelsError::Cancelled { kept }) => PullStatus::Stopped { name, title, kept },
                Err(err) => PullStatus::Failed {
                    name,
                    title,
                    reason: err.to_string(),
                },
            };
            tracing::info!(?end, "a model download ended");
            // Told and freed together: a next download's status never comes before this end.
            let mut running = session.pulls.running();
            *running = None;
            status.send_replace(end);
        });
        Ok(())
    }

    /// Stops the running download (what came is kept); whether one was running.
    pub fn stop_pull(&self) -> bool {
        match self.pulls.running().as_ref() {
            Some((_, cancel)) => {
                cancel.cancel();
                true
            }
            None => false,
        }
    }

    /// Makes the installed model `name` (a catalog name or a file in the model folder) the one
    /// that answers: the local backend, in force from the next question.
    pub async fn use_model(&self, name: &str) -> Result<(), SessionError> {
        let catalog = self.catalog()?;
        let file = models::file_for(&catalog, name)?;
        let dir = self.config().model_dir();
        if !dir.join(&file).is_file() {
            return Err(SessionError::Invalid(format!(
                "{file} is not installed; download it first"
            )));
        }
        let changes = vec![
            (vec!["backend"], Some(SettingValue::Text("local".into()))),
            (
                vec!["local", "model"],
                Some(SettingValue::Text(file.clone())),
            ),
        ];
        self.switch(changes, |config| {
            config.settings.backend == BackendKind::Local
                && config.local_model_path() == dir.join(&file)
        })
        .await
    }

    /// Makes `model` of the server at `base_url` (one running here) the one that answers: the
    /// OpenAI-compatible backend, no key.
    pub async fn use_served(&self, base_url: &str, model: &str) -> Result<(), SessionError> {
        let servers = models::model_servers(self.env.as_ref()("JARVIS_MODEL_SERVERS").as_deref());
        let server = servers
            .iter()
            .find(|s| s.base_url == base_url.trim_end_matches('/'))
            .ok_or_else(|| {
                SessionError::Invalid(format!("no model server is known at {base_url}"))
            })?;
        let offered = models::offered(server).await?;
        if !offered.iter().any(|m| m == model) {
            return Err(SessionError::Invalid(format!(
                "{} does not offer `{model}`; it offers: {}",
                server.title,
                offered.join(", ")
            )));
        }
        let changes = models::settings_for(server, model)
            .into_iter()
            .map(|(keys, value)| (keys.to_vec(), value))
            .collect();
        self.switch(changes, |config| {
            server.answers_with(&config.settings, model)
        })
        .await
    }

    /// Removes the model `name` from the model folder (and what an unfinished download of it
    /// left); never the one that answers, nor one downloading.
    pub async fn remove_model(&self, name: &str) -> Result<(), SessionError> {
        let catalog = self.catalog()?;
        let file = models::file_for(&catalog, name)?;
        let config = self.config();
        if config.settings.backend == BackendKind::Local
            && config.local_model_path() == config.model_dir().join(&file)
        {
            return Err(SessionError::Invalid(format!(
                "{file} is the model Jarvis answers with; use another first"
            )));
        }
        let title = catalog.find(&file).map(|m| m.title.clone());
        if let Some((downloading, _)) = self.pulls.running().as_ref() {
            if Some(downloading) == title.as_ref() {
                return Err(SessionError::Invalid(format!(
                    "{downloading} is downloading; stop the download first"
                )));
            }
        }
        if !models::remove(&config.model_dir(), &file)? {
            return Err(SessionError::Invalid(format!("{file} is not installed")));
        }
        Ok(())
    }

    /// Writes `changes` (a backend's) and puts the backend they choose in force — unless the
    /// environment overrides them, so that Jarvis would not answer as `answers` wants: then
    /// nothing is written or changed.
    async fn switch(
        &self,
        changes: Vec<super::settings::Change>,
        answers: impl Fn(&Config) -> bool,
    ) -> Result<(), SessionError> {
        let _one = self.settings_lock.lock().await;
        if !answers(&self.in_force_after(&changes).await?) {
            return Err(overridden());
        }
        let (_, config) = self.write(changes).await?;
        let backend = self.backend_now(&config).await?;
        self.service
            .reconfigure(Some(backend), self.options_for(&config.settings))
            .await?;
        self.warm(None).await;
        Ok(())
    }

    /// The configuration in force were `changes` written (the environment applied over them):
    /// the file as the write would leave it, nothing written.
    async fn in_force_after(
        &self,
        changes: &[super::settings::Change],
    ) -> Result<Config, SessionError> {
        let mut config = self.config();
        let (path, changes) = (config.path.clone(), changes.to_vec());
        let edited = tokio::task::spawn_blocking(move || {
            crate::config::edited_settings(&path, &super::settings::as_written(&changes))
        })
        .await
        .map_err(|e| SessionError::Invalid(format!("reading the settings stopped: {e}")))??;
        config.settings = edited.1;
        config.settings.apply_env(&*self.env)?;
        Ok(config)
    }
}

/// What answers with `settings`: the backend, its model and where it is reached.
fn answering(settings: &crate::config::Settings) -> (BackendKind, String, String) {
    let url = match settings.backend {
        BackendKind::Anthropic => settings.anthropic.base_url.clone(),
        BackendKind::Openai => settings.openai.base_url.clone(),
        BackendKind::Local => String::new(),
    };
    (settings.backend, settings.model().to_string(), url)
}

fn overridden() -> SessionError {
    SessionError::Invalid(
        "not changed: the environment decides which model answers (JARVIS_BACKEND, \
         JARVIS_MODEL or OPENAI_BASE_URL is set); unset it to choose here"
            .into(),
    )
}

/// A download's speed and time left, from the bytes this download brought (not an earlier
/// one's). Every step is told: the watch keeps only the latest, and a watcher that looks less
/// often (a window, [`PROGRESS_EVERY`]) sees where it is when it looks — a server that goes
/// quiet leaves the last bytes shown, never an older count.
#[derive(Default)]
struct Pace {
    /// When this download's first bytes came, and how many were on disk then.
    start: Option<(Instant, u64)>,
}

impl Pace {
    fn status(&mut self, progress: Progress, name: &str, title: &str) -> PullStatus {
        let now = Instant::now();
        match progress {
            Progress::Checking => PullStatus::Checking {
                name: name.into(),
                title: title.into(),
            },
            Progress::Downloading { done, total, .. } => {
                let (started, from) = *self.start.get_or_insert((now, done));
                let elapsed = now.duration_since(started).as_secs_f64();
                let speed = (elapsed >= 0.5 && done > from)
                    .then(|| ((done - from) as f64 / elapsed) as u64)
                    .filter(|&s| s > 0);
                let seconds_left = speed
                    .zip(total)
                    .map(|(s, total)| total.saturating_sub(done).div_ceil(s));
                PullStatus::Downloading {
                    name: name.into(),
                    title: title.into(),
                    done,
                    total,
                    bytes_per_second: speed,
                    seconds_left,
                }
            }
        }
    }
}
