//! Replies through the service: streaming, storing, detaching, busy chats, waiting, stopping.

mod support;

use std::time::Duration;

use jarvis::config::BackendKind;
use jarvis::service::WAITING_MESSAGE;
use jarvis::store::Role;
use jarvis::{AskError, Event, ReplyState};
use jarvis_stub::{Script, Stub};
use support::*;

const ANSWER: &str = "The capital of France is Paris. It sits on the Seine.";

#[tokio::test(flavor = "multi_thread")]
async fn a_prompt_streams_back_delta_by_delta_and_is_stored() {
    for kind in [BackendKind::Openai, BackendKind::Anthropic] {
        let stub = Stub::start().await.unwrap();
        stub.push(
            Script::text(ANSWER)
                .deltas_of(5)
                .paced(Duration::from_millis(2)),
        );
        let dir = Dir::new();
        let service = service(&dir, settings(kind, &stub));
        let (chat, reply, mut attachment) =
            ask_new(&service, "What is the capital of France?").await;
        let events = until_end(&mut attachment, reply).await;

        let deltas: Vec<&str> = events
            .iter()
            .filter_map(|e| match e {
                Event::Delta { text, .. } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(
            deltas.len(),
            ANSWER.len().div_ceil(5),
            "{kind}: one event per delta"
        );
        assert_eq!(deltas.concat(), ANSWER);
        assert!(matches!(events[0], Event::ReplyStarted { .. }));
        assert_eq!(ending(&events), (ReplyState::Done, None));

        // The model was asked the question, with the rules as system.
        let sent = &stub.received()[0];
        let body = sent.body.to_string();
        assert!(body.contains("What is the capital of France?"), "{body}");
        assert!(body.contains("You are Jarvis"), "{body}");

        // A new store on the same file (a restart) shows question and answer.
        drop(service);
        let store = dir.store();
        let records = store.records(chat).unwrap();
        let shown: Vec<_> = records.iter().map(|r| (r.role, r.text.as_str())).collect();
        assert_eq!(
            shown,
            [
                (Role::User, "What is the capital of France?"),
                (Role::Assistant, ANSWER)
            ]
        );
        let chat_row = store.chat(chat).unwrap();
        assert_eq!(chat_row.title, "What is the capital of France?");
        assert_eq!(chat_row.last_reply, Some(ReplyState::Done));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_reply_goes_on_after_its_only_subscriber_detaches() {
    let stub = Stub::start().await.unwrap();
    stub.push(
        Script::text(ANSWER)
            .deltas_of(3)
            .paced(Duration::from_millis(15)),
    );
    let dir = Dir::new();
    let service = service(&dir, settings(BackendKind::Openai, &stub));
    let (chat, reply, mut attachment) = ask_new(&service, "question").await;
    // Read a little, then the window closes.
    let mut seen = 0;
    while seen < 3 {
        if let Some(Event::Delta { .. }) = attachment.next().await {
            seen += 1;
        }
    }
    drop(attachment);

    // Meanwhile the reply is written to the end.
    let store = service.store().clone();
    tokio::time::timeout(LIMIT, async {
        while store.reply(reply).unwrap().unwrap().state != ReplyState::Done {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the reply finished without a subscriber");

    // A later attach gets it whole, first event to last.
    let mut again = service.attach(chat).await.unwrap();
    let events = until_end(&mut again, reply).await;
    assert!(
        matches!(events[0], Event::ReplyStarted { .. }),
        "{events:?}"
    );
    assert_eq!(text_of(&events), ANSWER);
    assert_eq!(ending(&events).0, ReplyState::Done);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_late_attach_replays_from_the_first_event_then_follows_live() {
    let stub = Stub::start().await.unwrap();
    let gate = stub.gate();
    stub.push(Script::text(ANSWER).deltas_of(3).held_after(5, &gate));
    let dir = Dir::new();
    let service = service(&dir, settings(BackendKind::Openai, &stub));
    let chat = service.new_chat(None).await.unwrap().id;
    let reply = service.ask(chat, "question").await.unwrap();
    // Halfway through, a window attaches.
    reached(&gate).await;
    let mut late = service.attach(chat).await.unwrap();
    gate.release();
    let events = until_end(&mut late, reply).await;
    assert!(matches!(events[0], Event::ReplyStarted { .. }));
    assert!(matches!(events[1], Event::Running { .. }));
    assert_eq!(text_of(&events), ANSWER);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_attachment_that_falls_behind_gets_every_later_reply_whole_and_in_order() {
    let stub = Stub::start().await.unwrap();
    let dir = Dir::new();
    let service = service(&dir, settings(BackendKind::Openai, &stub));
    let chat = service.new_chat(None).await.unwrap().id;
    // Two replies behind (a voice loop still speaking the first answer while two queued questions
    // are answered), then further behind than the replies a chat keeps in memory.
    let mut before = None;
    for count in [3, 12] {
        let mut lagging = service.attach(chat).await.unwrap();
        let mut watcher = service.attach(chat).await.unwrap();
        let mut asked = Vec::new();
        for i in 0..count {
            let answer = format!("Answer {i} of {count}: the sky is blue.");
            stub.push(Script::text(&answer).deltas_of(5));
            let reply = service.ask(chat, &format!("Question {i}?")).await.unwrap();
            until_end(&mut watcher, reply).await;
            asked.push((reply, answer));
        }
        // Only now does the lagging attachment read: the reply it attached at first, then all.
        let mut seen: Vec<(jarvis::ReplyId, Vec<Event>)> = Vec::new();
        let last = asked.last().unwrap().0;
        let read = async {
            loop {
                let event = lagging.next().await.expect("the service runs");
                let reply = event.reply();
                let end = matches!(event, Event::ReplyEnded { .. });
                match seen.last_mut() {
                    Some((r, events)) if *r == reply => events.push(event),
                    _ => seen.push((reply, vec![event])),
                }
                if end && reply == last {
                    break;
                }
            }
        };
        tokio::time::timeout(LIMIT, read)
            .await
            .expect("the lagging attachment reached the last reply");
        if let Some(previous) = before {
            assert_eq!(seen[0].0, previous, "it starts at the current reply");
            seen.remove(0);
        }
        let order: Vec<_> = seen.iter().map(|(r, _)| *r).collect();
        let expected: Vec<_> = asked.iter().map(|(r, _)| *r).collect();
        assert_eq!(order, expected, "every reply, in order, none skipped");
        for ((reply, events), (_, answer)) in seen.iter().zip(&asked) {
            assert!(
                matches!(events[0], Event::ReplyStarted { .. }),
                "reply {reply} from its start: {events:?}"
            );
            assert_eq!(&text_of(events), answer, "reply {reply} whole");
            assert_eq!(ending(events), (ReplyState::Done, None));
        }
        before = Some(last);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_question_in_a_replying_chat_is_refused_as_busy() {
    let stub = Stub::start().await.unwrap();
    let gate = stub.gate();
    stub.push(Script::text(ANSWER).deltas_of(4).held_after(2, &gate));
    let dir = Dir::new();
    let service = service(&dir, settings(BackendKind::Openai, &stub));
    let (chat, reply, mut attachment) = ask_new(&service, "first").await;
    reached(&gate).await;
    match service.ask(chat, "second").await {
        Err(AskError::Busy(busy)) => assert_eq!(busy, chat),
        other => panic!("expected busy, got {other:?}"),
    }
    gate.release();
    // The refusal cancelled nothing.
    let events = until_end(&mut attachment, reply).await;
    assert_eq!(
        (text_of(&events).as_str(), ending(&events).0),
        (ANSWER, ReplyState::Done)
    );
    // The refused question was not stored; once the reply ended, the chat takes questions again.
    let texts: Vec<_> = service
        .records(chat)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.text)
        .collect();
    assert_eq!(texts, ["first", ANSWER]);
    let next = service
        .ask(chat, "third")
        .await
        .expect("idle chat takes a question");
    let events = until_end(&mut attachment, next).await;
    assert_eq!(text_of(&events), "You said: third");
}

// Eight workers: the waiting replies' tasks run side by side, in whatever order the machine
// gives them, and still reach the backend in the order their questions were asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn with_a_one_at_a_time_backend_other_chats_wait_then_run_in_the_order_asked() {
    let stub = Stub::start().await.unwrap();
    // The first chat's answer runs until the others are seen waiting.
    let gate = stub.gate();
    stub.push(
        Script::text("You said: first question")
            .deltas_of(2)
            .held_after(1, &gate),
    );
    stub.set_default(Script::Echo {
        delta_chars: 2,
        pace_ms: 0,
    });
    let dir = Dir::new();
    let mut s = settings(BackendKind::Openai, &stub);
    s.replies.max_concurrent = 1;
    let service = service(&dir, s);
    let (_, a, mut att_a) = ask_new(&service, "first question").await;
    let asked = ["second", "third", "fourth", "fifth", "sixth"];
    let mut waiting = Vec::new();
    for question in asked {
        waiting.push(ask_new(&service, question).await);
    }

    // Each says it waits.
    let mut heard = Vec::new();
    for (_, reply, attachment) in &mut waiting {
        let mut events = Vec::new();
        loop {
            let event = attachment.next_of(*reply).await.unwrap();
            events.push(event.clone());
            if let Event::Waiting { message, .. } = event {
                assert_eq!(message, WAITING_MESSAGE);
                break;
            }
        }
        heard.push(events);
    }
    // Once the first chat's answer flows, the others still wait and their requests are not out.
    let mut a_events = Vec::new();
    while !matches!(a_events.last(), Some(Event::Delta { .. })) {
        a_events.push(att_a.next_of(a).await.unwrap());
    }
    for (chat, _, _) in &waiting {
        let stored = service.store().last_reply(*chat).unwrap().unwrap();
        assert_eq!(stored.state, ReplyState::Waiting);
    }
    assert_eq!(
        stub.received().len(),
        1,
        "only the first chat's request is out"
    );
    gate.release();

    a_events.extend(until_end(&mut att_a, a).await);
    assert_eq!(ending(&a_events).0, ReplyState::Done);
    for (((_, reply, attachment), mut events), question) in waiting.iter_mut().zip(heard).zip(asked)
    {
        events.extend(until_end(attachment, *reply).await);
        assert_eq!(text_of(&events), format!("You said: {question}"));
    }
    // They ran in the order asked, one after the other.
    let order: Vec<String> = stub
        .received()
        .iter()
        .map(|r| {
            let last = r.body["messages"].as_array().unwrap().last().unwrap()["content"].clone();
            let last = last.as_str().unwrap();
            // The question follows the state block.
            last.rsplit_once("\n\n").unwrap().1.to_string()
        })
        .collect();
    let mut expected = vec!["first question"];
    expected.extend(asked);
    assert_eq!(order, expected);
}

#[tokio::test(flavor = "multi_thread")]
async fn stop_keeps_what_was_written_and_marks_it_stopped() {
    let stub = Stub::start().await.unwrap();
    // Four deltas are written, then the reply runs until it is stopped.
    let gate = stub.gate();
    stub.push(Script::text(ANSWER).deltas_of(2).held_after(4, &gate));
    let dir = Dir::new();
    let service = service(&dir, settings(BackendKind::Anthropic, &stub));
    let (chat, reply, mut attachment) = ask_new(&service, "question").await;
    let mut written = String::new();
    while written.len() < 8 {
        if let Some(Event::Delta { text, .. }) = attachment.next().await {
            written.push_str(&text);
        }
    }
    assert!(
        service.stop(chat).await.unwrap(),
        "there was a reply to stop"
    );
    let rest = until_end(&mut attachment, reply).await;
    let (state, reason) = ending(&rest);
    assert_eq!(state, ReplyState::Stopped);
    assert_eq!(reason.as_deref(), Some("stopped by the user"));
    written.push_str(&text_of(&rest));
    assert!(
        written.len() < ANSWER.len(),
        "it stopped early: {written:?}"
    );
    assert!(ANSWER.starts_with(&written));

    let stored = service.store().reply(reply).unwrap().unwrap();
    assert_eq!(
        (stored.state, stored.text.as_str()),
        (ReplyState::Stopped, written.as_str())
    );
    let records = service.records(chat).await.unwrap();
    assert_eq!(
        records.last().unwrap().text,
        written,
        "the partial answer is a record"
    );
    assert!(!service.stop(chat).await.unwrap(), "nothing left to stop");
}

#[tokio::test(flavor = "multi_thread")]
async fn nothing_but_stop_cancels_a_reply() {
    let stub = Stub::start().await.unwrap();
    let gate = stub.gate();
    stub.push(Script::text(ANSWER).deltas_of(4).held_after(1, &gate));
    let dir = Dir::new();
    let service = service(&dir, settings(BackendKind::Openai, &stub));
    let (chat, reply, attachment) = ask_new(&service, "question").await;
    // Every window leaves, a second question is refused, and the last handle is dropped.
    let second = service.attach(chat).await.unwrap();
    drop(attachment);
    drop(second);
    assert!(matches!(
        service.ask(chat, "again").await,
        Err(AskError::Busy(_))
    ));
    let store = service.store().clone();
    drop(service);
    gate.release();

    tokio::time::timeout(LIMIT, async {
        loop {
            let r = store.reply(reply).unwrap().unwrap();
            if !r.state.is_live() {
                assert_eq!((r.state, r.text.as_str()), (ReplyState::Done, ANSWER));
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the reply ended");
}

#[tokio::test(flavor = "multi_thread")]
async fn stop_while_waiting_ends_the_reply_without_asking_the_model() {
    let stub = Stub::start().await.unwrap();
    let gate = stub.gate();
    stub.push(Script::text("The first answer.").held_after(1, &gate));
    let dir = Dir::new();
    let mut s = settings(BackendKind::Openai, &stub);
    s.replies.max_concurrent = 1;
    let service = service(&dir, s);
    let (_, a, mut att_a) = ask_new(&service, "a question").await;
    let (chat_b, b, mut att_b) = ask_new(&service, "second").await;
    assert!(service.stop(chat_b).await.unwrap());
    let events = until_end(&mut att_b, b).await;
    assert_eq!(ending(&events).0, ReplyState::Stopped);
    gate.release();
    until_end(&mut att_a, a).await;
    assert_eq!(
        stub.received().len(),
        1,
        "the stopped question never reached the model"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_reply_can_be_tried_again_and_its_partial_answer_is_not_resent() {
    let stub = Stub::start().await.unwrap();
    stub.push(
        Script::text("Half an ans")
            .deltas_of(3)
            .ending_after(2, jarvis_stub::Ending::Drop),
    );
    let dir = Dir::new();
    let service = service(&dir, settings(BackendKind::Openai, &stub));
    let (chat, reply, mut attachment) = ask_new(&service, "question").await;
    let events = until_end(&mut attachment, reply).await;
    assert_eq!(ending(&events).0, ReplyState::Failed);
    assert_eq!(text_of(&events), "Half a");

    let again = service.retry(chat).await.expect("retry");
    let events = until_end(&mut attachment, again).await;
    assert_eq!(
        (text_of(&events).as_str(), ending(&events).0),
        ("You said: question", ReplyState::Done)
    );
    let last_request = &stub.received()[1].body;
    let messages = last_request["messages"].as_array().unwrap();
    assert_eq!(
        messages.len(),
        2,
        "system and the question only: {messages:?}"
    );
    // A done reply is not tried again.
    assert!(service.retry(chat).await.is_err());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replying_chat_is_not_deleted_and_an_idle_one_is_deleted_whole() {
    let stub = Stub::start().await.unwrap();
    let gate = stub.gate();
    stub.push(Script::text(ANSWER).deltas_of(4).held_after(1, &gate));
    let dir = Dir::new();
    let service = service(&dir, settings(BackendKind::Openai, &stub));
    let (chat, reply, mut attachment) = ask_new(&service, "question").await;
    assert!(matches!(
        service.delete_chat(chat).await,
        Err(AskError::Busy(_))
    ));
    gate.release();
    let events = until_end(&mut attachment, reply).await;
    assert_eq!(
        (text_of(&events).as_str(), ending(&events).0),
        (ANSWER, ReplyState::Done),
        "untouched"
    );

    service
        .rename_chat(chat, "  Geography ".into())
        .await
        .unwrap();
    assert_eq!(service.chats().await.unwrap()[0].title, "Geography");
    service.delete_chat(chat).await.unwrap();
    assert!(service.chats().await.unwrap().is_empty());
    assert!(service.records(chat).await.unwrap().is_empty());
    assert!(
        service.store().reply(reply).unwrap().is_none(),
        "its replies went with it"
    );
    assert!(service.attach(chat).await.is_err(), "it is gone");
    let ended = tokio::time::timeout(LIMIT, attachment.next())
        .await
        .unwrap();
    assert!(
        ended.is_none(),
        "a window attached to it sees its attachment end"
    );
}

/// Issue 28 item 13: an end that cannot be stored because another process holds the database
/// was told "free some space", and its row stayed running — every other Jarvis refused questions
/// in that chat until this one exited. The cause is named; the chat takes no new question until
/// the end is stored (its record would have come after that question's), which it is, with
/// everything written, once the lock is gone.
#[tokio::test(flavor = "multi_thread")]
async fn an_end_stored_while_another_process_locks_the_database_names_the_lock_and_lands_later() {
    let stub = Stub::start().await.unwrap();
    let gate = stub.gate();
    stub.push(Script::text(ANSWER).deltas_of(8).held_after(1, &gate));
    let dir = Dir::new();
    let service = service(&dir, settings(BackendKind::Openai, &stub));
    let (chat, reply, mut attachment) = ask_new(&service, "Where is Paris?").await;
    eventually("the reply is held", || gate.is_reached()).await;
    let holder = rusqlite::Connection::open(dir.db()).unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    gate.release();
    let events = until_end(&mut attachment, reply).await;
    let (state, reason) = ending(&events);
    let reason = reason.unwrap_or_default();
    assert_eq!(state, ReplyState::Failed);
    assert!(
        reason.contains("is locked by another process") && !reason.contains("free some space"),
        "{reason}"
    );
    assert!(
        matches!(service.ask(chat, "And Lyon?").await, Err(AskError::Busy(_))),
        "no question is taken before the end is stored"
    );
    holder.execute_batch("COMMIT").unwrap();
    let store = dir.store();
    eventually("the end is stored once the lock is gone", || {
        store.reply(reply).unwrap().unwrap().state == ReplyState::Done
    })
    .await;
    let stored = store.reply(reply).unwrap().unwrap();
    assert_eq!(stored.text, ANSWER, "everything written is kept");
    stub.push(Script::text("Lyon is on the Rhône."));
    let asking = async {
        loop {
            match service.ask(chat, "And Lyon?").await {
                Ok(next) => break next,
                Err(AskError::Busy(_)) => tokio::time::sleep(Duration::from_millis(20)).await,
                Err(err) => panic!("{err}"),
            }
        }
    };
    let next = tokio::time::timeout(LIMIT, asking)
        .await
        .expect("the chat takes the question once the end is stored");
    until_end(&mut attachment, next).await;
    let records: Vec<(Role, String)> = store
        .records(chat)
        .unwrap()
        .into_iter()
        .map(|r| (r.role, r.text))
        .collect();
    assert_eq!(
        records,
        [
            (Role::User, "Where is Paris?".to_string()),
            (Role::Assistant, ANSWER.to_string()),
            (Role::User, "And Lyon?".to_string()),
            (Role::Assistant, "Lyon is on the Rhône.".to_string()),
        ],
        "in the order they were said"
    );
}

/// A backend that keeps every request it is sent and answers each with "Answered."; `prefills`:
/// it keeps a prompt's processing between requests, as the local model server does.
struct Recording {
    requests: std::sync::Arc<std::sync::Mutex<Vec<jarvis::llm::Request>>>,
    prefills: bool,
}

impl jarvis::llm::Backend for Recording {
    fn kind(&self) -> BackendKind {
        BackendKind::Local
    }
    fn model(&self) -> &str {
        "recording"
    }
    fn max_tokens(&self) -> u32 {
        64
    }
    fn max_concurrent(&self) -> usize {
        1
    }
    fn stream(&self, request: jarvis::llm::Request) -> jarvis::llm::EventStream {
        use jarvis::llm::{LlmEvent, StopReason};
        let warm = request.prefill;
        self.requests.lock().unwrap().push(request);
        let mut events = Vec::new();
        if !warm {
            events.push(Ok(LlmEvent::TextDelta {
                text: "Answered.".into(),
            }));
        }
        events.push(Ok(LlmEvent::Stop {
            reason: StopReason::EndTurn,
        }));
        Box::pin(futures::stream::iter(events))
    }
    fn prefills(&self) -> bool {
        self.prefills
    }
}

type Requests = std::sync::Arc<std::sync::Mutex<Vec<jarvis::llm::Request>>>;

/// A service over a fresh store answering through a [`Recording`] backend, with what it is sent.
fn recording_service(prefills: bool) -> (Dir, Requests, jarvis::Service) {
    let dir = Dir::new();
    let requests = Requests::default();
    let backend = std::sync::Arc::new(Recording {
        requests: requests.clone(),
        prefills,
    });
    let options = jarvis::ServiceOptions::from_settings(&jarvis::config::Settings::default());
    let service = jarvis::Service::start(dir.store(), backend, options);
    (dir, requests, service)
}

/// `warm` is a warm-up made for the question `asked`: the same system prompt, tools and
/// messages (`what` they are) up to the question.
fn assert_warmed_for(warm: &jarvis::llm::Request, asked: &jarvis::llm::Request, what: &str) {
    assert!(warm.prefill && !asked.prefill);
    assert_eq!(warm.system, asked.system);
    assert_eq!(warm.tools, asked.tools);
    assert_eq!(
        warm.messages[..],
        asked.messages[..asked.messages.len() - 1],
        "{what}, as the question's request has it"
    );
}

/// Issue 17 item 4: opening a chat warms a backend that keeps a prompt's processing (the local
/// model) with exactly the request its next question will be sent with, up to the question —
/// the same system prompt, history and tools — so that question's first token comes from the
/// cache; a backend that keeps nothing (a remote API) is never sent a warm-up.
#[tokio::test]
async fn opening_a_chat_warms_the_local_model_with_the_next_question_s_request_up_to_the_question()
{
    for prefills in [true, false] {
        let (_dir, requests, service) = recording_service(prefills);
        let (chat, reply, mut attachment) = ask_new(&service, "My dog is called Bruno.").await;
        until_end(&mut attachment, reply).await;
        let sent = || requests.lock().unwrap().len();
        eventually("the first question sent", || sent() == 1).await;

        service.warm(Some(chat)).await.unwrap();
        if prefills {
            eventually("the warm-up sent", || sent() == 2).await;
        }
        let reply = service.ask(chat, "What is my dog called?").await.unwrap();
        until_end(&mut attachment, reply).await;
        let requests = requests.lock().unwrap().clone();
        if !prefills {
            assert_eq!(
                requests.len(),
                2,
                "no warm-up for a backend that keeps nothing"
            );
            assert!(requests.iter().all(|r| !r.prefill));
            continue;
        }
        assert_eq!(requests.len(), 3);
        assert_warmed_for(&requests[1], &requests[2], "the history");
        assert_eq!(
            requests[1].messages.len(),
            2,
            "the first question and its answer"
        );
    }
}

/// Issue 29: a change of language warms the local model anew, in the new language — what was
/// warmed before has the old language's system prompt, which the next question no longer has.
#[tokio::test]
async fn a_change_of_language_warms_the_local_model_in_the_new_one() {
    let (_dir, requests, service) = recording_service(true);
    let (_, reply, mut attachment) = ask_new(&service, "Hello.").await;
    until_end(&mut attachment, reply).await;
    let sent = || requests.lock().unwrap().len();
    eventually("the first question sent", || sent() == 1).await;

    let mut german = jarvis::config::Settings::default();
    german.general.language = jarvis::config::Language::De;
    service
        .reconfigure(None, jarvis::ServiceOptions::from_settings(&german))
        .await
        .unwrap();
    eventually("the warm-up in German sent", || sent() == 2).await;
    let (_, reply, mut attachment) = ask_new(&service, "Wie spät ist es?").await;
    until_end(&mut attachment, reply).await;
    let requests = requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 3);
    assert_warmed_for(&requests[1], &requests[2], "nothing before the question");
    assert_ne!(
        requests[0].system, requests[2].system,
        "the system prompt is German now"
    );
}

/// Waits for the voice conversation's next reply to end.
async fn voice_reply_ended(orb: &mut jarvis::service::VoiceAttachment) {
    loop {
        let update = tokio::time::timeout(LIMIT, orb.next())
            .await
            .expect("a voice update")
            .expect("the service runs");
        if let jarvis::service::VoiceUpdate::Event(Event::ReplyEnded { .. }) = update {
            return;
        }
    }
}

/// Issue 17 item 4, for the orb: the microphone opening (the push-to-talk shortcut) or the
/// wake word heard warms the local model with the voice conversation so far — while the user
/// speaks and whisper writes it down — with the request its next question is sent with, up to
/// the question. A release, or a microphone already open, sends nothing more.
#[tokio::test]
async fn the_orb_opening_its_microphone_warms_the_local_model_with_the_voice_conversation() {
    let (_dir, requests, service) = recording_service(true);
    let mut orb = service.voice_attach().await.unwrap();
    let sent = || requests.lock().unwrap().len();
    service.voice_ask("My dog is called Bruno.").await.unwrap();
    voice_reply_ended(&mut orb).await;
    eventually("the first question sent", || sent() == 1).await;

    service.push_to_talk(true).await.unwrap();
    eventually("the warm-up sent", || sent() == 2).await;
    service.push_to_talk(false).await.unwrap();
    service.voice_ask("What is my dog called?").await.unwrap();
    voice_reply_ended(&mut orb).await;
    eventually("the second question sent", || sent() == 3).await;
    {
        let requests = requests.lock().unwrap();
        // (The release warmed nothing: the request after the warm-up is the question's.)
        assert_warmed_for(&requests[1], &requests[2], "the voice conversation");
        assert_eq!(requests[1].messages.len(), 2);
    }

    // Wake mode: the microphone listens for "Hey Jarvis" (nothing to warm for: a question
    // asked meanwhile is the next request sent); heard, it warms.
    service
        .set_listen_mode(jarvis::service::ListenMode::Wake)
        .await
        .unwrap();
    service.set_listening(true).await.unwrap();
    service.voice_ask("And my cat?").await.unwrap();
    voice_reply_ended(&mut orb).await;
    eventually("the third question sent", || sent() == 4).await;
    service.set_awake(true).await.unwrap();
    eventually("the warm-up on the wake word", || sent() == 5).await;
    let requests = requests.lock().unwrap();
    let warmed: Vec<bool> = requests.iter().map(|r| r.prefill).collect();
    assert_eq!(warmed, [false, true, false, false, true]);
    assert_eq!(requests[4].messages.len(), 6, "three questions and answers");
}

/// Issue 29 item 2: with `[general] language` set, what the app writes around the user's words
/// in the request — the state block, the marks around a tool's result — is in that language.
#[tokio::test(flavor = "multi_thread")]
async fn the_request_is_wrapped_in_the_language_the_settings_choose() {
    let stub = Stub::start().await.unwrap();
    stub.push(Script::text("").tool_call("c1", "search_records", r#"{"query": "Paris"}"#));
    stub.push(Script::text("Nichts gefunden."));
    stub.push(Script::text("没有。"));
    let dir = Dir::new();
    let mut german = settings(BackendKind::Anthropic, &stub);
    german.general.language = jarvis::config::Language::De;
    let service = service(&dir, german);
    let (_, reply, mut attachment) = ask_new(&service, "Was weißt du über Paris?").await;
    until_end(&mut attachment, reply).await;
    let received = stub.received();
    let body = received[1].body.to_string();
    assert!(
        body.contains("[Aktueller Stand | von der App, nicht vom Nutzer gesagt]\\nOrtszeit: ")
            && body.contains("\\nInteraktion: getippt\\n[Ende des aktuellen Stands]"),
        "{body}"
    );
    let messages = received[1].body["messages"].to_string();
    assert!(
        !messages.contains("Current state") && !messages.contains("End of"),
        "{messages}"
    );
    // The rules name the English envelopes: the system prompt names these as the app's.
    let system = received[1].body["system"].to_string();
    assert!(
        system.contains(
            "Die Hinweise der App stehen in dieser Unterhaltung auf Deutsch: [Aktueller Stand"
        ),
        "{system}"
    );

    let mut chinese = settings(BackendKind::Anthropic, &stub);
    chinese.general.language = jarvis::config::Language::Zh;
    let service = jarvis::Service::start(
        dir.store(),
        jarvis::llm::from_config(
            &dir.config(chinese.clone()),
            &env_with(&[("ANTHROPIC_API_KEY", "test-key")]),
        )
        .unwrap(),
        jarvis::ServiceOptions::from_settings(&chinese),
    );
    let (_, reply, mut attachment) = ask_new(&service, "巴黎呢？").await;
    until_end(&mut attachment, reply).await;
    let body = stub.received()[2].body.to_string();
    assert!(
        body.contains("[当前状态｜程序提供，不是用户说的话]\\n当地时间：")
            && body.contains("\\n交互方式：打字\\n[当前状态结束]\\n\\n巴黎呢？"),
        "{body}"
    );
}
