//! The Settings page's data: what the page is shown (never a key: only where one was found) and
//! what it saves (to the settings file; a key to the OS keyring).

use anyhow::Context as _;
use jarvis::config::{self, BackendKind, SettingValue, SpeechModel, Theme};
use jarvis::service::ListenMode;
use jarvis::ServiceOptions;
use secrecy::SecretString;
use serde::{Deserialize, Serialize};
use tauri::{AppHandle, Emitter};

use crate::app::{backend_for, env, AppState};

/// What the Settings page shows.
#[derive(Serialize)]
pub struct SettingsView {
    backend: BackendKind,
    /// Per backend: its model and base URL as set now.
    anthropic: Endpoint,
    openai: Endpoint,
    local: Endpoint,
    /// Where each remote backend's key was found ("environment", "OS keyring"), or nothing.
    anthropic_key: Option<String>,
    openai_key: Option<String>,
    shortcut: String,
    save_conversations: bool,
    wake_while_hidden: bool,
    /// "Use earlier conversations" (the Memory panel's switch).
    earlier_conversations: bool,
    listen_mode: ListenMode,
    speech_model: SpeechModel,
    wake_threshold: f32,
    /// The microphone by name (empty: the system's default).
    input_device: String,
    /// The user's rules file (empty: the built-in rules).
    rules: String,
    theme: Theme,
    /// The file the settings are saved in.
    path: String,
}

#[derive(Serialize)]
struct Endpoint {
    model: String,
    base_url: Option<String>,
}

fn key_source(var: &str) -> Option<String> {
    config::find_key(var, &env).map(|(_, source)| source.to_string())
}

impl SettingsView {
    pub fn of(state: &AppState) -> SettingsView {
        let config = state.config.lock().unwrap_or_else(|e| e.into_inner());
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
            anthropic_key: BackendKind::Anthropic.key_var().and_then(key_source),
            openai_key: BackendKind::Openai.key_var().and_then(key_source),
            shortcut: s.desktop.shortcut.clone(),
            save_conversations: s.voice.save_conversations,
            wake_while_hidden: s.voice.wake_while_hidden,
            earlier_conversations: s.memory.earlier_conversations,
            listen_mode: s.voice.mode,
            speech_model: s.voice.speech_model,
            wake_threshold: s.voice.wake_threshold,
            input_device: s.voice.input_device.clone(),
            rules: s.profile.rules.clone(),
            theme: s.desktop.theme,
            path: config.path.display().to_string(),
        }
    }
}

/// What the Settings page saves. `api_key` is write-only: stored in the keyring, never echoed.
#[derive(Deserialize)]
pub struct SettingsForm {
    backend: BackendKind,
    model: String,
    base_url: Option<String>,
    api_key: Option<String>,
    shortcut: String,
    save_conversations: bool,
    wake_while_hidden: bool,
    speech_model: SpeechModel,
    wake_threshold: f32,
    input_device: String,
    rules: String,
    theme: Theme,
}

