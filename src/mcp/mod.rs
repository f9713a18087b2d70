//! Tools the user plugs in through the Model Context Protocol, on `rmcp` (the official Rust
//! SDK). Each server in `[[mcp.servers]]` is a program Jarvis starts when it is first needed and
//! speaks to over its stdin and stdout; it is kept running, started again on the next use after
//! it died, and stopped with Jarvis. One that runs by itself is spoken to over streamable HTTP
//! at its `url`, reached when first needed and again after its connection was lost. Every call
//! is bounded: a timeout each (a server that never answers), and a server that cannot start,
//! exits mid-call or answers garbage is an error with its reason — never a panic, never a hung
//! caller.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::CallToolRequestParams;
use rmcp::service::{RoleClient, RunningService, ServiceError};
use rmcp::transport::TokioChildProcess;
use rmcp::ServiceExt as _;
use serde::Serialize;
use thiserror::Error;

use crate::config::{McpServerSettings, McpSettings};

/// What went wrong with a server or a call, with its reason.
#[derive(Debug, Clone, Error)]
pub enum McpError {
    /// No server of that name is in the settings.
    #[error("no MCP server is named {0:?} in the settings ([[mcp.servers]])")]
    Unknown(String),
    /// The server could not be started, or did not complete MCP's handshake.
    #[error("the MCP server {server} could not be started: {reason}")]
    Start {
        /// The server's name.
        server: String,
        /// Why.
        reason: String,
    },
    /// The server did not answer in time.
    #[error("the MCP server {server} did not answer {what} within {secs} s")]
    Timeout {
        /// The server's name.
        server: String,
        /// What it was asked ("the tool list", "the call to echo").
        what: String,
        /// The limit, in seconds.
        secs: f64,
    },
    /// Jarvis is stopping its servers.
    #[error("the MCP servers are stopped")]
    Stopped,
    /// The server failed while answering: it exited, or its answer was not MCP.
    #[error("the MCP server {server} failed {what}: {reason}")]
    Failed {
        /// The server's name.
        server: String,
        /// What it was asked.
        what: String,
        /// Why.
        reason: String,
    },
    /// The server offers no tool of that name.
    #[error("the MCP server {server} offers no tool {tool:?}")]
    NoTool {
        /// The server's name.
        server: String,
        /// The tool asked for.
        tool: String,
    },
    /// A call's arguments are not a JSON object.
    #[error("a tool's arguments are a JSON object, e.g. {{\"a\": 1}}: {0}")]
    Arguments(String),
}

/// A tool a server offers, as the model will be told of it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolInfo {
    /// The tool's name on its server.
    pub name: String,
    /// What it does, in the server's words.
    pub description: String,
    /// Its arguments' JSON schema, as the server gave it.
    pub input_schema: serde_json::Value,
    /// Its title for people, where it has one.
    pub title: Option<String>,
    /// What the server says of it (read-only, destructive, idempotent, open-world hints), as
    /// JSON; null where it says nothing. Hints, not promises: consent never rests on them.
    pub annotations: serde_json::Value,
}

impl ToolInfo {
    /// The first line of its description, as lists show it.
    pub fn summary(&self) -> &str {
        self.description.lines().next().unwrap_or_default().trim()
    }
}

/// What a call gave back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CallOutcome {
    /// Its content as text: text parts as they are, other parts named (an image, a resource's
    /// address), the structured result where there is nothing else.
    pub text: String,
    /// The server said the tool failed (its text says why).
    pub is_error: bool,
}

/// A server's state, as Settings and `jarvis mcp list` show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ServerState {
    /// Not started yet (it starts when first needed).
    NotStarted,
    /// Starting now.
    Starting,
    /// Running, offering this many tools.
    Running {
        /// How many tools it offers.
        tools: usize,
    },
    /// It could not be started, or it died; the reason.
    Failed {
        /// Why.
        reason: String,
    },
}

struct Running {
    client: RunningService<RoleClient, Watch>,
    /// Its tools, as last listed.
    tools: std::sync::Mutex<Vec<ToolInfo>>,
    /// Set when it says its tools changed: they are listed again before the next use.
    changed: Arc<AtomicBool>,
    /// The last of what it wrote to stderr (its own log), for the reason when it fails.
    said: Said,
}

/// The client's side of a server's notifications: `notifications/tools/list_changed` marks its
/// tools to be listed again (a server adds or removes tools as it goes).
#[derive(Clone, Default)]
struct Watch {
    changed: Arc<AtomicBool>,
}

impl rmcp::ClientHandler for Watch {
    fn on_tool_list_changed(
        &self,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) -> impl std::future::Future<Output = ()> + Send + '_ {
        self.changed.store(true, Ordering::SeqCst);
        std::future::ready(())
    }
}

