//! The whole voice loop, headless and real: speech made by espeak-ng is said into a microphone
//! that runs at real time ([`FeedSource`]), cut by the WebRTC VAD, transcribed by whisper.cpp with
//! the installed tiny.en, judged, and put to the service, whose replies (the stub over loopback)
//! are spoken by espeak-ng onto a [`Recorder`] that keeps what it played and at what volume.

mod support;

use std::sync::Arc;
use std::time::Duration;

use jarvis::config::BackendKind;
use jarvis::service::{ListenMode, VoiceAttachment, VoiceStatus, VoiceUpdate};
use jarvis::store::Role;
use jarvis::voice::audio::FEED_NAME;
use jarvis::voice::echo::{Rooms, ROOMS_FILE};
use jarvis::voice::fixtures::{self, cough, knock, silence, Room, RoomEcho};
use jarvis::voice::pipeline::{VoiceOptions, WakeFactory};
use jarvis::voice::{
    models, AudioSink, Clip, Espeak, Feed, FeedSource, Heard, Recorder, Synthesizer, Transcriber,
    UtteranceReport, VoiceLoop, VoiceParts, SAMPLE_RATE,
};
use jarvis::{Event, ReplyId, ReplyState, Service};
use jarvis_stub::{Script, Stub};
use support::*;
use tokio::sync::broadcast;

/// One voice test at a time: each runs at real time on a 2-core machine, and one of them watches
/// the temp directory for files.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn wake() -> WakeFactory {
    models::wake_factory(&model_dir()).unwrap_or_else(|e| panic!("{e}"))
}

/// What the user says, made by espeak-ng at 16 kHz.
fn speech(text: &str) -> Clip {
    fixtures::speech(text).expect("espeak-ng makes the fixture")
}

/// A running loop with its microphone feed, recorder and a window on the conversation.
struct Rig {
    service: Service,
    feed: Feed,
    recorder: Recorder,
    heard: broadcast::Receiver<UtteranceReport>,
    orb: Option<VoiceAttachment>,
    noise: Vec<UtteranceReport>,
    problems: tokio::sync::watch::Receiver<Option<String>>,
    _voice: Voice,
    _dir: Dir,
    stub: Stub,
}

async fn rig(mode: ListenMode, options: impl FnOnce(&mut jarvis::ServiceOptions)) -> Rig {
    rig_hearing(mode, options, whisper()).await
}

async fn rig_hearing(
    mode: ListenMode,
    options: impl FnOnce(&mut jarvis::ServiceOptions),
    transcriber: Arc<dyn Transcriber>,
) -> Rig {
    rig_with(mode, options, transcriber, Arc::new(Espeak::default())).await
}

async fn rig_with(
    mode: ListenMode,
    options: impl FnOnce(&mut jarvis::ServiceOptions),
    transcriber: Arc<dyn Transcriber>,
    synthesizer: Arc<dyn Synthesizer>,
) -> Rig {
    rig_in(
        mode,
        options,
        transcriber,
        synthesizer,
        None,
        VoiceOptions::default(),
    )
    .await
}

/// A rig whose speaker and microphone share a simulated room: what Jarvis plays comes back into
/// the microphone through it.
async fn rig_in(
    mode: ListenMode,
    options: impl FnOnce(&mut jarvis::ServiceOptions),
    transcriber: Arc<dyn Transcriber>,
    synthesizer: Arc<dyn Synthesizer>,
    room: Option<Room>,
    voice_options: VoiceOptions,
) -> Rig {
    log_if_asked();
    let stub = Stub::start().await.unwrap();
    let dir = Dir::new();
    let mut settings = settings(BackendKind::Anthropic, &stub);
    settings.voice.mode = mode;
    let config = dir.config(settings);
    let backend =
        jarvis::llm::from_config(&config, &env_with(&[("ANTHROPIC_API_KEY", "test-key")])).unwrap();
    let mut service_options = jarvis::ServiceOptions::from_settings(&config.settings);
    options(&mut service_options);
    let service = Service::start(dir.store(), backend, service_options);
    let (source, feed) = FeedSource::new();
    // (In a room, the microphone hands each frame over 40 ms after it ends, as a sound server
    // does, so that the room's echo of what the recorder reports as played reaches it whole.)
    let source = source.with_latency(if room.is_some() { 3 } else { 0 });
    let recorder = Recorder::new(22_050);
    if let Some(room) = room {
        recorder.tap(Arc::new(RoomEcho::new(&room, feed.clone())));
    }
    let parts = VoiceParts {
        source: Arc::new(source),
        sink: Arc::new(recorder.clone()),
        transcriber,
        synthesizer,
        wake: (mode == ListenMode::Wake).then(wake),
        turn: turn(),
    };
    let voice = VoiceLoop::start(service.clone(), parts, voice_options);
    let heard = voice.heard();
    let problems = voice.problems();
    let orb = Some(service.voice_attach().await.unwrap());
    service.set_listening(true).await.unwrap();
    Rig {
        service,
        feed,
        recorder,
        heard,
        orb,
        noise: Vec::new(),
        problems,
        _voice: Voice::new(voice),
        _dir: dir,
        stub,
    }
}

impl Rig {
    fn status(&self) -> VoiceStatus {
        self.service.voice_status().borrow().clone()
    }

    /// Waits until the status is as `done` wants.
    async fn until(&self, what: &str, done: impl Fn(&VoiceStatus) -> bool) -> VoiceStatus {
        let mut status = self.service.voice_status();
        let wait = async {
            loop {
                if done(&status.borrow_and_update()) {
                    return status.borrow().clone();
                }
                status.changed().await.expect("the service stopped");
            }
        };
        tokio::time::timeout(LIMIT, wait)
            .await
            .unwrap_or_else(|_| panic!("timed out waiting for {what}: {:?}", self.status()))
    }

    /// The next verdict the loop reaches.
    async fn next_heard(&mut self) -> UtteranceReport {
        tokio::time::timeout(SPEECH_LIMIT, self.heard.recv())
            .await
            .expect("nothing was heard within the limit")
            .expect("the loop stopped")
    }

    /// Says `clip` with a pause after it, and returns the verdict on it (bursts of noise the
    /// capture stage dropped meanwhile are kept in `noise`).
    async fn say(&mut self, clip: &Clip) -> UtteranceReport {
        self.feed.say(&clip.clone().then(&silence(600)));
        loop {
            let report = self.next_heard().await;
            if report.heard != Heard::Noise || !report.text.is_empty() {
                return report;
            }
            self.noise.push(report);
        }
    }

    /// Asks a question aloud; returns the reply it started (nothing else is running).
    async fn ask(&mut self, question: &str) -> ReplyId {
        let heard = self.say(&speech(question)).await;
        assert_eq!(heard.heard, Heard::Question, "{heard:?}");
        self.next_reply().await
    }

    /// Types `question` into the orb, `script` answering it: the reply, once written whole.
    async fn typed_and_answered(&mut self, question: &str, script: Script) -> ReplyId {
        self.stub.push(script);
        self.service.voice_ask(question).await.unwrap();
        let reply = self.next_reply().await;
        assert_eq!(self.end_of(reply).await, ReplyState::Done);
        reply
    }

    /// The next of the conversation's replies to start, as the orb is told of it: its events
    /// miss no reply, however short, where a look at the status could.
    async fn next_reply(&mut self) -> ReplyId {
        let orb = self.orb.as_mut().expect("the orb is shown");
        let wait = async {
            loop {
                if let VoiceUpdate::Event(Event::ReplyStarted { reply, .. }) =
                    orb.next().await.expect("the service stopped")
                {
                    return reply;
                }
            }
        };
        tokio::time::timeout(LIMIT, wait)
            .await
            .expect("timed out waiting for a reply to start")
    }

    /// Waits for `reply` to end, as the orb is told of it; how it ended.
    async fn end_of(&mut self, reply: ReplyId) -> ReplyState {
        let orb = self.orb.as_mut().expect("the orb is shown");
        let wait = async {
            loop {
                if let VoiceUpdate::Event(Event::ReplyEnded {
                    reply: r, state, ..
                }) = orb.next().await.expect("the service stopped")
                {
                    if r == reply {
                        return state;
                    }
                }
            }
        };
        tokio::time::timeout(LIMIT, wait)
            .await
            .unwrap_or_else(|_| panic!("timed out waiting for reply {reply} to end"))
    }

    /// Waits until `done` holds of what the speaker played.
    /// Asks for the long answer, held after `deltas` of its pieces, and hides the orb once
    /// `played` of its voice has played: the reply, its gate, and the clips made until then.
    async fn hidden_mid_answer(
        &mut self,
        deltas: usize,
        played: Duration,
    ) -> (ReplyId, jarvis_stub::Gate, usize) {
        let gate = self.stub.gate();
        self.stub.push(
            Script::text(long_answer())
                .deltas_of(4)
                .held_after(deltas, &gate),
        );
        let reply = self.ask("Tell me about Paris.").await;
        self.until_played("its voice to play", |r| r.played() >= played)
            .await;
        self.orb = None; // the orb is hidden
        self.until("its voice to stop", |s| !s.speaking).await;
        (reply, gate, self.recorder.arrivals().len())
    }

