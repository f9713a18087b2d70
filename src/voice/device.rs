//! The real devices: the microphone through cpal (resampled to 16 kHz mono with rubato) and the
//! speaker through rodio. Both keep their OS stream on a thread of its own (the streams are not
//! `Send`); nothing here is needed by the headless tests of the loop, which use
//! [`super::FeedSource`] and [`super::Recorder`].

use std::collections::VecDeque;
use std::num::NonZero;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cpal::traits::{DeviceTrait, HostTrait, StreamTrait};
use rubato::{FftFixedIn, Resampler};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::audio::{AudioSink, AudioSource, Capture, Clip, DeviceLost};
use super::echo::PlaybackTap;
use super::{VoiceError, FRAME, SAMPLE_RATE};

fn device_error(e: impl std::fmt::Display) -> VoiceError {
    VoiceError::Device(e.to_string())
}

fn input_device(name: Option<&str>) -> Result<cpal::Device, VoiceError> {
    let host = cpal::default_host();
    match name {
        Some(wanted) => host
            .input_devices()
            .map_err(device_error)?
            .find(|d| d.description().is_ok_and(|desc| desc.name() == wanted))
            .ok_or_else(|| {
                VoiceError::Device(format!(
                    "the microphone {wanted:?} is not connected: connect it, or choose another in Settings"
                ))
            }),
        None => host.default_input_device().ok_or_else(|| {
            VoiceError::Device("no microphone: the system has no input device".into())
        }),
    }
}

/// The microphones the system offers, each by the name [`CpalSource::device`] takes.
#[derive(serde::Serialize, Debug, Clone, Default, PartialEq, Eq, ts_rs::TS)]
#[ts(rename = "MicrophoneList")]
pub struct Microphones {
    /// The system's default, when it has one.
    pub default: Option<String>,
    /// Every input device, the default first, each name once.
    pub names: Vec<String>,
}

/// Lists the input devices (on Linux, PulseAudio's or PipeWire's sources where a sound server
/// runs, ALSA's devices otherwise). Blocking: it asks the sound server.
pub fn microphones() -> Result<Microphones, VoiceError> {
    let host = cpal::default_host();
    let name_of = |d: &cpal::Device| d.description().ok().map(|d| d.name().to_string());
    let default = host.default_input_device().as_ref().and_then(name_of);
    let mut names: Vec<String> = default.iter().cloned().collect();
    for device in host.input_devices().map_err(device_error)? {
        if let Some(name) = name_of(&device).filter(|n| !names.contains(n)) {
            names.push(name);
        }
    }
    Ok(Microphones { default, names })
}

/// An open microphone that sends nothing for this long has stopped.
const MICROPHONE_STALL: Duration = Duration::from_secs(3);

/// Whether a stream goes on after an error of this kind (a glitch), or has stopped for good.
fn stream_goes_on(kind: cpal::ErrorKind) -> bool {
    matches!(
        kind,
        cpal::ErrorKind::Xrun
            | cpal::ErrorKind::DeviceChanged
            | cpal::ErrorKind::RealtimeDenied
            | cpal::ErrorKind::DeviceBusy
    )
}

/// The microphone, through cpal.
#[derive(Debug, Clone, Default)]
pub struct CpalSource {
    /// The input device by name; `None` is the system's default.
    pub device: Option<String>,
}

/// Mixes down, resamples to 16 kHz and cuts 20 ms frames.
struct Framer {
    channels: usize,
    resampler: Option<FftFixedIn<f32>>,
    input: Vec<f32>,
    output: VecDeque<i16>,
}

impl Framer {
    fn new(rate: u32, channels: usize) -> Result<Framer, VoiceError> {
        let resampler = if rate == SAMPLE_RATE {
            None
        } else {
            Some(
                FftFixedIn::<f32>::new(rate as usize, SAMPLE_RATE as usize, 480, 1, 1)
                    .map_err(|e| VoiceError::Resample(e.to_string()))?,
            )
        };
        Ok(Framer {
            channels: channels.max(1),
            resampler,
            input: Vec::new(),
            output: VecDeque::new(),
        })
    }

    fn push(&mut self, data: &[f32], mut frame: impl FnMut(Vec<i16>)) {
        for chunk in data.chunks(self.channels) {
            self.input
                .push(chunk.iter().sum::<f32>() / self.channels as f32);
        }
        match &mut self.resampler {
            None => self
                .output
                .extend(self.input.drain(..).map(super::audio::to_i16)),
            Some(resampler) => {
                let need = resampler.input_frames_next();
                while self.input.len() >= need {
                    let block: Vec<f32> = self.input.drain(..need).collect();
                    if let Ok(out) = resampler.process(&[block], None) {
                        self.output
                            .extend(out[0].iter().map(|s| super::audio::to_i16(*s)));
                    }
                }
            }
        }
        while self.output.len() >= FRAME {
            frame(self.output.drain(..FRAME).collect());
        }
    }
}

