//! The Settings page's data: what it is shown (never a key: only where one was found) and what it
//! saves, checked and turned into the settings file's changes.

use serde::{Deserialize, Serialize};

use crate::config::{
    self, BackendKind, Config, ListenMode, SettingValue, SpeechModel, Theme, TtsEngine,
};

/// What the Settings page shows.
#[derive(Debug, Clone, Serialize, ts_rs::TS)]
pub struct SettingsView {
    /// The backend that answers.
    pub backend: BackendKind,
    /// Anthropic's model and base URL as set now.
    pub anthropic: Endpoint,
    /// The OpenAI-compatible endpoint's model and base URL.
    pub openai: Endpoint,
    /// The local model (no base URL: Jarvis runs it).
    pub local: Endpoint,
    /// Where Anthropic's key was found ("environment", "OS keyring"), or nothing.
    pub anthropic_key: Option<String>,
    /// Where the OpenAI-compatible endpoint's key was found, or nothing.
    pub openai_key: Option<String>,
    /// Why the OS keyring was not asked (it did not answer in time): a key kept there is not
    /// shown.
    pub keyring_problem: Option<String>,
    /// The push-to-talk shortcut.
    pub shortcut: String,
    /// How the shortcut comes in on this desktop (grabbed on X11, bound by the desktop's portal
    /// on Wayland, or how to bind a key by hand), once the desktop shell has registered it.
    pub shortcut_way: Option<String>,
    /// Whether voice conversations are kept as chats.
    pub save_conversations: bool,
    /// Whether the wake word is listened for while the orb is hidden.
    pub wake_while_hidden: bool,
    /// "Use earlier conversations" (the Memory panel's switch).
    pub earlier_conversations: bool,
    /// How the orb listens.
    pub listen_mode: ListenMode,
    /// The speech-to-text model.
    pub speech_model: SpeechModel,
    /// The user's language.
    pub language: crate::config::Language,
    /// Which model hears that language and which voice speaks it, and whether the model is
    /// installed.
    pub language_note: String,
    /// The wake word's score threshold.
    pub wake_threshold: f32,
    /// The voice Jarvis speaks with.
    pub tts: TtsEngine,
    /// How fast it speaks, in words a minute.
    pub tts_speed: u32,
    /// Why Piper's voice cannot speak (its file is not installed), when it cannot: espeak-ng
    /// speaks instead.
    pub piper_missing: Option<String>,
    /// The Piper voice chosen (a `.onnx`; empty: the installed one).
    pub piper_voice: String,
    /// The microphone by name (empty: the system's default).
    pub input_device: String,
    /// The user's rules file (empty: the built-in rules).
    pub rules: String,
    /// Light, dark or as the system is.
    pub theme: Theme,
    /// Whether Jarvis starts, hidden in the tray, at login.
    pub start_at_login: bool,
    /// The file the settings are saved in.
    pub path: String,
}

/// A backend's model and where it is reached.
#[derive(Debug, Clone, Serialize, ts_rs::TS)]
pub struct Endpoint {
    /// The model's name (or the local model's file).
    pub model: String,
    /// The base URL of a remote backend.
    pub base_url: Option<String>,
}

impl SettingsView {
    /// The view of `config`, with where each key is found through `env` (or the OS keyring).
    pub fn of(config: &Config, env: &dyn Fn(&str) -> Option<String>) -> SettingsView {
        let key_source = |kind: BackendKind| {
            kind.key_var()
                .and_then(|var| config::find_key(var, env))
                .map(|(_, source)| source.to_string())
        };
        let s = &config.settings;
        SettingsView {
            backend: s.backend,
            anthropic: Endpoint {
                model: s.anthropic.model.clone(),
                base_url: Some(s.anthropic.base_url.clone()),
            },
            openai: Endpoint {
                model: s.openai.model.clone(),
                base_url: Some(s.openai.base_url.clone()),
            },
            local: Endpoint {
                model: s.local.model.clone(),
                base_url: None,
            },
            anthropic_key: key_source(BackendKind::Anthropic),
            openai_key: key_source(BackendKind::Openai),
            keyring_problem: None,
            shortcut: s.desktop.shortcut.clone(),
            shortcut_way: None,
            save_conversations: s.voice.save_conversations,
            wake_while_hidden: s.voice.wake_while_hidden,
            earlier_conversations: s.memory.earlier_conversations,
            listen_mode: s.voice.mode,
            speech_model: s.voice.speech_model,
            language: s.general.language,
            language_note: language_note(config),
            wake_threshold: s.voice.wake_threshold,
            tts: s.voice.tts,
            tts_speed: s.voice.tts_speed,
            piper_missing: {
                let file = crate::voice::models::chosen_piper_voice(&config.model_dir(), &s.voice);
                (!file.is_file()).then(|| {
                    if s.voice.piper_voice.trim().is_empty() {
                        format!(
                            "Piper's voice is not installed ({}; scripts/models voice installs it): espeak-ng speaks instead",
                            file.display()
                        )
                    } else {
                        format!(
                            "Piper's voice is not there ({}, [voice] piper_voice): espeak-ng speaks instead",
                            file.display()
                        )
                    }
                })
            },
            piper_voice: s.voice.piper_voice.clone(),
            input_device: s.voice.input_device.clone(),
            rules: s.profile.rules.clone(),
            theme: s.desktop.theme,
            start_at_login: s.desktop.start_at_login,
            path: config.path.display().to_string(),
        }
    }

