//! Listening: frames → utterances → (the wake word) → words → what was heard. The same
//! [`Listener`] runs behind `jarvis listen --wav` and the voice loop.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde::Serialize;

use super::alike::SoundAlike;
use super::audio::{EchoJudged, EchoPath};
use super::heard::{
    capitalised, classify, negated, stop_phrases, words, Heard, HeardContext, ECHO_LEAST_WORDS,
};
use super::stt::{Transcriber, Transcript};
use super::turn::{Turn, TurnJudge};
use super::vad::{Segment, Segmenter, SegmenterSettings};
use super::wake::WakeDetector;
use super::{audio, VoiceError, FRAME_MS};
use crate::config::{Language, ListenMode};

pub use super::vad::Utterance;

/// How many recent answers count as "its own voice".
const RECENT_ANSWERS: usize = 3;

/// One line of `jarvis listen`: what an utterance was.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UtteranceReport {
    /// The verdict.
    pub heard: Heard,
    /// What was transcribed (empty for noise: never transcribed, or a short word said over the
    /// voice that was not a stop).
    pub text: String,
    /// Where it started, ms since listening began.
    pub start_ms: u64,
    /// Where it ended.
    pub end_ms: u64,
    /// Where its last voiced frame ended (not printed; the turn benchmark measures from it).
    #[serde(skip)]
    pub last_voiced_ms: u64,
    /// How the microphone listened when it was captured: a question carries it to the model
    /// (the push-to-talk key is already up by the time the question is put).
    #[serde(skip)]
    pub mode: ListenMode,
}

/// What listening brought.
#[derive(Debug, Clone, PartialEq)]
pub enum ListenEvent {
    /// Someone began to speak (Jarvis's voice ducks). Over the voice, on a microphone the echo
    /// canceller does not yet know (the opening of the first answer it ever hears), told only
    /// once it knows and still hears someone, not the voice's echo.
    SpeechStarted,
    /// The speech ended (Jarvis's voice comes back): the last event of an utterance, after
    /// what was heard of it.
    SpeechEnded,
    /// An utterance, judged.
    Heard(UtteranceReport),
    /// The microphone went away while open (unplugged, its sound server gone), and why.
    MicrophoneLost(String),
}

/// What the listener shares with the speaking side: whether Jarvis's voice is playing, what it
/// said recently (to know its own echo), and whether a wake conversation is open.
#[derive(Clone, Default)]
pub struct Shared {
    /// The microphone's loudness now (0–1, as f32 bits), for the orb's ring.
    mic_level: Arc<std::sync::atomic::AtomicU32>,
    speaking: Arc<AtomicBool>,
    answers: Arc<Mutex<VecDeque<String>>>,
    awake: Arc<AtomicBool>,
    /// The user is in an utterance: from its first speech until the loop has taken in its end
    /// (what was heard comes before [`ListenEvent::SpeechEnded`]).
    hearing: Arc<AtomicBool>,
}

impl Shared {
    /// The listener heard a frame this loud (0–1).
    pub fn set_mic_level(&self, level: f32) {
        self.mic_level.store(level.to_bits(), Ordering::Relaxed);
    }

    /// How loud the microphone is now (0–1).
    pub fn mic_level(&self) -> f32 {
        f32::from_bits(self.mic_level.load(Ordering::Relaxed))
    }

    /// Jarvis's voice started or stopped playing.
    pub fn set_speaking(&self, speaking: bool) {
        self.speaking.store(speaking, Ordering::SeqCst);
    }

    /// Whether Jarvis's voice is playing.
    pub fn speaking(&self) -> bool {
        self.speaking.load(Ordering::SeqCst)
    }

    /// Notes text Jarvis is saying (the latest answer grows as it is spoken).
    pub fn said(&self, answer_started: bool, text: &str) {
        let mut answers = self.answers.lock().unwrap_or_else(|p| p.into_inner());
        if answer_started || answers.is_empty() {
            answers.push_back(String::new());
            while answers.len() > RECENT_ANSWERS {
                answers.pop_front();
            }
        }
        if let Some(last) = answers.back_mut() {
            if !last.is_empty() {
                last.push(' ');
            }
            last.push_str(text);
        }
    }

    fn recent_answers(&self) -> Vec<String> {
        self.answers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect()
    }

    /// Opens or closes a wake conversation.
    pub fn set_awake(&self, awake: bool) {
        self.awake.store(awake, Ordering::SeqCst);
    }

    /// Whether a wake conversation is open.
    pub fn awake(&self) -> bool {
        self.awake.load(Ordering::SeqCst)
    }

    /// An utterance began (the listener), or its end was taken in (the loop).
    pub fn set_hearing(&self, hearing: bool) {
        self.hearing.store(hearing, Ordering::SeqCst);
    }

    /// Whether the user is in an utterance whose words have not reached the loop yet: replacing
    /// the loop now would lose them.
    pub fn hearing(&self) -> bool {
        self.hearing.load(Ordering::SeqCst)
    }
}

