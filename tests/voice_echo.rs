//! Echo cancellation on a simulated room, offline: what Jarvis plays comes back into the
//! microphone late, softer and reverberant (a synthetic room impulse response), and the same
//! canceller and listener `jarvis listen --playback` runs take it out before anything listens.
//! The loop's own room tests (at real time) are in `voice_loop.rs`.

mod support;

use jarvis::service::ListenMode;
use jarvis::voice::echo::OfflineEcho;
use jarvis::voice::fixtures::{self, ducked, mix_into, rooms, Room};
use jarvis::voice::listen::{ListenEvent, Shared};
use jarvis::voice::{audio, Clip, Heard, Listener, UtteranceReport, SAMPLE_RATE};
use support::*;

fn speech(text: &str) -> Clip {
    fixtures::speech(text).expect("espeak-ng makes the fixture")
}

const ANSWER: &str = "The Eiffel Tower was built for the world fair of eighteen eighty nine. \
    It is about three hundred metres tall, and for forty years it was the tallest structure \
    in the world. Its iron frame was designed by the engineers of Gustave Eiffel's company, \
    and more than seven million people climb it every year. At night it sparkles for five \
    minutes at the start of every hour.";

const EGG: &str = "To boil an egg, put it in boiling water for seven minutes, then cool it under \
    cold water before you peel it.";
const WHALES: &str = "Whales are mammals: they breathe air, and they feed their young with milk, \
    just as land mammals do.";

/// The opening of the first answer a canceller ever hears is listened to as it is, until it
/// knows whether the voice comes back (BENCHMARKS.md): what begins there is not counted here.
const FIRST_OPENING_MS: u64 = 1500;
/// How long `jarvis listen` may take on a clip: it loads whisper and transcribes, on two cores
/// beside the other voice tests (CI once needed more than the usual 20 s).
const SLOW: std::time::Duration = std::time::Duration::from_secs(180);

/// Listens to `mic` (16 kHz) with what was played beside it; every utterance it judged (with the
/// canceller, from [`FIRST_OPENING_MS`] on).
fn listen(mic: &[f32], played: Option<&[f32]>) -> Vec<UtteranceReport> {
    let mut echo = played.map(OfflineEcho::new);
    let (_, mut out) = heard_through(mic, echo.as_mut(), None);
    if echo.is_some() {
        out.retain(|r| r.start_ms >= FIRST_OPENING_MS);
    }
    out
}

/// Listens to `mic` (16 kHz) from its first frame, through `echo` where given, knowing that
/// Jarvis says `answer` where given (as the loop tells the listener): how many times the voice
/// was lowered (speech onsets while it played), and every utterance judged.
fn heard_through(
    mic: &[f32],
    echo: Option<&mut OfflineEcho>,
    answer: Option<&str>,
) -> (usize, Vec<UtteranceReport>) {
    let (ducks, out) = lowered_through(mic, echo, answer);
    (ducks.len(), out)
}

/// [`heard_through`], with the frame of each speech onset while the voice played (where the
/// loop lowers it) instead of their count.
fn lowered_through(
    mic: &[f32],
    mut echo: Option<&mut OfflineEcho>,
    answer: Option<&str>,
) -> (Vec<usize>, Vec<UtteranceReport>) {
    let shared = Shared::default();
    if let Some(answer) = answer {
        shared.said(true, answer);
    }
    let mut listener = Listener::new(ListenMode::HandsFree, whisper(), None, 0.5, shared.clone());
    let (mut ducks, mut out) = (Vec::new(), Vec::new());
    let mic: Vec<i16> = mic.iter().map(|s| audio::to_i16(*s)).collect();
    let mut keep = |events: Vec<ListenEvent>, speaking: bool, k: usize| {
        for event in events {
            match event {
                ListenEvent::SpeechStarted if speaking => ducks.push(k),
                ListenEvent::Heard(report) => out.push(report),
                _ => {}
            }
        }
    };
    let frames = audio::frames_of(&mic);
    for (k, frame) in frames.iter().enumerate() {
        let events =
            OfflineEcho::listen(echo.as_deref_mut(), &mut listener, &shared, frame).unwrap();
        keep(events, shared.speaking(), k);
    }
    keep(listener.finish().unwrap(), false, frames.len());
    (ducks, out)
}

fn verdicts(heard: &[UtteranceReport]) -> Vec<(Heard, &str)> {
    heard.iter().map(|r| (r.heard, r.text.as_str())).collect()
}

/// Each of `heard` as "Verdict words", to be shown where a test fails.
fn shown(heard: &[UtteranceReport]) -> Vec<String> {
    verdicts(heard)
        .iter()
        .map(|(h, t)| format!("{h:?} {t}"))
        .collect()
}

