//! `jarvis doctor`: what Jarvis finds on this machine — the settings, the database, the backend
//! and its key, the local model, the rules, the voice parts, the microphones and the way the
//! push-to-talk shortcut comes in — each as a line to show, and what the user must do, if
//! anything, for Jarvis to answer.

use std::time::Duration;

use crate::config::{self, BackendKind, Config, LocalTools};
use crate::store::Store;
use crate::{llm, voice};

/// One thing looked at, and what was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// What was looked at ("database", "key", "voice").
    pub topic: &'static str,
    /// What was found.
    pub text: String,
}

/// Everything looked at, in order, and what to do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Each finding.
    pub findings: Vec<Finding>,
    /// What keeps Jarvis from answering, each as what to do; empty when all is good. (The
    /// voice and the microphones are reported, never a reason: typing works without them.)
    pub to_do: Vec<String>,
}

impl Report {
    fn found(&mut self, topic: &'static str, text: impl Into<String>) {
        self.findings.push(Finding {
            topic,
            text: text.into(),
        });
    }

    fn must(&mut self, what: impl Into<String>) {
        self.to_do.push(what.into());
    }
}

/// Looks at everything (the network only to see whether a remote backend's server answers).
pub async fn diagnose(config: &Config, env: &(dyn Fn(&str) -> Option<String> + Sync)) -> Report {
    let mut report = Report::default();
    report.found(
        "settings file",
        format!(
            "{} ({})",
            config.path.display(),
            if config.file_found {
                "found"
            } else {
                "not found; using defaults"
            }
        ),
    );
    report.found("data directory", config.data_dir.display().to_string());
    database(config, &mut report);
    backend(config, env, &mut report).await;
    local_model(config, env, &mut report).await;
    rules(config, &mut report);
    voice_parts(config, &mut report);
    microphones(config, &mut report).await;
    report.found(
        "push to talk",
        super::shortcut::Way::find(env)
            .await
            .describe(config.settings.desktop.shortcut.trim()),
    );
    // Each MCP server, started to be seen (a tool the model cannot use is not a reason).
    let servers = crate::mcp::Servers::new(&config.settings.mcp);
    for line in servers.list_lines().await {
        report.found("mcp server", line.replacen('\t', ": ", 1));
    }
    servers.stop_all().await;
    report
}

fn database(config: &Config, report: &mut Report) {
    let busy = Duration::from_millis(config.settings.replies.busy_timeout_ms);
    let opened = Store::open(&config.database_path(), busy)
        .and_then(|st| Ok((st.schema_version()?, st.integrity_check()?)));
    match opened {
        Ok((version, integrity)) if integrity == "ok" => report.found(
            "database",
            format!(
                "{} (schema version {version}, integrity_check ok)",
                config.database_path().display()
            ),
        ),
        Ok((_, integrity)) => {
            let first = integrity.lines().next().unwrap_or_default();
            report.found(
                "database",
                format!(
                    "{} is damaged: integrity_check says {first:?}",
                    config.database_path().display()
                ),
            );
            report.must(
                "the database is damaged: quit Jarvis and restore a backup, or move the file                  aside (keep it) to start afresh",
            );
        }
        Err(err) => {
            report.found("database", err.to_string());
            report.must("the database cannot be opened (see above)");
        }
    }
}