/// Frames in, judged utterances out. Transcription runs inline: drive it from a thread of its
/// own (the voice loop does) or from a CLI.
pub struct Listener {
    mode: ListenMode,
    segmenter: Segmenter,
    transcriber: Arc<dyn Transcriber>,
    wake: Option<Box<dyn WakeDetector>>,
    wake_threshold: f32,
    shared: Shared,
    frame_index: u64,
    /// The open utterance began while Jarvis spoke.
    began_while_speaking: bool,
    /// The last moment (ms) a frame went through as it was heard because the canceller did not
    /// yet know whether Jarvis's voice comes back into the microphone (see [`EchoJudged::path`]).
    heard_as_is_ms: Option<u64>,
    /// Whether Jarvis's voice can come back in the frame being heard, as the canceller knew
    /// (see [`EchoJudged::path`]); `None` with no canceller.
    echo_now: Option<EchoPath>,
    /// The open utterance began over the voice while the canceller did not know whether the
    /// voice comes back into the microphone — the opening of the first answer it ever hears on
    /// speakers is its own echo — so its start is not yet told (nothing is ducked for it): the
    /// voiced frames in a row it has had since the canceller knows, and judged not its echo.
    /// [`DEFERRED_START_FRAMES`] of them tell it.
    start_untold: Option<usize>,
    /// The open utterance carries the wake word.
    holds_wake_word: bool,
    /// Judges whether a pause ends the turn.
    turn: TurnJudge,
    /// What the open utterance was transcribed as at its last pause, and its voiced frames then:
    /// when it ends with no voice since, that is its transcript.
    asked: Option<Asked>,
    /// The open utterance being transcribed ahead, from its first moments of quiet, so that the
    /// words are ready when the pause asks for them.
    ahead: Option<Ahead>,
    /// Transcriptions ahead whose words are no longer wanted (the person went on speaking),
    /// still running: each is waited for when the listener is let go, so that no transcription
    /// outlives it (one still running as the process exits would have whisper's state torn
    /// down under it: the suspected, never reproduced, cause of one crash at exit).
    abandoned: Vec<std::thread::JoinHandle<Result<Transcript, VoiceError>>>,
    /// Speech-to-text getting ready on threads of their own, waited for alike.
    readying: Vec<std::thread::JoinHandle<()>>,
    /// Whether words are transcribed ahead at all (off only for the benchmark's baseline).
    ahead_on: bool,
    /// Whether a start over the voice waits for the canceller to know the room (`start_untold`;
    /// off only for the benchmark's baseline).
    untold_on: bool,
    /// The language's stop phrases by their sound, for what is said over the voice (none in
    /// Chinese).
    alike: Option<SoundAlike>,
    /// The language it hears.
    language: Language,
}

/// What an open utterance was transcribed as at its last pause.
struct Asked {
    /// Its voiced frames then.
    voiced: usize,
    /// Its words.
    transcript: Transcript,
    /// The stretch of it that was transcribed (up to where the words were transcribed ahead).
    heard: Vec<i16>,
}

/// A transcription started ahead of the pause, on a thread of its own, of the open utterance
/// as it was `voiced` frames in.
struct Ahead {
    voiced: usize,
    words: std::thread::JoinHandle<Result<Transcript, VoiceError>>,
}

/// Quiet after which the open utterance is transcribed ahead, on its own thread, while the
/// listener waits for the pause: 100 ms. The pause that asks whether the turn is over comes
/// after 200 ms (300 without the end-of-turn model), and whisper takes 50–170 ms for a short
/// question, so its words are ready, or nearly, when asked for. The pause always judges the
/// audio up to this point, transcribed ahead or not, so the verdict does not depend on how fast
/// the machine is. (Whisper hears a clip followed by silence, as it was trained: cut 100 ms
/// after the last voiced frame rather than 200, the questions of the turn and trust benchmarks
/// were judged alike within a verdict or two.)
const AHEAD_QUIET: usize = 5;

/// An utterance whose onset was heard this long before the wake word's detector fires holds the
/// phrase; one begun later is what the person said after it (the detector fires within a few
/// hundred ms of the phrase's end). Counted from the onset, not the utterance's start, whose
/// pre-roll is longer while Jarvis speaks.
const WAKE_PHRASE_INSIDE_MS: u64 = 220;

/// Voiced frames in a row, heard once the canceller knows whether the voice comes back, that
/// tell the start of an utterance that began over the voice before it knew (60 ms): someone is
/// speaking, not the voice's echo, and the voice is ducked for them.
const DEFERRED_START_FRAMES: usize = 3;

/// Quiet that asks whether the person has finished when the end-of-turn model hears the voice:
/// 200 ms, what it was trained on.
const PAUSE_WITH_MODEL: usize = 10;

impl Listener {
    /// A listener for `mode`; wake mode needs a detector.
    pub fn new(
        mode: ListenMode,
        transcriber: Arc<dyn Transcriber>,
        wake: Option<Box<dyn WakeDetector>>,
        wake_threshold: f32,
        shared: Shared,
    ) -> Listener {
        let settings = match mode {
            ListenMode::PushToTalk => SegmenterSettings::push_to_talk(),
            _ => SegmenterSettings::default(),
        };
        Listener {
            mode,
            segmenter: Segmenter::new(settings),
            transcriber,
            wake,
            wake_threshold,
            shared,
            frame_index: 0,
            began_while_speaking: false,
            heard_as_is_ms: None,
            echo_now: None,
            start_untold: None,
            holds_wake_word: false,
            turn: TurnJudge::default(),
            asked: None,
            ahead: None,
            abandoned: Vec::new(),
            readying: Vec::new(),
            ahead_on: true,
            untold_on: true,
            alike: SoundAlike::new(Language::En),
            language: Language::En,
        }
    }

    /// Hears stops said over the voice by their sound in `language` (English unless told).
    pub fn with_language(mut self, language: Language) -> Listener {
        self.alike = SoundAlike::new(language);
        self.language = language;
        self
    }

    /// Cuts utterances as `settings` say (the turn benchmark's baseline: a fixed hangover).
    pub fn with_settings(mut self, settings: SegmenterSettings) -> Listener {
        self.segmenter = Segmenter::new(settings);
        self
    }

    /// Transcribes a pause's words only once the pause asks for them, of all the audio up to it,
    /// as before words were transcribed ahead (the benchmark's baseline).
    pub fn without_transcribing_ahead(mut self) -> Listener {
        self.ahead_on = false;
        self
    }

    /// Tells every start at once, before the canceller knows whether the voice comes back too, as
    /// before such a start waited (the benchmark's baseline).
    pub fn telling_every_start(mut self) -> Listener {
        self.untold_on = false;
        self
    }

    /// Judges pauses with `turn`: with its model, a pause asks after 200 ms of quiet rather than
    /// 300 (the words alone need the longer quiet to be safe).
    pub fn with_turn(mut self, turn: TurnJudge) -> Listener {
        if turn.hears_the_voice() && self.mode != ListenMode::PushToTalk {
            self.segmenter = Segmenter::new(SegmenterSettings {
                pause_frames: Some(PAUSE_WITH_MODEL),
                ..SegmenterSettings::default()
            });
        }
        self.turn = turn;
        self
    }

