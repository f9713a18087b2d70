//! The voice loop: the microphone, the listener and the speaker wired to the service's voice
//! conversation. It opens the microphone only while the status says listening, puts what it
//! hears to the conversation (questions queue, a spoken "stop" stops, a goodbye ends a wake
//! conversation once its reply is done), and speaks the conversation's replies while a window
//! watches — lowered while the user talks over them, cut only by Stop, End or the window leaving.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::echo::{EchoCancelled, Reference, Rooms};
use super::listen::{ListenEvent, Listener, Shared, UtteranceReport};
use super::speak::Speaker;
use super::turn::TurnJudge;
use super::{AudioSink, AudioSource, Heard, Synthesizer, Transcriber, VoiceError, WakeDetector};
use crate::service::{AskError, Attachment, Event, ListenMode, Service, VoiceSignal, VoiceStatus};
use crate::store::{ChatId, ReplyId, ReplyState};

/// Makes a wake-word detector for each listening session (loading its models).
pub type WakeFactory = Arc<dyn Fn() -> Result<Box<dyn WakeDetector>, VoiceError> + Send + Sync>;

/// The loop's ports.
#[derive(Clone)]
pub struct VoiceParts {
    /// The microphone.
    pub source: Arc<dyn AudioSource>,
    /// The speaker.
    pub sink: Arc<dyn AudioSink>,
    /// Speech-to-text.
    pub transcriber: Arc<dyn Transcriber>,
    /// Text-to-speech.
    pub synthesizer: Arc<dyn Synthesizer>,
    /// The wake word (wake mode needs it).
    pub wake: Option<WakeFactory>,
    /// Whether a pause ends the user's turn (the end-of-turn model, or the words alone).
    pub turn: TurnJudge,
}

/// How the loop behaves.
#[derive(Debug, Clone)]
pub struct VoiceOptions {
    /// The wake word's score threshold (0–1).
    pub wake_threshold: f32,
    /// A wake conversation closes after this long with nothing said or running.
    pub wake_idle: Duration,
    /// Where the echo canceller starts looking for Jarvis's voice in the microphone, after it
    /// was handed to the speaker: the output's and the input's buffers and the room (its own
    /// delay estimator finds the true delay from there).
    pub echo_delay_hint_ms: u32,
    /// Whether Jarvis's own voice is taken out of what the microphone hears (off only to measure
    /// the loop without it).
    pub cancel_echo: bool,
    /// The language the user speaks (stops said over the voice are known by their sound in it).
    pub language: crate::config::Language,
    /// Whether the words of a pause are transcribed ahead of it, from its first moments of quiet
    /// (off only to measure the loop without it).
    pub transcribe_ahead: bool,
    /// Where the voice conversation stood as the loop began to be built: an answer that ended
    /// after it, before the loop followed the conversation, was never heard and is said. `None`:
    /// an answer that had ended is taken as heard (a loop started anew never says it again).
    pub heard_until: Option<HeardUntil>,
    /// What the echo canceller learned of the microphones, shared by every loop of a run (and
    /// kept in the data folder by the app): whether Jarvis's voice comes back into each.
    pub rooms: Rooms,
}

/// The voice conversation's chat and its newest reply, at a moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeardUntil {
    /// The conversation's chat then (`None`: it had none).
    pub chat: Option<ChatId>,
    /// That chat's newest reply then.
    pub reply: Option<ReplyId>,
}

/// A sound server's output and input buffers plus a desk's few metres.
pub const ECHO_DELAY_HINT_MS: u32 = 60;

impl Default for VoiceOptions {
    fn default() -> Self {
        VoiceOptions {
            wake_threshold: 0.5,
            wake_idle: Duration::from_secs(10),
            echo_delay_hint_ms: ECHO_DELAY_HINT_MS,
            cancel_echo: true,
            transcribe_ahead: true,
            language: crate::config::Language::En,
            heard_until: None,
            rooms: Rooms::in_memory(),
        }
    }
}

/// What the orb draws its ring from, about 25 times a second while anything changes (nothing is
/// sent while nothing does).
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize, ts_rs::TS)]
pub struct Levels {
    /// The microphone's loudness (0–1) while it is open; `None` while it is shut.
    pub mic: Option<f32>,
    /// Jarvis's voice's loudness (0–1, lowered when ducked) while it plays.
    pub voice: Option<f32>,
}

