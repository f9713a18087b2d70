//! API keys: from the environment, else the OS keyring (service `jarvis`, user the variable's
//! name); stored and removed there by `jarvis key` and Settings.

use std::fmt;

use secrecy::SecretString;
use thiserror::Error;

use super::BackendKind;

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

/// Takes the API keys out of this process's environment and returns them, so that no program
/// Jarvis starts — a browser opening a link, the web views, a helper — inherits them. Call it
/// first thing in `main`, before any thread starts (the environment is not safe to change while
/// another thread may read it).
pub fn take_keys_from_env() -> Vec<(&'static str, String)> {
    let mut taken = Vec::new();
    for var in key_vars() {
        if let Ok(value) = std::env::var(var) {
            taken.push((var, value));
        }
        std::env::remove_var(var);
    }
    taken
}

/// The programs Jarvis runs (the local model server, espeak-ng) get no API key.
pub fn without_keys(cmd: &mut std::process::Command) -> &mut std::process::Command {
    for var in key_vars() {
        cmd.env_remove(var);
    }
    cmd
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
    /// The OS keyring did not answer in time (locked, its unlock prompt unanswered).
    #[error("the OS keyring did not answer within {0} s (is it locked?); nothing was saved: unlock it and save again")]
    NoAnswer(u64),
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
