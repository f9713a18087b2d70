//! Voice benchmarks, on the real models (`scripts/models voice`):
//! - whisper's real-time factor on 2-second utterances, 2 threads (goal ≤ 0.10), against the
//!   same model with its full 30 s audio context as the baseline, in the same run;
//! - the voice turn overhead: from the last voiced frame of a spoken question to the first
//!   sample of its answer reaching the sink, with a backend whose first token is immediate
//!   (goal: median ≤ 500 ms), with its parts (the hangover that ends the utterance,
//!   transcription, the first sentence's synthesis);
//! - the CPU of idle wake-word listening, alone and behind the echo canceller and the speech
//!   detector (goal ≤ 5 % of one core);
//! - noise robustness on the fixture set: replies cancelled by noise, fillers or echo (goal 0).
//!
//! Run: `cargo bench --bench voice`

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jarvis::config::{BackendKind, Config, Settings, SpeechModel};
use jarvis::service::ListenMode;
use jarvis::store::Store;
use jarvis::voice::listen::{ListenEvent, Shared};
use jarvis::voice::pipeline::VoiceOptions;
use jarvis::voice::{
    fixtures, models, stt, AudioSink, Clip, Espeak, FeedSource, Heard, Listener, Recorder,
    Synthesizer, Transcriber, VoiceLoop, VoiceParts, Whisper, SAMPLE_RATE,
};
use jarvis::{Service, ServiceOptions};
use jarvis_stub::{Script, Stub};

fn model_dir() -> PathBuf {
    match std::env::var("JARVIS_TEST_MODELS") {
        Ok(dir) => PathBuf::from(dir),
        Err(_) => {
            Config::installed_model_dir(&|k| std::env::var(k).ok()).expect("a home directory")
        }
    }
}

fn speech(text: &str) -> Clip {
    fixtures::speech(text).expect("espeak-ng")
}

use fixtures::silence;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

const QUESTIONS: [&str; 6] = [
    "What is the capital of France?",
    "Set a timer for ten minutes.",
    "How tall is Mount Everest?",
    "What time is it in Tokyo?",
    "Who wrote Pride and Prejudice?",
    "Turn off the kitchen lights.",
];

/// Exactly two seconds: the utterance, padded or cut.
fn two_seconds(text: &str) -> Vec<f32> {
    let mut s = speech(text).samples;
    s.resize(2 * SAMPLE_RATE as usize, 0.0);
    s
}

fn whisper_rtf(whisper: &Whisper) {
    println!("## Whisper tiny.en, 2-second utterances, 2 threads");
    let clips: Vec<Vec<f32>> = QUESTIONS.iter().map(|q| two_seconds(q)).collect();
    let _ = whisper.transcribe(&clips[0]); // warm up
    let mut sized = Vec::new();
    for _ in 0..3 {
        for clip in &clips {
            let t = Instant::now();
            whisper.transcribe(clip).unwrap();
            sized.push(t.elapsed().as_secs_f64());
        }
    }
    // Baseline: the same clips through the full 30 s context, as whisper does by default.
    let mut full = Vec::new();
    for clip in &clips {
        let t = Instant::now();
        jarvis::voice::stt::transcribe_with_ctx(whisper, clip, 1500).unwrap();
        full.push(t.elapsed().as_secs_f64());
    }
    let (sized, full) = (median(sized), median(full));
    println!(
        "audio_ctx sized to the clip ({}): median {:.0} ms, real-time factor {:.3}",
        stt::audio_ctx_for(clips[0].len()),
        sized * 1000.0,
        sized / 2.0
    );
    println!("audio_ctx 1500 (30 s, the default): median {:.0} ms, real-time factor {:.3} (×{:.1} slower)", full * 1000.0, full / 2.0, full / sized);
}

fn wake_cpu() {
    println!("\n## Idle wake-word listening");
    let factory = models::wake_factory(&model_dir()).unwrap();
    let mut detector = factory().unwrap();
    let minute = fixtures::quiet_room(60);
    let t = Instant::now();
    let mut best: f32 = 0.0;
    for frame in minute.chunks(320) {
        best = best.max(detector.feed(frame).unwrap());
    }
    let secs = t.elapsed().as_secs_f64();
    println!("60 s of a quiet room through the three models: {:.2} s of one core = {:.1} % of one core while listening (highest score {best:.3}, threshold 0.5)", secs, secs / 60.0 * 100.0);

    // The whole idle listening path, as the voice loop runs it on speakers: the echo canceller
    // (nothing playing), then the listener (the speech detector and the wake word).
    let mut canceller = jarvis::voice::echo::Canceller::new(40);
    let mut listener = Listener::new(
        ListenMode::Wake,
        Arc::new(NeverHeard),
        Some(factory().unwrap()),
        0.5,
        Shared::default(),
    );
    let nothing = vec![0.0_f32; 320];
    let t = Instant::now();
    let mut heard = 0;
    for frame in minute.chunks(320) {
        let cleaned = canceller.cancel(frame, &nothing);
        heard += listener
            .push_judged(&cleaned.frame, Some(&cleaned.judged))
            .unwrap()
            .len();
    }
    let secs = t.elapsed().as_secs_f64();
    println!("the same 60 s through the echo canceller, the speech detector and the wake word: {:.2} s of one core = {:.1} % of one core ({heard} events)", secs, secs / 60.0 * 100.0);
}

