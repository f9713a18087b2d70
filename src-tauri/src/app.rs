//! Start-up: settings, store, backend and service, then the Tauri app with its windows, tray,
//! shortcut and the single-instance hand-over.

use anyhow::Context as _;
use jarvis::session::{self, Session};
use tauri::Manager;

use crate::state::{AppState, Startup};
use crate::tray::Action;

/// Runs the app; `keys` are the API keys taken out of the environment at start.
pub fn run(keys: Vec<(&'static str, String)>) -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("JARVIS_LOG").unwrap_or_else(|_| {
                format!(
                    "warn,jarvis=info,jarvis_desktop=info,{}",
                    jarvis::voice::QUIET_LOGS
                )
                .into()
            }),
        )
        .with_writer(std::io::stderr)
        // Colour only on a terminal: a log piped to a file or a collector is plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();

    crate::milestone_at("process start");
    // The service runs on Tauri's own tokio runtime, like every command.
    let opened = tauri::async_runtime::block_on(async {
        Session::open(
            session::process_env_with(keys.clone()),
            session::device_parts(),
        )
    });
    let session = match opened {
        Ok(session) => session,
        Err(err) => match session::StartupProblem::of(&err) {
            // An unusable database: the chat window says why and offers the way out.
            Some(problem) => return unusable_database(problem, keys),
            None => return Err(err.into()),
        },
    };
    drop(keys);
    let state = AppState::new(session);

    crate::milestone_at("service started");
    tauri::Builder::default()
        // First, so a second start hands over its action and ends before anything else starts.
        .plugin(tauri_plugin_single_instance::init(|app, args, _cwd| {
            let action = match Action::from_args(&args) {
                Some(action) => action,
                // The autostart entry run again while Jarvis runs: it stays as it is.
                None if args.iter().any(|a| a == session::autostart::START_HIDDEN) => return,
                None => Action::ShowChat,
            };
            crate::tray::perform(app, action);
        }))
        .plugin(navigation_guard())
        .plugin(tauri_plugin_dialog::init())
        .plugin(tauri_plugin_opener::init())
        .plugin(crate::shortcut::plugin())
        // Where the orb (and the chat window) was put, and the chat window's size.
        .plugin(
            tauri_plugin_window_state::Builder::default()
                .with_state_flags(
                    tauri_plugin_window_state::StateFlags::POSITION
                        | tauri_plugin_window_state::StateFlags::SIZE,
                )
                .build(),
        )
        .manage(state)
        .manage(crate::shortcut::PortalBinding::default())
        .manage(Startup(None, Vec::new()))
        .invoke_handler(crate::commands::handler())
        .on_page_load(|webview, payload| {
            match payload.event() {
                // A reload (or a navigation) leaves its attachments behind.
                tauri::webview::PageLoadEvent::Started => {
                    webview.state::<AppState>().detach(webview.label())
                }
                tauri::webview::PageLoadEvent::Finished
                    if webview.label() == crate::windows::CHAT =>
                {
                    static LOADED: std::sync::Once = std::sync::Once::new();
                    crate::milestone("chat page loaded", &LOADED);
                }
                tauri::webview::PageLoadEvent::Finished => {}
            }
        })
        .on_window_event(crate::windows::on_event)
        .setup(move |app| {
            crate::milestone_at("setup");
            app.manage(crate::shortcut::Edges::start(app.handle()));
            crate::tray::build(app.handle())?;
            let hidden = std::env::args().any(|a| a == session::autostart::START_HIDDEN);
            crate::windows::show_at_start(app.handle(), hidden);
            if hidden {
                // The chat page may not load unshown: what its loading starts starts now.
                crate::commands::chat_window_ready(app.handle());
            }
            if let Some(action) = Action::from_args(&std::env::args().collect::<Vec<_>>()) {
                crate::tray::perform(app.handle(), action);
            }
            crate::milestone_at("setup done");
            Ok(())
        })
        .build(tauri::generate_context!("../tauri.conf.json"))
        .context("cannot start the desktop app")?
        .run(|app, event| match event {
            // Closing the last window keeps Jarvis in the tray; only Quit (code set) ends it.
            tauri::RunEvent::ExitRequested {
                api, code: None, ..
            } => api.prevent_exit(),
            tauri::RunEvent::Exit => {
                // No listening thread may still run the speech models as the process ends.
                let session = app.state::<AppState>().session.clone();
                let voice = session.voice().clone();
                if !voice.stop_for_exit(std::time::Duration::from_secs(2)) {
                    tracing::warn!("the listening thread had not ended when Jarvis quit");
                }
                // The user's MCP servers end with Jarvis (a server's whole process group).
                let stopped = tauri::async_runtime::block_on(tokio::time::timeout(
                    std::time::Duration::from_secs(3),
                    session.stop_tools(),
                ));
                if stopped.is_err() {
                    tracing::warn!("the MCP servers had not all stopped when Jarvis quit");
                }
            }
            _ => {}
        });
    Ok(())
}

/// The app when its database cannot be used: the chat window alone, showing the reason and the
/// way out (move the file aside, keeping it, and start again; or quit). No service, tray, orb or
/// shortcut: nothing else can work without the chats. A second start brings this window up.
fn unusable_database(
    problem: session::StartupProblem,
    keys: Vec<(&'static str, String)>,
) -> anyhow::Result<()> {
    tracing::error!("{}", problem.reason);
    tauri::Builder::default()
        .plugin(tauri_plugin_single_instance::init(|app, _args, _cwd| {
            if let Some(window) = app.get_webview_window(crate::windows::CHAT) {
                let _ = window.show();
                let _ = window.set_focus();
            }
        }))
        .plugin(navigation_guard())
        .manage(Startup(Some(problem), keys))
        .invoke_handler(crate::commands::handler())
        .setup(|app| {
            // Never hidden: this window is the reason and the way out.
            crate::windows::show_at_start(app.handle(), false);
            Ok(())
        })
        .build(tauri::generate_context!("../tauri.conf.json"))
        .context("cannot start the desktop app")?
        // Closing the window ends it: there is no tray to stay in.
        .run(|_, _| {});
    Ok(())
}

/// No page may navigate away from the app's own pages (a link goes to the system browser).
fn navigation_guard() -> tauri::plugin::TauriPlugin<tauri::Wry> {
    tauri::plugin::Builder::<tauri::Wry>::new("navigation-guard")
        .on_navigation(|_webview, url| {
            let own = url.scheme() == "tauri" || url.host_str() == Some("tauri.localhost");
            if !own {
                tracing::warn!("blocked a navigation away from the app");
            }
            own
        })
        .build()
}
