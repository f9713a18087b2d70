//! What the environment changes in the settings: the backend, its model and base URLs.

use super::{BackendKind, ConfigError, Settings};

impl Settings {
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
