//! Settings: a TOML file, overridden by the environment; API keys from the environment or the OS keyring.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use secrecy::SecretString;
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Where settings and keys went wrong; each message says what to do.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The settings file exists but is not valid TOML or has a bad key or value.
    #[error("the settings file {path} is malformed: {message}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// The parser's message: line, column and key.
        message: String,
    },
    /// The settings file could not be read.
    #[error("cannot read the settings file {path}: {source}")]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The settings file could not be written.
    #[error("cannot write the settings file {path}: {source}")]
    Unwritable {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// An environment variable has a value Jarvis does not understand.
    #[error("{var}={value} is not valid: {expected}")]
    BadEnv {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// What is accepted.
        expected: &'static str,
    },
    /// No home directory, so no default data or config directory.
    #[error("cannot find a home directory for the data and settings; set JARVIS_DATA_DIR and JARVIS_CONFIG")]
    NoHome,
}

/// Which backend answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum BackendKind {
    /// Anthropic's Messages API.
    Anthropic,
    /// OpenAI or any OpenAI-compatible server.
    Openai,
    /// A GGUF model run on this machine's CPU by the `jarvis-llm` server that Jarvis starts.
    #[default]
    Local,
}

impl BackendKind {
    /// The settings and CLI name.
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Anthropic => "anthropic",
            BackendKind::Openai => "openai",
            BackendKind::Local => "local",
        }
    }

    /// The variable (in the environment, or as the OS keyring's user) holding this backend's API
    /// key; none for the local model. The one place the names are spelled.
    pub fn key_var(self) -> Option<&'static str> {
        match self {
            BackendKind::Anthropic => Some("ANTHROPIC_API_KEY"),
            BackendKind::Openai => Some("OPENAI_API_KEY"),
            BackendKind::Local => None,
        }
    }

    /// [`Self::key_var`] of a backend that has one.
    pub(crate) fn key_var_of(self) -> &'static str {
        self.key_var().unwrap_or_default()
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The Anthropic section.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct AnthropicSettings {
    /// Base URL; requests go to `{base_url}/v1/messages`.
    pub base_url: String,
    /// Model name.
    pub model: String,
    /// The `anthropic-version` header.
    pub version: String,
    /// Maximum tokens of a reply.
    pub max_tokens: u32,
}

impl Default for AnthropicSettings {
    fn default() -> Self {
        AnthropicSettings {
            base_url: "https://api.anthropic.com".into(),
            model: "claude-sonnet-4-5".into(),
            version: "2023-06-01".into(),
            max_tokens: 4096,
        }
    }
}

/// The `[openai]` section: OpenAI or any OpenAI-compatible server (Ollama, llama.cpp, LM Studio, vLLM).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct OpenAiSettings {
    /// Base URL including the version path; requests go to `{base_url}/chat/completions`.
    pub base_url: String,
    /// Model name.
    pub model: String,
    /// Maximum tokens of a reply.
    pub max_tokens: u32,
    /// Whether the server needs `OPENAI_API_KEY` (Ollama and llama.cpp do not).
    pub requires_key: bool,
    /// Sampling temperature; the server's default when unset.
    pub temperature: Option<f32>,
    /// Nucleus sampling; the server's default when unset.
    pub top_p: Option<f32>,
    /// A fixed seed, for servers that honour one.
    pub seed: Option<u32>,
    /// The server is Jarvis's own `jarvis-llm`, which is told which calls are housekeeping.
    #[serde(skip)]
    pub jarvis_server: bool,
}

impl OpenAiSettings {
    fn openai() -> Self {
        OpenAiSettings {
            base_url: "https://api.openai.com/v1".into(),
            model: "gpt-4o-mini".into(),
            max_tokens: 4096,
            requires_key: true,
            temperature: None,
            top_p: None,
            seed: None,
            jarvis_server: false,
        }
    }
}

impl Default for OpenAiSettings {
    fn default() -> Self {
        Self::openai()
    }
}