/// Idle listening transcribes nothing.
struct NeverHeard;

impl Transcriber for NeverHeard {
    fn transcribe(&self, _: &[f32]) -> Result<stt::Transcript, jarvis::voice::VoiceError> {
        panic!("a quiet room was transcribed")
    }
}

fn noise_robustness(whisper: Arc<Whisper>) {
    println!("\n## Noise robustness (the fixture set, said while Jarvis speaks)");
    let answer =
        "The capital of France is Paris. It lies on the river Seine in the north of the country.";
    let set: Vec<(&str, Clip)> = vec![
        ("cough", fixtures::cough()),
        ("door knock", fixtures::knock()),
        ("silence", silence(2000)),
        ("um", speech("Um.")),
        ("uh", speech("Uh.")),
        ("hmm", speech("Hmm.")),
        ("um, uh", speech("Um, uh.")),
        (
            "echo: first sentence",
            speech("The capital of France is Paris."),
        ),
        (
            "echo: second sentence",
            speech("It lies on the river Seine in the north of the country."),
        ),
        ("echo: a stretch", speech("in the north of the country")),
    ];
    let (mut cancelled, mut asked) = (0, 0);
    for (name, clip) in &set {
        let shared = Shared::default();
        shared.set_speaking(true);
        shared.said(true, answer);
        let mut listener = Listener::new(ListenMode::HandsFree, whisper.clone(), None, 0.5, shared);
        let audio = silence(300).then(clip).then(&silence(800));
        let mut verdicts = Vec::new();
        for frame in jarvis::voice::audio::frames_of(&audio.to_i16()) {
            for e in listener.push(&frame).unwrap() {
                if let ListenEvent::Heard(r) = e {
                    verdicts.push(r);
                }
            }
        }
        for e in listener.finish().unwrap() {
            if let ListenEvent::Heard(r) = e {
                verdicts.push(r);
            }
        }
        cancelled += verdicts.iter().filter(|r| r.heard == Heard::Stop).count();
        asked += verdicts
            .iter()
            .filter(|r| r.heard == Heard::Question)
            .count();
        let shown: Vec<String> = verdicts
            .iter()
            .map(|r| format!("{:?} {:?}", r.heard, r.text))
            .collect();
        println!(
            "| {name} | {} |",
            if shown.is_empty() {
                "nothing left the capture stage".into()
            } else {
                shown.join("; ")
            }
        );
    }
    println!("replies cancelled by noise, fillers or echo: {cancelled}; questions asked by mistake: {asked} (of {} fixtures)", set.len());
}

/// How the loop's turn ends and who speaks, for the turn overhead.
struct TurnWay {
    name: &'static str,
    synthesizer: Arc<dyn Synthesizer>,
    turn: jarvis::voice::TurnJudge,
    /// The quiet that asks whether the turn is over.
    pause_ms: f64,
    /// Whether the words are transcribed ahead of the pause (off: the baseline, as before).
    ahead: bool,
    rounds: usize,
    /// The questions asked, and the espeak-ng voice that says them.
    questions: &'static [&'static str],
    asker: &'static str,
    /// The answer, its first token immediate, and the first piece of it that is synthesised.
    answer: &'static str,
    first_piece: &'static str,
    /// Whether the answer streams as a model writes it (two characters every 40 ms, ~25
    /// Chinese tokens a second) rather than whole in its first delta.
    paced: bool,
}

/// A turn in English, as the questions are said and answered since issue 2.
const ENGLISH: (&[&str], &str, &str, &str) = (
    &QUESTIONS,
    "en-us",
    "Sure. Here is the answer you asked for.",
    "Sure.",
);

/// Chinese questions (issue 29), said by espeak-ng's Mandarin.
const CHINESE_QUESTIONS: [&str; 6] = [
    "明天北京的天气怎么样？",
    "帮我设一个十分钟的计时器。",
    "珠穆朗玛峰有多高？",
    "东京现在几点？",
    "谁写了红楼梦？",
    "把厨房的灯关掉。",
];