#[test]
fn its_own_voice_through_a_room_opens_no_utterance_once_cancelled_and_many_without() {
    let answer = speech(ANSWER).samples;
    let mut uncancelled = 0;
    for (i, room) in rooms().into_iter().enumerate() {
        let mic = room.hear(&answer);
        let removed = OfflineEcho::erle_db(&mic, &answer, 3.0);
        assert!(
            removed >= 25.0,
            "room {i}: only {removed:.1} dB of echo removed"
        );
        let heard = listen(&mic, Some(&answer));
        // (A burst too short to be speech is dropped before speech-to-text; even that would
        // have lowered the voice, so none is allowed.)
        assert!(heard.is_empty(), "room {i}: {:?}", verdicts(&heard));
        uncancelled += listen(&mic, None).len();
    }
    assert!(
        uncancelled >= 6,
        "without the canceller it hears itself: {uncancelled}"
    );
}

#[test]
fn a_question_said_over_its_voice_comes_through_with_its_words() {
    let answer = speech(ANSWER).samples;
    let question = "What is the weather like in Paris tomorrow?";
    let mut wrong = Vec::new();
    for (i, room) in rooms().into_iter().enumerate() {
        let words = fixtures::said(question, i).expect("espeak-ng makes the fixture");
        // After the canceller has settled (its first seconds are covered by the loop's tests).
        let at = (6 + i) * SAMPLE_RATE as usize;
        let played = ducked(&answer, at, words.len());
        let mut mic = room.hear(&played);
        mix_into(&mut mic, &words, at);
        let heard = listen(&mic, Some(&played));
        let questions: Vec<_> = heard
            .iter()
            .filter(|r| r.heard == Heard::Question)
            .collect();
        let text = questions
            .first()
            .map(|r| r.text.to_lowercase())
            .unwrap_or_default();
        if questions.len() != 1 || !(text.contains("weather") && text.contains("tomorrow")) {
            wrong.push((i, shown(&heard)));
        }
    }
    // Said over Jarvis's voice at full volume, a question's first words meet the canceller's
    // double-talk suppression before the voice is lowered: one room of the six loses one.
    assert!(wrong.len() <= 1, "{wrong:?}");
}

/// What is heard of `phrase`, said in voice `i` over Jarvis's voice at full volume in `room`,
/// `i` seconds after the canceller settled (the voice lowered as the loop lowers it).
fn said_over_the_voice(phrase: &str, i: usize, room: &Room) -> Vec<String> {
    let answer = speech(ANSWER).samples;
    let words = fixtures::said(phrase, i).expect("espeak-ng makes the fixture");
    let at = (6 + i) * SAMPLE_RATE as usize;
    let played = ducked(&answer, at, words.len());
    let mut mic = room.hear(&played);
    mix_into(&mut mic, &words, at);
    let mut heard = listen(&mic, Some(&played));
    heard.retain(|r| !r.heard.ignored());
    shown(&heard)
}

#[test]
fn stop_said_over_its_voice_at_full_volume_is_heard_as_stop() {
    let mut heard_as = Vec::new();
    for (i, room) in rooms().into_iter().enumerate() {
        let phrase = ["Stop talking.", "Stop it."][i % 2];
        heard_as.push((phrase, said_over_the_voice(phrase, i, &room)));
    }
    // AEC3's suppressor holds a person back until it judges them the dominant near end, and
    // the voice is lowered only once they are heard: the utterance keeps the linear filter's
    // output, where the first syllable is whole, from further back. (With the suppressed output
    // kept and the usual pre-roll, none of the six was a stop: "talking", "of it".) What the
    // canceller still holds back of the first sound is heard by the phrase's sound: "Top
    // talking.", "It's top talking." (`voice::alike`; 3 of 6 before it).
    let stops = heard_as
        .iter()
        .filter(|(_, heard)| heard.iter().any(|t| t.starts_with("Stop ")))
        .count();
    assert!(stops >= 5, "{heard_as:?}");
}

