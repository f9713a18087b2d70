//! The voice supervisor: one voice loop at a time, built from the settings, restarted when they
//! change (never while the voice conversation replies or speaks), with its problems and levels
//! kept in watches that outlive any one loop, and Play and Read aloud never lost to a restart.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use crate::config::Config;
use crate::service::{Service, VoiceStatus};
use crate::store::ReplyId;
use crate::voice::device::{CpalSource, RodioSink};
use crate::voice::echo::{Rooms, ROOMS_FILE};
use crate::voice::pipeline::{HeardUntil, Levels, VoiceOptions, VoiceParts};
use crate::voice::{models, AudioSink, Recorder, VoiceError, VoiceLoop};

/// Builds a voice loop's parts from the configuration (blocking: it may load models and open
/// devices). [`device_parts`] is the real one.
pub type PartsMaker = Arc<dyn Fn(&Config) -> Result<VoiceParts, VoiceError> + Send + Sync>;

/// How long the voice conversation must stay quiet (no reply, no voice, nothing asked to be said)
/// before a restart replaces its loop: the last sentence is spoken just after the reply's text
/// ends.
pub const QUIET_BEFORE_RESTART: Duration = Duration::from_millis(500);

/// The longest a new voice loop waits for the words being said to the one it replaces (the
/// listener closes an utterance within 30 s, and transcribes it).
const HEARING_WAIT: Duration = Duration::from_secs(45);

/// The real parts: the speech model (loaded when first needed), the wake word when installed,
/// the speaker (or, without one, a recorder: answers are shown, not heard), the microphone the
/// settings name (opened only while a mode listens) and espeak-ng.
pub fn device_parts() -> PartsMaker {
    Arc::new(|config: &Config| {
        let voice = &config.settings.voice;
        let models_dir = config.model_dir();
        let language = config.settings.general.language;
        let whisper = models::lazy_whisper_for(&models_dir, voice, language)?;
        let (transcriber, ungated) = models::speech_gate(&models_dir, Arc::new(whisper));
        if let Some(err) = ungated {
            tracing::warn!(%err, "the speech detector is not available; whisper judges noise alone");
        }
        let (turn, words_only) = models::turn_judge(&models_dir);
        if let Some(err) = words_only {
            tracing::warn!(%err, "the end-of-turn model is not available; pauses are judged by their words");
        }
        let wake = match models::wake_factory(&models_dir) {
            Ok(factory) => Some(factory),
            Err(err) => {
                tracing::warn!(%err, "the wake word is not available");
                None
            }
        };
        let (synthesizer, fallback) = models::synthesizer_in(&models_dir, voice, language);
        if let Some(err) = fallback {
            tracing::warn!(%err, "Piper's voice is not used; espeak-ng speaks instead");
        }
        let sink: Arc<dyn AudioSink> = match RodioSink::open() {
            Ok(sink) => Arc::new(sink),
            Err(err) => {
                tracing::warn!(%err, "no speaker; replies are not spoken");
                Arc::new(Recorder::new(22_050))
            }
        };
        let source = CpalSource {
            device: (!voice.input_device.is_empty()).then(|| voice.input_device.clone()),
        };
        Ok(VoiceParts {
            source: Arc::new(source),
            sink,
            transcriber,
            synthesizer,
            wake,
            turn,
        })
    })
}

/// Starts, restarts and speaks through the voice loop. Cheap to clone.
#[derive(Clone)]
pub struct VoiceSupervisor {
    inner: Arc<Inner>,
}

struct Inner {
    service: Service,
    make: PartsMaker,
    slot: Mutex<Slot>,
    problem: watch::Sender<Option<String>>,
    levels: watch::Sender<Levels>,
    /// What the echo canceller learned of the microphones, kept in the data folder: every loop
    /// of the run starts from it.
    rooms: std::sync::OnceLock<Rooms>,
}

struct Slot {
    /// The running loop, or why there is none.
    current: Result<Arc<VoiceLoop>, String>,
    /// While a loop is being built: what was asked to be said meanwhile, said by it once it runs.
    building: Option<Vec<ReplyId>>,
    /// Counts starts: only the newest start's loop is kept and reports its problems.
    starts: u64,
    /// Counts restarts asked for: only the newest one goes ahead.
    restarts: u64,
    /// Counts what was asked to be said (Play, Read aloud), so that a restart waiting for quiet
    /// notices a replay asked just before it would have begun.
    asked: u64,
}