impl Running {
    fn new(client: RunningService<RoleClient, Watch>, tools: Vec<ToolInfo>, said: Said) -> Running {
        let changed = client.service().changed.clone();
        Running {
            client,
            tools: std::sync::Mutex::new(tools),
            changed,
            said,
        }
    }

    /// Its tools as last listed.
    fn tools(&self) -> Vec<ToolInfo> {
        self.tools.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Its tools, listed again first where it said they changed since (bounded by `limit`; the
    /// list it gave before where that fails).
    async fn current_tools(&self, server: &str, limit: Duration) -> Vec<ToolInfo> {
        if self.changed.swap(false, Ordering::SeqCst) {
            match tokio::time::timeout(limit, self.client.peer().list_all_tools()).await {
                Ok(Ok(listed)) => {
                    tracing::debug!(%server, tools = listed.len(), "its tools changed");
                    *self.tools.lock().unwrap_or_else(|p| p.into_inner()) = tools_of(listed);
                }
                Ok(Err(err)) => {
                    tracing::warn!(%server, %err, "its tools changed, but could not be listed again");
                }
                Err(_) => tracing::warn!(%server, "its tools changed, but listing them timed out"),
            }
        }
        self.tools()
    }

    /// Whether it still answers: neither stopped nor gone (a server that exited closes its
    /// transport, which the service itself does not count as closed).
    fn alive(&self) -> bool {
        !self.client.is_closed() && !self.client.peer().is_transport_closed()
    }
}

/// The tail of what a server writes to stderr, kept to name why it failed.
#[derive(Clone, Default)]
struct Said(Arc<std::sync::Mutex<String>>);

impl Said {
    /// The most of it that is kept.
    const KEPT: usize = 600;

    fn push(&self, line: &str) {
        let mut said = self.0.lock().unwrap_or_else(|p| p.into_inner());
        said.push_str(line.trim_end());
        said.push('\n');
        if said.len() > Self::KEPT {
            let mut cut = said.len() - Self::KEPT;
            while !said.is_char_boundary(cut) {
                cut += 1;
            }
            said.drain(..cut);
        }
    }

    /// `reason`, with what the server said last where it said anything.
    fn explain(&self, reason: String) -> String {
        let said = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let last: Vec<&str> = said.lines().filter(|l| !l.trim().is_empty()).collect();
        match last.len() {
            0 => reason,
            n => format!(
                "{reason} (it said: {})",
                last[n.saturating_sub(3)..].join(" / ")
            ),
        }
    }
}

/// One server's place: held while it starts, so one slow server never holds up another.
type Slot = Arc<Place>;

/// A server's place: the server, behind the lock a start holds, and what a look at it sees
/// without ever waiting on that lock (a running server is never shown "starting" because a
/// reply or a call is checking on it).
#[derive(Default)]
struct Place {
    held: tokio::sync::Mutex<Option<Arc<Running>>>,
    /// What `held` holds, as last put there.
    seen: std::sync::Mutex<Option<Arc<Running>>>,
    /// Whether a start is under way.
    starting: AtomicBool,
}

/// Marks a place as starting while it lives.
struct Starting<'a>(&'a Place);

impl<'a> Starting<'a> {
    fn of(place: &'a Place) -> Starting<'a> {
        place.starting.store(true, Ordering::SeqCst);
        Starting(place)
    }
}

impl Drop for Starting<'_> {
    fn drop(&mut self) {
        self.0.starting.store(false, Ordering::SeqCst);
    }
}

impl Place {
    /// Puts `server` in the place (`held` is its locked content).
    fn put(&self, held: &mut Option<Arc<Running>>, server: Option<Arc<Running>>) {
        *self.seen.lock().unwrap_or_else(|p| p.into_inner()) = server.clone();
        *held = server;
    }

    /// The server as last put there.
    fn seen(&self) -> Option<Arc<Running>> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl std::fmt::Debug for Servers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Servers")
            .field("names", &self.names())
            .finish_non_exhaustive()
    }
}

/// The servers of the settings, each started when first needed and kept running.
pub struct Servers {
    settings: Vec<McpServerSettings>,
    /// Each server's approval, which a settings change updates without restarting anything.
    approvals: std::sync::Mutex<HashMap<String, crate::config::Approve>>,
    timeout: Duration,
    start_timeout: Duration,
    slots: HashMap<String, Slot>,
    failed: std::sync::Mutex<HashMap<String, Failure>>,
    stopped: AtomicBool,
    /// Cancelled when the servers stop: a start under way ends at once (its process with it).
    stopping: tokio_util::sync::CancellationToken,
}

