//! Audio in and out: clips, WAV decoding and resampling, the [`AudioSource`] and [`AudioSink`]
//! ports, and their headless implementations — a WAV file or a feed as the microphone, a
//! [`Recorder`] as the speaker.

use std::collections::VecDeque;
use std::io::Cursor;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rubato::{FftFixedIn, Resampler};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{VoiceError, FRAME, FRAME_MS, SAMPLE_RATE};

/// Mono audio in memory.
#[derive(Debug, Clone, PartialEq)]
pub struct Clip {
    /// Samples in [-1, 1].
    pub samples: Vec<f32>,
    /// Samples per second.
    pub rate: u32,
}

impl Clip {
    /// How long it plays.
    pub fn duration(&self) -> Duration {
        Duration::from_secs_f64(self.samples.len() as f64 / f64::from(self.rate.max(1)))
    }

    /// The clip at `rate` (a well-kept FFT resampler; a no-op at the same rate).
    pub fn resampled(&self, rate: u32) -> Result<Clip, VoiceError> {
        if rate == self.rate || self.samples.is_empty() {
            return Ok(Clip {
                samples: self.samples.clone(),
                rate,
            });
        }
        let samples = resample(&self.samples, self.rate, rate)?;
        Ok(Clip { samples, rate })
    }

    /// Decodes a WAV file's bytes: any channel count (mixed down) and sample format.
    pub fn from_wav_bytes(bytes: &[u8], name: &str) -> Result<Clip, VoiceError> {
        let wav_error = |reason: String| VoiceError::Wav {
            path: name.to_string(),
            reason,
        };
        let reader =
            hound::WavReader::new(Cursor::new(bytes)).map_err(|e| wav_error(e.to_string()))?;
        decode(reader).map_err(wav_error)
    }

    /// Reads a WAV file.
    pub fn from_wav_file(path: &Path) -> Result<Clip, VoiceError> {
        let name = path.display().to_string();
        let reader = hound::WavReader::open(path).map_err(|e| VoiceError::Wav {
            path: name.clone(),
            reason: e.to_string(),
        })?;
        decode(reader).map_err(|reason| VoiceError::Wav { path: name, reason })
    }

    /// The clip as 16-bit PCM WAV bytes.
    pub fn to_wav_bytes(&self) -> Vec<u8> {
        let spec = hound::WavSpec {
            channels: 1,
            sample_rate: self.rate,
            bits_per_sample: 16,
            sample_format: hound::SampleFormat::Int,
        };
        let mut out = Cursor::new(Vec::new());
        // Writing into memory cannot fail for a valid spec.
        if let Ok(mut writer) = hound::WavWriter::new(&mut out, spec) {
            for s in &self.samples {
                let _ = writer.write_sample(to_i16(*s));
            }
            let _ = writer.finalize();
        }
        out.into_inner()
    }

    /// The 16 kHz samples as i16, the VAD's and the wake word's input.
    pub fn to_i16(&self) -> Vec<i16> {
        self.samples.iter().map(|s| to_i16(*s)).collect()
    }

    /// Silence of a given length.
    pub fn silence(duration: Duration, rate: u32) -> Clip {
        let n = (duration.as_secs_f64() * f64::from(rate)).round() as usize;
        Clip {
            samples: vec![0.0; n],
            rate,
        }
    }

    /// This clip followed by `other` (same rate).
    pub fn then(mut self, other: &Clip) -> Clip {
        self.samples.extend_from_slice(&other.samples);
        self
    }
}

/// f32 in [-1, 1] to i16.
pub fn to_i16(s: f32) -> i16 {
    (s.clamp(-1.0, 1.0) * 32767.0).round() as i16
}