    async fn until_played(&self, what: &str, done: impl Fn(&Recorder) -> bool) {
        eventually(what, || done(&self.recorder)).await;
    }

    /// Waits until the microphone has heard everything said into it.
    async fn until_heard_all(&self) {
        tokio::time::timeout(LIMIT, self.feed.until_quiet())
            .await
            .expect("timed out waiting for the microphone to hear what was said");
    }

    /// Says a clip that must never reach speech-to-text; returns once it has all been heard.
    async fn say_quietly(&mut self, clip: &Clip) {
        self.feed.say(&clip.clone().then(&silence(600)));
        self.until_heard_all().await;
    }

    async fn records(&self) -> Vec<jarvis::store::Record> {
        let chat = self.status().chat.expect("the conversation has a chat");
        self.service.records(chat).await.unwrap()
    }

    async fn replies(&self) -> Vec<jarvis::store::Reply> {
        let chat = self.status().chat.expect("the conversation has a chat");
        self.service.store().replies(chat).unwrap()
    }
}

/// A reply long enough to talk over: sentences streamed at 40 deltas a second.
fn long_answer() -> &'static str {
    "The capital of France is Paris. It lies on the river Seine in the north of the country. \
     Paris has been a centre of art, fashion and science for centuries. \
     Its museums hold some of the most famous paintings in the world. \
     Millions of people visit it every year to walk along its old streets."
}