async fn backend(config: &Config, env: &dyn Fn(&str) -> Option<String>, report: &mut Report) {
    let s = &config.settings;
    let (base_url, needs_key) = match s.backend {
        BackendKind::Anthropic => (s.anthropic.base_url.as_str(), true),
        BackendKind::Openai => (s.openai.base_url.as_str(), s.openai.requires_key),
        BackendKind::Local => {
            report.found("backend", "local (no key needed)");
            return;
        }
    };
    report.found(
        "backend",
        format!("{} (model {}, {base_url})", s.backend, s.model()),
    );
    let key_var = s.backend.key_var().unwrap_or_default();
    if needs_key {
        match config::find_key(key_var, env) {
            Some((_, source)) => report.found("key", format!("{key_var} present ({source})")),
            None => {
                report.found("key", format!("{key_var} missing"));
                report.must(format!(
                    "set {key_var}, store it in the OS keyring (`jarvis key set {key_var}`), or choose another backend with JARVIS_BACKEND"
                ));
            }
        }
    } else {
        report.found("key", "not needed");
    }
    match reachable(base_url).await {
        Ok(()) => report.found("server", "reachable"),
        Err(reason) => {
            report.found("server", format!("not reachable ({reason})"));
            report.must(format!("check the network and the base URL {base_url}"));
        }
    }
}

/// The local model is reported whichever backend is selected: it is the offline fallback.
async fn local_model(config: &Config, env: &dyn Fn(&str) -> Option<String>, report: &mut Report) {
    let s = &config.settings;
    let model = config.local_model_path();
    match llm::local::describe(&model, s.local.tools, env).await {
        Ok(info) => {
            report.found(
                "local model",
                format!(
                    "{} ({:.1} MB, {}, {}, {} parameters, context {})",
                    info.path,
                    info.size as f64 / 1e6,
                    info.architecture,
                    info.quantization,
                    human_count(info.parameters),
                    info.context_length
                ),
            );
            let tools = match (info.tools, info.tools_offered, s.local.tools) {
                (_, true, _) => "offered (remember and forget)",
                (false, _, _) => "none (its chat template has no tool format)",
                (true, false, LocalTools::Off) => "off in settings",
                (true, false, _) => {
                    "not offered: under a billion parameters (`[local] tools = \"on\"` offers them)"
                }
            };
            report.found("local model tools", tools);
            if s.backend == BackendKind::Local && info.parameters < 1_000_000_000 {
                better_model(config, &info.path, info.parameters, report);
            }
        }
        Err(reason) => {
            report.found("local model", reason.to_string());
            if s.backend == BackendKind::Local {
                report.must(format!(
                    "install the local model: {}",
                    llm::local::INSTALL_HINT
                ));
            }
        }
    }
}

/// A small model answers (SmolLM2-135M, the one the app starts with) and no catalog model is
/// installed: the one for this machine's memory, and the two commands that get it.
fn better_model(config: &Config, path: &str, parameters: u64, report: &mut Report) {
    let catalog = crate::models::Catalog::builtin();
    let installed = crate::models::installed(&config.model_dir(), &catalog).unwrap_or_default();
    if installed.iter().any(|m| m.catalog.is_some()) {
        return;
    }
    let memory = crate::models::machine_memory_gb();
    let Some(better) = catalog.recommended(memory) else {
        report.found(
            "a better model",
            format!(
                "none of `jarvis models list` fits this machine's {} GiB of memory; a server \
                 elsewhere (the openai or anthropic backend) answers better",
                memory.unwrap_or_default()
            ),
        );
        return;
    };
    let name = std::path::Path::new(path)
        .file_name()
        .map_or(path.into(), |n| n.to_string_lossy());
    report.found(
        "a better model",
        format!(
            "{name} has {} parameters: right for trying Jarvis, not for conversation; \
             `jarvis models pull {}` ({}, {:.1} GB, {}) suits this machine's memory, then \
             `jarvis models use {}`",
            human_count(parameters),
            better.name,
            better.title,
            better.size as f64 / 1e9,
            better.licence,
            better.name
        ),
    );
}

fn rules(config: &Config, report: &mut Report) {
    let rules = &config.settings.profile.rules;
    match crate::prompt::rules_from(rules) {
        Ok(_) if rules.trim().is_empty() => report.found("rules", "built-in"),
        Ok(_) => report.found("rules", rules.trim()),
        Err(err) => {
            report.found("rules", format!("{err}; the built-in rules are used"));
            report.must(
                "fix [profile] rules in the settings file, or empty it for the built-in rules",
            );
        }
    }
}

