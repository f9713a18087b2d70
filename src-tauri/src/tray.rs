//! The tray icon and its menu. Its actions are also what a second start of the app hands over
//! (`jarvis-desktop --action stop-reply`), so one path serves both.

use tauri::menu::{Menu, MenuItem, PredefinedMenuItem};
use tauri::tray::TrayIconBuilder;
use tauri::{AppHandle, Emitter, Manager, Wry};
use tauri_plugin_dialog::{DialogExt, MessageDialogButtons, MessageDialogKind};

use crate::state::AppState;
use crate::windows::{self, CHAT, ORB};

/// What the tray menu (or a second start) asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    ShowChat,
    ShowOrb,
    StopReply,
    EndConversation,
    Settings,
    /// A key bound by hand (`jarvis-desktop --action talk`): each press opens the microphone
    /// or ends the utterance. Not in the menu.
    Talk,
    Quit,
}

impl Action {
    const ALL: [(Action, &'static str); 7] = [
        (Action::ShowChat, "show-chat"),
        (Action::ShowOrb, "show-orb"),
        (Action::StopReply, "stop-reply"),
        (Action::EndConversation, "end-conversation"),
        (Action::Settings, "settings"),
        (Action::Talk, "talk"),
        (Action::Quit, "quit"),
    ];

    pub fn id(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(a, _)| *a == self)
            .map(|(_, id)| *id)
            .unwrap_or("show-chat")
    }

    fn from_id(id: &str) -> Option<Action> {
        Self::ALL.iter().find(|(_, i)| *i == id).map(|(a, _)| *a)
    }

    /// `--action NAME` among a command line's arguments.
    pub fn from_args(args: &[String]) -> Option<Action> {
        let at = args.iter().position(|a| a == "--action")?;
        Self::from_id(args.get(at + 1)?)
    }
}

pub fn perform(app: &AppHandle, action: Action) {
    tracing::debug!(?action, "tray action");
    match action {
        Action::ShowChat => windows::show(app, CHAT),
        Action::ShowOrb => windows::show(app, ORB),
        Action::Settings => {
            windows::show(app, CHAT);
            let _ = app.emit_to(CHAT, "open-settings", ());
        }
        Action::StopReply => {
            let service = app.state::<AppState>().service.clone();
            tauri::async_runtime::spawn(async move {
                match service.stop_all().await {
                    Ok(n) => tracing::info!(stopped = n, "stop reply"),
                    Err(err) => tracing::warn!(%err, "stop reply"),
                }
            });
        }
        Action::EndConversation => {
            let service = app.state::<AppState>().service.clone();
            tauri::async_runtime::spawn(async move {
                if let Err(err) = service.end_conversation().await {
                    tracing::warn!(%err, "end conversation");
                }
            });
        }
        Action::Talk => {
            if app.get_webview_window(ORB).is_some() {
                crate::shortcut::send(app, crate::shortcut::Edge::Talk);
            } else {
                // Jarvis is starting (this press started it): the orb is made once the chat
                // window is ready, and shown for this press.
                windows::talk_once_the_orb_is_made();
            }
        }
        Action::Quit => quit(app),
    }
}

/// Quits; asks first when a reply is being written, since quitting stops it.
fn quit(app: &AppHandle) {
    let replying = app
        .state::<AppState>()
        .service
        .activity()
        .borrow()
        .can_stop();
    if !replying {
        app.exit(0);
        return;
    }
    let handle = app.clone();
    app.dialog()
        .message("Jarvis is still replying. Quitting stops the reply; what it has written so far is kept.")
        .title("Quit Jarvis?")
        .kind(MessageDialogKind::Warning)
        .buttons(MessageDialogButtons::OkCancelCustom(
            "Quit".into(),
            "Keep running".into(),
        ))
        .show(move |quit| {
            if quit {
                handle.exit(0);
            }
        });
}