/// Levels in steps of 1/20.
fn step(level: f32) -> f32 {
    (level.clamp(0.0, 1.0) * 20.0).round() / 20.0
}

/// Whether a level moved enough to be drawn again: by two steps, or to silence, or it appeared
/// or went — so a steady sound (a room's hiss, a held vowel) sends nothing new.
fn moved(shown: Option<f32>, now: Option<f32>) -> bool {
    match (shown, now) {
        (Some(a), Some(b)) => (a - b).abs() >= 0.1 - 1e-4 || (b == 0.0 && a != 0.0),
        (None, None) => false,
        _ => true,
    }
}

enum LoopCommand {
    Replay(ReplyId),
}

/// The running loop. Dropping it stops listening and speaking; the conversation stays in the
/// service.
pub struct VoiceLoop {
    service: Service,
    heard: broadcast::Sender<UtteranceReport>,
    problems: watch::Receiver<Option<String>>,
    levels: watch::Receiver<Levels>,
    commands: mpsc::Sender<LoopCommand>,
    task: JoinHandle<()>,
    listening: ListeningThreads,
    /// Replays asked for and not yet handed whole to the speaker (the loop makes their sound
    /// before it looks at anything else, so the status cannot say it is about to speak).
    replays: Arc<std::sync::atomic::AtomicUsize>,
    shared: Shared,
}

/// The loop's listening threads that still run. A thread ends soon after its microphone closes
/// (within a frame, or once the transcription in progress is done); a process that exits while
/// one still runs the speech models can crash in their libraries' teardown, so whoever ends the
/// process waits for them ([`ListeningThreads::wait_ended`]).
#[derive(Clone, Default)]
pub struct ListeningThreads(Arc<(std::sync::Mutex<usize>, std::sync::Condvar)>);

impl ListeningThreads {
    fn started(&self) -> ListeningGuard {
        *self.0 .0.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        ListeningGuard(self.clone())
    }

    /// How many run now.
    pub fn running(&self) -> usize {
        *self.0 .0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Blocks until none runs, at most `limit`; whether none does. Call it off the async threads
    /// (or where blocking is fine: a process on its way out).
    pub fn wait_ended(&self, limit: Duration) -> bool {
        let (count, ended) = &*self.0;
        let count = count.lock().unwrap_or_else(|p| p.into_inner());
        match ended.wait_timeout_while(count, limit, |n| *n > 0) {
            Ok((count, _)) => *count == 0,
            Err(poisoned) => *poisoned.into_inner().0 == 0,
        }
    }
}

/// Counts one listening thread until it is dropped (at the thread's end, however it ends).
struct ListeningGuard(ListeningThreads);

impl Drop for ListeningGuard {
    fn drop(&mut self) {
        let (count, ended) = &*self.0 .0;
        let mut count = count.lock().unwrap_or_else(|p| p.into_inner());
        *count = count.saturating_sub(1);
        ended.notify_all();
    }
}

impl Drop for VoiceLoop {
    fn drop(&mut self) {
        self.task.abort();
        // Its speaker goes with it: the orb and the tray must not offer to stop a silent voice.
        self.service.speaking_ended_now();
    }
}

impl VoiceLoop {
    /// Starts the loop on the current runtime. What the speaker plays is taken out of what the
    /// microphone hears before anything listens (unless the sound server does it already).
    pub fn start(service: Service, mut parts: VoiceParts, options: VoiceOptions) -> VoiceLoop {
        let heard_until = options.heard_until;
        // The conversation's chat as the loop starts: only its answers can have been said by
        // a loop before this one.
        let chat_at_start = service.voice_status().borrow().chat;
        if options.cancel_echo {
            let reference = Reference::new();
            parts.sink.tap(Arc::new(reference.clone()));
            parts.source = Arc::new(EchoCancelled::new(
                parts.source.clone(),
                reference,
                options.echo_delay_hint_ms,
                options.rooms.clone(),
            ));
        }
        let (heard, _) = broadcast::channel(64);
        let (problem_tx, problems) = watch::channel(None);
        let (levels_tx, levels) = watch::channel(Levels::default());
        let (commands, command_rx) = mpsc::channel(8);
        let shared = Shared::default();
        let loop_shared = shared.clone();
        let replays = Arc::<std::sync::atomic::AtomicUsize>::default();
        let speaker = Speaker::new(
            parts.synthesizer.clone(),
            parts.sink.clone(),
            shared.clone(),
        );
        // The service hears of the voice as the speaker's state changes, from a task of its own:
        // the loop may be busy making the next sentence while the first plays. (When the speaker
        // goes, with the loop, the last word is that it is silent: a "playing" this task was
        // still sending must not outlast the loop's own word at its drop.)
        let mut busy = speaker.watch_busy();
        let told = service.clone();
        tokio::spawn(async move {
            let mut on = false;
            while busy.changed().await.is_ok() {
                on = *busy.borrow_and_update();
                if let Err(err) = told.set_speaking(on).await {
                    tracing::warn!(%err, "the service could not be told the voice plays");
                }
            }
            if on {
                let _ = told.set_speaking(false).await;
            }
        });
        let (events_tx, events) = mpsc::unbounded_channel();
        let handle = service.clone();
        let listening = ListeningThreads::default();
        let state = LoopState {
            listening: listening.clone(),
            status: service.voice_status(),
            signals: service.voice_signals(),
            service,
            parts,
            options,
            shared,
            speaker,
            heard: heard.clone(),
            problem: problem_tx,
            levels: levels_tx,
            mic: None,
            mic_down: false,
            events_tx,
            chat: None,
            watched: false,
            awake: false,
            last_activity: Instant::now(),
            trimmed_after: None,
            in_speech: false,
            said_before: None,
            heard_until,
            chat_at_start,
            stopped_through: None,
            replays: replays.clone(),
            waiting_replays: Default::default(),
        };
        let task = tokio::spawn(state.run(events, command_rx));
        VoiceLoop {
            service: handle,
            heard,
            problems,
            levels,
            commands,
            task,
            listening,
            replays,
            shared: loop_shared,
        }
    }

