//! The real-device path: a private PulseAudio server (a null sink as the speaker, a pipe source as
//! the microphone) gives cpal and rodio real devices to open. A question is said into the pipe at
//! real time, heard through cpal, answered by the stub, and played through rodio into the null
//! sink, whose monitor is recorded with `parec` to check that sound came out — and came out at a
//! fifth of its level while the user spoke over it.

mod support;

use std::sync::Arc;
use std::time::Duration;

use jarvis::config::BackendKind;
use jarvis::service::ListenMode;
use jarvis::voice::device::{CpalSource, RodioSink};
use jarvis::voice::fixtures;
use jarvis::voice::pipeline::VoiceOptions;
use jarvis::voice::pulse::{self, Pulse};
use jarvis::voice::{
    audio::PlaybackTap, models, AudioSink, Clip, Espeak, Heard, VoiceError, VoiceLoop, VoiceParts,
};
use jarvis::{ReplyState, Service};
use jarvis_stub::{Script, Stub};
use support::*;

fn speech(text: &str) -> Vec<i16> {
    fixtures::speech(text)
        .unwrap()
        .then(&fixtures::silence(600))
        .to_i16()
}

/// Tests that open devices in this process take turns: one of them points the process's
/// `PULSE_SERVER` at its own server, which must not change under another one reading it.
static IN_PROCESS_AUDIO: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// What was handed to the real speaker, volume applied, as the echo canceller's reference
/// receives it: the one time line on which the ducking can be read whatever the machine's load
/// does to the device's buffer (a recording of the sink's monitor drifts from it under load).
#[derive(Default)]
struct Handed {
    samples: std::sync::Mutex<(Vec<f32>, u32)>,
}

impl Handed {
    /// How much has been handed over so far.
    fn position(&self) -> Duration {
        let handed = self.samples.lock().unwrap();
        Duration::from_secs_f64(handed.0.len() as f64 / f64::from(handed.1.max(1)))
    }

    /// The loudest sample of each 100 ms handed over.
    fn levels(&self) -> Vec<f32> {
        let handed = self.samples.lock().unwrap();
        let window = (handed.1 as usize / 10).max(1);
        handed
            .0
            .chunks(window)
            .map(|c| c.iter().fold(0.0_f32, |m, s| m.max(s.abs())))
            .collect()
    }
}

impl PlaybackTap for Handed {
    fn played(&self, samples: &[f32], rate: u32, _at: std::time::Instant) {
        let mut handed = self.samples.lock().unwrap();
        handed.0.extend_from_slice(samples);
        handed.1 = rate;
    }
}

/// The real speaker, with each volume change noted at the point of what had been handed over:
/// where the loop ducked and raised the voice again.
struct VolumeLog {
    sink: RodioSink,
    handed: Arc<Handed>,
    changes: std::sync::Mutex<Vec<(Duration, f32)>>,
}

impl VolumeLog {
    fn open() -> VolumeLog {
        let sink = RodioSink::open().expect("rodio opens the null sink");
        let handed = Arc::new(Handed::default());
        sink.tap(handed.clone());
        VolumeLog {
            sink,
            handed,
            changes: Default::default(),
        }
    }

    /// The stretches (of what was handed over) the voice spent below full volume.
    fn ducked(&self) -> Vec<(Duration, Duration)> {
        let mut spans = Vec::new();
        let mut from = None;
        for (at, volume) in self.changes.lock().unwrap().iter() {
            match (from, *volume < 1.0) {
                (None, true) => from = Some(*at),
                (Some(start), false) => {
                    spans.push((start, *at));
                    from = None;
                }
                _ => {}
            }
        }
        spans
    }
}

