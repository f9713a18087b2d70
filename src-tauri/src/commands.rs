//! The commands the pages call. Each forwards to the service (or the settings) and returns; the
//! attach commands start a forwarding task that ends when the window detaches.

use jarvis::service::{Activity, ListenMode, VoiceTicket, VoiceUpdate};
use jarvis::session::tools::{ServerForm, ToolsView};
use jarvis::session::{
    AppInfo, Asked, ModelEntry, ModelsView, PullStatus, SettingsForm, SettingsView, StartupProblem,
};
use jarvis::store::{Chat, Record};
use jarvis::{ChatId, Event, ReplyId};
use serde::Serialize;
use tauri::ipc::Channel;
use tauri::{AppHandle, Emitter, Manager, State, WebviewWindow};

use crate::state::{AppState, Startup};
use crate::windows::{self, CHAT, ORB};

/// What a page sees of a failed command: the message, whole.
pub struct CmdError(anyhow::Error);

impl<E: Into<anyhow::Error>> From<E> for CmdError {
    fn from(err: E) -> Self {
        CmdError(err.into())
    }
}

impl Serialize for CmdError {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{:#}", self.0))
    }
}

type Res<T> = Result<T, CmdError>;

pub fn handler() -> impl Fn(tauri::ipc::Invoke) -> bool + Send + Sync + 'static {
    tauri::generate_handler![
        startup_problem,
        move_database_aside,
        quit_app,
        app_info,
        list_chats,
        rename_chat,
        delete_chat,
        start_afresh,
        chat_records,
        ask,
        retry,
        stop_reply,
        consent,
        attach_chat,
        watch_activity,
        get_settings,
        save_settings,
        microphones,
        open_link,
        show_window,
        orb_attach,
        orb_ask,
        orb_remove,
        orb_stop,
        orb_end,
        orb_set_mode,
        orb_acknowledge,
        orb_retry,
        read_aloud,
        orb_listen,
        orb_hide,
        orb_problems,
        orb_levels,
        list_facts,
        add_fact,
        edit_fact,
        remove_fact,
        list_summaries,
        delete_summary,
        set_earlier_conversations,
        chat_request,
        tools_view,
        add_tool_server,
        remove_tool_server,
        set_tool_approval,
        ask_tool_again,
        models_view,
        model_offer,
        dismiss_model_offer,
        pull_model,
        stop_pull,
        watch_pull,
        use_model,
        use_served_model,
        remove_model,
    ]
}

/// Why Jarvis could not open its chats at start; `None` when it did. The chat page asks first.
#[tauri::command]
fn startup_problem(startup: State<'_, Startup>) -> Option<StartupProblem> {
    startup.0.clone()
}

/// Moves the unusable database aside (kept, renamed) and starts Jarvis again on a fresh one.
#[tauri::command]
fn move_database_aside(app: AppHandle, startup: State<'_, Startup>) -> Res<()> {
    let Some(problem) = startup.0.as_ref().filter(|p| p.can_move_aside) else {
        return Err(anyhow::anyhow!("there is no database to move aside").into());
    };
    let aside = jarvis::session::move_database_aside(std::path::Path::new(&problem.database))
        .map_err(|e| anyhow::anyhow!("cannot move {} aside: {e}", problem.database))?;
    eprintln!(
        "jarvis-desktop: moved {} aside to {}; starting again",
        problem.database,
        aside.display()
    );
    // As `AppHandle::restart`, but the new Jarvis is given the API keys this one took out of
    // its environment at start (it inherits that environment, which no longer has them).
    app.cleanup_before_exit();
    let env = app.env();
    match tauri::process::current_binary(&env) {
        Ok(exe) => {
            let started = std::process::Command::new(exe)
                .args(env.args_os.iter().skip(1))
                .envs(startup.1.iter().map(|(k, v)| (k, v)))
                .spawn();
            if let Err(err) = started {
                eprintln!("jarvis-desktop: cannot start again: {err}");
            }
        }
        Err(err) => eprintln!("jarvis-desktop: cannot find this program to start again: {err}"),
    }
    std::process::exit(0)
}

/// Ends the app (the chat window's way out when the database cannot be used).
#[tauri::command]
fn quit_app(app: AppHandle) {
    app.exit(0);
}

