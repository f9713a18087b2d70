//! The end of a turn, measured on questions of our own making through the real listener, whisper
//! tiny.en behind the speech detector, and the end-of-turn model — three ways in the same run:
//! - fixed: 300 ms of quiet ends every utterance (the listener as it was: the baseline);
//! - words: a pause asks after 300 ms, and words that cannot end a sentence wait up to 1.5 s;
//! - words + model: a pause asks after 200 ms; the words first, then Smart Turn v3.2.
//!
//! Figures: how many of 20 questions said with a pause mid-sentence (0.4–0.9 s, where people
//! pause: after the word that leads to the meaning) are cut in two, in four voices (three of
//! espeak-ng's and Piper's); the same for six questions paused where the words could end; how
//! long after its last word a finished question is ended (median; the answer cannot start
//! earlier); and the model's cost per judgement.
//!
//! Run: `cargo bench --bench turn` (`-- shipped`: the way that ships alone, a third of the time)

use std::sync::Arc;
use std::time::Instant;

use jarvis::config::{Config, ListenMode, SpeechModel};
use jarvis::voice::listen::Shared;
use jarvis::voice::{
    fixtures, models, Espeak, Heard, Listener, SegmenterSettings, Synthesizer, Transcriber,
    TurnJudge,
};

fn model_dir() -> std::path::PathBuf {
    match std::env::var("JARVIS_TEST_MODELS") {
        Ok(dir) => dir.into(),
        Err(_) => {
            Config::installed_model_dir(&|k| std::env::var(k).ok()).expect("a home directory")
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Way {
    Fixed,
    Words,
    Model,
}

impl Way {
    fn name(self) -> &'static str {
        match self {
            Way::Fixed => "fixed 300 ms (before)",
            Way::Words => "words",
            Way::Model => "words + model",
        }
    }
}

/// Each utterance heard: (verdict, text, ms from its last voiced frame to its end).
fn heard(
    transcriber: &Arc<dyn Transcriber>,
    turn: &TurnJudge,
    way: Way,
    sound: &[f32],
) -> Vec<(Heard, String, u64)> {
    let listener = Listener::new(
        ListenMode::HandsFree,
        transcriber.clone(),
        None,
        0.5,
        Shared::default(),
    );
    let mut listener = match way {
        Way::Fixed => listener.with_settings(SegmenterSettings::fixed_hangover(15)),
        Way::Words => listener.with_turn(TurnJudge::default()),
        Way::Model => listener.with_turn(turn.clone()),
    };
    listener
        .hear_all(&fixtures::in_quiet_room(sound))
        .expect("the listener")
        .into_iter()
        .filter(|r| !r.heard.ignored())
        .map(|r| (r.heard, r.text, r.end_ms - r.last_voiced_ms))
        .collect()
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

fn main() {
    let models = model_dir();
    let whisper = models::load_whisper(&models, SpeechModel::TinyEn, 2).expect("whisper tiny.en");
    let (transcriber, ungated) = models::speech_gate(&models, Arc::new(whisper));
    assert!(ungated.is_none(), "the speech detector: {ungated:?}");
    let (turn, missing) = models::turn_judge(&models);
    assert!(missing.is_none(), "the end-of-turn model: {missing:?}");
    let piper = models::load_piper(&models, 175)
        .expect("Piper's voice (scripts/models voice)")
        .steady();
    let voices: Vec<(&str, Box<dyn Synthesizer>)> = vec![
        ("espeak en-us", Box::new(Espeak::new("en-us", 175))),
        ("espeak en-gb+m3", Box::new(Espeak::new("en-gb+m3", 150))),
        ("espeak en-us+f3", Box::new(Espeak::new("en-us+f3", 200))),
        ("Piper", Box::new(piper)),
    ];
    let pauses = [400, 500, 600, 700, 800, 900];
    let ways: Vec<Way> = if std::env::args().any(|a| a == "shipped") {
        vec![Way::Model]
    } else {
        vec![Way::Fixed, Way::Words, Way::Model]
    };

    println!("| way | voice | cut in two: 20 paused where a sentence cannot end | 6 paused where it could | a finished question ended after its last word (median, ms) |");
    println!("|---|---|---|---|---|");
    let mut totals = vec![(0, 0); ways.len()];
    for (voice, synth) in &voices {
        // Each question of `set` said with its pause, the pauses taken in turn.
        let paused = |set: &[(&str, &str)]| -> Vec<(String, Vec<f32>)> {
            set.iter()
                .zip(pauses.iter().cycle())
                .map(|((a, b), ms)| {
                    (
                        format!("{a} … ({ms} ms) {b}"),
                        fixtures::hesitant(a, *ms, b, synth.as_ref()).expect("the voice"),
                    )
                })
                .collect()
        };
        let hesitant = paused(fixtures::HESITATIONS);
        let at_a_whole = paused(fixtures::HESITATIONS_AT_A_WHOLE);
        let finished: Vec<Vec<f32>> = fixtures::HESITATIONS
            .iter()
            .chain(fixtures::HESITATIONS_AT_A_WHOLE)
            .step_by(2)
            .map(|(a, b)| {
                synth
                    .synthesize(&format!("{a} {b}"))
                    .and_then(|c| c.resampled(jarvis::voice::SAMPLE_RATE))
                    .expect("the voice")
                    .samples
            })
            .collect();
        for (i, way) in ways.iter().enumerate() {
            let split = |set: &[(String, Vec<f32>)]| {
                set.iter()
                    .filter(|(what, sound)| {
                        let got = heard(&transcriber, &turn, *way, sound);
                        let cut = got.len() != 1;
                        if cut {
                            eprintln!("{}: {what} in {voice} → {got:?}", way.name());
                        }
                        cut
                    })
                    .count()
            };
            let (hanging, whole) = (split(&hesitant), split(&at_a_whole));
            let ended: Vec<u64> = finished
                .iter()
                .flat_map(|sound| heard(&transcriber, &turn, *way, sound))
                .map(|(_, _, held)| held)
                .collect();
            totals[i].0 += hanging;
            totals[i].1 += whole;
            println!(
                "| {} | {voice} | {hanging} | {whole} | {} |",
                way.name(),
                median(ended)
            );
        }
    }
    for (i, way) in ways.iter().enumerate() {
        println!(
            "| {} | all four | {} of 80 | {} of 24 | |",
            way.name(),
            totals[i].0,
            totals[i].1
        );
    }

    // The model's cost per judgement: features and inference on the last 8 s.
    let model = models::load_smart_turn(&models).expect("the end-of-turn model");
    let sound = fixtures::said("Book a table for four people at eight.", 0).expect("espeak-ng");
    let runs = 30;
    let started = Instant::now();
    for _ in 0..runs {
        model.probability(&sound).expect("a judgement");
    }
    let per = started.elapsed() / runs;
    let features = jarvis::voice::turn::Features::new();
    let started = Instant::now();
    for _ in 0..runs {
        std::hint::black_box(features.of(&sound));
    }
    println!(
        "\nend-of-turn model: {:.1} ms a judgement (of which the features {:.1} ms), one thread",
        per.as_secs_f64() * 1000.0,
        (started.elapsed() / runs).as_secs_f64() * 1000.0
    );
}