fn turn_overhead(whisper: Arc<Whisper>, way: TurnWay) {
    println!(
        "\n## Voice turn overhead (last voiced frame → first answer sample at the sink): {}",
        way.name
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let stub = Stub::start().await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut settings = Settings { backend: BackendKind::Openai, ..Settings::default() };
        settings.openai.base_url = stub.openai_url();
        settings.openai.requires_key = false;
        settings.voice.mode = ListenMode::HandsFree;
        let config = Config {
            path: dir.path().join("settings.toml"),
            file_found: false,
            data_dir: dir.path().to_path_buf(),
            settings,
        };
        let env = |name: &str| (name == "JARVIS_KEYRING").then(|| "off".to_string());
        let backend = jarvis::llm::from_config(&config, &env).unwrap();
        let store = Store::open(&dir.path().join("jarvis.db"), Duration::from_secs(5)).unwrap();
        let service = Service::start(store, backend, ServiceOptions::from_settings(&config.settings));
        let (source, feed) = FeedSource::new();
        let recorder = Recorder::new(22_050);
        let parts = VoiceParts {
            source: Arc::new(source),
            sink: Arc::new(recorder.clone()),
            transcriber: whisper.clone(),
            synthesizer: way.synthesizer.clone(),
            wake: None,
            turn: way.turn.clone(),
        };
        let options = VoiceOptions { transcribe_ahead: way.ahead, ..VoiceOptions::default() };
        let voice = VoiceLoop::start(service.clone(), parts, options);
        let mut heard = voice.heard();
        let _orb = service.voice_attach().await.unwrap();
        service.set_listening(true).await.unwrap();
        let (mut totals, mut stt_times, mut tts_times) = (Vec::new(), Vec::new(), Vec::new());
        let asker = Espeak::new(way.asker, 175);
        for round in 0..way.rounds {
            let question = way.questions[round % way.questions.len()];
            // First token immediate: the whole answer in one delta.
            stub.push(if way.paced {
                Script::text(way.answer).deltas_of(2).paced(Duration::from_millis(40))
            } else {
                Script::text(way.answer)
            });
            let clips_before = recorder.arrivals().len();
            let clip = asker.synthesize(question).unwrap().resampled(SAMPLE_RATE).unwrap();
            feed.say(&clip.clone().then(&silence(1500)));
            let report = loop {
                let r = heard.recv().await.unwrap();
                if r.heard == Heard::Question {
                    break r;
                }
            };
            let opened = feed.opened_at().unwrap();
            let last_voiced = opened + Duration::from_millis(report.last_voiced_ms);
            while recorder.arrivals().len() == clips_before {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            let first_sample = recorder.made() + recorder.arrivals()[clips_before].0;
            totals.push(first_sample.saturating_duration_since(last_voiced).as_secs_f64() * 1000.0);
            while recorder.is_playing() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            // (Measured alone, once the answer has played: not beside Piper making its next sentence.)
            let utterance = clip.samples.len() + 300 * 16 + 300 * 16;
            let mut padded = silence(300).then(&clip).samples;
            padded.resize(utterance, 0.0);
            let t = Instant::now();
            whisper.transcribe(&padded).unwrap();
            stt_times.push(t.elapsed().as_secs_f64() * 1000.0);
            let t = Instant::now();
            way.synthesizer.synthesize(way.first_piece).unwrap();
            tts_times.push(t.elapsed().as_secs_f64() * 1000.0);
            feed.until_quiet().await;
        }
        let hangover = way.pause_ms;
        println!("each round (ms): {:?}", totals.iter().map(|t| t.round() as i64).collect::<Vec<_>>());
        println!("rounds: {}; total median {:.0} ms (min {:.0}, max {:.0})", totals.len(), median(totals.clone()),
            totals.iter().cloned().fold(f64::MAX, f64::min), totals.iter().cloned().fold(0.0, f64::max));
        let stt = median(stt_times);
        // Ahead, the words are transcribed from 100 ms into the quiet, while the pause is waited for.
        let after_pause = if way.ahead { (100.0 + stt - hangover).max(0.0) } else { stt };
        let begun = if way.ahead { "begun 100 ms into the quiet" } else { "begun at the pause" };
        println!("parts: the pause {hangover:.0} ms (then the turn is judged), transcription median {stt:.0} ms ({begun}: ~{after_pause:.0} ms of it after the pause), first sentence synthesis median {:.0} ms; the rest (VAD, the end-of-turn model where it judges, service, stub over loopback, queueing) ~{:.0} ms",
            median(tts_times.clone()),
            median(totals) - hangover - after_pause - median(tts_times));
        drop(voice);
    });
}