    /// Feeds one 20 ms frame.
    pub fn push(&mut self, frame: &[i16]) -> Result<Vec<ListenEvent>, VoiceError> {
        self.push_judged(frame, None)
    }

    /// Feeds one 20 ms frame from behind the echo canceller, with what the canceller told of it
    /// (see [`EchoJudged`]): its residue never counts as someone speaking, and an utterance keeps
    /// the linear filter's output, where a person speaking over the voice is whole.
    pub fn push_judged(
        &mut self,
        frame: &[i16],
        judged: Option<&EchoJudged>,
    ) -> Result<Vec<ListenEvent>, VoiceError> {
        let now_ms = self.frame_index * FRAME_MS;
        // A level meter falls back slowly and jumps up at once, as a person's eye expects.
        let level = audio::loudness_i16(frame);
        let shown = self.shared.mic_level();
        self.shared.set_mic_level(if level >= shown {
            level
        } else {
            shown * 0.8 + level * 0.2
        });
        self.frame_index += 1;
        self.echo_now = judged.map(|j| j.path);
        if self.echo_unknown() {
            self.heard_as_is_ms = Some(now_ms);
        }
        let mut out = Vec::new();
        if self.mode == ListenMode::Wake && !self.shared.awake() {
            if let Some(wake) = &mut self.wake {
                let score = wake.feed(frame)?;
                if score >= self.wake_threshold {
                    tracing::debug!(score, "wake word heard");
                    wake.reset();
                    self.shared.set_awake(true);
                    self.prepare_transcriber();
                    // The phrase is in the open utterance only if that began well before the
                    // detector fired: one begun just now (after a short pause that ended the
                    // utterance "Hey Jarvis" was) is what the person says next, whole.
                    self.holds_wake_word = self
                        .segmenter
                        .open_onset_ms()
                        .is_some_and(|onset| onset + WAKE_PHRASE_INSIDE_MS <= now_ms);
                    out.push(ListenEvent::Heard(UtteranceReport {
                        heard: Heard::Wake,
                        text: String::new(),
                        start_ms: now_ms.saturating_sub(1280),
                        end_ms: now_ms + FRAME_MS,
                        last_voiced_ms: now_ms + FRAME_MS,
                        mode: self.mode,
                    }));
                }
            }
        }
        let strict = self.shared.speaking();
        for segment in self.segmenter.push_judged(frame, judged, strict) {
            out.extend(self.segment(segment)?);
        }
        self.tell_a_deferred_start(judged, &mut out);
        self.transcribe_ahead();
        Ok(out)
    }

    /// Whether the frame being heard went through as it was heard, the canceller not knowing
    /// yet whether the voice comes back.
    fn echo_unknown(&self) -> bool {
        self.echo_now == Some(EchoPath::Unknown)
    }

    /// Tells the start of an utterance that began over the voice on a path not yet known (see
    /// `start_untold`) once the canceller knows it and someone is still heard: voiced frames in
    /// a row that are not the voice's residue — the canceller's output with the echo taken out,
    /// or what is heard as it is where no echo comes back (headphones). Never after its end.
    fn tell_a_deferred_start(&mut self, judged: Option<&EchoJudged>, out: &mut Vec<ListenEvent>) {
        let Some(run) = self.start_untold else {
            return;
        };
        if !self.segmenter.in_speech() {
            self.start_untold = None;
            return;
        }
        let voiced = self
            .segmenter
            .open_quiet()
            .is_some_and(|(_, quiet)| quiet == 0);
        let someone = !self.echo_unknown() && voiced && !judged.is_some_and(|j| j.residue);
        let run = if someone { run + 1 } else { 0 };
        if run >= DEFERRED_START_FRAMES {
            self.start_untold = None;
            out.push(ListenEvent::SpeechStarted);
        } else {
            self.start_untold = Some(run);
        }
    }

    /// Starts transcribing the open utterance after its first moments of quiet, where a pause
    /// will ask for its words (not while the wake word is awaited: that speech is not
    /// transcribed). A transcription still running for an earlier quiet is left to finish
    /// (whisper does one at a time), kept to be waited for; the pause uses the one made for its
    /// own voice.
    fn transcribe_ahead(&mut self) {
        if !self.ahead_on {
            return;
        }
        let Some(pause) = self.segmenter.settings().pause_frames else {
            return;
        };
        if self.mode == ListenMode::Wake && !self.shared.awake() {
            return;
        }
        let Some((voiced, quiet)) = self.segmenter.open_quiet() else {
            return;
        };
        if quiet != ahead_quiet(pause) || voiced < self.segmenter.settings().min_voiced_frames {
            return;
        }
        let Some(samples) = self.segmenter.open_samples().map(audio::to_f32) else {
            return;
        };
        self.abandon_ahead();
        let transcriber = self.transcriber.clone();
        match std::thread::Builder::new()
            .name("jarvis-words-ahead".into())
            .spawn(move || transcriber.transcribe(&samples))
        {
            Ok(words) => self.ahead = Some(Ahead { voiced, words }),
            Err(err) => tracing::debug!(%err, "no thread to transcribe ahead; the pause will"),
        }
    }

    /// Hears a whole recording (16 kHz) and closes it: every utterance's report, in order.
    pub fn hear_all(&mut self, samples: &[i16]) -> Result<Vec<UtteranceReport>, VoiceError> {
        let mut events = Vec::new();
        for frame in audio::frames_of(samples) {
            events.extend(self.push(&frame)?);
        }
        events.extend(self.finish()?);
        Ok(events
            .into_iter()
            .filter_map(|event| match event {
                ListenEvent::Heard(report) => Some(report),
                _ => None,
            })
            .collect())
    }

    /// The input ended, or push to talk was released: closes an open utterance.
    pub fn finish(&mut self) -> Result<Vec<ListenEvent>, VoiceError> {
        let mut out = Vec::new();
        for segment in self.segmenter.finish() {
            out.extend(self.segment(segment)?);
        }
        Ok(out)
    }

