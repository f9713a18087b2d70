//! The real app in real WebKit: each test starts `jarvis-desktop` through tauri-driver and
//! WebKitWebDriver, its backend the stub LLM server on loopback, its data in a temporary folder,
//! and drives both windows as a user would. They need a display, a window manager and a session
//! bus, so they are ignored by a plain `cargo test`; `scripts/e2e` provides all three (Xvfb,
//! openbox, dbus-run-session) and runs them. Screenshots of both windows are saved per test under
//! `$CARGO_TARGET_DIR/e2e-screenshots/` (or `target/`), never committed.

mod support;

use std::time::Duration;

use jarvis::config::test_bus::{LockedKeyring, SessionBus};
use jarvis::voice::fixtures;
use jarvis::voice::pulse::{loud, played_and_quiet, SpeakerRecording};
use jarvis::ReplyState;
use jarvis_stub::{Script, Stub};
use support::*;

/// `n` numbered words: "w1 w2 … wn".
/// A bound on waiting for sound at the speaker (a hang, not a timing).
const SOUND_LIMIT: Duration = Duration::from_secs(60);

/// Waits until the speaker has played a second or more of sound.
async fn heard_for_a_second(speaker: &SpeakerRecording, what: &str) {
    if let Err(levels) = speaker.until(SOUND_LIMIT, |l| loud(l) >= 10).await {
        panic!("{what}: {levels:?}");
    }
}

/// Waits until what the speaker played has ended (half a second of silence after sound), stops
/// the recorder and returns every level heard.
async fn played_whole(speaker: SpeakerRecording, what: &str) -> Vec<f64> {
    if let Err(levels) = speaker.until(SOUND_LIMIT, |l| played_and_quiet(l, 5)).await {
        panic!("{what} did not end in silence: {levels:?}");
    }
    speaker.stop()
}

