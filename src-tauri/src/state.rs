//! What every command and handler shares: the core's session and the windows' attachments.
//! Imports nothing of the shell.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use jarvis::session::Session;
use jarvis::Service;
use tauri::async_runtime::JoinHandle;

/// Why the database could not be opened at start, when it could not (the app then runs with this
/// state alone: the chat window shows the reason and the way out), with the API keys taken out of
/// the environment at start, which the app started again after moving the file aside is given.
pub struct Startup(
    pub Option<jarvis::session::StartupProblem>,
    pub Vec<(&'static str, String)>,
);

/// The app's state, managed by Tauri.
pub struct AppState {
    /// Settings, service and voice.
    pub session: Arc<Session>,
    /// The session's service (a cheap clone, for brevity).
    pub service: Service,
    /// Each window's forwarding tasks (its attachments), by window label and kind; aborting one
    /// detaches the window and never touches a reply.
    forwarders: Mutex<HashMap<(String, &'static str), JoinHandle<()>>>,
}

impl AppState {
    /// The state around a session.
    pub fn new(session: Session) -> AppState {
        AppState {
            service: session.service().clone(),
            session: Arc::new(session),
            forwarders: Mutex::new(HashMap::new()),
        }
    }

    /// Replaces the window's forwarder of this kind (a page that attaches again detaches first).
    pub fn forward(&self, label: &str, kind: &'static str, task: JoinHandle<()>) {
        let mut forwarders = self.forwarders.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = forwarders.insert((label.to_string(), kind), task) {
            old.abort();
        }
    }

    /// Detaches a window: ends all its forwarders.
    pub fn detach(&self, label: &str) {
        let mut forwarders = self.forwarders.lock().unwrap_or_else(|e| e.into_inner());
        forwarders.retain(|(window, _), task| {
            let keep = window != label;
            if !keep {
                task.abort();
            }
            keep
        });
    }
}