#[tauri::command]
fn app_info(window: WebviewWindow, state: State<'_, AppState>) -> AppInfo {
    crate::milestone_at(&format!("{} page asked for app_info", window.label()));
    state.session.app_info()
}

#[tauri::command]
async fn list_chats(app: AppHandle, state: State<'_, AppState>) -> Res<Vec<Chat>> {
    let chats = state.service.chats().await?;
    // The chat page lists the chats last in its start-up: from here it is usable.
    static READY: std::sync::Once = std::sync::Once::new();
    crate::milestone("chat window ready", &READY);
    chat_window_ready(&app);
    Ok(chats)
}

/// Once the chat window is usable: the orb is made, the shortcut registered and the voice loop
/// started. The first two hold the main thread (a new webview starts its WebKit process;
/// grabbing a key takes ~100 ms), on which the chat page's first calls wait: done during
/// start-up they delayed the chat window by 0.5 s each (measured).
pub fn chat_window_ready(app: &AppHandle) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let handle = app.clone();
        let _ = app.run_on_main_thread(move || {
            if windows::create_orb(&handle) {
                crate::shortcut::send(&handle, crate::shortcut::Edge::Talk);
            }
        });
        let handle = app.clone();
        tauri::async_runtime::spawn(async move {
            let state = handle.state::<AppState>();
            let shortcut = state.session.settings().desktop.shortcut;
            let registered = crate::shortcut::register(&handle, &shortcut).await;
            crate::milestone_at("shortcut registered");
            if let Err(err) = registered {
                tracing::warn!("{err:#}");
                state.session.report_problem(format!("{err:#}"));
            }
        });
        let session = app.state::<AppState>().session.clone();
        // A new chat's first question: the system prompt is made ready (a chat the page opens
        // replaces this with its own history, which begins the same way) — not while Jarvis
        // waits hidden at login, where the model would hold memory nobody asked for yet.
        let shown = app
            .get_webview_window(windows::CHAT)
            .is_some_and(|w| w.is_visible().unwrap_or(false));
        tauri::async_runtime::spawn(async move {
            if shown {
                session.warm(None).await;
            }
            session.start_voice().await
        });
    });
}

#[tauri::command]
async fn rename_chat(state: State<'_, AppState>, chat: ChatId, title: String) -> Res<()> {
    if title.trim().is_empty() {
        return Err(anyhow::anyhow!("a chat's title cannot be empty").into());
    }
    Ok(state.service.rename_chat(chat, title).await?)
}

#[tauri::command]
async fn delete_chat(state: State<'_, AppState>, chat: ChatId) -> Res<()> {
    Ok(state.service.delete_chat(chat).await?)
}

/// Keeps the chat but lets the model see only what is said from now on; returns the seq of the
/// first record it will see.
#[tauri::command]
async fn start_afresh(state: State<'_, AppState>, chat: ChatId) -> Res<i64> {
    Ok(state.service.start_afresh(chat).await?)
}

#[tauri::command]
async fn chat_records(state: State<'_, AppState>, chat: ChatId) -> Res<Vec<Record>> {
    Ok(state.service.records(chat).await?)
}

/// Asks in `chat`, or in a new chat when none is given (the first question names it).
#[tauri::command]
async fn ask(state: State<'_, AppState>, chat: Option<ChatId>, text: String) -> Res<Asked> {
    Ok(state.session.ask(chat, text).await?)
}

#[tauri::command]
async fn retry(state: State<'_, AppState>, chat: ChatId) -> Res<ReplyId> {
    Ok(state.service.retry(chat).await?)
}

#[tauri::command]
async fn stop_reply(state: State<'_, AppState>, chat: ChatId) -> Res<bool> {
    Ok(state.service.stop(chat).await?)
}

/// The user's answer to a tool call that waits for it (the chat's action card); false when the
/// call no longer waits.
#[tauri::command]
fn consent(
    state: State<'_, AppState>,
    reply: jarvis::ReplyId,
    call: String,
    consent: jarvis::Consent,
) -> bool {
    state.service.consent(reply, &call, consent)
}

