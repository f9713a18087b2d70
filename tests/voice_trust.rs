//! Transcripts that can be trusted: what the listener makes of sounds that are not a question
//! (hisses, thumps, beeps) and of short commands, in voices the fixtures were not made in —
//! espeak-ng's voices and variants at several speeds, Piper's neural voice, and speech in a
//! noisy room. Real whisper tiny.en, the real speech detector (Silero VAD), the real listener.

mod support;

use std::sync::Arc;

use jarvis::config::{Language, ListenMode};
use jarvis::voice::audio::EchoPath;
use jarvis::voice::listen::{ListenEvent, Shared};
use jarvis::voice::{
    fixtures, models, Espeak, Heard, Listener, SegmenterSettings, Synthesizer, Transcriber,
    UtteranceReport,
};
use support::*;

/// Whisper behind the speech detector, as the voice loop and `jarvis listen` run it.
fn gated() -> Arc<dyn Transcriber> {
    let (transcriber, missing) = models::speech_gate(&model_dir(), whisper());
    assert!(
        missing.is_none(),
        "the speech detector: {missing:?} (scripts/models voice installs it)"
    );
    transcriber
}

fn judged(transcriber: &Arc<dyn Transcriber>, sound: &[f32]) -> Vec<(Heard, String)> {
    fixtures::judged(transcriber, &turn(), sound).expect("the listener")
}

fn piper() -> &'static jarvis::voice::Piper {
    static PIPER: std::sync::OnceLock<jarvis::voice::Piper> = std::sync::OnceLock::new();
    PIPER.get_or_init(|| {
        // Steady: the same sound in every run, so a verdict on it is too.
        models::load_piper(&model_dir(), 175)
            .expect("Piper's voice (scripts/models voice)")
            .steady()
    })
}

fn voices(text: &str) -> Vec<(String, Vec<f32>)> {
    fixtures::voices(text, piper()).expect("espeak-ng and Piper's voice")
}

/// Speakers for the hesitation tests: three of espeak-ng's voices and speeds, and Piper.
fn speakers() -> Vec<(&'static str, Box<dyn Synthesizer>)> {
    vec![
        ("espeak en-us", Box::new(Espeak::new("en-us", 175))),
        (
            "espeak en-gb+m3 slow",
            Box::new(Espeak::new("en-gb+m3", 150)),
        ),
        (
            "espeak en-us+f3 fast",
            Box::new(Espeak::new("en-us+f3", 200)),
        ),
        (
            "Piper",
            Box::new(models::load_piper(&model_dir(), 175).unwrap().steady()),
        ),
    ]
}

/// Verdicts of a hands-free listener that ends every utterance after 300 ms of quiet (as it was
/// before pauses were judged).
fn judged_by_a_fixed_hangover(transcriber: &Arc<dyn Transcriber>, sound: &[f32]) -> usize {
    Listener::new(
        ListenMode::HandsFree,
        transcriber.clone(),
        None,
        0.5,
        Shared::default(),
    )
    .with_settings(SegmenterSettings::fixed_hangover(15))
    .hear_all(&fixtures::in_quiet_room(sound))
    .unwrap()
    .iter()
    .filter(|r| r.heard == Heard::Question)
    .count()
}

/// Each of `questions` (said in two parts, `pause_ms` apart) in each voice, through the listener
/// with its pauses judged: how many were tried, and those cut in two (with what was heard).
fn cut_in_two(questions: &[(&str, &str)], pause_ms: u64) -> (usize, Vec<String>) {
    let transcriber = gated();
    let mut split = Vec::new();
    let mut tried = 0;
    for (voice, speaker) in speakers() {
        for (first, rest) in questions {
            let sound = fixtures::hesitant(first, pause_ms, rest, speaker.as_ref()).unwrap();
            let verdicts = judged(&transcriber, &sound);
            eprintln!("{first} … {rest} in {voice} → {verdicts:?}");
            tried += 1;
            if !matches!(verdicts.as_slice(), [(Heard::Question, _)]) {
                split.push(format!("{first} … {rest} in {voice} → {verdicts:?}"));
            }
            // The pause is long enough to cut it where quiet alone decides.
            if tried == 1 {
                assert_eq!(judged_by_a_fixed_hangover(&transcriber, &sound), 2);
            }
        }
    }
    (tried, split)
}

#[test]
fn a_pause_after_a_word_no_sentence_ends_on_does_not_cut_the_question_in_two() {
    let (tried, split) = cut_in_two(
        &[
            ("Send a message to my", "sister saying I am late."),
            ("How long does it take to", "boil an egg?"),
            ("What is the name of the", "tallest mountain in Africa?"),
            (
                "What is the difference between",
                "a crocodile and an alligator?",
            ),
            ("Turn the heating up in", "the living room."),
        ],
        600,
    );
    // The benchmark's goal: at most one question in twenty cut in two. (Where whisper tiny.en
    // mishears the half and is sure of it — "Write a short poem about" as "Right a short moment
    // out." — the words do not hang and the end-of-turn model, fooled by a synthesized voice
    // that falls at the cut, ends the turn: BENCHMARKS.md counts those.)
    assert!(
        split.len() * 20 <= tried,
        "{} of {tried} cut in two: {split:#?}",
        split.len()
    );
}

#[test]
fn a_pause_whisper_ends_with_a_word_it_made_up_does_not_cut_the_question_in_two() {
    // Halves whisper tiny.en hears ending on a word a sentence can end on, which it is unsure
    // of: "Translate good morning into" as "… Intel.", "Write a short poem about" as "… very
    // remote." The words do not hang, and the synthesized voice falls at the cut.
    let (tried, split) = cut_in_two(
        &[
            ("Translate good morning into", "Italian."),
            ("Write a short poem about", "the sea in winter."),
        ],
        700,
    );
    // Before whisper's doubt was heard, 5 of the 8 were cut; now 2 ("Write a short poem about"
    // as "Right a short moment out." is a word whisper was sure of, in two voices).
    assert!(
        split.len() <= 3,
        "{} of {tried} cut in two: {split:#?}",
        split.len()
    );
}