    fn segment(&mut self, segment: Segment) -> Result<Vec<ListenEvent>, VoiceError> {
        Ok(match segment {
            Segment::SpeechStarted { .. } => {
                self.began_while_speaking = self.shared.speaking();
                self.asked = None;
                self.abandon_ahead();
                // (Hearing holds a restart of the loop back: a maybe-person is waited for too.)
                self.shared.set_hearing(true);
                if self.mode != ListenMode::Wake || self.shared.awake() {
                    self.prepare_transcriber();
                }
                // (Held to talk, it is the person: told at once, and never taken for the echo.)
                if self.untold_on
                    && self.mode != ListenMode::PushToTalk
                    && self.began_while_speaking
                    && self.echo_unknown()
                {
                    self.start_untold = Some(0);
                    Vec::new()
                } else {
                    self.start_untold = None;
                    vec![ListenEvent::SpeechStarted]
                }
            }
            Segment::Paused { voiced_frames } => {
                if !self.turn_ended(voiced_frames) {
                    return Ok(Vec::new());
                }
                let mut out = Vec::new();
                for segment in self.segmenter.finish() {
                    out.extend(self.segment(segment)?);
                }
                out
            }
            Segment::Noise {
                start_ms, end_ms, ..
            } => {
                self.holds_wake_word = false;
                vec![
                    ListenEvent::Heard(UtteranceReport {
                        heard: Heard::Noise,
                        text: String::new(),
                        start_ms,
                        end_ms,
                        last_voiced_ms: end_ms,
                        mode: self.mode,
                    }),
                    ListenEvent::SpeechEnded,
                ]
            }
            Segment::Brief(utterance) => self.ended(utterance, true)?,
            Segment::Utterance(utterance) => self.ended(utterance, false)?,
        })
    }

    /// An utterance that ended: what it was (see [`Listener::judge`]), and the end of speech.
    ///
    /// One that began over the voice before the canceller knew whether the voice comes back (the
    /// opening of the first answer it hears on a microphone it does not remember), and ended
    /// with the canceller knowing that it does and having heard no one in it since (its start
    /// never told), was the voice's own echo, whatever whisper writes of it: the opening came
    /// back, and whisper wrote it too far from the answer's words for the echo filter ("The dice
    /// will totter what's built for the world." for "The Eiffel Tower was built for the world's
    /// fair") — asked as a question, in 36 of 50 first answers of the echo benchmark. The cost:
    /// a person who speaks over that first second and a half is not asked either — their speech
    /// keeps the canceller from knowing until they stop, and whisper hears them mixed with the
    /// opening. One that ended before the canceller knew (the longest utterance cut) is judged
    /// as any other; so is one with the wake word in it.
    fn ended(&mut self, utterance: Utterance, brief: bool) -> Result<Vec<ListenEvent>, VoiceError> {
        let untold = self.start_untold.take().is_some();
        // (Waiting for the wake word, nothing is judged; and words with the wake word in them
        // are the person's.)
        let its_echo = untold
            && self.echo_now == Some(EchoPath::Present)
            && !self.holds_wake_word
            && (self.mode != ListenMode::Wake || self.shared.awake());
        let heard = if its_echo {
            tracing::debug!(
                start_ms = utterance.start_ms,
                "heard before the canceller knew the voice comes back, and no one since: its echo"
            );
            self.asked = None;
            Some(UtteranceReport {
                heard: Heard::Echo,
                text: String::new(),
                start_ms: utterance.start_ms,
                end_ms: utterance.end_ms,
                last_voiced_ms: utterance.last_voiced_ms,
                mode: self.mode,
            })
        } else {
            if untold {
                tracing::debug!(
                    known = !self.echo_unknown(),
                    "heard before the canceller knew the room, judged as it is"
                );
            }
            self.judge(utterance, brief)?
        };
        let mut out: Vec<ListenEvent> = heard.map(ListenEvent::Heard).into_iter().collect();
        out.push(ListenEvent::SpeechEnded);
        Ok(out)
    }