/// The `[local]` section: the model on this machine and how it samples.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct LocalSettings {
    /// A GGUF file: a path, or a file name in the model folder (`<data dir>/models`).
    pub model: String,
    /// The context window in tokens (at most the model's own); longer prompts lose their oldest turns.
    pub context: u32,
    /// CPU threads; 0 uses every core up to 8.
    pub threads: u32,
    /// Sampling temperature; 0 always picks the likeliest token. 0.2, as SmolLM2's own examples
    /// use: the 135M model strays into other languages and invented facts more often at 0.7.
    pub temperature: f32,
    /// Nucleus sampling.
    pub top_p: f32,
    /// A fixed seed makes answers repeatable; unset, each answer draws anew.
    pub seed: Option<u32>,
    /// Maximum tokens of a reply.
    pub max_tokens: u32,
    /// Whether the model is offered Jarvis's tools (remember and forget).
    pub tools: LocalTools,
}

/// Whether the local model is offered Jarvis's tools. Only a model whose own chat template
/// offers tools in the Hermes way (`<tool_call>`, as Qwen2.5's) can be; `auto` also leaves out
/// models under a billion parameters: Qwen2.5-Coder-0.5B writes the first call right but then
/// repeats it instead of answering.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LocalTools {
    /// When the template offers tools and the model has at least a billion parameters.
    #[default]
    Auto,
    /// Whenever the template offers tools.
    On,
    /// Never.
    Off,
}

impl LocalTools {
    /// The word the settings file and `jarvis-llm --tools` use.
    pub fn as_str(self) -> &'static str {
        match self {
            LocalTools::Auto => "auto",
            LocalTools::On => "on",
            LocalTools::Off => "off",
        }
    }
}

/// The default model's file name, installed by `scripts/models`.
pub const DEFAULT_MODEL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

impl Default for LocalSettings {
    fn default() -> Self {
        LocalSettings {
            model: DEFAULT_MODEL.into(),
            context: 4096,
            threads: 0,
            temperature: 0.2,
            top_p: 0.9,
            seed: None,
            max_tokens: 512,
            tools: LocalTools::Auto,
        }
    }
}

/// How long to wait for the network, in seconds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Timeouts {
    /// To open the connection.
    pub connect_secs: f64,
    /// From sending the request to the first token of the reply.
    pub first_token_secs: f64,
    /// Between two pieces of the stream once it flows.
    pub idle_secs: f64,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect_secs: 10.0,
            first_token_secs: 120.0,
            idle_secs: 60.0,
        }
    }
}

impl Timeouts {
    /// The connect timeout.
    pub fn connect(&self) -> Duration {
        secs(self.connect_secs)
    }
    /// The first-token timeout.
    pub fn first_token(&self) -> Duration {
        secs(self.first_token_secs)
    }
    /// The between-events timeout.
    pub fn idle(&self) -> Duration {
        secs(self.idle_secs)
    }
}

fn secs(s: f64) -> Duration {
    Duration::try_from_secs_f64(s).unwrap_or(Duration::from_secs(60))
}

/// Retries before the first token.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RetrySettings {
    /// How many times a 429, 529 / overloaded or 5xx is retried.
    pub max_retries: u32,
    /// The first backoff; it doubles each time.
    pub initial_backoff_ms: u64,
    /// A `retry-after` longer than this fails the reply at once instead of waiting.
    pub max_wait_secs: u64,
}

impl Default for RetrySettings {
    fn default() -> Self {
        RetrySettings {
            max_retries: 3,
            initial_backoff_ms: 1000,
            max_wait_secs: 60,
        }
    }
}

/// Replies and their storage.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ReplySettings {
    /// How many replies a remote backend writes at once (the local one: always one).
    pub max_concurrent: usize,
    /// Progress is stored at each sentence end or after this many milliseconds.
    pub progress_ms: u64,
    /// How long a locked database is waited for.
    pub busy_timeout_ms: u64,
    /// The model's context in tokens, for compacting long chats; 0: what the backend says
    /// (the local model's `context`; 200,000 for Anthropic; 128,000 for OpenAI-compatible).
    pub context_tokens: usize,
}