fn approvals_of(settings: &McpSettings) -> HashMap<String, crate::config::Approve> {
    settings
        .servers
        .iter()
        .map(|s| (s.name.trim().to_string(), s.approve))
        .collect()
}

/// A start that failed is tried again only after this (callers waiting meanwhile get its reason).
const RETRY_AFTER: Duration = Duration::from_secs(5);

/// Why a server is not running, and from when it may be started again.
#[derive(Clone)]
struct Failure {
    error: McpError,
    retry_from: Instant,
    /// Its start failed (it did not die later): its tools are not waited for when a reply's tools
    /// are offered until [`OFFER_HOLD`] after this.
    start_failed: Option<Instant>,
}

impl Failure {
    /// Its start failed a moment ago: the tools offered with a question do not wait for it.
    fn holds_offer(&self) -> bool {
        self.start_failed
            .is_some_and(|at| at.elapsed() < OFFER_HOLD)
    }
}

/// `s` seconds as a duration; `default` where `s` is not one (the settings check them first).
fn secs_or(s: f64, default: f64) -> Duration {
    Duration::try_from_secs_f64(s).unwrap_or_else(|_| Duration::from_secs_f64(default))
}

/// How long a server whose start failed is left out of the tools offered with each question
/// (each would otherwise wait for its start again); a call or `jarvis mcp` still tries it.
const OFFER_HOLD: Duration = Duration::from_secs(60);

/// How long a stopping server is given to end by itself before it is killed.
const STOP_WAIT: Duration = Duration::from_secs(2);

impl Servers {
    /// The servers `settings` names; none is started yet.
    pub fn new(settings: &McpSettings) -> Servers {
        Servers {
            settings: settings.servers.clone(),
            approvals: std::sync::Mutex::new(approvals_of(settings)),
            timeout: secs_or(settings.call_timeout_secs, 30.0),
            start_timeout: secs_or(settings.start_timeout_secs, 60.0),
            stopped: AtomicBool::new(false),
            stopping: tokio_util::sync::CancellationToken::new(),
            slots: settings
                .servers
                .iter()
                .map(|s| (s.name.trim().to_string(), Slot::default()))
                .collect(),
            failed: std::sync::Mutex::new(HashMap::new()),
        }
    }

    /// The servers `settings` names, taking over from `old` each that runs the same program
    /// (its name, command or url, arguments and environment): one running goes on running, with
    /// its tools and a call in flight, and only those added or changed start anew. (The old
    /// servers' others stop once their last holder lets go.)
    pub fn succeeding(old: &Servers, settings: &McpSettings) -> Servers {
        let mut new = Servers::new(settings);
        let failed = old.failed.lock().unwrap_or_else(|p| p.into_inner()).clone();
        for server in &settings.servers {
            let name = server.name.trim();
            let Ok(was) = old.settings_of(name) else {
                continue;
            };
            if !was.runs_alike(server) {
                continue;
            }
            if let (Some(slot), Some(kept)) = (old.slots.get(name), new.slots.get_mut(name)) {
                *kept = slot.clone();
            }
            if let Some(failure) = failed.get(name) {
                new.failed
                    .get_mut()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(name.to_string(), failure.clone());
            }
        }
        new
    }

    /// The servers `settings` names, shared, or none where it names none.
    pub fn of(settings: &McpSettings) -> Option<Arc<Servers>> {
        (!settings.servers.is_empty()).then(|| Arc::new(Servers::new(settings)))
    }

    /// Whether `settings` runs the same servers as these (names, programs, environments,
    /// timeouts): then only approvals differ, and these servers go on ([`Servers::set_approvals`]).
    pub fn runs_the_same(&self, settings: &McpSettings) -> bool {
        self.settings.len() == settings.servers.len()
            && self
                .settings
                .iter()
                .zip(&settings.servers)
                .all(|(a, b)| a.runs_alike(b))
            && self.timeout == secs_or(settings.call_timeout_secs, 30.0)
            && self.start_timeout == secs_or(settings.start_timeout_secs, 60.0)
    }

    /// Puts `settings`' approvals in force (the next call asks, or not, as they say).
    pub fn set_approvals(&self, settings: &McpSettings) {
        *self.approvals.lock().unwrap_or_else(|p| p.into_inner()) = approvals_of(settings);
    }