    /// Its listening threads: once the loop is dropped, they end soon after.
    pub fn listening_threads(&self) -> ListeningThreads {
        self.listening.clone()
    }

    /// Every utterance the loop judged, as it judges it.
    pub fn heard(&self) -> broadcast::Receiver<UtteranceReport> {
        self.heard.subscribe()
    }

    /// What keeps the loop from working (a missing model, no microphone), if anything.
    pub fn problems(&self) -> watch::Receiver<Option<String>> {
        self.problems.clone()
    }

    /// How loud the microphone and Jarvis's voice are, for the orb's ring.
    pub fn levels(&self) -> watch::Receiver<Levels> {
        self.levels.clone()
    }

    /// Reads a finished answer aloud again (the orb's Play answer); touches no history.
    pub async fn replay(&self, reply: ReplyId) {
        self.replays.fetch_add(1, Ordering::SeqCst);
        if self
            .commands
            .send(LoopCommand::Replay(reply))
            .await
            .is_err()
        {
            self.replays.fetch_sub(1, Ordering::SeqCst);
            tracing::warn!(%reply, "the voice loop has ended: nothing is played");
        }
    }

    /// Whether its voice plays now, or a replay asked for is still being made: replacing the
    /// loop now would cut what the user asked to hear.
    pub fn sounding(&self) -> bool {
        self.replays.load(Ordering::SeqCst) > 0 || self.shared.speaking()
    }