impl Default for ReplySettings {
    fn default() -> Self {
        ReplySettings {
            max_concurrent: 4,
            progress_ms: 250,
            busy_timeout_ms: 5000,
            context_tokens: 0,
        }
    }
}

/// Who the user is, for the profile the model sees.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(default, deny_unknown_fields)]
pub struct ProfileSettings {
    /// The user's name; the profile block is headed "About {name}" ("About the user" when empty).
    pub name: String,
    /// A Markdown file whose text replaces the built-in rules the model is given; empty: the
    /// built-in rules (`assets/rules.md`).
    pub rules: String,
}

/// How the orb listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ListenMode {
    /// The shortcut opens the microphone while it is held.
    #[default]
    PushToTalk,
    /// The voice activity detector decides.
    HandsFree,
    /// "Hey Jarvis" opens a conversation.
    Wake,
}

/// How a question was asked: typed, or spoken in one of the ways the orb listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Typed in a window or terminal.
    Typed,
    /// Spoken with the push-to-talk shortcut.
    PushToTalk,
    /// Spoken hands-free.
    HandsFree,
    /// Spoken after the wake word.
    Wake,
}

impl Mode {
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Mode::Typed => "typed",
            Mode::PushToTalk => "spoken, push to talk",
            Mode::HandsFree => "spoken, hands-free",
            Mode::Wake => "spoken, after the wake word",
        }
    }
}

impl From<ListenMode> for Mode {
    fn from(mode: ListenMode) -> Mode {
        match mode {
            ListenMode::PushToTalk => Mode::PushToTalk,
            ListenMode::HandsFree => Mode::HandsFree,
            ListenMode::Wake => Mode::Wake,
        }
    }
}

/// The voice conversation.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct VoiceSettings {
    /// How the orb listens: `push_to_talk`, `hands_free` or `wake`.
    pub mode: ListenMode,
    /// Whether the voice conversation is also saved as a chat.
    pub save_conversations: bool,
    /// In wake mode, whether "Hey Jarvis" is still listened for while the orb is hidden (the tray
    /// icon then shows the microphone on). Off: hiding the orb closes the microphone.
    pub wake_while_hidden: bool,
    /// The speech-to-text model: `tiny_en` (fast, English) or `base` (multilingual).
    pub speech_model: SpeechModel,
    /// How sure the wake word detector must be (0–1) that it heard "Hey Jarvis".
    pub wake_threshold: f32,
    /// The espeak-ng voice Jarvis speaks with.
    pub tts_voice: String,
    /// How fast it speaks, in words per minute.
    pub tts_speed: u32,
    /// The microphone by name; empty is the system's default.
    pub input_device: String,
    /// Threads for speech-to-text.
    pub threads: usize,
}

impl Default for VoiceSettings {
    fn default() -> Self {
        VoiceSettings {
            mode: ListenMode::PushToTalk,
            save_conversations: true,
            wake_while_hidden: false,
            speech_model: SpeechModel::TinyEn,
            wake_threshold: 0.5,
            tts_voice: "en-us".into(),
            tts_speed: 175,
            input_device: String::new(),
            threads: 2,
        }
    }
}

/// The speech-to-text model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum SpeechModel {
    /// Whisper tiny.en: English only, the fastest.
    #[default]
    TinyEn,
    /// Whisper base: multilingual, about twice as slow.
    Base,
}

impl SpeechModel {
    /// Its file in the model folder, as `scripts/models voice` installs it.
    pub fn file_name(self) -> &'static str {
        match self {
            SpeechModel::TinyEn => "ggml-tiny.en.bin",
            SpeechModel::Base => "ggml-base.bin",
        }
    }
}

/// The look of the windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Theme {
    /// Follows the desktop.
    #[default]
    System,
    /// Light.
    Light,
    /// Dark.
    Dark,
}