    /// Whether a call to the server `name`'s tools waits for the user, as the settings say now.
    pub fn approve_of(&self, name: &str) -> crate::config::Approve {
        self.approvals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name.trim())
            .copied()
            .unwrap_or_default()
    }

    /// Whether offering the tools would wait for a server to start: one not running that is not
    /// held back after a failed start.
    pub fn would_start_one(&self) -> bool {
        let failed = self
            .failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        self.states().into_iter().any(|(name, state)| match state {
            ServerState::Running { .. } => false,
            ServerState::Failed { .. } => !failed.get(&name).is_some_and(Failure::holds_offer),
            ServerState::NotStarted | ServerState::Starting => true,
        })
    }

    /// The servers' names, in the settings' order.
    pub fn names(&self) -> Vec<String> {
        self.settings
            .iter()
            .map(|s| s.name.trim().to_string())
            .collect()
    }

    /// The settings of the server `name`.
    pub fn settings_of(&self, name: &str) -> Result<&McpServerSettings, McpError> {
        self.settings
            .iter()
            .find(|s| s.name.trim() == name.trim())
            .ok_or_else(|| McpError::Unknown(name.to_string()))
    }

    /// Each server's state now (nothing is started).
    pub fn states(&self) -> Vec<(String, ServerState)> {
        let failed = self
            .failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        self.names()
            .into_iter()
            .map(|name| {
                let state = match self.slots.get(&name) {
                    Some(slot) if slot.starting.load(Ordering::SeqCst) => ServerState::Starting,
                    Some(slot) => match (slot.seen().as_ref(), failed.get(&name)) {
                        (Some(r), _) if r.alive() => ServerState::Running {
                            tools: r.tools().len(),
                        },
                        (_, Some(failure)) => ServerState::Failed {
                            reason: failure.error.to_string(),
                        },
                        (Some(_), None) => ServerState::Failed {
                            reason: "it exited".into(),
                        },
                        (None, None) => ServerState::NotStarted,
                    },
                    None => ServerState::NotStarted,
                };
                (name, state)
            })
            .collect()
    }

    /// Every server's tools, for a request to offer: a server not running is started (and waited
    /// for, as one starting already is), one whose start failed within the last minute is left
    /// out with its reason logged, as is one that fails now. In the settings' order.
    pub async fn offered(&self) -> Vec<(String, Vec<ToolInfo>)> {
        let names: Vec<String> = {
            let failed = self.failed.lock().unwrap_or_else(|p| p.into_inner());
            self.names()
                .into_iter()
                .filter(|name| {
                    let held = failed.get(name).is_some_and(Failure::holds_offer);
                    if held {
                        tracing::debug!(server = %name, "not offered: its start failed a moment ago");
                    }
                    !held
                })
                .collect()
        };
        let found = futures::future::join_all(names.iter().map(|name| self.tools(name))).await;
        names
            .into_iter()
            .zip(found)
            .filter_map(|(name, found)| match found {
                Ok(tools) => Some((name, tools)),
                Err(err) => {
                    tracing::warn!(server = %name, "its tools are not offered: {err}");
                    None
                }
            })
            .collect()
    }

    /// The tools `server` offers while it runs (nothing is started; `None` while it starts or
    /// is not running).
    pub fn tools_now(&self, server: &str) -> Option<Vec<ToolInfo>> {
        let slot = self.slots.get(server.trim())?;
        if slot.starting.load(Ordering::SeqCst) {
            return None;
        }
        slot.seen().filter(|r| r.alive()).map(|r| r.tools())
    }

    /// The tools `server` offers, starting it if it is not running.
    pub async fn tools(&self, server: &str) -> Result<Vec<ToolInfo>, McpError> {
        let running = self.running(server).await?;
        Ok(running.current_tools(server, self.timeout).await)
    }

    /// Calls `tool` of `server` with `arguments` (a JSON object; null for none), starting the
    /// server if it is not running. A server that dies answering is started again on the next
    /// call.
    pub async fn call(
        &self,
        server: &str,
        tool: &str,
        arguments: serde_json::Value,
    ) -> Result<CallOutcome, McpError> {
        let arguments = match arguments {
            serde_json::Value::Null => None,
            serde_json::Value::Object(map) => Some(map),
            other => return Err(McpError::Arguments(format!("got {other}"))),
        };
        let running = self.running(server).await?;
        let tools = running.current_tools(server, self.timeout).await;
        if !tools.iter().any(|t| t.name == tool) {
            return Err(McpError::NoTool {
                server: server.to_string(),
                tool: tool.to_string(),
            });
        }
        let mut params = CallToolRequestParams::new(tool.to_string());
        if let Some(arguments) = arguments {
            params = params.with_arguments(arguments);
        }
        let what = format!("the call to {tool}");
        let answered = tokio::time::timeout(self.timeout, running.client.peer().call_tool(params))
            .await
            .map_err(|_| McpError::Timeout {
                server: server.to_string(),
                what: what.clone(),
                secs: self.timeout.as_secs_f64(),
            })?;
        match answered {
            Ok(result) => {
                let blocks: Vec<serde_json::Value> = result
                    .content
                    .iter()
                    .filter_map(|c| serde_json::to_value(c).ok())
                    .collect();
                Ok(CallOutcome {
                    text: text_of(&blocks, result.structured_content.as_ref()),
                    is_error: result.is_error.unwrap_or(false),
                })
            }
            Err(err) => {
                let reason = self.reason_of(server, &what, &running, &err).await;
                Err(McpError::Failed {
                    server: server.to_string(),
                    what,
                    reason,
                })
            }
        }
    }

    /// Stops every server, at once and together, even one in the middle of a call (which then
    /// fails); none starts again after. (A server's process never outlives its handle either.)
    pub async fn stop_all(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.stopping.cancel();
        // All at once: one still starting has its start cancelled, lets go of its slot and
        // ends (its process with its handle).
        futures::future::join_all(self.slots.values().map(|slot| async move {
            let server = {
                let mut held = slot.held.lock().await;
                let server = held.take();
                slot.put(&mut held, None);
                server
            };
            let Some(server) = server else { return };
            server.client.cancellation_token().cancel();
            // It ends once its last holder lets go; wait a moment for one that was idle.
            if let Ok(mut server) = Arc::try_unwrap(server) {
                let _ = server.client.close_with_timeout(STOP_WAIT).await;
            }
        }))
        .await;
    }

    /// Why a request failed; a server that exited is forgotten, so the next use starts it again.
    async fn reason_of(
        &self,
        server: &str,
        what: &str,
        running: &Arc<Running>,
        err: &ServiceError,
    ) -> String {
        let exited = matches!(
            err,
            ServiceError::TransportClosed | ServiceError::TransportSend(_)
        );
        let at_url = self
            .settings_of(server)
            .is_ok_and(McpServerSettings::at_url);
        let reason = match err {
            ServiceError::TransportSend(error) if at_url => {
                format!("it could not be reached: {}", first_cause(error))
            }
            _ if exited && at_url => "its connection closed while it answered".to_string(),
            _ if exited => "it exited while answering".to_string(),
            ServiceError::McpError(e) => format!("it answered with an error: {}", e.message),
            other => other.to_string(),
        };
        let reason = running.said.explain(reason);
        if exited || !running.alive() {
            if let Some(slot) = self.slots.get(server) {
                let mut held = slot.held.lock().await;
                if held.as_ref().is_some_and(|r| Arc::ptr_eq(r, running)) {
                    slot.put(&mut held, None);
                }
            }
            let gone = McpError::Failed {
                server: server.to_string(),
                what: what.to_string(),
                reason: reason.clone(),
            };
            // (Gone mid-call: the next use starts it again at once.)
            self.failed
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(
                    server.to_string(),
                    Failure {
                        error: gone,
                        retry_from: Instant::now(),
                        start_failed: None,
                    },
                );
        }
        reason
    }

    /// The running server `name`, started (and its tools listed) if it is not running.
    async fn running(&self, name: &str) -> Result<Arc<Running>, McpError> {
        let settings = self.settings_of(name)?.clone();
        let name = settings.name.trim().to_string();
        let slot = self
            .slots
            .get(&name)
            .ok_or_else(|| McpError::Unknown(name.clone()))?;
        let mut held = slot.held.lock().await;
        if self.stopped.load(Ordering::SeqCst) {
            return Err(McpError::Stopped);
        }
        if let Some(running) = held.as_ref().filter(|r| r.alive()) {
            return Ok(running.clone());
        }
        // A start that failed a moment ago is not tried again for each caller that waited on
        // it: they get its reason.
        if let Some(err) = self.held_back(&name) {
            return Err(err);
        }
        // Shown starting from now until its outcome is in place (cleared however the start
        // ends: its caller may stop waiting for it).
        let _starting = Starting::of(slot);
        slot.put(&mut held, None);
        let started = tokio::select! {
            started = self.start(&settings) => started,
            // Jarvis quits: a server still starting (a launcher downloading it, one that never
            // shakes hands) is not waited for.
            () = self.stopping.cancelled() => Err(McpError::Stopped),
        };
        if self.stopped.load(Ordering::SeqCst) {
            // Stopped while it started: it ends here (its process with its handle).
            if let Ok(mut server) = started {
                server.client.cancellation_token().cancel();
                let _ = server.client.close_with_timeout(STOP_WAIT).await;
            }
            return Err(McpError::Stopped);
        }
        let mut failed = self.failed.lock().unwrap_or_else(|p| p.into_inner());
        match started {
            Ok(running) => {
                failed.remove(&name);
                let running = Arc::new(running);
                slot.put(&mut held, Some(running.clone()));
                Ok(running)
            }
            Err(err) => {
                failed.insert(
                    name,
                    Failure {
                        error: err.clone(),
                        retry_from: Instant::now() + RETRY_AFTER,
                        start_failed: Some(Instant::now()),
                    },
                );
                Err(err)
            }
        }
    }

    /// Why the server may not be started yet, where its last start failed a moment ago.
    fn held_back(&self, name: &str) -> Option<McpError> {
        self.failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .filter(|f| Instant::now() < f.retry_from)
            .map(|f| f.error.clone())
    }

    async fn start(&self, settings: &McpServerSettings) -> Result<Running, McpError> {
        if settings.at_url() {
            return self.reach(settings).await;
        }
        let name = settings.name.trim().to_string();
        let command = settings.command.trim();
        let mut program = tokio::process::Command::new(command);
        program.args(&settings.args);
        // Jarvis's own API keys stay with Jarvis (the desktop has taken them out of its
        // environment already; the command-line tool has not).
        for key in crate::config::key_vars() {
            program.env_remove(key);
        }
        program.envs(&settings.env).kill_on_drop(true);
        let start_error = |reason: String| McpError::Start {
            server: name.clone(),
            reason,
        };
        // Its own process group: a server started through a launcher (`npx`, `uvx`) is a
        // grandchild, and stopping the group stops it too.
        let mut wrapped = process_wrap::tokio::CommandWrap::from(program);
        wrapped.wrap(process_wrap::tokio::ProcessGroup::leader());
        let (transport, stderr) = TokioChildProcess::builder(wrapped)
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|err| start_error(format!("cannot run {command:?}: {err}")))?;
        // What it writes to stderr is its own log: kept at debug, its tail named when it fails.
        let said = Said::default();
        let mut reader = None;
        if let Some(stderr) = stderr {
            let (said, server) = (said.clone(), name.clone());
            reader = Some(tokio::spawn(async move {
                use tokio::io::AsyncBufReadExt as _;
                let mut lines = tokio::io::BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    tracing::debug!(%server, "{line}");
                    said.push(&line);
                }
            }));
        }
        // A server that failed to start has usually exited saying why: what it said is read to
        // its end (a moment at most) before the reason is given.
        let said_all = |reader: Option<tokio::task::JoinHandle<()>>| async move {
            if let Some(reader) = reader {
                let _ = tokio::time::timeout(Duration::from_millis(500), reader).await;
            }
        };
        let limit = |what: &str| McpError::Timeout {
            server: name.clone(),
            what: what.to_string(),
            secs: self.start_timeout.as_secs_f64(),
        };
        // One deadline for the handshake and the tool list together.
        let started = tokio::time::timeout(self.start_timeout, async {
            let client = match Watch::default().serve(transport).await {
                Ok(client) => client,
                Err(err) => {
                    said_all(reader).await;
                    return Err(start_error(
                        said.explain(format!("the handshake failed: {err}")),
                    ));
                }
            };
            let listed = tool_list(&client, &name, &said).await?;
            Ok::<_, McpError>((client, listed))
        })
        .await;
        let (client, listed) = match started {
            Ok(started) => started?,
            Err(_) => return Err(limit("the handshake and its tool list")),
        };
        tracing::info!(server = %name, "MCP server started");
        Ok(Running::new(client, tools_of(listed), said))
    }

    /// A server that runs by itself at its `url`, spoken to over MCP's streamable HTTP: its
    /// handshake and tool list, bounded as a program's are.
    async fn reach(&self, settings: &McpServerSettings) -> Result<Running, McpError> {
        use rmcp::transport::streamable_http_client::{
            StreamableHttpClientTransport, StreamableHttpClientTransportConfig,
        };
        let name = settings.name.trim().to_string();
        let url = settings.url.trim();
        let shown = shown_url(url);
        let start_error = |reason: String| McpError::Start {
            server: name.clone(),
            reason,
        };
        let client = http_client().map_err(|err| start_error(format!("no HTTP client: {err}")))?;
        let transport = StreamableHttpClientTransport::with_client(
            client,
            StreamableHttpClientTransportConfig::with_uri(url),
        );
        let started = tokio::time::timeout(self.start_timeout, async {
            let client = Watch::default().serve(transport).await.map_err(|err| {
                start_error(format!(
                    "the handshake with {shown} failed: {}",
                    why_not(&err)
                ))
            })?;
            let listed = tool_list(&client, &name, &Said::default()).await?;
            Ok::<_, McpError>((client, listed))
        })
        .await;
        let (client, listed) = match started {
            Ok(started) => started?,
            Err(_) => {
                return Err(McpError::Timeout {
                    server: name.clone(),
                    what: format!("the handshake with {shown} and its tool list"),
                    secs: self.start_timeout.as_secs_f64(),
                })
            }
        };
        tracing::info!(server = %name, "MCP server reached");
        Ok(Running::new(client, tools_of(listed), Said::default()))
    }
}

