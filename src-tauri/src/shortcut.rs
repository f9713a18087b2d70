//! The global push-to-talk shortcut: pressed, the microphone opens; released, the utterance ends.
//! It never cancels a reply. Both edges go to the service as they are. On X11 the key is grabbed
//! here (the global-shortcut plugin); on Wayland it is asked of the desktop through its portal
//! (`jarvis::session::shortcut`); where neither can be had, the chat window says how to bind a
//! key to `jarvis-desktop --action talk` by hand.

use anyhow::Context as _;
use jarvis::session::shortcut::{self as way, PortalShortcut, Way};
use tauri::{AppHandle, Manager, Runtime};
use tauri_plugin_global_shortcut::{GlobalShortcutExt, Shortcut, ShortcutState};

use crate::state::AppState;
use crate::windows::{self, ORB};

pub fn plugin() -> tauri::plugin::TauriPlugin<tauri::Wry> {
    tauri_plugin_global_shortcut::Builder::new()
        .with_handler(|app, _shortcut, event| edge(app, event.state() == ShortcutState::Pressed))
        .build()
}

/// The shortcut went down (`pressed`) or up, by whichever way it came.
fn edge(app: &AppHandle, pressed: bool) {
    let app = app.clone();
    tauri::async_runtime::spawn(async move {
        if pressed {
            show_orb(&app);
        }
        let service = app.state::<AppState>().service.clone();
        if let Err(err) = service.push_to_talk(pressed).await {
            tracing::warn!(%err, "push to talk");
        }
    });
}

/// The microphone's state is always visible: the orb shows it.
pub fn show_orb(app: &AppHandle) {
    if let Some(orb) = app.get_webview_window(ORB) {
        if !orb.is_visible().unwrap_or(true) {
            windows::show(app.app_handle(), ORB);
        }
    }
}

/// The shortcut bound through the desktop portal (Wayland), while it is; replaced when Settings
/// changes the key.
#[derive(Default)]
pub struct PortalBinding(tokio::sync::Mutex<Option<PortalShortcut>>);

/// Makes `text` the push-to-talk shortcut, replacing any other, the way this session allows,
/// and tells the session how it came in (Settings shows it). Through the portal this returns
/// once the desktop has answered (it may ask the user first). Where the desktop gives no
/// shortcut at all, that is said in Settings (with how to bind a key by hand) and in the log,
/// not as a problem in the chat window: a user who bound a key by hand would see it at every
/// start.
pub async fn register(app: &AppHandle, text: &str) -> anyhow::Result<()> {
    parse(text)?;
    let session = app.state::<AppState>().session.clone();
    let env = |name: &str| std::env::var(name).ok();
    let way = Way::find(&env).await;
    let registered = match &way {
        Way::X11 => {
            let (app, text) = (app.clone(), text.to_string());
            // Grabbing a key holds the thread ~100 ms.
            tauri::async_runtime::spawn_blocking(move || grab(&app, &text))
                .await?
                .map(|()| "Grabbed on this X11 display.".to_string())
        }
        Way::Portal { .. } => bind(app, text, &env).await.map(|trigger| {
            format!(
                "Bound by your desktop (Wayland, through its portal) as “{trigger}”; its \
                 keyboard settings can change the key."
            )
        }),
        Way::ByHand { why } => {
            tracing::warn!("push to talk has no shortcut on this desktop: {why}");
            Ok(format!(
                "This desktop gives no global shortcut ({why}). {}.",
                way::by_hand()
            ))
        }
    };
    match registered {
        Ok(said) => {
            session.set_shortcut_way(said);
            Ok(())
        }
        Err(err) => {
            session.set_shortcut_way(format!("{err:#}"));
            Err(err)
        }
    }
}

/// Binds `text` through the desktop portal, closing the session of the key it replaces; the key
/// as the desktop describes it.
async fn bind(
    app: &AppHandle,
    text: &str,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> anyhow::Result<String> {
    let binding = app.state::<PortalBinding>();
    let mut held = binding.0.lock().await;
    if let Some(old) = held.take() {
        old.close().await;
    }
    let bus = way::session_bus(env).await?;
    let handle = app.clone();
    let bound = PortalShortcut::bind(bus, text, move |pressed| edge(&handle, pressed))
        .await
        .with_context(|| format!("cannot bind the push-to-talk shortcut {text}"))?;
    let trigger = bound.trigger().to_string();
    tracing::info!(%trigger, "the push-to-talk shortcut is bound through the desktop portal");
    *held = Some(bound);
    Ok(trigger)
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

/// Grabs `text` on the X11 display, replacing any other.
fn grab<R: Runtime>(app: &AppHandle<R>, text: &str) -> anyhow::Result<()> {
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