impl AudioSink for VolumeLog {
    fn play(&self, clip: Clip) -> Result<(), VoiceError> {
        self.sink.play(clip)
    }
    fn set_volume(&self, volume: f32) {
        self.changes
            .lock()
            .unwrap()
            .push((self.handed.position(), volume));
        self.sink.set_volume(volume)
    }
    fn clear(&self) {
        self.sink.clear()
    }
    fn played(&self) -> Duration {
        self.sink.played()
    }
    fn is_playing(&self) -> bool {
        self.sink.is_playing()
    }
    fn tap(&self, tap: Arc<dyn PlaybackTap>) {
        self.sink.tap(tap)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_said_into_a_real_microphone_is_answered_aloud_on_a_real_speaker_and_ducked_under_speech(
) {
    let _turn = IN_PROCESS_AUDIO.lock().await;
    let pulse =
        Pulse::start().expect("a PulseAudio server (scripts/setup --deps --test installs it)");
    // This test binary talks to this server only.
    std::env::set_var("PULSE_SERVER", pulse.server());
    let stub = Stub::start().await.unwrap();
    let answer =
        "Paris is the capital of France. It lies on the river Seine in the north of the country. \
                  Paris has been a centre of art, fashion and science for centuries. \
                  Its museums hold some of the most famous paintings in the world.";
    stub.push(
        Script::text(answer)
            .deltas_of(8)
            .paced(Duration::from_millis(30)),
    );
    stub.push(Script::text("Berlin."));
    let dir = Dir::new();
    let mut settings = settings(BackendKind::Anthropic, &stub);
    settings.voice.mode = ListenMode::HandsFree;
    let config = dir.config(settings);
    let backend =
        jarvis::llm::from_config(&config, &env_with(&[("ANTHROPIC_API_KEY", "test-key")])).unwrap();
    let service = Service::start(
        dir.store(),
        backend,
        jarvis::ServiceOptions::from_settings(&config.settings),
    );

    let sink = Arc::new(VolumeLog::open());
    let whisper =
        models::load_whisper(&model_dir(), jarvis::config::SpeechModel::TinyEn, 2).unwrap();
    let parts = VoiceParts {
        source: Arc::new(CpalSource::default()),
        sink: sink.clone(),
        transcriber: Arc::new(whisper),
        synthesizer: Arc::new(Espeak::default()),
        wake: None,
        turn: jarvis::voice::TurnJudge::default(),
    };
    let voice = Voice::new(VoiceLoop::start(
        service.clone(),
        parts,
        VoiceOptions::default(),
    ));
    let mut heard = voice.heard();
    let _orb = service.voice_attach().await.unwrap();
    service.set_listening(true).await.unwrap();
    let recorder = pulse.record_speaker().unwrap();

    pulse.say(&speech("What is the capital of France?"));
    let report = tokio::time::timeout(LIMIT, heard.recv())
        .await
        .expect("heard through cpal")
        .unwrap();
    assert_eq!(report.heard, Heard::Question, "{report:?}");
    assert!(report.text.to_lowercase().contains("capital"), "{report:?}");
    eventually("Jarvis to speak", || {
        sink.played() > Duration::from_millis(1500)
    })
    .await;
    // Speak over it.
    pulse.say(&speech("What is the capital of Germany?"));
    let over = tokio::time::timeout(LIMIT, heard.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(over.heard, Heard::Question);
    eventually("the first reply to be answered", || {
        service
            .store()
            .replies(service.voice_status().borrow().chat.unwrap())
            .unwrap()
            .len()
            == 2
    })
    .await;
    eventually("the answers to be spoken", || !sink.is_playing()).await;
    let levels = match recorder
        .until(LIMIT, |l| pulse::played_and_quiet(l, 3))
        .await
    {
        Ok(levels) => levels,
        Err(levels) => panic!("what was played did not end in silence: {levels:?}"),
    };
    recorder.stop();
    assert!(
        pulse::loud(&levels) >= 10,
        "the speaker played a second or more of sound: {levels:?}"
    );
    // While the user spoke, what went to the speaker dropped to about a fifth: from the
    // speech's onset to its end. A volume change takes effect with the next block the device
    // pulls, so the edges of the stretch are left out.
    let levels_handed = sink.handed.levels();
    let window = |from: Duration, to: Duration| {
        let a = (from.as_millis() / 100) as usize;
        let b = ((to.as_millis() / 100) as usize).min(levels_handed.len());
        levels_handed[a.min(b)..b]
            .iter()
            .map(|l| f64::from(*l))
            .collect::<Vec<_>>()
    };
    let spans = sink.ducked();
    let &(duck, raise) = spans
        .first()
        .expect("the voice was ducked while the user spoke");
    assert_eq!(
        spans.len(),
        1,
        "ducked once, for the one question: {spans:?}"
    );
    assert!(
        raise - duck >= Duration::from_millis(1200),
        "ducked for the whole question, not a moment of it: {spans:?}"
    );
    let normal = window(Duration::ZERO, duck);
    let ducked = window(
        duck + Duration::from_millis(300),
        raise.saturating_sub(Duration::from_millis(300)),
    );
    let peak = |v: &[f64]| v.iter().cloned().fold(0.0, f64::max);
    assert!(!ducked.is_empty(), "the user spoke over it for a while");
    assert!(
        peak(&ducked) < peak(&normal) * 0.35,
        "ducked peak {} vs normal {} ({spans:?})",
        peak(&ducked),
        peak(&normal)
    );
    assert!(
        peak(&ducked) > peak(&normal) * 0.05,
        "ducked, not cut: {} vs normal {}",
        peak(&ducked),
        peak(&normal)
    );
    let replies = service
        .store()
        .replies(service.voice_status().borrow().chat.unwrap())
        .unwrap();
    assert!(replies.iter().all(|r| r.state == ReplyState::Done));
    drop(voice);
    drop(pulse);
}

#[tokio::test(flavor = "multi_thread")]
async fn doctor_lists_the_microphones_and_says_when_the_chosen_one_is_not_connected() {
    let pulse =
        Pulse::start().expect("a PulseAudio server (scripts/setup --deps --test installs it)");
    let dir = Dir::new();
    let microphone_line = |settings: &'static str| {
        std::fs::write(dir.path().join("settings.toml"), settings).unwrap();
        let mut cmd = jarvis(&dir);
        cmd.env("PULSE_SERVER", pulse.server()).arg("doctor");
        async move {
            let (_, report, log) = output(&mut cmd).await;
            // Closing the sound server's connection is not an error.
            assert!(!log.contains("ERROR"), "{log}");
            report
                .lines()
                .find(|l| l.starts_with("microphone: "))
                .unwrap_or_else(|| panic!("no microphone line: {report}"))
                .to_string()
        }
    };
    let line = microphone_line("# the defaults\n").await;
    assert!(
        line.starts_with("microphone: the system default (Unix FIFO source ")
            && line.ends_with("mic.fifo, Monitor of Null Output"),
        "{line}"
    );
    let line = microphone_line("[voice]\ninput_device = \"Desk Mic\"\n").await;
    assert!(
        line.starts_with(
            "microphone: \"Desk Mic\", not connected: choose another in Settings; found: Unix FIFO source "
        ),
        "{line}"
    );
    let line = microphone_line("[voice]\ninput_device = \"Monitor of Null Output\"\n").await;
    assert!(
        line.starts_with("microphone: \"Monitor of Null Output\"; found: "),
        "{line}"
    );
}

/// A hands-free voice loop listening through `source` (no speech is expected: whisper is never
/// loaded), with the orb attached; it keeps the stub and the data folder alive.
struct Listening {
    service: Service,
    voice: Voice,
    _orb: jarvis::service::VoiceAttachment,
    _stub: Stub,
    _dir: Dir,
}

impl Listening {
    async fn start(source: CpalSource) -> Listening {
        let stub = Stub::start().await.unwrap();
        let dir = Dir::new();
        let mut settings = settings(BackendKind::Anthropic, &stub);
        settings.voice.mode = ListenMode::HandsFree;
        let service = service(&dir, settings);
        let parts = VoiceParts {
            source: Arc::new(source),
            sink: Arc::new(jarvis::voice::Recorder::new(22_050)),
            transcriber: Arc::new(
                jarvis::voice::LazyWhisper::new(
                    &model_dir().join(jarvis::config::SpeechModel::TinyEn.file_name()),
                    1,
                )
                .unwrap(),
            ),
            synthesizer: Arc::new(Espeak::default()),
            wake: None,
            turn: jarvis::voice::TurnJudge::default(),
        };
        let voice = Voice::new(VoiceLoop::start(
            service.clone(),
            parts,
            VoiceOptions::default(),
        ));
        let orb = service.voice_attach().await.unwrap();
        service.set_listening(true).await.unwrap();
        Listening {
            service,
            voice,
            _orb: orb,
            _stub: stub,
            _dir: dir,
        }
    }

    /// A private PulseAudio server, and the loop listening through its default microphone
    /// (this process's `PULSE_SERVER` points at it: hold `IN_PROCESS_AUDIO`).
    async fn on_a_private_server() -> (Pulse, Listening) {
        let pulse =
            Pulse::start().expect("a PulseAudio server (scripts/setup --deps --test installs it)");
        std::env::set_var("PULSE_SERVER", pulse.server());
        let listening = Listening::start(CpalSource::default()).await;
        listening.opened(&pulse).await;
        (pulse, listening)
    }

    /// Waits until the microphone is open on `pulse`, with no problem.
    async fn opened(&self, pulse: &Pulse) {
        // Open once the server has a recording stream — and a moment later, when opening is done.
        let server = pulse.server();
        eventually("the microphone to open", || {
            std::process::Command::new("pactl")
                .env("PULSE_SERVER", &server)
                .args(["list", "short", "source-outputs"])
                .output()
                .is_ok_and(|o| !o.stdout.is_empty())
        })
        .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(self.voice.problems().borrow().is_none());
        assert!(self.service.voice_status().borrow().listening);
    }

    /// The problem the loop reports next; then checks that listening turned off.
    async fn problem(&self) -> String {
        let mut problems = self.voice.problems();
        let problem = tokio::time::timeout(LIMIT, problems.wait_for(|p| p.is_some()))
            .await
            .expect("the problem is reported")
            .unwrap()
            .clone()
            .unwrap();
        // The status says what is true: the microphone is not open.
        let mut status = self.service.voice_status();
        tokio::time::timeout(LIMIT, status.wait_for(|s| !s.listening))
            .await
            .expect("listening turned off")
            .unwrap();
        problem
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_microphone_that_is_not_connected_is_reported_and_listening_turns_off() {
    let _turn = IN_PROCESS_AUDIO.lock().await;
    // Whatever sound server this process sees, it has no device by this name.
    let listening = Listening::start(CpalSource {
        device: Some("Desk Mic".into()),
    })
    .await;
    let problem = listening.problem().await;
    assert!(
        problem.contains("\"Desk Mic\" is not connected") && problem.contains("Settings"),
        "{problem}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn when_the_sound_server_goes_away_while_listening_the_microphone_is_shown_off_with_the_reason(
) {
    let _turn = IN_PROCESS_AUDIO.lock().await;
    let (pulse, listening) = Listening::on_a_private_server().await;
    drop(pulse);
    // cpal reports the server's end when it notices it (also when the microphone was still
    // opening); otherwise the silence gives it away.
    let problem = listening.problem().await;
    assert!(
        problem.ends_with("PulseAudio disconnected")
            || problem == "the microphone stopped sending sound",
        "{problem}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_microphone_that_stops_sending_sound_is_shown_off_with_the_reason() {
    let _turn = IN_PROCESS_AUDIO.lock().await;
    let (pulse, listening) = Listening::on_a_private_server().await;
    pulse.freeze_microphone();
    let frozen = std::time::Instant::now();
    assert_eq!(
        listening.problem().await,
        "the microphone stopped sending sound"
    );
    assert!(
        frozen.elapsed() >= Duration::from_secs(2),
        "not before it had been quiet a while"
    );
}