#[test]
fn a_lone_stop_said_over_its_voice_is_heard_as_stop() {
    // One short word: AEC3's suppressor took 10–30 dB out of its vowel, so every frame of it
    // was judged the voice's residue and no utterance opened; where one did, it had too few
    // voiced frames for speech; and whisper heard the voice's residue around it as words
    // ("Let's start."). The linear filter, which takes most of the echo out, keeps a person
    // whole: a frame it kept most of is not residue; an utterance opened over the voice with
    // too little voice for a question is kept if it is a stop; and a stop whisper did not hear
    // is heard again with the residue gated out.
    let mut heard_as = Vec::new();
    for (i, room) in rooms().into_iter().enumerate() {
        for (j, phrase) in ["Stop.", "Stop!"].into_iter().enumerate() {
            heard_as.push((i, phrase, said_over_the_voice(phrase, i + j, &room)));
        }
    }
    let missed: Vec<_> = heard_as
        .iter()
        .filter(|(_, _, heard)| heard.len() != 1 || !heard[0].starts_with("Stop "))
        .collect();
    // (Before: 9 of the 12 missed, each heard as nothing at all. Not yet all: issue 15 asks
    // for every one; BENCHMARKS.md counts them.)
    assert!(missed.len() <= 2, "missed {missed:?} of {heard_as:?}");
}

/// What is heard of "Stop." said in voice `i` over `text` (said in voice `i` too), `into_ms` into
/// it, in the loop's room (`voice_loop.rs`): the laptop on a desk, the microphone remembered as
/// echoing, an answer before it for the canceller to settle on. The voice is lowered to a fifth
/// where the loop lowers it: at the onset the listener hears once the stop begins (found by
/// hearing it once at full volume; the frames before are the same either way), and not at all
/// where it hears none.
fn stop_said_into_an_answer(text: &str, i: usize, into_ms: usize) -> Vec<(Heard, String)> {
    let room = Room::default();
    let settle = fixtures::said(WHALES, 2).expect("espeak-ng makes the fixture");
    let answer = fixtures::said(text, i).expect("espeak-ng makes the fixture");
    let quiet = vec![0.0; 2 * SAMPLE_RATE as usize];
    let played: Vec<f32> = [settle.as_slice(), &quiet, &answer].concat();
    let stop = fixtures::said("Stop.", i).expect("espeak-ng makes the fixture");
    let at = settle.len() + quiet.len() + into_ms * SAMPLE_RATE as usize / 1000;
    let hear = |played: &[f32]| {
        let mut mic = room.hear(played);
        mix_into(&mut mic, &stop, at);
        let mut echo = OfflineEcho::recalling(played, true);
        lowered_through(&mic, Some(&mut echo), Some(text))
    };
    let (onsets, heard) = hear(&played);
    let heard = match onsets.into_iter().find(|k| k * 320 >= at) {
        Some(onset) => {
            let from = onset * 320;
            let lowered = ducked(
                &played,
                from.saturating_sub(4000),
                (at + stop.len() + 4000).saturating_sub(from),
            );
            hear(&lowered).1
        }
        None => heard,
    };
    heard
        .into_iter()
        // (What began well before the stop is not it: the voice's own, were it a stop.)
        .filter(|r| r.start_ms * SAMPLE_RATE as u64 / 1000 + 600 * 16 >= at as u64)
        .map(|r| (r.heard, r.text))
        .collect()
}

#[test]
fn a_stop_said_early_in_an_answer_in_the_loops_room_is_heard_as_stop() {
    // The loop's own check (`voice_loop.rs`, ten answers, "Stop." 0.9–3.6 s into each) heard 3
    // of 10: every stop opened an utterance, but whisper wrote the voice's residue before it and
    // the canceller's hold on its first sound as other words — "It's time.", "It was time.",
    // "the top." — which neither its sound nor a second hearing without the voice made a stop.
    // Whisper finds "Stop." itself nearly as likely for those clips, and far likelier than any
    // "um": weighed so, they are stops.
    let answers = [ANSWER, EGG, WHALES];
    let mut heard_as = Vec::new();
    for i in 0..10 {
        let heard = stop_said_into_an_answer(answers[i % 3], i, 900 + 300 * i);
        heard_as.push((i, heard));
    }
    let missed: Vec<_> = heard_as
        .iter()
        .filter(|(_, heard)| !heard.iter().any(|(h, _)| *h == Heard::Stop))
        .collect();
    // (Not yet ten of ten, as issue 15 asks: one is written as words whisper does not find
    // "stop" in at all.)
    assert!(missed.len() <= 1, "missed {missed:?} of {heard_as:?}");
}

#[test]
fn short_words_said_over_its_voice_that_are_no_stop_are_not_heard_as_one() {
    // A short utterance over the voice is weighed for a stop whatever whisper wrote: a person's
    // own short words must come out as what they are.
    let mut stopped = Vec::new();
    for (i, room) in rooms().into_iter().enumerate() {
        for (j, phrase) in ["Okay.", "Thank you.", "Wait.", "Sorry."]
            .into_iter()
            .enumerate()
            .filter(|(j, _)| (i + j) % 2 == 0)
        {
            let heard = said_over_the_voice(phrase, i + j, &room);
            if heard.iter().any(|t| t.starts_with("Stop ")) {
                stopped.push((i, phrase, heard));
            }
        }
    }
    assert!(stopped.is_empty(), "{stopped:?}");
}