fn voice_parts(config: &Config, report: &mut Report) {
    let s = &config.settings.voice;
    let models = config.model_dir();
    let language = config.settings.general.language;
    let choice = voice::models::speech_model_for(s.speech_model, language);
    let speech = voice::models::speech_model_file(&models, choice);
    report.found(
        "language",
        format!(
            "{} ([general] language = {}): heard by Whisper {} ({}), spoken by {}; the wake word \
             stays \"Hey Jarvis\"",
            language.name(),
            match language {
                crate::config::Language::Auto => "auto, from the locale",
                other => other.key(),
            },
            choice.whisper_name(),
            if speech.is_file() {
                "installed".to_string()
            } else {
                format!(
                    "missing: run {} ({})",
                    choice.installed_by(),
                    speech.display()
                )
            },
            voice::models::speaker_of(&models, s, language)
        ),
    );
    let wake = voice::models::wake_factory(&models);
    let espeak = voice::Espeak::new(&s.tts_voice, s.tts_speed).available();
    report.found(
        "speaking voice",
        speaking_voice(&models, s, language, espeak),
    );
    report.found(
        "noise",
        match voice::models::load_silero(&models) {
            Ok(_) => format!(
                "judged by the speech detector ({}) before whisper",
                models.join(voice::silero::DETECTOR_FILE).display()
            ),
            Err(err) => format!(
                "judged by whisper alone, because the speech detector is not available: {err}"
            ),
        },
    );
    report.found(
        "end of turn",
        match voice::models::load_smart_turn(&models) {
            Ok(_) => format!(
                "a pause is judged by its words and the end-of-turn model ({})",
                models.join(voice::turn::TURN_FILE).display()
            ),
            Err(err) => format!(
                "a pause is judged by its words alone (a longer quiet ends a turn), because the \
                 end-of-turn model is not available: {err}"
            ),
        },
    );
    report.found(
        "voice",
        format!(
            "speech model {} ({}); wake word {}; espeak-ng {}",
            speech.display(),
            if !speech.is_file() {
                format!("missing: run {}", choice.installed_by())
            } else if speech.file_name().and_then(|n| n.to_str()) == choice.earlier_file_name() {
                "installed, the earlier half-precision file: scripts/models voice installs the \
                 8-bit one, 34 MB lighter in memory and faster"
                    .to_string()
            } else {
                "installed".to_string()
            },
            match &wake {
                Ok(_) => "ready".to_string(),
                Err(err) => err.to_string(),
            },
            if espeak {
                "found"
            } else {
                "missing: apt-get install espeak-ng"
            }
        ),
    );
}

async fn microphones(config: &Config, report: &mut Report) {
    let wanted = config.settings.voice.input_device.trim().to_string();
    let listed = match tokio::task::spawn_blocking(voice::device::microphones).await {
        Ok(listed) => listed.map_err(|e| e.to_string()),
        Err(stopped) => Err(stopped.to_string()),
    };
    let found = match listed {
        Ok(found) => found,
        Err(why) => {
            report.found(
                "microphone",
                format!("cannot list the input devices ({why})"),
            );
            return;
        }
    };
    let chosen = match (wanted.as_str(), &found.default) {
        ("", Some(default)) => format!("the system default ({default})"),
        ("", None) => "the system default (there is none)".to_string(),
        (name, _) if found.names.iter().any(|n| n == name) => format!("{name:?}"),
        (name, _) => format!("{name:?}, not connected: choose another in Settings"),
    };
    let names = if found.names.is_empty() {
        "none".to_string()
    } else {
        found.names.join(", ")
    };
    report.found("microphone", format!("{chosen}; found: {names}"));
    let heard = match wanted.as_str() {
        "" => found.default.clone(),
        name => Some(name.to_string()),
    };
    let rooms = voice::echo::Rooms::kept_in(config.data_dir.join(voice::echo::ROOMS_FILE));
    report.found("echo cancellation", echo_line(heard.as_deref(), &rooms));
}