    /// Whether the user is saying something it has not yet put to the conversation: replacing
    /// the loop now would lose their words.
    pub fn hearing(&self) -> bool {
        self.shared.hearing()
    }
}

/// An open microphone: its thread runs the listener until asked to finish.
struct Mic {
    mode: ListenMode,
    finish: Arc<AtomicBool>,
}

impl Drop for Mic {
    fn drop(&mut self) {
        self.finish.store(true, Ordering::SeqCst);
    }
}

/// Runs a listener over an open capture until asked to finish (`None`) or until listening can
/// go on no longer (`Some(why)`).
#[allow(clippy::too_many_arguments)]
fn listen(
    mut capture: super::Capture,
    mode: ListenMode,
    transcriber: Arc<dyn Transcriber>,
    turn: TurnJudge,
    wake: Option<WakeFactory>,
    threshold: f32,
    ahead: bool,
    language: crate::config::Language,
    shared: Shared,
    events: &mpsc::UnboundedSender<ListenEvent>,
    stop: &AtomicBool,
) -> Option<String> {
    if let Err(err) = transcriber.prepare() {
        tracing::warn!(%err, "speech-to-text is not available");
        return Some(err.to_string());
    }
    let detector = match wake.map(|make| make()).transpose() {
        Ok(detector) => detector,
        Err(err) => {
            tracing::warn!(%err, "the wake word cannot be heard");
            return Some(err.to_string());
        }
    };
    let mut listener = Listener::new(mode, transcriber, detector, threshold, shared)
        .with_turn(turn)
        .with_language(language);
    if !ahead {
        listener = listener.without_transcribing_ahead();
    }
    // Loading left freed memory in the heap (a model file read and parsed, a first run).
    super::trim_heap();
    tracing::debug!(?mode, "listening, its models loaded");
    let send = |result: Result<Vec<ListenEvent>, VoiceError>| match result {
        Ok(list) => list.into_iter().all(|e| events.send(e).is_ok()),
        Err(err) => {
            tracing::warn!(%err, "an utterance could not be heard");
            // Its end was lost with it: Jarvis's voice comes back all the same.
            events.send(ListenEvent::SpeechEnded).is_ok()
        }
    };
    loop {
        if stop.load(Ordering::SeqCst) {
            send(listener.finish());
            return None;
        }
        match capture.frames.blocking_recv() {
            Some(frame) => {
                let judged = capture.judged.as_ref().and_then(|r| r.try_recv().ok());
                if !send(listener.push_judged(&frame, judged.as_ref())) {
                    // The loop is gone: nobody to tell.
                    return None;
                }
            }
            None => {
                send(listener.finish());
                if stop.load(Ordering::SeqCst) {
                    return None;
                }
                return Some(
                    capture
                        .lost()
                        .unwrap_or_else(|| "the microphone stopped sending sound".into()),
                );
            }
        }
    }
}

/// How long the voice is quiet (nothing heard, said or waiting) before the heap is handed back.
const TRIM_AFTER: Duration = Duration::from_secs(2);

struct LoopState {
    listening: ListeningThreads,
    service: Service,
    status: watch::Receiver<VoiceStatus>,
    /// Stop and Listen, each once.
    signals: broadcast::Receiver<VoiceSignal>,
    parts: VoiceParts,
    options: VoiceOptions,
    shared: Shared,
    speaker: Speaker,
    heard: broadcast::Sender<UtteranceReport>,
    problem: watch::Sender<Option<String>>,
    levels: watch::Sender<Levels>,
    mic: Option<Mic>,
    /// The microphone failed or went away: it is not opened again until listening is turned on
    /// anew (a [`VoiceSignal::Listen`]; until the service has taken the "off" this loop sent,
    /// the status still says "listening").
    mic_down: bool,
    events_tx: mpsc::UnboundedSender<ListenEvent>,
    chat: Option<(ChatId, Attachment)>,
    watched: bool,
    awake: bool,
    last_activity: Instant,
    /// The last activity the heap was handed back after (activity comes between ticks too, so
    /// each new one is told by its time).
    trimmed_after: Option<Instant>,
    in_speech: bool,
    /// The conversation's reply that had ended before this loop attached to it: its replayed
    /// events are not spoken.
    said_before: Option<ReplyId>,
    /// Until the loop first follows the conversation: where it stood as the loop was built.
    heard_until: Option<HeardUntil>,
    /// The conversation's chat as the loop started (read as it was made, before the loop runs).
    chat_at_start: Option<ChatId>,
    /// Replays asked for and not yet made (shared with [`VoiceLoop::sounding`]).
    replays: Arc<std::sync::atomic::AtomicUsize>,
    /// Answers asked to be read again, waiting for the voice to be quiet.
    waiting_replays: std::collections::VecDeque<ReplyId>,
    /// The conversation's newest reply when Stop was last said: it and every reply before it are
    /// not spoken, however far behind the loop was reading them (answers written while it spoke
    /// an earlier one are stopped with it).
    stopped_through: Option<ReplyId>,
}

impl LoopState {
    async fn run(
        mut self,
        mut events: mpsc::UnboundedReceiver<ListenEvent>,
        mut commands: mpsc::Receiver<LoopCommand>,
    ) {
        let mut tick = tokio::time::interval(Duration::from_millis(40));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        self.status.mark_changed();
        loop {
            let reply_event = async {
                match &mut self.chat {
                    Some((_, attachment)) => attachment.next().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                changed = self.status.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    // A signal is sent before the change it comes with: it is taken first.
                    loop {
                        match self.signals.try_recv() {
                            Ok(signal) => self.on_signal(Ok(signal)).await,
                            Err(broadcast::error::TryRecvError::Lagged(missed)) => {
                                self.on_signal(Err(missed)).await
                            }
                            Err(_) => break,
                        }
                    }
                    let status = self.status.borrow_and_update().clone();
                    self.on_status(status).await;
                }
                signal = self.signals.recv() => {
                    match signal {
                        Ok(signal) => self.on_signal(Ok(signal)).await,
                        Err(broadcast::error::RecvError::Lagged(missed)) => {
                            self.on_signal(Err(missed)).await
                        }
                        Err(broadcast::error::RecvError::Closed) => return,
                    }
                    let status = self.status.borrow_and_update().clone();
                    self.on_status(status).await;
                }
                Some(event) = events.recv() => self.on_listen(event).await,
                event = reply_event => match event {
                    Some(event) => self.on_reply_event(event).await,
                    None => self.chat = None,
                },
                Some(command) = commands.recv() => match command {
                    LoopCommand::Replay(reply) => {
                        self.waiting_replays.push_back(reply);
                        self.replay_when_quiet().await;
                    }
                },
                _ = tick.tick() => self.on_tick().await,
            }
        }
    }