fn decode<R: std::io::Read>(reader: hound::WavReader<R>) -> Result<Clip, String> {
    let spec = reader.spec();
    if spec.channels == 0 || spec.sample_rate == 0 {
        return Err("no channels or no sample rate".into());
    }
    let interleaved: Vec<f32> = match spec.sample_format {
        hound::SampleFormat::Float => reader
            .into_samples::<f32>()
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())?,
        hound::SampleFormat::Int => {
            let scale = 1.0 / (1_i64 << (spec.bits_per_sample.clamp(1, 32) - 1)) as f32;
            reader
                .into_samples::<i32>()
                .map(|s| s.map(|s| s as f32 * scale))
                .collect::<Result<_, _>>()
                .map_err(|e| e.to_string())?
        }
    };
    let channels = usize::from(spec.channels);
    let samples = interleaved
        .chunks(channels)
        .map(|frame| frame.iter().sum::<f32>() / channels as f32)
        .collect();
    Ok(Clip {
        samples,
        rate: spec.sample_rate,
    })
}

/// Resamples mono audio with rubato's FFT resampler.
pub fn resample(input: &[f32], from: u32, to: u32) -> Result<Vec<f32>, VoiceError> {
    let chunk = 1024;
    let mut resampler = FftFixedIn::<f32>::new(from as usize, to as usize, chunk, 2, 1)
        .map_err(|e| VoiceError::Resample(e.to_string()))?;
    let delay = resampler.output_delay();
    let expected = (input.len() as f64 * f64::from(to) / f64::from(from)).round() as usize;
    let mut out = Vec::with_capacity(expected + delay + chunk);
    let mut at = 0;
    // Pad the end so the last real samples come out of the filter.
    let padded_len = input.len() + chunk * 2;
    while at < padded_len {
        let mut block = vec![0.0_f32; chunk];
        for (i, slot) in block.iter_mut().enumerate() {
            if let Some(s) = input.get(at + i) {
                *slot = *s;
            }
        }
        let frames = resampler
            .process(&[block], None)
            .map_err(|e| VoiceError::Resample(e.to_string()))?;
        out.extend_from_slice(&frames[0]);
        at += chunk;
    }
    let end = (delay + expected).min(out.len());
    Ok(out[delay.min(end)..end].to_vec())
}

/// An open microphone: 20 ms frames of 16 kHz mono i16 until it is dropped (which closes the
/// device) or the input ends.
pub struct Capture {
    /// The frames, in order.
    pub frames: mpsc::Receiver<Vec<i16>>,
    close: CancellationToken,
    lost: DeviceLost,
    /// The device is the sound server's echo-cancelled source (its `echo-cancel` module): Jarvis
    /// does not cancel a second time.
    pub cancels_echo: bool,
    /// The device's name, where the source knows it (the echo canceller remembers by it whether
    /// Jarvis's voice comes back into this microphone).
    pub device: Option<String>,
    /// Behind an echo canceller: for each frame, in order, what the canceller told of it.
    pub judged: Option<std::sync::mpsc::Receiver<EchoJudged>>,
}

/// What the echo canceller tells of a frame it hands over, beside the frame itself.
#[derive(Debug, Clone, PartialEq)]
pub struct EchoJudged {
    /// Most of what was heard was Jarvis's own echo: what is left is its residue, and does not
    /// count as someone speaking. (The suppressor took most of the frame out, and the linear
    /// filter did not find it mostly someone else's: see `echo::Canceller::cancel`.)
    pub residue: bool,
    /// The frame with only the echo AEC3's linear filter modelled taken out (its residual-echo
    /// suppressor not applied): a person speaking over the voice is whole here, where the
    /// suppressor holds their first syllables back, with some 10 dB of the voice's residue.
    pub linear: Vec<i16>,
    /// The share of `linear` that is not the voice's residue, by energy (0–1; 1 where the voice
    /// does not ring): what the linear filter left of the frame against what it is expected to
    /// leave of the echo alone. Scaled by it (as an amplitude gain, which gates harder), the
    /// frame is heard a second time without most of the voice's words (see `Listener`).
    pub voice_free: f32,
    /// Whether Jarvis's voice can come back in it, as the canceller knew for this frame:
    /// - `Unknown`: it went through as it was heard, because the canceller, having played
    ///   Jarvis's voice, does not yet know whether that voice comes back into this microphone
    ///   (the first second or so of the first answer it ever plays): any echo in it is still in
    ///   it;
    /// - `Absent`: no echo of the voice can be in it — the voice does not come back into this
    ///   microphone (headphones), or none has been played yet; it went through as it was heard;
    /// - `Present`: the voice comes back, and its echo was taken out.
    pub path: EchoPath,
}