/// A server's tools, listed once its handshake is done; a failure named with what it said.
async fn tool_list(
    client: &RunningService<RoleClient, Watch>,
    name: &str,
    said: &Said,
) -> Result<Vec<rmcp::model::Tool>, McpError> {
    client
        .peer()
        .list_all_tools()
        .await
        .map_err(|err| McpError::Failed {
            server: name.to_string(),
            what: "the tool list".into(),
            reason: said.explain(err.to_string()),
        })
}

/// The tools a server listed, as Jarvis keeps them.
fn tools_of(listed: Vec<rmcp::model::Tool>) -> Vec<ToolInfo> {
    listed
        .into_iter()
        .map(|t| ToolInfo {
            name: t.name.to_string(),
            description: t.description.map(|d| d.to_string()).unwrap_or_default(),
            input_schema: serde_json::Value::Object((*t.input_schema).clone()),
            title: t.title.clone(),
            annotations: serde_json::to_value(&t.annotations).unwrap_or_default(),
        })
        .collect()
}

/// Why a handshake over HTTP failed, as a person reads it ([`first_cause`]).
fn why_not(err: &rmcp::service::ClientInitializeError) -> String {
    match err {
        rmcp::service::ClientInitializeError::TransportError { error, .. } => first_cause(error),
        other => other.to_string(),
    }
}