/// Attaches the calling window to a chat: its current (or last) reply from the first event, then
/// live. The window's previous chat attachment ends.
#[tauri::command]
async fn attach_chat(
    window: WebviewWindow,
    state: State<'_, AppState>,
    chat: ChatId,
    on_event: Channel<Event>,
) -> Res<()> {
    let mut attachment = state.service.attach(chat).await?;
    let task = tauri::async_runtime::spawn(async move {
        while let Some(event) = attachment.next().await {
            if on_event.send(event).is_err() {
                break;
            }
        }
    });
    state.forward(window.label(), "chat", task);
    // The chat shown is the one likely asked next: its history is made ready (not by a page
    // loaded unshown, as at login).
    if window.is_visible().unwrap_or(false) {
        state.session.warm(Some(chat)).await;
    }
    Ok(())
}

/// Streams what is going on (replying chats, the voice queue, chat list changes).
#[tauri::command]
async fn watch_activity(
    window: WebviewWindow,
    state: State<'_, AppState>,
    on_change: Channel<Activity>,
) -> Res<()> {
    let mut activity = state.service.activity();
    let task = tauri::async_runtime::spawn(async move {
        loop {
            let now = activity.borrow_and_update().clone();
            if on_change.send(now).is_err() || activity.changed().await.is_err() {
                break;
            }
        }
    });
    state.forward(window.label(), "activity", task);
    Ok(())
}

/// Async, so off the main thread: the OS keyring it asks may wait for an unlock, or hang.
#[tauri::command]
async fn get_settings(state: State<'_, AppState>) -> Res<SettingsView> {
    Ok(state.session.view().await)
}

#[tauri::command]
async fn save_settings(
    app: AppHandle,
    state: State<'_, AppState>,
    form: SettingsForm,
) -> Res<SettingsView> {
    crate::shortcut::parse(form.shortcut.trim())?;
    let applied = state.session.apply(form).await?;
    if let Some(shortcut) = &applied.shortcut {
        crate::shortcut::register(&app, shortcut).await?;
    }
    let _ = app.emit("theme-changed", applied.theme);
    Ok(state.session.view().await)
}

/// The microphones Settings offers: the system's input devices, the default first.
#[tauri::command]
async fn microphones() -> Res<jarvis::voice::device::Microphones> {
    // The sound server is asked on a thread of its own: it may take a moment.
    Ok(tauri::async_runtime::spawn_blocking(jarvis::voice::device::microphones).await??)
}

/// Opens a link of a reply in the system browser, never in the webview.
#[tauri::command]
fn open_link(url: String) -> Res<()> {
    let Some(link) = link_to_open(&url) else {
        return Err(anyhow::anyhow!("only web and mail links are opened").into());
    };
    tauri_plugin_opener::open_url(link, None::<&str>)?;
    Ok(())
}

/// The link a reply's click opens: a web link as it is; a mail link to its addresses only — its
/// query (`?attach=~/.ssh/id_rsa`, a prefilled body or copy) is the answer's, not the user's,
/// and is dropped (an address with `%` escapes is not opened). `None` for any other scheme.
fn link_to_open(url: &str) -> Option<&str> {
    let link = url.trim();
    let lower = link.to_ascii_lowercase();
    if lower.starts_with("https://") || lower.starts_with("http://") {
        return Some(link);
    }
    if lower.starts_with("mailto:") {
        let to = link.split(['?', '#']).next().unwrap_or(link);
        // An escaped `?` (%3F) would be a query again once the mail program decodes it.
        return (to.len() > "mailto:".len() && !to.contains('%')).then_some(to);
    }
    None
}

#[tauri::command]
fn show_window(app: AppHandle, label: String) -> Res<()> {
    match label.as_str() {
        CHAT | ORB => {
            windows::show(&app, &label);
            Ok(())
        }
        _ => Err(anyhow::anyhow!("no window {label:?}").into()),
    }
}

/// Attaches the orb to the voice conversation: its status, then its replies' events. Never opens
/// the microphone.
#[tauri::command]
async fn orb_attach(
    window: WebviewWindow,
    state: State<'_, AppState>,
    on_update: Channel<VoiceUpdate>,
) -> Res<()> {
    // An orb made hidden (hidden when Jarvis last quit) watches nothing: the voice conversation
    // is then unwatched, as with the orb hidden later. Shown, its page attaches again.
    if !window.is_visible().unwrap_or(false) {
        return Ok(());
    }
    let mut attachment = state.service.voice_attach().await?;
    let task = tauri::async_runtime::spawn(async move {
        while let Some(update) = attachment.next().await {
            if on_update.send(update).is_err() {
                break;
            }
        }
    });
    state.forward(window.label(), "voice", task);
    Ok(())
}