/// Whether Jarvis's voice comes back into the microphone at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EchoPath {
    /// Not yet known: what is heard is listened to as it is, echo and all.
    Unknown,
    /// It does (speakers): the canceller's output is listened to.
    Present,
    /// It does not (headphones, or a muted speaker): what the microphone hears is listened to
    /// as it is, since AEC3 would hold back the user's words while it learns that no echo comes.
    Absent,
}

impl Capture {
    /// A capture whose producer stops when `close` is cancelled (on drop), and which sets `lost`
    /// before it ends the frames if the device goes away.
    pub fn new(
        frames: mpsc::Receiver<Vec<i16>>,
        close: CancellationToken,
        lost: DeviceLost,
    ) -> Capture {
        Capture {
            frames,
            close,
            lost,
            cancels_echo: false,
            device: None,
            judged: None,
        }
    }

    /// Why the frames ended, when they ended because the device went away (unplugged, its
    /// sound server gone) rather than because the capture was closed.
    pub fn lost(&self) -> Option<String> {
        self.lost.reason()
    }
}

/// Set once by a capture's producer when its device goes away.
#[derive(Debug, Clone, Default)]
pub struct DeviceLost(Arc<std::sync::OnceLock<String>>);

impl DeviceLost {
    /// Records why (the first reason is kept).
    pub fn set(&self, why: impl Into<String>) {
        let _ = self.0.set(why.into());
    }

    /// Why, once set.
    pub fn reason(&self) -> Option<String> {
        self.0.get().cloned()
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        self.close.cancel();
    }
}

/// Where heard audio comes from. Opening it opens the microphone; dropping the [`Capture`]
/// closes it, so it is open only while a listening mode needs it.
pub trait AudioSource: Send + Sync {
    /// Opens the input.
    fn open(&self) -> Result<Capture, VoiceError>;
}

/// Splits 16 kHz samples into 20 ms frames (the last one padded with silence).
pub fn frames_of(samples: &[i16]) -> Vec<Vec<i16>> {
    samples
        .chunks(FRAME)
        .map(|c| {
            let mut frame = c.to_vec();
            frame.resize(FRAME, 0);
            frame
        })
        .collect()
}

/// A WAV file as the microphone: its audio at 16 kHz, paced at `speed` × real time (0 = as fast
/// as the reader takes it), then the end of input.
pub struct WavSource {
    samples: Arc<Vec<i16>>,
    speed: f64,
}

impl WavSource {
    /// Reads and resamples a WAV file.
    pub fn open_file(path: &Path, speed: f64) -> Result<WavSource, VoiceError> {
        let clip = Clip::from_wav_file(path)?.resampled(SAMPLE_RATE)?;
        Ok(WavSource::new(&clip, speed))
    }

    /// A clip as the input (resampled if needed by the caller).
    pub fn new(clip: &Clip, speed: f64) -> WavSource {
        WavSource {
            samples: Arc::new(clip.to_i16()),
            speed,
        }
    }
}