/// Replays asked while a loop is being built are kept up to this many.
const HELD_REPLAYS: usize = 4;

impl VoiceSupervisor {
    /// A supervisor with no loop yet ("the voice loop is starting").
    pub fn new(service: Service, make: PartsMaker) -> VoiceSupervisor {
        VoiceSupervisor {
            inner: Arc::new(Inner {
                service,
                make,
                slot: Mutex::new(Slot {
                    current: Err("the voice loop is starting".into()),
                    building: None,
                    starts: 0,
                    restarts: 0,
                    asked: 0,
                }),
                problem: watch::Sender::new(None),
                levels: watch::Sender::new(Levels::default()),
                rooms: std::sync::OnceLock::new(),
            }),
        }
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Slot> {
        self.inner.slot.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Builds a loop from `config` and puts it in place of the running one (dropping that one
    /// closes its microphone; the conversation stays). What is asked to be said while it is
    /// built is said by the new loop. A missing model or device is kept as the reason Jarvis
    /// cannot listen or speak.
    pub async fn start(&self, config: Config) {
        let start = {
            let mut slot = self.slot();
            slot.starts += 1;
            slot.building.get_or_insert_with(Vec::new);
            slot.starts
        };
        // Where the conversation stands now: what is answered while the loop is built (loading
        // Piper's voice takes a second or two) is said by it.
        let service = &self.inner.service;
        let chat = service.voice_status().borrow().chat;
        let reply = match chat {
            Some(chat) => service.last_reply(chat).await.ok().flatten().map(|r| r.id),
            None => None,
        };
        let make = self.inner.make.clone();
        let rooms = self
            .inner
            .rooms
            .get_or_init(|| Rooms::kept_in(config.data_dir.join(ROOMS_FILE)))
            .clone();
        let options = VoiceOptions {
            wake_threshold: config.settings.voice.wake_threshold,
            language: config.settings.general.language,
            heard_until: Some(HeardUntil { chat, reply }),
            rooms,
            ..VoiceOptions::default()
        };
        let built = tokio::task::spawn_blocking(move || make(&config)).await;
        if matches!(built, Ok(Ok(_))) {
            // Someone speaking to the loop being replaced (the models take seconds to load) is
            // heard by it to the end: the new loop would hear only the rest of their words.
            self.until_not_hearing().await;
        }
        let result = match built {
            Ok(Ok(parts)) => {
                tracing::debug!("voice loop started");
                Ok(Arc::new(VoiceLoop::start(
                    self.inner.service.clone(),
                    parts,
                    options,
                )))
            }
            Ok(Err(err)) => Err(err.to_string()),
            Err(err) => Err(format!("the voice loop could not start: {err}")),
        };
        let held = {
            let mut slot = self.slot();
            if slot.starts != start {
                // A newer start is on its way; it takes what was asked meanwhile.
                return;
            }
            slot.current = result.clone();
            slot.building.take().unwrap_or_default()
        };
        match result {
            Err(problem) => {
                tracing::warn!("voice: {problem}");
                self.inner.problem.send_replace(Some(problem));
                self.inner.levels.send_replace(Levels::default());
                // Listening asked for while it was built has no microphone behind it: the orb
                // shows it off, beside the reason.
                if self.inner.service.voice_status().borrow().listening {
                    if let Err(err) = self.inner.service.set_listening(false).await {
                        tracing::warn!(%err, "listening could not be turned off");
                    }
                }
            }
            Ok(voice) => {
                self.forward(start, &voice);
                for reply in held {
                    voice.replay(reply).await;
                }
            }
        }
    }

    /// Ends the voice loop as Jarvis quits and waits, at most `limit`, for its listening thread to
    /// end: a process that exits while it still runs the speech models can crash in their
    /// libraries' teardown. Whether it ended.
    pub fn stop_for_exit(&self, limit: Duration) -> bool {
        let current = std::mem::replace(&mut self.slot().current, Err("Jarvis is quitting".into()));
        match current {
            Ok(voice) => {
                let threads = voice.listening_threads();
                drop(voice);
                threads.wait_ended(limit)
            }
            Err(_) => true,
        }
    }

    /// The loop's own problems (the microphone failing to open later) and levels go to the
    /// supervisor's watches until a newer loop replaces it.
    fn forward(&self, start: u64, voice: &VoiceLoop) {
        let mut problems = voice.problems();
        let mut levels = voice.levels();
        let me = self.clone();
        tokio::spawn(async move {
            loop {
                if me.slot().starts != start {
                    break;
                }
                let problem = problems.borrow_and_update().clone();
                me.inner.problem.send_if_modified(|p| {
                    let changed = *p != problem;
                    *p = problem;
                    changed
                });
                let now = *levels.borrow_and_update();
                me.inner.levels.send_if_modified(|l| {
                    let changed = *l != now;
                    *l = now;
                    changed
                });
                tokio::select! {
                    changed = problems.changed() => if changed.is_err() { break },
                    changed = levels.changed() => if changed.is_err() { break },
                }
            }
        });
    }

    /// A new loop from `config`, once the voice conversation's reply is answered and its speech
    /// has ended (switching never cuts one) and it stayed quiet for [`QUIET_BEFORE_RESTART`].
    /// Listening resumes as it was. A newer restart replaces one still waiting.
    pub fn restart_when_quiet(&self, config: Config) {
        let restart = {
            let mut slot = self.slot();
            slot.restarts += 1;
            slot.restarts
        };
        let me = self.clone();
        let mut status = self.inner.service.voice_status();
        tokio::spawn(async move {
            let quiet = |s: &VoiceStatus| s.replying.is_none() && !s.speaking;
            loop {
                if status.wait_for(quiet).await.is_err() {
                    return;
                }
                let before = me.slot().asked;
                tokio::time::sleep(QUIET_BEFORE_RESTART).await;
                let still_quiet = quiet(&status.borrow_and_update());
                let mut slot = me.slot();
                if slot.restarts != restart {
                    return;
                }
                // (A replay being made is not in the status yet: the loop says so itself; nor
                // are the words of someone still speaking, which a new loop would lose.)
                let sounding = slot
                    .current
                    .as_ref()
                    .is_ok_and(|voice| voice.sounding() || voice.hearing());
                if still_quiet && !sounding && slot.asked == before {
                    // From here on, what is asked to be said waits for the new loop.
                    slot.building.get_or_insert_with(Vec::new);
                    break;
                }
            }
            me.start(config).await;
        });
    }

    /// Reads a finished answer aloud (Play, Read aloud); the history is unchanged. While a loop
    /// is being built the new loop says it; with no loop, the reason Jarvis cannot speak.
    pub async fn replay(&self, reply: ReplyId) -> Result<(), String> {
        let voice = {
            let mut slot = self.slot();
            slot.asked += 1;
            if let Some(held) = slot.building.as_mut() {
                tracing::debug!(%reply, "read aloud once the voice loop is built");
                if held.len() < HELD_REPLAYS {
                    held.push(reply);
                }
                return Ok(());
            }
            slot.current.clone()?
        };
        tracing::debug!(%reply, "read aloud");
        voice.replay(reply).await;
        Ok(())
    }

    /// Play answer: reads the answer given while away aloud (when Jarvis can speak) and clears
    /// the mark.
    pub async fn acknowledge(&self) -> Result<(), crate::ServiceError> {
        let away = self.inner.service.voice_status().borrow().answered_away;
        if let Some(reply) = away {
            if let Err(problem) = self.replay(reply).await {
                tracing::debug!("the answer given while away is not read aloud: {problem}");
            }
        }
        self.inner.service.acknowledge_answer().await
    }

    /// Whether a loop runs that can open the microphone, or one is being built (it opens the
    /// microphone when it runs, as the voice status then says); else why not.
    pub fn can_listen(&self) -> Result<(), String> {
        let slot = self.slot();
        if slot.building.is_some() {
            return Ok(());
        }
        slot.current.as_ref().map(|_| ()).map_err(Clone::clone)
    }

    /// Waits, at most [`HEARING_WAIT`], until the running loop is not in the middle of someone's
    /// words.
    async fn until_not_hearing(&self) {
        let since = std::time::Instant::now();
        while self.hearing() && since.elapsed() < HEARING_WAIT {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Whether the user is saying something the running loop has not yet put to the
    /// conversation (a restart waits for it).
    pub fn hearing(&self) -> bool {
        self.slot()
            .current
            .as_ref()
            .is_ok_and(|voice| voice.hearing())
    }

    /// Why Jarvis cannot listen or speak, now and whenever it changes (`None`: the voice works).
    pub fn problems(&self) -> watch::Receiver<Option<String>> {
        self.inner.problem.subscribe()
    }

    /// How loud the microphone and Jarvis's voice are now (the newest loop's), for the orb's ring.
    pub fn levels(&self) -> watch::Receiver<Levels> {
        self.inner.levels.subscribe()
    }
}