fn words(n: usize) -> String {
    (1..=n)
        .map(|i| format!("w{i}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The app on fresh data, its backend the stub answering with `script`, and `question` typed
/// into its chat window.
async fn asked(script: Script, question: &str) -> (Stub, Data, App) {
    let stub = Stub::start().await.unwrap();
    stub.push(script);
    let data = Data::new();
    let app = App::start(&stub, &data).await;
    app.chat_window().await;
    app.type_question(question).await;
    (stub, data, app)
}

#[tokio::test]
#[ignore = "needs a display: run scripts/e2e"]
async fn a_prompt_streams_in_and_its_chat_is_listed_after_a_restart() {
    let _one = one_app_at_a_time().await;
    let stub = Stub::start().await.unwrap();
    let answer = "Paris is the capital of France. It lies on the Seine, and about two million people live there.";
    // Held after its first sentence until the page has shown it.
    let gate = stub.gate();
    stub.push(Script::text(answer).deltas_of(6).held_after(6, &gate));
    let data = Data::new();
    let app = App::start(&stub, &data).await;
    app.chat_window().await;
    app.type_question("What is the capital of France?").await;

    // It streams: part of the answer is on screen before the whole of it.
    let partial = app
        .wait_for("part of the answer", |app| async move {
            let text = app.live_text().await;
            (!text.is_empty() && text.len() < answer.len()).then_some(text)
        })
        .await;
    assert!(answer.starts_with(partial.trim()), "{partial:?}");
    gate.release();
    app.wait_for_state("done").await;
    assert_eq!(app.live_text().await.trim(), answer);
    app.screenshots("prompt").await;
    app.quit().await;

    // Started again on the same data: the chat is listed, with question and answer.
    let app = App::start(&stub, &data).await;
    app.chat_window().await;
    let titles = app
        .wait_for("the chat list", |app| async move {
            let t = app.texts(".chat-item .chat-name").await;
            (!t.is_empty()).then_some(t)
        })
        .await;
    assert_eq!(titles, ["What is the capital of France?"]);
    let shown = app
        .wait_for("the records", |app| async move {
            let t = app.texts(".message .body").await;
            (t.len() == 2).then_some(t)
        })
        .await;
    assert_eq!(shown, ["What is the capital of France?", answer]);
    app.screenshots("prompt-restarted").await;
    app.quit().await;
}

#[tokio::test]
#[ignore = "needs a display: run scripts/e2e"]
async fn closing_the_chat_window_mid_reply_only_detaches_it_and_showing_it_again_shows_the_reply_whole(
) {
    let _one = one_app_at_a_time().await;
    let answer = words(60);
    let script = Script::text(answer.clone())
        .deltas_of(4)
        .paced(Duration::from_millis(40));
    let (_stub, data, app) = asked(script, "Count words").await;
    app.wait_for("the reply to begin", |app| async move {
        (!app.live_text().await.is_empty()).then_some(())
    })
    .await;

    // Closed the way a user closes it: the window manager's close.
    app.close_window_like_a_user("Jarvis");
    app.wait_for("the window to hide", |_| async move {
        (!window_mapped("Jarvis")).then_some(())
    })
    .await;
    // The reply goes on without it.
    data.wait_for_reply_end().await;
    app.action("show-chat").await;
    app.chat_window().await;
    app.wait_for_state("done").await;
    let shown = app.live_text().await;
    assert_eq!(
        shown.trim(),
        answer,
        "the whole reply, from its first event"
    );
    assert_eq!(data.last_answer(), answer);
    app.screenshots("reopened").await;
    app.quit().await;
}

#[tokio::test]
#[ignore = "needs a display: run scripts/e2e"]
async fn stop_reply_through_the_trays_command_path_stops_it_and_keeps_its_text() {
    let _one = one_app_at_a_time().await;
    let answer = words(200);
    let script = Script::text(answer.clone())
        .deltas_of(4)
        .paced(Duration::from_millis(40));
    let (_stub, data, app) = asked(script, "Talk for a while").await;
    app.wait_for("some of the reply", |app| async move {
        (app.live_text().await.len() > 12).then_some(())
    })
    .await;
    // The tray menu's Stop reply and `jarvis-desktop --action stop-reply` are one code path.
    app.action("stop-reply").await;
    app.wait_for_state("stopped").await;
    let shown = app.live_text().await;
    assert!(answer.starts_with(shown.trim()) && shown.len() < answer.len());
    let status = app.text(".message.assistant .status").await;
    assert!(status.contains("Stopped"), "{status}");
    let (state, stored) = data.last_reply();
    assert_eq!(state, ReplyState::Stopped);
    assert_eq!(stored.trim(), shown.trim(), "what was written is kept");
    app.screenshots("stopped").await;
    app.quit().await;
}

#[tokio::test]
#[ignore = "needs a display: run scripts/e2e"]
async fn html_and_script_in_a_reply_show_as_text_and_never_run() {
    let _one = one_app_at_a_time().await;
    let answer = "Here: <img src=x onerror=\"window.__pwned = 1\"> and <script>window.__pwned = 2</script> and [a link](javascript:window.__pwned=3).";
    let (_stub, _data, app) = asked(Script::text(answer).deltas_of(5), "Say something risky").await;
    app.wait_for_state("done").await;
    let shown = app.live_text().await;
    assert!(
        shown.contains("<img src=x onerror=\"window.__pwned = 1\">"),
        "{shown}"
    );
    assert!(
        shown.contains("<script>window.__pwned = 2</script>"),
        "{shown}"
    );
    assert_eq!(app.count(".message img, .message script").await, 0);
    assert_eq!(app.count(".message a[href^='javascript']").await, 0);
    // Clicking the reply, its would-be link included, runs nothing either.
    app.click(".message.assistant .body").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pwned = app.eval("return window.__pwned === undefined").await;
    assert_eq!(pwned, serde_json::json!(true), "no handler ran");
    app.screenshots("script-in-reply").await;
    app.quit().await;
}

#[tokio::test]
#[ignore = "needs a display: run scripts/e2e"]
async fn the_orb_is_undecorated_on_top_off_the_taskbar_and_shows_thinking_speaking_idle() {
    let _one = one_app_at_a_time().await;
    let stub = Stub::start().await.unwrap();
    stub.push(
        Script::text("Hello there. I am the orb's answer.")
            .deltas_of(4)
            .paced(Duration::from_millis(60)),
    );
    let data = Data::new();
    let app = App::start(&stub, &data).await;
    let props = app.window_properties("Jarvis orb");
    assert!(
        props.contains("_NET_WM_STATE_ABOVE"),
        "always on top: {props}"
    );
    assert!(
        props.contains("_NET_WM_STATE_SKIP_TASKBAR"),
        "off the taskbar: {props}"
    );
    assert!(
        props.contains("_MOTIF_WM_HINTS(_MOTIF_WM_HINTS) = 0x2, 0x0"),
        "undecorated: {props}"
    );
    assert!(
        !app.active_window_title().contains("orb"),
        "the orb did not take focus"
    );

    app.orb_window().await;
    app.eval(
        "window.__phases = [document.getElementById('orb-card').dataset.phase];
         new MutationObserver(() => {
           const p = document.getElementById('orb-card').dataset.phase;
           if (window.__phases[window.__phases.length - 1] !== p) window.__phases.push(p);
         }).observe(document.getElementById('orb-card'), { attributes: true });
         return true;",
    )
    .await;
    app.type_into("#orb-question", "Who are you?\n").await;
    app.wait_for("the orb to finish", |app| async move {
        let phases = app.eval("return window.__phases").await;
        let phases: Vec<String> = serde_json::from_value(phases).unwrap_or_default();
        (phases.len() >= 4 && phases.last().map(String::as_str) == Some("idle")).then_some(())
    })
    .await;
    let phases: Vec<String> =
        serde_json::from_value(app.eval("return window.__phases").await).unwrap();
    assert_eq!(phases, ["idle", "thinking", "speaking", "idle"]);
    let answer = app.text("#answer").await;
    assert_eq!(answer.trim(), "Hello there. I am the orb's answer.");
    // This data folder has no speech model: the orb marks it, and says why and how to fix it.
    app.wait_for("the voice problem", |app| async move {
        app.visible("#orb-problem").await.then_some(())
    })
    .await;
    app.click("#orb-problem").await;
    let problem = app.text("#orb-error").await;
    assert!(
        problem.starts_with("Voice unavailable: speech model not installed")
            && problem.contains("scripts/models voice"),
        "{problem}"
    );
    app.screenshots("orb").await;
    app.quit().await;
}

#[tokio::test]
#[ignore = "needs a display: run scripts/e2e"]
async fn the_push_to_talk_shortcut_pressed_with_xdotool_reaches_the_service() {
    let _one = one_app_at_a_time().await;
    let stub = Stub::start().await.unwrap();
    let data = Data::new();
    let app = App::start(&stub, &data).await;
    app.orb_window().await;
    app.wait_for_phase("idle", "the orb to attach").await;
    assert!(!app.visible("#mic").await, "the microphone starts shut");
    xdotool(&["keydown", "ctrl+alt+space"]);
    app.wait_for("listening", |app| async move {
        (app.attr("#orb-card", "data-phase").await == "listening" && app.visible("#mic").await)
            .then_some(())
    })
    .await;
    app.screenshots("push-to-talk").await;
    xdotool(&["keyup", "ctrl+alt+space"]);
    app.wait_for("the utterance to end", |app| async move {
        (app.attr("#orb-card", "data-phase").await == "idle" && !app.visible("#mic").await)
            .then_some(())
    })
    .await;
    app.quit().await;
}

/// Issue 17 item 7: on Wayland no program may grab a key; the shortcut is asked of the desktop
/// through its portal's GlobalShortcuts (here the tests' own portal on a private bus, the app
/// told it runs on Wayland), and the desktop's press and release open and end the utterance.
#[tokio::test]
#[ignore = "needs a display: run scripts/e2e"]
async fn on_wayland_the_push_to_talk_shortcut_comes_through_the_desktop_portal() {
    let _one = one_app_at_a_time().await;
    let bus = SessionBus::start();
    let portal = jarvis::session::test_portal::FakePortal::serve(&bus).await;
    let stub = Stub::start().await.unwrap();
    let mut data = Data::new();
    data.set_env("XDG_SESSION_TYPE", "wayland");
    data.set_env("DBUS_SESSION_BUS_ADDRESS", bus.address());
    let app = App::start(&stub, &data).await;
    portal
        .wait_until("the push-to-talk shortcut bound", |bound, _| {
            bound.iter().any(|b| b.id == "push-to-talk")
        })
        .await;
    assert_eq!(
        portal.bound()[0].preferred_trigger.as_deref(),
        Some("CTRL+ALT+space"),
        "the setting's key, as the portal takes it"
    );
    app.orb_window().await;
    app.wait_for_phase("idle", "the orb to attach").await;
    assert!(!app.visible("#mic").await, "the microphone starts shut");
    portal.press("push-to-talk").await;
    app.wait_for("listening", |app| async move {
        (app.attr("#orb-card", "data-phase").await == "listening" && app.visible("#mic").await)
            .then_some(())
    })
    .await;
    portal.release("push-to-talk").await;
    app.wait_for("the utterance to end", |app| async move {
        (app.attr("#orb-card", "data-phase").await == "idle" && !app.visible("#mic").await)
            .then_some(())
    })
    .await;

    // Settings says how the key comes in, in the desktop's words.
    app.chat_window().await;
    app.open_settings().await;
    let note = app
        .wait_for("the shortcut's note", |app| async move {
            let note = app.text("#set-shortcut-note").await;
            (!note.is_empty()).then_some(note)
        })
        .await;
    assert!(
        note.contains("Bound by your desktop") && note.contains("Press CTRL+ALT+space"),
        "{note}"
    );
    app.screenshots("wayland-shortcut").await;
    app.quit().await;
}

#[tokio::test]
#[ignore = "needs a display: run scripts/e2e"]
async fn a_reply_streaming_200_deltas_a_second_renders_with_no_delta_lost() {
    let _one = one_app_at_a_time().await;
    // About 980 deltas of five characters, 5 ms apart: 200 a second for five seconds.
    let answer = words(1000);
    let deltas = answer.len().div_ceil(5);
    let script = Script::text(answer.clone())
        .deltas_of(5)
        .paced(Duration::from_millis(5));
    let (_stub, data, app) = asked(script, "Count to a thousand").await;
    app.wait_for_state("done").await;
    let shown = app.live_text().await;
    let stored = data.last_answer();
    assert_eq!(stored.trim(), answer.trim());
    assert_eq!(
        shown.trim(),
        stored.trim(),
        "the screen has every one of {deltas} deltas"
    );
    app.screenshots("fast-stream").await;
    app.quit().await;
}

#[tokio::test]
#[ignore = "needs a display: run scripts/e2e"]
async fn the_orb_listens_through_a_real_microphone_and_answers_aloud() {
    let _one = one_app_at_a_time().await;
    let pulse = jarvis::voice::pulse::Pulse::start().expect("a PulseAudio server");
    let stub = Stub::start().await.unwrap();
    let answer = "Paris is the capital of France. It lies on the Seine.";
    stub.push(
        Script::text(answer)
            .deltas_of(6)
            .paced(Duration::from_millis(40)),
    );
    let data = Data::with_voice(&pulse);
    let app = App::start(&stub, &data).await;
    app.orb_window().await;
    app.wait_for("the Listen button (hands-free)", |app| async move {
        app.visible("#listen").await.then_some(())
    })
    .await;
    assert!(!app.visible("#mic").await, "the microphone starts shut");
    let speaker = pulse.record_speaker().unwrap();
    app.click("#listen").await;
    app.wait_for("the microphone to open", |app| async move {
        (app.visible("#mic").await && app.text("#listen").await == "Mic off").then_some(())
    })
    .await;
    assert!(
        !app.visible("#orb-problem").await,
        "the voice works: no problem shown"
    );
    let question = fixtures::speech("What is the capital of France?").unwrap();
    pulse.say(&question.then(&fixtures::silence(800)).to_i16());
    app.wait_for("the answer in the orb", |app| async move {
        (app.text("#answer").await.trim() == answer).then_some(())
    })
    .await;
    data.wait_for_reply_end().await;
    assert_eq!(data.last_answer(), answer);
    app.screenshots("orb-voice").await;
    // Spoken aloud: the speaker played a second or more of sound.
    heard_for_a_second(&speaker, "the answer was heard on the speaker").await;
    speaker.stop();
    app.click("#listen").await;
    app.wait_for("the microphone to close", |app| async move {
        (!app.visible("#mic").await).then_some(())
    })
    .await;
    app.quit().await;
}

#[tokio::test]
#[ignore = "needs a display: run scripts/e2e"]
async fn the_microphone_chosen_in_settings_is_the_one_the_orb_listens_to() {
    let _one = one_app_at_a_time().await;
    let pulse = jarvis::voice::pulse::Pulse::start().expect("a PulseAudio server");
    let stub = Stub::start().await.unwrap();
    let answer = "It is sunny all day.";
    stub.push(Script::text(answer));
    let data = Data::with_voice(&pulse);
    // The microphone saved last time is not plugged in.
    let settings_file = data.path().join("settings.toml");
    let mut settings = std::fs::read_to_string(&settings_file).unwrap();
    settings.push_str("input_device = \"Desk Mic\"\n");
    std::fs::write(&settings_file, settings).unwrap();
    let app = App::start(&stub, &data).await;
    app.orb_window().await;
    app.wait_for("the Listen button", |app| async move {
        app.visible("#listen").await.then_some(())
    })
    .await;
    app.click("#listen").await;
    let problem = app
        .wait_for("the orb to say it cannot listen", |app| async move {
            app.visible("#orb-problem")
                .await
                .then_some(app.attr("#orb-problem", "title").await)
        })
        .await;
    assert!(
        problem.contains("\"Desk Mic\" is not connected") && problem.contains("Settings"),
        "{problem}"
    );
    // It does not claim a microphone it has not got.
    app.wait_for("the microphone shown off", |app| async move {
        (!app.visible("#mic").await && app.text("#listen").await == "Listen").then_some(())
    })
    .await;
    app.click("#orb-problem").await;
    app.screenshots("orb-no-microphone").await;

    // Settings lists the real devices and keeps the missing one, marked.
    app.chat_window().await;
    app.open_settings().await;
    let options = app
        .wait_for("the microphones listed", |app| async move {
            let list = app
                .eval(
                    "return [...document.querySelectorAll('#set-mic option')]
                       .map(o => [o.value, o.textContent, o.selected]);",
                )
                .await;
            let list: Vec<(String, String, bool)> = serde_json::from_value(list).unwrap();
            (list.len() > 2).then_some(list)
        })
        .await;
    let labels: Vec<&str> = options.iter().map(|(_, label, _)| label.as_str()).collect();
    assert!(
        labels[0].starts_with("System default (Unix FIFO source"),
        "{labels:?}"
    );
    assert!(labels.contains(&"Monitor of Null Output"), "{labels:?}");
    let chosen: Vec<&str> = options
        .iter()
        .filter(|(_, _, selected)| *selected)
        .map(|(_, label, _)| label.as_str())
        .collect();
    assert_eq!(chosen, ["Desk Mic (not connected)"]);
    let fifo = options
        .iter()
        .map(|(value, _, _)| value.clone())
        .find(|value| value.starts_with("Unix FIFO source"))
        .unwrap_or_else(|| panic!("the pipe source is listed: {labels:?}"));
    app.eval(&format!(
        "document.getElementById('set-mic').value = {}; return true;",
        serde_json::Value::from(fifo.as_str())
    ))
    .await;
    app.screenshots("settings-microphone").await;
    app.click("#settings-save").await;
    app.wait_for("the dialog to close", |app| async move {
        (app.eval("return document.getElementById('settings').open;")
            .await
            == false)
            .then_some(())
    })
    .await;
    let saved = std::fs::read_to_string(&settings_file).unwrap();
    assert!(
        saved.contains(&format!(
            "input_device = {}",
            serde_json::Value::from(fifo.as_str())
        )),
        "{saved}"
    );

    // Listen now opens the chosen microphone.
    app.orb_window().await;
    app.wait_for(
        "the problem gone with the old voice loop",
        |app| async move { (!app.visible("#orb-problem").await).then_some(()) },
    )
    .await;
    app.click("#listen").await;
    app.wait_for("the microphone open", |app| async move {
        (app.visible("#mic").await && !app.visible("#orb-problem").await).then_some(())
    })
    .await;
    let question = fixtures::speech("What is the weather like today?").unwrap();
    pulse.say(&question.then(&fixtures::silence(800)).to_i16());
    app.wait_for("the answer in the orb", |app| async move {
        (app.text("#answer").await.trim() == answer).then_some(())
    })
    .await;
    data.wait_for_reply_end().await;
    let asked = stub.received();
    assert!(
        asked.last().unwrap().body["messages"]
            .to_string()
            .to_lowercase()
            .contains("weather"),
        "the question was heard through the chosen microphone"
    );
    app.quit().await;
}

#[tokio::test]
#[ignore = "needs a display: run scripts/e2e"]
async fn the_memory_panel_adds_edits_and_really_deletes_facts_and_the_request_view_shows_them() {
    let _one = one_app_at_a_time().await;
    let stub = Stub::start().await.unwrap();
    let data = Data::new();
    let app = App::start(&stub, &data).await;
    app.chat_window().await;
    app.click("#open-memory").await;
    app.wait_for("the empty panel", |app| async move {
        app.visible("#facts-empty").await.then_some(())
    })
    .await;
    app.type_into("#fact-new", "My dog is called Bruno.\n")
        .await;
    app.wait_for("the fact listed", |app| async move {
        (app.count("#facts .fact").await == 1).then_some(())
    })
    .await;
    assert_eq!(
        data.store().facts().unwrap()[0].text,
        "My dog is called Bruno."
    );
    // Edited in place.
    app.eval(
        "const input = document.querySelector('#facts .fact input');
         input.value = 'My dog is called Rex.';
         input.dispatchEvent(new Event('input'));
         input.nextElementSibling.click();
         return true;",
    )
    .await;
    app.wait_for("the edit stored", |_| {
        let facts = data.store().facts().unwrap();
        async move {
            (facts.first().map(|f| f.text.as_str()) == Some("My dog is called Rex.")).then_some(())
        }
    })
    .await;
    app.screenshots("memory").await;
    app.click("#memory-close").await;

    // What the model sees: the profile carries the fact; nothing is sent.
    app.click("#show-request").await;
    let shown = app
        .wait_for("the request", |app| async move {
            let text = app.text("#request-json").await;
            text.contains("\"body\"").then_some(text)
        })
        .await;
    assert!(shown.contains("My dog is called Rex."), "{shown}");
    assert!(
        shown.contains("remember_fact"),
        "the tools are offered: {shown}"
    );
    assert!(stub.received().is_empty(), "nothing was sent");
    app.screenshots("request-view").await;
    app.click("#request-close").await;

    // Deleted for real.
    app.click("#open-memory").await;
    app.click("#facts .fact .danger").await;
    app.wait_for("the fact gone", |app| async move {
        (app.count("#facts .fact").await == 0).then_some(())
    })
    .await;
    assert!(data.store().facts().unwrap().is_empty());
    app.quit().await;
}

/// Issue 30 item 1: a fact the model stores shows in its chat as an action line with Undo (a
/// record of the chat, so it is there when the chat is opened again), and the Memory panel says
/// where each fact came from without ever calling the model's "Added by you".
#[tokio::test]
#[ignore = "needs a display: run scripts/e2e"]
async fn a_fact_the_model_stores_shows_in_its_chat_with_undo_and_the_panel_says_where_each_came_from(
) {
    let _one = one_app_at_a_time().await;
    let stub = Stub::start().await.unwrap();
    let data = Data::new();
    {
        let store = data.store();
        store.add_fact("I live in Lyon.", None).unwrap();
        let gone = store.create_chat("Deleted later").unwrap().id;
        store.add_fact("I like sailing.", Some(gone)).unwrap();
        store.delete_chat(gone).unwrap();
        let unsaved = jarvis::store::Store::in_memory(&store).unwrap();
        let voice = unsaved.create_chat("voice").unwrap().id;
        unsaved.add_fact("I drink tea.", Some(voice)).unwrap();
    }
    let app = App::start(&stub, &data).await;
    app.chat_window().await;
    stub.push(Script::text("").tool_call(
        "r",
        "remember_fact",
        r#"{"fact": "Their dog is called Bruno."}"#,
    ));
    stub.push(Script::text("I'll remember that."));
    app.type_question("Remember that my dog is called Bruno.")
        .await;
    app.wait_for_state("done").await;
    app.wait_for("the action line", |app| async move {
        (app.count(".action-line .undo").await == 1).then_some(())
    })
    .await;
    assert_eq!(
        app.text(".action-line .action-text").await,
        "Remembered: Their dog is called Bruno."
    );
    // Above the answer, below the question.
    let order = app
        .eval(
            "return [...document.querySelectorAll('.messages > *')]
               .map((el) => el.classList.contains('action-line') ? 'action' : el.className);",
        )
        .await
        .to_string();
    assert!(
        order.contains(r#""message user","action","message assistant""#),
        "{order}"
    );
    app.screenshots("remembered").await;

    // The panel: each fact's source, the model's never "Added by you".
    app.click("#open-memory").await;
    app.wait_for("four facts", |app| async move {
        (app.count("#facts .fact").await == 4).then_some(())
    })
    .await;
    let sources = app
        .eval(
            "return [...document.querySelectorAll('#facts .fact')]
               .map((li) => li.querySelector('input').value + ' | ' + li.querySelector('.source').textContent);",
        )
        .await
        .to_string();
    for (fact, source) in [
        ("I live in Lyon.", "Added by you"),
        ("I like sailing.", "From a deleted chat"),
        (
            "I drink tea.",
            "From a voice conversation that was not saved",
        ),
        ("Their dog is called Bruno.", "From “Remember that my dog"),
    ] {
        assert!(sources.contains(&format!("{fact} | {source}")), "{sources}");
    }
    app.screenshots("memory-sources").await;
    app.click("#memory-close").await;

    // Undo forgets it for real; the line stays, marked.
    app.click(".action-line .undo").await;
    app.wait_for("forgotten", |_| {
        let facts = data.store().facts().unwrap();
        async move { (!facts.iter().any(|f| f.text.contains("Bruno"))).then_some(()) }
    })
    .await;
    app.wait_for("the line marked", |app| async move {
        (app.count(".action-line.undone").await == 1 && app.count(".action-line .undo").await == 0)
            .then_some(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a display: run scripts/e2e"]
async fn the_filesystem_servers_read_waits_for_allow_in_the_chat_and_a_deny_reads_nothing() {
    let _one = one_app_at_a_time().await;
    let server = reference_mcp_server("mcp-server-filesystem");
    let stub = Stub::start().await.unwrap();
    let data = Data::new();
    let folder = data.path().join("documents");
    std::fs::create_dir_all(&folder).unwrap();
    let plans = folder.join("plans.txt");
    std::fs::write(&plans, "The launch is on Tuesday.").unwrap();
    let mut settings = std::fs::read_to_string(data.path().join("settings.toml")).unwrap();
    settings.push_str(&format!(
        "[[mcp.servers]]\nname = \"files\"\ncommand = {}\nargs = [{}]\n",
        toml_string(&server.display().to_string()),
        toml_string(&folder.display().to_string())
    ));
    std::fs::write(data.path().join("settings.toml"), settings).unwrap();
    let read = format!(
        r#"{{"path": {}}}"#,
        serde_json::json!(plans.display().to_string())
    );
    for n in 1..=2 {
        stub.push(Script::text("").tool_call(&format!("c{n}"), "files__read_text_file", &read));
        stub.push(Script::text(format!("Answer {n}.")));
    }
    let app = App::start(&stub, &data).await;
    app.chat_window().await;

    // Denied: the card goes, nothing is read, the model is told.
    app.type_question("What is in plans.txt?").await;
    card_shown(&app).await;
    let card = app.text(".consent-card").await;
    assert!(
        card.contains("Jarvis wants to use read_text_file from files")
            && card.contains("plans.txt"),
        "{card}"
    );
    assert!(app
        .text("#composer-note")
        .await
        .contains("waits for your answer"));
    app.screenshots("consent-card").await;
    app.click(".consent-card [data-consent=deny]").await;
    app.wait_for_state("done").await;
    assert_eq!(app.count(".consent-card").await, 0);
    let told = tool_results_of(&stub.received()[1].body);
    assert!(
        told.contains("the user denied it") && !told.contains("Tuesday"),
        "{told}"
    );
    app.wait_for("the denied call's line", |app| async move {
        (app.count(".action-line.tool-call").await == 1).then_some(())
    })
    .await;
    assert_eq!(
        app.text(".action-line.tool-call summary").await,
        "Not run: files · read_text_file — denied"
    );

    // Allowed once: read, its line folded under what was called, its result unfolding.
    app.type_question("Please read it.").await;
    card_shown(&app).await;
    app.click(".consent-card [data-consent=once]").await;
    app.wait_for_state("done").await;
    app.wait_for("the read call's line", |app| async move {
        (app.count(".action-line.tool-call").await == 2).then_some(())
    })
    .await;
    assert_eq!(app.live_text().await.trim(), "Answer 2.");
    let told = tool_results_of(&stub.received()[3].body);
    assert!(told.contains("The launch is on Tuesday."), "{told}");
    let summaries = app.texts(".action-line.tool-call summary").await;
    assert_eq!(summaries[1], "Used files · read_text_file", "{summaries:?}");
    assert_eq!(app.count(".action-line.tool-call[open]").await, 0, "folded");
    app.click(".action-line.tool-call:last-of-type summary")
        .await;
    let detail = app
        .text(".action-line.tool-call[open] .tool-call-detail")
        .await;
    assert!(
        detail.contains("plans.txt") && detail.contains("The launch is on Tuesday."),
        "{detail}"
    );
    app.screenshots("tool-call-line").await;
}

#[tokio::test]
#[ignore = "needs a display: run scripts/e2e"]
async fn a_server_added_in_settings_offers_its_tools_and_an_always_allowed_one_can_be_asked_again()
{
    let _one = one_app_at_a_time().await;
    let server = reference_mcp_server("mcp-server-everything");
    let stub = Stub::start().await.unwrap();
    let data = Data::new();
    let app = App::start(&stub, &data).await;
    app.chat_window().await;
    app.open_settings().await;
    app.click("#open-tools").await;
    app.wait_for("the empty Tools page", |app| async move {
        app.visible("#tools-empty").await.then_some(())
    })
    .await;
    app.type_into("#tool-name", "everything").await;
    app.type_into("#tool-command", &format!("{} stdio", server.display()))
        .await;
    app.click("#tool-add-button").await;
    // It starts in the background; the page looks again until it runs, with its tools.
    app.wait_for("the server running with its tools", |app| async move {
        (app.count("[data-server=everything] .tool[data-tool=echo]")
            .await
            == 1)
            .then_some(())
    })
    .await;
    assert!(
        app.text("[data-server=everything] .server-state")
            .await
            .starts_with("running · "),
        "{}",
        app.text("[data-server=everything] .server-state").await
    );
    let written = std::fs::read_to_string(data.path().join("settings.toml")).unwrap();
    assert!(
        written.contains("[[mcp.servers]]") && written.contains("name = \"everything\""),
        "{written}"
    );
    app.screenshots("tools-page").await;
    app.click("#tools-close").await;

    // Offered to the model at once; "Always allow this tool" is kept, and shown on the page.
    stub.push(Script::text("").tool_call("c1", "everything__echo", r#"{"message": "hi"}"#));
    stub.push(Script::text("It echoed."));
    app.type_question("Echo hi.").await;
    card_shown(&app).await;
    app.click(".consent-card [data-consent=always]").await;
    app.wait_for_state("done").await;
    assert!(tool_results_of(&stub.received()[1].body).contains("Echo: hi"));
    assert_eq!(
        data.store().allowed_tools().unwrap(),
        [("everything".to_string(), "echo".to_string())]
    );
    app.open_settings().await;
    app.click("#open-tools").await;
    app.wait_for("echo always allowed", |app| async move {
        (app.count("[data-tool=echo] .ask-again").await == 1).then_some(())
    })
    .await;
    app.click("[data-tool=echo] .ask-again").await;
    app.wait_for("echo asked about again", |app| async move {
        (app.count("[data-tool=echo] .ask-again").await == 0).then_some(())
    })
    .await;
    assert!(data.store().allowed_tools().unwrap().is_empty());

    // Its approval changed: written, and the server goes on running (nothing restarts).
    app.eval(
        "const s = document.querySelector('[data-server=everything] .tool-approve');
         s.dataset.old = '1'; s.value = 'never'; s.dispatchEvent(new Event('change'));
         return null;",
    )
    .await;
    app.wait_for("never written", |_| {
        let written = std::fs::read_to_string(data.path().join("settings.toml")).unwrap();
        async move { written.contains("approve = \"never\"").then_some(()) }
    })
    .await;
    // (The page the change returned: a select drawn anew.)
    app.wait_for("the page after the change", |app| async move {
        (app.count("[data-server=everything] .tool-approve:not([data-old])")
            .await
            == 1)
            .then_some(())
    })
    .await;
    let state = app.text("[data-server=everything] .server-state").await;
    assert!(state.starts_with("running · "), "still running: {state}");

    // Removed: gone from the page and the file.
    app.click("[data-server=everything] .tool-remove").await;
    app.wait_for("the server removed", |app| async move {
        app.visible("#tools-empty").await.then_some(())
    })
    .await;
    let written = std::fs::read_to_string(data.path().join("settings.toml")).unwrap();
    assert!(!written.contains("everything"), "{written}");
}

/// A reference MCP server's program, installed by `scripts/mcp-servers`.
fn reference_mcp_server(program: &str) -> std::path::PathBuf {
    let server = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/mcp-servers/node_modules/.bin")
        .join(program);
    assert!(
        server.exists(),
        "the reference MCP servers are missing: run scripts/mcp-servers"
    );
    server
}

/// Waits until the chat shows a tool call's action card with its three answers.
async fn card_shown(app: &App) {
    app.wait_for("the action card", |app| async move {
        (app.count(".consent-card button").await == 3).then_some(())
    })
    .await;
}

/// Every tool result's text in a request body (the OpenAI wire format the app's stub speaks).
fn tool_results_of(body: &serde_json::Value) -> String {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// `s` as a TOML basic string.
fn toml_string(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

#[tokio::test]
#[ignore = "needs a display: run scripts/e2e"]
async fn the_memory_panel_shows_where_facts_came_from_deletes_a_summary_and_turns_recall_off() {
    use jarvis::memory::embed::Embedder as _;
    let _one = one_app_at_a_time().await;
    let stub = Stub::start().await.unwrap();
    let data = Data::with_models();
    let question = "Which harbour should we leave from for the sailing trip?";
    {
        // Two earlier chats, each with a summary as close to the question as can be.
        let store = data.store();
        let embedder =
            jarvis::memory::embed::LazyMiniLm::if_installed(&support::installed_models())
                .expect("the sentence embedder (scripts/models memory)");
        let vector = embedder.embed(&[question.to_string()]).unwrap().remove(0);
        for (title, summary) in [
            (
                "Sailing in June",
                "The user plans a sailing trip along Brittany's north coast in June.",
            ),
            (
                "Boat repairs",
                "The user asked how to fix the sailing boat's rudder before the trip.",
            ),
        ] {
            let chat = store.create_chat(title).unwrap().id;
            store
                .append_record(chat, jarvis::store::Role::User, "Where to sail?", None)
                .unwrap();
            store.upsert_summary(chat, summary, &vector, 1).unwrap();
        }
        let first = store
            .chats()
            .unwrap()
            .into_iter()
            .find(|c| c.title == "Sailing in June");
        store
            .add_fact("The user's boat is called Albatross.", first.map(|c| c.id))
            .unwrap();
    }
    let app = App::start(&stub, &data).await;
    app.chat_window().await;
    app.click("#open-memory").await;
    app.wait_for("two summaries listed", |app| async move {
        (app.count("#summaries .summary").await == 2).then_some(())
    })
    .await;
    let source = app.text("#facts .fact .source").await;
    assert!(source.starts_with("From “Sailing in June”"), "{source}");
    assert!(app.text("#summaries").await.contains("rudder"));
    assert!(
        app.eval("return document.querySelector('#earlier-on').checked")
            .await
            == true
    );
    app.screenshots("memory-summaries").await;

    // The fact's chat opens from the panel.
    app.click("#facts .fact .source button").await;
    app.wait_for("its chat open", |app| async move {
        app.text(".messages")
            .await
            .contains("Where to sail?")
            .then_some(())
    })
    .await;
    assert!(!app.visible("#memory").await, "the panel closed");

    // One summary deleted; its chat stays.
    app.click("#open-memory").await;
    app.wait_for("listed again", |app| async move {
        (app.count("#summaries .summary").await == 2).then_some(())
    })
    .await;
    app.eval(
        "[...document.querySelectorAll('#summaries .summary')]
           .find((li) => li.textContent.includes('rudder'))
           .querySelector('.danger').click();
         return true;",
    )
    .await;
    app.wait_for("one left", |app| async move {
        (app.count("#summaries .summary").await == 1).then_some(())
    })
    .await;
    let left = data.store().summaries().unwrap();
    assert_eq!(left.len(), 1);
    assert!(left[0].text.contains("north coast"));
    assert_eq!(data.store().chats().unwrap().len(), 2, "both chats stay");

    // Recalled while on: the remaining summary, never the deleted one.
    app.click("#memory-close").await;
    stub.push(Script::text("Saint-Malo is a good harbour."));
    stub.set_default(Script::text("The user asked where to leave from."));
    app.click("#new-chat").await;
    app.type_question(question).await;
    app.wait_for_state("done").await;
    let system = stub.received()[0].body["messages"][0]["content"].to_string();
    assert!(
        system.contains("north coast") && !system.contains("rudder"),
        "{system}"
    );

    // Off: nothing recalled, no summary asked for.
    app.click("#open-memory").await;
    app.click("#earlier-on").await;
    app.wait_for("saved off", |_| {
        let text = std::fs::read_to_string(data.path().join("settings.toml")).unwrap();
        async move { text.contains("earlier_conversations = false").then_some(()) }
    })
    .await;
    app.wait_for("shown off", |app| async move {
        app.eval("return document.querySelector('#summaries').classList.contains('off')")
            .await
            .as_bool()
            .filter(|off| *off)
    })
    .await;
    app.click("#memory-close").await;
    // The summary of the answer above is written before the count is taken.
    app.wait_for("the Saint-Malo chat's summary", |_| {
        let written = data
            .store()
            .summaries()
            .unwrap()
            .iter()
            .any(|s| s.text.contains("where to leave from"));
        async move { written.then_some(()) }
    })
    .await;
    let before = stub.received().len();
    stub.push(Script::text("Leave at high tide."));
    app.click("#new-chat").await;
    app.type_question(question).await;
    app.wait_for_state("done").await;
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let received = stub.received();
    assert_eq!(received.len(), before + 1, "no summary was asked for");
    let system = received[before].body["messages"][0]["content"].to_string();
    assert!(
        !system.contains("Relevant earlier conversations"),
        "{system}"
    );
    app.quit().await;
}

#[tokio::test]
#[ignore = "needs a display: run scripts/e2e"]
async fn starting_afresh_draws_a_line_and_the_model_no_longer_gets_what_is_above_it() {
    let _one = one_app_at_a_time().await;
    let (stub, data, app) = asked(
        Script::text("Hello Ada, sailing is lovely."),
        "My name is Ada and I like sailing.",
    )
    .await;
    app.wait_for_state("done").await;
    app.click("#start-afresh").await;
    let line = app
        .wait_for("the afresh line", |app| async move {
            let t = app.texts(".messages .afresh").await;
            (!t.is_empty()).then_some(t)
        })
        .await;
    assert_eq!(
        line,
        ["Started afresh — Jarvis no longer sees the messages above"]
    );
    stub.push(Script::text("I don't know your name yet."));
    app.type_question("What is my name?").await;
    app.wait_for("the second answer", |app| async move {
        (app.texts(".message .body").await.len() == 4).then_some(())
    })
    .await;
    app.screenshots("afresh").await;
    let received = stub.received();
    let sent = received.last().unwrap().body["messages"].to_string();
    assert!(
        sent.contains("What is my name?") && !sent.contains("sailing"),
        "{sent}"
    );
    // Kept in the chat, and the line is still there after the chat is opened again.
    let chat = data.store().chats().unwrap()[0].id;
    assert_eq!(data.store().records(chat).unwrap().len(), 4);
    app.click("#new-chat").await;
    app.click(".chat-item .chat-name").await;
    app.wait_for("the line again", |app| async move {
        (app.count(".messages .afresh").await == 1).then_some(())
    })
    .await;
    app.quit().await;
}

#[tokio::test]
#[ignore = "needs a display: run scripts/e2e"]
async fn the_orb_follows_sound_keeps_stop_while_it_talks_plays_again_and_hiding_it_shuts_the_microphone(
) {
    let _one = one_app_at_a_time().await;
    let pulse = jarvis::voice::pulse::Pulse::start().expect("a PulseAudio server");
    let stub = Stub::start().await.unwrap();
    // The text arrives in a tenth of a second; saying it takes several.
    let answer = "Paris is the capital of France. It lies on the river Seine. About two million people live there.";
    stub.push(Script::text(answer).deltas_of(24));
    let data = Data::with_voice(&pulse);
    let app = App::start(&stub, &data).await;
    app.orb_window().await;
    app.wait_for("the Listen button (hands-free)", |app| async move {
        app.visible("#listen").await.then_some(())
    })
    .await;
    // Every look the ring takes: what it follows and how loud.
    app.eval(
        "window.__sounds = [];
         const card = document.getElementById('orb-card');
         new MutationObserver(() => {
           const level = parseFloat(card.style.getPropertyValue('--level') || '0');
           window.__sounds.push([card.dataset.sound, level]);
         }).observe(card, { attributes: true, attributeFilter: ['style', 'data-sound'] });
         return true;",
    )
    .await;
    app.click("#listen").await;
    app.wait_for("the microphone to open", |app| async move {
        app.visible("#mic").await.then_some(())
    })
    .await;
    let question = fixtures::speech("What is the capital of France?").unwrap();
    pulse.say(&question.then(&fixtures::silence(800)).to_i16());
    data.wait_for_reply_end().await;
    // The text has ended; its voice has not: Stop and "Speaking" stay. The microphone is shut,
    // so the phase is the voice's.
    let before = format!(
        "before the click: mic {}, phase {}",
        app.attr("#orb-card", "data-mic").await,
        app.attr("#orb-card", "data-phase").await
    );
    app.click("#listen").await;
    app.wait_for(
        &format!("the microphone to shut ({before})"),
        |app| async move { (app.attr("#orb-card", "data-mic").await == "off").then_some(()) },
    )
    .await;
    app.wait_for_phase("speaking", "speaking after the text ended")
        .await;
    assert!(app.visible("#orb-stop").await, "Stop while it talks");
    app.screenshots("orb-speaking-after-text").await;
    app.wait_for_phase("idle", "the voice to end").await;
    assert!(!app.visible("#orb-stop").await, "nothing left to stop");
    let sounds: Vec<(String, f64)> =
        serde_json::from_value(app.eval("return window.__sounds").await).unwrap();
    assert!(
        sounds.iter().any(|(s, l)| s == "mic" && *l > 0.2),
        "the ring followed the microphone: {sounds:?}"
    );
    assert!(
        sounds.iter().any(|(s, l)| s == "voice" && *l > 0.2),
        "the ring followed its voice: {sounds:?}"
    );
    let records = data
        .store()
        .records(data.store().chats().unwrap()[0].id)
        .unwrap()
        .len();

    // Play: the latest answer again, aloud, with nothing added to the history.
    let speaker = pulse.record_speaker().unwrap();
    app.click("#orb-play").await;
    app.wait_for_phase("speaking", "speaking again").await;
    app.wait_for_phase("idle", "the replay to end").await;
    heard_for_a_second(&speaker, "the answer was played again").await;
    speaker.stop();
    let store = data.store();
    let chat = store.chats().unwrap()[0].id;
    assert_eq!(store.records(chat).unwrap().len(), records, "no history");
    assert_eq!(
        store.last_reply(chat).unwrap().unwrap().heard,
        None,
        "heard whole"
    );

    // Read aloud in the chat window: the voice conversation's answer, from its chat.
    app.action("show-chat").await;
    app.chat_window().await;
    app.click(".chat-item").await;
    app.wait_for("the answer's Read aloud", |app| async move {
        (app.count(".message.assistant .read-aloud").await == 1).then_some(())
    })
    .await;
    let speaker = pulse.record_speaker().unwrap();
    // (Clicked from the page: once in 16 runs with both cores busy, the button took the focus
    // but no replay reached the voice loop, as if the click's release was lost while the window
    // was being raised.)
    app.eval("document.querySelector('.message.assistant .read-aloud').click(); return true")
        .await;
    if let Err(levels) = speaker.until(SOUND_LIMIT, |l| loud(l) >= 10).await {
        app.screenshots("read-aloud-silent").await;
        panic!(
            "read aloud from the chat window: {} loud tenths of {}; the note: {:?}",
            loud(&levels),
            levels.len(),
            app.text("#composer-note").await
        );
    }
    speaker.stop();
    app.screenshots("read-aloud").await;

    // Hiding the orb shuts its microphone; showing it again leaves it shut.
    app.orb_window().await;
    app.click("#listen").await;
    app.wait_for("the microphone to open", |app| async move {
        app.visible("#mic").await.then_some(())
    })
    .await;
    app.click("#hide").await;
    app.wait_for("the orb to hide", |_| async move {
        (!window_mapped("Jarvis orb")).then_some(())
    })
    .await;
    app.action("show-orb").await;
    app.orb_window().await;
    app.wait_for("the orb to attach again", |app| async move {
        (app.text("#listen").await == "Listen").then_some(())
    })
    .await;
    assert!(
        !app.visible("#mic").await,
        "shown again, the microphone is shut"
    );
    app.quit().await;
}

#[tokio::test]
#[ignore = "needs a display: run scripts/e2e"]
async fn a_failed_orb_reply_offers_try_again_which_answers_it() {
    let _one = one_app_at_a_time().await;
    let stub = Stub::start().await.unwrap();
    stub.push(Script::status(400, None));
    stub.push(Script::text("Now it works."));
    let data = Data::new();
    let app = App::start(&stub, &data).await;
    app.orb_window().await;
    app.type_into("#orb-question", "Are you there?\n").await;
    app.wait_for("Try again", |app| async move {
        app.visible("#orb-retry").await.then_some(())
    })
    .await;
    assert!(app.text("#orb-error").await.starts_with("The reply failed"));
    app.screenshots("orb-try-again").await;
    app.click("#orb-retry").await;
    app.wait_for("the answer", |app| async move {
        (app.text("#answer").await.trim() == "Now it works.").then_some(())
    })
    .await;
    assert!(!app.visible("#orb-retry").await);
    assert_eq!(app.text("#orb-error").await, "", "the old failure is gone");
    assert_eq!(
        data.last_reply(),
        (ReplyState::Done, "Now it works.".into())
    );
    let store = data.store();
    let chat = store.chats().unwrap()[0].id;
    let questions = store
        .records(chat)
        .unwrap()
        .into_iter()
        .filter(|r| r.role == jarvis::store::Role::User)
        .count();
    assert_eq!(questions, 1, "the same question, tried again");
    app.quit().await;
}

#[tokio::test]
#[ignore = "needs a display: run scripts/e2e"]
async fn a_settings_change_restarts_the_voice_only_once_jarvis_has_finished_speaking() {
    let _one = one_app_at_a_time().await;
    let pulse = jarvis::voice::pulse::Pulse::start().expect("a PulseAudio server");
    let stub = Stub::start().await.unwrap();
    let answer = "Paris is the capital of France. It lies on the river Seine. About two million \
                  people live there. It is known for its museums and its old streets.";
    stub.push(Script::text(answer).deltas_of(40));
    let data = Data::with_voice(&pulse);
    let app = App::start(&stub, &data).await;
    app.orb_window().await;
    app.wait_for("the voice loop", |app| async move {
        app.visible("#listen").await.then_some(())
    })
    .await;
    let speaker = pulse.record_speaker().unwrap();
    app.type_into("#orb-question", "Tell me about Paris.\n")
        .await;
    app.wait_for_phase("speaking", "speaking").await;
    data.wait_for_reply_end().await;
    // The text has ended; its voice goes on. A setting that needs a new voice loop is saved.
    app.chat_window().await;
    app.open_settings().await;
    app.wait_for("the settings", |app| async move {
        app.visible("#set-wake").await.then_some(())
    })
    .await;
    app.eval("document.getElementById('set-wake').value = '0.6'; return true;")
        .await;
    app.click("#settings-save").await;
    app.orb_window().await;
    app.wait_for_phase("idle", "the voice to end").await;
    // Play is pressed while the restart may still be waiting for quiet or building the new loop:
    // either way the answer is said whole (the restart waits again, or the new loop says it).
    let first = loud(&played_whole(speaker, "the first telling").await);
    // The same answer once more, whole, to compare with.
    let speaker = pulse.record_speaker().unwrap();
    app.click("#orb-play").await;
    app.wait_for_phase("speaking", "speaking again").await;
    app.wait_for_phase("idle", "the replay to end").await;
    let whole = loud(&played_whole(speaker, "the replay").await);
    eprintln!("loud tenths of a second: first telling {first}, replay {whole}");
    assert!(whole >= 30, "the answer takes seconds to say: {whole}");
    // The same audio counts a few tenths either way from one telling to the next (replays of it
    // measured 61 to 66 here, a first telling 59 to 65): four fifths tells a telling heard whole
    // from one a restart cut, which loses seconds (the save comes a second or two into it).
    assert!(
        first * 5 >= whole * 4,
        "the first telling was not cut by the restart: {first} of {whole} loud tenths"
    );
    let saved = std::fs::read_to_string(data.path().join("settings.toml")).unwrap();
    assert!(saved.contains("wake_threshold = 0.6"), "{saved}");
    app.quit().await;
}

#[tokio::test]
#[ignore = "needs a display: run scripts/e2e"]
async fn jarvis_s_voice_and_its_speed_are_chosen_in_settings_and_a_missing_piper_is_said() {
    let _one = one_app_at_a_time().await;
    let stub = Stub::start().await.unwrap();
    // A data folder with no models: Piper's voice is not installed.
    let data = Data::new();
    let app = App::start(&stub, &data).await;
    app.chat_window().await;
    app.open_settings().await;
    app.wait_for("the settings", |app| async move {
        app.visible("#set-tts").await.then_some(())
    })
    .await;
    let shown = app
        .eval(
            "return [document.getElementById('set-tts').value,
                     document.getElementById('set-speed').value,
                     document.getElementById('set-tts-note').textContent];",
        )
        .await;
    let (engine, speed, note): (String, String, String) = serde_json::from_value(shown).unwrap();
    assert_eq!((engine.as_str(), speed.as_str()), ("piper", "175"));
    assert!(
        note.contains("Piper's voice is not installed") && note.contains("espeak-ng speaks"),
        "{note}"
    );
    app.screenshots("settings-voice").await;
    app.eval(
        "document.getElementById('set-tts').value = 'espeak';
         document.getElementById('set-speed').value = '220'; return true;",
    )
    .await;
    app.click("#settings-save").await;
    app.wait_for("the settings saved", |app| async move {
        (!app.visible("#settings").await).then_some(())
    })
    .await;
    let saved = std::fs::read_to_string(data.path().join("settings.toml")).unwrap();
    assert!(
        saved.contains("tts = \"espeak\"") && saved.contains("tts_speed = 220"),
        "{saved}"
    );
    // Opened again, it shows what was saved.
    app.open_settings().await;
    app.wait_for("the saved voice shown", |app| async move {
        let shown = app
            .eval(
                "return [document.getElementById('set-tts').value,
                         document.getElementById('set-speed').value];",
            )
            .await;
        (shown == serde_json::json!(["espeak", "220"])).then_some(())
    })
    .await;
    app.quit().await;
}

#[tokio::test]
#[ignore = "needs a display: run scripts/e2e"]
async fn a_keyring_that_never_answers_holds_neither_the_start_nor_the_window_and_says_why() {
    let _one = one_app_at_a_time().await;
    // A locked keyring whose unlock prompt nobody answers, on the app's own session bus.
    let bus = SessionBus::start();
    let keyring = LockedKeyring::serve(&bus);
    let stub = Stub::start().await.unwrap();
    let mut data = Data::new();
    // A backend whose key is looked for in the keyring: the app starts without waiting for it.
    let settings = data.path().join("settings.toml");
    let text = std::fs::read_to_string(&settings).unwrap();
    std::fs::write(
        &settings,
        text.replace("requires_key = false", "requires_key = true"),
    )
    .unwrap();
    data.set_env("DBUS_SESSION_BUS_ADDRESS", bus.address());
    data.set_env("JARVIS_KEYRING", "on");
    let app = App::start(&stub, &data).await;
    assert!(
        keyring.prompts() >= 1,
        "the start asked the keyring for the key"
    );
    app.chat_window().await;
    let asked_at_start = keyring.prompts();
    app.click("#open-settings").await;
    assert!(
        keyring.wait_for_prompts(asked_at_start + 1, LIMIT),
        "Settings asked the keyring where a key is"
    );
    // The keyring holds its answer back; the window does not wait for it.
    assert_eq!(
        app.eval("return document.title").await,
        serde_json::json!("Jarvis"),
        "the window answers while the keyring is asked"
    );
    let note = app
        .wait_for("the settings", |app| async move {
            let open = app
                .eval("return document.getElementById('settings').open")
                .await;
            let note = app.text("#set-key-note").await;
            (open == serde_json::json!(true) && !note.is_empty()).then_some(note)
        })
        .await;
    assert!(
        note.contains("did not answer") && note.contains("locked"),
        "the key's note says why no key shows: {note}"
    );
    app.screenshots("keyring-not-answering").await;
    // Saved while the keyring still has not answered: the dialog closes.
    app.click("#settings-save").await;
    app.wait_for("the settings to close", |app| async move {
        (app.eval("return document.getElementById('settings').open")
            .await
            == serde_json::json!(false))
        .then_some(())
    })
    .await;
    assert_eq!(
        app.text("#settings-error").await,
        "",
        "saved without an error"
    );
    // A question says what to do, at once: the key is still in the locked keyring.
    app.type_question("Are you there?").await;
    app.wait_for_state("failed").await;
    let shown = app.texts(".message.assistant").await.join("\n");
    assert!(
        shown.contains("has not given OPENAI_API_KEY yet") && shown.contains("unlock it"),
        "the reply says why: {shown}"
    );
    assert!(
        stub.received().is_empty(),
        "nothing was sent without the key"
    );
    app.screenshots("keyring-not-answering-asked").await;

    // Issue 28 item 11: a new key while the keyring does not answer. Save hung for good (the
    // dialog open, the button dead); it says why within the keyring's wait, and the file is
    // as it was.
    let before = std::fs::read_to_string(&settings).unwrap();
    app.click("#open-settings").await;
    app.wait_for("the settings again", |app| async move {
        (app.eval("return document.getElementById('settings').open")
            .await
            == serde_json::json!(true))
        .then_some(())
    })
    .await;
    app.type_into("#set-key", "sk-a-new-key").await;
    app.click("#settings-save").await;
    let refused = app
        .wait_for("Save to say why", |app| async move {
            let error = app.text("#settings-error").await;
            (!error.is_empty()).then_some(error)
        })
        .await;
    assert!(
        refused.contains("did not answer") && refused.contains("nothing was saved"),
        "{refused}"
    );
    assert_eq!(std::fs::read_to_string(&settings).unwrap(), before);
    app.screenshots("keyring-not-answering-new-key").await;
    // A change of the backend's own settings is saved and put in force, its key still to come
    // from the keyring.
    app.eval(
        "document.getElementById('set-key').value = '';
         document.getElementById('set-model').value = 'stub-model-two';
         return true",
    )
    .await;
    app.click("#settings-save").await;
    app.wait_for("the settings to close after the change", |app| async move {
        (app.eval("return document.getElementById('settings').open")
            .await
            == serde_json::json!(false))
        .then_some(())
    })
    .await;
    let saved = std::fs::read_to_string(&settings).unwrap();
    assert!(saved.contains("model = \"stub-model-two\""), "{saved}");
    app.quit().await;
}

#[tokio::test]
#[ignore = "needs a display: run scripts/e2e"]
async fn a_damaged_database_opens_the_chat_window_with_the_reason_and_moving_it_aside_starts_afresh(
) {
    let _one = one_app_at_a_time().await;
    let stub = Stub::start().await.unwrap();
    let mut data = Data::new();
    // A key from the environment, which the app takes out of its own at start.
    data.set_env("OPENAI_API_KEY", "sk-kept-across-the-restart");
    let db = data.path().join("data").join("jarvis.db");
    let garbage = "not a database, whatever it once was. ".repeat(300);
    std::fs::write(&db, &garbage).unwrap();

    // Quit is a way out that leaves the file as it is.
    let app = App::start_chat_only(&stub, &data).await;
    app.chat_window().await;
    app.wait_for("the reason", |app| async move {
        app.visible("#startup-problem").await.then_some(())
    })
    .await;
    assert!(!app.visible("#app").await, "no chats are offered");
    let reason = app.text("#startup-reason").await;
    assert!(
        reason.contains("is damaged") && reason.contains(&db.display().to_string()),
        "{reason}"
    );
    assert!(app.text("#startup-advice").await.contains("Move it aside"));
    assert!(!window_mapped("Jarvis orb"), "no orb without the chats");
    app.screenshots("damaged-database").await;
    // (Clicked from the page after the call returns: the app is gone before a WebDriver click
    // could answer.)
    app.eval("setTimeout(() => document.getElementById('quit-app').click(), 100); return true")
        .await;
    let quit = std::time::Instant::now();
    while App::running() && quit.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!App::running(), "Quit ends the app");
    assert_eq!(std::fs::read_to_string(&db).unwrap(), garbage);
    app.quit().await;

    // Moving it aside keeps it and starts Jarvis again on a fresh database.
    let app = App::start_chat_only(&stub, &data).await;
    app.chat_window().await;
    app.wait_for("the way out", |app| async move {
        app.visible("#move-aside").await.then_some(())
    })
    .await;
    app.eval("setTimeout(() => document.getElementById('move-aside').click(), 100); return true")
        .await;
    let moved = std::time::Instant::now();
    let aside = loop {
        let found = std::fs::read_dir(data.path().join("data"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.to_string_lossy().contains("jarvis.db.unusable-"));
        if let Some(found) = found {
            break found;
        }
        assert!(moved.elapsed() < LIMIT, "the file was not moved aside");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(std::fs::read_to_string(&aside).unwrap(), garbage);
    // The app started again: its chats open (a fresh database) and its orb comes up.
    while !window_mapped("Jarvis orb") {
        assert!(moved.elapsed() < LIMIT, "the app did not start again");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let fresh = data.store();
    assert!(fresh.chats().unwrap().is_empty());
    assert_eq!(fresh.integrity_check().unwrap(), "ok");
    // Issue 28 item 10: the app started again was given the key (it inherited an environment
    // the first one had taken it out of). What a process was started with is its
    // /proc/PID/environ, whatever it later removes from its own.
    let started_with = std::fs::read(format!("/proc/{}/environ", App::newest_pid())).unwrap();
    assert!(
        started_with
            .split(|b| *b == 0)
            .any(|var| var == b"OPENAI_API_KEY=sk-kept-across-the-restart"),
        "the app started again has no API key"
    );
    app.quit().await;
}

/// Issue 17 items 1–3: while only the small model answers, the chat window offers the machine's
/// pick; one click downloads it with a progress bar that moves as the bytes come (a loopback
/// server of the test's own, held at 40 %), the Models page in Settings shows the same download,
/// stops it keeping what came, and the offer resumes it from there and makes it the model that
/// answers. The page then lists a server running here (the stub, as Ollama) and switches to it.
#[tokio::test]
#[ignore = "needs a display: run scripts/e2e"]
async fn the_offered_model_downloads_with_a_progress_bar_stops_resumes_and_answers() {
    const FILE: &str = "test-3b-q4_k_m.gguf";
    let _one = one_app_at_a_time().await;
    let stub = Stub::start().await.unwrap();
    stub.set_models(&["qwen2.5:3b"]);
    let mut body = b"GGUF\x03\0\0\0".to_vec();
    body.extend((0u32..3 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8));
    let len = body.len() as u64;
    let server = jarvis_stub::files::FileServer::start(body, FILE)
        .await
        .unwrap();
    let held = len * 2 / 5;
    server.mode(jarvis_stub::files::Mode::HoldAt(held));
    let mut data = Data::new();
    let catalog = data.path().join("catalog.toml");
    std::fs::write(
        &catalog,
        jarvis::models::test_catalog(
            "test-3b",
            "Test 3B Instruct",
            FILE,
            server.url(),
            server.body(),
        ),
    )
    .unwrap();
    std::fs::write(data.path().join("settings.toml"), "backend = \"local\"\n").unwrap();
    data.set_env("JARVIS_MODEL_CATALOG", &catalog.display().to_string());
    data.set_env(
        "JARVIS_MODEL_SERVERS",
        &format!("ollama={}", stub.openai_url()),
    );
    let app = App::start_chat_only(&stub, &data).await;
    app.chat_window().await;

    let offer = app
        .wait_for("the offer", |app| async move {
            let text = app.text("#offer-text").await;
            (app.visible("#model-offer").await && !text.is_empty()).then_some(text)
        })
        .await;
    assert!(
        offer.contains("answering with SmolLM2-135M-Instruct.Q4_1.gguf")
            && offer.contains("Test 3B Instruct (3 MB, MIT)"),
        "{offer}"
    );
    app.click("#offer-get").await;
    let bar = "return document.getElementById('offer-bar').value";
    let progress = app
        .wait_for("the bar at 40 %", |app| async move {
            let value = app.eval(bar).await.as_f64().unwrap_or(0.0);
            ((value - 0.4).abs() < 0.01).then_some(app.text("#offer-progress-text").await)
        })
        .await;
    assert!(
        progress.starts_with("Downloading Test 3B Instruct: 1 MB of 3 MB"),
        "{progress}"
    );
    assert!(app.visible("#offer-stop").await && !app.visible("#offer-get").await);
    app.screenshots("model-offer-downloading").await;

    // The Models page, from Settings, shows the same download; Stop keeps what came.
    app.open_settings().await;
    app.click("#open-models").await;
    app.wait_for("the page's list and bar", |app| async move {
        let value = app
            .eval("return document.getElementById('pull-bar').value")
            .await
            .as_f64()
            .unwrap_or(0.0);
        let state = app
            .attr("#model-list [data-name='test-3b']", "data-state")
            .await;
        ((value - 0.4).abs() < 0.01 && state == "absent").then_some(())
    })
    .await;
    let download = "#model-list [data-name='test-3b'] button.download";
    assert_eq!(
        app.eval(&format!(
            "return document.querySelector(\"{download}\").disabled"
        ))
        .await,
        serde_json::json!(true),
        "one download at a time"
    );
    let served = app
        .wait_for("the server running here", |app| async move {
            let text = app.text("#server-list [data-name='qwen2.5:3b']").await;
            (!text.is_empty()).then_some(text)
        })
        .await;
    assert!(served.contains("Ollama"), "{served}");
    app.screenshots("models-page-downloading").await;
    assert_eq!(app.text(download).await, "Downloading…");
    app.click("#pull-stop").await;
    app.wait_for(
        "the download stopped, to resume from 40 %",
        |app| async move { (app.text(download).await == "Resume (40 %)").then_some(()) },
    )
    .await;
    assert!(
        app.text("#pull-text")
            .await
            .contains("download stopped; 1 MB kept"),
        "{}",
        app.text("#pull-text").await
    );
    app.click("#models-close").await;

    // The offer resumes it from there and puts it in use.
    server.mode(jarvis_stub::files::Mode::Whole);
    app.wait_for("the offer's Resume", |app| async move {
        (app.text("#offer-get").await == "Resume").then_some(())
    })
    .await;
    app.click("#offer-get").await;
    app.wait_for("the model answering", |app| async move {
        let said = app.text("#offer-progress-text").await;
        (said.contains("Jarvis now answers with it")
            && app.text("#backend-label").await == format!("local · {FILE}"))
        .then_some(())
    })
    .await;
    assert_eq!(
        server.ranges(),
        vec![None, Some(format!("bytes={held}-"))],
        "resumed, not downloaded again"
    );
    let settings = std::fs::read_to_string(data.path().join("settings.toml")).unwrap();
    assert!(
        settings.contains(&format!("model = \"{FILE}\"")),
        "{settings}"
    );
    app.screenshots("model-offer-done").await;

    // The page says it is in use, and switches to the server's model in one step.
    app.open_settings().await;
    app.click("#open-models").await;
    app.wait_for("the model in use", |app| async move {
        (app.attr("#model-list [data-name='test-3b']", "data-state")
            .await
            == "in_use")
            .then_some(())
    })
    .await;
    app.click("#server-list [data-name='qwen2.5:3b'] button")
        .await;
    app.wait_for("the served model answering", |app| async move {
        (app.text("#backend-label").await == "openai · qwen2.5:3b"
            && app
                .text("#server-list [data-name='qwen2.5:3b']")
                .await
                .contains("In use"))
        .then_some(())
    })
    .await;
    app.quit().await;
}

/// Issue 17 item 6: started as the autostart entry starts it (`--start-hidden`), Jarvis shows no
/// chat window and runs in the tray — the tray's Show chat brings the chats up — and the orb
/// shows only if it was showing when Jarvis last quit.
#[tokio::test]
#[ignore = "needs a display: run scripts/e2e"]
async fn started_hidden_at_login_jarvis_waits_in_the_tray_with_the_orb_as_it_was_left() {
    let _one = one_app_at_a_time().await;
    let stub = Stub::start().await.unwrap();
    let data = Data::new();
    data.store().create_chat("Kept from yesterday").unwrap();

    // Showing when Jarvis last quit: the orb shows, the chat window does not.
    let app = App::start_hidden(&stub, &data).await;
    app.wait_for("the orb shown", |_| async {
        window_mapped("Jarvis orb").then_some(())
    })
    .await;
    assert!(!window_mapped("Jarvis"), "no chat window at login");
    // The tray's Show chat (the same path as a second start's action) lists the chats.
    app.action("show-chat").await;
    app.chat_window().await;
    app.wait_for("the chats listed", |app| async move {
        app.text("#chat-list")
            .await
            .contains("Kept from yesterday")
            .then_some(())
    })
    .await;
    // The orb is hidden, then Jarvis quits.
    app.orb_window().await;
    app.click("#hide").await;
    app.wait_for("the orb hidden", |_| async {
        (!window_mapped("Jarvis orb")).then_some(())
    })
    .await;
    app.quit().await;

    // Hidden when it last quit: neither window shows; the voice is not listening.
    let app = App::start_hidden(&stub, &data).await;
    app.orb_window().await;
    app.wait_for("the orb page loaded", |app| async move {
        (app.eval("return document.readyState").await == serde_json::json!("complete"))
            .then_some(())
    })
    .await;
    assert!(!window_mapped("Jarvis orb") && !window_mapped("Jarvis"));
    app.quit().await;

    // A start that is not hidden shows the chat window, the orb still as it was left.
    let app = App::start_chat_only(&stub, &data).await;
    app.chat_window().await;
    assert!(!window_mapped("Jarvis orb"));
    app.quit().await;
}