#[tauri::command]
async fn orb_ask(state: State<'_, AppState>, text: String) -> Res<VoiceTicket> {
    Ok(state.service.voice_ask(text).await?)
}

#[tauri::command]
async fn orb_remove(state: State<'_, AppState>, id: u64) -> Res<bool> {
    Ok(state.service.voice_remove(id).await?)
}

#[tauri::command]
async fn orb_stop(state: State<'_, AppState>) -> Res<bool> {
    Ok(state.service.voice_stop().await?)
}

#[tauri::command]
async fn orb_end(state: State<'_, AppState>) -> Res<bool> {
    Ok(state.service.end_conversation().await?)
}

#[tauri::command]
async fn orb_set_mode(state: State<'_, AppState>, mode: ListenMode) -> Res<()> {
    Ok(state.service.set_listen_mode(mode).await?)
}

/// Play answer: reads the answer given while away aloud (when the voice loop runs) and clears
/// the mark.
#[tauri::command]
async fn orb_acknowledge(state: State<'_, AppState>) -> Res<()> {
    Ok(state.session.voice().acknowledge().await?)
}

/// Try again in the orb: the voice conversation's failed or interrupted question, once more.
#[tauri::command]
async fn orb_retry(state: State<'_, AppState>) -> Res<jarvis::ReplyId> {
    Ok(state.service.voice_retry().await?)
}

/// Read aloud (the chat window) and Play (the orb): any finished reply, spoken by the voice
/// loop; the history is unchanged.
#[tauri::command]
async fn read_aloud(state: State<'_, AppState>, reply: jarvis::ReplyId) -> Res<()> {
    tracing::debug!(%reply, "read aloud asked");
    state
        .session
        .voice()
        .replay(reply)
        .await
        .map_err(|problem| anyhow::anyhow!("Jarvis cannot speak: {problem}").into())
}

/// Switches the microphone on or off in hands-free and wake modes. Refused, with the reason,
/// when the voice loop cannot listen (a missing speech model, no microphone).
#[tauri::command]
async fn orb_listen(state: State<'_, AppState>, on: bool) -> Res<()> {
    if on {
        if let Err(problem) = state.session.voice().can_listen() {
            return Err(anyhow::anyhow!("Jarvis cannot listen: {problem}").into());
        }
    }
    Ok(state.service.set_listening(on).await?)
}

/// Why Jarvis cannot listen or speak, now and whenever it changes (`None`: the voice works).
#[tauri::command]
fn orb_problems(
    window: WebviewWindow,
    state: State<'_, AppState>,
    on_problem: Channel<Option<String>>,
) -> Res<()> {
    let problems = state.session.voice().problems();
    forward_watch(
        &state,
        window.label(),
        "voice problems",
        problems,
        on_problem,
    );
    Ok(())
}

/// Sends a watch's value to a page's channel, now and at every change, until the page goes; the
/// window's forwarder of `kind`.
fn forward_watch<T: Clone + serde::Serialize + Send + Sync + 'static>(
    state: &AppState,
    label: &str,
    kind: &'static str,
    mut values: tokio::sync::watch::Receiver<T>,
    channel: Channel<T>,
) {
    let task = tauri::async_runtime::spawn(async move {
        loop {
            let now = values.borrow_and_update().clone();
            if channel.send(now).is_err() {
                break;
            }
            if values.changed().await.is_err() {
                break;
            }
        }
    });
    state.forward(label, kind, task);
}

/// How loud the microphone and Jarvis's voice are, whenever that changes (about 25 times a second
/// while sound is heard or played; nothing while all is still), for the orb's ring.
#[tauri::command]
fn orb_levels(
    window: WebviewWindow,
    state: State<'_, AppState>,
    on_levels: Channel<jarvis::voice::pipeline::Levels>,
) -> Res<()> {
    let levels = state.session.voice().levels();
    forward_watch(&state, window.label(), "voice levels", levels, on_levels);
    Ok(())
}

#[tauri::command]
fn orb_hide(app: AppHandle) {
    windows::hide(&app, ORB);
}

/// The facts Jarvis remembers (the Memory panel).
#[tauri::command]
async fn list_facts(state: State<'_, AppState>) -> Res<Vec<jarvis::store::Fact>> {
    Ok(state.service.facts().await?)
}

