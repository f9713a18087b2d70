//! The global push-to-talk shortcut: pressed, the microphone opens; released, the utterance ends.
//! It never cancels a reply. Both edges go to the service as they are.

use anyhow::Context as _;
use tauri::{AppHandle, Manager, Runtime};
use tauri_plugin_global_shortcut::{GlobalShortcutExt, Shortcut, ShortcutState};

use crate::state::AppState;
use crate::windows::{self, ORB};

pub fn plugin() -> tauri::plugin::TauriPlugin<tauri::Wry> {
    tauri_plugin_global_shortcut::Builder::new()
        .with_handler(|app, _shortcut, event| {
            let pressed = event.state() == ShortcutState::Pressed;
            let app = app.clone();
            tauri::async_runtime::spawn(async move {
                if pressed {
                    // The microphone's state is always visible: the orb shows it.
                    if let Some(orb) = app.get_webview_window(ORB) {
                        if !orb.is_visible().unwrap_or(true) {
                            windows::show(app.app_handle(), ORB);
                        }
                    }
                }
                let service = app.state::<AppState>().service.clone();
                if let Err(err) = service.push_to_talk(pressed).await {
                    tracing::warn!(%err, "push to talk");
                }
            });
        })
        .build()
}

/// Parses a shortcut as Settings writes it, e.g. `Ctrl+Alt+Space`.
pub fn parse(text: &str) -> anyhow::Result<Shortcut> {
    text.trim()
        .parse::<Shortcut>()
        .map_err(|err| anyhow::anyhow!("{err}"))
        .with_context(|| {
            format!(
                "the push-to-talk shortcut {text:?} is not valid; use one such as Ctrl+Alt+Space"
            )
        })
}

/// Makes `text` the push-to-talk shortcut, replacing any other.
pub fn register<R: Runtime>(app: &AppHandle<R>, text: &str) -> anyhow::Result<()> {
    let shortcut = parse(text)?;
    let shortcuts = app.global_shortcut();
    shortcuts
        .unregister_all()
        .context("cannot release the old push-to-talk shortcut")?;
    shortcuts.register(shortcut).with_context(|| {
        format!("cannot register the push-to-talk shortcut {text}; another program may hold it")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_shortcut_parses_and_a_bad_one_says_what_to_write() {
        assert!(parse("Ctrl+Alt+Space").is_ok());
        assert!(parse(" ctrl+shift+J ").is_ok());
        let err = format!("{:#}", parse("Ctrl+Banana").unwrap_err());
        assert!(err.contains("\"Ctrl+Banana\" is not valid"), "{err}");
        assert!(err.contains("Ctrl+Alt+Space"), "{err}");
    }
}
