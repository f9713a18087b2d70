//! Changing the settings file in place: its other keys, comments and layout stay.

use std::io::Write;
use std::path::Path;

use super::{ConfigError, Settings};

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
    /// The MCP servers, as the file's `[[mcp.servers]]` tables (all of them, in order).
    McpServers(Vec<super::McpServerSettings>),
}

/// `kept`, a server's table as the file has it, with the keys whose values differ from
/// `server`'s written anew (the rest, and its comments, as they were).
fn updated_table(kept: &toml_edit::Table, server: &super::McpServerSettings) -> toml_edit::Table {
    let was: Option<super::McpServerSettings> = toml::from_str(&kept.to_string()).ok();
    let fresh = server_table(server);
    let mut table = kept.clone();
    let differs = |key: &str| match &was {
        Some(was) => match key {
            "command" => was.command != server.command,
            "url" => was.url != server.url,
            "args" => was.args != server.args,
            "env" => was.env != server.env,
            "approve" => was.approve != server.approve,
            _ => false,
        },
        None => true,
    };
    for key in ["command", "url", "args", "env", "approve"] {
        if !differs(key) {
            continue;
        }
        match fresh.get(key) {
            Some(value) => match table.get_mut(key) {
                Some(item) => *item = value.clone(),
                None => {
                    table.insert(key, value.clone());
                }
            },
            None => {
                table.remove(key);
            }
        }
    }
    table
}

/// One server as a `[[mcp.servers]]` table: its name, program and arguments (or its url), added
/// environment (where there is any) and whether a call waits for the user.
fn server_table(server: &super::McpServerSettings) -> toml_edit::Table {
    let mut table = toml_edit::Table::new();
    table.insert("name", toml_edit::value(server.name.as_str()));
    if !server.at_url() {
        table.insert("command", toml_edit::value(server.command.as_str()));
        let args: toml_edit::Array = server.args.iter().map(String::as_str).collect();
        table.insert("args", toml_edit::value(args));
    } else {
        table.insert("url", toml_edit::value(server.url.as_str()));
    }
    if !server.env.is_empty() {
        let mut env = toml_edit::InlineTable::new();
        for (key, value) in &server.env {
            env.insert(key, value.as_str().into());
        }
        table.insert("env", toml_edit::value(env));
    }
    let approve = match server.approve {
        super::Approve::Ask => "ask",
        super::Approve::Always => "always",
        super::Approve::Never => "never",
    };
    table.insert("approve", toml_edit::value(approve));
    table
}

/// Changes keys of the settings file in place — its other keys, comments and layout stay — after
/// checking that the result is still valid settings; the file is replaced atomically. A key path is
/// `["backend"]` or `["openai", "model"]`; `None` removes the key.
pub fn write_settings(
    path: &Path,
    changes: &[(&[&str], Option<SettingValue>)],
) -> Result<Settings, ConfigError> {
    let (text, settings) = edited_settings(path, changes)?;
    replace_file(path, ".settings-", ".toml.tmp", text.as_bytes()).map_err(|source| {
        ConfigError::Unwritable {
            path: path.to_path_buf(),
            source,
        }
    })?;
    Ok(settings)
}

/// Writes `bytes` as the file at `path` (its folder made where missing) through a temporary file
/// of its own beside it (`prefix`…`suffix`: two writes never share one), on disk before it
/// replaces the file, and the replacement itself on disk before this returns: a crash leaves the
/// old file or the new, never a cut one.
pub fn replace_file(path: &Path, prefix: &str, suffix: &str, bytes: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(dir) => dir,
        None => Path::new("."),
    };
    std::fs::create_dir_all(dir)?;
    let mut temp = tempfile::Builder::new()
        .prefix(prefix)
        .suffix(suffix)
        .tempfile_in(dir)?;
    temp.write_all(bytes)?;
    temp.as_file().sync_all()?;
    temp.persist(path).map_err(|e| e.error)?;
    std::fs::File::open(dir).and_then(|d| d.sync_all())
}

/// The settings file at `path` as [`write_settings`] would leave it — its text, and the settings
/// that text holds, checked — with nothing written.
pub fn edited_settings(
    path: &Path,
    changes: &[(&[&str], Option<SettingValue>)],
) -> Result<(String, Settings), ConfigError> {
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
            Some(SettingValue::McpServers(servers)) => {
                // A server already in the file keeps its table (its comments, its keys' order),
                // only the keys that changed written; the others are dropped, new ones appended.
                let before: Vec<toml_edit::Table> = table
                    .get(last)
                    .and_then(toml_edit::Item::as_array_of_tables)
                    .map(|a| a.iter().cloned().collect())
                    .unwrap_or_default();
                let tables: toml_edit::ArrayOfTables = servers
                    .iter()
                    .map(|server| {
                        let kept = before.iter().find(|t| {
                            t.get("name")
                                .and_then(toml_edit::Item::as_str)
                                .map(str::trim)
                                == Some(server.name.trim())
                        });
                        match kept {
                            Some(kept) => updated_table(kept, server),
                            None => server_table(server),
                        }
                    })
                    .collect();
                if tables.is_empty() {
                    table.remove(last);
                } else {
                    table.insert(last, toml_edit::Item::ArrayOfTables(tables));
                }
            }
            Some(value) => {
                let value = match value {
                    SettingValue::McpServers(_) => unreachable!("written above"),
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
    Ok((text, settings))
}