    /// What `utterance` was. A `brief` one (too little voice for a question, opened while
    /// Jarvis's voice played: see [`Segment::Brief`]) is kept only as a stop ("Stop." is a short
    /// word, which the canceller holds back to a few voiced frames); anything else of it is
    /// what a noise would have been ("Um.", a cough), whatever whisper wrote.
    fn judge(
        &mut self,
        utterance: Utterance,
        brief: bool,
    ) -> Result<Option<UtteranceReport>, VoiceError> {
        let holds_wake_word = std::mem::take(&mut self.holds_wake_word);
        let mode = self.mode;
        let report = |heard, text: String| UtteranceReport {
            heard,
            text,
            start_ms: utterance.start_ms,
            end_ms: utterance.end_ms,
            last_voiced_ms: utterance.last_voiced_ms,
            mode,
        };
        if self.mode == ListenMode::Wake && !self.shared.awake() {
            // Waiting for the wake word: other speech is not for Jarvis, and is not transcribed.
            return Ok(None);
        }
        // (What was transcribed ahead is a stretch of its own; anything else is the utterance,
        // borrowed.)
        let (transcript, heard_ahead) = match self.asked.take() {
            Some(asked) if asked.voiced == utterance.voiced_frames => {
                (asked.transcript, Some(asked.heard))
            }
            _ => (
                self.transcriber
                    .transcribe(&audio::to_f32(&utterance.samples))?,
                None,
            ),
        };
        let heard_samples = heard_ahead.as_deref().unwrap_or(&utterance.samples);
        let mut text = transcript.text;
        if holds_wake_word {
            text = after_wake_word(&text);
            if text.is_empty() {
                return Ok(None);
            }
        }
        let answers = self.shared.recent_answers();
        let context = HeardContext {
            began_while_speaking: self.began_while_speaking,
            recent_answers: &answers,
            wake_conversation: self.mode == ListenMode::Wake && self.shared.awake(),
        };
        let mut heard = classify(&text, &context);
        if heard == Heard::Question
            && self.began_while_speaking
            && utterance.voiced_frames <= STOP_AT_MOST_VOICED
            && self.stop_by_its_sound(&text, &utterance, &answers)
        {
            heard = Heard::Stop;
        }
        let mut odds = None;
        let mut gated = None;
        if heard == Heard::Question && self.began_while_speaking && !holds_wake_word {
            odds = self.weighed(&utterance, heard_samples, &text, &answers);
            if let Some(first) = &odds {
                gated = self.weighed_without_the_voice(&utterance, first, &text, &answers, brief);
            }
            let stop = odds.as_ref().and_then(|first| {
                first.stop().or_else(|| {
                    // Gating takes out a person's "don't" as it does a first sound, and only
                    // takes away: never where an "um" or a "don't stop" was likelier as heard.
                    (first.other_p < first.stop_p)
                        .then(|| gated.as_ref().and_then(Odds::stop))
                        .flatten()
                })
            });
            if let Some(stop) = stop {
                (heard, text) = (Heard::Stop, stop);
            }
        }
        if heard != Heard::Stop && self.began_while_speaking {
            if let Some(stop) =
                self.stop_without_the_voice(&utterance, &text, holds_wake_word, &context)?
            {
                (heard, text) = (Heard::Stop, stop);
            }
        }
        let filler = odds.as_ref().is_some_and(|first| {
            first.filler()
                || (first.hesitation_p >= HESITATION_LEAST_LOG_P
                    && gated.as_ref().is_some_and(Odds::filler))
        });
        if heard == Heard::Question && filler {
            // An "uh" or a "hmm" over the voice that whisper wrote as words ("I'm sorry.",
            // "Thank you.", "here."): it finds the hesitation about as likely, as heard, or
            // likely enough as heard and about as likely with the voice's residue gated out.
            // (Gated alone is not enough: gating takes a person's words away with the residue,
            // and "Who wrote it?" written "The loaded" came out likelier an "um" than that.)
            tracing::debug!("a short utterance over the voice weighed as a hesitation: filler");
            heard = Heard::Filler;
        }
        if matches!(heard, Heard::Question | Heard::Stop | Heard::Goodbye)
            && self.began_while_speaking
            && self
                .heard_as_is_ms
                .is_some_and(|ms| ms >= utterance.start_ms)
            && words(&text).len() < ECHO_LEAST_WORDS
            && spoken_by_the_voice(&text, &answers)
        {
            // Heard while the canceller did not yet know whether the voice comes back (the
            // opening of the first answer it plays on a microphone), and only words of the answer
            // ("Hello." come back as "Hello?"), too few for the echo filter to judge: its
            // own voice, which would be asked as a question, or stop itself. (Longer, it is
            // the echo filter's to judge: a person's question on the answer's subject, said
            // over its first second — "What is the capital of Germany?" over "Paris is the
            // capital of France." — shares most of its words with it.)
            tracing::debug!("words of its answer heard before the canceller knew the room: echo");
            heard = Heard::Echo;
        }
        if heard == Heard::Stop && brief && spoken_by_the_voice(&text, &answers) {
            // Too short for the echo filter (3 words): a word of the answer that came through
            // ("…press cancel"), not the person.
            tracing::debug!("a brief stop over the voice is a word of its answer: noise");
            heard = Heard::Noise;
        }
        if brief && heard != Heard::Stop {
            tracing::debug!(
                ?heard,
                "a brief utterance over the voice, not a stop: noise"
            );
            return Ok(Some(UtteranceReport {
                last_voiced_ms: utterance.end_ms,
                ..report(Heard::Noise, String::new())
            }));
        }
        if heard == Heard::Goodbye {
            // The wake conversation is over as soon as it is said: what follows needs the wake
            // word again (the reply in progress is still answered).
            self.shared.set_awake(false);
        }
        Ok(Some(report(heard, text)))
    }
}

/// Voice enough for the longest stop phrase ("okay, stop, Jarvis", "that is enough") said
/// slowly: 1.5 s. A longer utterance over the voice is a question, and is heard once.
const STOP_AT_MOST_VOICED: usize = 75;

/// Words whisper writes for a short stop it mishears: at most two ("Let's start.", "Why not?").
const MISHEARD_AT_MOST_WORDS: usize = 2;

/// The most words of a transcript whose clip is weighed for a stop (see
/// [`Listener::weighed`]): "It's time, it's a bit" was "Stop it.".
const WEIGHED_AT_MOST_WORDS: usize = 5;

/// The hesitations a clip weighed for a stop is also weighed as: the stop must be far likelier
/// than each, and a clip likely enough to be one is a filler (see [`Odds::filler`]). (An
/// English subset of `heard::FILLERS`, kept apart: the thresholds below were measured on these
/// eight, and a longer list shifts the likeliest hesitation.)
const WEIGHED_HESITATIONS: &[&str] = &["uh", "um", "hmm", "er", "ah", "oh", "eh", "mm"];

/// The stops said with a no a clip weighed for a stop is also weighed as, each of which the stop
/// must be far likelier than. (Over the voice the canceller holds back a word's first sound:
/// "Don't stop." was written "Go on to time.", and "Stop." itself came close to what was
/// written; "Don't stop." was far likelier.)
const WEIGHED_NEGATIONS: &[&str] = &["no", "don't stop", "don't cancel", "don't cancel it"];

/// How likely whisper must find a hesitation ("uh", "hmm", …) as the whole of a short clip said
/// over the voice, which it wrote as words, for the clip to be taken for one (nats). The
/// hesitations it had written as questions ("I'm sorry.", "Thank you.", "This is her.") came
/// out at −2.4 to −5.0; a person's short words that are no hesitation ("Go on.", "Wait.",
/// "Okay.", "Why?", …), −6.3 and below (`cargo bench --bench echo`, BENCHMARKS.md).
const HESITATION_LEAST_LOG_P: f32 = -6.0;