/// The desktop app.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct DesktopSettings {
    /// The global push-to-talk shortcut, e.g. `Ctrl+Alt+Space`.
    pub shortcut: String,
    /// `system`, `light` or `dark`.
    pub theme: Theme,
}

impl Default for DesktopSettings {
    fn default() -> Self {
        DesktopSettings {
            shortcut: "Ctrl+Alt+Space".into(),
            theme: Theme::System,
        }
    }
}

/// What Jarvis remembers besides the facts.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct MemorySettings {
    /// "Use earlier conversations": each chat is summarised after its answers, and the summaries
    /// of related chats are recalled into a new one. Off: no summary is written or sent.
    pub earlier_conversations: bool,
}

impl Default for MemorySettings {
    fn default() -> Self {
        MemorySettings {
            earlier_conversations: true,
        }
    }
}

/// Everything the settings file holds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// The backend that answers.
    pub backend: BackendKind,
    /// `[anthropic]`.
    pub anthropic: AnthropicSettings,
    /// `[openai]`.
    pub openai: OpenAiSettings,
    /// `[local]`.
    pub local: LocalSettings,
    /// `[timeouts]`.
    pub timeouts: Timeouts,
    /// `[retry]`.
    pub retry: RetrySettings,
    /// `[replies]`.
    pub replies: ReplySettings,
    /// `[profile]`.
    pub profile: ProfileSettings,
    /// `[memory]`.
    pub memory: MemorySettings,
    /// `[voice]`.
    pub voice: VoiceSettings,
    /// `[desktop]`.
    pub desktop: DesktopSettings,
}

impl Settings {
    /// Parses a settings file's text; `path` names the file in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Settings, ConfigError> {
        toml::from_str(text).map_err(|err| ConfigError::Malformed {
            path: path.to_path_buf(),
            message: err.to_string().trim_end().to_string(),
        })
    }

    /// The model of the selected backend.
    pub fn model(&self) -> &str {
        match self.backend {
            BackendKind::Anthropic => &self.anthropic.model,
            BackendKind::Openai => &self.openai.model,
            BackendKind::Local => &self.local.model,
        }
    }

    /// Applies `JARVIS_BACKEND`, `JARVIS_MODEL`, `ANTHROPIC_BASE_URL` and `OPENAI_BASE_URL`.
    pub fn apply_env(&mut self, env: &dyn Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
        if let Some(value) = env("JARVIS_BACKEND") {
            self.backend = match value.trim() {
                "anthropic" => BackendKind::Anthropic,
                "openai" => BackendKind::Openai,
                "local" => BackendKind::Local,
                _ => {
                    return Err(ConfigError::BadEnv {
                        var: "JARVIS_BACKEND",
                        value,
                        expected: "anthropic, openai or local",
                    })
                }
            };
        }
        if let Some(model) = env("JARVIS_MODEL").filter(|m| !m.trim().is_empty()) {
            match self.backend {
                BackendKind::Anthropic => self.anthropic.model = model,
                BackendKind::Openai => self.openai.model = model,
                BackendKind::Local => self.local.model = model,
            }
        }
        if let Some(url) = env("ANTHROPIC_BASE_URL").filter(|u| !u.trim().is_empty()) {
            self.anthropic.base_url = url;
        }
        if let Some(url) = env("OPENAI_BASE_URL").filter(|u| !u.trim().is_empty()) {
            self.openai.base_url = url;
        }
        Ok(())
    }
}

/// Where Jarvis keeps things, and the settings in force.
#[derive(Debug, Clone)]
pub struct Config {
    /// The settings file's path (it may not exist).
    pub path: PathBuf,
    /// Whether the file existed.
    pub file_found: bool,
    /// The data directory (the database lives here).
    pub data_dir: PathBuf,
    /// The settings, environment applied.
    pub settings: Settings,
}

impl Config {
    /// Loads from the real environment.
    pub fn load() -> Result<Config, ConfigError> {
        Self::load_with(&|name| std::env::var(name).ok())
    }