/// The first cause a transport met ("Connection refused (os error 111)", an HTTP status, a
/// certificate refused), on one line, not the SDK's wrapping of it.
fn first_cause(error: &rmcp::transport::DynamicTransportError) -> String {
    use rmcp::transport::streamable_http_client::StreamableHttpError;
    let mut cause: &dyn std::error::Error = error.error.as_ref();
    // (The SDK names the client's own error without making it the source.)
    if let Some(StreamableHttpError::Client(client)) =
        cause.downcast_ref::<StreamableHttpError<reqwest_mcp::Error>>()
    {
        cause = client;
    }
    while let Some(deeper) = cause.source() {
        cause = deeper;
    }
    // One line: an error page's body follows its status.
    let said = cause.to_string();
    let first = said.lines().next().unwrap_or_default().trim();
    first.chars().take(300).collect()
}

/// The HTTP client MCP's streamable HTTP goes through: rustls on ring, with the web's root
/// certificates, as the backends' client has; set up as the SDK's own client is — no idle
/// connections kept (a reused one can stall on delayed ACKs), and only a redirect that keeps
/// the message and the server (a 307 or 308 to the same origin) followed: a 301–303 would turn
/// the POST into a GET and lose it, and another origin would be handed the session.
fn http_client() -> Result<reqwest_mcp::Client, String> {
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|err| err.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let redirects = reqwest_mcp::redirect::Policy::custom(|attempt| {
        let keeps_the_message = matches!(
            attempt.status(),
            reqwest_mcp::StatusCode::TEMPORARY_REDIRECT
                | reqwest_mcp::StatusCode::PERMANENT_REDIRECT
        );
        let same_origin = attempt
            .previous()
            .first()
            .is_some_and(|first| first.origin() == attempt.url().origin());
        if !keeps_the_message || !same_origin {
            attempt.stop()
        } else if attempt.previous().len() > 10 {
            attempt.error("more than 10 redirects")
        } else {
            attempt.follow()
        }
    });
    reqwest_mcp::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .pool_max_idle_per_host(0)
        .redirect(redirects)
        .tls_backend_preconfigured(tls)
        .build()
        .map_err(|err| err.to_string())
}