/// How much likelier than the hesitation what whisper wrote may be, for the clip to be taken
/// for one (nats): the hesitations it had written as questions were at most 0.8 likelier than
/// what it wrote; a person's short words, 1.5 likelier and more (5 and more but for "Go on!").
const WRITTEN_AT_MOST_LIKELIER_THAN_HESITATION: f32 = 1.0;

/// How likely whisper must find a stop phrase as the whole of a short clip said over the voice
/// (log-probability, nats): about 1 in 400. Stops said over the voice came out at −0.3 to −5.6,
/// whatever whisper wrote; the words of a person saying something else ("Okay.", "Thank you.",
/// "Don't stop.", "Wait."), −7.9 and below (`cargo bench --bench echo`, BENCHMARKS.md).
const STOP_LEAST_LOG_P: f32 = -6.0;

/// How much likelier than the stop what whisper wrote may be: 3 nats (20 times). Stops it wrote
/// as other words ("It's time.", "It was time.", "the top.") were at most 2.8 likelier than the
/// stop; what a person said that was no stop, 4.3 and more.
const WRITTEN_AT_MOST_LIKELIER: f32 = 3.0;

/// How much likelier than any of [`WEIGHED_HESITATIONS`] and [`WEIGHED_NEGATIONS`] a stop must
/// be: 3 nats. Stops were 4 or more likelier than a hesitation and 6 or more than "don't stop";
/// "Um.", "Er." and the voice's own residue were −1.9 and less, and "Don't stop." written "Go
/// on to time." −1.3.
const NOT_STOPS_AT_LEAST_LESS_LIKELY: f32 = 3.0;

/// How likely whisper found a short utterance said over the voice to be each of a few things
/// (log-probabilities, nats; see [`Listener::weighed`]).
#[derive(Debug, Clone, PartialEq)]
struct Odds {
    /// The likeliest stop phrase.
    stop: String,
    /// How likely that stop is.
    stop_p: f32,
    /// How likely what whisper wrote is.
    written_p: f32,
    /// The likeliest of what it would be if it were no stop ([`WEIGHED_HESITATIONS`],
    /// [`WEIGHED_NEGATIONS`]).
    other_p: f32,
    /// The likeliest hesitation.
    hesitation_p: f32,
}

impl Odds {
    /// The stop it was, where whisper finds the stop likely enough ([`STOP_LEAST_LOG_P`]), not
    /// much less likely than what it wrote ([`WRITTEN_AT_MOST_LIKELIER`]), and far likelier than
    /// any "um" or "don't stop" ([`NOT_STOPS_AT_LEAST_LESS_LIKELY`]).
    fn stop(&self) -> Option<String> {
        let likely = self.stop_p >= STOP_LEAST_LOG_P
            && self.written_p - self.stop_p <= WRITTEN_AT_MOST_LIKELIER
            && self.stop_p - self.other_p >= NOT_STOPS_AT_LEAST_LESS_LIKELY;
        likely.then(|| format!("{}.", capitalised(&self.stop)))
    }

    /// Whether it was a hesitation whisper wrote as words: one it finds likely enough
    /// ([`HESITATION_LEAST_LOG_P`]) and about as likely as what it wrote
    /// ([`WRITTEN_AT_MOST_LIKELIER_THAN_HESITATION`]).
    fn filler(&self) -> bool {
        self.hesitation_p >= HESITATION_LEAST_LOG_P
            && self.written_p - self.hesitation_p <= WRITTEN_AT_MOST_LIKELIER_THAN_HESITATION
    }
}

/// Whether every word of `text` is in one of the answers Jarvis is speaking or just spoke.
fn spoken_by_the_voice(text: &str, answers: &[String]) -> bool {
    let said = words(text);
    !said.is_empty()
        && answers.iter().any(|answer| {
            let answer = words(answer);
            said.iter().all(|w| answer.contains(w))
        })
}

impl Listener {
    /// A stop said over Jarvis's voice that whisper did not hear as one in what the linear
    /// filter kept — the voice's residue around a short word turns it into others ("Stop." as
    /// "Let's start.", "Quiet." as "Why not?") — heard again with that residue gated out frame
    /// by frame: its words, if they are a stop.
    ///
    /// Only where the first hearing could be a stop misheard: a short utterance (a stop is a
    /// few words) written as one or two words, none of them a word of the stop heard the
    /// second time. Gating takes out what overlapped the voice, which is a person's first
    /// words too: "Don't stop." or "No, don't cancel it." must not come back as "Stop." or
    /// "Cancel it.". And not where every word of it is in the answer being spoken: a word of
    /// the voice that came through is no one's stop.
    fn stop_without_the_voice(
        &self,
        utterance: &Utterance,
        first: &str,
        holds_wake_word: bool,
        context: &HeardContext<'_>,
    ) -> Result<Option<String>, VoiceError> {
        let first = words(first);
        if utterance.voiced_frames > STOP_AT_MOST_VOICED || first.len() > MISHEARD_AT_MOST_WORDS {
            return Ok(None);
        }
        let Some(samples) = utterance.without_the_voice() else {
            return Ok(None);
        };
        let mut text = self.transcriber.transcribe(&audio::to_f32(&samples))?.text;
        if holds_wake_word {
            text = after_wake_word(&text);
        }
        // (Not by its sound: gating takes out a person's first sounds as the canceller does, so
        // "Don't stop." heard again as "Top." would be one.)
        let stop = classify(&text, context) == Heard::Stop
            && !words(&text).iter().any(|w| first.contains(w))
            && !spoken_by_the_voice(&text, context.recent_answers);
        Ok(stop.then_some(text))
    }

