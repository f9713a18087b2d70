//! Settings → Tools: the user's MCP servers with their state and the tools they offer, each
//! added, removed or its approval changed (the settings file's `[[mcp.servers]]`, in force at
//! once), and the tools always allowed, each to be asked about again.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::config::{Approve, McpServerSettings, SettingValue};
use crate::mcp::{ServerState, Servers};

use super::{Session, SessionError};

/// What the Tools page shows.
#[derive(Debug, Clone, PartialEq, Serialize, ts_rs::TS)]
pub struct ToolsView {
    /// The servers, in the settings' order.
    pub servers: Vec<ServerView>,
}

/// One server on the Tools page.
#[derive(Debug, Clone, PartialEq, Serialize, ts_rs::TS)]
pub struct ServerView {
    /// Its name (its tools are `name__tool`).
    pub name: String,
    /// The program it runs, as a command line.
    pub command: String,
    /// Whether a call to one of its tools waits for the user.
    pub approve: Approve,
    /// Running (with how many tools), starting, not started, or why it failed.
    pub state: ServerState,
    /// Its tools, while it runs.
    pub tools: Vec<ToolView>,
}

/// One tool of a running server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct ToolView {
    /// Its name on the server.
    pub name: String,
    /// The first line of its description.
    pub description: String,
    /// "Always allow this tool" was chosen for it: a call runs without asking.
    pub always_allowed: bool,
}

/// A server the user adds on the Tools page.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, ts_rs::TS)]
pub struct ServerForm {
    /// Its name.
    pub name: String,
    /// Its command line: the program and its arguments, quoted as a shell quotes them; or the
    /// `http://…` address of a server that runs by itself.
    pub command: String,
    /// Whether a call to one of its tools waits for the user.
    pub approve: Approve,
}

