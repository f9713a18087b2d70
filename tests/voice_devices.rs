//! The real-device path: a private PulseAudio server (a null sink as the speaker, a pipe source as
//! the microphone) gives cpal and rodio real devices to open. A question is said into the pipe at
//! real time, heard through cpal, answered by the stub, and played through rodio into the null
//! sink, whose monitor is recorded with `parec` to check that sound came out — and came out at a
//! fifth of its level while the user spoke over it.

mod support;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jarvis::config::BackendKind;
use jarvis::service::ListenMode;
use jarvis::voice::device::{CpalSource, RodioSink};
use jarvis::voice::pipeline::VoiceOptions;
use jarvis::voice::{
    models, AudioSink, Espeak, Heard, Synthesizer, VoiceLoop, VoiceParts, SAMPLE_RATE,
};
use jarvis::{ReplyState, Service};
use jarvis_stub::{Script, Stub};
use support::*;

/// A PulseAudio server of the test's own, stopped on drop.
struct Pulse {
    server: Child,
    dir: tempfile::TempDir,
}

impl Drop for Pulse {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}

impl Pulse {
    fn start() -> Pulse {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path();
        let script = format!(
            "load-module module-native-protocol-unix socket={socket} auth-anonymous=1\n\
             load-module module-null-sink sink_name=jarvis_out rate=22050 channels=1\n\
             load-module module-pipe-source source_name=jarvis_in file={fifo} format=s16le rate=16000 channels=1\n\
             set-default-sink jarvis_out\n\
             set-default-source jarvis_in\n",
            socket = path.join("native").display(),
            fifo = path.join("mic.fifo").display(),
        );
        std::fs::write(path.join("jarvis.pa"), script).unwrap();
        let server = Command::new("pulseaudio")
            .args([
                "-n",
                "--daemonize=no",
                "--exit-idle-time=-1",
                "--disallow-exit",
                "--log-target=stderr",
            ])
            .arg("-F")
            .arg(path.join("jarvis.pa"))
            .env("HOME", path)
            .env("XDG_RUNTIME_DIR", path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("pulseaudio runs (apt-get install pulseaudio; scripts/setup --deps --test)");
        let pulse = Pulse { server, dir };
        for _ in 0..100 {
            if pulse.socket().exists() && pulse.fifo().exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(
            pulse.socket().exists(),
            "the PulseAudio server did not start"
        );
        // This test binary talks to this server only.
        std::env::set_var("PULSE_SERVER", format!("unix:{}", pulse.socket().display()));
        pulse
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("native")
    }

    fn fifo(&self) -> PathBuf {
        self.dir.path().join("mic.fifo")
    }

    /// Writes into the microphone at real time: what `say` queues, silence otherwise.
    fn microphone(&self) -> (Arc<Mutex<Vec<i16>>>, Arc<AtomicBool>) {
        let queue = Arc::new(Mutex::new(Vec::<i16>::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (q, s, fifo) = (queue.clone(), stop.clone(), self.fifo());
        std::thread::spawn(move || {
            let mut pipe = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
            let start = std::time::Instant::now();
            let mut chunk_index: u32 = 0;
            while !s.load(Ordering::SeqCst) {
                let mut chunk = vec![0i16; 320];
                {
                    let mut queued = q.lock().unwrap();
                    let n = queued.len().min(320);
                    chunk[..n].copy_from_slice(&queued[..n]);
                    queued.drain(..n);
                }
                let bytes: Vec<u8> = chunk.iter().flat_map(|s| s.to_le_bytes()).collect();
                if pipe.write_all(&bytes).is_err() {
                    return;
                }
                chunk_index += 1;
                // The pipe source takes data as fast as it comes: pace it to 20 ms a chunk.
                let due = start + Duration::from_millis(20) * chunk_index;
                std::thread::sleep(due.saturating_duration_since(std::time::Instant::now()));
            }
        });
        (queue, stop)
    }

    /// Records the speaker (the null sink's monitor), read as it comes so the pipe never fills.
    fn record_speaker(&self) -> (Child, std::thread::JoinHandle<Vec<u8>>) {
        let mut child = Command::new("parec")
            .args([
                "--device=jarvis_out.monitor",
                "--format=s16le",
                "--rate=22050",
                "--channels=1",
                "--raw",
            ])
            .env("PULSE_SERVER", format!("unix:{}", self.socket().display()))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("parec runs");
        let mut stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut out = Vec::new();
            let _ = std::io::Read::read_to_end(&mut stdout, &mut out);
            out
        });
        (child, reader)
    }
}

fn speech(text: &str) -> Vec<i16> {
    let clip = Espeak::default()
        .synthesize(text)
        .unwrap()
        .resampled(SAMPLE_RATE)
        .unwrap();
    let mut samples = clip.to_i16();
    samples.extend(std::iter::repeat_n(0, 16_000 * 6 / 10));
    samples
}

/// RMS of 100 ms windows of raw s16le audio.
fn loudness(raw: &[u8]) -> Vec<f64> {
    let samples: Vec<f64> = raw
        .chunks_exact(2)
        .map(|b| f64::from(i16::from_le_bytes([b[0], b[1]])))
        .collect();
    samples
        .chunks(2205)
        .map(|w| (w.iter().map(|s| s * s).sum::<f64>() / w.len() as f64).sqrt())
        .collect()
}

async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let wait = async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(LIMIT, wait)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"));
}

fn stop_and_read((mut child, reader): (Child, std::thread::JoinHandle<Vec<u8>>)) -> Vec<u8> {
    let _ = child.kill();
    let _ = child.wait();
    reader.join().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_said_into_a_real_microphone_is_answered_aloud_on_a_real_speaker_and_ducked_under_speech(
) {
    let pulse = Pulse::start();
    let (mic, stop_mic) = pulse.microphone();
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

    let sink = Arc::new(RodioSink::open().expect("rodio opens the null sink"));
    let whisper =
        models::load_whisper(&model_dir(), jarvis::config::SpeechModel::TinyEn, 2).unwrap();
    let parts = VoiceParts {
        source: Arc::new(CpalSource::default()),
        sink: sink.clone(),
        transcriber: Arc::new(whisper),
        synthesizer: Arc::new(Espeak::default()),
        wake: None,
    };
    let voice = VoiceLoop::start(service.clone(), parts, VoiceOptions::default());
    let mut heard = voice.heard();
    let _orb = service.voice_attach().await.unwrap();
    service.set_listening(true).await.unwrap();
    let recorder = pulse.record_speaker();

    mic.lock()
        .unwrap()
        .extend(speech("What is the capital of France?"));
    let report = tokio::time::timeout(LIMIT, heard.recv())
        .await
        .expect("heard through cpal")
        .unwrap();
    assert_eq!(report.heard, Heard::Question, "{report:?}");
    assert!(report.text.to_lowercase().contains("capital"), "{report:?}");
    wait_for("Jarvis to speak", || {
        sink.played() > Duration::from_millis(1500)
    })
    .await;
    // Speak over it.
    let before_ducking = sink.played();
    mic.lock()
        .unwrap()
        .extend(speech("What is the capital of Germany?"));
    let over = tokio::time::timeout(LIMIT, heard.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(over.heard, Heard::Question);
    let after_ducking = sink.played();
    wait_for("the first reply to be answered", || {
        service
            .store()
            .replies(service.voice_status().borrow().chat.unwrap())
            .unwrap()
            .len()
            == 2
    })
    .await;
    wait_for("the answers to be spoken", || !sink.is_playing()).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop_mic.store(true, Ordering::SeqCst);
    let raw = stop_and_read(recorder);
    let levels = loudness(&raw);
    let loud = levels.iter().filter(|l| **l > 500.0).count();
    assert!(
        loud >= 10,
        "the speaker played a second or more of sound: {levels:?}"
    );
    // While the user spoke, the level dropped to about a fifth (the recording starts with the
    // first clip, so playing time lines up with it once the leading silence is skipped).
    let first_sound = levels.iter().position(|l| *l > 500.0).unwrap();
    let window = |from: Duration, to: Duration| {
        let a = first_sound + (from.as_millis() / 100) as usize;
        let b = (first_sound + (to.as_millis() / 100) as usize).min(levels.len());
        levels[a.min(b)..b].to_vec()
    };
    let normal = window(Duration::ZERO, before_ducking);
    let ducked = window(
        before_ducking + Duration::from_millis(600),
        after_ducking.saturating_sub(Duration::from_millis(1200)),
    );
    let peak = |v: &[f64]| v.iter().cloned().fold(0.0, f64::max);
    assert!(!ducked.is_empty(), "the user spoke over it for a while");
    assert!(
        peak(&ducked) < peak(&normal) * 0.35,
        "ducked peak {} vs normal {}",
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