    /// How likely whisper finds each stop phrase, each hesitation and each "don't stop" as the
    /// whole of a short utterance said over the voice, and what it wrote (see
    /// [`Transcriber::weigh`] and [`Odds`]): the voice's residue before a word and the
    /// canceller's hold on its first sound make "Stop." into "It's time.", "the top." or "It was
    /// time.", and an "uh" into "I'm sorry.".
    ///
    /// Only for a short utterance (a stop's voice, a few words written) the canceller was taking
    /// the voice out of, in English (the only language measured); never where what was written
    /// says no ("Don't stop.") or is all words of the answer being spoken (a word of the voice
    /// that came through); a stop the answer holds is not weighed. Blocking: the clip is encoded
    /// once more and each phrase decoded (~150 ms and ~200 ms with tiny.en on two threads), and
    /// where the utterance as heard may be a misheard stop or murmur, once more gated (see
    /// [`Listener::weighed_without_the_voice`]); a transcriber that cannot weigh weighs
    /// nothing.
    fn weighed(
        &self,
        utterance: &Utterance,
        heard: &[i16],
        text: &str,
        answers: &[String],
    ) -> Option<Odds> {
        let said = words(text);
        if self.language.resolved() != Language::En
            || !utterance.held_back()
            || said.is_empty()
            || said.len() > WEIGHED_AT_MOST_WORDS
            || utterance.voiced_frames > STOP_AT_MOST_VOICED
            || negated(&said)
            || spoken_by_the_voice(text, answers)
        {
            return None;
        }
        // Each stop as whisper writes one said alone, and none the voice is saying ("…press
        // stop…" come through is its own).
        let stops: Vec<String> = stop_phrases(Language::En)
            .iter()
            .filter(|phrase| !spoken_by_the_voice(phrase, answers))
            .flat_map(|phrase| [format!("{phrase}."), format!("{phrase}!")])
            .collect();
        let mut phrases: Vec<&str> = stops.iter().map(String::as_str).collect();
        phrases.extend_from_slice(WEIGHED_HESITATIONS);
        phrases.extend_from_slice(WEIGHED_NEGATIONS);
        phrases.push(text.trim());
        let weighed = match self.transcriber.weigh(&audio::to_f32(heard), &phrases) {
            Ok(Some(weighed)) if weighed.len() == phrases.len() => weighed,
            Ok(_) => return None,
            Err(err) => {
                tracing::debug!(%err, "could not weigh a short utterance for a stop");
                return None;
            }
        };
        let (stop, stop_p) = stops
            .iter()
            .zip(&weighed)
            .map(|(phrase, p)| (phrase.trim_end_matches(['.', '!']), *p))
            .max_by(|a, b| a.1.total_cmp(&b.1))?;
        let best = |ps: &[f32]| ps.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let hesitations = &weighed[stops.len()..stops.len() + WEIGHED_HESITATIONS.len()];
        let negations = &weighed[stops.len() + hesitations.len()..phrases.len() - 1];
        let hesitation_p = best(hesitations);
        let odds = Odds {
            stop: stop.to_string(),
            stop_p,
            written_p: weighed[phrases.len() - 1],
            other_p: hesitation_p.max(best(negations)),
            hesitation_p,
        };
        tracing::debug!(
            stop,
            odds.stop_p,
            odds.written_p,
            odds.other_p,
            odds.hesitation_p,
            "a short utterance over the voice weighed"
        );
        Some(odds)
    }

    /// A short utterance over the voice that its weighing as heard (`first`) found neither a stop
    /// nor a filler, but that may be a misheard one, weighed again with the voice's residue
    /// gated out frame by frame, as its second hearing is ([`Listener::stop_without_the_voice`]):
    /// in the loop's room a "Stop." written "it's time" weighed its likeliest stop 5 nats less
    /// likely than that as heard, and far likelier than anything else gated.
    ///
    /// Only for one or two words written (a stop or a murmur whisper misheard: "It's time.",
    /// "here."); the caller takes a stop from it only where nothing that is no stop was likelier
    /// as heard, since gating takes out a person's "don't" as it does a first sound, and a
    /// hesitation only where one was likely enough as heard (see `Listener::judge`). Not weighed
    /// where nothing could be taken from it: no stop may be, and the hesitation was unlikely as
    /// heard or the utterance is `brief` (one that is no stop is noise, a filler or not).
    fn weighed_without_the_voice(
        &self,
        utterance: &Utterance,
        first: &Odds,
        text: &str,
        answers: &[String],
        brief: bool,
    ) -> Option<Odds> {
        let nothing_to_take =
            first.other_p >= first.stop_p && (brief || first.hesitation_p < HESITATION_LEAST_LOG_P);
        if first.stop().is_some()
            || first.filler()
            || nothing_to_take
            || words(text).len() > MISHEARD_AT_MOST_WORDS
        {
            return None;
        }
        let gated = utterance.without_the_voice()?;
        let odds = self.weighed(utterance, &gated, text, answers);
        tracing::debug!(
            stop = odds.as_ref().and_then(Odds::stop).is_some(),
            filler = odds.as_ref().is_some_and(Odds::filler),
            "the short utterance weighed again without the voice's residue"
        );
        odds
    }

    /// Whether `text`, said over the voice as `utterance`, sounds like a stop whisper wrote as
    /// other words (see [`SoundAlike`]): a first sound lost only where the canceller was at
    /// work on it, and never words of the answer being spoken, which came through ("…at the
    /// top").
    fn stop_by_its_sound(&self, text: &str, utterance: &Utterance, answers: &[String]) -> bool {
        if spoken_by_the_voice(text, answers) {
            return false;
        }
        let Some(stop) = self
            .alike
            .as_ref()
            .and_then(|alike| alike.stop(text, utterance.held_back(), answers))
        else {
            return false;
        };
        tracing::debug!(stop, "a stop said over the voice, heard by its sound");
        true
    }

    /// The words being transcribed ahead are no longer wanted: the transcription runs on (whisper
    /// cannot be interrupted) and is kept to be waited for; those that ended are let go.
    fn abandon_ahead(&mut self) {
        self.abandoned.retain(|words| !words.is_finished());
        if let Some(ahead) = self.ahead.take() {
            self.abandoned.push(ahead.words);
        }
    }