#[test]
fn a_negation_said_over_its_voice_is_not_heard_as_a_stop() {
    // A short utterance over the voice that whisper did not hear as a stop is heard again with
    // the voice's residue gated out, which takes out a person's first words as well: "Don't
    // stop." must not come back as "Stop.".
    let mut stopped = Vec::new();
    for (i, room) in rooms().into_iter().enumerate() {
        for (j, phrase) in ["Don't stop.", "No, don't cancel it."]
            .into_iter()
            .enumerate()
        {
            let heard = said_over_the_voice(phrase, i + j, &room);
            if heard.iter().any(|t| t.starts_with("Stop ")) {
                stopped.push((i, phrase, heard));
            }
        }
    }
    assert!(stopped.is_empty(), "{stopped:?}");
}

#[test]
fn an_answer_with_stop_words_in_it_does_not_stop_itself() {
    // A word or two of the answer that comes through the canceller is too short for the echo
    // filter (3 words): heard as a short word over the voice, it must not be taken for a stop.
    let text = "If you want to cancel the timer, say cancel. That is enough for today. Keep \
        the room quiet, and stop the music before you sleep. Never mind the dishes.";
    let answer = speech(text).samples;
    for (i, room) in rooms().into_iter().enumerate() {
        let mic = room.hear(&answer);
        let mut echo = OfflineEcho::new(&answer);
        let (_, heard) = heard_through(&mic, Some(&mut echo), Some(text));
        let stops: Vec<_> = heard.iter().filter(|r| r.heard == Heard::Stop).collect();
        assert!(stops.is_empty(), "room {i}: {:?}", verdicts(&heard));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_with_playback_hears_no_utterance_in_its_own_voice_and_reports_the_canceller() {
    let dir = Dir::new();
    // (Shorter than the others: the command runs beside them on two cores.)
    let answer = speech(
        "The Eiffel Tower was built for the world fair of eighteen eighty nine. It is about three \
         hundred metres tall, and for forty years it was the tallest structure in the world.",
    );
    let mic = Clip {
        samples: Room::default().hear(&answer.samples),
        rate: SAMPLE_RATE,
    };
    let mic_wav = dir.path().join("mic.wav");
    let played_wav = dir.path().join("played.wav");
    std::fs::write(&mic_wav, mic.to_wav_bytes()).unwrap();
    // What the speaker played, at the speaker's rate: resampled to the microphone's.
    std::fs::write(
        &played_wav,
        answer.resampled(22_050).unwrap().to_wav_bytes(),
    )
    .unwrap();
    let run = |playback: bool| {
        let mut cmd = jarvis(&dir);
        cmd.env("JARVIS_DATA_DIR", model_dir().parent().unwrap());
        cmd.args(["listen", "--wav", mic_wav.to_str().unwrap()]);
        if playback {
            cmd.args(["--playback", played_wav.to_str().unwrap()]);
        }
        cmd
    };
    let (code, out, err) = output_within(SLOW, &mut run(true)).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "", "its own voice opened utterances: {out}");
    assert!(
        err.contains("echo canceller:") && err.contains("dB"),
        "{err}"
    );
    let (code, out, err) = output_within(SLOW, &mut run(false)).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.lines().count() >= 1,
        "without the playback it hears itself: {out}"
    );
    // A playback file that is not a WAV is named, and nothing is heard.
    std::fs::write(&played_wav, b"not a wav").unwrap();
    let (code, _, err) = output(&mut run(true)).await;
    assert_ne!(code, 0);
    assert!(err.contains("played.wav"), "{err}");
}