#[tauri::command]
async fn add_fact(state: State<'_, AppState>, text: String) -> Res<jarvis::store::Fact> {
    Ok(state.service.add_fact(text).await?)
}

#[tauri::command]
async fn edit_fact(state: State<'_, AppState>, id: i64, text: String) -> Res<jarvis::store::Fact> {
    Ok(state.service.edit_fact(id, text).await?)
}

/// Deletes a fact for real.
#[tauri::command]
async fn remove_fact(state: State<'_, AppState>, id: i64) -> Res<()> {
    Ok(state.service.remove_fact(id).await?)
}

/// The summaries of earlier conversations Jarvis may recall (the Memory panel).
#[tauri::command]
async fn list_summaries(state: State<'_, AppState>) -> Res<Vec<jarvis::store::Summary>> {
    Ok(state.service.summaries().await?)
}

/// Forgets one chat's summary; the chat stays.
#[tauri::command]
async fn delete_summary(state: State<'_, AppState>, chat: i64) -> Res<bool> {
    Ok(state.service.delete_summary(ChatId(chat)).await?)
}

/// Turns "Use earlier conversations" on or off.
#[tauri::command]
async fn set_earlier_conversations(state: State<'_, AppState>, on: bool) -> Res<()> {
    Ok(state.session.set_earlier_conversations(on).await?)
}

/// What the model would be sent for `text` in `chat` (keys redacted): the same as
/// `jarvis request`, with the running service's recall (its embedder stays loaded).
#[tauri::command]
async fn chat_request(
    state: State<'_, AppState>,
    chat: Option<i64>,
    text: String,
) -> Res<serde_json::Value> {
    Ok(state.session.preview(chat.map(ChatId), text).await?)
}

#[cfg(test)]
mod tests {
    use super::link_to_open;
    use std::collections::BTreeSet;
    use std::path::Path;

    /// The commands a page calls: the `api` members used by its module and every module it
    /// imports, each as the command `ui/src/api.ts` invokes for it.
    fn commands_called(page: &str) -> BTreeSet<String> {
        let ui = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ui/src");
        let api = std::fs::read_to_string(ui.join("api.ts")).unwrap();
        let mut command_of = std::collections::HashMap::new();
        let mut member = None;
        for line in api.lines() {
            if let Some(name) = line
                .strip_prefix("  ")
                .and_then(|l| l.split_once(':'))
                .map(|(n, _)| n)
                .filter(|n| n.chars().all(|c| c.is_ascii_alphanumeric()))
            {
                member = Some(name.to_string());
            }
            if let (Some(at), Some(name)) = (line.find("invoke"), &member) {
                if let Some(command) = line[at..].split('"').nth(1) {
                    command_of.insert(name.clone(), command.to_string());
                }
            }
        }
        let mut seen = BTreeSet::new();
        let mut todo = vec![page.to_string()];
        let mut called = BTreeSet::new();
        while let Some(module) = todo.pop() {
            if !seen.insert(module.clone()) {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(ui.join(format!("{module}.ts"))) else {
                continue;
            };
            for import in text.split("from \"./").skip(1) {
                todo.push(import.split('"').next().unwrap().to_string());
            }
            for used in text.split("api.").skip(1) {
                let name: String = used
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric())
                    .collect();
                if let Some(command) = command_of.get(&name) {
                    called.insert(command.clone());
                }
            }
        }
        called
    }

    /// The app's own commands a window's capability file allows.
    fn allowed(window: &str) -> BTreeSet<String> {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("capabilities/{window}.json"));
        let file: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        file["permissions"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p.as_str()?.strip_prefix("allow-"))
            .map(|p| p.replace('-', "_"))
            .collect()
    }

    #[test]
    fn each_window_is_allowed_exactly_the_commands_its_page_calls() {
        for (window, page) in [("orb", "orb"), ("chat", "chat")] {
            let called = commands_called(page);
            assert!(called.len() > 5, "{window}: {called:?}");
            assert_eq!(
                allowed(window),
                called,
                "the {window} window's capabilities"
            );
        }
    }

    #[test]
    fn a_mail_link_opens_without_its_query_and_other_schemes_not_at_all() {
        assert_eq!(
            link_to_open("mailto:ada@example.org?attach=/home/ada/.ssh/id_rsa&body=hi"),
            Some("mailto:ada@example.org")
        );
        assert_eq!(
            link_to_open(" MAILTO:ada@example.org#x"),
            Some("MAILTO:ada@example.org")
        );
        assert_eq!(link_to_open("mailto:?body=hi"), None);
        assert_eq!(link_to_open("mailto:ada@example.org%3Fattach=x"), None);
        assert_eq!(
            link_to_open("https://example.org/a?b=c"),
            Some("https://example.org/a?b=c")
        );
        assert_eq!(link_to_open("file:///etc/passwd"), None);
        assert_eq!(link_to_open("javascript:alert(1)"), None);
    }
}