impl AudioSource for WavSource {
    fn open(&self) -> Result<Capture, VoiceError> {
        let (tx, rx) = mpsc::channel(64);
        let close = CancellationToken::new();
        let samples = self.samples.clone();
        let speed = self.speed;
        let stop = close.clone();
        tokio::spawn(async move {
            let start = tokio::time::Instant::now();
            for (i, frame) in frames_of(&samples).into_iter().enumerate() {
                if speed > 0.0 {
                    let due = Duration::from_secs_f64(i as f64 * FRAME_MS as f64 / 1000.0 / speed);
                    tokio::time::sleep_until(start + due).await;
                }
                tokio::select! {
                    _ = stop.cancelled() => return,
                    sent = tx.send(frame) => if sent.is_err() { return },
                }
            }
        });
        Ok(Capture::new(rx, close, DeviceLost::default()))
    }
}

/// A microphone a test (or a benchmark) speaks into: silence, or a little noise, at real time,
/// with clips said through its [`Feed`] mixed in as they come.
pub struct FeedSource {
    feed: Feed,
    /// The level of the background noise (0 = digital silence).
    noise: f32,
    speed: f64,
    /// Frames (20 ms) after it begins that a frame is handed over (see
    /// [`FeedSource::with_latency`]).
    latency_frames: u64,
}

/// The handle that says clips into a [`FeedSource`].
#[derive(Clone, Default)]
pub struct Feed {
    queue: Arc<Mutex<VecDeque<i16>>>,
    /// When the microphone last opened: frame `n` of it is heard at this + n × 20 ms.
    opened: Arc<Mutex<Option<Instant>>>,
    /// Set by [`Feed::unplug`] until the open capture notices.
    unplugged: Arc<std::sync::atomic::AtomicBool>,
    /// What else the room sounds with (Jarvis's own voice coming back, say), on the open
    /// microphone's time line: the position of its first sample, and the samples.
    ambient: Arc<Mutex<(u64, VecDeque<f32>)>>,
    /// Samples the open microphone has sent.
    sent: Arc<std::sync::atomic::AtomicU64>,
}

impl Feed {
    /// Says a clip (16 kHz) into the microphone after whatever is still being said.
    pub fn say(&self, clip: &Clip) {
        let samples = clip.to_i16();
        lock(&self.queue).extend(samples);
    }

    /// Whether everything said has been heard.
    pub fn is_quiet(&self) -> bool {
        lock(&self.queue).is_empty()
    }

    /// Waits until everything said has been heard.
    pub async fn until_quiet(&self) {
        while !self.is_quiet() {
            tokio::time::sleep(Duration::from_millis(FRAME_MS)).await;
        }
    }

    /// Mixes `samples` (16 kHz, in [-1, 1]) into what the open microphone hears from the instant
    /// `at` on; what would have been heard before now is lost, as sound is.
    pub fn hear_at(&self, at: Instant, samples: &[f32]) {
        let Some(opened) = self.opened_at() else {
            return;
        };
        let position = if at >= opened {
            (at.duration_since(opened).as_secs_f64() * f64::from(SAMPLE_RATE)) as u64
        } else {
            return;
        };
        let sent = self.sent.load(std::sync::atomic::Ordering::SeqCst);
        let skip = sent.saturating_sub(position) as usize;
        let Some(samples) = samples.get(skip..) else {
            return;
        };
        let position = position + skip as u64;
        let mut ambient = lock(&self.ambient);
        let (start, queue) = &mut *ambient;
        if queue.is_empty() && *start < position {
            *start = position;
        }
        // What the microphone has sent already is past.
        let late = start.saturating_sub(position) as usize;
        let Some(samples) = samples.get(late..) else {
            return;
        };
        let position = position + late as u64;
        let offset = (position - *start) as usize;
        if queue.len() < offset + samples.len() {
            queue.resize(offset + samples.len(), 0.0);
        }
        for (slot, s) in queue.iter_mut().skip(offset).zip(samples) {
            *slot += s;
        }
    }

    /// When the microphone last opened (its first frame's time).
    pub fn opened_at(&self) -> Option<Instant> {
        *lock(&self.opened)
    }