pub async fn save(app: &AppHandle, state: &AppState, form: SettingsForm) -> anyhow::Result<()> {
    let shortcut = form.shortcut.trim().to_string();
    crate::shortcut::parse(&shortcut)?;
    if form.model.trim().is_empty() {
        anyhow::bail!("the model cannot be empty");
    }
    let section = form.backend.as_str();
    let text = |v: &str| Some(SettingValue::Text(v.trim().to_string()));
    let theme = match form.theme {
        Theme::System => "system",
        Theme::Light => "light",
        Theme::Dark => "dark",
    };
    let mut changes: Vec<(Vec<&str>, Option<SettingValue>)> = vec![
        (vec!["backend"], text(section)),
        (vec![section, "model"], text(&form.model)),
        (vec!["desktop", "shortcut"], text(&shortcut)),
        (vec!["desktop", "theme"], text(theme)),
        (
            vec!["voice", "save_conversations"],
            Some(SettingValue::Bool(form.save_conversations)),
        ),
        (
            vec!["voice", "wake_while_hidden"],
            Some(SettingValue::Bool(form.wake_while_hidden)),
        ),
        (
            vec!["voice", "speech_model"],
            text(match form.speech_model {
                SpeechModel::TinyEn => "tiny_en",
                SpeechModel::Base => "base",
            }),
        ),
        (
            vec!["voice", "wake_threshold"],
            Some(SettingValue::Float(f64::from(form.wake_threshold))),
        ),
        (vec!["voice", "input_device"], text(&form.input_device)),
    ];
    // A rules file that cannot be read is refused here, with the reason.
    jarvis::prompt::rules_from(&form.rules).map_err(anyhow::Error::msg)?;
    changes.push((vec!["profile", "rules"], text(&form.rules)));
    if !(0.05..=0.99).contains(&form.wake_threshold) {
        anyhow::bail!("the wake word threshold must be between 0.05 and 0.99");
    }
    if form.backend != BackendKind::Local {
        if let Some(url) = form.base_url.as_deref().filter(|u| !u.trim().is_empty()) {
            let url = url.trim();
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                anyhow::bail!("the base URL must start with http:// or https://");
            }
            changes.push((vec![section, "base_url"], text(url)));
        }
    }
    if let (Some(var), Some(key)) = (
        form.backend.key_var(),
        form.api_key.as_deref().filter(|k| !k.trim().is_empty()),
    ) {
        config::store_key(var, &SecretString::from(key.trim().to_string()))
            .with_context(|| format!("cannot store {var} in the OS keyring"))?;
    }
    let (old, new_config) = write(state, changes).await?;
    let new = &new_config.settings;
    let backend_changed = old.backend != new.backend
        || old.anthropic != new.anthropic
        || old.openai != new.openai
        || old.local != new.local
        || old.replies != new.replies
        || form.api_key.is_some_and(|k| !k.trim().is_empty())
        // A problem (a bad file, a missing key) may be fixed now: look again.
        || state.problem.lock().unwrap_or_else(|e| e.into_inner()).is_some();
    // The next reply uses the new backend; one being written keeps its own. An unchanged
    // backend is kept (a local model stays loaded).
    let backend = if backend_changed {
        let (backend, problem) = backend_for(&new_config);
        *state.problem.lock().unwrap_or_else(|e| e.into_inner()) = problem;
        Some(backend)
    } else {
        None
    };
    let voice_changed = old.voice.speech_model != new.voice.speech_model
        || old.voice.wake_threshold != new.voice.wake_threshold
        || old.voice.input_device != new.voice.input_device;
    let old_shortcut = old.desktop.shortcut;
    let options = ServiceOptions::from_settings(&new_config.settings);
    state.service.reconfigure(backend, options).await?;
    if old_shortcut != shortcut {
        crate::shortcut::register(app, &shortcut)?;
    }
    if voice_changed {
        // The new speech model, threshold or microphone: a new voice loop, once the voice
        // conversation's reply is answered and its speech has ended — switching never cuts one.
        // Listening resumes as it was.
        let app = app.clone();
        let mut status = state.service.voice_status();
        tauri::async_runtime::spawn(async move {
            use std::sync::atomic::Ordering;
            use tauri::Manager;
            let asked = || app.state::<AppState>().voice_asked.load(Ordering::SeqCst);
            // Idle means no reply and no voice playing; it must hold a moment, since the last
            // sentence is spoken just after the reply's text ends — and nothing may have been
            // asked to be said meanwhile (a replay shows as speaking only once its first
            // sentence is made).
            loop {
                let idle = |s: &jarvis::service::VoiceStatus| s.replying.is_none() && !s.speaking;
                if status.wait_for(idle).await.is_err() {
                    return;
                }
                let before = asked();
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                if idle(&status.borrow_and_update()) && asked() == before {
                    break;
                }
            }
            crate::app::start_voice(&app).await;
        });
    }
    let _ = app.emit("theme-changed", new_config.settings.desktop.theme);
    Ok(())
}

/// Writes `changes` to the settings file and makes the result the app's settings; returns the
/// settings before and the configuration after.
async fn write(
    state: &AppState,
    changes: Vec<(Vec<&'static str>, Option<SettingValue>)>,
) -> anyhow::Result<(config::Settings, config::Config)> {
    let path = state
        .config
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .path
        .clone();
    let mut settings = tokio::task::spawn_blocking(move || {
        let borrowed: Vec<(&[&str], Option<SettingValue>)> = changes
            .iter()
            .map(|(keys, value)| (keys.as_slice(), value.clone()))
            .collect();
        config::write_settings(&path, &borrowed)
    })
    .await
    .context("saving the settings stopped")??;
    settings.apply_env(&env)?;
    let mut config = state.config.lock().unwrap_or_else(|e| e.into_inner());
    let old = std::mem::replace(&mut config.settings, settings);
    config.file_found = true;
    Ok((old, config.clone()))
}

/// The Memory panel's "Use earlier conversations": saved, and in force from the next reply on.
pub async fn set_earlier_conversations(state: &AppState, on: bool) -> anyhow::Result<()> {
    let (_, config) = write(
        state,
        vec![(
            vec!["memory", "earlier_conversations"],
            Some(SettingValue::Bool(on)),
        )],
    )
    .await?;
    state
        .service
        .reconfigure(None, ServiceOptions::from_settings(&config.settings))
        .await?;
    Ok(())
}