    fn report_problem(&self, problem: Option<String>) {
        self.problem.send_if_modified(|p| {
            let changed = *p != problem;
            *p = problem;
            changed
        });
    }

    /// Stop cuts Jarvis's voice; Listen lets a microphone that failed be tried again.
    /// `Err(missed)`: that many signals went unread.
    async fn on_signal(&mut self, signal: Result<VoiceSignal, u64>) {
        match signal {
            Ok(VoiceSignal::Stop) => {
                self.cut().await;
                // Answers asked to be read again are not read after a stop either.
                let dropped = std::mem::take(&mut self.waiting_replays).len();
                self.replays.fetch_sub(dropped, Ordering::SeqCst);
                if let Some((chat, _)) = &self.chat {
                    let newest = self.service.last_reply(*chat).await.ok().flatten();
                    self.stopped_through = newest.map(|r| r.id).max(self.stopped_through);
                }
            }
            Ok(VoiceSignal::Listen) => self.mic_down = false,
            Err(missed) => {
                // (Sixteen signals unread: never seen.) A missed Listen is safe to assume; a
                // missed Stop is not, since cutting a voice nobody stopped would be worse.
                tracing::warn!(missed, "the voice loop missed signals");
                self.mic_down = false;
            }
        }
    }

    async fn on_status(&mut self, status: VoiceStatus) {
        // The microphone: open exactly while listening, in the mode the status says.
        let wanted = status.listening.then_some(status.mode);
        let down = self.mic.is_none() && self.mic_down;
        if self.mic.as_ref().map(|m| m.mode) != wanted && !down {
            self.mic = None; // closes (and, for push to talk, ends the utterance)
            if let Some(mode) = wanted {
                match self.open_mic(mode) {
                    Ok(mic) => {
                        self.mic = Some(mic);
                        self.report_problem(None);
                    }
                    Err(err) => {
                        tracing::warn!(%err, "the microphone could not open");
                        self.mic_down = true;
                        self.report_problem(Some(err.to_string()));
                        // Not listening, then: the orb shows the microphone off (and the problem)
                        // instead of "Mic on" over a microphone that is not open. Listen again
                        // tries again.
                        if let Err(err) = self.service.set_listening(false).await {
                            tracing::warn!(%err, "listening could not be turned off");
                        }
                    }
                }
            }
        }
        // The conversation's chat: follow its replies.
        if self.chat.as_ref().map(|(id, _)| *id) != status.chat {
            self.leave_chat().await;
            // (Ending it by End or deleting its chat counts a stop, which cuts the voice below; a
            // goodbye lets what is being said play out.) A stop said in another chat silences
            // nothing here: its reply ids may be another store's.
            self.stopped_through = None;
            self.chat = match status.chat {
                Some(chat) => {
                    // Attaching replays the chat's last reply from its first event; one that had
                    // ended before (a loop started anew by a settings change) was said already
                    // and is not said again. But the first time, an answer that ended while the
                    // loop was being built (a question typed as Piper's voice loads) was never
                    // heard. Where the last reply stands is asked before attaching: one that
                    // ends in between is replayed whole, never taken for said.
                    let heard_until = self.heard_until.take();
                    let said_before = self
                        .service
                        .last_reply(chat)
                        .await
                        .ok()
                        .flatten()
                        .filter(|r| !r.state.is_live())
                        .filter(|r| match heard_until {
                            Some(until) => {
                                until.chat == Some(chat) && until.reply.is_some_and(|u| r.id <= u)
                            }
                            // No note of where it stood: a chat that was the conversation's as
                            // this loop started was heard through the loop before it; one begun
                            // since (a new conversation after End) was not, however late this
                            // loop, busy saying something, comes to follow it.
                            None => self.chat_at_start == Some(chat),
                        })
                        .map(|r| r.id);
                    match self.service.attach(chat).await {
                        Ok(attachment) => {
                            self.said_before = said_before;
                            tracing::debug!(%chat, ?said_before, "following the conversation");
                            Some((chat, attachment))
                        }
                        Err(err) => {
                            tracing::warn!(%err, "the voice loop could not follow its conversation");
                            None
                        }
                    }
                }
                None => None,
            };
        }
        if self.awake && !status.awake {
            self.shared.set_awake(false);
        }
        self.awake = status.awake;
    }