    /// Pulls the microphone out: the open capture ends as a real one does when its device goes
    /// away. Opening it again works, as if it were plugged back in.
    pub fn unplug(&self) {
        self.unplugged
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

impl FeedSource {
    /// A feed at real time with faint noise.
    pub fn new() -> (FeedSource, Feed) {
        FeedSource::with(0.002, 1.0)
    }

    /// A feed with the given noise level and speed (× real time).
    pub fn with(noise: f32, speed: f64) -> (FeedSource, Feed) {
        let feed = Feed::default();
        (
            FeedSource {
                feed: feed.clone(),
                noise,
                speed: speed.max(0.01),
                latency_frames: 0,
            },
            feed,
        )
    }

    /// The same feed handing each frame over `frames` × 20 ms after it begins (40 ms after it
    /// ends for 3), as a sound server hands a capture over 20–60 ms late: what is mixed in with
    /// [`Feed::hear_at`] a little after it sounded — a room's echo of what a sink reports having
    /// played, which comes in blocks, a while after it played — is still heard whole, as a real
    /// room's echo always is. (Handed over as its 20 ms began, a frame met an echo 21 ms late
    /// only where the sink had reported within a millisecond: most of the echo's direct sound
    /// was lost, and what came through no linear filter could take out — 5 dB at best.)
    pub fn with_latency(self, frames: u64) -> FeedSource {
        FeedSource {
            latency_frames: frames,
            ..self
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl AudioSource for FeedSource {
    fn open(&self) -> Result<Capture, VoiceError> {
        let (tx, rx) = mpsc::channel(64);
        let close = CancellationToken::new();
        let stop = close.clone();
        let lost = DeviceLost::default();
        let lost_here = lost.clone();
        let feed = self.feed.clone();
        let noise = self.noise;
        let latency = self.latency_frames;
        let period = Duration::from_secs_f64(FRAME_MS as f64 / 1000.0 / self.speed);
        tokio::spawn(async move {
            let mut seed: u32 = 0x9E37_79B9;
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            *lock(&feed.opened) = Some(Instant::now());
            feed.sent.store(0, std::sync::atomic::Ordering::SeqCst);
            lock(&feed.ambient).1.clear();
            let mut sent: u64 = 0;
            let mut ticks: u64 = 0;
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tick.tick() => {}
                }
                if feed
                    .unplugged
                    .swap(false, std::sync::atomic::Ordering::SeqCst)
                {
                    lost_here.set("the microphone was disconnected");
                    return;
                }
                // (Frame `n` is made at tick `n + latency`: the first tick is its start.)
                ticks += 1;
                if ticks <= latency {
                    continue;
                }
                let mut frame = Vec::with_capacity(FRAME);
                {
                    let mut queue = lock(&feed.queue);
                    let mut ambient = lock(&feed.ambient);
                    for i in 0..FRAME as u64 {
                        // xorshift: faint white noise, like a quiet room.
                        seed ^= seed << 13;
                        seed ^= seed >> 17;
                        seed ^= seed << 5;
                        let n = ((seed as f32 / u32::MAX as f32) * 2.0 - 1.0) * noise * 32767.0;
                        let s = queue.pop_front().map_or(0.0, f32::from);
                        let (start, room) = &mut *ambient;
                        // (Sound placed just behind the time line by a racing writer is gone.)
                        while *start < sent + i && room.pop_front().is_some() {
                            *start += 1;
                        }
                        let a = if *start == sent + i && !room.is_empty() {
                            *start += 1;
                            room.pop_front().unwrap_or(0.0) * 32767.0
                        } else {
                            0.0
                        };
                        frame.push((s + n + a).clamp(-32768.0, 32767.0) as i16);
                    }
                }
                sent += FRAME as u64;
                feed.sent.store(sent, std::sync::atomic::Ordering::SeqCst);
                if tx.send(frame).await.is_err() {
                    return;
                }
            }
        });
        let mut capture = Capture::new(rx, close, lost);
        capture.device = Some(FEED_NAME.into());
        Ok(capture)
    }
}

/// The name a [`FeedSource`] opens under.
pub const FEED_NAME: &str = "Jarvis test microphone";

/// Where a sink reports what it handed to the output device.
pub trait PlaybackTap: Send + Sync {
    /// `samples` (mono, in [-1, 1], volume applied) at `rate` were handed to the device; the
    /// first of them plays at `at` (or as soon after as the device's latency lets it).
    fn played(&self, samples: &[f32], rate: u32, at: Instant);
}

/// Where Jarvis's voice goes. Clips queue and play one after another; the volume applies to
/// what plays from then on; `clear` cuts what is queued.
pub trait AudioSink: Send + Sync {
    /// Queues a clip.
    fn play(&self, clip: Clip) -> Result<(), VoiceError>;
    /// Sets the volume (1.0 = normal).
    fn set_volume(&self, volume: f32);
    /// Stops playing and drops everything queued.
    fn clear(&self);
    /// How much audio has played since the sink was made.
    fn played(&self) -> Duration;
    /// Whether something is playing or queued.
    fn is_playing(&self) -> bool;
    /// From now on, tells `tap` each piece of audio as it is handed to the device (volume
    /// applied): the echo canceller's reference. A sink that plays nothing audible ignores it.
    fn tap(&self, tap: Arc<dyn PlaybackTap>) {
        let _ = tap;
    }
}

/// One volume change as the recorder saw it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VolumeChange {
    /// When, since the recorder was made.
    pub at: Duration,
    /// How far playback was.
    pub played: Duration,
    /// The new volume.
    pub volume: f32,
}

/// A speaker that plays nothing: it "plays" queued clips at real time (by the wall clock) and
/// keeps what was played (volume applied), every volume change, and when each clip arrived.
#[derive(Clone)]
pub struct Recorder {
    inner: Arc<Mutex<RecorderState>>,
}

struct RecorderState {
    made: Instant,
    rate: u32,
    volume: f32,
    queue: VecDeque<f32>,
    /// Since when the head of the queue plays.
    playing_since: Option<Instant>,
    played: Vec<f32>,
    played_total: u64,
    volumes: Vec<VolumeChange>,
    arrivals: Vec<(Duration, Duration)>,
    taps: Vec<Arc<dyn PlaybackTap>>,
}

impl RecorderState {
    /// Moves what has played by `now` from the queue to the record, at the current volume.
    fn advance(&mut self, now: Instant) {
        let Some(since) = self.playing_since else {
            return;
        };
        let due =
            (now.saturating_duration_since(since).as_secs_f64() * f64::from(self.rate)) as usize;
        let n = due.min(self.queue.len());
        let volume = self.volume;
        let from = self.played.len();
        self.played
            .extend(self.queue.drain(..n).map(|s| s * volume));
        for tap in &self.taps {
            tap.played(&self.played[from..], self.rate, since);
        }
        self.played_total += n as u64;
        if self.queue.is_empty() {
            self.playing_since = None;
        } else {
            self.playing_since =
                Some(since + Duration::from_secs_f64(n as f64 / f64::from(self.rate)));
        }
    }
}

impl Recorder {
    /// A recorder playing at `rate` (clips are resampled to it).
    pub fn new(rate: u32) -> Recorder {
        Recorder {
            inner: Arc::new(Mutex::new(RecorderState {
                made: Instant::now(),
                rate,
                volume: 1.0,
                queue: VecDeque::new(),
                playing_since: None,
                played: Vec::new(),
                played_total: 0,
                volumes: Vec::new(),
                arrivals: Vec::new(),
                taps: Vec::new(),
            })),
        }
    }

    fn state(&self) -> MutexGuard<'_, RecorderState> {
        let mut state = lock(&self.inner);
        state.advance(Instant::now());
        state
    }

    /// What has played so far, volume applied.
    pub fn played_samples(&self) -> Clip {
        let state = self.state();
        Clip {
            samples: state.played.clone(),
            rate: state.rate,
        }
    }

    /// Every volume change, in order.
    pub fn volumes(&self) -> Vec<VolumeChange> {
        self.state().volumes.clone()
    }

    /// When each clip arrived (since the recorder was made) and how long it is.
    pub fn arrivals(&self) -> Vec<(Duration, Duration)> {
        self.state().arrivals.clone()
    }

    /// When the recorder was made (arrival times count from it).
    pub fn made(&self) -> Instant {
        lock(&self.inner).made
    }
}

impl AudioSink for Recorder {
    fn play(&self, clip: Clip) -> Result<(), VoiceError> {
        let rate = lock(&self.inner).rate;
        let clip = clip.resampled(rate)?;
        let mut state = self.state();
        let now = Instant::now();
        let at = now.duration_since(state.made);
        state.arrivals.push((at, clip.duration()));
        state.queue.extend(clip.samples);
        if state.playing_since.is_none() && !state.queue.is_empty() {
            state.playing_since = Some(now);
        }
        Ok(())
    }