    /// Loads with `env` standing for the environment.
    pub fn load_with(env: &dyn Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let (mut config, text) = Self::locate(env)?;
        if let Some(text) = text {
            config.settings = Settings::parse(&text, &config.path)?;
        }
        config.settings.apply_env(env)?;
        Ok(config)
    }

    /// Loads, but a bad settings file or variable gives the defaults and the error, so a window
    /// can open and say what to fix. Only a missing home directory is an error.
    pub fn load_or_defaults(
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<(Config, Option<ConfigError>), ConfigError> {
        match Self::load_with(env) {
            Ok(config) => Ok((config, None)),
            Err(ConfigError::NoHome) => Err(ConfigError::NoHome),
            Err(err) => {
                let (mut config, _) = match Self::locate(env) {
                    Ok(found) => found,
                    Err(ConfigError::Unreadable { path, .. }) => (
                        Config {
                            path,
                            file_found: true,
                            data_dir: Self::data_dir(env)?,
                            settings: Settings::default(),
                        },
                        None,
                    ),
                    Err(other) => return Err(other),
                };
                config.settings = Settings::default();
                Ok((config, Some(err)))
            }
        }
    }

    /// The paths, and the settings file's text when it exists.
    fn locate(
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<(Config, Option<String>), ConfigError> {
        let path = match env("JARVIS_CONFIG") {
            Some(p) if !p.is_empty() => PathBuf::from(p),
            _ => directories::ProjectDirs::from("", "", "jarvis")
                .ok_or(ConfigError::NoHome)?
                .config_dir()
                .join("settings.toml"),
        };
        let data_dir = Self::data_dir(env)?;
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => Some(text),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => None,
            Err(source) => return Err(ConfigError::Unreadable { path, source }),
        };
        let config = Config {
            path,
            file_found: text.is_some(),
            data_dir,
            settings: Settings::default(),
        };
        Ok((config, text))
    }

    fn data_dir(env: &dyn Fn(&str) -> Option<String>) -> Result<PathBuf, ConfigError> {
        match env("JARVIS_DATA_DIR") {
            Some(p) if !p.is_empty() => Ok(PathBuf::from(p)),
            _ => Ok(directories::ProjectDirs::from("", "", "jarvis")
                .ok_or(ConfigError::NoHome)?
                .data_dir()
                .to_path_buf()),
        }
    }

    /// The database file.
    pub fn database_path(&self) -> PathBuf {
        self.data_dir.join("jarvis.db")
    }

    /// The folder `scripts/models` installs models into.
    pub fn model_dir(&self) -> PathBuf {
        self.data_dir.join("models")
    }

    /// The model folder the environment names, without reading any settings: what tests and
    /// benchmarks use to find the models `scripts/models` installed.
    pub fn installed_model_dir(
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<PathBuf, ConfigError> {
        Ok(Config::data_dir(env)?.join("models"))
    }

    /// The local model's file: `[local] model` as a path, or as a name in the model folder.
    pub fn local_model_path(&self) -> PathBuf {
        let model = Path::new(&self.settings.local.model);
        if model.is_absolute() || model.components().count() > 1 {
            model.to_path_buf()
        } else {
            self.model_dir().join(model)
        }
    }
}

/// A value for [`write_settings`]: a string, a bool or an integer.
#[derive(Debug, Clone, PartialEq)]
pub enum SettingValue {
    /// A string.
    Text(String),
    /// A boolean.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A number.
    Float(f64),
}

/// Changes keys of the settings file in place — its other keys, comments and layout stay — after
/// checking that the result is still valid settings; the file is replaced atomically. A key path is
/// `["backend"]` or `["openai", "model"]`; `None` removes the key.
pub fn write_settings(
    path: &Path,
    changes: &[(&[&str], Option<SettingValue>)],
) -> Result<Settings, ConfigError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(source) => {
            return Err(ConfigError::Unreadable {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let malformed = |message: String| ConfigError::Malformed {
        path: path.to_path_buf(),
        message,
    };
    let mut doc: toml_edit::DocumentMut = text
        .parse()
        .map_err(|e: toml_edit::TomlError| malformed(e.to_string().trim_end().to_string()))?;
    for (keys, value) in changes {
        let Some((last, tables)) = keys.split_last() else {
            continue;
        };
        let mut table = doc.as_table_mut();
        for name in tables {
            let entry = table
                .entry(name)
                .or_insert_with(|| toml_edit::Item::Table(toml_edit::Table::new()));
            table = entry
                .as_table_mut()
                .ok_or_else(|| malformed(format!("`{name}` is not a table")))?;
        }
        match value {
            None => {
                table.remove(last);
            }
            Some(value) => {
                let value = match value {
                    SettingValue::Text(t) => toml_edit::value(t.as_str()),
                    SettingValue::Bool(b) => toml_edit::value(*b),
                    SettingValue::Int(i) => toml_edit::value(*i),
                    SettingValue::Float(f) => toml_edit::value((*f * 1000.0).round() / 1000.0),
                };
                match table.get_mut(last) {
                    // In place, so the key's comments stay.
                    Some(item) => *item = value,
                    None => {
                        table.insert(last, value);
                    }
                }
            }
        }
    }
    let text = doc.to_string();
    let settings = Settings::parse(&text, path)?;
    let unwritable = |source: std::io::Error| ConfigError::Unwritable {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(unwritable)?;
    }
    let temp = path.with_extension("toml.tmp");
    std::fs::write(&temp, text).map_err(unwritable)?;
    std::fs::rename(&temp, path).map_err(unwritable)?;
    Ok(settings)
}

/// Where a key was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeySource {
    /// An environment variable.
    Environment,
    /// The OS keyring.
    Keyring,
}

impl fmt::Display for KeySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KeySource::Environment => "environment",
            KeySource::Keyring => "OS keyring",
        })
    }
}