    fn open_mic(&mut self, mode: ListenMode) -> Result<Mic, VoiceError> {
        let wake = match (mode, &self.parts.wake) {
            (ListenMode::Wake, Some(factory)) => Some(factory.clone()),
            (ListenMode::Wake, None) => {
                return Err(VoiceError::ModelMissing {
                    what: "wake word model",
                    path: "openwakeword/".into(),
                })
            }
            _ => None,
        };
        let capture = self.parts.source.open()?;
        self.shared.set_mic_level(0.0);
        let finish = Arc::new(AtomicBool::new(false));
        let transcriber = self.parts.transcriber.clone();
        let turn = self.parts.turn.clone();
        let threshold = self.options.wake_threshold;
        let ahead = self.options.transcribe_ahead;
        let language = self.options.language;
        let shared = self.shared.clone();
        let after = self.shared.clone();
        let events = self.events_tx.clone();
        let stop = finish.clone();
        let running = self.listening.started();
        std::thread::Builder::new()
            .name("jarvis-listen".into())
            .spawn(move || {
                let _running = running;
                // Whatever ends this thread other than being asked to — a model that cannot load,
                // the device going away, a panic anywhere in listening — is reported as the
                // microphone lost with the reason, so the orb never shows "Mic on" over a
                // microphone nobody reads.
                let listening = std::panic::AssertUnwindSafe(|| {
                    listen(
                        capture,
                        mode,
                        transcriber,
                        turn,
                        wake,
                        threshold,
                        ahead,
                        language,
                        shared,
                        &events,
                        &stop,
                    )
                });
                let ended = match std::panic::catch_unwind(listening) {
                    Ok(ended) => ended,
                    Err(panic) => {
                        let what = panic
                            .downcast_ref::<&str>()
                            .map(|s| s.to_string())
                            .or_else(|| panic.downcast_ref::<String>().cloned())
                            .unwrap_or_else(|| "unknown".into());
                        tracing::error!(%what, "listening stopped on an internal error");
                        Some(format!("listening stopped on an internal error ({what})"))
                    }
                };
                // An utterance it was in when it ended, however, will not end now: nobody waits
                // for it. (One it closed on being asked to finish was sent to the loop already.)
                after.set_hearing(false);
                // (A microphone the loop closed meanwhile is no news.)
                if let Some(why) = ended.filter(|_| !stop.load(Ordering::SeqCst)) {
                    let _ = events.send(ListenEvent::MicrophoneLost(why));
                }
            })
            .map_err(|e| VoiceError::Device(format!("cannot start listening: {e}")))?;
        Ok(Mic { mode, finish })
    }