/// The three checks in a room through `jarvis listen --playback` on a WAV pair: its own
/// voice opens nothing (above), and a question and a stop said over it (the voice lowered as the
/// loop lowers it) come out as one line each, with their words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_with_playback_hears_a_question_and_a_stop_said_over_the_voice() {
    let dir = Dir::new();
    let answer = speech(ANSWER).samples;
    let question = fixtures::said("What is the weather like in Paris tomorrow?", 0).unwrap();
    let stop = fixtures::said("Stop it.", 0).unwrap();
    let (asked, stopped) = (6 * SAMPLE_RATE as usize, 14 * SAMPLE_RATE as usize);
    let played = ducked(&ducked(&answer, asked, question.len()), stopped, stop.len());
    let mut mic = Room::default().hear(&played);
    mix_into(&mut mic, &question, asked);
    mix_into(&mut mic, &stop, stopped);
    let (mic_wav, played_wav) = (dir.path().join("mic.wav"), dir.path().join("played.wav"));
    let wav = |samples: Vec<f32>| {
        Clip {
            samples,
            rate: SAMPLE_RATE,
        }
        .to_wav_bytes()
    };
    std::fs::write(&mic_wav, wav(mic)).unwrap();
    std::fs::write(&played_wav, wav(played)).unwrap();
    let mut cmd = jarvis(&dir);
    cmd.env("JARVIS_DATA_DIR", model_dir().parent().unwrap());
    cmd.args(["listen", "--wav", mic_wav.to_str().unwrap()]);
    cmd.args(["--playback", played_wav.to_str().unwrap()]);
    let (code, out, err) = output_within(SLOW, &mut cmd).await;
    assert_eq!(code, 0, "{err}");
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let said = |line: &serde_json::Value| {
        (
            line["heard"].as_str().unwrap_or_default().to_string(),
            line["text"].as_str().unwrap_or_default().to_lowercase(),
        )
    };
    let heard: Vec<(String, String)> = lines.iter().map(said).collect();
    assert_eq!(heard.len(), 2, "{out}");
    assert_eq!(heard[0].0, "question", "{out}");
    assert!(
        heard[0].1.contains("weather") && heard[0].1.contains("tomorrow"),
        "{out}"
    );
    assert_eq!(heard[1].0, "stop", "{out}");
}

/// The answer, and a microphone that hears nothing of it (headphones) but the user asking a
/// question two seconds into it.
fn headphones_with_a_question() -> (Vec<f32>, Vec<f32>) {
    let answer = speech(ANSWER).samples;
    let question = fixtures::said("And what is the capital of Spain?", 0).expect("espeak-ng");
    let mut mic = vec![0.0_f32; answer.len()];
    mix_into(&mut mic, &question, 32_000);
    (answer, mic)
}

/// `heard` is that question, once, with its words.
fn the_question_whole(heard: &[UtteranceReport]) {
    assert_eq!(heard.len(), 1, "{:?}", verdicts(heard));
    let text = heard[0].text.to_lowercase();
    assert!(
        heard[0].heard == Heard::Question && text.contains("capital") && text.contains("spain"),
        "{:?}",
        verdicts(heard)
    );
}

#[test]
fn with_headphones_no_echo_comes_back_and_a_question_said_over_the_voice_is_heard_whole() {
    let (answer, mic) = headphones_with_a_question();
    the_question_whole(&listen(&mic, Some(&answer)));
}

#[test]
fn with_headphones_a_cough_and_a_knock_during_the_voice_do_not_make_it_hear_an_echo() {
    // A cough and a knock are sudden: the microphone's loudness jumps once while the voice
    // sounds, which matches the voice's loudness somewhere by chance. Echo follows the voice all
    // along; a question said later over the voice must still be heard whole, not held back as
    // the residue of an echo that never came.
    let answer = speech(ANSWER).samples;
    let question = fixtures::said("And what is the capital of Spain?", 0).expect("espeak-ng");
    let mut mic = vec![0.0_f32; answer.len()];
    mix_into(&mut mic, &fixtures::cough().samples, 28_000);
    mix_into(&mut mic, &fixtures::knock().samples, 40_000);
    mix_into(&mut mic, &question, 110_000);
    let heard: Vec<UtteranceReport> = listen(&mic, Some(&answer))
        .into_iter()
        .filter(|r| !r.heard.ignored())
        .collect();
    the_question_whole(&heard);
}

/// Which of the microphone's frames the live canceller (as the voice loop runs it, learning as
/// it goes) passed on changed: where it judges that no echo comes back, every frame passes as
/// it is.
fn changed_frames(voice: &[f32], mic: &[f32]) -> usize {
    let mut canceller = jarvis::voice::echo::Canceller::new(0);
    let frame = jarvis::voice::FRAME;
    voice
        .chunks(frame)
        .zip(mic.chunks(frame))
        .filter(|(played, heard)| {
            let heard: Vec<i16> = heard.iter().map(|s| audio::to_i16(*s)).collect();
            canceller.cancel(&heard, played).frame != heard
        })
        .count()
}