impl AudioSource for CpalSource {
    fn open(&self) -> Result<Capture, VoiceError> {
        // Ten seconds of frames: a slow transcription never makes the device drop audio.
        let (tx, rx) = mpsc::channel(500);
        // The one sender, taken out when the capture ends so the frames end with it even if the
        // sound server's side never lets go of the callback.
        let tx = Arc::new(Mutex::new(Some(tx)));
        let sender = tx.clone();
        let close = CancellationToken::new();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let device_name = self.device.clone();
        let stop = close.clone();
        let lost = DeviceLost::default();
        let lost_here = lost.clone();
        let lost_stalled = lost.clone();
        let end = close.clone();
        // When sound last came (or the stream started), in milliseconds since `since`.
        let since = std::time::Instant::now();
        let last_sound = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let sound_came = last_sound.clone();
        std::thread::Builder::new()
            .name("jarvis-microphone".into())
            .spawn(move || {
                let opened = (|| {
                    let device = input_device(device_name.as_deref())?;
                    let name = device.description().ok().map(|d| d.name().to_string());
                    let supported = device.default_input_config().map_err(device_error)?;
                    let config: cpal::StreamConfig = supported.config();
                    let mut framer = Framer::new(config.sample_rate, usize::from(config.channels))?;
                    let stream = device
                        .build_input_stream::<f32, _, _>(
                            config,
                            move |data: &[f32], _| {
                                sound_came.store(
                                    since.elapsed().as_millis() as u64,
                                    std::sync::atomic::Ordering::Relaxed,
                                );
                                let tx = tx.lock().unwrap_or_else(|e| e.into_inner());
                                if let Some(tx) = tx.as_ref() {
                                    framer.push(data, |frame| {
                                        // A full queue drops the frame rather than blocking the
                                        // device.
                                        let _ = tx.try_send(frame);
                                    });
                                }
                            },
                            move |err| {
                                if stream_goes_on(err.kind()) {
                                    tracing::warn!(%err, "microphone error");
                                } else {
                                    // Unplugged, or its sound server went away: end the
                                    // capture, saying why.
                                    lost_here.set(format!("the microphone stopped: {err}"));
                                    end.cancel();
                                }
                            },
                            None,
                        )
                        .map_err(device_error)?;
                    stream.play().map_err(device_error)?;
                    Ok::<_, VoiceError>((stream, name))
                })();
                match opened {
                    Ok((stream, name)) => {
                        let _ = ready_tx.send(Ok(name));
                        // The wait for sound counts from the stream's start, however long
                        // opening took.
                        last_sound.fetch_max(
                            since.elapsed().as_millis() as u64,
                            std::sync::atomic::Ordering::Relaxed,
                        );
                        // Hold the stream until the capture is dropped — or until no sound has
                        // come for a while: an open microphone sends even silence without a
                        // pause, and not every sound server's end is reported as an error.
                        while !stop.is_cancelled() {
                            std::thread::sleep(Duration::from_millis(20));
                            let last = Duration::from_millis(
                                last_sound.load(std::sync::atomic::Ordering::Relaxed),
                            );
                            if since.elapsed().saturating_sub(last) > MICROPHONE_STALL {
                                lost_stalled.set("the microphone stopped sending sound");
                                break;
                            }
                        }
                        sender.lock().unwrap_or_else(|e| e.into_inner()).take();
                        drop(stream);
                    }
                    Err(err) => {
                        let _ = ready_tx.send(Err(err));
                    }
                }
            })
            .map_err(device_error)?;
        let name = ready_rx
            .recv_timeout(Duration::from_secs(5))
            .map_err(|_| VoiceError::Device("the microphone did not open within 5 s".into()))??;
        let mut capture = Capture::new(rx, close, lost);
        capture.cancels_echo = name
            .as_deref()
            .is_some_and(super::echo::is_echo_cancelled_source);
        capture.device = name;
        if capture.cancels_echo {
            tracing::info!(
                "the microphone is the sound server's echo-cancelled source: Jarvis does not cancel again"
            );
        }
        Ok(capture)
    }
}

/// The speaker, through rodio.
pub struct RodioSink {
    player: rodio::Player,
    state: Arc<Mutex<SinkState>>,
    /// The volume, applied by [`Tapped`] as each sample is handed over (so the echo reference
    /// is exactly what plays), as f32 bits.
    volume: Arc<AtomicU32>,
    taps: Taps,
    _keep: CancellationToken,
}

type Taps = Arc<Mutex<Vec<Arc<dyn PlaybackTap>>>>;