fn streamed(text: &str) -> Script {
    Script::text(text)
        .deltas_of(6)
        .paced(Duration::from_millis(25))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spoken_question_is_transcribed_answered_and_spoken_sentence_by_sentence() {
    let _one = SERIAL.lock().await;
    let answer =
        "Paris is the capital of France. It lies on the Seine. It is known for the Eiffel Tower.";
    let mut rig = rig(ListenMode::HandsFree, |_| {}).await;
    // The reply is held after its first sentence until that sentence is heard.
    let gate = rig.stub.gate();
    rig.stub
        .push(Script::text(answer).deltas_of(8).held_after(4, &gate));
    let heard = rig.say(&speech("What is the capital of France?")).await;
    assert_eq!(heard.heard, Heard::Question, "{heard:?}");
    assert!(
        heard.text.to_lowercase().contains("capital"),
        "transcribed: {:?}",
        heard.text
    );
    let reply = rig.next_reply().await;
    rig.until_played("the first sentence", |r| !r.arrivals().is_empty())
        .await;
    assert!(
        rig.status().replying == Some(reply),
        "the first sentence plays while the reply is still written"
    );
    // (The service hears of the voice just after the sink does.)
    rig.until("the voice to be shown speaking", |s| s.speaking)
        .await;
    gate.release();
    assert_eq!(rig.end_of(reply).await, ReplyState::Done);
    rig.until("the voice to end", |s| !s.speaking).await;
    let stored = rig.service.store().reply(reply).unwrap().unwrap();
    assert_eq!(stored.state, ReplyState::Done);
    assert_eq!(stored.text, answer);
    let records = rig.records().await;
    assert_eq!(records[0].role, Role::User);
    assert!(records[0].text.to_lowercase().contains("capital"));
    // Spoken sentence by sentence: three clips.
    let arrivals = rig.recorder.arrivals();
    assert_eq!(arrivals.len(), 3, "one clip per sentence: {arrivals:?}");
    // What it said is what the answer says: the recorder's audio transcribes back to it.
    rig.until_played("the voice to end", |r| !r.is_playing())
        .await;
    let played = rig
        .recorder
        .played_samples()
        .resampled(SAMPLE_RATE)
        .unwrap();
    let back = whisper().transcribe(&played.samples).unwrap().text;
    // Each of its sentences is heard back, most of its words (two in three): whisper tiny.en
    // mishears a name now and then — "the Eiffel Tower" as "the rifle tower" on some machines,
    // every time — while a sentence not played keeps at most its "it", "is" and "the".
    let heard = jarvis::voice::heard::words(&back);
    for sentence in answer.split_inclusive('.') {
        let want = jarvis::voice::heard::words(sentence);
        let found = want.iter().filter(|w| heard.contains(w)).count();
        assert!(
            found * 3 >= want.len() * 2,
            "{sentence:?} not heard back in what played: {back}"
        );
    }
    assert_eq!(stored.heard, None, "heard whole: no cut is recorded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_microphone_pulled_out_while_listening_is_shown_off_with_the_reason_and_listen_opens_it_again(
) {
    let _one = SERIAL.lock().await;
    let mut rig = rig(ListenMode::HandsFree, |_| {}).await;
    eventually("the microphone to open", || rig.feed.opened_at().is_some()).await;
    rig.feed.unplug();
    rig.until("listening to turn off", |s| !s.listening).await;
    let problem = tokio::time::timeout(LIMIT, rig.problems.wait_for(|p| p.is_some()))
        .await
        .expect("the problem is reported")
        .unwrap()
        .clone();
    assert_eq!(problem.as_deref(), Some("the microphone was disconnected"));

    // Plugged back in: Listen opens it, the problem goes, and a question is heard.
    rig.service.set_listening(true).await.unwrap();
    tokio::time::timeout(LIMIT, rig.problems.wait_for(|p| p.is_none()))
        .await
        .expect("the problem is cleared once the microphone opens")
        .unwrap();
    assert!(rig.status().listening);
    rig.stub.push(streamed("It is noon."));
    let reply = rig.ask("What time is it?").await;
    assert_eq!(rig.end_of(reply).await, ReplyState::Done);
    let stored = rig.service.store().reply(reply).unwrap().unwrap();
    assert_eq!(stored.text, "It is noon.");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_spoken_during_a_reply_waits_and_is_answered_after_it_and_remove_withdraws_one()
{
    let _one = SERIAL.lock().await;
    let mut rig = rig(ListenMode::HandsFree, |_| {}).await;
    // The first answer runs until both questions are queued.
    let gate = rig.stub.gate();
    rig.stub.push(
        Script::text(long_answer())
            .deltas_of(4)
            .held_after(10, &gate),
    );
    rig.stub
        .push(Script::text("Madrid is the capital of Spain."));
    let first = rig.ask("What is the capital of France?").await;
    // (In voices of their own: Jarvis's, saying "the capital of" half a second after the
    // answer's opening does, is what its echo would be, and was once taken for it.)
    let second = rig
        .say(&said_by("And what is the capital of Spain?", 1))
        .await;
    assert_eq!(second.heard, Heard::Question);
    let third = rig
        .say(&said_by("How many people live in Berlin?", 3))
        .await;
    assert_eq!(third.heard, Heard::Question);
    let status = rig.until("two waiting", |s| s.queue.len() == 2).await;
    assert_eq!(
        status.replying,
        Some(first),
        "the running reply was not cancelled"
    );
    assert!(rig.service.voice_remove(status.queue[1].id).await.unwrap());
    gate.release();
    assert_eq!(rig.end_of(first).await, ReplyState::Done);
    let second = rig.next_reply().await;
    assert_eq!(rig.end_of(second).await, ReplyState::Done);
    let replies = rig.replies().await;
    let states: Vec<ReplyState> = replies.iter().map(|r| r.state).collect();
    assert_eq!(
        states,
        vec![ReplyState::Done, ReplyState::Done],
        "two answers, nothing stopped"
    );
    assert_eq!(replies[0].text, long_answer());
    let questions: Vec<String> = rig
        .records()
        .await
        .into_iter()
        .filter(|r| r.role == Role::User)
        .map(|r| r.text.to_lowercase())
        .collect();
    assert_eq!(
        questions.len(),
        2,
        "the withdrawn question was never asked: {questions:?}"
    );
    assert!(questions[1].contains("spain"), "{questions:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noise_fillers_and_its_own_echo_change_nothing_while_a_question_said_over_it_is_queued() {
    let _one = SERIAL.lock().await;
    let mut rig = rig(ListenMode::HandsFree, |_| {}).await;
    // The answer runs, its first two sentences written, until the question is queued.
    let gate = rig.stub.gate();
    rig.stub.push(
        Script::text(long_answer())
            .deltas_of(4)
            .held_after(24, &gate),
    );
    rig.stub.push(Script::text("It is half past three."));
    let reply = rig.ask("Tell me about Paris.").await;
    // Once both sentences are handed to the speaker, its own second sentence comes back into the
    // microphone while it speaks; then a cough, a knock, silence and an um.
    rig.until_played("both sentences", |r| r.arrivals().len() >= 2)
        .await;
    let echo = rig
        .say(&speech(
            "It lies on the river Seine in the north of the country.",
        ))
        .await;
    assert_eq!(echo.heard, Heard::Echo, "its own voice: {echo:?}");
    rig.say_quietly(&cough()).await;
    rig.say_quietly(&knock()).await;
    rig.say_quietly(&silence(1500)).await;
    // (A person's words over the voice are said in voices of their own: in Jarvis's, they follow
    // its loudness as its echo would, and may be taken for it.)
    let um = rig.say(&said_by("Um.", 1)).await;
    assert!(um.heard.ignored(), "um: {um:?}");
    let question = rig.say(&said_by("What time is it?", 3)).await;
    assert_eq!(question.heard, Heard::Question, "{question:?}");
    let status = rig.until("one waiting", |s| s.queue.len() == 1).await;
    assert_eq!(status.replying, Some(reply), "nothing cancelled the reply");
    gate.release();
    assert_eq!(rig.end_of(reply).await, ReplyState::Done);
    let second = rig.next_reply().await;
    assert_eq!(rig.end_of(second).await, ReplyState::Done);
    let replies = rig.replies().await;
    assert_eq!(replies.len(), 2, "only the real question was asked");
    assert!(replies.iter().all(|r| r.state == ReplyState::Done));
    // The cough and the knock never reached speech-to-text: dropped at capture, if seen at all.
    while let Ok(report) = rig.heard.try_recv() {
        rig.noise.push(report);
    }
    assert!(
        rig.noise
            .iter()
            .all(|r| r.heard == Heard::Noise && r.text.is_empty()),
        "{:?}",
        rig.noise
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_said_alone_cancels_the_reply_and_the_waiting_questions_and_keeps_what_was_heard() {
    let _one = SERIAL.lock().await;
    let mut rig = rig(ListenMode::HandsFree, |_| {}).await;
    // The answer runs, its first two sentences written, until the stop: nothing releases it.
    let gate = rig.stub.gate();
    rig.stub.push(
        Script::text(long_answer())
            .deltas_of(4)
            .held_after(22, &gate),
    );
    let asked = rig
        .say(&speech("Stop the timer and tell me the time."))
        .await;
    assert_eq!(
        asked.heard,
        Heard::Question,
        "a sentence with stop in it is a question: {asked:?}"
    );
    let reply = rig.next_reply().await;
    // (Said over the voice in voices of their own: in Jarvis's, they may be taken for its echo.)
    rig.say(&said_by("And what about tomorrow?", 1)).await;
    rig.until("one waiting", |s| s.queue.len() == 1).await;
    rig.until_played("1.5 s of its voice", |r| {
        r.played() >= Duration::from_millis(1500)
    })
    .await;
    let stop = rig.say(&said_by("Stop.", 3)).await;
    assert_eq!(stop.heard, Heard::Stop);
    assert_eq!(rig.end_of(reply).await, ReplyState::Stopped);
    let status = rig
        .until("everything stopped and quiet", |s| {
            s.replying.is_none() && s.queue.is_empty() && !s.speaking
        })
        .await;
    assert!(status.chat.is_some(), "the conversation goes on");
    assert!(!rig.recorder.is_playing(), "its voice was cut");
    let stored = rig.service.store().reply(reply).unwrap().unwrap();
    assert_eq!(stored.state, ReplyState::Stopped);
    assert!(!stored.text.is_empty(), "what was written is kept");
    let heard = stored.heard.expect("the cut is recorded");
    assert!(
        heard.starts_with("The capital of France"),
        "heard prefix: {heard:?}"
    );
    assert!(
        long_answer().starts_with(&heard) && heard.len() < long_answer().len(),
        "heard prefix: {heard:?}"
    );
    assert_eq!(
        rig.replies().await.len(),
        1,
        "the waiting question was dropped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn its_voice_is_lowered_to_a_fifth_while_the_user_speaks_over_it_and_comes_back_after() {
    let _one = SERIAL.lock().await;
    let mut rig = rig(ListenMode::HandsFree, |_| {}).await;
    rig.stub.push(streamed(long_answer()));
    rig.stub.push(Script::text("Berlin."));
    rig.say(&speech("Tell me about Paris.")).await;
    rig.until_played("0.5 s of its voice", |r| {
        r.played() >= Duration::from_millis(500)
    })
    .await;
    let started = rig.recorder.made().elapsed();
    // (In a voice of its own: in Jarvis's, "…the capital of…" over "The capital of France…"
    // follows its loudness as its echo would, and may be taken for it.)
    let over = rig
        .say(&said_by("What is the capital of Germany?", 1))
        .await;
    assert_eq!(over.heard, Heard::Question);
    let volumes = rig.recorder.volumes();
    let during: Vec<f32> = volumes
        .iter()
        .filter(|v| v.at >= started)
        .map(|v| v.volume)
        .collect();
    assert_eq!(
        during,
        vec![0.2, 1.0],
        "ducked to a fifth, then back: {volumes:?}"
    );
    assert!(rig.status().speaking, "never cut");
    let ducked = volumes.iter().find(|v| v.volume == 0.2).unwrap();
    let back = volumes.iter().find(|v| v.volume == 1.0).unwrap();
    // The samples played in between are at a fifth of their level.
    let played = rig.recorder.played_samples();
    let rate = f64::from(played.rate);
    // (Rounded: a sample count turned into a Duration and back can come out a hair under the
    // whole number, and truncating it took in the last sample before the duck.)
    let index = |d: Duration| (d.as_secs_f64() * rate).round() as usize;
    let span = &played.samples[index(ducked.played)..index(back.played)];
    let peak = span.iter().fold(0.0_f32, |m, s| m.max(s.abs()));
    assert!(
        peak > 0.0 && peak <= 0.2 + 1e-3,
        "peak while ducked: {peak}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_whose_window_leaves_finishes_silently_is_kept_and_shown_as_answered_away_then_forgotten(
) {
    let _one = SERIAL.lock().await;
    // The keep time is the manual clock here: 2 s instead of 30 minutes.
    let mut rig = rig(ListenMode::HandsFree, |o| {
        o.voice_keep = Duration::from_secs(2)
    })
    .await;
    // The answer is still being written when the window leaves.
    let (reply, gate, clips_then) = rig.hidden_mid_answer(22, Duration::from_millis(800)).await;
    assert!(!rig.recorder.is_playing(), "no window, no sound");
    assert_eq!(rig.status().replying, Some(reply), "the reply goes on");
    gate.release();
    rig.until("the reply to end", |s| s.replying.is_none())
        .await;
    assert_eq!(
        rig.recorder.arrivals().len(),
        clips_then,
        "nothing more was synthesised"
    );
    let stored = rig.service.store().reply(reply).unwrap().unwrap();
    assert_eq!(stored.state, ReplyState::Done);
    assert_eq!(stored.text, long_answer(), "the whole reply is kept");
    let heard = stored.heard.expect("where the voice was cut is kept");
    assert!(
        long_answer().starts_with(&heard) && heard.len() < long_answer().len(),
        "{heard:?}"
    );
    // A window that comes back sees it answered while away…
    let mut orb = rig.service.voice_attach().await.unwrap();
    match orb.next().await.unwrap() {
        jarvis::service::VoiceUpdate::Status(s) => assert_eq!(s.answered_away, Some(reply)),
        other => panic!("status first: {other:?}"),
    }
    drop(orb);
    // …and with nothing running and nobody watching, the conversation is forgotten after its
    // keep time (the chat stays, saved).
    rig.service.set_listening(false).await.unwrap();
    rig.until("forgotten", |s| s.chat.is_none()).await;
}

/// Issue 28 item 7 (ADR 0145): an orb shown again while its answer is still being written
/// gets the rest with speech again, from the next sentence; it stayed silent. What was said
/// while it was hidden is not said, and where its voice was cut when it left stays kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orb_shown_again_mid_answer_speaks_the_rest_from_the_next_sentence() {
    let _one = SERIAL.lock().await;
    let mut rig = rig(ListenMode::HandsFree, |_| {}).await;
    // Held inside its second sentence.
    let (reply, gate, clips_then) = rig.hidden_mid_answer(12, Duration::from_millis(300)).await;
    let heard_then = rig.service.store().reply(reply).unwrap().unwrap().heard;
    assert!(heard_then.is_some(), "where it was cut is kept");
    rig.orb = Some(rig.service.voice_attach().await.unwrap()); // shown again
    gate.release();
    rig.until("the reply to end", |s| s.replying.is_none())
        .await;
    // The second sentence (ended after the orb came back) and the three after it.
    rig.until_played("the rest of the answer said", |r| {
        r.arrivals().len() >= clips_then + 4
    })
    .await;
    rig.until("its voice to end", |s| !s.speaking).await;
    assert_eq!(
        rig.recorder.arrivals().len() - clips_then,
        4,
        "the rest of the answer was said"
    );
    let stored = rig.service.store().reply(reply).unwrap().unwrap();
    assert_eq!(
        stored.heard, heard_then,
        "the heard prefix of its leaving stands"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hey_jarvis_opens_a_wake_conversation_other_speech_does_not_and_a_goodbye_ends_it_after_the_reply(
) {
    let _one = SERIAL.lock().await;
    let mut rig = rig(ListenMode::Wake, |_| {}).await;
    rig.stub.push(streamed(
        "Paris is the capital of France. It lies on the Seine.",
    ));
    // Not awake: speech is not for Jarvis.
    rig.say_quietly(&speech("What is the capital of France?"))
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        rig.heard.try_recv().is_err(),
        "nothing is heard before the wake word"
    );
    assert_eq!(rig.status().chat, None);
    rig.feed.say(&speech("Hey Jarvis.").then(&silence(700)));
    assert_eq!(rig.next_heard().await.heard, Heard::Wake);
    rig.until("awake", |s| s.awake).await;
    let reply = rig.ask("What is the capital of France?").await;
    let bye = rig.say(&speech("Thanks, that's all.")).await;
    assert_eq!(bye.heard, Heard::Goodbye, "{bye:?}");
    rig.until("the conversation to end", |s| s.chat.is_none() && !s.awake)
        .await;
    let stored = rig.service.store().reply(reply).unwrap().unwrap();
    assert_eq!(
        stored.state,
        ReplyState::Done,
        "the goodbye waited for the reply"
    );
    assert_eq!(rig.stub.received().len(), 1, "the goodbye was not asked");
    // The wake word is still listened for: other speech is not heard as anything, and "Hey
    // Jarvis" opens a new conversation.
    assert!(rig.status().listening, "the goodbye left the microphone on");
    while rig.heard.try_recv().is_ok() {}
    rig.say_quietly(&speech("Thanks, that's all.")).await;
    rig.say_quietly(&speech("What is the capital of Spain?"))
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = rig.heard.try_recv();
    assert!(
        after.is_err(),
        "nothing is heard after a goodbye: {after:?}"
    );
    rig.feed.say(&speech("Hey Jarvis.").then(&silence(700)));
    assert_eq!(rig.next_heard().await.heard, Heard::Wake);
    rig.until("awake again", |s| s.awake).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wake_conversation_stays_open_its_quiet_spell_after_an_answer_said_long_past_its_text() {
    let _one = SERIAL.lock().await;
    let mut rig = rig_in(
        ListenMode::Wake,
        |_| {},
        whisper(),
        Arc::new(Espeak::default()),
        None,
        VoiceOptions {
            wake_idle: Duration::from_secs(2),
            ..VoiceOptions::default()
        },
    )
    .await;
    rig.feed.say(&speech("Hey Jarvis.").then(&silence(700)));
    assert_eq!(rig.next_heard().await.heard, Heard::Wake);
    rig.until("awake", |s| s.awake).await;
    // The whole text at once; saying it takes about three times the quiet spell.
    rig.stub.push(Script::text(
        "Paris is the capital of France. It lies on the Seine. It is known for the Eiffel Tower.",
    ));
    let reply = rig.ask("What is the capital of France?").await;
    assert_eq!(rig.end_of(reply).await, ReplyState::Done);
    rig.until_played("the answer said", |r| {
        r.arrivals().len() == 3 && !r.is_playing()
    })
    .await;
    // The follow-up, without the wake word, as soon as the answer has been said.
    rig.stub.push(streamed("Madrid is the capital of Spain."));
    let follow = rig.say(&speech("And what about Spain?")).await;
    assert_eq!(follow.heard, Heard::Question, "{follow:?}");
    rig.next_reply().await;
}

fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        if let Ok(entries) = std::fs::read_dir(&d) {
            for e in entries.flatten() {
                let path = e.path();
                if path.is_dir() {
                    stack.push(path);
                } else {
                    out.push(path);
                }
            }
        }
    }
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_file_is_created_during_a_whole_voice_session() {
    let _one = SERIAL.lock().await;
    // The session's temporary folder is its own, so no other test's files can show in it.
    let private = tempfile::tempdir().unwrap();
    let outer = std::env::var_os("TMPDIR");
    std::env::set_var("TMPDIR", private.path());
    let mut rig = rig(ListenMode::HandsFree, |_| {}).await;
    let data = rig._dir.path().to_path_buf();
    let temp = std::env::temp_dir();
    assert_eq!(temp, private.path());
    let before_data = files_under(&data);
    let before_temp: Vec<_> = files_under(&temp)
        .into_iter()
        .filter(|p| !p.starts_with(&data))
        .collect();
    rig.stub.push(streamed("Paris. It lies on the Seine."));
    let reply = rig.ask("What is the capital of France?").await;
    assert_eq!(rig.end_of(reply).await, ReplyState::Done);
    rig.until("the voice to end", |s| !s.speaking).await;
    rig.service.end_conversation().await.unwrap();
    assert_eq!(
        files_under(&data),
        before_data,
        "no file appeared in the data directory"
    );
    let after_temp: Vec<_> = files_under(&temp)
        .into_iter()
        .filter(|p| !p.starts_with(&data))
        .collect();
    let new: Vec<_> = after_temp
        .iter()
        .filter(|p| !before_temp.contains(p))
        .collect();
    match outer {
        Some(outer) => std::env::set_var("TMPDIR", outer),
        None => std::env::remove_var("TMPDIR"),
    }
    assert!(
        new.is_empty(),
        "files appeared in the temp directory: {new:?}"
    );
}

/// `jarvis listen` over `session` (written to a WAV file in `dir`) in `mode`: the file and what
/// it printed.
async fn listen_to(dir: &Dir, session: &Clip, mode: &str) -> (std::path::PathBuf, String) {
    let wav = dir.path().join(format!("{mode}.wav"));
    std::fs::write(&wav, session.to_wav_bytes()).unwrap();
    // (One thread for speech-to-text, as the rig's whisper has.)
    std::fs::write(dir.path().join("settings.toml"), "[voice]\nthreads = 1\n").unwrap();
    let mut cmd = jarvis(dir);
    cmd.env("JARVIS_DATA_DIR", model_dir().parent().unwrap());
    cmd.args(["listen", "--wav", wav.to_str().unwrap(), "--mode", mode]);
    let (code, out, err) = output_within(SPEECH_LIMIT, &mut cmd).await;
    assert_eq!(code, 0, "{err}");
    (wav, out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_prints_one_verdict_per_utterance_and_say_writes_what_it_would_speak() {
    let _one = SERIAL.lock().await;
    let dir = Dir::new();
    let session = silence(500)
        .then(&speech("What is the capital of France?"))
        .then(&silence(800))
        .then(&speech("Um."))
        // (Said alone: an "um" holds the utterance open through a shorter pause.)
        .then(&silence(1800))
        .then(&cough())
        .then(&silence(800))
        .then(&speech("Stop."))
        .then(&silence(800));
    let (wav, out) = listen_to(&dir, &session, "hands_free").await;
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let verdicts: Vec<&str> = lines.iter().map(|l| l["heard"].as_str().unwrap()).collect();
    assert_eq!(verdicts.first(), Some(&"question"), "{out}");
    assert!(
        verdicts.contains(&"filler") && verdicts.last() == Some(&"stop"),
        "{out}"
    );
    assert!(
        !verdicts[1..].contains(&"question"),
        "only the first is a question: {out}"
    );
    let first = &lines[0];
    assert!(
        first["start_ms"].as_u64().unwrap() <= 500 && first["end_ms"].as_u64().unwrap() > 1500,
        "{first}"
    );

    // A file that is not a WAV, and a machine without the speech model: clear errors.
    let bad = dir.path().join("bad.wav");
    std::fs::write(&bad, b"not a wav file").unwrap();
    let mut cmd = jarvis(&dir);
    cmd.env("JARVIS_DATA_DIR", model_dir().parent().unwrap());
    cmd.args(["listen", "--wav", bad.to_str().unwrap()]);
    let (code, _, err) = output(&mut cmd).await;
    assert_eq!(code, 1);
    assert!(
        err.contains("cannot read") && err.contains("bad.wav"),
        "{err}"
    );
    let mut cmd = jarvis(&dir);
    cmd.args(["listen", "--wav", wav.to_str().unwrap()]);
    let (code, _, err) = output(&mut cmd).await;
    assert_eq!(code, 1);
    assert!(
        err.contains("speech model not installed") && err.contains("scripts/models voice"),
        "{err}"
    );

    let spoken = dir.path().join("spoken.wav");
    let mut cmd = jarvis(&dir);
    cmd.args([
        "say",
        "The answer is forty two.",
        "--out",
        spoken.to_str().unwrap(),
    ]);
    let (code, _, err) = output(&mut cmd).await;
    assert_eq!(code, 0, "{err}");
    let clip = Clip::from_wav_file(&spoken)
        .unwrap()
        .resampled(SAMPLE_RATE)
        .unwrap();
    let back = whisper()
        .transcribe(&clip.samples)
        .unwrap()
        .text
        .to_lowercase();
    assert!(
        back.contains("answer") && (back.contains("42") || back.contains("forty")),
        "{back}"
    );
}

/// The last message's text of each request the stub received.
fn last_messages(stub: &Stub) -> Vec<String> {
    stub.received()
        .iter()
        .map(|r| {
            let last = r.body["messages"].as_array().unwrap().last().unwrap();
            match &last["content"] {
                serde_json::Value::String(text) => text.clone(),
                other => other.to_string(),
            }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_to_talk_question_is_told_to_the_model_as_spoken_with_push_to_talk() {
    let _one = SERIAL.lock().await;
    let mut rig = rig(ListenMode::PushToTalk, |_| {}).await;
    rig.service.set_listening(false).await.unwrap();
    rig.until("the microphone shut", |s| !s.listening).await;
    rig.stub.push(streamed("It is noon."));
    rig.service.push_to_talk(true).await.unwrap();
    rig.until("the key held", |s| s.listening).await;
    rig.feed
        .say(&speech("What time is it?").then(&silence(200)));
    rig.until_heard_all().await;
    // The key comes up before the utterance is judged (the release is what ends it).
    rig.service.push_to_talk(false).await.unwrap();
    let heard = rig.next_heard().await;
    assert_eq!(heard.heard, Heard::Question, "{heard:?}");
    let reply = rig.next_reply().await;
    assert_eq!(rig.end_of(reply).await, ReplyState::Done);
    let lasts = last_messages(&rig.stub);
    assert!(
        lasts[0].contains("Interaction: spoken, push to talk"),
        "{}",
        lasts[0]
    );
}

/// Speech-to-text that fails the hard way.
struct Panicking;

impl Transcriber for Panicking {
    fn transcribe(
        &self,
        _samples: &[f32],
    ) -> Result<jarvis::voice::stt::Transcript, jarvis::voice::VoiceError> {
        panic!("a bug in speech-to-text")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_while_listening_shows_the_microphone_off_with_the_reason() {
    let _one = SERIAL.lock().await;
    let mut rig = rig_hearing(ListenMode::HandsFree, |_| {}, Arc::new(Panicking)).await;
    rig.feed
        .say(&speech("What time is it?").then(&silence(600)));
    rig.until("listening to turn off", |s| !s.listening).await;
    let problem = tokio::time::timeout(LIMIT, rig.problems.wait_for(|p| p.is_some()))
        .await
        .expect("the problem is reported")
        .unwrap()
        .clone()
        .unwrap();
    assert!(
        problem.contains("listening stopped") && problem.contains("a bug in speech-to-text"),
        "{problem}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_stays_within_reach_while_its_voice_plays_on_after_the_text_and_cuts_it() {
    let _one = SERIAL.lock().await;
    let mut rig = rig(ListenMode::HandsFree, |_| {}).await;
    // The whole text arrives at once; speaking it takes many seconds.
    rig.stub.push(Script::text(long_answer()));
    let reply = rig.ask("Tell me about Paris.").await;
    assert_eq!(rig.end_of(reply).await, ReplyState::Done);
    rig.until("the text to end", |s| s.replying.is_none()).await;
    rig.until_played("1.5 s of its voice", |r| {
        r.played() >= Duration::from_millis(1500)
    })
    .await;
    rig.until("speaking", |s| s.speaking).await;
    assert!(
        rig.service.activity().borrow().can_stop(),
        "the tray's Stop reply is enabled while it talks"
    );
    assert_eq!(rig.service.stop_all().await.unwrap(), 0, "no reply runs");
    rig.until("quiet", |s| !s.speaking).await;
    assert!(!rig.recorder.is_playing(), "its voice was cut");
    // (The activity follows the status a moment later: the tray's Stop greys out then.)
    let mut activity = rig.service.activity();
    tokio::time::timeout(LIMIT, activity.wait_for(|a| !a.can_stop()))
        .await
        .expect("Stop reply greys out once the voice is cut")
        .unwrap();
    let stored = rig.service.store().reply(reply).unwrap().unwrap();
    assert_eq!(stored.state, ReplyState::Done);
    let heard = stored.heard.expect("the cut is recorded");
    assert!(
        long_answer().starts_with(&heard) && heard.len() < long_answer().len(),
        "{heard:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_in_wake_mode_hears_nothing_after_a_goodbye_until_the_wake_word() {
    let _one = SERIAL.lock().await;
    let dir = Dir::new();
    let session = silence(500)
        .then(&speech("Hey Jarvis."))
        .then(&silence(800))
        .then(&speech("What time is it?"))
        .then(&silence(800))
        .then(&speech("Thanks, that's all."))
        .then(&silence(800))
        .then(&speech("Goodbye."))
        .then(&silence(800))
        .then(&speech("What is the capital of France?"))
        .then(&silence(800));
    let (_, out) = listen_to(&dir, &session, "wake").await;
    let verdicts: Vec<String> = out
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["heard"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .filter(|v| v != "noise")
        .collect();
    assert_eq!(verdicts, ["wake", "question", "goodbye"], "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_mind_said_after_jarvis_asked_something_is_the_users_answer_not_a_stop() {
    let _one = SERIAL.lock().await;
    let mut rig = rig(ListenMode::HandsFree, |_| {}).await;
    rig.stub
        .push(streamed("I can set an alarm for seven. Shall I set it?"));
    rig.stub.push(streamed("Alright, no alarm then."));
    let asked = rig.ask("Wake me at seven.").await;
    assert_eq!(rig.end_of(asked).await, ReplyState::Done);
    // Said, not only written: the status says "not speaking" too before the first sentence is
    // made, and a "never mind" said over the answer is a stop (seen under load).
    rig.until_played("both sentences said", |r| {
        r.arrivals().len() >= 2 && !r.is_playing()
    })
    .await;
    rig.until("the answer to end and its voice to stop", |s| {
        s.replying.is_none() && s.awaiting_answer && !s.speaking
    })
    .await;
    let said = rig.say(&speech("Never mind.")).await;
    assert_eq!(said.heard, Heard::Stop, "{said:?}");
    let answer = rig.next_reply().await;
    assert_eq!(rig.end_of(answer).await, ReplyState::Done);
    let replies = rig.replies().await;
    assert_eq!(replies.len(), 2);
    assert_eq!(replies[1].text, "Alright, no alarm then.");
    let questions: Vec<String> = rig
        .records()
        .await
        .into_iter()
        .filter(|r| r.role == Role::User)
        .map(|r| r.text.to_lowercase())
        .collect();
    assert!(questions[1].contains("never mind"), "{questions:?}");
}

/// Counts the level updates a window would be sent over `span`, and the loudest of each kind.
async fn level_updates(rig: &Rig, span: Duration) -> (usize, f32, f32) {
    let mut levels = rig._voice.levels();
    levels.borrow_and_update();
    let (mut count, mut mic, mut voice) = (0, 0.0_f32, 0.0_f32);
    let _ = tokio::time::timeout(span, async {
        while levels.changed().await.is_ok() {
            let now = *levels.borrow_and_update();
            count += 1;
            mic = mic.max(now.mic.unwrap_or(0.0));
            voice = voice.max(now.voice.unwrap_or(0.0));
        }
    })
    .await;
    (count, mic, voice)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_level_meter_follows_the_microphone_and_the_voice_and_sends_nothing_while_all_is_still()
{
    let _one = SERIAL.lock().await;
    let rig = rig(ListenMode::HandsFree, |_| {}).await;
    // The microphone open on a quiet room: nothing to redraw.
    rig.feed.say(&silence(2500));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (still, _, _) = level_updates(&rig, Duration::from_secs(2)).await;
    assert!(still <= 1, "{still} updates while all was still");
    // Speech into it: the meter moves, at most ~25 times a second.
    rig.stub.push(Script::text(long_answer()));
    rig.feed
        .say(&speech("Tell me about Paris.").then(&silence(600)));
    let (heard, mic, _) = level_updates(&rig, Duration::from_millis(1500)).await;
    assert!(mic > 0.3, "the microphone's level rose: {mic}");
    assert!(
        (5..=45).contains(&heard),
        "{heard} updates in 1.5 s of speech"
    );
    // Its own voice while it speaks.
    rig.until_played("its voice", |r| r.is_playing()).await;
    let (spoken, _, voice) = level_updates(&rig, Duration::from_secs(2)).await;
    assert!(voice > 0.3, "its voice's level: {voice}");
    assert!(
        (5..=60).contains(&spoken),
        "{spoken} updates in 2 s of its voice"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voice_loop_started_anew_does_not_say_the_last_answer_again() {
    let _one = SERIAL.lock().await;
    let mut rig = rig(ListenMode::HandsFree, |_| {}).await;
    rig.stub.push(streamed("Paris is the capital of France."));
    let reply = rig.ask("What is the capital of France?").await;
    assert_eq!(rig.end_of(reply).await, ReplyState::Done);
    rig.until_played("the answer said", |r| {
        !r.arrivals().is_empty() && !r.is_playing()
    })
    .await;
    rig.until("the voice to end", |s| !s.speaking).await;
    // A settings change starts a new loop (new devices) on the same conversation.
    let (source, _feed) = FeedSource::new();
    let recorder = Recorder::new(22_050);
    let parts = VoiceParts {
        source: Arc::new(source),
        sink: Arc::new(recorder.clone()),
        transcriber: whisper(),
        synthesizer: Arc::new(Espeak::default()),
        wake: None,
        turn: jarvis::voice::TurnJudge::default(),
    };
    rig._voice = Voice::new(VoiceLoop::start(
        rig.service.clone(),
        parts,
        VoiceOptions::default(),
    ));
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(
        recorder.arrivals().is_empty(),
        "the answer was said again: {:?}",
        recorder.arrivals()
    );
    // A new answer is said by the new loop.
    rig.typed_and_answered("And of Italy?", streamed("Rome is the capital of Italy."))
        .await;
    eventually("the new answer to be spoken by the new loop", || {
        !recorder.arrivals().is_empty()
    })
    .await;
}

/// espeak-ng held at a gate before it makes a sentence until the test opens it, as a loaded
/// machine keeps the voice loop busy making speech; it notes what it was asked to say.
#[derive(Clone, Default)]
struct HeldVoice {
    open: Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
    asked: Arc<std::sync::Mutex<Vec<String>>>,
    /// How many sentences it makes before the gate (none: it holds the first).
    free: usize,
}

impl HeldVoice {
    /// One that makes its first `free` sentences at once and holds the rest.
    fn after(free: usize) -> HeldVoice {
        HeldVoice {
            free,
            ..HeldVoice::default()
        }
    }

    fn release(&self) {
        *self.open.0.lock().unwrap() = true;
        self.open.1.notify_all();
    }

    fn asked(&self) -> Vec<String> {
        self.asked.lock().unwrap().clone()
    }
}

impl Synthesizer for HeldVoice {
    fn synthesize(&self, text: &str) -> Result<Clip, jarvis::voice::VoiceError> {
        let asked = {
            let mut asked = self.asked.lock().unwrap();
            asked.push(text.to_string());
            asked.len()
        };
        if asked <= self.free {
            return Espeak::default().synthesize(text);
        }
        let (open, opened) = &*self.open;
        let guard = open.lock().unwrap();
        let (guard, waited) = opened
            .wait_timeout_while(guard, LIMIT, |open| !*open)
            .unwrap();
        assert!(!waited.timed_out(), "the test never let the voice go on");
        drop(guard);
        Espeak::default().synthesize(text)
    }
}

/// A hands-free rig whose voice makes each sentence's sound only when the test lets it.
async fn held_voice_rig() -> (HeldVoice, Rig) {
    let voice = HeldVoice::default();
    let rig = rig_with(
        ListenMode::HandsFree,
        |_| {},
        whisper(),
        Arc::new(voice.clone()),
    )
    .await;
    (voice, rig)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_said_while_the_voice_lags_behind_silences_the_answers_written_meanwhile() {
    let _one = SERIAL.lock().await;
    let later = "Madrid is the capital of Spain. It lies in the middle of the country. About three \
                 million people live there. It is known for its museums, its parks and its squares.";
    // (Which the loop reads first once it is free, the stop or the later answer, is the runtime's
    // choice: three rounds, so a stop that silenced only the answer being spoken is caught.)
    for round in 0..3 {
        let (voice, mut rig) = held_voice_rig().await;
        rig.stub.push(Script::text(
            "Paris is the capital of France. It lies on the Seine.",
        ));
        rig.stub.push(Script::text(later));
        let first = rig.ask("What is the capital of France?").await;
        assert_eq!(rig.end_of(first).await, ReplyState::Done);
        // The loop is held making the first sentence; meanwhile another answer is written whole.
        eventually("the loop to begin to speak", || !voice.asked().is_empty()).await;
        // (Started, or queued for the moment the first reply's end reaches the service.)
        rig.service.voice_ask("And of Spain?").await.unwrap();
        let second = rig.next_reply().await;
        assert_eq!(rig.end_of(second).await, ReplyState::Done);
        // Stop (what a spoken "stop" or the tray's Stop reply does), then the loop goes on.
        rig.service.voice_stop().await.unwrap();
        voice.release();
        // Whatever it reads first, nothing is said after the stop: were the later answer said,
        // it would still be playing seconds on.
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(
            !rig.recorder.is_playing() && !rig.status().speaking,
            "round {round}: the answer written before the stop is being said: {:?}",
            voice.asked()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_conversations_first_answer_is_said_even_when_it_ends_before_the_loop_follows_it() {
    let _one = SERIAL.lock().await;
    let (voice, mut rig) = held_voice_rig().await;
    rig.typed_and_answered(
        "What is the capital of France?",
        Script::text("Paris is the capital of France."),
    )
    .await;
    // The loop is busy making the first answer's sound (held) while the conversation is ended
    // and a new one is asked and answered whole: it comes to follow the new chat only after.
    eventually("the loop to begin to speak", || !voice.asked().is_empty()).await;
    rig.service.end_conversation().await.unwrap();
    rig.typed_and_answered(
        "And of Spain?",
        Script::text("Madrid is the capital of Spain."),
    )
    .await;
    voice.release();
    eventually("the new conversation's answer to be said", || {
        voice
            .asked()
            .iter()
            .any(|s| s.contains("Madrid is the capital of Spain"))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_voice_is_shown_speaking_from_its_first_sentence_while_the_loop_makes_the_next() {
    let _one = SERIAL.lock().await;
    let voice = HeldVoice::after(1);
    let mut rig = rig_with(
        ListenMode::HandsFree,
        |_| {},
        whisper(),
        Arc::new(voice.clone()),
    )
    .await;
    // The whole answer comes at once: its second sentence is made straight after the first is
    // handed to the speaker, and making it takes a loaded machine long (held here).
    let answer =
        "Paris is the capital of France. It lies on the Seine. It is known for the Eiffel Tower.";
    rig.typed_and_answered(
        "What is the capital of France?",
        Script::text(answer).deltas_of(answer.len()),
    )
    .await;
    rig.until_played("the first sentence", |r| !r.arrivals().is_empty())
        .await;
    eventually("the second sentence to be asked for", || {
        voice.asked().len() >= 2
    })
    .await;
    // The reply is written whole; its voice plays: the orb and the tray offer Stop.
    let status = rig
        .until("the voice to be shown speaking", |s| s.speaking)
        .await;
    assert_eq!(status.replying, None);
    voice.release();
    rig.until("the voice to end", |s| !s.speaking).await;
    assert!(
        !rig.recorder.is_playing(),
        "the status says the voice ended while it plays"
    );
    assert_eq!(
        rig.recorder.arrivals().len(),
        3,
        "one clip per sentence: {:?}",
        voice.asked()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_sentence_answer_is_shown_speaking_while_its_voice_is_made() {
    let _one = SERIAL.lock().await;
    let (voice, mut rig) = held_voice_rig().await;
    // One sentence: it is made only once the reply's text is complete.
    rig.typed_and_answered(
        "What is the capital of France?",
        Script::text("Paris is the capital of France."),
    )
    .await;
    eventually("the sentence to be asked for", || !voice.asked().is_empty()).await;
    // Its sound is still being made (held): Jarvis is about to say it, and Stop is offered (and a
    // settings change waits for it rather than replacing the loop that is to say it).
    rig.until("the voice to be shown speaking", |s| s.speaking)
        .await;
    assert!(rig.service.activity().borrow().can_stop());
    voice.release();
    rig.until_played("the answer", |r| !r.arrivals().is_empty())
        .await;
    rig.until("the voice to end", |s| !s.speaking).await;
    assert!(!rig.recorder.is_playing());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_goodbye_lets_the_answer_being_said_play_out_and_its_voice_end() {
    let _one = SERIAL.lock().await;
    let answer = "Goodbye for now. It was nice talking to you. Have a lovely evening.";
    // (The answer's end and the conversation's end reach the loop together, in an order that is
    // the runtime's choice: four rounds, so a loop that left the chat first is caught.)
    for round in 0..4 {
        let (voice, mut rig) = held_voice_rig().await;
        rig.typed_and_answered(
            "Thanks, that's all.",
            Script::text(answer).deltas_of(answer.len()),
        )
        .await;
        // The loop is held making the first sentence while the conversation is ended.
        eventually("the loop to begin to speak", || !voice.asked().is_empty()).await;
        rig.service.voice_goodbye().await.unwrap();
        rig.until("the conversation to end", |s| s.chat.is_none())
            .await;
        voice.release();
        eventually("the whole answer to be said", || {
            voice
                .asked()
                .iter()
                .any(|s| s.contains("Have a lovely evening"))
        })
        .await;
        rig.until_played("the answer", |r| r.arrivals().len() == 3 && !r.is_playing())
            .await;
        rig.until(&format!("round {round}: the voice to end"), |s| !s.speaking)
            .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_aloud_over_an_answer_being_said_waits_for_it_and_cuts_nothing() {
    let _one = SERIAL.lock().await;
    let mut rig = rig(ListenMode::HandsFree, |_| {}).await;
    let first = rig
        .typed_and_answered(
            "What is the capital of Spain?",
            Script::text("Madrid is the capital of Spain."),
        )
        .await;
    rig.until_played("the first answer", |r| {
        !r.arrivals().is_empty() && !r.is_playing()
    })
    .await;
    rig.until("the voice to end", |s| !s.speaking).await;
    let answer =
        "Paris is the capital of France. It lies on the Seine. It is known for the Eiffel Tower.";
    let second = rig
        .typed_and_answered("What is the capital of France?", Script::text(answer))
        .await;
    let before = rig.recorder.played();
    rig.until_played("a second of the second answer", |r| {
        r.played() >= before + Duration::from_secs(1)
    })
    .await;
    // Read aloud (the orb's Play answer) on the first while the second is being said.
    rig._voice.replay(first).await;
    rig.until_played("the answer, then the one read again", |r| {
        r.arrivals().len() == 5 && !r.is_playing()
    })
    .await;
    rig.until("the voice to end", |s| !s.speaking).await;
    // Nothing was cut: every clip played whole, the one read again last.
    let arrivals = rig.recorder.arrivals();
    let made: Duration = arrivals.iter().map(|(_, length)| *length).sum();
    assert!(
        rig.recorder.played() + Duration::from_millis(50) >= made,
        "played {:?} of {made:?}: {arrivals:?}",
        rig.recorder.played()
    );
    assert_eq!(arrivals[4].1, arrivals[0].1, "{arrivals:?}");
    let stored = rig.service.store().reply(second).unwrap().unwrap();
    assert_eq!(stored.heard, None, "the answer being said was heard whole");
}

/// About thirty seconds of Jarvis talking.
fn thirty_second_answer() -> &'static str {
    "The Eiffel Tower was built for the world fair of eighteen eighty nine. \
     It is about three hundred metres tall, and for forty years it was the tallest structure in \
     the world. Its iron frame was designed by the engineers of Gustave Eiffel's company. \
     More than seven million people climb it every year. At night it sparkles for five minutes \
     at the start of every hour. It is painted every seven years, by hand, with sixty tonnes of \
     paint. From the top you can see for about seventy kilometres on a clear day."
}

async fn in_a_room(room: Room, cancel_echo: bool, rooms: Rooms) -> Rig {
    rig_in(
        ListenMode::HandsFree,
        |_| {},
        whisper(),
        Arc::new(Espeak::default()),
        Some(room),
        VoiceOptions {
            cancel_echo,
            rooms,
            ..VoiceOptions::default()
        },
    )
    .await
}

/// Everything heard until `reply` has ended and Jarvis's voice, at least `spoken` more of it
/// than had played when the reply was asked, has played out.
async fn heard_until_it_falls_silent(
    rig: &mut Rig,
    reply: ReplyId,
    before: Duration,
    spoken: Duration,
) -> Vec<UtteranceReport> {
    rig.end_of(reply).await;
    // (Said at real time: the bound is the answer's length and a margin for a loaded machine.)
    let recorder = rig.recorder.clone();
    eventually_within(
        spoken * 2 + LIMIT,
        &format!("{spoken:?} more of Jarvis's voice to play out"),
        || recorder.played() >= before + spoken && !recorder.is_playing(),
    )
    .await;
    // Its last echo rings out.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let mut heard = Vec::new();
    while let Ok(report) = rig.heard.try_recv() {
        heard.push(report);
    }
    heard
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_speakers_in_a_room_its_own_thirty_second_answer_neither_ducks_it_nor_is_heard() {
    let _one = SERIAL.lock().await;
    let cancel = std::env::var("JARVIS_TEST_NO_AEC").is_err();
    let kept = tempfile::tempdir().unwrap();
    let file = kept.path().join(ROOMS_FILE);
    let mut rig = in_a_room(Room::default(), cancel, Rooms::kept_in(file.clone())).await;
    // Its first answer ever teaches it that its voice comes back (its first second or two are
    // heard as they are, as before there was a canceller: BENCHMARKS.md) — and it remembers the
    // microphone.
    rig.stub.push(streamed(
        "Hello. I am Jarvis, and I am listening. Ask me anything you like, and I will answer.",
    ));
    let first = rig.ask("Hello, who are you?").await;
    heard_until_it_falls_silent(&mut rig, first, Duration::ZERO, Duration::from_secs(1)).await;
    if cancel {
        let kept: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&file).expect("what it learned, kept")).unwrap();
        assert_eq!(kept, serde_json::json!({ "echoing": [FEED_NAME] }));
        // The next run (or a loop started again by a change of settings): its first answer is
        // cancelled from its first word, so its voice is not lowered for its own echo.
        drop(rig);
        rig = in_a_room(Room::default(), cancel, Rooms::kept_in(file.clone())).await;
        rig.stub
            .push(streamed("Hello again. I am still listening."));
        let first = rig.ask("Hello, are you there?").await;
        let heard =
            heard_until_it_falls_silent(&mut rig, first, Duration::ZERO, Duration::from_secs(1))
                .await;
        let lowered = rig.recorder.volumes();
        assert!(
            lowered.is_empty() && heard.is_empty(),
            "the room remembered, its first answer was lowered {lowered:?} or heard {heard:?}"
        );
    }
    let lowered_before = rig.recorder.volumes().len();
    let played_before = rig.recorder.played();
    let replies_before = rig.replies().await.len();
    rig.stub.push(streamed(thirty_second_answer()));
    let reply = rig.ask("Tell me about the Eiffel Tower.").await;
    let heard =
        heard_until_it_falls_silent(&mut rig, reply, played_before, Duration::from_secs(25)).await;
    let lowered = &rig.recorder.volumes()[lowered_before..];
    assert!(
        lowered.is_empty(),
        "its voice was lowered for its own echo: {lowered:?}"
    );
    assert!(heard.is_empty(), "it heard its own voice: {heard:?}");
    assert_eq!(rig.replies().await.len(), replies_before + 1);
}

/// What a user says in one of espeak-ng's voices ([`fixtures::said`]).
fn said_by(text: &str, variant: usize) -> Clip {
    Clip {
        samples: fixtures::said(text, variant).expect("espeak-ng makes the fixture"),
        rate: SAMPLE_RATE,
    }
}

/// A loop on speakers in the laptop's room ([`Room::default`]) whose microphone it knows to hear
/// its voice (`rooms.json`, as a first answer leaves it), once a first answer has let the
/// canceller settle.
async fn in_a_settled_room(kept: &tempfile::TempDir) -> Rig {
    let file = kept.path().join(ROOMS_FILE);
    std::fs::write(
        &file,
        serde_json::json!({ "echoing": [FEED_NAME] }).to_string(),
    )
    .unwrap();
    let mut rig = in_a_room(Room::default(), true, Rooms::kept_in(file)).await;
    rig.stub.push(streamed(
        "Hello. I am Jarvis, and I am listening. Ask me anything you like, and I will answer.",
    ));
    let first = rig.ask("Hello, who are you?").await;
    let heard =
        heard_until_it_falls_silent(&mut rig, first, Duration::ZERO, Duration::from_secs(1)).await;
    assert!(heard.is_empty(), "it heard its own voice: {heard:?}");
    rig
}

/// Asks for the long answer, held after its first two sentences by the gate returned, and waits
/// until `into` of its voice has played.
async fn answering(rig: &mut Rig, into: Duration) -> (ReplyId, jarvis_stub::Gate) {
    let gate = rig.stub.gate();
    rig.stub.push(
        Script::text(long_answer())
            .deltas_of(4)
            .held_after(24, &gate),
    );
    let played = rig.recorder.played();
    let reply = rig.ask("Tell me about Paris.").await;
    rig.until_played("its voice to play a while", |r| r.played() >= played + into)
        .await;
    (reply, gate)
}

/// Issue 15's room at real time, where the person speaks: a question said over Jarvis's voice on
/// speakers lowers the voice to a fifth, never cuts it, and is queued with its words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_speakers_in_a_room_a_question_said_over_its_voice_lowers_it_and_is_queued_whole() {
    let _one = SERIAL.lock().await;
    let kept = tempfile::tempdir().unwrap();
    let mut rig = in_a_settled_room(&kept).await;
    let (reply, gate) = answering(&mut rig, Duration::from_millis(1500)).await;
    rig.stub.push(Script::text("Berlin."));
    let lowered_before = rig.recorder.volumes().len();
    let question = rig
        .say(&said_by("What is the capital of Germany?", 2))
        .await;
    assert_eq!(question.heard, Heard::Question, "{question:?}");
    let words = question.text.to_lowercase();
    assert!(
        words.contains("capital") && words.contains("germany"),
        "the question's words: {question:?}"
    );
    let status = rig.until("one waiting", |s| s.queue.len() == 1).await;
    assert_eq!(status.replying, Some(reply), "nothing cancelled the reply");
    assert!(status.speaking, "its voice was not cut");
    let lowered: Vec<f32> = rig.recorder.volumes()[lowered_before..]
        .iter()
        .map(|v| v.volume)
        .collect();
    assert_eq!(
        lowered.first(),
        Some(&0.2),
        "lowered to a fifth: {lowered:?}"
    );
    gate.release();
    assert_eq!(rig.end_of(reply).await, ReplyState::Done);
    let second = rig.next_reply().await;
    assert_eq!(rig.end_of(second).await, ReplyState::Done);
    let asked: Vec<String> = rig
        .records()
        .await
        .into_iter()
        .filter(|r| r.role == Role::User)
        .map(|r| r.text)
        .collect();
    assert_eq!(asked.len(), 3, "{asked:?}");
    assert_eq!(asked[2], question.text, "asked as heard");
}

/// Issue 15's check not met yet (BENCHMARKS.md, "Voice in a room"): "Stop." said over Jarvis's
/// voice in the same room stops the reply, ten answers in a row, each stopped a little later
/// into its voice (0.9–3.6 s) by one of five voices. Run it with `cargo nextest run --test
/// voice_loop --run-ignored only`: it prints what each stop was heard as, and fails on any miss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "issue 15: not every stop said over the voice in a room stops it yet"]
async fn on_speakers_in_a_room_stop_said_over_its_voice_stops_it_ten_times_in_ten() {
    let _one = SERIAL.lock().await;
    let kept = tempfile::tempdir().unwrap();
    let mut rig = in_a_settled_room(&kept).await;
    let mut missed = Vec::new();
    for i in 0..10_u64 {
        let started = rig.recorder.played();
        let (reply, _gate) = answering(&mut rig, Duration::from_millis(900 + 300 * i)).await;
        let into = rig.recorder.played() - started;
        rig.feed
            .say(&said_by("Stop.", i as usize).then(&silence(600)));
        // What the stop was heard as, noise included; a stop that opens no utterance is missed
        // (the voice plays on).
        let mut heard = Vec::new();
        let stopped = tokio::time::timeout(Duration::from_secs(6), async {
            loop {
                let report = rig.heard.recv().await.expect("the loop stopped");
                heard.push(format!("{:?} {:?}", report.heard, report.text));
                if report.heard == Heard::Stop {
                    return;
                }
            }
        })
        .await
        .is_ok();
        eprintln!("stop {i}, {into:?} into the voice: {heard:?}");
        if !stopped {
            missed.push(format!("stop {i}, {into:?} into the voice: {heard:?}"));
            rig.service.voice_stop().await.unwrap();
        }
        assert_eq!(rig.end_of(reply).await, ReplyState::Stopped, "stop {i}");
        rig.until("quiet", |s| {
            s.replying.is_none() && s.queue.is_empty() && !s.speaking
        })
        .await;
    }
    assert!(missed.is_empty(), "stops not heard as stops: {missed:#?}");
}

/// Issue 29: with `[general] language = "de"`, `jarvis say` speaks German (espeak-ng's voice of
/// the language: Piper's speaks English), and `jarvis listen` hears it with the multilingual model
/// set to German — "Stopp." and "Hör auf." said alone stop, a question is a question. (Before,
/// the English model or a language guessed per clip turned "Hör auf." into "eau", a question.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_german_jarvis_says_it_and_hears_stopp_and_hoer_auf_as_stops() {
    let _one = SERIAL.lock().await;
    let dir = Dir::new();
    std::fs::write(
        dir.path().join("settings.toml"),
        "[general]\nlanguage = \"de\"\n\n[voice]\nthreads = 1\n",
    )
    .unwrap();
    let say = |text: &'static str, name: &'static str| {
        let dir = &dir;
        async move {
            let out = dir.path().join(name);
            let mut cmd = jarvis(dir);
            cmd.env("JARVIS_DATA_DIR", model_dir().parent().unwrap());
            cmd.args(["say", "--out", out.to_str().unwrap(), text]);
            let (code, _, err) = output_within(SPEECH_LIMIT, &mut cmd).await;
            assert_eq!(code, 0, "{err}");
            assert!(err.contains("espeak-ng speaks German"), "{err}");
            Clip::from_wav_file(&out)
                .unwrap()
                .resampled(jarvis::voice::SAMPLE_RATE)
                .unwrap()
        }
    };
    let session = silence(500)
        .then(&say("Wie spät ist es jetzt in Berlin?", "frage.wav").await)
        .then(&silence(1800))
        .then(&say("Stopp.", "stopp.wav").await)
        .then(&silence(1800))
        .then(&say("Hör auf.", "hoer.wav").await)
        .then(&silence(1800));
    let wav = dir.path().join("deutsch.wav");
    let (heard, out) = listened(&dir, &wav, &session).await;
    let verdicts: Vec<String> = heard.iter().map(|u| u["heard"].to_string()).collect();
    assert_eq!(verdicts, ["\"question\"", "\"stop\"", "\"stop\""], "{out}");

    let mut cmd = jarvis(&dir);
    cmd.env("JARVIS_DATA_DIR", model_dir().parent().unwrap());
    cmd.arg("doctor");
    let (_, report, _) = output_within(SPEECH_LIMIT, &mut cmd).await;
    assert!(
        report.contains(
            "language: German ([general] language = de): heard by Whisper base (installed), \
             spoken by espeak-ng's de voice (Piper's voice en_US-joe-medium speaks English); the wake \
             word stays \"Hey Jarvis\""
        ),
        "{report}"
    );

    // Without the multilingual model: a clear message with the command that installs it.
    let empty = tempfile::tempdir().unwrap();
    let mut cmd = jarvis(&dir);
    cmd.env("JARVIS_DATA_DIR", empty.path());
    cmd.args(["listen", "--wav", wav.to_str().unwrap()]);
    let (code, _, err) = output(&mut cmd).await;
    assert_ne!(code, 0);
    assert!(
        err.contains(
            "the speech model that hears German (Whisper base, multilingual) is not installed"
        ) && err.contains("run scripts/models base"),
        "{err}"
    );
}

/// The characters of the questions below that simplified and traditional writing tell apart,
/// as (simplified, traditional).
const SCRIPTS_APART: [(char, char); 9] = [
    ('帮', '幫'),
    ('写', '寫'),
    ('邮', '郵'),
    ('吗', '嗎'),
    ('离', '離'),
    ('远', '遠'),
    ('这', '這'),
    ('么', '麼'),
    ('气', '氣'),
];

/// `questions` said by `jarvis say` and heard by `jarvis listen` with the settings for Chinese
/// written as `language` says (`zh`, `zh-hant`), each followed by 1.8 s of quiet: each must be
/// heard as a question, in Chinese characters, with at most 80 % of them wrong. What
/// `jarvis listen` printed.
async fn heard_in_chinese(dir: &Dir, language: &str, questions: &[&str]) -> String {
    std::fs::write(
        dir.path().join("settings.toml"),
        format!("[general]\nlanguage = \"{language}\"\n\n[voice]\nthreads = 1\n"),
    )
    .unwrap();
    let mut session = silence(500);
    for (i, question) in questions.iter().enumerate() {
        let out = dir.path().join(format!("{i}.wav"));
        let mut cmd = jarvis(dir);
        cmd.env("JARVIS_DATA_DIR", model_dir().parent().unwrap());
        cmd.args(["say", "--out", out.to_str().unwrap(), question]);
        let (code, _, err) = output_within(SPEECH_LIMIT, &mut cmd).await;
        assert_eq!(code, 0, "{err}");
        assert!(err.contains("espeak-ng speaks Chinese"), "{err}");
        let said = Clip::from_wav_file(&out)
            .unwrap()
            .resampled(jarvis::voice::SAMPLE_RATE)
            .unwrap();
        session = session.then(&said).then(&silence(1800));
    }
    let wav = dir.path().join("zhongwen.wav");
    let (heard, out) = listened(dir, &wav, &session).await;
    assert_eq!(heard.len(), questions.len(), "{out}");
    let (mut wrong, mut total) = (0, 0);
    for (question, utterance) in questions.iter().zip(&heard) {
        assert_eq!(utterance["heard"], "question", "{out}");
        let text = utterance["text"].as_str().unwrap();
        // Written in Chinese characters, not in Latin letters: espeak-ng's plain Mandarin
        // voice read its pinyin as English, and whisper wrote English words ("Mink 2 T1").
        let letters = text.chars().filter(|c| c.is_alphanumeric()).count();
        assert!(
            han(text).len() * 10 >= letters * 9 && !han(text).is_empty(),
            "not written in characters: {out}"
        );
        wrong += fixtures::edits(&han(question), &han(text));
        total += han(question).len();
    }
    // Whisper base on espeak-ng's formant Mandarin gets many characters wrong (BENCHMARKS.md,
    // "in the user's language": about two in three); a voice it cannot follow, all of them.
    assert!(
        wrong * 10 <= total * 8,
        "{wrong} of {total} characters wrong: {out}"
    );
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_traditional_chinese_what_is_heard_is_written_in_traditional_characters() {
    let _one = SERIAL.lock().await;
    let dir = Dir::new();
    let questions = [
        "你能幫我寫一封郵件嗎？",
        "台北離高雄有多遠？",
        "這裡的天氣怎麼樣？",
    ];
    let out = heard_in_chinese(&dir, "zh-hant", &questions).await;
    // Written as the setting asks: the characters that tell the scripts apart, in traditional
    // ones only.
    let (simplified, traditional): (Vec<char>, Vec<char>) = SCRIPTS_APART.iter().copied().unzip();
    assert!(
        !out.chars().any(|c| simplified.contains(&c)),
        "written in simplified characters: {out}"
    );
    assert!(
        out.chars().any(|c| traditional.contains(&c)),
        "not one character written in traditional characters: {out}"
    );
}

/// Characters of `text` that are Chinese (CJK unified ideographs).
fn han(text: &str) -> Vec<char> {
    text.chars()
        .filter(|c| ('\u{4e00}'..='\u{9fff}').contains(c))
        .collect()
}

/// `session` written to `wav` and heard by `jarvis listen` hands-free, with the models
/// installed: each utterance's JSON line, and all of them as printed.
async fn listened(
    dir: &Dir,
    wav: &std::path::Path,
    session: &Clip,
) -> (Vec<serde_json::Value>, String) {
    std::fs::write(wav, session.to_wav_bytes()).unwrap();
    let mut cmd = jarvis(dir);
    cmd.env("JARVIS_DATA_DIR", model_dir().parent().unwrap());
    cmd.args([
        "listen",
        "--wav",
        wav.to_str().unwrap(),
        "--mode",
        "hands_free",
    ]);
    let (code, out, err) = output_within(SPEECH_LIMIT, &mut cmd).await;
    assert_eq!(code, 0, "{err}");
    let heard = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (heard, out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_chinese_jarvis_speaks_mandarin_that_whisper_writes_back_in_characters() {
    let _one = SERIAL.lock().await;
    let dir = Dir::new();
    let questions = [
        "你能帮我写一封邮件吗？",
        "上海离北京有多远？",
        "帮我查一下明天的日程。",
    ];
    let out = heard_in_chinese(&dir, "zh", &questions).await;
    // In the simplified characters the setting asks for.
    let traditional: Vec<char> = SCRIPTS_APART.iter().map(|(_, t)| *t).collect();
    assert!(
        !out.chars().any(|c| traditional.contains(&c)),
        "written in traditional characters: {out}"
    );
}