impl Servers {
    /// One line per server, each started to be seen: `NAME<TAB>running, N tools` or
    /// `NAME<TAB>failed: why`.
    pub async fn list_lines(&self) -> Vec<String> {
        let names = self.names();
        let found = futures::future::join_all(names.iter().map(|name| self.tools(name))).await;
        names
            .iter()
            .zip(found)
            .map(|(name, found)| match found {
                Ok(tools) if tools.len() == 1 => format!("{name}\trunning, 1 tool"),
                Ok(tools) => format!("{name}\trunning, {} tools", tools.len()),
                Err(err) => format!("{name}\tfailed: {err}"),
            })
            .collect()
    }
}

/// The program a server runs, as the tools always allowed are kept with it: its command and
/// arguments as a JSON array (a name pointed at another program is asked about again).
pub fn program_of(settings: &McpServerSettings) -> String {
    if settings.at_url() {
        // A server at a url is known by it (not by a token in its query).
        return serde_json::to_string(&[shown_url(&settings.url)]).unwrap_or_default();
    }
    let mut words = vec![settings.command.trim().to_string()];
    words.extend(settings.args.iter().cloned());
    serde_json::to_string(&words).unwrap_or_default()
}

/// A server's url as it is shown and kept: without its query or fragment, which may carry a
/// token ("http://host/mcp?…").
pub fn shown_url(url: &str) -> String {
    let url = url.trim();
    match url.find(['?', '#']) {
        Some(at) => format!("{}?…", &url[..at]),
        None => url.to_string(),
    }
}