#[test]
fn a_person_who_speaks_as_each_sentence_begins_is_not_taken_for_an_echo_path() {
    let voice = speech(
        "The Eiffel Tower was built for the world fair of eighteen eighty nine. It is about \
         three hundred metres tall. For forty years it was the tallest structure in the \
         world. More than seven million people climb it every year.",
    )
    .samples;
    // Headphones: nothing of the voice comes back; the user speaks whenever a sentence of it
    // begins, so their loudness rises and falls with the voice's at a steady delay.
    let frame = jarvis::voice::FRAME;
    let mut mic = vec![0.0_f32; voice.len()];
    let (mut quiet, mut next_free, mut said) = (8, 0, 0);
    for (i, chunk) in voice.chunks(frame).enumerate() {
        let loud = audio::loudness(chunk) > 0.2;
        if loud && quiet >= 8 && i * frame >= next_free {
            let words = fixtures::said("What is the capital of Spain?", said % 3).unwrap();
            next_free = i * frame + words.len();
            mix_into(&mut mic, &words, i * frame);
            said += 1;
        }
        quiet = if loud { 0 } else { quiet + 1 };
    }
    mic.truncate(voice.len());
    assert!(said >= 3, "{said}");
    assert_eq!(
        changed_frames(&voice, &mic),
        0,
        "an echo path was found where none is: the person's words were changed"
    );
    // Speakers: the same voice coming back through a room is found and taken out.
    let total = voice.len() / frame;
    let changed = changed_frames(&voice, &Room::default().hear(&voice));
    assert!(changed * 2 > total, "{changed} of {total} frames");
}

/// The voice ducked (speech onsets while it plays) and the utterances heard over `mic` that are
/// not ignored, from its first frame, with the canceller `echo`; and what the canceller learned.
fn first_answer(mic: &[f32], echo: OfflineEcho) -> (usize, Vec<UtteranceReport>, Option<bool>) {
    let (ducks, mut heard, learned) = first_answer_opened(mic, echo);
    heard.retain(|r| !r.heard.ignored());
    (ducks, heard, learned)
}

/// [`first_answer`], with every utterance that opened, ignored or not.
fn first_answer_opened(
    mic: &[f32],
    mut echo: OfflineEcho,
) -> (usize, Vec<UtteranceReport>, Option<bool>) {
    let (ducks, heard) = heard_through(mic, Some(&mut echo), None);
    (ducks, heard, echo.learned())
}

#[test]
fn a_room_heard_before_is_remembered_and_the_first_answer_after_a_restart_does_not_duck() {
    // A canceller that knows nothing listens to its first answer's opening as it is, until it
    // hears the voice come back (a second or so). One that remembers the microphone hears the
    // voice come back cancels from the first word: its opening opens no utterance at all.
    // (The second answer's opening reads as not echoed at the canceller's first judgement,
    // in every room: a memory given up on one judgement ducked there.)
    // (The third's opening has a pause in it: early judgements reached back to it only at the
    // longest delays, read "no echo", and gave the memory up.)
    let answers = [
        speech(ANSWER).samples,
        fixtures::said(EGG, 1).expect("espeak-ng makes the fixture"),
        fixtures::said(WHALES, 9).expect("espeak-ng makes the fixture"),
    ];
    let (mut fresh, mut recalled) = (Vec::new(), Vec::new());
    for (a, answer) in answers.iter().enumerate() {
        for (i, room) in rooms().into_iter().enumerate() {
            let mic = room.hear(answer);
            let (ducks, opened, learned) = first_answer_opened(&mic, OfflineEcho::new(answer));
            fresh.push((a, i, ducks, opened.len()));
            assert_eq!(
                learned,
                Some(true),
                "answer {a}, room {i}: the echo was found"
            );
            let (ducks, heard, learned) = first_answer(&mic, OfflineEcho::recalling(answer, true));
            if ducks > 0 || !heard.is_empty() {
                recalled.push((a, i, ducks, shown(&heard)));
            }
            assert_eq!(
                learned,
                Some(true),
                "answer {a}, room {i}: the memory confirmed"
            );
        }
    }
    // (What the memory saves: a canceller that knows nothing hears its opening as an utterance.
    // Should it no longer, this test has nothing left to show.)
    assert!(
        fresh.iter().any(|(_, _, _, opened)| *opened > 0),
        "knowing nothing, the opening is heard: {fresh:?}"
    );
    assert!(recalled.is_empty(), "remembered: {recalled:?}");
}