    /// An utterance whose words will be wanted has begun, or the wake word opened a
    /// conversation: speech-to-text makes again the working state it let go of while the voice
    /// was quiet (whisper: a few milliseconds), on a thread of its own while the person speaks.
    fn prepare_transcriber(&mut self) {
        let transcriber = self.transcriber.clone();
        let spawned = std::thread::Builder::new()
            .name("jarvis-words-ready".into())
            .spawn(move || {
                if let Err(err) = transcriber.prepare() {
                    tracing::debug!(%err, "speech-to-text could not get ready ahead");
                }
            });
        match spawned {
            Ok(readying) => {
                self.readying.retain(|r| !r.is_finished());
                self.readying.push(readying);
            }
            Err(err) => {
                tracing::debug!(%err, "no thread to ready speech-to-text; its first words will")
            }
        }
    }

    /// Whether the person who paused in the open utterance has finished: what was said so far is
    /// transcribed (kept: if the utterance ends with no more voice, that is its transcript) and
    /// judged. Speech while the wake word is awaited ends at the pause as it always did (noise
    /// does in the segmenter); a transcription that fails ends the turn too (the utterance is
    /// transcribed again as it closes, and that failure is reported).
    fn turn_ended(&mut self, voiced_frames: usize) -> bool {
        if self.mode == ListenMode::Wake && !self.shared.awake() {
            return true;
        }
        let Some(samples) = self.segmenter.open_samples().map(<[i16]>::to_vec) else {
            return true;
        };
        let (transcript, heard) = match self.words_at_pause(voiced_frames, &samples) {
            Ok(transcript) => transcript,
            Err(err) => {
                tracing::debug!(%err, "a pause could not be transcribed; it ends the turn");
                return true;
            }
        };
        let judged = if self.holds_wake_word {
            after_wake_word(&transcript.text)
        } else {
            transcript.text.clone()
        };
        let turn = self.turn.judge(&samples, &judged, transcript.last_word_p);
        tracing::debug!(?turn, voiced_frames, "a pause judged");
        self.asked = Some(Asked {
            voiced: voiced_frames,
            transcript,
            heard: samples[..heard].to_vec(),
        });
        turn == Turn::Complete
    }

    /// The words of the open utterance (`samples`, `voiced_frames` in) at a pause: those
    /// transcribed ahead for this very voice, or else the same stretch — up to the point where
    /// they would have been started — transcribed now; and how many of the samples they are of.
    fn words_at_pause(
        &mut self,
        voiced_frames: usize,
        samples: &[i16],
    ) -> Result<(Transcript, usize), VoiceError> {
        let pause = self.segmenter.settings().pause_frames.unwrap_or(0);
        let later = pause.saturating_sub(ahead_quiet(pause));
        let kept = if self.ahead_on {
            samples.len().saturating_sub(later * super::FRAME)
        } else {
            samples.len()
        };
        if let Some(ahead) = self.ahead.take() {
            if ahead.voiced == voiced_frames {
                match ahead.words.join() {
                    Ok(words) => return words.map(|words| (words, kept)),
                    Err(_) => {
                        tracing::warn!("transcribing ahead failed; transcribing at the pause")
                    }
                }
            } else {
                self.abandoned.push(ahead.words);
            }
        }
        self.transcriber
            .transcribe(&audio::to_f32(&samples[..kept]))
            .map(|words| (words, kept))
    }
}

impl Drop for Listener {
    /// Waits for the transcriptions it started ahead (at most one whisper call each, a few
    /// hundred milliseconds) and for speech-to-text getting ready: none outlives the listener,
    /// nor runs on as the process exits.
    fn drop(&mut self) {
        self.abandon_ahead();
        for words in self.abandoned.drain(..) {
            let _ = words.join();
        }
        for readying in self.readying.drain(..) {
            let _ = readying.join();
        }
    }
}

/// The quiet after which words are transcribed ahead of a pause of `pause` frames.
fn ahead_quiet(pause: usize) -> usize {
    AHEAD_QUIET.min(pause.saturating_sub(1))
}

/// What was said after "Hey Jarvis" in the same breath. The name is looked for word by word, so
/// the slice is always taken at a word boundary of the original text (case folding can change a
/// word's length in bytes: "İ" lowercases to two characters).
pub fn after_wake_word(text: &str) -> String {
    for word in text.split_whitespace() {
        let folded: String = word.chars().flat_map(char::to_lowercase).collect();
        if ["jarvis", "travis", "jervis", "service"]
            .iter()
            .any(|name| folded.contains(name))
        {
            // `word` is a slice of `text`: its end is a char boundary there.
            let end = word.as_ptr() as usize - text.as_ptr() as usize + word.len();
            let rest = text[end..].trim_start_matches(|c: char| !c.is_alphanumeric());
            return if words(rest).is_empty() {
                String::new()
            } else {
                rest.to_string()
            };
        }
    }
    // The phrase was misheard beyond recognition: drop the first two words.
    let all: Vec<&str> = text.split_whitespace().collect();
    all.get(2..).map(|w| w.join(" ")).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_words_after_the_wake_word_are_the_question() {
        assert_eq!(super::after_wake_word("Hey Jarvis."), "");
        assert_eq!(
            super::after_wake_word("Hey, Jarvis, what time is it?"),
            "what time is it?"
        );
        assert_eq!(super::after_wake_word("Hey Jarvis, İstanbul?"), "İstanbul?");
        // Case folding that changes a word's length before the name (it panicked once).
        assert_eq!(super::after_wake_word("İ Jarvis"), "");
        assert_eq!(super::after_wake_word("İİİ JARVIS what now"), "what now");
    }

    proptest::proptest! {
        #[test]
        fn after_wake_word_never_panics_and_returns_a_tail_of_the_text(text in "\\PC*") {
            let rest = super::after_wake_word(&text);
            let words: Vec<&str> = text.split_whitespace().collect();
            proptest::prop_assert!(
                text.contains(rest.as_str()) || rest == words.get(2..).map(|w| w.join(" ")).unwrap_or_default()
            );
        }

        #[test]
        fn after_wake_word_never_panics_around_the_name(
            before in "\\PC{0,12}", name in "(?i)jarvis|travis|jervis|service", after in "\\PC{0,12}"
        ) {
            let text = format!("{before} {name}{after}");
            let _ = super::after_wake_word(&text);
        }
    }
}
