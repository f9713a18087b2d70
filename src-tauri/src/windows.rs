//! Showing and hiding windows. Closing a window hides it; hiding detaches it (its attachments end,
//! replies go on); showing it again tells its page to attach again, which replays the current
//! reply from its first event.

use tauri::{AppHandle, Emitter, Manager, Window, WindowEvent};

use crate::state::AppState;

pub const CHAT: &str = "chat";
pub const ORB: &str = "orb";

/// The event a page attaches again on.
pub const ATTACH_AGAIN: &str = "attach-again";

pub fn on_event(window: &Window, event: &WindowEvent) {
    if let WindowEvent::CloseRequested { api, .. } = event {
        api.prevent_close();
        hide(window.app_handle(), window.label());
    }
}

pub fn hide(app: &AppHandle, label: &str) {
    if let Some(window) = app.get_webview_window(label) {
        if let Err(err) = window.hide() {
            tracing::warn!(%err, label, "cannot hide a window");
        }
    }
    let state = app.state::<AppState>();
    state.detach(label);
    if label == ORB {
        remember_orb_hidden(app, true);
        // A hidden orb holds no open microphone (unless the wake word is kept on while hidden).
        let service = state.service.clone();
        tauri::async_runtime::spawn(async move {
            if let Err(err) = service.set_orb_shown(false).await {
                tracing::warn!(%err, "cannot tell the service the orb was hidden");
            }
        });
    }
}

/// Shows a window; the chat window also takes focus, the orb never does.
pub fn show(app: &AppHandle, label: &str) {
    let Some(window) = app.get_webview_window(label) else {
        return;
    };
    let was_visible = window.is_visible().unwrap_or(false);
    let _ = window.unminimize();
    if let Err(err) = window.show() {
        tracing::warn!(%err, label, "cannot show a window");
    }
    if label == CHAT {
        let _ = window.set_focus();
    } else if label == ORB {
        remember_orb_hidden(app, false);
        let service = app.state::<AppState>().service.clone();
        tauri::async_runtime::spawn(async move {
            let _ = service.set_orb_shown(true).await;
        });
    }
    if !was_visible {
        let _ = app.emit_to(label, ATTACH_AGAIN, ());
    }
}

/// Where the app keeps that the orb was hidden: the next start makes it hidden (the orb shows
/// only if it was showing when Jarvis last quit).
fn orb_hidden_marker(app: &AppHandle) -> Option<std::path::PathBuf> {
    app.path()
        .app_config_dir()
        .ok()
        .map(|dir| dir.join("orb-hidden"))
}

fn remember_orb_hidden(app: &AppHandle, hidden: bool) {
    let Some(marker) = orb_hidden_marker(app) else {
        return;
    };
    let kept = if hidden {
        marker
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(&marker, b""))
    } else {
        match std::fs::remove_file(&marker) {
            Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(err),
            _ => Ok(()),
        }
    };
    if let Err(err) = kept {
        tracing::warn!(%err, "cannot keep whether the orb is hidden");
    }
}

/// Shows the chat window at start, unless Jarvis starts hidden (at login, in the tray).
pub fn show_at_start(app: &AppHandle, hidden: bool) {
    if !hidden {
        if let Some(window) = app.get_webview_window(CHAT) {
            if let Err(err) = window.show() {
                tracing::warn!(%err, "cannot show the chat window");
            }
            let _ = window.set_focus();
        }
    }
}

/// The first time (no remembered place), the orb goes to the right edge of its screen, halfway
/// down: clear of the chat window's header buttons at the top and of its composer and Send at the
/// bottom, even when the chat window is maximised (in the top right corner it covered "What the
/// model sees"; in the bottom right corner, Send — both seen in the e2e screenshots). After that the window-state plugin puts it where it was left.
pub fn place_orb_first_time(app: &AppHandle) {
    let remembered = app
        .path()
        .app_config_dir()
        .map(|dir| {
            dir.join(tauri_plugin_window_state::DEFAULT_FILENAME)
                .exists()
        })
        .unwrap_or(false);
    let Some(orb) = app.get_webview_window(ORB) else {
        return;
    };
    if remembered {
        return;
    }
    // The configured size: before it is first drawn, the window may not know its size yet.
    let (width, height) = app
        .config()
        .app
        .windows
        .iter()
        .find(|w| w.label == ORB)
        .map(|w| (w.width, w.height))
        .unwrap_or((240.0, 320.0));
    let monitor = orb
        .current_monitor()
        .ok()
        .flatten()
        .or_else(|| orb.primary_monitor().ok().flatten());
    if let Some(monitor) = monitor {
        let scale = monitor.scale_factor();
        let area = monitor.size();
        let margin = (24.0 * scale) as i32;
        let x = monitor.position().x + area.width as i32 - (width * scale) as i32 - margin;
        let y =
            monitor.position().y + ((area.height as i32 - (height * scale) as i32) / 2).max(margin);
        let _ = orb.set_position(tauri::PhysicalPosition::new(x, y));
    }
}

/// A key bound by hand (`--action talk`) was pressed before the orb was made.
static TALK_WHEN_MADE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The orb, once made, shows and the microphone opens (for a press that started Jarvis).
pub fn talk_once_the_orb_is_made() {
    TALK_WHEN_MADE.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Makes the orb from its configuration once the chat window is usable: making a webview starts
/// its WebKit process and holds the main thread, on which the chat page's first calls wait (made
/// at start, the orb slowed the chat window from 0.4 s to 0.9 s: measured). Whether a press of
/// the talk key waits for it (the caller hands it on).
#[must_use]
pub fn create_orb(app: &AppHandle) -> bool {
    if app.get_webview_window(ORB).is_some() {
        return false;
    }
    let Some(config) = app
        .config()
        .app
        .windows
        .iter()
        .find(|w| w.label == ORB)
        .cloned()
    else {
        return false;
    };
    let talk = TALK_WHEN_MADE.swap(false, std::sync::atomic::Ordering::SeqCst);
    // Hidden when Jarvis last quit: made hidden, holding no microphone (unless a press of the
    // talk key started Jarvis: it shows at once).
    let hidden = !talk && orb_hidden_marker(app).is_some_and(|m| m.exists());
    let built = tauri::WebviewWindowBuilder::from_config(app, &config)
        .and_then(|b| b.visible(!hidden).build());
    match built {
        Ok(_) => place_orb_first_time(app),
        Err(err) => tracing::error!(%err, "cannot make the orb"),
    }
    if hidden {
        let service = app.state::<AppState>().service.clone();
        tauri::async_runtime::spawn(async move {
            if let Err(err) = service.set_orb_shown(false).await {
                tracing::warn!(%err, "cannot tell the service the orb is hidden");
            }
        });
    }
    talk
}