/// What the Tools page shows: the MCP servers, their state and tools, the tools always allowed.
#[tauri::command]
async fn tools_view(state: State<'_, AppState>) -> Res<ToolsView> {
    Ok(state.session.tools_view().await?)
}

/// Adds an MCP server (it starts at once).
#[tauri::command]
async fn add_tool_server(state: State<'_, AppState>, form: ServerForm) -> Res<ToolsView> {
    Ok(state.session.add_tool_server(form).await?)
}

/// Removes an MCP server.
#[tauri::command]
async fn remove_tool_server(state: State<'_, AppState>, name: String) -> Res<ToolsView> {
    Ok(state.session.remove_tool_server(name).await?)
}

/// Whether a call to a server's tools waits for the user.
#[tauri::command]
async fn set_tool_approval(
    state: State<'_, AppState>,
    name: String,
    approve: jarvis::config::Approve,
) -> Res<ToolsView> {
    Ok(state.session.set_tool_approval(name, approve).await?)
}

/// The next call to a tool always allowed asks again.
#[tauri::command]
async fn ask_tool_again(
    state: State<'_, AppState>,
    server: String,
    tool: String,
) -> Res<ToolsView> {
    Ok(state.session.ask_tool_again(server, tool).await?)
}

/// What the Models page shows (the servers running here are asked what they offer).
#[tauri::command]
async fn models_view(state: State<'_, AppState>) -> Res<ModelsView> {
    Ok(state.session.models_view().await?)
}

/// The better model the chat window offers, while only a small one answers.
#[tauri::command]
fn model_offer(state: State<'_, AppState>) -> Option<ModelEntry> {
    state.session.model_offer()
}

/// "Not now": the offer is not made again.
#[tauri::command]
async fn dismiss_model_offer(state: State<'_, AppState>) -> Res<()> {
    Ok(state.session.dismiss_model_offer().await?)
}

/// Starts downloading a catalog model (and, with `then_use`, answering with it once it is
/// here); the download runs on while windows close.
#[tauri::command]
fn pull_model(state: State<'_, AppState>, name: String, then_use: bool) -> Res<()> {
    Ok(state.session.pull_model(&name, then_use)?)
}

/// Stops the running download; what came is kept for the next.
#[tauri::command]
fn stop_pull(state: State<'_, AppState>) -> bool {
    state.session.stop_pull()
}

/// Streams the download's status: the latest now, then at most every tenth of a second.
#[tauri::command]
async fn watch_pull(
    window: WebviewWindow,
    state: State<'_, AppState>,
    on_change: Channel<PullStatus>,
) -> Res<()> {
    let mut pull = state.session.watch_pull();
    let task = tauri::async_runtime::spawn(async move {
        loop {
            let now = pull.borrow_and_update().clone();
            if on_change.send(now).is_err() || pull.changed().await.is_err() {
                break;
            }
            tokio::time::sleep(jarvis::session::PROGRESS_EVERY).await;
        }
    });
    state.forward(window.label(), "pull", task);
    Ok(())
}

/// Makes an installed model the one that answers (the local backend).
#[tauri::command]
async fn use_model(state: State<'_, AppState>, name: String) -> Res<()> {
    Ok(state.session.use_model(&name).await?)
}

/// Makes a model of a server running here the one that answers.
#[tauri::command]
async fn use_served_model(state: State<'_, AppState>, base_url: String, model: String) -> Res<()> {
    Ok(state.session.use_served(&base_url, &model).await?)
}

/// Removes a model file (never the one that answers).
#[tauri::command]
async fn remove_model(state: State<'_, AppState>, name: String) -> Res<()> {
    Ok(state.session.remove_model(&name).await?)
}