#[test]
fn two_finished_questions_a_short_pause_apart_are_two_and_neither_waits_for_the_long_quiet() {
    let transcriber = gated();
    let mut wrong = Vec::new();
    for (voice, speaker) in speakers() {
        for (first, second) in [
            ("What time is it?", "What is the weather like tomorrow?"),
            ("Where is the nearest pharmacy?", "Is it open on Sunday?"),
        ] {
            let sound = fixtures::hesitant(first, 600, second, speaker.as_ref()).unwrap();
            let heard =
                fixtures::heard_in_quiet_room(&transcriber, &turn(), &sound).expect("the listener");
            eprintln!("{first} … {second} in {voice} → {heard:?}");
            let questions = heard.iter().filter(|r| r.heard == Heard::Question).count();
            // Each ended at the short quiet, not the long one: a finished question is answered
            // as soon as the pause is judged.
            let held = heard
                .iter()
                .map(|r| r.end_ms - r.last_voiced_ms)
                .max()
                .unwrap_or(0);
            if questions != 2 || held > 400 {
                wrong.push(format!(
                    "{first} … {second} in {voice}: {questions} questions, the longest end {held} ms after the voice: {heard:?}"
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn noise_bursts_are_noise_never_a_question() {
    let transcriber = gated();
    let mut wrong = Vec::new();
    for (kind, ms, clip) in fixtures::noise_bursts() {
        let verdicts = judged(&transcriber, &clip.samples);
        eprintln!("{kind:?} {ms} ms → {verdicts:?}");
        if verdicts.iter().any(|(heard, _)| !heard.ignored()) {
            wrong.push(format!("{kind:?} {ms} ms → {verdicts:?}"));
        }
    }
    assert!(wrong.is_empty(), "noise taken for words: {wrong:#?}");
}

#[test]
fn a_short_stop_said_in_any_voice_is_a_stop() {
    let transcriber = gated();
    let mut wrong = Vec::new();
    for phrase in ["Stop.", "Stop it.", "Never mind."] {
        for (voice, samples) in voices(phrase) {
            let verdicts = judged(&transcriber, &samples);
            eprintln!("{phrase} in {voice} → {verdicts:?}");
            if verdicts.iter().map(|(h, _)| *h).collect::<Vec<_>>() != [Heard::Stop] {
                wrong.push(format!("{phrase} in {voice} → {verdicts:?}"));
            }
        }
    }
    // whisper tiny.en mishears a short phrase now and then in the hardest voices here ("Stop it"
    // under a fan's hiss came back "Start a bit."; "Never mind" slow in en-gb+f2 as "Never
    // minded"; Piper's voice, which varies from run to run, once as "Start."): one voice in
    // nine at most, per phrase.
    let per_phrase = |p: &str| wrong.iter().filter(|w| w.starts_with(p)).count();
    assert!(
        ["Stop.", "Stop it.", "Never mind."]
            .iter()
            .all(|p| per_phrase(p) <= 1),
        "not one stop: {wrong:#?}"
    );
}

#[test]
fn a_question_in_any_voice_is_one_question_with_its_words() {
    let transcriber = gated();
    let mut wrong = Vec::new();
    for (question, key) in [
        ("What time is it in Tokyo?", "tokyo"),
        ("Turn the lights off.", "light"),
    ] {
        for (voice, samples) in voices(question) {
            let verdicts = judged(&transcriber, &samples);
            eprintln!("{question} in {voice} → {verdicts:?}");
            let right = matches!(verdicts.as_slice(), [(Heard::Question, text)] if text.to_lowercase().contains(key));
            if !right {
                wrong.push(format!("{question} in {voice} → {verdicts:?}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "not one question with its words: {wrong:#?}"
    );
}

/// A model folder in `dir` with nothing but the installed ONNX Runtime in it.
fn models_with_onnx_runtime_only(dir: &Dir) -> std::path::PathBuf {
    let models = dir.path().join("models");
    std::fs::create_dir_all(models.join("onnxruntime")).unwrap();
    let (library, here) = (
        jarvis::onnx::library_path(&model_dir()),
        jarvis::onnx::library_path(&models),
    );
    if library != here {
        std::os::unix::fs::symlink(library, here).unwrap();
    }
    models
}

#[test]
fn a_missing_or_damaged_speech_detector_is_named_and_whisper_still_listens() {
    let dir = Dir::new();
    let models = models_with_onnx_runtime_only(&dir);
    let question = fixtures::said("What time is it in Tokyo?", 0).unwrap();
    let detector = models.join(jarvis::voice::silero::DETECTOR_FILE);
    for (what, damage) in [
        ("missing", None),
        ("not ONNX", Some(b"not a model at all".to_vec())),
    ] {
        if let Some(bytes) = damage {
            std::fs::create_dir_all(detector.parent().unwrap()).unwrap();
            std::fs::write(&detector, bytes).unwrap();
        }
        let (transcriber, why) = models::speech_gate(&models, whisper());
        let why = why
            .unwrap_or_else(|| panic!("a {what} detector is reported"))
            .to_string();
        assert!(why.contains("silero_vad.onnx"), "{what}: {why}");
        let verdicts = judged(&transcriber, &question);
        assert_eq!(verdicts.len(), 1, "{what}: {verdicts:?}");
        assert_eq!(verdicts[0].0, Heard::Question, "{what}: {verdicts:?}");
    }
}

#[test]
fn a_missing_damaged_or_wrong_end_of_turn_model_is_named_and_the_words_still_judge_pauses() {
    let dir = Dir::new();
    let models = models_with_onnx_runtime_only(&dir);
    let transcriber = gated();
    let hesitant = fixtures::hesitant(
        "How long does it take to",
        600,
        "boil an egg?",
        &Espeak::default(),
    )
    .unwrap();
    let file = models.join(jarvis::voice::turn::TURN_FILE);
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    let another_model =
        std::fs::read(model_dir().join(jarvis::voice::silero::DETECTOR_FILE)).unwrap();
    for (what, damage) in [
        ("missing", None),
        ("not ONNX", Some(b"not a model at all".to_vec())),
        ("another model", Some(another_model)),
    ] {
        match damage {
            Some(bytes) => std::fs::write(&file, bytes).unwrap(),
            None => {
                let _ = std::fs::remove_file(&file);
            }
        }
        let (turn, why) = models::turn_judge(&models);
        let why = why
            .unwrap_or_else(|| panic!("a {what} end-of-turn model is reported"))
            .to_string();
        assert!(why.contains("smart-turn-v3.2-cpu.onnx"), "{what}: {why}");
        assert!(!turn.hears_the_voice(), "{what}");
        let verdicts = fixtures::judged(&transcriber, &turn, &hesitant).unwrap();
        assert!(
            matches!(verdicts.as_slice(), [(Heard::Question, text)] if text.contains("take") && text.contains("egg")),
            "{what}: {verdicts:?}"
        );
    }
}

/// A wake word detector that fires once, at a given frame.
struct FiresAt {
    frame: usize,
    fed: usize,
}

impl jarvis::voice::WakeDetector for FiresAt {
    fn feed(&mut self, _: &[i16]) -> Result<f32, jarvis::voice::VoiceError> {
        self.fed += 1;
        Ok(if self.fed == self.frame { 1.0 } else { 0.0 })
    }

    fn reset(&mut self) {}
}

/// Whisper's words for whatever it is given, without whisper: what the listener does with them
/// is under test.
struct Says(&'static str);

impl Transcriber for Says {
    fn transcribe(
        &self,
        _: &[f32],
    ) -> Result<jarvis::voice::stt::Transcript, jarvis::voice::VoiceError> {
        Ok(jarvis::voice::stt::Transcript::of(self.0, 0.0))
    }
}

/// "Hey Jarvis", a pause that ends its utterance, and the question, with the detector (a little
/// late) firing `fires_ms` into the question, while Jarvis's voice plays or not: the questions
/// heard.
fn question_after_a_late_wake_word(speaking: bool, fires_ms: u64) -> Vec<UtteranceReport> {
    let wake = fixtures::said("Hey Jarvis.", 0).unwrap();
    let question = fixtures::said("What time is it?", 0).unwrap();
    let mut sound = wake.clone();
    sound.extend(std::iter::repeat_n(0.0, 16_000 * 3 / 10));
    let question_at_ms = 500 + sound.len() as u64 * 1000 / 16_000;
    sound.extend(&question);
    let shared = Shared::default();
    shared.set_speaking(speaking);
    Listener::new(
        ListenMode::Wake,
        Arc::new(Says("What time is it?")),
        Some(Box::new(FiresAt {
            // (the quiet room adds half a second before it all)
            frame: ((question_at_ms + fires_ms) / 20) as usize,
            fed: 0,
        })),
        0.5,
        shared,
    )
    .with_turn(turn())
    .hear_all(&fixtures::in_quiet_room(&sound))
    .unwrap()
}

/// The words of each utterance heard as a question.
fn questions(heard: &[UtteranceReport]) -> Vec<&str> {
    heard
        .iter()
        .filter(|r| r.heard == Heard::Question)
        .map(|r| r.text.as_str())
        .collect()
}

#[test]
fn a_question_begun_just_before_the_wake_word_is_detected_is_kept_whole() {
    // The detector fires only as the question begins: the question does not hold the phrase.
    let heard = question_after_a_late_wake_word(false, 100);
    assert_eq!(questions(&heard), ["What time is it?"], "{heard:?}");
    // The same while Jarvis speaks (its farewell, say), where an utterance reaches 500 ms back
    // before its onset instead of 300: the question begun 200 ms before the detector fired is
    // still not taken to hold the phrase (it was, when that was judged from the utterance's
    // start: "is it?").
    let heard = question_after_a_late_wake_word(true, 200);
    assert_eq!(questions(&heard), ["What time is it?"], "{heard:?}");
}

/// Whisper's place: hands over how many samples each call was given, and answers by that.
struct Told {
    asked: std::sync::Mutex<std::sync::mpsc::Sender<usize>>,
    words: fn(usize) -> &'static str,
}

impl Transcriber for Told {
    fn transcribe(
        &self,
        samples: &[f32],
    ) -> Result<jarvis::voice::stt::Transcript, jarvis::voice::VoiceError> {
        self.asked.lock().unwrap().send(samples.len()).unwrap();
        Ok(jarvis::voice::stt::Transcript::of(
            (self.words)(samples.len()),
            0.0,
        ))
    }
}

/// A hands-free listener judging pauses as the voice loop does, with `words` for whisper's.
fn told(words: fn(usize) -> &'static str) -> (Listener, std::sync::mpsc::Receiver<usize>) {
    let (asked, asks) = std::sync::mpsc::channel();
    let transcriber = Arc::new(Told {
        asked: std::sync::Mutex::new(asked),
        words,
    });
    let listener = Listener::new(
        ListenMode::HandsFree,
        transcriber,
        None,
        0.5,
        Shared::default(),
    )
    .with_turn(turn());
    (listener, asks)
}

/// `text` said, up to its last sound (espeak-ng ends a clip with quiet of its own).
fn samples(text: &str) -> Vec<i16> {
    let mut said: Vec<i16> = fixtures::said(text, 0)
        .unwrap()
        .iter()
        .map(|s| jarvis::voice::audio::to_i16(*s))
        .collect();
    let end = said
        .iter()
        .rposition(|s| s.unsigned_abs() > 300)
        .unwrap_or(0);
    said.truncate(end + 1);
    said
}

/// Feeds `sound` frame by frame: what was heard.
fn feed(listener: &mut Listener, sound: &[i16]) -> Vec<(Heard, String)> {
    let mut heard = Vec::new();
    for frame in jarvis::voice::audio::frames_of(sound) {
        for event in listener.push(&frame).unwrap() {
            if let ListenEvent::Heard(report) = event {
                heard.push((report.heard, report.text));
            }
        }
    }
    heard
}

#[test]
fn the_words_are_transcribed_while_the_pause_is_still_being_waited_for() {
    // Whisper takes ~170 ms: started only once the pause asks (200 ms of quiet), it came on top
    // of it. Started at the first moments of quiet, the words are ready when the pause asks.
    let (mut listener, asks) = told(|_| "What time is it?");
    let room = fixtures::quiet_room(3);
    let question = samples("What time is it?");
    assert!(feed(&mut listener, &room[..8_000]).is_empty());
    let during = feed(&mut listener, &question);
    assert!(during.is_empty(), "{during:?}");
    // 160 ms of quiet: less than the pause that asks whether the turn is over.
    assert!(feed(&mut listener, &room[..160 * 16]).is_empty());
    let given = asks
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the words asked for before the pause");
    assert!(
        given >= question.len(),
        "the whole question: {given} samples"
    );
    let heard = feed(&mut listener, &room[..16_000]);
    assert_eq!(heard, [(Heard::Question, "What time is it?".to_string())]);
    assert!(
        asks.try_recv().is_err(),
        "the pause used the words made ahead, not a second transcription"
    );
}

#[test]
fn words_transcribed_ahead_of_a_pause_the_person_talked_through_are_not_used() {
    // "Book a table for" — 160 ms — "four people at eight.": the first quiet starts a
    // transcription of the half; the pause at the end must judge the whole.
    let room = fixtures::quiet_room(3);
    let (half, rest) = (
        samples("Book a table for"),
        samples("four people at eight."),
    );
    // Whisper hears the whole only in audio that holds it.
    static WHOLE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    WHOLE.get_or_init(|| half.len() + 160 * 16 + rest.len());
    let (mut listener, asks) = told(|n| {
        if n >= WHOLE.get().copied().unwrap_or(usize::MAX) {
            "Book a table for four people at eight."
        } else {
            "Book a table for."
        }
    });
    let mut heard = feed(&mut listener, &room[..8_000]);
    heard.extend(feed(&mut listener, &half));
    heard.extend(feed(&mut listener, &room[..160 * 16]));
    asks.recv_timeout(std::time::Duration::from_secs(60))
        .expect("the half transcribed ahead");
    heard.extend(feed(&mut listener, &rest));
    heard.extend(feed(&mut listener, &room[..32_000]));
    assert_eq!(
        heard,
        [(
            Heard::Question,
            "Book a table for four people at eight.".to_string()
        )]
    );
}

#[test]
fn once_the_voice_is_quiet_whisper_lets_go_of_its_working_state_and_hears_the_next_question_alike()
{
    // A whisper of this test's own (the one the other tests share is never released), and the
    // end-of-turn model loaded before anything is measured.
    let whisper: Arc<dyn Transcriber> = Arc::new(
        models::load_whisper(&model_dir(), jarvis::config::SpeechModel::TinyEn, 1)
            .unwrap_or_else(|e| panic!("{e}")),
    );
    let question = fixtures::said("What time is it in Tokyo?", 0).unwrap();
    let before = judged(&whisper, &question);
    assert_eq!(before.len(), 1, "{before:?}");
    assert_eq!(before[0].0, Heard::Question, "{before:?}");
    jarvis::voice::trim_heap();
    let hearing = held_kib();
    whisper.release();
    jarvis::voice::trim_heap();
    let quiet = held_kib();
    // Whisper's state (its caches and compute buffers) is what it lets go of; the model stays.
    assert!(
        quiet + 10 * 1024 < hearing,
        "held {hearing} KiB after hearing a question, {quiet} KiB once released"
    );
    // The listener makes the state again as the next question begins.
    assert_eq!(judged(&whisper, &question), before);
}

/// A transcriber that tells each time it is asked to get ready (and hears nothing).
struct Readied(std::sync::Mutex<std::sync::mpsc::Sender<()>>);

impl Transcriber for Readied {
    fn transcribe(
        &self,
        _: &[f32],
    ) -> Result<jarvis::voice::stt::Transcript, jarvis::voice::VoiceError> {
        Ok(jarvis::voice::stt::Transcript::of(String::new(), 1.0))
    }

    fn prepare(&self) -> Result<(), jarvis::voice::VoiceError> {
        let _ = self.0.lock().unwrap().send(());
        Ok(())
    }
}

#[test]
fn speech_to_text_gets_ready_as_the_person_begins_to_speak_not_at_the_pause() {
    let (ready, readied) = std::sync::mpsc::channel();
    let mut listener = Listener::new(
        ListenMode::HandsFree,
        Arc::new(Readied(std::sync::Mutex::new(ready))),
        None,
        0.5,
        Shared::default(),
    )
    .with_turn(turn());
    // The words, with no quiet after them: the utterance is open, nothing transcribed yet.
    let room = fixtures::quiet_room(1);
    assert!(feed(&mut listener, &room[..8_000]).is_empty());
    assert!(feed(&mut listener, &samples("What time is it in Tokyo?")).is_empty());
    readied
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("speech-to-text asked to get ready while the person speaks");
}

/// Whisper's place, holding each transcription until it is let go (each call its own hold, in
/// order; a minute at most, so that a listener that waits for it cannot hang a failing test):
/// tells when each begins, and counts those ended.
struct HeldBack {
    began: std::sync::Mutex<std::sync::mpsc::Sender<usize>>,
    holds: std::sync::Mutex<std::collections::VecDeque<std::sync::mpsc::Receiver<()>>>,
    calls: std::sync::atomic::AtomicUsize,
    ended: Arc<std::sync::atomic::AtomicUsize>,
}

impl Transcriber for HeldBack {
    fn transcribe(
        &self,
        _: &[f32],
    ) -> Result<jarvis::voice::stt::Transcript, jarvis::voice::VoiceError> {
        let call = self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let hold = self.holds.lock().unwrap().pop_front();
        let _ = self.began.lock().unwrap().send(call);
        if let Some(hold) = hold {
            let _ = hold.recv_timeout(std::time::Duration::from_secs(60));
        }
        self.ended.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(jarvis::voice::stt::Transcript::of(
            "What time is it in Tokyo?",
            0.0,
        ))
    }
}

/// A hands-free listener whose whisper holds its first `calls` transcriptions: the listener,
/// the calls as they begin, each call's release, and the count of those ended.
#[allow(clippy::type_complexity)]
fn held_back(
    calls: usize,
) -> (
    Listener,
    std::sync::mpsc::Receiver<usize>,
    Vec<std::sync::mpsc::Sender<()>>,
    Arc<std::sync::atomic::AtomicUsize>,
) {
    let (began, begins) = std::sync::mpsc::channel();
    let (gos, holds): (Vec<_>, std::collections::VecDeque<_>) =
        (0..calls).map(|_| std::sync::mpsc::channel()).unzip();
    let ended = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let listener = Listener::new(
        ListenMode::HandsFree,
        Arc::new(HeldBack {
            began: std::sync::Mutex::new(began),
            holds: std::sync::Mutex::new(holds),
            calls: std::sync::atomic::AtomicUsize::new(0),
            ended: ended.clone(),
        }),
        None,
        0.5,
        Shared::default(),
    )
    .with_turn(turn());
    (listener, begins, gos, ended)
}

/// `text`, then the quiet after which its words are transcribed ahead (150 ms: short of the
/// pause that would ask for them).
fn said_then_a_breath(text: &str) -> Vec<i16> {
    let mut sound = samples(text);
    sound.extend_from_slice(&fixtures::quiet_room(1)[..16_000 * 3 / 20]);
    sound
}

/// Lets `listener` go on a thread of its own while whisper's first call is held, and asserts
/// that it was not let go within half a second (`what` was still at work: a listener that does
/// not wait is let go at once; one that waits, not before whisper ends, however long this
/// waits); then releases that call, and asserts that once let go, `calls` had ended.
fn let_go_waits_for_the_first_call(
    listener: Listener,
    gos: &[std::sync::mpsc::Sender<()>],
    ended: &std::sync::atomic::AtomicUsize,
    calls: usize,
    what: &str,
) {
    let (dropped, let_go) = std::sync::mpsc::channel();
    let dropping = std::thread::spawn(move || {
        drop(listener);
        let _ = dropped.send(());
    });
    let at_once = let_go
        .recv_timeout(std::time::Duration::from_millis(500))
        .is_ok();
    assert!(
        !at_once,
        "the listener was let go with {what} still at work"
    );
    gos[0].send(()).unwrap();
    dropping.join().unwrap();
    assert_eq!(ended.load(std::sync::atomic::Ordering::SeqCst), calls);
}

#[test]
fn a_listener_let_go_while_it_transcribes_ahead_waits_for_the_words_first() {
    // A transcription still running after its listener was let go ran on while the process
    // exited, and whisper's state was torn down under it (the suspected cause of a crash at
    // exit, once, in the echo benchmark). The words, then the quiet after which they are
    // transcribed ahead, on a thread of their own: the listener is let go while whisper is at
    // work.
    let (mut listener, begins, gos, ended) = held_back(1);
    let room = fixtures::quiet_room(1);
    assert!(feed(&mut listener, &room[..8_000]).is_empty());
    let sound = said_then_a_breath("What time is it in Tokyo?");
    assert!(feed(&mut listener, &sound).is_empty(), "nothing ended yet");
    let first = begins.recv_timeout(std::time::Duration::from_secs(60));
    assert_eq!(
        first,
        Ok(0),
        "the words transcribed ahead as the quiet began"
    );
    let_go_waits_for_the_first_call(listener, &gos, &ended, 1, "whisper");
}

#[test]
fn a_listener_let_go_after_two_breaths_waits_for_the_first_words_too() {
    // The person breathes, goes on, and breathes again: the words are transcribed ahead twice,
    // and the first transcription, no longer wanted, still runs (whisper cannot be stopped).
    // It was let run on its own; the listener now waits for it as for the second.
    let (mut listener, begins, gos, ended) = held_back(2);
    let room = fixtures::quiet_room(1);
    assert!(feed(&mut listener, &room[..8_000]).is_empty());
    assert!(feed(&mut listener, &said_then_a_breath("What time is it")).is_empty());
    let first = begins.recv_timeout(std::time::Duration::from_secs(60));
    assert_eq!(first, Ok(0), "transcribed ahead at the first breath");
    assert!(feed(&mut listener, &said_then_a_breath("in Tokyo?")).is_empty());
    let second = begins.recv_timeout(std::time::Duration::from_secs(60));
    assert_eq!(second, Ok(1), "transcribed ahead at the second breath");
    // The second is done; the first is still at work.
    gos[1].send(()).unwrap();
    let_go_waits_for_the_first_call(listener, &gos, &ended, 2, "the first transcription");
}

/// What a listener that hears `text` from whisper, in `language`, makes of `said` over
/// Jarvis's voice saying `answer` or not (`over_the_voice`), each frame as the canceller told of
/// it: a share `voice_free` of it not the voice's residue, and the `path` of the voice back into
/// the microphone as the canceller knew it (`Unknown`: it let the frame through as it was heard).
fn heard_over(
    text: &'static str,
    language: Language,
    (answer, said, over_the_voice): (&str, &str, bool),
    (voice_free, path): (f32, EchoPath),
) -> Vec<(Heard, String)> {
    heard_by(
        Arc::new(Says(text)),
        language,
        (answer, said, over_the_voice),
        (voice_free, path),
    )
}

/// [`heard_over`], with `transcriber` for whisper.
fn heard_by(
    transcriber: Arc<dyn Transcriber>,
    language: Language,
    (answer, said, over_the_voice): (&str, &str, bool),
    (voice_free, path): (f32, EchoPath),
) -> Vec<(Heard, String)> {
    let shared = Shared::default();
    let mut listener = Listener::new(
        ListenMode::HandsFree,
        transcriber,
        None,
        0.5,
        shared.clone(),
    )
    .with_language(language);
    shared.said(true, answer);
    shared.set_speaking(over_the_voice);
    let mut heard = Vec::new();
    let said = samples(said);
    for frame in jarvis::voice::audio::frames_of(&[said.as_slice(), &[0; 16_000]].concat()) {
        let judged = jarvis::voice::audio::EchoJudged {
            residue: false,
            linear: frame.clone(),
            voice_free,
            path,
        };
        for event in listener.push_judged(&frame, Some(&judged)).unwrap() {
            if let ListenEvent::Heard(report) = event {
                heard.push((report.heard, report.text));
            }
        }
    }
    heard
}

/// What a listener that hears `text` from whisper makes of "Stop talking." said, over Jarvis's
/// voice or not, in `language`; `held_back` where the canceller was at work on it (the voice
/// ringing: a share of each frame its residue).
fn heard_as(
    text: &'static str,
    over_the_voice: bool,
    held_back: bool,
    language: Language,
) -> Vec<(Heard, String)> {
    let answer = "Paris is the capital of France, and its largest city.";
    let voice_free = if held_back { 0.6 } else { 1.0 };
    heard_over(
        text,
        language,
        (answer, "Stop talking.", over_the_voice),
        (voice_free, EchoPath::Present),
    )
}

/// What a listener that hears `text` from whisper makes of something said over Jarvis's voice
/// ("Hello. I am Jarvis, and I am listening.") where the canceller let the microphone through as
/// it was heard, not knowing yet whether the voice comes back (`path` `Unknown`), or at work
/// (`Present`).
fn heard_before_the_room_is_known(text: &'static str, path: EchoPath) -> Vec<(Heard, String)> {
    let answer = "Hello. I am Jarvis, and I am listening.";
    heard_over(
        text,
        Language::En,
        (answer, "Hello, I am Jarvis.", true),
        (1.0, path),
    )
}

/// The opening of the first answer a canceller plays on a microphone goes through as it was
/// heard (whether the voice comes back is not yet known): one or two words of the answer whisper
/// wrote from it — "Hello?" for its "Hello.", too short for the echo filter — are its own voice,
/// not a question Jarvis would answer. Once the canceller is at work, they are the person's; and
/// a sentence of the person's is theirs either way, however many of its words the answer has.
#[test]
fn words_of_its_answer_heard_before_the_canceller_knows_the_room_are_its_own_voice() {
    for text in ["Hello?", "Jarvis, listening?"] {
        assert_eq!(
            heard_before_the_room_is_known(text, EchoPath::Unknown),
            vec![(Heard::Echo, text.to_string())],
            "{text}"
        );
        assert_eq!(
            heard_before_the_room_is_known(text, EchoPath::Present),
            vec![(Heard::Question, text.to_string())],
            "{text}, the canceller at work"
        );
    }
    for text in ["What time is it?", "I am listening to music, Jarvis."] {
        assert_eq!(
            heard_before_the_room_is_known(text, EchoPath::Unknown),
            vec![(Heard::Question, text.to_string())],
            "{text}"
        );
    }
}

/// Over the voice the echo canceller holds back a word's first moments, and whisper tiny.en
/// seldom spells the name: a stop whisper wrote so ("Top talking.", "Wyatt", "Jaram is stop")
/// is a stop there, by its sound — and nowhere else, and never what only ends like one.
#[test]
fn a_stop_said_over_the_voice_that_whisper_wrote_as_other_words_is_known_by_its_sound() {
    let stop = |text: &str| vec![(Heard::Stop, text.to_string())];
    let question = |text: &str| vec![(Heard::Question, text.to_string())];
    for text in [
        "Top talking.",
        "Wyatt.",
        "It's top talking.",
        "Jaram is stop.",
        "Darn this, stop!",
    ] {
        assert_eq!(
            heard_as(text, true, true, Language::En),
            stop(text),
            "{text}"
        );
        assert_eq!(
            heard_as(text, false, false, Language::En),
            question(text),
            "{text}, in a quiet room"
        );
    }
    // With headphones nothing is held back: whisper's "Top talking." is what was said; its
    // "Jaram" is still whisper's way with the name.
    assert_eq!(
        heard_as("Top talking.", true, false, Language::En),
        question("Top talking.")
    );
    assert_eq!(
        heard_as("Jaram is stop.", true, false, Language::En),
        stop("Jaram is stop.")
    );
    for text in [
        "Don't stop.",
        "Bus stop?",
        "Top ten?",
        "Does this stop?",
        "It's top.",
    ] {
        assert_eq!(
            heard_as(text, true, true, Language::En),
            question(text),
            "{text}"
        );
    }
    // German's own phrases ("Stopp." without its first sound), not English's.
    assert_eq!(heard_as("Top!", true, true, Language::De), stop("Top!"));
    assert_eq!(
        heard_as("Wyatt.", true, true, Language::De),
        question("Wyatt.")
    );
}

/// What a listener whose whisper is `whisper` makes of "Stop talking." said over Jarvis's voice
/// ("Paris is the capital of France…"), held back by the canceller, or not over it.
fn weighed_as(whisper: Arc<dyn Transcriber>, over_the_voice: bool) -> Vec<(Heard, String)> {
    weighed_over(
        whisper,
        "Paris is the capital of France, and its largest city.",
        over_the_voice,
    )
}

/// [`weighed_as`], over the voice saying `answer`.
fn weighed_over(
    whisper: Arc<dyn Transcriber>,
    answer: &str,
    over_the_voice: bool,
) -> Vec<(Heard, String)> {
    heard_by(
        whisper,
        Language::En,
        (answer, "Stop talking.", over_the_voice),
        (0.6, EchoPath::Present),
    )
}

/// Whisper's words, and a weighing that fails.
struct CannotWeigh;

impl Transcriber for CannotWeigh {
    fn transcribe(
        &self,
        _: &[f32],
    ) -> Result<jarvis::voice::stt::Transcript, jarvis::voice::VoiceError> {
        Ok(jarvis::voice::stt::Transcript::of("It's time.", 0.0))
    }

    fn weigh(&self, _: &[f32], _: &[&str]) -> Result<Option<Vec<f32>>, jarvis::voice::VoiceError> {
        Err(jarvis::voice::VoiceError::Transcribe("no state".into()))
    }
}

/// Over the voice whisper writes a stop it heard through the voice's residue as other words
/// ("It's time.", "the top." for "Stop."), but finds "Stop." itself nearly as likely as the
/// whole of the clip, and far likelier than an "um": that is a stop. Not where it finds the stop
/// unlikely, or an "um" nearly as likely, or what it wrote far likelier; not a negation; not
/// words of the answer; and not away from the voice, where whisper hears a person clearly.
#[test]
fn a_stop_whisper_wrote_as_other_words_over_the_voice_is_known_by_how_likely_it_finds_it() {
    let stop = |text: &str| vec![(Heard::Stop, text.to_string())];
    let question = |text: &str| vec![(Heard::Question, text.to_string())];
    // As weighed in `cargo bench --bench echo` (BENCHMARKS.md): "It's time." for "Stop.", the
    // stop 0.7 less likely than what was written, 6.4 likelier than "um".
    let heard = weighed_as(Weighs::new("It's time.", (-2.7, -9.1, -2.0)), true);
    assert_eq!(heard, stop("Stop."));
    let heard = weighed_as(Weighs::new("It was time.", (-5.6, -9.9, -2.8)), true);
    assert_eq!(heard, stop("Stop."));
    // The stop unlikely as the whole of the clip ("Okay." weighed so: −17.4).
    let heard = weighed_as(Weighs::new("It's time.", (-8.0, -12.0, -2.0)), true);
    assert_eq!(heard, question("It's time."));
    // What was written far likelier than the stop ("Sorry.": 7.0).
    let heard = weighed_as(Weighs::new("It's time.", (-5.0, -12.0, -1.0)), true);
    assert_eq!(heard, question("It's time."));
    // An "um" nearly as likely as the stop: a hesitation.
    let heard = weighed_as(Weighs::new("It's time.", (-2.7, -4.0, -2.0)), true);
    assert_eq!(heard, question("It's time."));
    // "Don't stop." likelier than the stop, its "don't" held back by the canceller: as weighed
    // in `voice_echo.rs`, written "Go on to time.".
    let odds = ClipOdds {
        stop: -5.3,
        um: -9.6,
        dont: -4.0,
        written: -5.5,
    };
    let heard = weighed_as(Weighs::twice("Go on to time.", odds, odds), true);
    assert_eq!(heard, question("Go on to time."));
    // Not over the voice: never weighed.
    let whisper = Weighs::new("It's time.", (-2.7, -9.1, -2.0));
    assert_eq!(weighed_as(whisper.clone(), false), question("It's time."));
    assert_eq!(whisper.weighed(), 0);
    // A stop the answer holds ("…press stop…" come through as "the top."): its own voice.
    let heard = weighed_over(
        Weighs::new("the top.", (-1.0, -9.1, -2.0)),
        "To end the timer, press stop on the screen.",
        true,
    );
    assert_eq!(heard, question("the top."));
    // A weighing that fails loses nothing: what was heard is heard.
    assert_eq!(
        weighed_as(Arc::new(CannotWeigh), true),
        question("It's time.")
    );
    // A negation, and words of the answer being spoken: never weighed.
    for text in ["Don't time.", "Not time.", "France."] {
        let whisper = Weighs::new(text, (-0.5, -9.1, -2.0));
        let heard = weighed_as(whisper.clone(), true);
        assert!(
            !heard.iter().any(|(h, _)| *h == Heard::Stop),
            "{text}: {heard:?}"
        );
        assert_eq!(whisper.weighed(), 0, "{text}");
    }
}

/// How likely whisper finds a stop, an "um", a "don't stop" and what it wrote as the whole of
/// one clip (nats).
#[derive(Clone, Copy)]
struct ClipOdds {
    stop: f32,
    um: f32,
    dont: f32,
    written: f32,
}

/// As weighed in the loop's room (`voice_loop`'s ten stops, BENCHMARKS.md "A stop weighed again
/// without the voice's residue"): "Stop." written "it's time", as heard and with the voice's
/// residue gated out.
const AS_HEARD: ClipOdds = ClipOdds {
    stop: -8.4,
    um: -10.4,
    dont: -30.0,
    written: -3.0,
};
const GATED: ClipOdds = ClipOdds {
    stop: -4.1,
    um: -7.6,
    dont: -30.0,
    written: -5.7,
};

/// Whisper's words (`text`) for whatever it is given, and how likely it finds a stop ("Stop."),
/// a hesitation ("um"), the stop said with a no ("don't stop") and what it wrote as the whole of
/// a clip: as `first` in the first clip it weighs (the utterance as heard), as `gated` in any
/// later one; every other phrase is unlikely. Keeps the loudness of each clip it weighs.
struct Weighs {
    text: &'static str,
    first: ClipOdds,
    gated: ClipOdds,
    loudness: std::sync::Mutex<Vec<f32>>,
}

impl ClipOdds {
    /// A stop, an "um" and what was written as likely as given, a "don't stop" unlikely.
    fn of(stop: f32, um: f32, written: f32) -> ClipOdds {
        ClipOdds {
            stop,
            um,
            dont: -30.0,
            written,
        }
    }
}

impl Weighs {
    /// Every clip weighed alike: `(stop, um, written)`, a "don't stop" unlikely.
    fn new(text: &'static str, (stop, um, written): (f32, f32, f32)) -> Arc<Weighs> {
        let odds = ClipOdds::of(stop, um, written);
        Weighs::twice(text, odds, odds)
    }

    fn twice(text: &'static str, first: ClipOdds, gated: ClipOdds) -> Arc<Weighs> {
        Arc::new(Weighs {
            text,
            first,
            gated,
            loudness: Default::default(),
        })
    }

    fn loudness(&self) -> Vec<f32> {
        self.loudness.lock().unwrap().clone()
    }

    /// How many clips it was asked to weigh.
    fn weighed(&self) -> usize {
        self.loudness.lock().unwrap().len()
    }
}

impl Transcriber for Weighs {
    fn transcribe(
        &self,
        _: &[f32],
    ) -> Result<jarvis::voice::stt::Transcript, jarvis::voice::VoiceError> {
        Ok(jarvis::voice::stt::Transcript::of(self.text, 0.0))
    }

    fn weigh(
        &self,
        samples: &[f32],
        phrases: &[&str],
    ) -> Result<Option<Vec<f32>>, jarvis::voice::VoiceError> {
        let mut loudness = self.loudness.lock().unwrap();
        let odds = if loudness.is_empty() {
            self.first
        } else {
            self.gated
        };
        loudness.push(samples.iter().map(|s| s * s).sum());
        Ok(Some(
            phrases
                .iter()
                .map(|phrase| match *phrase {
                    p if p == self.text => odds.written,
                    "stop." | "stop!" => odds.stop,
                    "um" => odds.um,
                    "don't stop" => odds.dont,
                    _ => -30.0,
                })
                .collect(),
        ))
    }
}

/// A stop said over the voice that the voice's residue made unlikely as the whole of the clip
/// (in the loop's room, "Stop." written "it's time", its likeliest stop at −8.4 nats against
/// −3.0 for what was written) is weighed again with the residue gated out, as it is heard again
/// when whisper's words say nothing: there whisper found it at −4.1, 3.5 likelier than an "um",
/// and it is a stop. Not where the gated clip is no likelier a stop; and never weighed again
/// where the first weighing found a hesitation, or a "no" or an "um" likelier than the stop (the
/// gating takes out a "don't" as it does a first sound), or more words than a misheard stop.
#[test]
fn a_stop_the_voices_residue_made_unlikely_is_weighed_again_without_it() {
    let question = |text: &str| vec![(Heard::Question, text.to_string())];
    let whisper = Weighs::twice("it's time", AS_HEARD, GATED);
    assert_eq!(
        weighed_as(whisper.clone(), true),
        vec![(Heard::Stop, "Stop.".to_string())]
    );
    // The second clip weighed is the first gated: quieter (each frame at 0.6 of its energy share).
    let loudness = whisper.loudness();
    assert_eq!(loudness.len(), 2, "{loudness:?}");
    assert!(loudness[1] < 0.5 * loudness[0], "{loudness:?}");
    // Gated, no likelier a stop: what was written.
    let whisper = Weighs::twice("it's time", AS_HEARD, AS_HEARD);
    assert_eq!(weighed_as(whisper.clone(), true), question("it's time"));
    assert_eq!(whisper.loudness().len(), 2);
    // Weighed once only: a "don't stop" likelier than the stop as heard ("Go on." for "Don't
    // stop."), an "um" likelier, a hesitation whisper wrote as words, more than two words.
    let dont = ClipOdds {
        dont: -6.0,
        ..AS_HEARD
    };
    let um = ClipOdds {
        um: -7.0,
        ..AS_HEARD
    };
    let hesitation = ClipOdds {
        stop: -12.0,
        um: -2.5,
        dont: -30.0,
        written: -2.0,
    };
    for (text, first, heard) in [
        ("Go on.", dont, Heard::Question),
        ("it's time", um, Heard::Question),
        ("I'm sorry.", hesitation, Heard::Filler),
        ("Go on to time.", AS_HEARD, Heard::Question),
    ] {
        let whisper = Weighs::twice(text, first, GATED);
        assert_eq!(
            weighed_as(whisper.clone(), true),
            vec![(heard, text.to_string())],
            "{text}"
        );
        assert_eq!(whisper.loudness().len(), 1, "{text}");
    }
}

/// A murmur said over the voice that whisper wrote as a word, finding an "um" likely but what it
/// wrote likelier still (in the echo benchmark, an "Um." at −3.8 against −2.0 for what was
/// written), is weighed again with the voice's residue gated out, where the "um" came out about
/// as likely (−5.2 against −6.3): a filler, not a question. Not where the "um" was unlikely as
/// heard: gating takes a person's words away with the residue, and "Who wrote it?" written "The
/// loaded" (an "um" at −10.2 as heard) came out likelier an "um" than that gated.
#[test]
fn a_murmur_whisper_wrote_as_a_word_over_the_voice_is_a_filler_where_it_is_one_without_the_residue()
{
    // (stop, hesitation, what was written)
    let murmur = ClipOdds::of(-12.2, -3.8, -2.0);
    let murmur_gated = ClipOdds::of(-11.3, -5.2, -6.3);
    let whisper = Weighs::twice("here.", murmur, murmur_gated);
    assert_eq!(
        weighed_as(whisper.clone(), true),
        vec![(Heard::Filler, "here.".to_string())]
    );
    assert_eq!(whisper.weighed(), 2, "weighed as heard, then gated");
    // Gated no likelier an "um": what was written, a question.
    let whisper = Weighs::twice("here.", murmur, murmur);
    assert_eq!(
        weighed_as(whisper, true),
        vec![(Heard::Question, "here.".to_string())]
    );
    // A question whose words gating took away: asked, and not weighed a second time.
    let question = ClipOdds::of(-12.4, -10.2, -3.0);
    let taken_away = ClipOdds::of(-11.7, -5.4, -8.6);
    let whisper = Weighs::twice("The loaded", question, taken_away);
    assert_eq!(
        weighed_as(whisper.clone(), true),
        vec![(Heard::Question, "The loaded".to_string())]
    );
    assert_eq!(whisper.weighed(), 1);
    // Weighed again for a stop (nothing likelier than it as heard), the "um" unlikely as heard:
    // gated, a likely "um" is no filler.
    let whisper = Weighs::twice("it's time", AS_HEARD, ClipOdds::of(-12.0, -4.0, -4.5));
    assert_eq!(
        weighed_as(whisper.clone(), true),
        vec![(Heard::Question, "it's time".to_string())]
    );
    assert_eq!(whisper.weighed(), 2);
    // Weighed again for a murmur (the "um" likely as heard, and likelier than the stop): gated,
    // a likely stop is no stop, since gating takes out a "don't" as it does a first sound.
    let whisper = Weighs::twice("it's time", ClipOdds::of(-8.4, -5.0, -3.0), GATED);
    assert_eq!(
        weighed_as(whisper.clone(), true),
        vec![(Heard::Question, "it's time".to_string())]
    );
    assert_eq!(whisper.weighed(), 2);
}

/// Over the voice whisper writes a hesitation it heard through the voice's residue as words
/// ("Uh." as "I'm sorry.", "Hmm." as "Thank you.", `cargo bench --bench echo`), but finds the
/// hesitation itself about as likely as the whole of the clip: that is a filler, never a
/// question. Not where it finds what it wrote far likelier (a person's "Thank you."), nor the
/// hesitation unlikely, nor away from the voice.
#[test]
fn a_hesitation_whisper_wrote_as_words_over_the_voice_is_a_filler_not_a_question() {
    let filler = |text: &str| vec![(Heard::Filler, text.to_string())];
    let question = |text: &str| vec![(Heard::Question, text.to_string())];
    // (stop, hesitation, what was written)
    let heard = weighed_as(Weighs::new("I'm sorry.", (-12.0, -2.5, -2.0)), true);
    assert_eq!(heard, filler("I'm sorry."));
    let heard = weighed_as(Weighs::new("Thank you.", (-14.0, -3.0, -3.5)), true);
    assert_eq!(heard, filler("Thank you."));
    // What was written far likelier: a person's words.
    let heard = weighed_as(Weighs::new("Thank you.", (-15.0, -9.0, -1.0)), true);
    assert_eq!(heard, question("Thank you."));
    // The hesitation unlikely as the whole of the clip, however unsure whisper was.
    let heard = weighed_as(Weighs::new("Then.", (-15.0, -7.0, -6.5)), true);
    assert_eq!(heard, question("Then."));
    // Not over the voice: never weighed.
    let whisper = Weighs::new("I'm sorry.", (-12.0, -2.5, -2.0));
    assert_eq!(weighed_as(whisper.clone(), false), question("I'm sorry."));
    assert_eq!(whisper.weighed(), 0);
}