    async fn on_listen(&mut self, event: ListenEvent) {
        self.last_activity = Instant::now();
        match event {
            ListenEvent::SpeechStarted => {
                self.in_speech = true;
                if self.speaker.busy() {
                    self.speaker.duck(true);
                }
            }
            ListenEvent::SpeechEnded => {
                self.speech_over();
                self.shared.set_hearing(false);
            }
            ListenEvent::MicrophoneLost(why) => {
                // What was said before it went is heard (the listener finished first); then
                // the microphone is shown off with the reason, as when it cannot open.
                tracing::warn!(%why, "the microphone went away");
                self.mic_down = self.mic.take().is_some();
                self.report_problem(Some(why));
                if let Err(err) = self.service.set_listening(false).await {
                    tracing::warn!(%err, "listening could not be turned off");
                }
            }
            ListenEvent::Heard(report) => {
                if report.heard != Heard::Wake {
                    // Said whole: the speech has ended (its end follows, once this is put; the
                    // wake word is heard inside an utterance that goes on).
                    self.speech_over();
                }
                tracing::debug!(heard = ?report.heard, start_ms = report.start_ms, "heard");
                let _ = self.heard.send(report.clone());
                match report.heard {
                    Heard::Question => self.put(report).await,
                    // ADR 0159: when Jarvis asked something and nothing runs or speaks, "no",
                    // "cancel", "never mind" is the user's answer, not a stop of nothing.
                    Heard::Stop if self.answers_rather_than_stops() => self.put(report).await,
                    Heard::Stop => {
                        if let Err(err) = self.service.voice_stop().await {
                            tracing::warn!(%err, "stop could not reach the service");
                        }
                        self.cut().await;
                    }
                    Heard::Goodbye => {
                        // (The listener already waits for the wake word again.)
                        self.awake = false;
                        if let Err(err) = self.service.voice_goodbye().await {
                            tracing::warn!(%err, "the goodbye could not reach the service");
                        }
                    }
                    Heard::Wake => {
                        self.awake = true;
                        let _ = self.service.set_awake(true).await;
                    }
                    Heard::Noise | Heard::Filler | Heard::Echo => {}
                }
            }
        }
    }

    /// The user's speech is over: Jarvis's voice comes back up.
    fn speech_over(&mut self) {
        self.in_speech = false;
        self.speaker.duck(false);
    }

    /// Puts what was heard to the conversation as the user's words, in the mode it was said in.
    async fn put(&self, report: UtteranceReport) {
        match self.service.voice_ask_heard(report.text, report.mode).await {
            Ok(_) => {}
            Err(AskError::QueueFull) => {
                // The service told the windows; the orb says it was not taken.
                tracing::info!("a spoken question was not taken: four already wait")
            }
            Err(err) => tracing::warn!(%err, "a spoken question could not be put"),
        }
    }

    /// Whether a "stop" said now is an answer: the last answer asked the user something, and
    /// no reply runs nor voice plays that it could stop (questions waiting behind the answer
    /// it is owed stay waiting).
    fn answers_rather_than_stops(&self) -> bool {
        let status = self.status.borrow();
        status.awaiting_answer && status.replying.is_none() && !self.speaker.busy()
    }

    async fn on_reply_event(&mut self, event: Event) {
        if self.said_before == Some(event.reply()) {
            tracing::debug!(reply = %event.reply(), "said before: not said again");
            return;
        }
        if self.stopped_through.is_some_and(|s| event.reply() <= s) {
            tracing::debug!(reply = %event.reply(), "written before a stop: not said");
            return;
        }
        self.last_activity = Instant::now();
        let audible = self.follow_windows().await;
        let result = match &event {
            Event::ReplyStarted { reply, .. } => {
                self.speaker.begin(*reply);
                Ok(())
            }
            Event::Delta { reply, text } => self.speaker.text(*reply, text, audible).await,
            Event::ReplyEnded { reply, state, .. } => match state {
                ReplyState::Done => self.speaker.end(*reply, audible).await,
                ReplyState::Stopped => {
                    if self.speaker.reply() == Some(*reply) {
                        self.cut().await;
                    }
                    Ok(())
                }
                _ => {
                    self.speaker.text_ended(*reply);
                    Ok(())
                }
            },
            _ => Ok(()),
        };
        if let Err(err) = result {
            tracing::warn!(%err, "the reply could not be spoken");
            self.report_problem(Some(err.to_string()));
        }
    }

    /// Before it follows another chat: what of the chat it followed had reached it is said as
    /// ever (a goodbye's answer ends just before its conversation does, and the two can reach
    /// the loop in either order), and an answer whose text will not come now is ended with what
    /// was said of it, so that the voice is not shown playing forever.
    async fn leave_chat(&mut self) {
        use futures::FutureExt;
        loop {
            let pending = match &mut self.chat {
                Some((_, attachment)) => attachment.next().now_or_never().flatten(),
                None => None,
            };
            match pending {
                Some(event) => self.on_reply_event(event).await,
                None => break,
            }
        }
        if let Some(reply) = self.speaker.reply() {
            self.speaker.text_ended(reply);
        }
    }