/// The keyring service name keys are stored under (the entry's user is the variable name).
pub const KEYRING_SERVICE: &str = "jarvis";

/// Finds the key named `var` (e.g. `ANTHROPIC_API_KEY`): the environment first, then the OS keyring
/// unless `JARVIS_KEYRING=off`. The key is never logged.
pub fn find_key(
    var: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Option<(SecretString, KeySource)> {
    if let Some(value) = env(var).filter(|v| !v.trim().is_empty()) {
        return Some((
            SecretString::from(value.trim().to_string()),
            KeySource::Environment,
        ));
    }
    if env("JARVIS_KEYRING").as_deref() == Some("off") {
        return None;
    }
    let entry = match keyring::Entry::new(KEYRING_SERVICE, var) {
        Ok(entry) => entry,
        Err(err) => {
            tracing::debug!(%err, "the OS keyring is not available");
            return None;
        }
    };
    match entry.get_password() {
        Ok(value) if !value.trim().is_empty() => Some((
            SecretString::from(value.trim().to_string()),
            KeySource::Keyring,
        )),
        Ok(_) | Err(keyring::Error::NoEntry) => None,
        Err(err) => {
            tracing::debug!(%err, "the OS keyring could not be read");
            None
        }
    }
}

/// The keys Jarvis knows, by variable name.
pub fn key_vars() -> [&'static str; 2] {
    [
        BackendKind::Anthropic.key_var_of(),
        BackendKind::Openai.key_var_of(),
    ]
}

/// Why a key could not be stored or removed.
#[derive(Debug, Error)]
pub enum KeyringError {
    /// Not one of [`key_vars`].
    #[error("{0} is not a key Jarvis uses; use one of ANTHROPIC_API_KEY, OPENAI_API_KEY")]
    UnknownKey(String),
    /// An empty key.
    #[error("the key is empty")]
    Empty,
    /// The OS keyring refused or is not running.
    #[error("the OS keyring is not available: {0}")]
    Unavailable(String),
}

fn entry(var: &str) -> Result<keyring::Entry, KeyringError> {
    if !key_vars().contains(&var) {
        return Err(KeyringError::UnknownKey(var.to_string()));
    }
    keyring::Entry::new(KEYRING_SERVICE, var).map_err(|e| KeyringError::Unavailable(e.to_string()))
}

/// Stores a key in the OS keyring under service `jarvis`, user `var`.
pub fn store_key(var: &str, key: &SecretString) -> Result<(), KeyringError> {
    use secrecy::ExposeSecret;
    let key = key.expose_secret().trim();
    if key.is_empty() {
        return Err(KeyringError::Empty);
    }
    entry(var)?
        .set_password(key)
        .map_err(|e| KeyringError::Unavailable(e.to_string()))
}

/// Removes a key from the OS keyring; `false` when there was none.
pub fn delete_key(var: &str) -> Result<bool, KeyringError> {
    match entry(var)?.delete_credential() {
        Ok(()) => Ok(true),
        Err(keyring::Error::NoEntry) => Ok(false),
        Err(e) => Err(KeyringError::Unavailable(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saving_settings_changes_only_the_keys_given_and_never_writes_a_bad_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("settings.toml");
        let original = "# my settings\nbackend = \"local\"\n\n[local]\ntemperature = 0.5 # warm\n";
        std::fs::write(&path, original).unwrap();
        let saved = write_settings(
            &path,
            &[
                (&["backend"], Some(SettingValue::Text("openai".into()))),
                (
                    &["openai", "model"],
                    Some(SettingValue::Text("llama3".into())),
                ),
                (
                    &["voice", "save_conversations"],
                    Some(SettingValue::Bool(false)),
                ),
            ],
        )
        .unwrap();
        assert_eq!(saved.backend, BackendKind::Openai);
        assert_eq!(saved.openai.model, "llama3");
        assert!(!saved.voice.save_conversations);
        assert_eq!(saved.local.temperature, 0.5);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains("# my settings") && text.contains("# warm"),
            "{text}"
        );

        let err = write_settings(
            &path,
            &[(&["backend"], Some(SettingValue::Text("nope".into())))],
        )
        .unwrap_err();
        assert!(err.to_string().contains("backend"), "{err}");
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            text,
            "left as it was"
        );
    }

    #[test]
    fn a_malformed_file_names_the_file_line_and_key() {
        let text = "backend = \"openai\"\n[timeouts]\nidle_secs = \"soon\"\n";
        let err = Settings::parse(text, Path::new("/tmp/s.toml")).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("/tmp/s.toml"), "{msg}");
        assert!(msg.contains("line 3"), "{msg}");
        assert!(msg.contains("idle_secs"), "{msg}");
    }

    #[test]
    fn an_unknown_key_is_refused_not_ignored() {
        let err = Settings::parse("[openai]\nbase_ulr = \"x\"\n", Path::new("s.toml")).unwrap_err();
        assert!(err.to_string().contains("base_ulr"), "{err}");
    }

    #[test]
    fn the_environment_overrides_the_file() {
        let mut s = Settings::parse("backend = \"anthropic\"\n", Path::new("s.toml")).unwrap();
        let env = |k: &str| match k {
            "JARVIS_BACKEND" => Some("openai".to_string()),
            "JARVIS_MODEL" => Some("m1".to_string()),
            "OPENAI_BASE_URL" => Some("http://127.0.0.1:9/v1".to_string()),
            _ => None,
        };
        s.apply_env(&env).unwrap();
        assert_eq!(s.backend, BackendKind::Openai);
        assert_eq!(s.openai.model, "m1");
        assert_eq!(s.openai.base_url, "http://127.0.0.1:9/v1");
        let bad = |k: &str| (k == "JARVIS_BACKEND").then(|| "gpt".to_string());
        assert!(s
            .apply_env(&bad)
            .unwrap_err()
            .to_string()
            .contains("JARVIS_BACKEND"));
    }
}