/// A clip on its way to the device: the volume applied, and every 10 ms of it told to the taps
/// as the device takes it.
struct Tapped {
    inner: rodio::buffer::SamplesBuffer,
    volume: Arc<AtomicU32>,
    taps: Taps,
    rate: u32,
    pending: Vec<f32>,
    pending_at: Instant,
}

impl Tapped {
    fn flush(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        for tap in self.taps.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            tap.played(&self.pending, self.rate, self.pending_at);
        }
        self.pending.clear();
    }
}

impl Iterator for Tapped {
    type Item = f32;

    fn next(&mut self) -> Option<f32> {
        match self.inner.next() {
            Some(sample) => {
                let sample = sample * f32::from_bits(self.volume.load(Ordering::Relaxed));
                if self.pending.is_empty() {
                    self.pending_at = Instant::now();
                }
                self.pending.push(sample);
                if self.pending.len() >= (self.rate as usize / 100).max(1) {
                    self.flush();
                }
                Some(sample)
            }
            None => {
                self.flush();
                None
            }
        }
    }
}

impl rodio::Source for Tapped {
    fn current_span_len(&self) -> Option<usize> {
        self.inner.current_span_len()
    }

    fn channels(&self) -> rodio::ChannelCount {
        self.inner.channels()
    }

    fn sample_rate(&self) -> rodio::SampleRate {
        self.inner.sample_rate()
    }

    fn total_duration(&self) -> Option<Duration> {
        self.inner.total_duration()
    }
}

struct SinkState {
    /// Lengths of the clips queued, first playing first.
    queued: VecDeque<Duration>,
    /// Playing time of the clips that finished.
    finished: Duration,
}

impl Drop for RodioSink {
    fn drop(&mut self) {
        self._keep.cancel();
    }
}

impl RodioSink {
    /// Opens the default output device.
    pub fn open() -> Result<RodioSink, VoiceError> {
        let keep = CancellationToken::new();
        let hold = keep.clone();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("jarvis-speaker".into())
            .spawn(
                move || match rodio::DeviceSinkBuilder::open_default_sink() {
                    Ok(mut device) => {
                        device.log_on_drop(false);
                        let player = rodio::Player::connect_new(device.mixer());
                        let _ = ready_tx.send(Ok(player));
                        while !hold.is_cancelled() {
                            std::thread::sleep(Duration::from_millis(50));
                        }
                        drop(device);
                    }
                    Err(err) => {
                        let _ =
                            ready_tx.send(Err(VoiceError::Device(format!("no speaker: {err}"))));
                    }
                },
            )
            .map_err(device_error)?;
        let player = ready_rx
            .recv_timeout(Duration::from_secs(5))
            .map_err(|_| VoiceError::Device("the speaker did not open within 5 s".into()))??;
        Ok(RodioSink {
            player,
            state: Arc::new(Mutex::new(SinkState {
                queued: VecDeque::new(),
                finished: Duration::ZERO,
            })),
            volume: Arc::new(AtomicU32::new(1.0_f32.to_bits())),
            taps: Taps::default(),
            _keep: keep,
        })
    }

    fn settle(&self) -> std::sync::MutexGuard<'_, SinkState> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let left = self.player.len();
        while state.queued.len() > left {
            if let Some(done) = state.queued.pop_front() {
                state.finished += done;
            }
        }
        state
    }
}

impl AudioSink for RodioSink {
    fn play(&self, clip: Clip) -> Result<(), VoiceError> {
        let rate = NonZero::new(clip.rate)
            .ok_or_else(|| VoiceError::Device("a clip without a rate".into()))?;
        let length = clip.duration();
        let mut state = self.settle();
        self.player.append(Tapped {
            inner: rodio::buffer::SamplesBuffer::new(NonZero::<u16>::MIN, rate, clip.samples),
            volume: self.volume.clone(),
            taps: self.taps.clone(),
            rate: rate.get(),
            pending: Vec::new(),
            pending_at: Instant::now(),
        });
        state.queued.push_back(length);
        Ok(())
    }

    fn set_volume(&self, volume: f32) {
        self.volume.store(volume.to_bits(), Ordering::Relaxed);
    }

    fn tap(&self, tap: Arc<dyn PlaybackTap>) {
        self.taps
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(tap);
    }

    fn clear(&self) {
        let mut state = self.settle();
        let position = self.player.get_pos();
        self.player.clear();
        self.player.play();
        if !state.queued.is_empty() {
            state.finished += position;
        }
        state.queued.clear();
    }

    fn played(&self) -> Duration {
        let state = self.settle();
        if state.queued.is_empty() {
            state.finished
        } else {
            state.finished + self.player.get_pos()
        }
    }

    fn is_playing(&self) -> bool {
        !self.player.empty()
    }
}