fn main() {
    if let Ok(filter) = std::env::var("JARVIS_LOG") {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .init();
    }
    let models = model_dir();
    if std::env::args().any(|a| a == "chinese") {
        return chinese_turn(&models);
    }
    let whisper = Arc::new(
        models::load_whisper(&models, SpeechModel::TinyEn, 2).unwrap_or_else(|e| panic!("{e}")),
    );
    whisper_rtf(&whisper);
    wake_cpu();
    noise_robustness(whisper.clone());
    turn_overhead(
        whisper.clone(),
        TurnWay {
            name: "espeak-ng, a pause judged by its words after 300 ms (as before: a fixed 300 ms hangover for these questions)",
            synthesizer: Arc::new(Espeak::default()),
            turn: jarvis::voice::TurnJudge::default(),
            pause_ms: 300.0,
            ahead: true,
            rounds: 8,
            questions: ENGLISH.0,
            asker: ENGLISH.1,
            answer: ENGLISH.2,
            first_piece: ENGLISH.3,
            paced: false,
        },
    );
    let (turn, missing) = models::turn_judge(&models);
    assert!(missing.is_none(), "the end-of-turn model: {missing:?}");
    let piper: Arc<dyn Synthesizer> =
        Arc::new(models::load_piper(&models, 175).expect("Piper's voice (scripts/models voice)"));
    // The baseline first, in the same run: the words transcribed only once the pause asks.
    for ahead in [false, true] {
        turn_overhead(
            whisper.clone(),
            TurnWay {
                name: if ahead {
                    "Piper, a pause judged by its words and Smart Turn after 200 ms, the words transcribed ahead"
                } else {
                    "Piper, a pause judged by its words and Smart Turn after 200 ms, the words transcribed at the pause (baseline)"
                },
                synthesizer: piper.clone(),
                turn: turn.clone(),
                pause_ms: 200.0,
                ahead,
                rounds: 16,
                questions: ENGLISH.0,
                asker: ENGLISH.1,
                answer: ENGLISH.2,
                first_piece: ENGLISH.3,
                paced: false,
            },
        );
    }
}

/// Issue 29: end of speech → first audio in Chinese, its long first sentence spoken from its
/// first clause (`cargo bench --bench voice -- chinese`; Whisper base from `scripts/models
/// base`, set to Chinese; espeak-ng's Mandarin speaks, as the product does without a Piper voice
/// of the language). The answer streams as a model writes it; the baseline, in the same run, is
/// the same answer without its clause marks, so that its first piece is the whole sentence.
fn chinese_turn(models: &std::path::Path) {
    let language = jarvis::config::Language::Zh;
    let settings = jarvis::config::VoiceSettings {
        threads: 2,
        ..Default::default()
    };
    let whisper = Arc::new(
        models::whisper_for(models, &settings, language).unwrap_or_else(|e| panic!("{e}")),
    );
    let (turn, missing) = models::turn_judge(models);
    assert!(missing.is_none(), "the end-of-turn model: {missing:?}");
    const SPLIT: &str = "好的，明天北京晴转多云，最高气温二十二度，最低气温十三度，早晚温差较大，出门记得带一件外套。";
    const WHOLE: &str =
        "好的 明天北京晴转多云 最高气温二十二度 最低气温十三度 早晚温差较大 出门记得带一件外套。";
    for (name, answer, first_piece) in [
        ("Chinese, the answer without clause marks (baseline: its first piece is the whole sentence)", WHOLE, WHOLE),
        ("Chinese, the first clause spoken first", SPLIT, "好的，明天北京晴转多云，"),
    ] {
        let mut sentences = jarvis::voice::tts::Sentences::new();
        let mut first = None;
        for piece in answer.chars().collect::<Vec<_>>().chunks(2) {
            first = first.or_else(|| sentences.push(&piece.iter().collect::<String>()).into_iter().next());
        }
        let first = first.or_else(|| sentences.finish());
        assert_eq!(first.as_deref(), Some(first_piece), "the first piece spoken");
        turn_overhead(
            whisper.clone(),
            TurnWay {
                name,
                synthesizer: Arc::new(Espeak::new(language.espeak_voice(), 175)),
                turn: turn.clone(),
                pause_ms: 200.0,
                ahead: true,
                rounds: 12,
                questions: &CHINESE_QUESTIONS,
                asker: "cmn-latn-pinyin",
                answer,
                first_piece,
                paced: true,
            },
        );
    }
}