    /// The view of `config` when the OS keyring does not answer: the keys the environment
    /// holds, and why the keyring's are not shown.
    pub fn without_keyring(config: &Config, env: &dyn Fn(&str) -> Option<String>) -> SettingsView {
        let env_only = |name: &str| match name {
            "JARVIS_KEYRING" => Some("off".to_string()),
            _ => env(name),
        };
        SettingsView {
            keyring_problem: Some(format!(
                "the OS keyring did not answer within {} s (is it locked?), so a key kept there is not shown",
                super::KEYRING_WAIT.as_secs()
            )),
            ..SettingsView::of(config, &env_only)
        }
    }
}

/// What the Settings page saves. `api_key` is write-only: stored in the keyring, never echoed.
#[derive(serde::Serialize, Debug, Clone, Deserialize, ts_rs::TS)]
pub struct SettingsForm {
    /// The backend that answers from the next reply on.
    pub backend: BackendKind,
    /// Its model.
    pub model: String,
    /// Its base URL (a remote backend's; empty keeps the one set).
    pub base_url: Option<String>,
    /// A new key for it (empty keeps the one found).
    pub api_key: Option<String>,
    /// The push-to-talk shortcut (the desktop checks its form).
    pub shortcut: String,
    /// Keep voice conversations as chats.
    pub save_conversations: bool,
    /// Listen for the wake word while the orb is hidden.
    pub wake_while_hidden: bool,
    /// The speech-to-text model.
    pub speech_model: SpeechModel,
    /// The user's language.
    pub language: crate::config::Language,
    /// The wake word's score threshold (0.05–0.99).
    pub wake_threshold: f32,
    /// The voice Jarvis speaks with.
    pub tts: TtsEngine,
    /// How fast it speaks, in words a minute (80–450).
    pub tts_speed: u32,
    /// The Piper voice: a voice's `.onnx`, its `.onnx.json` beside it (empty: the installed
    /// one).
    pub piper_voice: String,
    /// The microphone by name (empty: the system's default).
    pub input_device: String,
    /// The user's rules file (empty: the built-in rules).
    pub rules: String,
    /// Light, dark or as the system is.
    pub theme: Theme,
    /// Whether Jarvis starts, hidden in the tray, at login.
    pub start_at_login: bool,
}

/// The speaking speeds the form takes, in words a minute (what both voices can say).
const SPEED_MIN: u32 = 80;
const SPEED_MAX: u32 = 450;