    /// Cuts Jarvis's voice and keeps what of the answer was heard.
    async fn cut(&mut self) {
        if let Some((reply, prefix)) = self.speaker.cut() {
            if let Err(err) = self.service.voice_heard(reply, prefix).await {
                tracing::warn!(%err, "the heard prefix could not be kept");
            }
        }
        self.speaker.publish();
    }

    async fn on_tick(&mut self) {
        self.speaker.refresh();
        self.replay_when_quiet().await;
        let levels = Levels {
            mic: self.mic.as_ref().map(|_| step(self.shared.mic_level())),
            voice: self.speaker.level().map(step),
        };
        self.levels.send_if_modified(|shown| {
            let changed = moved(shown.mic, levels.mic) || moved(shown.voice, levels.voice);
            if changed {
                *shown = levels;
            }
            changed
        });
        self.follow_windows().await;
        let status = self.status.borrow().clone();
        let quiet = status.replying.is_none() && status.queue.is_empty() && !self.speaker.busy();
        if !quiet || self.in_speech {
            // The quiet spell counts from the end of what was said, not from the answer's last
            // text (said long after it, at real time).
            self.last_activity = Instant::now();
        } else if self.trimmed_after != Some(self.last_activity)
            && self.last_activity.elapsed() >= TRIM_AFTER
        {
            // What hearing and answering freed goes back to the system while nothing is said,
            // the voice lets go of what it keeps between sentences, and speech-to-text of its
            // working state (made again as the next utterance begins).
            self.trimmed_after = Some(self.last_activity);
            let synthesizer = self.parts.synthesizer.clone();
            let transcriber = self.parts.transcriber.clone();
            tokio::task::spawn_blocking(move || {
                synthesizer.release();
                transcriber.release();
                super::trim_heap();
            });
        }
        if self.shared.awake()
            && quiet
            && !self.in_speech
            && self.last_activity.elapsed() >= self.options.wake_idle
        {
            tracing::debug!("the wake conversation went quiet");
            self.awake = false;
            self.shared.set_awake(false);
            let _ = self.service.set_awake(false).await;
        }
    }

    /// Whether a window watches the voice conversation now, acting on a change: the last window
    /// gone, the reply goes on and its audio does not; one back, the answer it left is spoken
    /// again from its next sentence.
    async fn follow_windows(&mut self) -> bool {
        let watched = self.service.voice_watched();
        if self.watched && !watched {
            if let Some((reply, prefix)) = self.speaker.window_left() {
                if let Err(err) = self.service.voice_heard(reply, prefix).await {
                    tracing::warn!(%err, "the heard prefix could not be kept");
                }
                self.speaker.publish();
            }
        } else if !self.watched && watched {
            self.speaker.window_back();
        }
        self.watched = watched;
        watched
    }

    /// Reads the answers asked to be read again, in turn, once nothing is being said: Read aloud
    /// never cuts an answer being spoken (nor one it read before).
    async fn replay_when_quiet(&mut self) {
        while !self.speaker.busy() {
            let Some(reply) = self.waiting_replays.pop_front() else {
                return;
            };
            self.replay(reply).await;
            self.replays.fetch_sub(1, Ordering::SeqCst);
        }
    }

    async fn replay(&mut self, reply: ReplyId) {
        tracing::debug!(%reply, "replaying");
        let Ok(Some(stored)) = self.service.reply(reply).await else {
            return;
        };
        if let Err(err) = self.speaker.replay(reply, &stored.text).await {
            tracing::warn!(%err, "the answer could not be played");
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_level_is_drawn_again_only_when_it_moved_by_two_steps_or_fell_silent() {
        use super::moved;
        assert!(!moved(None, None));
        assert!(moved(None, Some(0.0)) && moved(Some(0.0), None));
        assert!(!moved(Some(0.3), Some(0.35)));
        assert!(moved(Some(0.3), Some(0.4)));
        assert!(moved(Some(0.05), Some(0.0)));
        assert!(!moved(Some(0.0), Some(0.05)));
    }
}
