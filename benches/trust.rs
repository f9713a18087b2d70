//! Transcripts that can be trusted, measured on sounds of our own making through the real
//! listener and whisper tiny.en, three ways in the same run:
//! - before: whisper alone, one greedy decoding (the listener as it was: the baseline);
//! - safeguards: whisper's own checks (average log-probability, repetition, no-speech
//!   probability) with the temperature fallback;
//! - gated: the speech detector (Silero VAD) first, then whisper with its safeguards (what the
//!   voice loop and `jarvis listen` run).
//!
//! Figures: questions made of 20 noise bursts (hiss, thump, beep; 0.15–0.9 s; goal 0), and how
//! many of 45 spoken items (three stop phrases and two questions, each in nine voices) are still
//! judged right; then the detector's cost per second of audio; then how long whisper (with its
//! safeguards) takes on questions cut mid-word or just after their last word — where it is
//! unsure and falls back to warmer decodings — with each decoding capped at what a person could
//! have said, and without the cap (the baseline).
//!
//! Run: `cargo bench --bench trust`

use std::sync::Arc;
use std::time::Instant;

use jarvis::config::{Config, SpeechModel};
use jarvis::voice::silero::SpeechGate;
use jarvis::voice::{fixtures, models, Heard, Transcriber};

fn model_dir() -> std::path::PathBuf {
    match std::env::var("JARVIS_TEST_MODELS") {
        Ok(dir) => dir.into(),
        Err(_) => {
            Config::installed_model_dir(&|k| std::env::var(k).ok()).expect("a home directory")
        }
    }
}

fn verdicts(transcriber: &Arc<dyn Transcriber>, sound: &[f32]) -> Vec<(Heard, String)> {
    fixtures::judged(transcriber, &jarvis::voice::TurnJudge::default(), sound)
        .expect("the listener")
}

fn main() {
    let models = model_dir();
    let whisper = |safeguards: bool| -> Arc<dyn Transcriber> {
        let w = models::load_whisper(&models, SpeechModel::TinyEn, 2).expect("whisper tiny.en");
        Arc::new(if safeguards {
            w
        } else {
            w.without_safeguards()
        })
    };
    let ways: Vec<(&str, Arc<dyn Transcriber>)> = vec![
        ("before", whisper(false)),
        ("safeguards", whisper(true)),
        (
            "gated",
            Arc::new(SpeechGate::new(
                whisper(true),
                models::load_silero(&models).expect("the speech detector (scripts/models voice)"),
            )),
        ),
    ];

    let bursts = fixtures::noise_bursts();
    let piper = models::load_piper(&models, 175).expect("Piper's voice (scripts/models voice)");
    let mut spoken = Vec::new();
    for (text, want) in [
        ("Stop.", Heard::Stop),
        ("Stop it.", Heard::Stop),
        ("Never mind.", Heard::Stop),
        ("What time is it in Tokyo?", Heard::Question),
        ("Turn the lights off.", Heard::Question),
    ] {
        for (voice, samples) in fixtures::voices(text, &piper).expect("the voices") {
            spoken.push((text, voice, want, samples));
        }
    }

    println!(
        "| way | questions made of {} noise bursts | spoken items judged right (of {}) |",
        bursts.len(),
        spoken.len()
    );
    println!("|---|---|---|");
    for (name, transcriber) in &ways {
        let mut made = Vec::new();
        for (kind, ms, clip) in &bursts {
            for (heard, text) in verdicts(transcriber, &clip.samples) {
                if !heard.ignored() {
                    made.push(format!("{kind:?} {ms} ms → {text:?}"));
                }
            }
        }
        let mut right = 0;
        for (text, voice, want, samples) in &spoken {
            let got = verdicts(transcriber, samples);
            if got.len() == 1 && got[0].0 == *want {
                right += 1;
            } else {
                eprintln!("{name}: {text} in {voice} → {got:?}");
            }
        }
        for m in &made {
            eprintln!("{name}: {m}");
        }
        println!("| {name} | {} | {right} |", made.len());
    }

    let detector = models::load_silero(&models).expect("the speech detector");
    let audio: Vec<f32> = spoken.iter().flat_map(|s| s.3.iter().copied()).collect();
    let seconds = audio.len() as f64 / 16_000.0;
    let start = Instant::now();
    detector.probabilities(&audio).expect("the detector runs");
    let took = start.elapsed().as_secs_f64();
    println!(
        "speech detector: {:.0} µs per second of audio ({:.2} % of one core while it judges), over {seconds:.0} s",
        took * 1e6 / seconds,
        took * 100.0 / seconds
    );

    println!("\n## whisper on questions cut short (4 questions x 10 voices x 5 cuts)");
    let capped = models::load_whisper(&models, SpeechModel::TinyEn, 2).expect("whisper tiny.en");
    let uncapped = models::load_whisper(&models, SpeechModel::TinyEn, 2)
        .expect("whisper tiny.en")
        .without_token_cap();
    let mut clips = Vec::new();
    for text in [
        "Who wrote Pride and Prejudice?",
        "What is the weather like in Paris tomorrow?",
        "Set a timer for ten minutes.",
        "How tall is Mount Everest?",
    ] {
        for variant in 0..10 {
            let said = fixtures::said(text, variant).expect("espeak-ng");
            // Where the voice ends: the last 10 ms louder than -45 dBFS.
            let end = said
                .chunks(160)
                .rposition(|c| audio_rms(c) > 0.0056)
                .map_or(said.len(), |k| (k + 1) * 160);
            for cut_ms in [-200_i64, -120, -60, 0, 100] {
                let to = (end as i64 + cut_ms * 16).max(1600) as usize;
                let mut clip = said[..to.min(said.len())].to_vec();
                clip.resize(to, 0.0);
                clips.push(clip);
            }
        }
    }
    println!("| decodings | mean | slowest |");
    println!("|---|---|---|");
    for (name, whisper) in [
        ("capped", &capped),
        ("to whisper's limit (before)", &uncapped),
    ] {
        let mut times: Vec<f64> = clips
            .iter()
            .map(|clip| {
                let start = Instant::now();
                whisper.transcribe(clip).expect("whisper runs");
                start.elapsed().as_secs_f64()
            })
            .collect();
        times.sort_by(f64::total_cmp);
        println!(
            "| {name} | {:.0} ms | {:.0} ms |",
            times.iter().sum::<f64>() * 1000.0 / times.len() as f64,
            times[times.len() - 1] * 1000.0
        );
    }
}

fn audio_rms(samples: &[f32]) -> f32 {
    (samples.iter().map(|s| s * s).sum::<f32>() / samples.len().max(1) as f32).sqrt()
}