pub fn build(app: &AppHandle) -> tauri::Result<()> {
    let item = |action: Action, text: &str, enabled: bool| {
        MenuItem::with_id(app, action.id(), text, enabled, None::<&str>)
    };
    let stop = item(Action::StopReply, "Stop reply", false)?;
    let end = item(Action::EndConversation, "End conversation", false)?;
    let menu: Menu<Wry> = Menu::with_items(
        app,
        &[
            &item(Action::ShowChat, "Show chat", true)?,
            &item(Action::ShowOrb, "Show orb", true)?,
            &PredefinedMenuItem::separator(app)?,
            &stop,
            &end,
            &PredefinedMenuItem::separator(app)?,
            &item(Action::Settings, "Settings", true)?,
            &item(Action::Quit, "Quit", true)?,
        ],
    )?;
    let mut tray = TrayIconBuilder::with_id("jarvis")
        .tooltip("Jarvis")
        .menu(&menu)
        .on_menu_event(|app, event| {
            if let Some(action) = Action::from_id(event.id().as_ref()) {
                perform(app, action);
            }
        });
    let icons = app
        .default_window_icon()
        .map(|icon| (icon.clone().to_owned(), with_microphone_mark(icon)));
    if let Some((icon, _)) = &icons {
        tray = tray.icon(icon.clone());
    }
    let tray = tray.build(app)?;

    // The microphone's state is always visible: whenever it is open (the orb shown, or the wake
    // word kept on while it is hidden) the tray icon carries a red mark and says so.
    let mut voice = app.state::<AppState>().service.voice_status();
    let handle = app.clone();
    tauri::async_runtime::spawn(async move {
        let mut shown = None;
        let mut awake = false;
        loop {
            let (listening, now_awake) = {
                let status = voice.borrow_and_update();
                (status.listening, status.awake)
            };
            if now_awake && !awake {
                // "Hey Jarvis" heard with the orb hidden (the wake word kept on): the orb comes
                // up, as for push to talk, so the conversation is seen and its answers heard.
                let hidden = handle
                    .get_webview_window(ORB)
                    .is_some_and(|orb| !orb.is_visible().unwrap_or(true));
                if hidden {
                    windows::show(&handle, ORB);
                }
            }
            awake = now_awake;
            if shown != Some(listening) {
                shown = Some(listening);
                if let Some((plain, marked)) = &icons {
                    let icon = if listening { marked } else { plain };
                    let _ = tray.set_icon(Some(icon.clone()));
                }
                let _ = tray.set_tooltip(Some(if listening {
                    "Jarvis — microphone on"
                } else {
                    "Jarvis"
                }));
            }
            if voice.changed().await.is_err() {
                break;
            }
        }
    });

    // Stop reply and End conversation are enabled only when there is something to stop or end.
    let mut activity = app.state::<AppState>().service.activity();
    tauri::async_runtime::spawn(async move {
        loop {
            let (can_stop, conversation) = {
                let a = activity.borrow_and_update();
                (a.can_stop(), a.conversation)
            };
            let _ = stop.set_enabled(can_stop);
            let _ = end.set_enabled(conversation);
            if activity.changed().await.is_err() {
                break;
            }
        }
    });
    Ok(())
}

/// The icon with a red dot in its lower right quarter: the microphone is open.
fn with_microphone_mark(icon: &tauri::image::Image<'_>) -> tauri::image::Image<'static> {
    let (width, height) = (icon.width(), icon.height());
    let mut rgba = icon.rgba().to_vec();
    let radius = f64::from(width.min(height)) * 0.22;
    let (cx, cy) = (
        f64::from(width) - radius - 1.0,
        f64::from(height) - radius - 1.0,
    );
    for y in 0..height {
        for x in 0..width {
            let (dx, dy) = (f64::from(x) + 0.5 - cx, f64::from(y) + 0.5 - cy);
            let distance = (dx * dx + dy * dy).sqrt();
            let at = ((y * width + x) * 4) as usize;
            if distance <= radius {
                rgba[at..at + 4].copy_from_slice(&[0xe5, 0x1c, 0x23, 0xff]);
            } else if distance <= radius + 1.5 {
                // A white ring keeps the dot visible on a red or dark icon.
                rgba[at..at + 4].copy_from_slice(&[0xff, 0xff, 0xff, 0xff]);
            }
        }
    }
    tauri::image::Image::new_owned(rgba, width, height)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_microphone_mark_is_a_red_dot_in_the_lower_right_corner() {
        let plain = tauri::image::Image::new_owned(vec![0; 32 * 32 * 4], 32, 32);
        let marked = with_microphone_mark(&plain);
        let pixel = |x: u32, y: u32| {
            let at = ((y * 32 + x) * 4) as usize;
            marked.rgba()[at..at + 4].to_vec()
        };
        assert_eq!(pixel(25, 25), [0xe5, 0x1c, 0x23, 0xff]);
        assert_eq!(pixel(4, 4), [0, 0, 0, 0], "the rest is untouched");
    }

    #[test]
    fn a_second_start_names_its_action_by_the_tray_items_id() {
        for (action, id) in Action::ALL {
            assert_eq!(action.id(), id);
            assert_eq!(
                Action::from_args(&args(&["jarvis-desktop", "--action", id])),
                Some(action)
            );
        }
        assert_eq!(Action::from_args(&args(&["jarvis-desktop"])), None);
        assert_eq!(
            Action::from_args(&args(&["jarvis-desktop", "--action"])),
            None
        );
        assert_eq!(
            Action::from_args(&args(&["jarvis-desktop", "--action", "format-disk"])),
            None
        );
    }
}
