//! The voice conversation through the service: its queue, Remove, stop, answered while away, modes,
//! End conversation and forgetting — with typed questions, real SQLite and the stub over loopback.

mod support;

use std::time::Duration;

use jarvis::config::BackendKind;
use jarvis::service::{
    ListenMode, VoiceNotice, VoiceStatus, VoiceTicket, VoiceUpdate, QUEUE_LIMIT,
};
use jarvis::store::Role;
use jarvis::{AskError, Event, ReplyState, Service, ServiceOptions};
use jarvis_stub::{Gate, Script, Stub};
use support::*;

/// Queues a reply that runs until the test releases its gate: its first delta written, the rest
/// held, so it can be asked over, hidden from or stopped whatever the machine's load.
fn held(stub: &Stub, text: &str) -> Gate {
    let gate = stub.gate();
    stub.push(
        Script::text(text)
            .deltas_of(text.len().div_ceil(40).max(1))
            .held_after(1, &gate),
    );
    gate
}

fn started(ticket: VoiceTicket) -> jarvis::ReplyId {
    match ticket {
        VoiceTicket::Started { reply } => reply,
        other => panic!("expected the question to start, it was {other:?}"),
    }
}

/// Puts a question as the voice loop does when it heard it in `mode`.
async fn heard(service: &Service, text: &str, mode: ListenMode) -> VoiceTicket {
    service.voice_ask_heard(text, mode).await.unwrap()
}

fn queued(ticket: VoiceTicket) -> u64 {
    match ticket {
        VoiceTicket::Queued { id } => id,
        other => panic!("expected the question to wait, it was {other:?}"),
    }
}

/// A window on the voice conversation that remembers the last status it read, so a status read
/// while waiting for events is not missed by a later wait for a status.
struct Orb {
    attachment: jarvis::service::VoiceAttachment,
    last: Option<VoiceStatus>,
}

impl Orb {
    async fn attach(service: &Service) -> Orb {
        Orb {
            attachment: service.voice_attach().await.unwrap(),
            last: None,
        }
    }

    async fn next(&mut self) -> VoiceUpdate {
        let update = tokio::time::timeout(LIMIT, self.attachment.next())
            .await
            .expect("no voice update within the limit")
            .expect("the service stopped");
        if let VoiceUpdate::Status(status) = &update {
            self.last = Some(status.clone());
        }
        update
    }

    /// Reads until the status is as `done` wants; returns it.
    async fn status_until(&mut self, done: impl Fn(&VoiceStatus) -> bool) -> VoiceStatus {
        loop {
            if let Some(last) = self.last.as_ref().filter(|s| done(s)) {
                return last.clone();
            }
            self.next().await;
        }
    }