    fn set_volume(&self, volume: f32) {
        let mut state = self.state();
        if (state.volume - volume).abs() > f32::EPSILON {
            state.volume = volume;
            let at = state.made.elapsed();
            let played = Duration::from_secs_f64(state.played_total as f64 / f64::from(state.rate));
            state.volumes.push(VolumeChange { at, played, volume });
        }
    }

    fn clear(&self) {
        let mut state = self.state();
        state.queue.clear();
        state.playing_since = None;
    }

    fn played(&self) -> Duration {
        let state = self.state();
        Duration::from_secs_f64(state.played_total as f64 / f64::from(state.rate))
    }

    fn is_playing(&self) -> bool {
        !self.state().queue.is_empty()
    }

    fn tap(&self, tap: Arc<dyn PlaybackTap>) {
        let first = {
            let mut state = self.state();
            state.taps.push(tap);
            state.taps.len() == 1
        };
        if first {
            // A device takes its samples as it plays them: so that taps hear them then, not when
            // someone next looks, the recorder's playing is moved on every 5 ms while it lives.
            let inner = Arc::downgrade(&self.inner);
            let _ = std::thread::Builder::new()
                .name("jarvis-recorder".into())
                .spawn(move || {
                    while let Some(inner) = inner.upgrade() {
                        lock(&inner).advance(Instant::now());
                        drop(inner);
                        std::thread::sleep(Duration::from_millis(5));
                    }
                });
        }
    }
}

/// Loudness on the orb's scale (0–1) of samples in [-1, 1]: their RMS in dBFS, −50 dB and below
/// (a quiet room's hiss) as 0, −10 dB and above as 1.
pub fn loudness(samples: &[f32]) -> f32 {
    loudness_of_mean_square(samples.iter().map(|s| s * s).sum::<f32>(), samples.len())
}

/// [`loudness`] of 16-bit samples (a microphone frame), without converting them first.
pub fn loudness_i16(samples: &[i16]) -> f32 {
    let scale = 1.0 / (32768.0 * 32768.0);
    let sum: f32 = samples.iter().map(|s| f32::from(*s).powi(2) * scale).sum();
    loudness_of_mean_square(sum, samples.len())
}

fn loudness_of_mean_square(sum: f32, n: usize) -> f32 {
    if n == 0 {
        return 0.0;
    }
    let db = 10.0 * (sum / n as f32).max(1e-12).log10();
    ((db + 50.0) / 40.0).clamp(0.0, 1.0)
}

/// 16 kHz samples as [`SAMPLE_RATE`] f32 for whisper.
pub fn to_f32(samples: &[i16]) -> Vec<f32> {
    samples.iter().map(|s| f32::from(*s) / 32768.0).collect()
}