/// A tool as `jarvis mcp tools` lists it: `NAME<TAB>its description's first line<TAB>its
/// arguments (required ones marked *)`.
pub fn tool_line(tool: &ToolInfo) -> String {
    let required: Vec<&str> = tool
        .input_schema
        .get("required")
        .and_then(|r| r.as_array())
        .map(|r| r.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    let arguments: Vec<String> = tool
        .input_schema
        .get("properties")
        .and_then(|p| p.as_object())
        .map(|p| {
            p.keys()
                .map(|k| {
                    if required.contains(&k.as_str()) {
                        format!("{k}*")
                    } else {
                        k.clone()
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    format!("{}\t{}\t{}", tool.name, tool.summary(), arguments.join(" "))
}

/// A result's content blocks as text: text as it is, an image or audio named with its type, a
/// resource by its text or address; the structured result where there is nothing else.
fn text_of(blocks: &[serde_json::Value], structured: Option<&serde_json::Value>) -> String {
    let str_of = |v: &serde_json::Value, key: &str| {
        v.get(key)
            .and_then(|s| s.as_str())
            .unwrap_or_default()
            .to_string()
    };
    let parts: Vec<String> = blocks
        .iter()
        .map(|block| match block.get("type").and_then(|t| t.as_str()) {
            Some("text") => str_of(block, "text"),
            Some(kind @ ("image" | "audio")) => {
                format!("[{kind}: {}]", str_of(block, "mimeType"))
            }
            Some("resource") => {
                let resource = block.get("resource").cloned().unwrap_or_default();
                match resource.get("text").and_then(|t| t.as_str()) {
                    Some(text) => text.to_string(),
                    None => format!("[resource: {}]", str_of(&resource, "uri")),
                }
            }
            Some("resource_link") => format!("[link: {}]", str_of(block, "uri")),
            _ => block.to_string(),
        })
        .collect();
    match (parts.is_empty(), structured) {
        (true, Some(value)) => value.to_string(),
        _ => parts.join("\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The Tools page read "starting…" for a running server whenever a reply or a call was
    /// checking on it (the look waited on nothing, and took a held lock for a start).
    #[tokio::test(flavor = "multi_thread")]
    async fn a_running_server_is_shown_running_while_something_checks_on_it() {
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/mcp-servers/misbehaving.py"
        );
        let servers = Servers::new(&McpSettings {
            servers: vec![McpServerSettings {
                name: "fine".into(),
                command: "python3".into(),
                args: vec![script.into(), "fine".into()],
                ..McpServerSettings::default()
            }],
            ..McpSettings::default()
        });
        servers.tools("fine").await.unwrap();
        let checking = servers.slots["fine"].held.lock().await;
        assert_eq!(
            servers.states(),
            [("fine".to_string(), ServerState::Running { tools: 1 })]
        );
        assert_eq!(servers.tools_now("fine").map(|t| t.len()), Some(1));
        drop(checking);
        servers.stop_all().await;
        assert_eq!(
            servers.states(),
            [("fine".to_string(), ServerState::NotStarted)]
        );
    }

    #[test]
    fn a_result_s_content_is_read_as_text_whatever_its_kind() {
        let blocks = [
            json!({"type": "text", "text": "The sum of 2 and 3 is 5."}),
            json!({"type": "image", "data": "AAAA", "mimeType": "image/png"}),
            json!({"type": "resource", "resource": {"uri": "file:///a.txt", "text": "hello"}}),
            json!({"type": "resource", "resource": {"uri": "file:///b.bin", "blob": "AAAA"}}),
            json!({"type": "resource_link", "uri": "file:///c", "name": "c"}),
        ];
        assert_eq!(
            text_of(&blocks, None),
            "The sum of 2 and 3 is 5.\n[image: image/png]\nhello\n[resource: file:///b.bin]\n[link: file:///c]"
        );
        assert_eq!(text_of(&[], Some(&json!({"sum": 5}))), r#"{"sum":5}"#);
    }
}