/// One change to the settings file: the keys' path and the value (`None` removes it).
pub(crate) type Change = (Vec<&'static str>, Option<SettingValue>);

/// `changes` as [`config::write_settings`] takes them.
pub(crate) fn as_written(changes: &[Change]) -> Vec<(&[&'static str], Option<SettingValue>)> {
    changes
        .iter()
        .map(|(keys, value)| (keys.as_slice(), value.clone()))
        .collect()
}

/// Which model hears the language of the settings and which voice speaks it: "German: heard by
/// Whisper base (installed), spoken by espeak-ng's de voice".
fn language_note(config: &Config) -> String {
    let s = &config.settings;
    let language = s.general.language;
    let choice = crate::voice::models::speech_model_for(s.voice.speech_model, language);
    let file = crate::voice::models::speech_model_file(&config.model_dir(), choice);
    let model = choice.whisper_name();
    let installed = if file.is_file() {
        "installed".to_string()
    } else {
        format!("not installed: {}", choice.installed_by())
    };
    let voice = crate::voice::models::speaker_of(&config.model_dir(), &s.voice, language);
    format!(
        "{}: heard by Whisper {model} ({installed}), spoken by {voice}",
        language.name()
    )
}

impl SettingsForm {
    /// Why the Piper voice named cannot be used, where it cannot (`models`: the model folder a
    /// relative path is in): not there, or no voice configuration beside it that can be read.
    pub(crate) fn piper_voice_problem(&self, models: &std::path::Path) -> Option<String> {
        let named = self.piper_voice.trim();
        if named.is_empty() {
            return None;
        }
        let file = models.join(named);
        let config = crate::voice::piper::config_path(&file);
        if !file.is_file() {
            Some(format!("the Piper voice {} is not there", file.display()))
        } else if crate::voice::piper::language_of_voice(&file).is_none() {
            Some(format!(
                "the Piper voice {} has no voice configuration that can be read beside it ({}): \
                 a Piper voice is its .onnx with the .onnx.json beside it",
                file.display(),
                config.display()
            ))
        } else {
            None
        }
    }

    /// The key the form gives, if any (trimmed).
    pub(crate) fn new_key(&self) -> Option<&str> {
        self.api_key
            .as_deref()
            .map(str::trim)
            .filter(|k| !k.is_empty())
    }

    /// The settings file's changes, or why the form cannot be saved (nothing is written then).
    pub(crate) fn changes(&self) -> Result<Vec<Change>, String> {
        if self.model.trim().is_empty() {
            return Err("the model cannot be empty".into());
        }
        if self.shortcut.trim().is_empty() {
            return Err("the shortcut cannot be empty".into());
        }
        if !(0.05..=0.99).contains(&self.wake_threshold) {
            return Err("the wake word threshold must be between 0.05 and 0.99".into());
        }
        if !(SPEED_MIN..=SPEED_MAX).contains(&self.tts_speed) {
            return Err(format!(
                "the speaking speed must be between {SPEED_MIN} and {SPEED_MAX} words a minute"
            ));
        }
        // A rules file that cannot be read is refused here, with the reason.
        crate::prompt::rules_from(&self.rules)?;
        let section = self.backend.as_str();
        let text = |v: &str| Some(SettingValue::Text(v.trim().to_string()));
        let theme = match self.theme {
            Theme::System => "system",
            Theme::Light => "light",
            Theme::Dark => "dark",
        };
        let speech_model = match self.speech_model {
            SpeechModel::TinyEn => "tiny_en",
            SpeechModel::Base => "base",
        };
        let tts = match self.tts {
            TtsEngine::Piper => "piper",
            TtsEngine::Espeak => "espeak",
        };
        let mut changes: Vec<Change> = vec![
            (vec!["backend"], text(section)),
            (vec![section, "model"], text(&self.model)),
            (vec!["desktop", "shortcut"], text(&self.shortcut)),
            (vec!["desktop", "theme"], text(theme)),
            (
                vec!["desktop", "start_at_login"],
                Some(SettingValue::Bool(self.start_at_login)),
            ),
            (
                vec!["voice", "save_conversations"],
                Some(SettingValue::Bool(self.save_conversations)),
            ),
            (
                vec!["voice", "wake_while_hidden"],
                Some(SettingValue::Bool(self.wake_while_hidden)),
            ),
            (vec!["voice", "speech_model"], text(speech_model)),
            (vec!["general", "language"], text(self.language.key())),
            (
                vec!["voice", "wake_threshold"],
                Some(SettingValue::Float(f64::from(self.wake_threshold))),
            ),
            (vec!["voice", "tts"], text(tts)),
            (
                vec!["voice", "tts_speed"],
                Some(SettingValue::Int(i64::from(self.tts_speed))),
            ),
            (vec!["voice", "piper_voice"], text(&self.piper_voice)),
            (vec!["voice", "input_device"], text(&self.input_device)),
            (vec!["profile", "rules"], text(&self.rules)),
        ];
        if self.backend != BackendKind::Local {
            if let Some(url) = self
                .base_url
                .as_deref()
                .map(str::trim)
                .filter(|u| !u.is_empty())
            {
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err("the base URL must start with http:// or https://".into());
                }
                changes.push((vec![section, "base_url"], text(url)));
            }
        }
        Ok(changes)
    }
}

/// What the pages show of the app at start: the backend that answers and what is wrong, if anything.
#[derive(Debug, Clone, Serialize, ts_rs::TS)]
pub struct AppInfo {
    /// The backend that answers.
    pub backend: BackendKind,
    /// Its model.
    pub model: String,
    /// Light, dark or as the system is.
    pub theme: Theme,
    /// What to fix, when something is wrong with the settings or the backend.
    pub problem: Option<String>,
}

/// Where a question asked in the chat window went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct Asked {
    /// The chat (a new one when none was given).
    pub chat: crate::store::ChatId,
    /// Its reply.
    pub reply: crate::store::ReplyId,
}

/// What a saved form changed, so the shell knows what it must redo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// A new backend answers from the next reply on (the running one is kept otherwise: a local
    /// model stays loaded).
    pub backend: bool,
    /// The voice loop restarts once the voice conversation is quiet (a new speech model,
    /// threshold or microphone).
    pub voice: bool,
    /// The new push-to-talk shortcut, when it changed (the desktop registers it).
    pub shortcut: Option<String>,
    /// The theme in force.
    pub theme: Theme,
}