impl ServerForm {
    /// The server the form describes, or why it cannot be added beside `existing`.
    fn server(&self, existing: &[McpServerSettings]) -> Result<McpServerSettings, String> {
        let name = self.name.trim();
        if name.is_empty() {
            return Err("the server needs a name".into());
        }
        if crate::tools::namespaced(name, "tool").is_err()
            || name
                .chars()
                .any(|c| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
        {
            return Err(format!(
                "{name:?} cannot name a server: use letters, digits, - and _ (its tools are called {name}__tool)"
            ));
        }
        if existing.iter().any(|s| s.name.trim() == name) {
            return Err(format!("a server is already named {name:?}"));
        }
        let line = self.command.trim();
        let lower = line.to_ascii_lowercase();
        if lower.starts_with("http://") || lower.starts_with("https://") {
            let url = reqwest::Url::parse(line)
                .ok()
                .filter(|u| {
                    u.has_host() && u.username().is_empty() && !line.contains(char::is_whitespace)
                })
                .ok_or_else(|| {
                    format!("{line:?} is not an address (e.g. http://127.0.0.1:8931/mcp)")
                })?;
            return Ok(McpServerSettings {
                name: name.to_string(),
                url: url.as_str().to_string(),
                approve: self.approve,
                ..McpServerSettings::default()
            });
        }
        let words = shlex::split(line)
            .ok_or_else(|| "the command line has an unclosed quote".to_string())?;
        let Some((command, args)) = words.split_first() else {
            return Err("the server needs a command (e.g. npx -y @modelcontextprotocol/server-filesystem ~/Documents)".into());
        };
        Ok(McpServerSettings {
            name: name.to_string(),
            command: command.clone(),
            args: args.to_vec(),
            approve: self.approve,
            ..McpServerSettings::default()
        })
    }
}

/// A server's command line, quoted where a word needs it (its address, for one at a url).
fn command_line(server: &McpServerSettings) -> String {
    if server.at_url() {
        return crate::mcp::shown_url(&server.url);
    }
    std::iter::once(&server.command)
        .chain(&server.args)
        .map(|word| {
            shlex::try_quote(word)
                .map(|q| q.into_owned())
                .unwrap_or_else(|_| word.clone())
        })
        .collect::<Vec<_>>()
        .join(" ")
}

impl Session {
    /// The Tools page: each server's state and, while it runs, its tools (none is started to be
    /// seen: the session started them).
    pub async fn tools_view(&self) -> Result<ToolsView, SessionError> {
        let settings = self.settings().mcp;
        let servers = self.mcp_servers();
        let store = self.service.store().clone();
        let allowed = tokio::task::spawn_blocking(move || store.allowed_tools_with_programs())
            .await
            .map_err(|e| {
                SessionError::Invalid(format!("reading the tools always allowed stopped: {e}"))
            })??;
        let states = servers.as_ref().map(|s| s.states()).unwrap_or_default();
        let mut out = Vec::new();
        for server in &settings.servers {
            let name = server.name.trim().to_string();
            let state = states
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, s)| s.clone())
                .unwrap_or(ServerState::NotStarted);
            let program = crate::mcp::program_of(server);
            let tools = match &servers {
                Some(servers) => servers.tools_now(&name).unwrap_or_default(),
                None => Vec::new(),
            };
            out.push(ServerView {
                command: command_line(server),
                approve: server.approve,
                state,
                tools: tools
                    .into_iter()
                    .map(|tool| ToolView {
                        always_allowed: allowed
                            .iter()
                            .any(|(s, p, t)| *s == name && *p == program && *t == tool.name),
                        description: tool.summary().to_string(),
                        name: tool.name,
                    })
                    .collect(),
                name,
            });
        }
        Ok(ToolsView { servers: out })
    }

    /// Adds a server to the settings; it starts at once, and its tools are offered from the next
    /// question on.
    pub async fn add_tool_server(&self, form: ServerForm) -> Result<ToolsView, SessionError> {
        self.change_tool_servers(move |servers| {
            let server = form.server(servers)?;
            servers.push(server);
            Ok(())
        })
        .await?;
        self.tools_view().await
    }

    /// Removes the server `name` from the settings; it stops once a call it runs has ended.
    pub async fn remove_tool_server(&self, name: String) -> Result<ToolsView, SessionError> {
        self.change_tool_servers(move |servers| {
            let before = servers.len();
            servers.retain(|s| s.name.trim() != name.trim());
            if servers.len() == before {
                return Err(format!("no server is named {name:?}"));
            }
            Ok(())
        })
        .await?;
        self.tools_view().await
    }

    /// Whether a call to the server `name`'s tools waits for the user (the servers go on).
    pub async fn set_tool_approval(
        &self,
        name: String,
        approve: Approve,
    ) -> Result<ToolsView, SessionError> {
        self.change_tool_servers(move |servers| {
            let server = servers
                .iter_mut()
                .find(|s| s.name.trim() == name.trim())
                .ok_or_else(|| format!("no server is named {name:?}"))?;
            server.approve = approve;
            Ok(())
        })
        .await?;
        self.tools_view().await
    }

    /// The next call to `tool` of `server` asks again ("Always allow" taken back).
    pub async fn ask_tool_again(
        &self,
        server: String,
        tool: String,
    ) -> Result<ToolsView, SessionError> {
        let store = self.service.store().clone();
        tokio::task::spawn_blocking(move || store.disallow_tool(&server, &tool))
            .await
            .map_err(|e| SessionError::Invalid(format!("asking again stopped: {e}")))??;
        self.tools_view().await
    }

    /// Changes the servers as the settings file has them now (one change at a time: the file is
    /// read under the lock every settings write takes, so neither a quick second change nor a
    /// server added to the file by hand is lost), writes them and puts them in force.
    async fn change_tool_servers(
        &self,
        change: impl FnOnce(&mut Vec<McpServerSettings>) -> Result<(), String> + Send + 'static,
    ) -> Result<(), SessionError> {
        let _one = self.settings_lock.lock().await;
        let path = self.locked_config().path.clone();
        let mut servers = tokio::task::spawn_blocking(move || {
            crate::config::edited_settings(&path, &[]).map(|(_, settings)| settings.mcp.servers)
        })
        .await
        .map_err(|e| SessionError::Invalid(format!("reading the settings stopped: {e}")))??;
        change(&mut servers).map_err(SessionError::Invalid)?;
        let changes = vec![(
            vec!["mcp", "servers"],
            Some(SettingValue::McpServers(servers)),
        )];
        let (_, config) = self.write(changes).await?;
        self.service
            .reconfigure(None, self.options_for(&config.settings))
            .await?;
        if let Some(servers) = self.mcp_servers() {
            start_in_background(servers);
        }
        Ok(())
    }

    /// The MCP servers in force.
    pub(crate) fn mcp_servers(&self) -> Option<Arc<Servers>> {
        self.mcp.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Starts every server of `servers` on a task of its own (failures are logged and shown).
pub(crate) fn start_in_background(servers: Arc<Servers>) {
    tokio::spawn(async move {
        servers.offered().await;
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_form_is_split_as_a_shell_would_and_a_bad_one_is_refused_with_why() {
        let form = |name: &str, command: &str| ServerForm {
            name: name.into(),
            command: command.into(),
            approve: Approve::Ask,
        };
        let server = form(
            "files",
            r#"npx -y @modelcontextprotocol/server-filesystem "/home/ada/My Documents""#,
        )
        .server(&[])
        .unwrap();
        assert_eq!(server.command, "npx");
        assert_eq!(
            server.args,
            [
                "-y",
                "@modelcontextprotocol/server-filesystem",
                "/home/ada/My Documents"
            ]
        );
        assert_eq!(
            command_line(&server),
            r#"npx -y @modelcontextprotocol/server-filesystem '/home/ada/My Documents'"#
        );
        let taken = [server];
        for (name, command, why) in [
            ("", "npx x", "needs a name"),
            ("my files", "npx x", "cannot name a server"),
            ("files", "npx x", "already named"),
            ("other", "  ", "needs a command"),
            ("other", "npx 'open", "unclosed quote"),
            ("other", "http://", "not an address"),
            ("other", "https://example.com/mcp extra", "not an address"),
        ] {
            let err = form(name, command).server(&taken).unwrap_err();
            assert!(err.contains(why), "{name:?} {command:?}: {err}");
        }
        // A server that runs by itself is added by its address.
        let web = form("web", " http://127.0.0.1:8931/mcp ")
            .server(&taken)
            .unwrap();
        assert_eq!(
            (web.url.as_str(), web.command.as_str(), web.args.len()),
            ("http://127.0.0.1:8931/mcp", "", 0)
        );
        assert_eq!(command_line(&web), "http://127.0.0.1:8931/mcp");
        // Its query may hold a token: kept, never shown.
        let tokened = form("tokened", "HTTPS://mcp.example.com/mcp?token=abc")
            .server(&taken)
            .unwrap();
        assert_eq!(tokened.url, "https://mcp.example.com/mcp?token=abc");
        assert_eq!(command_line(&tokened), "https://mcp.example.com/mcp?…");
        assert!(!crate::mcp::program_of(&tokened).contains("abc"));
        let err = form("other", "https://ada:pw@mcp.example.com/mcp")
            .server(&taken)
            .unwrap_err();
        assert!(err.contains("not an address"), "{err}");
    }
}