#[test]
fn the_first_answer_a_canceller_ever_hears_on_speakers_neither_ducks_for_nor_asks_its_own_opening()
{
    // Knowing nothing of the room, the canceller lets the opening through as it was heard, and
    // the listener opens an utterance on it: the voice's own echo. Until the canceller knows
    // whether the voice comes back, such a start is not told, and the voice is not lowered for
    // it (it was, in every room: 51 of 50 first answers in the echo benchmark); and once it
    // knows that the voice comes back, with no one heard since, the utterance was that echo —
    // whisper wrote it as "The dice will totter what's built for the world.", too far from the
    // answer for the echo filter, and it was asked (36 of 50 in the benchmark).
    let answers = [
        (ANSWER, speech(ANSWER).samples),
        (
            EGG,
            fixtures::said(EGG, 1).expect("espeak-ng makes the fixture"),
        ),
    ];
    let mut wrong = Vec::new();
    for (a, (text, answer)) in answers.iter().enumerate() {
        for (i, room) in rooms().into_iter().enumerate() {
            // (The listener is told what the voice says, as the loop tells it.)
            let mut echo = OfflineEcho::new(answer);
            let (ducks, mut heard) =
                lowered_through(&room.hear(answer), Some(&mut echo), Some(text));
            heard.retain(|r| !r.heard.ignored());
            if !ducks.is_empty() || !heard.is_empty() {
                wrong.push((a, i, ducks, shown(&heard)));
            }
        }
    }
    assert!(wrong.is_empty(), "(answer, room, ducks, asked): {wrong:?}");
}

/// What is heard of "And what is the capital of Spain?" said half a second into the first
/// answer a canceller ever hears, over `mic` (what the microphone hears of the answer): the
/// frames the voice was lowered at, the utterances, what the canceller learned, and the frames
/// the question spans.
fn asked_over_the_first_answer(
    mut mic: Vec<f32>,
    answer: &[f32],
) -> (
    Vec<usize>,
    Vec<UtteranceReport>,
    Option<bool>,
    std::ops::Range<usize>,
) {
    let question = fixtures::said("And what is the capital of Spain?", 0).expect("espeak-ng");
    let at = 8_000;
    mix_into(&mut mic, &question, at);
    let mut echo = OfflineEcho::new(answer);
    let (ducks, heard) = lowered_through(&mic, Some(&mut echo), Some(ANSWER));
    (
        ducks,
        heard,
        echo.learned(),
        at / 320..(at + question.len()) / 320,
    )
}

#[test]
fn a_question_said_early_over_the_first_answer_lowers_the_voice_only_for_the_person() {
    // Headphones: the voice's first 300 ms bring nothing into the microphone, so the canceller
    // knows at once that no echo comes back, and the person is ducked for as they begin.
    let answer = speech(ANSWER).samples;
    let (ducks, heard, learned, question) =
        asked_over_the_first_answer(vec![0.0; answer.len()], &answer);
    assert_eq!(learned, Some(false), "no echo comes back");
    the_question_whole(&heard);
    assert!(
        ducks.len() == 1 && question.contains(&ducks[0]),
        "ducked once, while the question was said (frames {question:?}): {ducks:?}"
    );
    // Speakers: the opening comes back, and is heard as it is until the canceller knows the
    // room — the person talking over it keeps it from knowing until they stop. The voice is
    // never lowered for its own opening (it was, at its first syllable, before the question
    // began). What was said is not asked: it ended once the canceller knew the voice comes
    // back, with no one heard since, and whisper heard it mixed with the voice's opening ("The
    // diphals are what is the capital of the end of 80, 80, I'm it is about free."), as it
    // hears that opening alone — which would be asked as a question in most first answers.
    let (ducks, heard, learned, question) =
        asked_over_the_first_answer(Room::default().hear(&answer), &answer);
    assert_eq!(learned, Some(true), "the echo is found");
    assert!(
        heard.iter().all(|r| r.heard.ignored()),
        "{:?}",
        verdicts(&heard)
    );
    assert!(
        ducks.iter().all(|k| question.contains(k)),
        "lowered only while the question was said (frames {question:?}): {ducks:?}"
    );
}