    /// Reads until `count` replies have ended; their endings and texts in order.
    async fn endings(&mut self, count: usize) -> Vec<(ReplyState, String)> {
        let mut ended = Vec::new();
        let mut text = std::collections::HashMap::<jarvis::ReplyId, String>::new();
        while ended.len() < count {
            match self.next().await {
                VoiceUpdate::Event(Event::Delta { reply, text: delta }) => {
                    text.entry(reply).or_default().push_str(&delta)
                }
                VoiceUpdate::Event(Event::ReplyEnded { reply, state, .. }) => {
                    ended.push((state, text.remove(&reply).unwrap_or_default()))
                }
                _ => {}
            }
        }
        ended
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn questions_asked_during_a_reply_wait_then_are_answered_in_order_nothing_cancelled() {
    let stub = Stub::start().await.unwrap();
    let first = held(&stub, "The first answer is long and slow. It goes on.");
    stub.push(Script::text("Second answer."));
    stub.push(Script::text("Third answer."));
    let dir = Dir::new();
    let service = service(&dir, settings(BackendKind::Openai, &stub));
    let mut orb = Orb::attach(&service).await;

    started(service.voice_ask("First question").await.unwrap());
    let second = queued(service.voice_ask("Second question").await.unwrap());
    let third = queued(service.voice_ask("Third question").await.unwrap());
    assert_ne!(second, third);
    let status = orb.status_until(|s| s.queue.len() == 2).await;
    let waiting: Vec<&str> = status.queue.iter().map(|q| q.text.as_str()).collect();
    assert_eq!(waiting, ["Second question", "Third question"]);
    first.release();

    let ended = orb.endings(3).await;
    assert_eq!(
        ended,
        [
            (
                ReplyState::Done,
                "The first answer is long and slow. It goes on.".to_string()
            ),
            (ReplyState::Done, "Second answer.".to_string()),
            (ReplyState::Done, "Third answer.".to_string()),
        ],
        "the first reply ran whole, then the waiting questions in order"
    );

    // The conversation is a chat: the six records in order, after a restart too.
    let chat = status.chat.expect("the conversation has a chat");
    drop((orb, service));
    let records = dir.store().records(chat).unwrap();
    let shown: Vec<(Role, &str)> = records.iter().map(|r| (r.role, r.text.as_str())).collect();
    assert_eq!(
        shown,
        [
            (Role::User, "First question"),
            (
                Role::Assistant,
                "The first answer is long and slow. It goes on."
            ),
            (Role::User, "Second question"),
            (Role::Assistant, "Second answer."),
            (Role::User, "Third question"),
            (Role::Assistant, "Third answer."),
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_queue_holds_four_and_remove_withdraws_a_waiting_question() {
    let stub = Stub::start().await.unwrap();
    let first = held(&stub, "A slow first answer that takes a while to write.");
    stub.push(Script::text("Answer to q1."));
    stub.push(Script::text("Answer to q3."));
    stub.push(Script::text("Answer to q4."));
    let dir = Dir::new();
    let service = service(&dir, settings(BackendKind::Openai, &stub));
    let mut orb = Orb::attach(&service).await;

    started(service.voice_ask("q0").await.unwrap());
    let ids: Vec<u64> = queue_all(&service, ["q1", "q2", "q3", "q4"]).await;
    assert_eq!(ids.len(), QUEUE_LIMIT);
    let full = service.voice_ask("q5").await.unwrap_err();
    assert!(matches!(full, AskError::QueueFull), "{full}");
    assert!(full.to_string().contains("4 questions are already waiting"));

    assert!(service.voice_remove(ids[1]).await.unwrap(), "q2 withdrawn");
    assert!(!service.voice_remove(ids[1]).await.unwrap(), "only once");
    let status = orb.status_until(|s| s.queue.len() == 3).await;
    let waiting: Vec<&str> = status.queue.iter().map(|q| q.text.as_str()).collect();
    assert_eq!(waiting, ["q1", "q3", "q4"]);
    first.release();

    let ended = orb.endings(4).await;
    assert!(ended.iter().all(|(state, _)| *state == ReplyState::Done));
    let asked: Vec<String> = stub
        .received()
        .iter()
        .map(|r| r.body["messages"].as_array().unwrap().last().unwrap()["content"].to_string())
        .collect();
    assert_eq!(asked.len(), 4, "q2 was never sent: {asked:?}");
    assert!(asked.iter().all(|q| !q.contains("q2")), "{asked:?}");
}

async fn queue_all<const N: usize>(service: &Service, questions: [&str; N]) -> Vec<u64> {
    let mut ids = Vec::new();
    for q in questions {
        ids.push(queued(service.voice_ask(q).await.unwrap()));
    }
    ids
}

#[tokio::test(flavor = "multi_thread")]
async fn stop_cuts_the_reply_keeps_its_text_and_drops_every_waiting_question() {
    let stub = Stub::start().await.unwrap();
    let _running = stub.gate(); // never released: only the stop ends it
    stub.push(
        Script::text("One. Two. Three. Four. Five. Six. Seven. Eight.")
            .deltas_of(5)
            .held_after(2, &_running),
    );
    let dir = Dir::new();
    let service = service(&dir, settings(BackendKind::Openai, &stub));
    let mut orb = Orb::attach(&service).await;
    let reply = started(service.voice_ask("Count slowly").await.unwrap());
    queued(service.voice_ask("And then?").await.unwrap());
    queued(service.voice_ask("And after that?").await.unwrap());
    // Let some of it be written.
    while !matches!(orb.next().await, VoiceUpdate::Event(Event::Delta { .. })) {}
    assert!(service.voice_stop().await.unwrap());
    let ended = orb.endings(1).await;
    assert_eq!(ended[0].0, ReplyState::Stopped);
    let status = orb.status_until(|s| s.replying.is_none()).await;
    assert!(status.queue.is_empty(), "{status:?}");
    // Nothing else starts.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(stub.received().len(), 1);
    let stored = dir.store().reply(reply).unwrap().unwrap();
    assert_eq!(stored.state, ReplyState::Stopped);
    assert!(
        !stored.text.is_empty() && stored.text.ends_with(&ended[0].1),
        "what was written is kept: {stored:?}"
    );
    assert!(stored.text.len() < "One. Two. Three. Four. Five. Six. Seven. Eight.".len());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reply_that_ends_while_no_window_watches_is_answered_while_away() {
    let stub = Stub::start().await.unwrap();
    let gate = held(&stub, "Written while the orb was hidden.");
    stub.push(Script::text("Watched this time."));
    let dir = Dir::new();
    let service = service(&dir, settings(BackendKind::Openai, &stub));
    let orb = Orb::attach(&service).await;
    let reply = started(service.voice_ask("Tell me something").await.unwrap());
    drop(orb); // the orb is hidden mid-reply: it only detaches
    gate.release();
    let mut status = service.voice_status();
    tokio::time::timeout(LIMIT, status.wait_for(|s| s.answered_away == Some(reply)))
        .await
        .expect("the reply was answered while away")
        .unwrap();
    assert_eq!(
        dir.store().reply(reply).unwrap().unwrap().state,
        ReplyState::Done
    );

    // Shown again: the status says answered while away, the microphone stays shut, and the
    // reply replays whole.
    let mut orb = Orb::attach(&service).await;
    let status = orb.status_until(|_| true).await;
    assert_eq!(status.answered_away, Some(reply));
    assert!(!status.listening);
    let replayed = orb.endings(1).await;
    assert_eq!(
        replayed[0],
        (
            ReplyState::Done,
            "Written while the orb was hidden.".to_string()
        )
    );
    service.acknowledge_answer().await.unwrap();
    orb.status_until(|s| s.answered_away.is_none()).await;

    // A reply watched to its end is not marked.
    started(service.voice_ask("Again").await.unwrap());
    orb.endings(1).await;
    let status = orb.status_until(|s| s.replying.is_none()).await;
    assert_eq!(status.answered_away, None);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_mode_chosen_during_a_reply_takes_effect_once_it_is_answered() {
    let stub = Stub::start().await.unwrap();
    let gate = held(&stub, "Some answer that takes a moment.");
    let dir = Dir::new();
    let service = service(&dir, settings(BackendKind::Openai, &stub));
    let mut orb = Orb::attach(&service).await;
    assert_eq!(
        orb.status_until(|_| true).await.mode,
        ListenMode::PushToTalk
    );
    service
        .set_listen_mode(ListenMode::HandsFree)
        .await
        .unwrap();
    orb.status_until(|s| s.mode == ListenMode::HandsFree).await;

    started(service.voice_ask("Go").await.unwrap());
    service.set_listen_mode(ListenMode::Wake).await.unwrap();
    let status = orb.status_until(|s| s.pending_mode.is_some()).await;
    assert_eq!(status.mode, ListenMode::HandsFree, "not during the reply");
    assert_eq!(status.pending_mode, Some(ListenMode::Wake));
    gate.release();
    let status = orb.status_until(|s| s.replying.is_none()).await;
    assert_eq!(status.mode, ListenMode::Wake);
    assert_eq!(status.pending_mode, None);
}

#[tokio::test(flavor = "multi_thread")]
async fn push_to_talk_press_and_release_reach_the_conversation_and_cancel_nothing() {
    let stub = Stub::start().await.unwrap();
    let gate = held(&stub, "An answer that must not be cut by the shortcut.");
    let dir = Dir::new();
    let service = service(&dir, settings(BackendKind::Openai, &stub));
    let mut orb = Orb::attach(&service).await;
    started(service.voice_ask("Question").await.unwrap());
    service.push_to_talk(true).await.unwrap();
    orb.status_until(|s| s.listening).await;
    service.push_to_talk(false).await.unwrap();
    orb.status_until(|s| !s.listening).await;
    gate.release();
    let ended = orb.endings(1).await;
    assert_eq!(ended[0].0, ReplyState::Done);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_bound_by_hand_opens_the_microphone_and_its_next_press_ends_the_utterance() {
    let stub = Stub::start().await.unwrap();
    let gate = held(&stub, "An answer that must not be cut by the key.");
    let dir = Dir::new();
    let service = service(&dir, settings(BackendKind::Openai, &stub));
    let mut orb = Orb::attach(&service).await;
    assert_eq!(
        orb.status_until(|_| true).await.mode,
        ListenMode::PushToTalk
    );
    started(service.voice_ask("Question").await.unwrap());
    // `jarvis-desktop --action talk`, twice: no release comes between.
    service.talk().await.unwrap();
    orb.status_until(|s| s.listening).await;
    service.talk().await.unwrap();
    orb.status_until(|s| !s.listening).await;
    service.talk().await.unwrap();
    orb.status_until(|s| s.listening).await;
    service.talk().await.unwrap();
    orb.status_until(|s| !s.listening).await;
    gate.release();
    let ended = orb.endings(1).await;
    assert_eq!(ended[0].0, ReplyState::Done, "the key cancels nothing");
}

#[tokio::test(flavor = "multi_thread")]
async fn end_conversation_starts_afresh_and_an_unsaved_one_leaves_no_chat() {
    for save in [true, false] {
        let stub = Stub::start().await.unwrap();
        stub.push(Script::text("Hello."));
        stub.push(Script::text("A new conversation."));
        let dir = Dir::new();
        let mut s = settings(BackendKind::Openai, &stub);
        s.voice.save_conversations = save;
        let service = service(&dir, s);
        let mut orb = Orb::attach(&service).await;
        started(service.voice_ask("Hi").await.unwrap());
        orb.endings(1).await;
        let first = orb
            .status_until(|s| s.replying.is_none())
            .await
            .chat
            .unwrap();
        assert!(service.activity().borrow().conversation);

        assert!(service.end_conversation().await.unwrap());
        orb.status_until(|s| s.chat.is_none()).await;
        assert!(!service.end_conversation().await.unwrap(), "nothing to end");
        assert!(!service.activity().borrow().conversation);
        let chats: Vec<_> = service.chats().await.unwrap();
        assert_eq!(
            chats.iter().any(|c| c.id == first),
            save,
            "saved: {save}, chats: {chats:?}"
        );

        started(service.voice_ask("Anyone there?").await.unwrap());
        let second = orb.status_until(|s| s.chat.is_some()).await.chat.unwrap();
        let ended = orb.endings(1).await;
        assert_eq!(ended[0].1, "A new conversation.");
        // (An unsaved conversation lives in memory: its records are the service's to read.)
        let records = service.records(second).await.unwrap();
        let texts: Vec<&str> = records.iter().map(|r| r.text.as_str()).collect();
        assert_eq!(texts, ["Anyone there?", "A new conversation."]);
        // The new conversation's request does not carry the old one.
        let body = stub.received()[1].body.to_string();
        assert!(!body.contains("Hello."), "{body}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unwatched_idle_conversation_is_forgotten_after_the_keep_time() {
    let stub = Stub::start().await.unwrap();
    stub.push(Script::text("Short."));
    let dir = Dir::new();
    let config = dir.config(settings(BackendKind::Openai, &stub));
    let backend = jarvis::llm::from_config(&config, &env_with(&[])).unwrap();
    let mut options = ServiceOptions::from_settings(&config.settings);
    options.voice_keep = Duration::from_millis(300);
    let service = Service::start(dir.store(), backend, options);
    let mut orb = Orb::attach(&service).await;
    started(service.voice_ask("Hi").await.unwrap());
    orb.endings(1).await;
    orb.status_until(|s| s.replying.is_none()).await;

    // Watched, it stays well past the keep time.
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(service.activity().borrow().conversation);
    drop(orb);
    tokio::time::timeout(LIMIT, async {
        while service.activity().borrow().conversation {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("forgotten once unwatched for the keep time");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_keep_time_forget_waits_for_a_chat_window_reply_and_keeps_the_listening_chosen() {
    let stub = Stub::start().await.unwrap();
    stub.push(Script::text("Short."));
    let dir = Dir::new();
    let config = dir.config(settings(BackendKind::Openai, &stub));
    let backend = jarvis::llm::from_config(&config, &env_with(&[])).unwrap();
    let mut options = ServiceOptions::from_settings(&config.settings);
    options.voice_keep = Duration::from_millis(300);
    options.wake_while_hidden = true;
    let service = Service::start(dir.store(), backend, options);
    let mut orb = Orb::attach(&service).await;
    started(service.voice_ask("Hi").await.unwrap());
    orb.endings(1).await;
    orb.status_until(|s| s.replying.is_none()).await;
    // Listening for "Hey Jarvis", kept on while the orb is hidden.
    service.set_listen_mode(ListenMode::Wake).await.unwrap();
    service.set_listening(true).await.unwrap();
    let chat = orb
        .status_until(|s| s.listening && s.mode == ListenMode::Wake)
        .await
        .chat
        .expect("the conversation has a chat");
    // The chat window asks on the conversation's chat (it is saved); its reply is held.
    let gate = held(&stub, "A long answer written for the chat window.");
    let reply = service
        .ask(chat, "And a question typed in the chat window.")
        .await
        .unwrap();
    let mut window = service.attach(chat).await.unwrap();
    service.set_orb_shown(false).await.unwrap();
    drop(orb);
    // Unwatched for three keep times while the window's reply runs: nothing is forgotten, and
    // nothing is stopped.
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(
        service.activity().borrow().conversation,
        "forgotten mid-reply"
    );
    gate.release();
    let events = until_end(&mut window, reply).await;
    assert!(
        matches!(
            events.last(),
            Some(Event::ReplyEnded {
                state: ReplyState::Done,
                ..
            })
        ),
        "{events:?}"
    );
    // Then, idle for the keep time, it is forgotten, and the wake word still listens.
    tokio::time::timeout(LIMIT, async {
        while service.activity().borrow().conversation {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("forgotten once idle for the keep time");
    let status = service.voice_status().borrow().clone();
    assert!(
        status.listening && status.mode == ListenMode::Wake,
        "{status:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hidden_orb_holds_no_open_microphone_after_its_setting_or_its_mode_changes() {
    let stub = Stub::start().await.unwrap();
    let dir = Dir::new();
    let config = dir.config(settings(BackendKind::Openai, &stub));
    let backend = jarvis::llm::from_config(&config, &env_with(&[])).unwrap();
    let mut options = ServiceOptions::from_settings(&config.settings);
    options.wake_while_hidden = true;
    let service = Service::start(dir.store(), backend, options.clone());
    let mut orb = Orb::attach(&service).await;
    service.set_listen_mode(ListenMode::Wake).await.unwrap();
    service.set_listening(true).await.unwrap();
    orb.status_until(|s| s.listening && s.mode == ListenMode::Wake)
        .await;
    // Hidden, it listens for "Hey Jarvis", as the setting says.
    service.set_orb_shown(false).await.unwrap();
    // The setting turned off while hidden: the microphone closes.
    let off = ServiceOptions {
        wake_while_hidden: false,
        ..options.clone()
    };
    service.reconfigure(None, off).await.unwrap();
    orb.status_until(|s| !s.listening).await;

    // On again, listening for the wake word while hidden; then a mode chosen during a reply is
    // taken up after it, still hidden: hands-free is never listened in by a hidden orb.
    service.reconfigure(None, options).await.unwrap();
    service.set_orb_shown(true).await.unwrap();
    service.set_listening(true).await.unwrap();
    service.set_orb_shown(false).await.unwrap();
    let gate = held(
        &stub,
        "An answer written slowly enough to choose a mode during it.",
    );
    started(service.voice_ask("Hi").await.unwrap());
    service
        .set_listen_mode(ListenMode::HandsFree)
        .await
        .unwrap();
    let during = orb
        .status_until(|s| s.pending_mode == Some(ListenMode::HandsFree))
        .await;
    assert!(during.listening, "the wake word listens while hidden");
    gate.release();
    // Its first word on the mode taken up is that the microphone is off.
    let after = orb.status_until(|s| s.mode == ListenMode::HandsFree).await;
    assert!(!after.listening, "{after:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn stop_reply_from_the_tray_stops_every_reply_and_the_activity_says_so() {
    let stub = Stub::start().await.unwrap();
    // Neither is released: only Stop reply ends them.
    let _chat = held(&stub, "The chat window's long reply, written slowly.");
    let _orb = held(&stub, "The orb's long reply, also written slowly.");
    let dir = Dir::new();
    let service = service(&dir, settings(BackendKind::Openai, &stub));
    let mut activity = service.activity();
    assert!(!activity.borrow().can_stop());
    let (chat, chat_reply, mut window) = ask_new(&service, "Chat question").await;
    let mut orb = Orb::attach(&service).await;
    started(service.voice_ask("Orb question").await.unwrap());
    queued(service.voice_ask("Waiting question").await.unwrap());
    tokio::time::timeout(LIMIT, activity.wait_for(|a| a.replying.len() == 2))
        .await
        .unwrap()
        .unwrap();
    assert!(activity.borrow().replying.contains(&chat));
    assert!(activity.borrow().can_stop());

    assert_eq!(service.stop_all().await.unwrap(), 2);
    let chat_events = until_end(&mut window, chat_reply).await;
    assert_eq!(ending(&chat_events).0, ReplyState::Stopped);
    let orb_ended = orb.endings(1).await;
    assert_eq!(orb_ended[0].0, ReplyState::Stopped);
    tokio::time::timeout(LIMIT, activity.wait_for(|a| !a.can_stop()))
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let asked = stub.received();
    assert!(
        asked
            .iter()
            .all(|r| !r.body.to_string().contains("Waiting question")),
        "the waiting question was dropped"
    );
}

/// The last message's text of each request the stub received.
fn last_messages(stub: &Stub) -> Vec<String> {
    stub.received()
        .iter()
        .map(|r| {
            let last = r.body["messages"].as_array().unwrap().last().unwrap();
            last["content"].as_str().unwrap_or_default().to_string()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_spoken_question_says_how_it_was_asked_and_where_the_previous_answer_was_cut() {
    let stub = Stub::start().await.unwrap();
    stub.push(Script::text(
        "Paris is the capital of France. It lies on the Seine.",
    ));
    stub.push(Script::text("Rome is the capital of Italy."));
    stub.push(Script::text("Madrid."));
    let dir = Dir::new();
    let mut s = settings(BackendKind::Anthropic, &stub);
    s.voice.mode = ListenMode::HandsFree;
    let service = service(&dir, s);
    let mut orb = Orb::attach(&service).await;
    service.set_listening(true).await.unwrap();
    let first = started(heard(&service, "Tell me about Paris.", ListenMode::HandsFree).await);
    orb.endings(1).await;
    orb.status_until(|s| s.replying.is_none()).await;
    // The voice loop heard it cut after its first sentence.
    service
        .voice_heard(first, "Paris is the capital of France.".into())
        .await
        .unwrap();
    started(heard(&service, "And Rome?", ListenMode::HandsFree).await);
    orb.endings(1).await;
    orb.status_until(|s| s.replying.is_none()).await;
    // Typed into the orb, with the microphone shut; the previous answer was heard whole.
    service.set_listening(false).await.unwrap();
    started(service.voice_ask("And Spain?").await.unwrap());
    orb.endings(1).await;
    orb.status_until(|s| s.replying.is_none()).await;
    let lasts = last_messages(&stub);
    assert!(
        lasts[0].contains("Interaction: spoken, hands-free"),
        "{}",
        lasts[0]
    );
    assert!(!lasts[0].contains("Previous answer"), "{}", lasts[0]);
    assert!(
        lasts[1].contains(
            "Previous answer: cut off while spoken, after \"Paris is the capital of France.\"; the user did not hear the rest"
        ),
        "{}",
        lasts[1]
    );
    assert!(
        lasts[2].contains("Interaction: typed") && !lasts[2].contains("Previous answer"),
        "{}",
        lasts[2]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_question_typed_into_the_orb_is_told_as_typed_even_while_the_microphone_is_open() {
    let stub = Stub::start().await.unwrap();
    stub.push(Script::text("Typed answer."));
    stub.push(Script::text("Spoken answer."));
    let dir = Dir::new();
    let mut s = settings(BackendKind::Anthropic, &stub);
    s.voice.mode = ListenMode::HandsFree;
    let service = service(&dir, s);
    let mut orb = Orb::attach(&service).await;
    service.set_listening(true).await.unwrap();
    orb.status_until(|s| s.listening).await;
    started(service.voice_ask("Typed while listening").await.unwrap());
    orb.endings(1).await;
    orb.status_until(|s| s.replying.is_none()).await;
    // Heard in push to talk, put once the key is up and the microphone shut.
    service.set_listening(false).await.unwrap();
    started(
        heard(
            &service,
            "Said while the key was held",
            ListenMode::PushToTalk,
        )
        .await,
    );
    orb.endings(1).await;
    let lasts = last_messages(&stub);
    assert!(lasts[0].contains("Interaction: typed"), "{}", lasts[0]);
    assert!(
        lasts[1].contains("Interaction: spoken, push to talk"),
        "{}",
        lasts[1]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fifth_spoken_question_is_not_taken_and_the_orb_is_told_so() {
    let stub = Stub::start().await.unwrap();
    let _first = held(&stub, "A slow first answer that takes a while to write.");
    let dir = Dir::new();
    let service = service(&dir, settings(BackendKind::Openai, &stub));
    let mut orb = Orb::attach(&service).await;
    started(service.voice_ask("q0").await.unwrap());
    queue_all(&service, ["q1", "q2", "q3", "q4"]).await;
    let full = service
        .voice_ask_heard("And what about Rome?", ListenMode::HandsFree)
        .await
        .unwrap_err();
    assert!(matches!(full, AskError::QueueFull), "{full}");
    let notice = loop {
        if let VoiceUpdate::Notice(notice) = orb.next().await {
            break notice;
        }
    };
    assert_eq!(
        notice,
        VoiceNotice::QueueFull {
            text: "And what about Rome?".into()
        }
    );
    // Typed into the orb, the refusal is the answer to the call itself: no notice.
    assert!(service.voice_ask("q5").await.is_err());
    let more = tokio::time::timeout(Duration::from_millis(300), async {
        loop {
            if let VoiceUpdate::Notice(n) = orb.next().await {
                return n;
            }
        }
    })
    .await;
    assert!(more.is_err(), "no second notice: {more:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn hiding_the_orb_closes_the_microphone_and_showing_it_never_opens_it() {
    for (mode, keep_wake) in [
        (ListenMode::HandsFree, false),
        (ListenMode::Wake, false),
        (ListenMode::HandsFree, true),
        (ListenMode::Wake, true),
    ] {
        let stub = Stub::start().await.unwrap();
        let dir = Dir::new();
        let mut s = settings(BackendKind::Openai, &stub);
        s.voice.mode = mode;
        s.voice.wake_while_hidden = keep_wake;
        let service = service(&dir, s);
        let mut orb = Orb::attach(&service).await;
        service.set_listening(true).await.unwrap();
        orb.status_until(|s| s.listening).await;
        service.set_orb_shown(false).await.unwrap();
        drop(orb);
        service.set_orb_shown(true).await.unwrap();
        let mut orb = Orb::attach(&service).await;
        let status = orb.status_until(|_| true).await;
        // Only the wake word, and only when the settings say so, listens on while hidden.
        let kept = mode == ListenMode::Wake && keep_wake;
        assert_eq!(status.listening, kept, "{mode:?}, keep wake: {keep_wake}");
        if !kept {
            // Shown again, it stays shut until Listen.
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert!(!service.voice_status().borrow().listening);
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_goodbye_ends_the_conversation_after_the_reply_in_progress_and_keeps_listening() {
    let stub = Stub::start().await.unwrap();
    let gate = held(&stub, "The answer that was asked for, written slowly.");
    let dir = Dir::new();
    let mut s = settings(BackendKind::Openai, &stub);
    s.voice.mode = ListenMode::Wake;
    let service = service(&dir, s);
    let mut signals = service.voice_signals();
    let mut orb = Orb::attach(&service).await;
    service.set_listening(true).await.unwrap();
    service.set_awake(true).await.unwrap();
    orb.status_until(|s| s.awake).await;
    let reply = started(heard(&service, "Tell me a story", ListenMode::Wake).await);
    queued(heard(&service, "And another one", ListenMode::Wake).await);
    service.voice_goodbye().await.unwrap();
    // Closed at once (what follows needs the wake word), the reply still running.
    let status = orb.status_until(|s| !s.awake).await;
    assert_eq!(status.replying, Some(reply));
    gate.release();
    let status = orb.status_until(|s| s.chat.is_none()).await;
    assert!(status.listening, "still listening for the wake word");
    let mut sent = Vec::new();
    while let Ok(signal) = signals.try_recv() {
        sent.push(signal);
    }
    assert_eq!(
        sent,
        [jarvis::service::VoiceSignal::Listen],
        "nothing was cut: its voice plays out"
    );
    let stored = dir.store().reply(reply).unwrap().unwrap();
    assert_eq!(
        stored.state,
        ReplyState::Done,
        "the reply was answered whole"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(stub.received().len(), 1, "the waiting question was dropped");
}

#[tokio::test(flavor = "multi_thread")]
async fn after_an_answer_that_asks_the_user_what_comes_next_is_their_reply_ahead_of_the_queue() {
    let stub = Stub::start().await.unwrap();
    let gate = held(&stub, "I can set an alarm for seven. Shall I set it?");
    stub.push(Script::text("Alright, no alarm."));
    stub.push(Script::text("It will be sunny."));
    let dir = Dir::new();
    let service = service(&dir, settings(BackendKind::Openai, &stub));
    let mut orb = Orb::attach(&service).await;
    started(heard(&service, "Wake me at seven", ListenMode::HandsFree).await);
    queued(
        heard(
            &service,
            "What's the weather tomorrow?",
            ListenMode::HandsFree,
        )
        .await,
    );
    gate.release();
    orb.endings(1).await;
    // The question waiting does not start: Jarvis waits for the answer to its own.
    let status = orb.status_until(|s| s.replying.is_none()).await;
    assert!(status.awaiting_answer, "{status:?}");
    assert_eq!(status.queue.len(), 1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(stub.received().len(), 1, "the waiting question waits");
    // The user's answer goes first; then the waiting question.
    started(heard(&service, "No.", ListenMode::HandsFree).await);
    let ended = orb.endings(2).await;
    assert_eq!(ended[0].1, "Alright, no alarm.");
    assert_eq!(ended[1].1, "It will be sunny.");
    let lasts = last_messages(&stub);
    assert!(lasts[1].ends_with("No."), "{}", lasts[1]);
    assert!(lasts[2].contains("weather"), "{}", lasts[2]);
    assert!(
        !orb.status_until(|s| s.replying.is_none())
            .await
            .awaiting_answer
    );
}

/// Every byte of every file under `dir`.
fn all_bytes_under(dir: &std::path::Path) -> Vec<u8> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                out.extend(bytes);
            }
        }
    }
    out
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[tokio::test(flavor = "multi_thread")]
async fn with_saving_off_no_word_of_the_voice_conversation_reaches_the_disk() {
    let stub = Stub::start().await.unwrap();
    stub.push(Script::text("").tool_call(
        "r1",
        "remember_fact",
        r#"{"fact": "The user's cat is called Tiger."}"#,
    ));
    let gate = held(
        &stub,
        "Noted. The zebra sleeps standing up, said the giraffe.",
    );
    stub.push(Script::text("The okapi, of course."));
    let dir = Dir::new();
    let mut s = settings(BackendKind::Openai, &stub);
    s.voice.save_conversations = false;
    let service = service(&dir, s);
    let mut orb = Orb::attach(&service).await;
    let reply = started(
        heard(
            &service,
            "My cat is Tiger. How does a zebra sleep?",
            ListenMode::HandsFree,
        )
        .await,
    );
    // Mid-reply (a crash now would leave whatever is on disk), and after it.
    while !matches!(orb.next().await, VoiceUpdate::Event(Event::Delta { .. })) {}
    // Progress is stored every 50 ms here: what a reply in progress leaves on disk is there now.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let mid = all_bytes_under(dir.path());
    gate.release();
    orb.endings(1).await;
    let chat = orb
        .status_until(|s| s.replying.is_none())
        .await
        .chat
        .unwrap();
    started(service.voice_ask("And its cousin?").await.unwrap());
    orb.endings(1).await;
    orb.status_until(|s| s.replying.is_none()).await;
    let after = all_bytes_under(dir.path());
    for word in ["zebra", "giraffe", "cousin", "okapi"] {
        assert!(!contains(&mid, word), "{word:?} was on disk mid-reply");
        assert!(
            !contains(&after, word),
            "{word:?} was on disk after the replies"
        );
    }
    // The conversation works as any other: its records, its history in the next request.
    let texts: Vec<String> = service
        .records(chat)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.text)
        .collect();
    assert!(
        texts.iter().any(|t| t.contains("zebra sleeps")),
        "{texts:?}"
    );
    let second = stub.received()[2].body.to_string();
    assert!(
        second.contains("zebra sleeps"),
        "the history was sent: {second}"
    );
    assert_eq!(
        service
            .store_of_reply(reply)
            .reply(reply)
            .unwrap()
            .unwrap()
            .state,
        ReplyState::Done
    );
    // What the user asked to remember is theirs, and is kept; the conversation is no chat.
    let facts: Vec<String> = dir
        .store()
        .facts()
        .unwrap()
        .into_iter()
        .map(|f| f.text)
        .collect();
    assert_eq!(facts, ["The user's cat is called Tiger."]);
    assert!(service.chats().await.unwrap().is_empty());
    // Ended, it is gone.
    assert!(service.end_conversation().await.unwrap());
    orb.status_until(|s| s.chat.is_none()).await;
    assert!(
        service.records(chat).await.is_err() || service.records(chat).await.unwrap().is_empty()
    );
}

/// Issue 28 item 16: Try again asked a spoken question again as typed (the orb's and the chat
/// window's alike); it is asked as it was the first time, whatever the microphone does now.
#[tokio::test(flavor = "multi_thread")]
async fn try_again_asks_a_spoken_question_the_way_it_was_asked() {
    let stub = Stub::start().await.unwrap();
    stub.push(Script::status(400, None));
    stub.push(Script::status(400, None));
    stub.push(Script::text("Paris."));
    let dir = Dir::new();
    let mut s = settings(BackendKind::Anthropic, &stub);
    s.voice.mode = ListenMode::HandsFree;
    s.voice.save_conversations = true;
    let service = service(&dir, s);
    let mut orb = Orb::attach(&service).await;
    service.set_listening(true).await.unwrap();
    started(
        heard(
            &service,
            "What is the capital of France?",
            ListenMode::HandsFree,
        )
        .await,
    );
    assert_eq!(orb.endings(1).await[0].0, ReplyState::Failed);
    orb.status_until(|s| s.replying.is_none()).await;
    service.set_listening(false).await.unwrap();
    // Try again in the orb, then in the chat window.
    service.voice_retry().await.unwrap();
    assert_eq!(orb.endings(1).await[0].0, ReplyState::Failed);
    orb.status_until(|s| s.replying.is_none()).await;
    let chat = orb.status_until(|s| s.chat.is_some()).await.chat.unwrap();
    service.retry(chat).await.unwrap();
    assert_eq!(orb.endings(1).await[0], (ReplyState::Done, "Paris.".into()));
    let lasts = last_messages(&stub);
    assert_eq!(lasts.len(), 3);
    for (i, last) in lasts.iter().enumerate() {
        assert!(
            last.contains("Interaction: spoken, hands-free"),
            "request {i}: {last}"
        );
    }
}
