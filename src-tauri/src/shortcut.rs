//! The global push-to-talk shortcut: pressed, the microphone opens; released, the utterance ends.
//! It never cancels a reply. Both edges go to the service as they are. On X11 the key is grabbed
//! here (the global-shortcut plugin); on Wayland it is asked of the desktop through its portal
//! (`jarvis::session::shortcut`); where neither can be had, the chat window says how to bind a
//! key to `jarvis-desktop --action talk` by hand.

use std::time::Duration;

use anyhow::Context as _;
use jarvis::session::shortcut::{self as way, PortalShortcut, Way};
use tauri::{AppHandle, Manager, Runtime};
use tauri_plugin_global_shortcut::{GlobalShortcutExt, Shortcut, ShortcutState};

use crate::state::AppState;
use crate::windows::{self, ORB};

pub fn plugin() -> tauri::plugin::TauriPlugin<tauri::Wry> {
    tauri_plugin_global_shortcut::Builder::new()
        .with_handler(|app, _shortcut, event| {
            send(
                app,
                if event.state() == ShortcutState::Pressed {
                    Edge::Down
                } else {
                    Edge::Up
                },
            )
        })
        .build()
}

/// What the push-to-talk key did, by whichever way it came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Edge {
    /// Pressed: the orb shows and the microphone opens.
    Down,
    /// Released: the utterance ends.
    Up,
    /// A key bound by hand was pressed (no release comes): the microphone opens, or the
    /// utterance it holds open ends.
    Talk,
}

/// The key's edges, handled one after the other in the order they came: a press shows the orb
/// first (the main thread's work), and a release handled beside it could overtake it and leave
/// the microphone open after a quick tap.
pub struct Edges(tokio::sync::mpsc::UnboundedSender<Edge>);

impl Edges {
    /// The task that handles them, for `app`.
    pub fn start(app: &AppHandle) -> Edges {
        let (sender, mut edges) = tokio::sync::mpsc::unbounded_channel();
        let app = app.clone();
        tauri::async_runtime::spawn(async move {
            while let Some(edge) = edges.recv().await {
                if edge != Edge::Up {
                    show_orb(&app);
                }
                let service = app.state::<AppState>().service.clone();
                let done = match edge {
                    Edge::Down => service.push_to_talk(true).await,
                    Edge::Up => service.push_to_talk(false).await,
                    Edge::Talk => service.talk().await,
                };
                if let Err(err) = done {
                    tracing::warn!(%err, ?edge, "push to talk");
                }
            }
        });
        Edges(sender)
    }
}

/// Hands `edge` to the app's [`Edges`].
pub fn send(app: &AppHandle, edge: Edge) {
    match app.try_state::<Edges>() {
        Some(edges) => {
            let _ = edges.0.send(edge);
        }
        None => tracing::warn!(?edge, "the push-to-talk key came before the app was set up"),
    }
}

/// The microphone's state is always visible: the orb shows it.
fn show_orb(app: &AppHandle) {
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

/// How long the desktop portal may take to say whether it is there: one started on demand at
/// login may be slow (`jarvis doctor` gives it 5 s).
const PORTAL_WAIT: Duration = Duration::from_secs(25);

/// How long the desktop may take to bind the key: it may ask the user first, in a dialog.
const BIND_WAIT: Duration = Duration::from_secs(180);

/// Makes the settings' push-to-talk shortcut (`text`, checked here) the one in force, replacing
/// any other, the way this session allows, and tells the session how it came in (Settings
/// shows it). On Wayland the desktop is asked in the background (it may ask the user first in a
/// dialog): this returns at once, and Settings says what came of it. Where the desktop gives
/// no shortcut at all, that is said in Settings (with how to bind a key by hand) and in the
/// log, not as a problem in the chat window: a user who bound a key by hand would see it at
/// every start.
pub async fn register(app: &AppHandle, text: &str) -> anyhow::Result<()> {
    parse(text)?;
    let session = app.state::<AppState>().session.clone();
    let env = |name: &str| std::env::var(name).ok();
    match Way::find_within(&env, PORTAL_WAIT).await {
        Way::X11 => {
            let (app, text) = (app.clone(), text.to_string());
            // Grabbing a key holds the thread ~100 ms.
            let grabbed = tauri::async_runtime::spawn_blocking(move || grab(&app, &text)).await?;
            session.set_shortcut_way(match &grabbed {
                Ok(()) => "Grabbed on this X11 display.".to_string(),
                Err(err) => format!("{err:#}"),
            });
            grabbed
        }
        Way::Portal { .. } => {
            let app = app.clone();
            tauri::async_runtime::spawn(async move {
                let said = match bind(&app).await {
                    Ok(Some(trigger)) => format!(
                        "Bound by your desktop (Wayland, through its portal) as “{trigger}”; its \
                         keyboard settings can change the key."
                    ),
                    Ok(None) => format!(
                        "Asked of your desktop (Wayland, through its portal), which gave it no \
                         key: give “{}” a key in its keyboard settings.",
                        way::SHORTCUT_DESCRIPTION
                    ),
                    Err(err) => {
                        tracing::warn!("{err:#}");
                        format!("{err:#}. {}.", way::by_hand())
                    }
                };
                app.state::<AppState>().session.set_shortcut_way(said);
            });
            Ok(())
        }
        Way::ByHand { why } => {
            tracing::warn!("push to talk has no shortcut on this desktop: {why}");
            session.set_shortcut_way(format!(
                "This desktop gives no global shortcut ({why}). {}.",
                way::by_hand()
            ));
            Ok(())
        }
    }
}

/// Binds the settings' shortcut through the desktop portal — read once the binding before it is
/// done, so the last one saved is the one bound — and then closes the session of the key it
/// replaces (a bind that fails keeps the old key); the key as the desktop describes it, none
/// where it gave none.
async fn bind(app: &AppHandle) -> anyhow::Result<Option<String>> {
    let binding = app.state::<PortalBinding>();
    let mut held = binding.0.lock().await;
    let session = app.state::<AppState>().session.clone();
    let text = session.settings().desktop.shortcut.trim().to_string();
    let env = |name: &str| std::env::var(name).ok();
    let bus = way::session_bus(&env).await?;
    let handle = app.clone();
    let bound = tokio::time::timeout(
        BIND_WAIT,
        PortalShortcut::bind(bus, &text, move |pressed| {
            send(&handle, if pressed { Edge::Down } else { Edge::Up })
        }),
    )
    .await
    .map_err(|_| {
        anyhow::anyhow!(
            "the desktop did not bind the push-to-talk shortcut {text} within {} minutes",
            BIND_WAIT.as_secs() / 60
        )
    })?
    .with_context(|| format!("cannot bind the push-to-talk shortcut {text}"))?;
    let trigger = bound.trigger().map(str::to_string);
    tracing::info!(
        ?trigger,
        "the push-to-talk shortcut is bound through the desktop portal"
    );
    if let Some(old) = held.replace(bound) {
        old.close().await;
    }
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