#[test]
fn held_to_talk_over_the_first_answer_the_person_is_ducked_for_at_once_and_asked() {
    // The key held half a second into the first answer a canceller ever hears, on speakers:
    // whoever is heard while it is held is the person, before the canceller knows the room too.
    let answer = speech(ANSWER).samples;
    let question = fixtures::said("And what is the capital of Spain?", 0).expect("espeak-ng");
    let mut mic = Room::default().hear(&answer);
    let at = 8_000;
    mix_into(&mut mic, &question, at);
    let shared = Shared::default();
    shared.said(true, ANSWER);
    let mut listener = Listener::new(ListenMode::PushToTalk, whisper(), None, 0.5, shared.clone());
    let mut echo = OfflineEcho::new(&answer);
    let mic: Vec<i16> = mic.iter().map(|s| audio::to_i16(*s)).collect();
    let frames = audio::frames_of(&mic);
    let held = at / 320..(at + question.len()) / 320 + 10;
    let mut events = Vec::new();
    for (k, frame) in frames.iter().enumerate().take(held.end) {
        if held.contains(&k) {
            let heard =
                OfflineEcho::listen(Some(&mut echo), &mut listener, &shared, frame).unwrap();
            events.extend(heard.into_iter().map(|e| (k, e)));
        } else {
            echo.next(frame);
        }
    }
    events.extend(
        listener
            .finish()
            .unwrap()
            .into_iter()
            .map(|e| (held.end, e)),
    );
    let started: Vec<usize> = events
        .iter()
        .filter(|(_, e)| *e == ListenEvent::SpeechStarted)
        .map(|(k, _)| *k)
        .collect();
    assert!(
        started.len() == 1 && started[0] < held.start + 15,
        "told as the person began (frame {}): {started:?}",
        held.start
    );
    let asked: Vec<&UtteranceReport> = events
        .iter()
        .filter_map(|(_, e)| match e {
            ListenEvent::Heard(r) if !r.heard.ignored() => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(asked.len(), 1, "{events:?}");
    assert_eq!(asked[0].heard, Heard::Question, "{asked:?}");
}

#[test]
fn remembered_speakers_with_headphones_now_do_not_hold_back_a_question_said_over_the_voice() {
    // The memory said the voice comes back; nothing of it reaches the microphone now. The user
    // speaks two seconds into the answer and is heard whole; the memory is given up.
    let (answer, mic) = headphones_with_a_question();
    let (_, heard, learned) = first_answer(&mic, OfflineEcho::recalling(&answer, true));
    the_question_whole(&heard);
    assert_eq!(learned, Some(false), "no echo comes back now");
}

#[test]
fn jarvis_stop_said_over_its_voice_stops_it_however_whisper_spells_the_name() {
    // Whisper tiny.en seldom spells the name ("Jaram is stop", "Darn this, stop!"), and the
    // canceller holds back a word's first sound ("Jarvis, top."): the address and the stop are
    // known by their sound (`voice::alike`). Before, none of the bench's two was a stop.
    let mut heard_as = Vec::new();
    for (i, room) in rooms().into_iter().enumerate() {
        heard_as.push((i, said_over_the_voice("Jarvis, stop.", i, &room)));
    }
    let stopped = heard_as
        .iter()
        .filter(|(_, heard)| heard.iter().any(|t| t.starts_with("Stop ")))
        .count();
    // (5 of 6 here: room 4's came back "Jara, this is the star".)
    assert!(stopped >= 4, "{heard_as:?}");
}

/// The loop tests' room at real time ([`fixtures::RoomEcho`] between a [`Recorder`] and a
/// [`FeedSource`]) is a room: the echo of what played reaches the microphone whole, however late
/// the recorder reports it (in blocks, every few milliseconds). Before the microphone handed its
/// frames over after they ended, the echo's direct sound was mostly lost — 4 dB and more of it
/// — and what came through was no linear echo of what played.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loop_tests_room_brings_back_the_whole_echo_of_what_played() {
    use jarvis::voice::{AudioSink, AudioSource, FeedSource, Recorder};
    // (The nearest of the rooms: its echo 20 ms late.)
    let room = Room {
        delay_ms: 20,
        noise_dbfs: -120.0,
        ..Room::default()
    };
    let (source, feed) = FeedSource::with(0.0, 1.0);
    let source = source.with_latency(3);
    let recorder = Recorder::new(SAMPLE_RATE);
    recorder.tap(std::sync::Arc::new(fixtures::RoomEcho::new(
        &room,
        feed.clone(),
    )));
    let mut capture = source.open().unwrap();
    while feed.opened_at().is_none() {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    // A second of noise, as loud as a voice.
    let mut seed = 7_u32;
    let played: Vec<f32> = (0..SAMPLE_RATE)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            (seed as f32 / u32::MAX as f32 - 0.5) * 0.5
        })
        .collect();
    recorder
        .play(Clip {
            samples: played.clone(),
            rate: SAMPLE_RATE,
        })
        .unwrap();
    // The second played, its reverberation and the microphone's latency: 2 s in all.
    let mut heard = Vec::new();
    while heard.len() < 2 * SAMPLE_RATE as usize {
        heard.extend(capture.frames.recv().await.expect("the microphone is open"));
    }
    let energy = |x: &[f32]| x.iter().map(|s| f64::from(*s).powi(2)).sum::<f64>();
    let echo = energy(&fixtures::convolve(&played, &room.impulse_response()));
    let came_back = energy(&audio::to_f32(&heard));
    let db = 10.0 * (came_back / echo).log10();
    assert!(
        db.abs() < 1.0,
        "the echo came back {db:.1} dB against what the room makes of what played"
    );
}
