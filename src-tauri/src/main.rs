//! Jarvis's desktop shell: the chat window, the orb, the tray and the push-to-talk shortcut, glued
//! to the conversation service. Nothing here decides anything (DESIGN.md §1): each window attaches
//! and detaches, each command forwards to the service.
#![cfg_attr(not(debug_assertions), windows_subsystem = "windows")]

mod app;
mod commands;
mod shortcut;
mod state;
mod tray;
mod windows;

/// When the process started, for the launch figures in the log (and BENCHMARKS.md).
pub static STARTED: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

/// Logs, once, how long the app took to reach a milestone (`chat page loaded`, `chat window ready`).
pub fn milestone(what: &'static str, once: &'static std::sync::Once) {
    once.call_once(|| {
        let ms = STARTED.get().map(|s| s.elapsed().as_millis()).unwrap_or(0);
        tracing::info!(target: "jarvis_desktop::launch", ms, "{what}");
    });
}

/// Logs at debug how long the app took to reach a step of its start.
pub fn milestone_at(what: &str) {
    let ms = STARTED.get().map(|s| s.elapsed().as_millis()).unwrap_or(0);
    tracing::debug!(target: "jarvis_desktop::launch", ms, "{what}");
}

/// With no GPU (no DRM render node), WebKitGTK's DMA-BUF renderer only draws into software
/// buffers, and each page's process then takes twice the memory (measured: 130–150 MiB against
/// 80 MiB per page under Xvfb). There it is turned off, unless the user chose otherwise.
fn choose_webkit_renderer() {
    const VAR: &str = "WEBKIT_DISABLE_DMABUF_RENDERER";
    if std::env::var_os(VAR).is_some() {
        return;
    }
    let has_gpu = std::fs::read_dir("/dev/dri")
        .map(|dir| {
            dir.flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("renderD"))
        })
        .unwrap_or(false);
    if !has_gpu {
        // Before any thread starts: nothing else reads the environment yet.
        std::env::set_var(VAR, "1");
    }
}

fn main() {
    STARTED.get_or_init(std::time::Instant::now);
    choose_webkit_renderer();
    // Before any thread starts: the web views and a browser opening a link never see a key.
    let keys = jarvis::config::take_keys_from_env();
    if let Err(err) = app::run(keys) {
        eprintln!("jarvis-desktop: {err:#}");
        std::process::exit(1);
    }
}
