//! A private PulseAudio server for tests and benchmarks on machines without a sound card: a null
//! sink is the speaker (its monitor can be recorded) and a pipe source is the microphone (written
//! at real time). cpal and rodio see them as real devices once `PULSE_SERVER` points at it.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::VoiceError;

/// The server, stopped (and its folder removed) on drop.
pub struct Pulse {
    server: Child,
    dir: PathBuf,
    mic: Option<Microphone>,
}

/// What is written into the pipe source: queued speech, silence otherwise, paced at real time.
struct Microphone {
    queue: Arc<Mutex<Vec<i16>>>,
    stop: Arc<AtomicBool>,
}

impl Drop for Pulse {
    fn drop(&mut self) {
        if let Some(mic) = &self.mic {
            mic.stop.store(true, Ordering::SeqCst);
        }
        let _ = self.server.kill();
        let _ = self.server.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Pulse {
    /// Starts `pulseaudio` with a null sink `jarvis_out` (22,050 Hz mono) and a pipe source
    /// `jarvis_in` (16 kHz mono s16le), both the defaults.
    pub fn start() -> Result<Pulse, VoiceError> {
        let dir = std::env::temp_dir().join(format!(
            "jarvis-pulse-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4()
        ));
        std::fs::create_dir_all(&dir).map_err(|e| VoiceError::Device(e.to_string()))?;
        let script = format!(
            "load-module module-native-protocol-unix socket={socket} auth-anonymous=1\n\
             load-module module-null-sink sink_name=jarvis_out rate=22050 channels=1\n\
             load-module module-pipe-source source_name=jarvis_in file={fifo} format=s16le rate=16000 channels=1\n\
             set-default-sink jarvis_out\n\
             set-default-source jarvis_in\n",
            socket = dir.join("native").display(),
            fifo = dir.join("mic.fifo").display(),
        );
        std::fs::write(dir.join("jarvis.pa"), script)
            .map_err(|e| VoiceError::Device(e.to_string()))?;
        let server = Command::new("pulseaudio")
            .args([
                "-n",
                "--daemonize=no",
                "--exit-idle-time=-1",
                "--disallow-exit",
                "--log-target=stderr",
            ])
            .arg("-F")
            .arg(dir.join("jarvis.pa"))
            .env("HOME", &dir)
            .env("XDG_RUNTIME_DIR", &dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                VoiceError::Device(format!(
                    "cannot run pulseaudio ({e}): apt-get install pulseaudio"
                ))
            })?;
        let mut pulse = Pulse {
            server,
            dir,
            mic: None,
        };
        let start = Instant::now();
        while !(pulse.socket().exists() && pulse.fifo().exists()) {
            if start.elapsed() > Duration::from_secs(10) {
                return Err(VoiceError::Device(
                    "the PulseAudio server did not start within 10 s".into(),
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        pulse.mic = Some(pulse.open_microphone()?);
        Ok(pulse)
    }

    /// Its socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.join("native")
    }

    fn fifo(&self) -> PathBuf {
        self.dir.join("mic.fifo")
    }

    /// `PULSE_SERVER`'s value for this server.
    pub fn server(&self) -> String {
        format!("unix:{}", self.socket().display())
    }

    fn open_microphone(&self) -> Result<Microphone, VoiceError> {
        let queue = Arc::new(Mutex::new(Vec::<i16>::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let mut pipe = std::fs::OpenOptions::new()
            .write(true)
            .open(self.fifo())
            .map_err(|e| VoiceError::Device(format!("the pipe source: {e}")))?;
        let (q, s) = (queue.clone(), stop.clone());
        std::thread::spawn(move || {
            let start = Instant::now();
            let mut chunks: u32 = 0;
            while !s.load(Ordering::SeqCst) {
                let mut chunk = [0i16; 320];
                {
                    let mut queued = q.lock().unwrap_or_else(|p| p.into_inner());
                    let n = queued.len().min(320);
                    chunk[..n].copy_from_slice(&queued[..n]);
                    queued.drain(..n);
                }
                let bytes: Vec<u8> = chunk.iter().flat_map(|s| s.to_le_bytes()).collect();
                if pipe.write_all(&bytes).is_err() {
                    return;
                }
                chunks += 1;
                // The pipe source takes data as fast as it comes: pace it to 20 ms a chunk.
                let due = start + Duration::from_millis(20) * chunks;
                std::thread::sleep(due.saturating_duration_since(Instant::now()));
            }
        });
        Ok(Microphone { queue, stop })
    }

    /// Says 16 kHz samples into the microphone after whatever is still being said.
    pub fn say(&self, samples: &[i16]) {
        if let Some(mic) = &self.mic {
            mic.queue
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend_from_slice(samples);
        }
    }

    /// The microphone stops delivering anything, as a frozen device does: the pipe source is no
    /// longer written to.
    pub fn freeze_microphone(&self) {
        if let Some(mic) = &self.mic {
            mic.stop.store(true, Ordering::SeqCst);
        }
    }

    /// Records what the speaker plays (the null sink's monitor), as the loudness of each 100 ms,
    /// streamed: a test waits on what was heard ([`SpeakerRecording::until`]) instead of a time.
    pub fn record_speaker(&self) -> Result<SpeakerRecording, VoiceError> {
        let mut child = Command::new("parec")
            .args([
                "--device=jarvis_out.monitor",
                "--format=s16le",
                "--rate=22050",
                "--channels=1",
                "--raw",
                // Small fragments: each tenth of a second arrives as it is played.
                "--latency-msec=50",
            ])
            .env("PULSE_SERVER", self.server())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| VoiceError::Device(format!("cannot run parec: {e}")))?;
        let mut stdout = child
            .stdout
            .take()
            .ok_or_else(|| VoiceError::Device("parec has no output".into()))?;
        let heard = Arc::new(Mutex::new(Vec::new()));
        let levels = heard.clone();
        let reader = std::thread::spawn(move || {
            // 100 ms at 22,050 Hz, 2 bytes a sample.
            let mut tenth = vec![0u8; 2 * 2205];
            while std::io::Read::read_exact(&mut stdout, &mut tenth).is_ok() {
                let sum: f64 = tenth
                    .chunks_exact(2)
                    .map(|b| f64::from(i16::from_le_bytes([b[0], b[1]])).powi(2))
                    .sum();
                levels
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((sum / 2205.0).sqrt());
            }
        });
        Ok(SpeakerRecording {
            child,
            reader: Some(reader),
            heard,
        })
    }
}

/// A recording of the speaker in progress: the loudness (RMS, i16 units) of each 100 ms played
/// since it started, as it arrives.
pub struct SpeakerRecording {
    child: Child,
    reader: Option<std::thread::JoinHandle<()>>,
    heard: Arc<Mutex<Vec<f64>>>,
}

/// A tenth of a second this loud (RMS, i16 units) is sound, not silence.
pub const LOUD: f64 = 500.0;

impl SpeakerRecording {
    /// What was heard so far.
    pub fn levels(&self) -> Vec<f64> {
        self.heard.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Waits until what was heard satisfies `done`, at most `limit` (a bound on a hang, not a
    /// timing): `Ok` with the levels then, or `Err` with the levels heard by the limit.
    pub async fn until(
        &self,
        limit: Duration,
        done: impl Fn(&[f64]) -> bool,
    ) -> Result<Vec<f64>, Vec<f64>> {
        let end = Instant::now() + limit;
        loop {
            let levels = self.levels();
            if done(&levels) {
                return Ok(levels);
            }
            if Instant::now() >= end {
                return Err(levels);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops the recorder (SIGTERM: parec closes its stream and exits) and returns every level
    /// heard.
    pub fn stop(mut self) -> Vec<f64> {
        self.end();
        self.levels()
    }

    fn end(&mut self) {
        // SAFETY: kill(2) on our own child's pid, which is not yet reaped (waited for below).
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        let _ = self.child.wait();
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

impl Drop for SpeakerRecording {
    fn drop(&mut self) {
        if self.reader.is_some() {
            self.end();
        }
    }
}

/// How many tenths of a second were sound.
pub fn loud(levels: &[f64]) -> usize {
    levels.iter().filter(|l| **l > LOUD).count()
}

/// Sound was heard and has ended: the last `tenths` tenths of a second were silence.
pub fn played_and_quiet(levels: &[f64], tenths: usize) -> bool {
    loud(levels) > 0
        && levels.len() >= tenths
        && levels[levels.len() - tenths..].iter().all(|l| *l <= LOUD)
}
