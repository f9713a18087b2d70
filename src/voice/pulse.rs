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

    /// Starts recording the speaker (the null sink's monitor, 22,050 Hz mono s16le).
    pub fn record_speaker(&self) -> Result<SpeakerRecording, VoiceError> {
        let mut child = Command::new("parec")
            .args([
                "--device=jarvis_out.monitor",
                "--format=s16le",
                "--rate=22050",
                "--channels=1",
                "--raw",
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
        let reader = std::thread::spawn(move || {
            let mut out = Vec::new();
            let _ = std::io::Read::read_to_end(&mut stdout, &mut out);
            out
        });
        Ok(SpeakerRecording { child, reader })
    }
}

/// A recording of the speaker in progress.
pub struct SpeakerRecording {
    child: Child,
    reader: std::thread::JoinHandle<Vec<u8>>,
}

impl SpeakerRecording {
    /// Stops; the loudness (RMS, i16 units) of each 100 ms of what was played.
    pub fn stop(mut self) -> Vec<f64> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let raw = self.reader.join().unwrap_or_default();
        let samples: Vec<f64> = raw
            .chunks_exact(2)
            .map(|b| f64::from(i16::from_le_bytes([b[0], b[1]])))
            .collect();
        samples
            .chunks(2205)
            .map(|w| (w.iter().map(|s| s * s).sum::<f64>() / w.len() as f64).sqrt())
            .collect()
    }
}
