//! Settings: a TOML file, overridden by the environment; API keys from the environment or the OS
//! keyring. `settings` holds what the file says, `env` what the environment changes, `keyring`
//! where keys come from, `write` how the file is changed in place; this module finds the files
//! and loads them.

use std::path::{Path, PathBuf};

use thiserror::Error;

mod env;
mod keyring;
mod settings;
#[cfg(feature = "test-support")]
pub mod test_bus;
mod write;

pub use self::keyring::{
    delete_key, find_key, key_vars, store_key, take_keys_from_env, without_keys, KeySource,
    KeyringError, KEYRING_SERVICE,
};
pub use self::settings::*;
pub use self::write::{edited_settings, replace_file, write_settings, SettingValue};

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
    /// The settings file is empty: most likely a write cut short, never "all defaults".
    #[error("the settings file {path} is empty (a save may have been cut short); restore it, or delete it to use the defaults")]
    Empty {
        /// The file.
        path: PathBuf,
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
            if text.trim().is_empty() {
                return Err(ConfigError::Empty { path: config.path });
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_settings_file_is_an_error_not_all_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("settings.toml");
        let file = path.display().to_string();
        let data = dir.path().display().to_string();
        let env = move |name: &str| match name {
            "JARVIS_CONFIG" => Some(file.clone()),
            "JARVIS_DATA_DIR" => Some(data.clone()),
            _ => None,
        };
        for text in ["", "  \n\n"] {
            std::fs::write(&path, text).unwrap();
            let err = Config::load_with(&env).unwrap_err();
            assert!(matches!(err, ConfigError::Empty { .. }), "{err}");
            assert!(err.to_string().contains("is empty"), "{err}");
        }
        // Comments alone are a file that sets nothing: the defaults.
        std::fs::write(&path, "# nothing set yet\n").unwrap();
        assert_eq!(
            Config::load_with(&env).unwrap().settings,
            Settings::default()
        );
    }

    #[test]
    fn a_timeout_that_is_not_a_positive_number_of_seconds_is_refused_by_name() {
        // (The fuzz target found `idle_secs = nan` read as "60 s" without a word.)
        let path = std::path::Path::new("/home/u/.config/jarvis/settings.toml");
        for (text, shown) in [
            ("[timeouts]\nidle_secs = nan", "idle_secs = NaN"),
            ("[timeouts]\nconnect_secs = -1", "connect_secs = -1"),
            (
                "[timeouts]\nfirst_token_secs = inf",
                "first_token_secs = inf",
            ),
            ("[timeouts]\nidle_secs = 0.0", "idle_secs = 0"),
        ] {
            let err = Settings::parse(text, path).unwrap_err().to_string();
            assert!(
                err.contains(shown) && err.contains("settings.toml"),
                "{err}"
            );
        }
        assert!(Settings::parse("[timeouts]\nidle_secs = 0.5", path).is_ok());
    }

    #[test]
    fn saving_settings_uses_a_temporary_file_of_its_own_and_leaves_none_behind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("settings.toml");
        // What a fixed temporary name would meet: another save's leftover (here, one that
        // cannot even be overwritten).
        std::fs::create_dir(dir.path().join("settings.toml.tmp")).unwrap();
        write_settings(
            &path,
            &[(&["backend"], Some(SettingValue::Text("openai".into())))],
        )
        .unwrap();
        assert!(std::fs::read_to_string(&path).unwrap().contains("openai"));
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n != "settings.toml" && n != "settings.toml.tmp")
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

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
    fn the_mcp_servers_are_written_as_tables_keeping_the_rest_of_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("settings.toml");
        let original = "# mine\n[mcp]\ncall_timeout_secs = 10 # short\n\n[[mcp.servers]]\nname = \"old\"\ncommand = \"x\"\n";
        std::fs::write(&path, original).unwrap();
        let servers = vec![
            McpServerSettings {
                name: "files".into(),
                command: "npx".into(),
                args: vec!["-y".into(), "/home/ada/My \"Documents\"".into()],
                ..McpServerSettings::default()
            },
            McpServerSettings {
                name: "calendar".into(),
                command: "/opt/cal".into(),
                env: [("TOKEN_FILE".to_string(), "/run/t".to_string())].into(),
                approve: Approve::Always,
                ..McpServerSettings::default()
            },
            McpServerSettings {
                name: "web".into(),
                url: "http://127.0.0.1:8931/mcp".into(),
                ..McpServerSettings::default()
            },
        ];
        let saved = write_settings(
            &path,
            &[(
                &["mcp", "servers"],
                Some(SettingValue::McpServers(servers.clone())),
            )],
        )
        .unwrap();
        assert_eq!(saved.mcp.servers, servers);
        assert_eq!(saved.mcp.call_timeout_secs, 10.0);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains("# mine") && text.contains("# short"),
            "{text}"
        );
        assert!(!text.contains("old"), "{text}");
        assert!(
            text.contains("name = \"web\"\nurl = \"http://127.0.0.1:8931/mcp\"\napprove"),
            "a server at a url has no command: {text}"
        );
        // A server's own comments stay when only its approval changes; one removed goes.
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace("name = \"files\"", "name = \"files\" # my documents");
        std::fs::write(&path, text).unwrap();
        let mut changed = servers.clone();
        changed[0].approve = Approve::Never;
        changed.remove(1);
        changed.pop();
        let saved = write_settings(
            &path,
            &[(
                &["mcp", "servers"],
                Some(SettingValue::McpServers(changed.clone())),
            )],
        )
        .unwrap();
        assert_eq!(saved.mcp.servers, changed);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("name = \"files\" # my documents"), "{text}");
        assert!(
            text.contains("approve = \"never\"") && !text.contains("calendar"),
            "{text}"
        );
        // None left: no table at all.
        let saved = write_settings(
            &path,
            &[(
                &["mcp", "servers"],
                Some(SettingValue::McpServers(Vec::new())),
            )],
        )
        .unwrap();
        assert!(saved.mcp.servers.is_empty());
        assert!(!std::fs::read_to_string(&path)
            .unwrap()
            .contains("mcp.servers"));
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