/// Who takes Jarvis's own voice out of what the microphone `heard` hears, and what the canceller
/// remembers of it.
fn echo_line(heard: Option<&str>, rooms: &voice::echo::Rooms) -> String {
    match heard {
        Some(name) if voice::echo::is_echo_cancelled_source(name) => format!(
            "by the sound server: {name:?} is its echo-cancelled source, so Jarvis does not cancel again"
        ),
        Some(name) if rooms.echoes(name) => format!(
            "by Jarvis (WebRTC AEC3, with what its speaker plays as the reference); it remembers that its voice comes back into {name:?} ({}), so it cancels from an answer's first word",
            voice::echo::ROOMS_FILE
        ),
        _ => "by Jarvis (WebRTC AEC3, with what its speaker plays as the reference)".to_string(),
    }
}

/// 134515008 → "135M".
fn human_count(n: u64) -> String {
    match n {
        n if n >= 1_000_000_000 => format!("{:.1}B", n as f64 / 1e9),
        n if n >= 1_000_000 => format!("{:.0}M", n as f64 / 1e6),
        n => n.to_string(),
    }
}

/// Whether a TCP connection to the URL's host and port opens within two seconds.
async fn reachable(url: &str) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("bad URL: {e}"))?;
    let host = parsed.host_str().ok_or("no host in the URL")?.to_string();
    let port = parsed.port_or_known_default().ok_or("no port in the URL")?;
    match tokio::time::timeout(
        Duration::from_secs(2),
        tokio::net::TcpStream::connect((host.as_str(), port)),
    )
    .await
    {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(err)) => Err(err.to_string()),
        Err(_) => Err("timed out".into()),
    }
}

/// Who speaks the replies in `language`, and why espeak-ng does where Piper was asked for.
fn speaking_voice(
    models: &std::path::Path,
    s: &crate::config::VoiceSettings,
    language: crate::config::Language,
    espeak: bool,
) -> String {
    let espeak_state = if espeak {
        "espeak-ng"
    } else {
        "nobody: espeak-ng is missing (apt-get install espeak-ng)"
    };
    match s.tts {
        crate::config::TtsEngine::Espeak => format!("{espeak_state} ([voice] tts = \"espeak\")"),
        crate::config::TtsEngine::Piper => match voice::models::synthesizer_in(models, s, language)
        {
            (_, None) => format!(
                "Piper ({})",
                voice::models::chosen_piper_voice(models, s).display()
            ),
            (_, Some(err)) => {
                let hint = match &err {
                    voice::VoiceError::ModelMissing { what, .. }
                    | voice::VoiceError::ModelBroken { what, .. }
                        if s.piper_voice.trim().is_empty() || *what == "ONNX Runtime" =>
                    {
                        " (scripts/models voice installs it)"
                    }
                    _ => "",
                };
                format!("{espeak_state}, because Piper's voice is not available: {err}{hint}")
            }
        },
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn doctor_says_who_cancels_the_echo() {
        let rooms = crate::voice::echo::Rooms::in_memory();
        let line = |heard| super::echo_line(heard, &rooms);
        assert!(line(Some("Echo-Cancel Source")).contains("does not cancel again"));
        assert!(line(Some("Built-in Audio")).starts_with("by Jarvis"));
        assert!(!line(Some("Built-in Audio")).contains("remembers"));
        assert!(line(None).starts_with("by Jarvis"));
        rooms.learned("Built-in Audio", true);
        assert!(line(Some("Built-in Audio")).contains("remembers that its voice comes back"));
        assert!(!line(Some("USB Microphone")).contains("remembers"));
    }

    use super::*;

    #[test]
    fn counts_read_as_people_say_them() {
        assert_eq!(human_count(134_515_008), "135M");
        assert_eq!(human_count(1_543_714_304), "1.5B");
        assert_eq!(human_count(999), "999");
    }
}
