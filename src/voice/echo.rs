//! Echo cancellation: what the microphone hears of Jarvis's own voice is taken out before the
//! detector, the wake word or whisper see it (promise 5).
//!
//! The far end is exactly what was handed to the output device, volume applied (a sink hands it
//! to a [`PlaybackTap`]); a [`Reference`] keeps it on a 16 kHz time line, and a [`Canceller`]
//! (WebRTC's AEC3 in pure Rust, `sonora-aec3`) takes it out of each captured frame. In the
//! voice loop the canceller runs on a thread of its own right behind the microphone
//! ([`EchoCancelled`]), so a transcription that holds the listener never shifts the capture
//! against the reference; `jarvis listen --playback` feeds the two files to the same canceller
//! frame by frame.
//!
//! Around AEC3: each frame goes on with both of its outputs — the suppressed one is judged
//! (onsets, voiced frames), the linear filter's is what an utterance keeps, since the suppressor
//! holds back the first syllables of a person speaking over the voice. A frame it took most out
//! of while the voice rings is *residue* and never opens an utterance (what it leaves while it
//! converges is loud enough to sound like speech) — unless its linear filter, which takes most
//! of the echo out, kept most of the frame: that is a person speaking over the voice, whom the
//! suppressor holds back. Where the microphone's loudness does not follow the voice at all
//! (headphones) the microphone is listened to as it is, since AEC3 would hold back the user's
//! words while it learns that no echo comes back.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rubato::{FftFixedIn, Resampler};
use sonora::high_pass_filter::HighPassFilter;
use sonora_aec3::block::Block;
use sonora_aec3::block_processor::BlockProcessor;
use sonora_aec3::config::EchoCanceller3Config;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::audio::{AudioSource, Capture, DeviceLost};
pub use super::audio::{EchoJudged, EchoPath, PlaybackTap};
use super::listen::{ListenEvent, Listener, Shared};
use super::{VoiceError, FRAME, SAMPLE_RATE};

/// Samples per 10 ms at the listening rate: the resampler's block.
const BLOCK: usize = SAMPLE_RATE as usize / 100;

/// A streaming resampler to the listening rate, for one input rate.
pub(crate) struct ToListeningRate {
    rate: u32,
    resampler: Option<FftFixedIn<f32>>,
    input: Vec<f32>,
    /// Output samples still to drop: the resampler's own delay, so that what comes out sits
    /// where it was played.
    delay: usize,
}

impl ToListeningRate {
    pub(crate) fn new(rate: u32) -> Result<ToListeningRate, VoiceError> {
        let resampler = if rate == SAMPLE_RATE {
            None
        } else {
            // 10 ms blocks: the resampler's own delay stays about a block.
            Some(
                FftFixedIn::<f32>::new(
                    rate as usize,
                    SAMPLE_RATE as usize,
                    (rate as usize / 100).max(1),
                    1,
                    1,
                )
                .map_err(|e| VoiceError::Resample(e.to_string()))?,
            )
        };
        Ok(ToListeningRate {
            rate,
            delay: resampler.as_ref().map_or(0, |r| r.output_delay()),
            resampler,
            input: Vec::new(),
        })
    }

    pub(crate) fn push(&mut self, samples: &[f32], out: &mut Vec<f32>) {
        match &mut self.resampler {
            None => out.extend_from_slice(samples),
            Some(resampler) => {
                self.input.extend_from_slice(samples);
                let need = resampler.input_frames_next();
                let mut at = 0;
                while self.input.len() - at >= need {
                    if let Ok(block) = resampler.process(&[&self.input[at..at + need]], None) {
                        let drop = self.delay.min(block[0].len());
                        self.delay -= drop;
                        out.extend_from_slice(&block[0][drop..]);
                    }
                    at += need;
                }
                self.input.drain(..at);
            }
        }
    }
}

/// Puts what a sink hands over, in the pieces it comes in, on the listening rate's time line:
/// each piece's samples resampled, and where they start (an anchor instant and a count of
/// samples after it). Pieces that follow on from the last are placed right after it, however
/// the resampler buffers them; after a gap a new anchor is taken (and the resampler starts
/// afresh, so nothing of before bleeds into it).
pub(crate) struct Placer {
    resampler: Option<ToListeningRate>,
    anchor: Instant,
    emitted: u64,
    next_input: Option<Instant>,
}

impl Default for Placer {
    fn default() -> Self {
        Placer {
            resampler: None,
            anchor: Instant::now(),
            emitted: 0,
            next_input: None,
        }
    }
}

impl Placer {
    /// The piece at the listening rate, with its anchor and the offset from it of its first
    /// sample; `None` if the rate cannot be resampled.
    pub(crate) fn place(
        &mut self,
        samples: &[f32],
        rate: u32,
        at: Instant,
    ) -> Option<(Instant, u64, Vec<f32>)> {
        let gap = self.next_input.is_none_or(|next| at > next + REANCHOR);
        if gap || self.resampler.as_ref().map(|r| r.rate) != Some(rate) {
            match ToListeningRate::new(rate) {
                Ok(r) => self.resampler = Some(r),
                Err(err) => {
                    tracing::warn!(%err, rate, "the echo reference cannot take this rate");
                    return None;
                }
            }
            self.anchor = at;
            self.emitted = 0;
        }
        let length = Duration::from_secs_f64(samples.len() as f64 / f64::from(rate.max(1)));
        self.next_input = Some(at.max(self.next_input.unwrap_or(at)) + length);
        let mut out =
            Vec::with_capacity(samples.len() * SAMPLE_RATE as usize / rate as usize + BLOCK);
        if let Some(r) = self.resampler.as_mut() {
            r.push(samples, &mut out);
        }
        let offset = self.emitted;
        self.emitted += out.len() as u64;
        Some((self.anchor, offset, out))
    }
}

/// A gap this long in what is played (the device ran dry, or a new answer began) starts the
/// reference's time line anew at the wall clock; shorter ones are taken as the device's own
/// jitter.
const REANCHOR: Duration = Duration::from_millis(30);
/// How much of the past the reference keeps for a capture running late.
const KEEP: usize = 2 * SAMPLE_RATE as usize;

struct Timeline {
    epoch: Instant,
    /// The first sample of `samples` on the time line (16 kHz samples since `epoch`).
    start: i64,
    samples: VecDeque<f32>,
    placer: Placer,
}

impl Timeline {
    fn index_of(&self, at: Instant) -> i64 {
        let since = at.saturating_duration_since(self.epoch).as_secs_f64();
        (since * f64::from(SAMPLE_RATE)) as i64
    }
}

/// What Jarvis played, on a 16 kHz time line shared with the microphone. Cheap to clone.
#[derive(Clone)]
pub struct Reference {
    inner: Arc<Mutex<Timeline>>,
}

impl Default for Reference {
    fn default() -> Self {
        Reference::new()
    }
}

impl Reference {
    /// An empty reference.
    pub fn new() -> Reference {
        Reference {
            inner: Arc::new(Mutex::new(Timeline {
                epoch: Instant::now(),
                start: 0,
                samples: VecDeque::new(),
                placer: Placer::default(),
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Timeline> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The time-line index of `at`.
    fn index_of(&self, at: Instant) -> i64 {
        self.lock().index_of(at)
    }

    /// What was played over `[from, from + n)` on the time line (silence where nothing was).
    fn read(&self, from: i64, n: usize) -> Vec<f32> {
        let mut timeline = self.lock();
        let mut out = vec![0.0; n];
        let start = timeline.start;
        for (i, slot) in out.iter_mut().enumerate() {
            let at = from + i as i64 - start;
            if at >= 0 {
                if let Some(s) = timeline.samples.get(at as usize) {
                    *slot = *s;
                }
            }
        }
        // What lies well behind the reader is not needed again.
        let behind = (from - KEEP as i64 - timeline.start).clamp(0, timeline.samples.len() as i64);
        timeline.samples.drain(..behind as usize);
        timeline.start += behind;
        out
    }
}

impl PlaybackTap for Reference {
    fn played(&self, samples: &[f32], rate: u32, at: Instant) {
        if samples.is_empty() || rate == 0 {
            return;
        }
        let mut timeline = self.lock();
        let Some((anchor, offset, resampled)) = timeline.placer.place(samples, rate, at) else {
            return;
        };
        let write = timeline.index_of(anchor) + offset as i64;
        let end = timeline.start + timeline.samples.len() as i64;
        if timeline.samples.is_empty() {
            timeline.start = write;
        } else if write > end {
            let gap = (write - end) as usize;
            timeline.samples.extend(std::iter::repeat_n(0.0, gap));
        }
        // (`write` never falls behind what is stored: it only moves on.)
        let offset = (write - timeline.start).max(0) as usize;
        timeline.samples.truncate(offset);
        timeline.samples.extend(resampled.iter().copied());
        // Bound it even if nobody reads.
        let len = timeline.samples.len();
        if len > 4 * KEEP {
            let drop = len - 2 * KEEP;
            timeline.samples.drain(..drop);
            timeline.start += drop as i64;
        }
    }
}

/// How the canceller did, for `jarvis doctor`, the benchmarks and the tests.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EchoStats {
    /// AEC3's own estimate of the echo removed (dB), once it has one.
    pub erle_db: Option<f64>,
    /// The delay it found between what played and what the microphone heard (ms).
    pub delay_ms: Option<i32>,
}

/// Frames (20 ms) of Jarvis's voice the canceller needs to converge.
const SETTLING_FRAMES: u32 = 250;
/// How long after the voice stops its echo can still ring in a room (frames).
const RING_FRAMES: u32 = 25;
/// A frame left with less than this share of its energy was echo (−10 dB).
const RESIDUE: f64 = 0.1;
/// While settling: less than half (−3 dB).
const SETTLING_RESIDUE: f64 = 0.5;
/// A frame whose linear filter output kept at least this share of what was heard (−3 dB), where
/// the filter takes most of the echo out, holds a person speaking over the voice, however much
/// the suppressor took out: the filter found little of the voice's echo in it.
const NEAR_END_KEPT: f64 = 0.5;
/// The filter takes most of the echo out once it takes this much out (6 dB) of the frames the
/// voice sounded in (the median of the last [`FILTERED_FRAMES`]: a person speaking over a few of
/// them does not move it). How much it can take out is bounded by the room's reverberation,
/// longer than the filter: 8–12 dB in the simulated rooms, so 8 dB left a lone "Stop." unheard
/// in a laptop's room, where 6 dB costs two ducks in 50 first answers after a restart
/// (BENCHMARKS.md).
const FILTERED_DB: f32 = 6.0;
const FILTERED_FRAMES: usize = 50;

/// A frame with Jarvis's voice taken out.
#[derive(Debug, Clone, PartialEq)]
pub struct Cancelled {
    /// The frame.
    pub frame: Vec<i16>,
    /// What the canceller tells of it besides.
    pub judged: EchoJudged,
}

impl Cancelled {
    /// A frame that goes through as it was heard, the path as the canceller knows it (`Unknown`:
    /// whatever echo is in it, not knowing whether any comes back; `Absent`: none can be).
    fn as_heard(capture: &[i16], path: EchoPath) -> Cancelled {
        Cancelled {
            frame: capture.to_vec(),
            judged: EchoJudged {
                residue: false,
                linear: capture.to_vec(),
                voice_free: 1.0,
                path,
            },
        }
    }
}

/// Tells whether the microphone's loudness follows the voice's, at any delay up to 500 ms: the
/// correlation of their 20 ms log energies over the last 3 s, judged every 100 ms once every
/// delay compares a second of the voice (about 1.5 s into it).
struct PathJudge {
    played: VecDeque<f32>,
    heard: VecDeque<f32>,
    active: VecDeque<bool>,
    frames: u32,
    low_runs: u32,
    /// Frames since the voice last sounded.
    quiet: u32,
    /// The delay (frames) of the last judgements' best correlations, and how many in a row
    /// agreed on it: an echo keeps its delay, a person's speech matches the voice only by chance,
    /// each time at another.
    lag: Option<usize>,
    agreed: u32,
    path: EchoPath,
    /// The path is `Present` because this microphone was found to hear the voice before (a
    /// [`Rooms`] remembered it), not yet because the voice was heard to come back now: the
    /// judgement that it does not (headphones plugged in since), made three times in a row,
    /// gives it up.
    recalled: bool,
    /// Judgements in a row, while only remembered, that the microphone does not follow the
    /// voice. One is not enough: the first of an answer has read 0 in a room that echoes (its
    /// opening the voice's loudness barely changes through), nor are judgements of a pause
    /// in the voice: nothing new was heard, and they repeat the last.
    unfollowed: u32,
    /// Frames of voice pushed since the last judgement.
    voiced_since: u32,
}

const JUDGE_WINDOW: usize = 150;
const JUDGE_LAGS: usize = 25;
/// Frames of voice a judgement compares at the least (1 s): fewer match anything by chance.
const MIN_COMPARED: usize = 50;
/// A frame the microphone heard something in stands this far above the quietest of the window.
const HEARD_OVER_FLOOR_DB: f32 = 6.0;
/// The share of the voice's frames an echo is heard in at the least.
const COVERED: f32 = 0.6;
/// Frames of the judge's window (300 ms, from the voice's first where it starts after a quiet),
/// and frames of voice among them, over which a microphone that heard nothing rise
/// [`HEARD_OVER_FLOOR_DB`] above its quietest hears no echo: a room's comes back 20–60 ms late,
/// a wireless speaker's within some 250 ms. (Known this early, a person with headphones who
/// speaks half a second into the first answer is heard, and the voice lowered for them, at once.)
const EARLY_FRAMES: usize = 15;
/// Frames of voice among [`EARLY_FRAMES`] at the least.
const EARLY_VOICED: usize = 12;
/// Judgements in a row (100 ms apart) that the microphone does not follow the voice that give
/// up a remembered echo path.
const RECALLED_UNFOLLOWED: u32 = 3;

impl PathJudge {
    fn new() -> PathJudge {
        PathJudge {
            played: VecDeque::new(),
            heard: VecDeque::new(),
            active: VecDeque::new(),
            frames: 0,
            low_runs: 0,
            quiet: 0,
            lag: None,
            agreed: 0,
            path: EchoPath::Unknown,
            recalled: false,
            unfollowed: 0,
            voiced_since: 0,
        }
    }

    fn push(&mut self, capture: &[i16], played: &[f32]) -> EchoPath {
        let log = |mean_square: f64| (10.0 * mean_square.max(1e-7).log10()) as f32;
        let n = capture.len().max(1) as f64;
        let heard = capture
            .iter()
            .map(|s| (f64::from(*s) / 32768.0).powi(2))
            .sum::<f64>()
            / n;
        let playing =
            played.iter().map(|s| f64::from(*s).powi(2)).sum::<f64>() / played.len().max(1) as f64;
        let active = super::audio::loudness(played) > 0.2;
        self.quiet = if active { 0 } else { self.quiet + 1 };
        self.voiced_since += u32::from(active);
        if self.quiet >= 50 {
            // A second of quiet: the next judgement is of the next thing said alone, not of the
            // user's question before it.
            self.played.clear();
            self.heard.clear();
            self.active.clear();
            self.unfollowed = 0;
            return self.path;
        }
        self.played.push_back(log(playing));
        self.heard.push_back(log(heard));
        self.active.push_back(active);
        while self.played.len() > JUDGE_WINDOW + JUDGE_LAGS {
            self.played.pop_front();
            self.heard.pop_front();
            self.active.pop_front();
        }
        self.frames += 1;
        if self.frames % 5 == 0 {
            self.judge();
        }
        self.path
    }

    fn judge(&mut self) {
        let len = self.heard.len();
        let active = self.active.iter().filter(|a| **a).count();
        if self.path == EchoPath::Unknown && len >= EARLY_FRAMES && active >= EARLY_VOICED {
            let (quietest, loudest) = self
                .heard
                .iter()
                .fold((f32::MAX, f32::MIN), |(lo, hi), h| (lo.min(*h), hi.max(*h)));
            if loudest < quietest + HEARD_OVER_FLOOR_DB {
                self.path = EchoPath::Absent;
                return;
            }
        }
        if len < JUDGE_LAGS + 10 {
            return;
        }
        if active < 15 {
            return;
        }
        let span = len - JUDGE_LAGS;
        let heard: Vec<f32> = self.heard.iter().skip(JUDGE_LAGS).copied().collect();
        // Only the stretches where the voice sounded are compared: an echo follows the voice
        // syllable by syllable there, while a person speaking over it matches it only in when
        // both fall silent (a question said as a sentence begins), which says nothing. And an
        // echo is heard through nearly all of the voice: a person, who also pauses, is not.
        let floor = heard.iter().copied().fold(f32::MAX, f32::min);
        let Some((best_lag, best)) = (0..=JUDGE_LAGS)
            .map(|lag| {
                let (played, heard): (Vec<f32>, Vec<f32>) = self
                    .played
                    .iter()
                    .zip(self.active.iter())
                    .skip(JUDGE_LAGS - lag)
                    .take(span)
                    .zip(heard.iter())
                    .filter(|((_, active), _)| **active)
                    .map(|((p, _), h)| (*p, *h))
                    .unzip();
                if played.len() < MIN_COMPARED {
                    return None;
                }
                let covered = heard
                    .iter()
                    .filter(|h| **h > floor + HEARD_OVER_FLOOR_DB)
                    .count();
                let score = if (covered as f32) < COVERED * played.len() as f32 {
                    0.0
                } else {
                    correlation(&played, &heard)
                };
                Some((lag, score))
            })
            // Every delay is judged on enough of the voice, or none is: early in an answer the
            // longest delays reach back to more of it than the shortest, and a judgement of
            // those alone read "no echo" in rooms that echo 20–60 ms late.
            .collect::<Option<Vec<(usize, f32)>>>()
            .and_then(|scores| {
                scores
                    .into_iter()
                    .fold(None, |a: Option<(usize, f32)>, b| match a {
                        Some(a) if a.1 >= b.1 => Some(a),
                        _ => Some(b),
                    })
            })
        else {
            // Too little of the voice yet to say anything.
            return;
        };
        let voiced_since = std::mem::take(&mut self.voiced_since);
        tracing::trace!(best, best_lag, path = ?self.path, "the echo path judged");
        let same = self.lag.is_some_and(|l| l.abs_diff(best_lag) <= 1);
        self.agreed = if best >= 0.5 && same {
            self.agreed + 1
        } else {
            0
        };
        self.lag = (best >= 0.5).then_some(best_lag);
        self.path = match self.path {
            _ if best >= 0.5 && self.agreed >= 2 => {
                self.low_runs = 0;
                self.recalled = false;
                EchoPath::Present
            }
            // Remembered, and not heard now: the room is not the one it was.
            EchoPath::Present if self.recalled => {
                if best >= 0.25 {
                    self.unfollowed = 0;
                } else if voiced_since > 0 {
                    self.unfollowed += 1;
                }
                if self.unfollowed >= RECALLED_UNFOLLOWED {
                    self.recalled = false;
                    EchoPath::Absent
                } else {
                    EchoPath::Present
                }
            }
            EchoPath::Present if best < 0.15 => {
                // Speakers are not given up on a few quiet judgements: a person talking over the
                // voice lowers the correlation too. Five seconds of voice that the microphone
                // never follows (headphones plugged in) are needed.
                self.low_runs += 1;
                if self.low_runs >= 50 {
                    EchoPath::Absent
                } else {
                    EchoPath::Present
                }
            }
            EchoPath::Unknown if best < 0.25 => EchoPath::Absent,
            path => path,
        };
    }
}

fn correlation(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    if n < 2 {
        return 0.0;
    }
    let mean = |x: &[f32]| x[..n].iter().sum::<f32>() / n as f32;
    let (ma, mb) = (mean(a), mean(b));
    let (mut ab, mut aa, mut bb) = (0.0, 0.0, 0.0);
    for i in 0..n {
        let (x, y) = (a[i] - ma, b[i] - mb);
        ab += x * y;
        aa += x * x;
        bb += y * y;
    }
    if aa <= f32::EPSILON || bb <= f32::EPSILON {
        return 0.0;
    }
    ab / (aa.sqrt() * bb.sqrt())
}

/// AEC3's block: 4 ms at the listening rate.
const AEC_BLOCK: usize = 64;

/// WebRTC's AEC3 on 16 kHz mono, driven block by block as `sonora`'s audio processing drives it
/// (the capture high-pass filtered first, samples on the 16-bit scale, its default
/// configuration), for what `sonora` does not hand out: the linear filter's output beside the
/// suppressed one.
struct Aec3 {
    processor: BlockProcessor,
    high_pass: HighPassFilter,
    delay_hint_ms: i32,
    render: Block,
    capture: Block,
    linear: Block,
}

impl Aec3 {
    fn new(delay_hint_ms: i32) -> Aec3 {
        Aec3 {
            processor: BlockProcessor::new(
                &EchoCanceller3Config::default(),
                SAMPLE_RATE as usize,
                1,
                1,
            ),
            high_pass: HighPassFilter::new(SAMPLE_RATE as i32, 1),
            delay_hint_ms,
            render: Block::new(1, 1),
            capture: Block::new(1, 1),
            linear: Block::new(1, 1),
        }
    }

    /// `capture` with the echo of `played` (the same span, silence past its end) taken out: by
    /// the whole canceller, and by its linear filter alone.
    fn process(&mut self, capture: &[i16], played: &[f32]) -> (Vec<i16>, Vec<i16>) {
        // (Saturation is judged on what was heard, before the high-pass filter takes the
        // offset out, for the whole frame: as `sonora` judges it.)
        let saturated = capture.iter().any(|s| s.unsigned_abs() >= 32700);
        let mut mic = vec![Vec::with_capacity(
            capture.len().next_multiple_of(AEC_BLOCK),
        )];
        mic[0].extend(capture.iter().map(|s| f32::from(*s)));
        mic[0].resize(capture.len().next_multiple_of(AEC_BLOCK), 0.0);
        self.high_pass.process_channels(&mut mic);
        let mut out = Vec::with_capacity(mic[0].len());
        let mut linear = Vec::with_capacity(mic[0].len());
        for (i, block) in mic[0].chunks(AEC_BLOCK).enumerate() {
            let far = self.render.view_mut(0, 0);
            far.fill(0.0);
            if let Some(p) = played.get(i * AEC_BLOCK..) {
                for (f, p) in far.iter_mut().zip(p) {
                    *f = p.clamp(-1.0, 1.0) * 32768.0;
                }
            }
            self.processor.buffer_render(&self.render);
            self.capture.view_mut(0, 0).copy_from_slice(block);
            self.processor.set_audio_buffer_delay(self.delay_hint_ms);
            // (AEC3 writes the linear output whenever it processes a block; one it skipped
            // would go on as it was heard.)
            self.linear.view_mut(0, 0).copy_from_slice(block);
            self.processor.process_capture(
                false,
                saturated,
                Some(&mut self.linear),
                &mut self.capture,
            );
            let to_i16 = |s: &f32| s.round().clamp(-32768.0, 32767.0) as i16;
            out.extend(self.capture.view(0, 0).iter().map(to_i16));
            linear.extend(self.linear.view(0, 0).iter().map(to_i16));
        }
        out.truncate(capture.len());
        linear.truncate(capture.len());
        (out, linear)
    }
}

/// WebRTC's AEC3 with its residual-echo suppressor, on 16 kHz mono, fed 20 ms frames.
pub struct Canceller {
    aec: Aec3,
    judge: PathJudge,
    /// Frames of voice still to hear before it has converged.
    settling: u32,
    /// Frames for which the echo may still ring.
    ringing: u32,
    /// What the linear filter took out (dB) of the last frames the voice sounded in.
    filtered_db: VecDeque<f32>,
    /// Whether any voice was played to it yet (before, it has nothing to tell).
    heard_voice: bool,
    /// The microphone it last heard through, by name where known (`None`: never opened).
    microphone: Option<Option<String>>,
    /// Where AEC3 starts looking for the echo (kept to start afresh on another microphone).
    delay_hint_ms: u32,
}

/// The share of what the linear filter kept of a frame (`kept`, of `heard`: energies) that is
/// not the voice's echo, where the filter takes `filtered_db` out of the echo alone: heard is
/// someone's voice and the echo, `heard = near + echo`, and the filter keeps the one and a
/// fraction `a` of the other, `kept = near + a·echo`; so `near = (kept − a·heard) / (1 − a)`.
/// (Until 2026-12-07 the share was `1 − a·heard/kept`, the numerator alone, which does not exceed
/// `1 − a` where the filter kept no more than was heard: a person speaking alone over the voice measured 0.8 where the filter took 7 dB out,
/// and a short "Stop!" in a room it took little out of opened nothing.) Where the filter takes
/// out less than [`FILTERED_DB`], the two cannot be told apart by it, and the share is left as
/// the numerator, which stays below `1 − a` where the filter kept no more than was heard (and
/// can pass it where it kept more). At most [`MEASURED_AT_MOST`]: a share of 1 says
/// nothing was measured (the voice did not ring), and a person the filter kept a little louder
/// than they were heard was measured.
fn near_end_share(heard: f64, kept: f64, filtered_db: f32) -> f32 {
    let a = 10f64.powf(-f64::from(filtered_db) / 10.0);
    let numerator = 1.0 - a * heard / kept.max(1.0);
    let share = if filtered_db >= FILTERED_DB {
        numerator / (1.0 - a)
    } else {
        numerator
    };
    (share as f32).clamp(0.0, MEASURED_AT_MOST)
}

/// The most a measured share of someone else comes to ([`near_end_share`]): 1 is kept for a
/// frame nothing was measured in (see `EchoJudged::voice_free`), which the listener reads as the
/// canceller not at work on it.
const MEASURED_AT_MOST: f32 = 0.999;

impl Canceller {
    /// A canceller told to expect the echo about `delay_hint_ms` after it was played (its own
    /// delay estimator finds the true delay; the hint is where it starts).
    pub fn new(delay_hint_ms: u32) -> Canceller {
        Canceller {
            aec: Aec3::new(delay_hint_ms.min(500) as i32),
            judge: PathJudge::new(),
            settling: SETTLING_FRAMES,
            ringing: 0,
            filtered_db: VecDeque::with_capacity(FILTERED_FRAMES),
            heard_voice: false,
            microphone: None,
            delay_hint_ms,
        }
    }

    /// Starts from what was learned of this microphone before (`echoes`: Jarvis's voice came
    /// back into it): where it did, its echo is cancelled from the first frame rather than
    /// listened to as it is until the voice is heard to come back — the opening of the first
    /// answer, which ducked the voice for its own echo (BENCHMARKS.md). Three judgements in a
    /// row that no echo comes back now (about 2 s into the voice) give the memory up. Only
    /// while it does not know for itself.
    pub fn recall(&mut self, echoes: bool) {
        if echoes && self.judge.path == EchoPath::Unknown {
            self.judge.path = EchoPath::Present;
            self.judge.recalled = true;
        }
    }

    /// Opens `microphone` (its name, where the source knows it), with what `rooms` remembers of
    /// it: where it is not the microphone heard through before (the system's default changed
    /// between two openings), what was found of that one does not hold for this one.
    fn opened(&mut self, microphone: Option<&str>, rooms: &Rooms) {
        let now = Some(microphone.map(str::to_string));
        if self.microphone.is_some() && self.microphone != now {
            // Another room, or another device in it: what AEC3 fitted and the judge found were
            // of the last one.
            *self = Canceller::new(self.delay_hint_ms);
        }
        self.microphone = now;
        if let Some(name) = microphone {
            self.recall(rooms.echoes(name));
        }
    }

    /// What it has found out for itself: whether the voice comes back (`Some(true)`: heard to;
    /// `Some(false)`: heard not to), or `None` while it does not know or only remembers.
    pub fn learned(&self) -> Option<bool> {
        match self.judge.path {
            EchoPath::Present if !self.judge.recalled => Some(true),
            EchoPath::Absent => Some(false),
            _ => None,
        }
    }

    /// One 20 ms frame heard, with what was played over the same 20 ms (16 kHz; silence when
    /// nothing was): the frame without Jarvis's voice.
    pub fn cancel(&mut self, capture: &[i16], played: &[f32]) -> Cancelled {
        self.heard_voice |= played.iter().any(|s| *s != 0.0);
        let (out, linear) = self.aec.process(capture, played);
        match self.judge.push(capture, played) {
            // (The canceller runs on, ready for the day the speaker is heard again.)
            EchoPath::Absent => return Cancelled::as_heard(capture, EchoPath::Absent),
            // Until it is known whether the voice comes back (a second or two into the first
            // answer it ever speaks), what is heard is listened to as it is, as before there was
            // a canceller: AEC3 would hold back the words of a person with headphones. (The
            // listener then knows a word of the answer heard for what it may be: the voice.)
            EchoPath::Unknown if self.heard_voice => {
                return Cancelled::as_heard(capture, EchoPath::Unknown)
            }
            EchoPath::Unknown => return Cancelled::as_heard(capture, EchoPath::Absent),
            EchoPath::Present => {}
        }
        let energy = |x: &[i16]| x.iter().map(|s| f64::from(*s).powi(2)).sum::<f64>();
        let (heard, kept) = (energy(capture), energy(&linear));
        if super::audio::loudness(played) > 0.0 {
            self.settling = self.settling.saturating_sub(1);
            self.ringing = RING_FRAMES;
            if heard > 0.0 {
                if self.filtered_db.len() == FILTERED_FRAMES {
                    self.filtered_db.pop_front();
                }
                self.filtered_db
                    .push_back((10.0 * (heard / kept.max(1.0)).log10()) as f32);
            }
        }
        let mut residue = false;
        let mut voice_free = 1.0;
        if self.ringing > 0 {
            self.ringing -= 1;
            // A frame the canceller took most out of (−10 dB or more) while Jarvis's voice can
            // still be heard was its echo: what is left is residue, not a person, who keeps
            // most of a frame's energy.
            // (While it settles, the canceller takes less out: half is enough to tell.)
            let share = if self.settling > 0 {
                SETTLING_RESIDUE
            } else {
                RESIDUE
            };
            let filtered_db = self.filtered_db();
            // (A person who speaks over the voice is held back by the suppressor until it
            // judges them the dominant near end — the vowel of "Stop." came out 10–30 dB down,
            // a residue by energy alone, and no utterance opened; the linear filter keeps them
            // whole, where it takes 6–15 dB of the echo out. Until it has found the echo, a
            // second or two into the voice, it takes nothing out of anything.)
            let near_end =
                kept >= heard * NEAR_END_KEPT && filtered_db.is_some_and(|db| db >= FILTERED_DB);
            if let Some(db) = filtered_db {
                voice_free = near_end_share(heard, kept, db);
            }
            residue = energy(&out) < heard * share && !near_end;
        }
        Cancelled {
            frame: out,
            judged: EchoJudged {
                residue,
                linear,
                voice_free,
                path: EchoPath::Present,
            },
        }
    }

    /// What the linear filter takes out of the echo (dB): the median over the last frames the
    /// voice sounded in, once there are enough of them (a person speaking over a few does not
    /// move it).
    fn filtered_db(&self) -> Option<f32> {
        if self.filtered_db.len() < FILTERED_FRAMES {
            return None;
        }
        let mut sorted: Vec<f32> = self.filtered_db.iter().copied().collect();
        sorted.sort_by(f32::total_cmp);
        Some(sorted[FILTERED_FRAMES / 2])
    }

    /// What it measured so far.
    pub fn stats(&self) -> EchoStats {
        let metrics = self.aec.processor.get_metrics();
        EchoStats {
            erle_db: self
                .heard_voice
                .then_some(metrics.echo_return_loss_enhancement),
            delay_ms: self.heard_voice.then_some(metrics.delay_ms),
        }
    }
}
/// The canceller over two recordings on one time line (`jarvis listen --playback`, the tests and
/// the benchmarks): frame `k` of the microphone is paired with frame `k` of what played.
pub struct OfflineEcho {
    played: Vec<f32>,
    canceller: Canceller,
    frame: usize,
    /// Frames since something was last played loud enough to be heard.
    quiet_frames: usize,
}

/// How long after Jarvis's voice last sounded it still counts as speaking (its echo's tail).
const SPEAKING_TAIL_FRAMES: usize = 25;

impl OfflineEcho {
    /// What played, at 16 kHz.
    pub fn new(played: &[f32]) -> OfflineEcho {
        OfflineEcho {
            played: played.to_vec(),
            // The two share a time line: the delay is the room's alone.
            canceller: Canceller::new(0),
            frame: 0,
            quiet_frames: SPEAKING_TAIL_FRAMES,
        }
    }

    /// What played and what the microphone heard, both whole (`jarvis listen --playback`):
    /// whether the voice comes back is judged over the whole pair first, so the canceller knows
    /// it from the first frame (in the loop it learns it a second or two into its first answer).
    pub fn knowing(played: &[f32], heard: &[i16]) -> OfflineEcho {
        let mut judge = PathJudge::new();
        for (k, frame) in heard.chunks(FRAME).enumerate() {
            let from = (k * FRAME).min(played.len());
            let to = (from + FRAME).min(played.len());
            judge.push(frame, &played[from..to]);
        }
        let mut echo = OfflineEcho::new(played);
        echo.canceller.judge.path = judge.path;
        echo
    }

    /// What played, the canceller starting from what was remembered of the room (see
    /// [`Canceller::recall`]): a restart of the loop, or the next run, in a room it has heard.
    pub fn recalling(played: &[f32], echoes: bool) -> OfflineEcho {
        let mut echo = OfflineEcho::new(played);
        echo.canceller.recall(echoes);
        echo
    }

    /// Hears the next microphone frame through the canceller with `listener` (telling `shared`
    /// whether the voice plays), as the voice loop does; without a canceller, as it is.
    pub fn listen(
        echo: Option<&mut OfflineEcho>,
        listener: &mut Listener,
        shared: &Shared,
        frame: &[i16],
    ) -> Result<Vec<ListenEvent>, VoiceError> {
        match echo {
            Some(echo) => {
                let (cleaned, speaking) = echo.next(frame);
                shared.set_speaking(speaking);
                listener.push_judged(&cleaned.frame, Some(&cleaned.judged))
            }
            None => listener.push(frame),
        }
    }

    /// The echo taken out of `heard` (16 kHz) after its first `skip_s` seconds, when `played`
    /// is what played: its energy before over after, in dB.
    pub fn erle_db(heard: &[f32], played: &[f32], skip_s: f32) -> f64 {
        let mut echo = OfflineEcho::new(played);
        let heard: Vec<i16> = heard.iter().map(|s| super::audio::to_i16(*s)).collect();
        let skip = (skip_s * SAMPLE_RATE as f32) as usize;
        let (mut before, mut after) = (0.0_f64, 0.0_f64);
        let energy = |x: &[i16]| x.iter().map(|s| f64::from(*s).powi(2)).sum::<f64>();
        for (k, frame) in super::audio::frames_of(&heard).iter().enumerate() {
            let clean = echo.next(frame).0.frame;
            if k * FRAME >= skip {
                before += energy(frame);
                after += energy(&clean);
            }
        }
        10.0 * (before / after.max(1.0)).log10()
    }

    /// The next microphone frame, cleaned, and whether Jarvis's voice was playing around it.
    pub fn next(&mut self, frame: &[i16]) -> (Cancelled, bool) {
        let from = (self.frame * FRAME).min(self.played.len());
        let to = (from + FRAME).min(self.played.len());
        let played = &self.played[from..to];
        self.frame += 1;
        let loud = super::audio::loudness(played) > 0.0;
        self.quiet_frames = if loud { 0 } else { self.quiet_frames + 1 };
        (
            self.canceller.cancel(frame, played),
            self.quiet_frames < SPEAKING_TAIL_FRAMES,
        )
    }

    /// What the canceller measured.
    pub fn stats(&self) -> EchoStats {
        self.canceller.stats()
    }

    /// What the canceller has found out for itself (see [`Canceller::learned`]).
    pub fn learned(&self) -> Option<bool> {
        self.canceller.learned()
    }
}

/// A microphone whose frames have Jarvis's voice taken out: a thread reads the inner capture as
/// it comes, pairs each frame with what was played over the same 20 ms, and passes on the
/// cleaned frame. One canceller serves every opening, so it stays converged while the
/// microphone closes and opens again. A capture that is echo-cancelled already passes as it is.
pub struct EchoCancelled {
    inner: Arc<dyn AudioSource>,
    reference: Reference,
    canceller: Arc<Mutex<Canceller>>,
    rooms: Rooms,
}

impl EchoCancelled {
    /// `inner` with the echo of what `reference` records taken out; what it learns of whether
    /// the voice comes back into the microphone goes into `rooms`, and what `rooms` knew of it
    /// is where it starts.
    pub fn new(
        inner: Arc<dyn AudioSource>,
        reference: Reference,
        delay_hint_ms: u32,
        rooms: Rooms,
    ) -> Self {
        EchoCancelled {
            inner,
            reference,
            canceller: Arc::new(Mutex::new(Canceller::new(delay_hint_ms))),
            rooms,
        }
    }
}

/// How long a captured frame waits before it is cancelled: what was played over the same 20 ms
/// reaches the reference a little late (a sink hands samples over in blocks, and resampling
/// them holds a block back), and the frame waits for it rather than meet a reference with a hole.
const CAPTURE_LAG: i64 = SAMPLE_RATE as i64 * 40 / 1000;

/// The capture side's clock: where on the time line each frame of an opening was heard. A frame
/// arrives after it was heard, never before, and often well after on a busy machine (the reading
/// thread gets no core for a while, then frames come in a burst): frame `k` is placed at `k`
/// frames after the earliest anchor its recent arrivals allow (the least of `arrival − (k + 1)
/// frames` over the last [`CLOCK_WINDOW`] frames). A burst after a stall keeps its frames where
/// they were heard, so the reference stays aligned with the echo; the window follows a device
/// clock that runs a little slow, and a gap in the frames, after a while.
#[derive(Default)]
struct CaptureClock {
    /// Frames placed so far.
    frames: i64,
    /// The candidate anchors of the window, increasing (a monotonic queue): frame index and
    /// anchor.
    anchors: VecDeque<(i64, i64)>,
}

/// Frames (20 ms) of arrivals the capture clock takes its anchor from: 4 s.
const CLOCK_WINDOW: i64 = 200;

impl CaptureClock {
    /// Notes a frame arriving at `now` (on the time line); its number in the opening.
    fn arrived(&mut self, now: i64) -> i64 {
        let k = self.frames;
        self.frames += 1;
        let anchor = now - (k + 1) * FRAME as i64;
        while self.anchors.back().is_some_and(|&(_, a)| a >= anchor) {
            self.anchors.pop_back();
        }
        self.anchors.push_back((k, anchor));
        while self
            .anchors
            .front()
            .is_some_and(|&(i, _)| i + CLOCK_WINDOW <= k)
        {
            self.anchors.pop_front();
        }
        k
    }

    /// Where frame `k`, arrived, begins by what the arrivals so far allow (a frame is placed
    /// when it leaves the wait, so a burst is spread by the burst's last frame: each of them
    /// arrived with it).
    fn start_of(&self, k: i64) -> i64 {
        let earliest = self.anchors.front().map_or(0, |&(_, a)| a);
        earliest + k * FRAME as i64
    }

    #[cfg(test)]
    fn frame_start(&mut self, now: i64) -> i64 {
        let k = self.arrived(now);
        self.start_of(k)
    }
}

impl AudioSource for EchoCancelled {
    fn open(&self) -> Result<Capture, VoiceError> {
        let mut inner = self.inner.open()?;
        if inner.cancels_echo {
            return Ok(inner);
        }
        let (tx, rx) = mpsc::channel(500);
        let (judged_tx, judged_rx) = std::sync::mpsc::channel();
        let close = CancellationToken::new();
        let lost = DeviceLost::default();
        let lost_here = lost.clone();
        let reference = self.reference.clone();
        let canceller = self.canceller.clone();
        let stop = close.clone();
        let rooms = self.rooms.clone();
        // (A microphone without a name is not remembered: it could be any.)
        let microphone = inner.device.clone();
        std::thread::Builder::new()
            .name("jarvis-echo".into())
            .spawn(move || {
                let mut clock = CaptureClock::default();
                let mut frames = 0_u64;
                let mut canceller = canceller.lock().unwrap_or_else(|p| p.into_inner());
                canceller.opened(microphone.as_deref(), &rooms);
                let mut learned = canceller.learned();
                let mut waiting: VecDeque<(i64, Vec<i16>)> = VecDeque::new();
                'capture: loop {
                    let arrived = inner.frames.blocking_recv();
                    if stop.is_cancelled() {
                        break;
                    }
                    let now = reference.index_of(Instant::now());
                    let ended = arrived.is_none();
                    if let Some(frame) = arrived {
                        waiting.push_back((clock.arrived(now), frame));
                        // Frames that came with it arrived now too: a device that hands over
                        // several at once heard the first of them that much earlier.
                        while let Ok(frame) = inner.frames.try_recv() {
                            waiting.push_back((clock.arrived(now), frame));
                        }
                    }
                    while let Some(&(k, _)) = waiting.front() {
                        let start = clock.start_of(k);
                        if !ended && start + FRAME as i64 + CAPTURE_LAG > now {
                            break;
                        }
                        let Some((_, frame)) = waiting.pop_front() else {
                            break;
                        };
                        let played = reference.read(start, frame.len());
                        let Cancelled { frame: cleaned, judged } = canceller.cancel(&frame, &played);
                        if canceller.learned() != learned {
                            learned = canceller.learned();
                            if let (Some(echoes), Some(name)) = (learned, microphone.as_deref()) {
                                rooms.learned(name, echoes);
                            }
                        }
                        frames += 1;
                        if frames % 500 == 0 {
                            let stats = canceller.stats();
                            tracing::debug!(erle_db = ?stats.erle_db, delay_ms = ?stats.delay_ms, "echo canceller");
                        }
                        // (The judgement goes first: the listener reads it after its frame.)
                        if judged_tx.send(judged).is_err() || tx.blocking_send(cleaned).is_err() {
                            break 'capture;
                        }
                        }
                    if ended {
                        break;
                    }
                }
                if let Some(why) = inner.lost() {
                    lost_here.set(why);
                }
                // `inner` is dropped here: the device closes.
            })
            .map_err(|e| VoiceError::Device(format!("cannot start the echo canceller: {e}")))?;
        let mut capture = Capture::new(rx, close, lost);
        capture.judged = Some(judged_rx);
        Ok(capture)
    }
}

/// The microphones Jarvis's voice was found to come back into (speakers in the same room), by
/// name, kept from one voice loop to the next and, in a file, from one run to the next: a
/// canceller opening a microphone it knows cancels from its first answer's first word (see
/// [`Canceller::recall`]). Only names are kept, never a sound. A file that cannot be read is
/// started afresh (it holds nothing that cannot be learned again in a second of voice); one
/// that cannot be written leaves the memory to this run.
#[derive(Debug, Clone, Default)]
pub struct Rooms(Arc<Mutex<RoomsInner>>, Arc<Mutex<u64>>);

#[derive(Debug, Default)]
struct RoomsInner {
    file: Option<std::path::PathBuf>,
    echoing: std::collections::BTreeSet<String>,
    /// Counts changes: a change is written only over an older one.
    version: u64,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct RoomsFile {
    /// The microphones the voice comes back into.
    echoing: Vec<String>,
}

/// The file in the data folder.
pub const ROOMS_FILE: &str = "rooms.json";

impl Rooms {
    /// A memory of this run alone.
    pub fn in_memory() -> Rooms {
        Rooms::default()
    }

    /// The memory kept in `file` (read now; written as it learns).
    pub fn kept_in(file: std::path::PathBuf) -> Rooms {
        let read = std::fs::read(&file).and_then(|bytes| {
            serde_json::from_slice::<RoomsFile>(&bytes).map_err(std::io::Error::from)
        });
        let echoing = match read {
            Ok(kept) => kept.echoing.into_iter().collect(),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Default::default(),
            Err(err) => {
                tracing::warn!(file = %file.display(), %err, "what the echo canceller learned of the room cannot be read; it learns again");
                Default::default()
            }
        };
        Rooms(
            Arc::new(Mutex::new(RoomsInner {
                file: Some(file),
                echoing,
                version: 0,
            })),
            Arc::default(),
        )
    }

    fn lock(&self) -> MutexGuard<'_, RoomsInner> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether Jarvis's voice was found to come back into `microphone`.
    pub fn echoes(&self, microphone: &str) -> bool {
        self.lock().echoing.contains(microphone)
    }

    /// Notes what a canceller found of `microphone`, and keeps it in the file where it changed
    /// (replaced whole, so a crash leaves the old file or the new).
    pub fn learned(&self, microphone: &str, echoes: bool) {
        let mut inner = self.lock();
        let changed = if echoes {
            inner.echoing.insert(microphone.to_string())
        } else {
            inner.echoing.remove(microphone)
        };
        let Some(file) = inner.file.clone().filter(|_| changed) else {
            return;
        };
        inner.version += 1;
        let version = inner.version;
        let kept = RoomsFile {
            echoing: inner.echoing.iter().cloned().collect(),
        };
        drop(inner);
        // Written outside the memory's lock (a loop opening a microphone asks it), and never
        // over a newer change.
        let mut written_version = self.1.lock().unwrap_or_else(|p| p.into_inner());
        if *written_version > version {
            return;
        }
        let written = serde_json::to_vec(&kept)
            .map_err(std::io::Error::from)
            .and_then(|bytes| crate::config::replace_file(&file, ".rooms-", ".json.tmp", &bytes));
        *written_version = version;
        if let Err(err) = written {
            tracing::warn!(file = %file.display(), %err, "what the echo canceller learned of the room cannot be kept; it is kept for this run");
        }
    }
}

/// Whether a microphone's name says it is already echo-cancelled by the sound server
/// (PulseAudio's or PipeWire's `echo-cancel` module), so Jarvis does not cancel twice.
pub fn is_echo_cancelled_source(name: &str) -> bool {
    let lower = name.to_lowercase();
    let folded: String = lower.chars().filter(|c| c.is_alphanumeric()).collect();
    folded.contains("echocancel")
        || lower
            .split(|c: char| !c.is_alphanumeric())
            .any(|word| word == "aec")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::voice::vad;

    #[test]
    fn a_person_alone_over_the_voice_is_measured_whole_and_its_echo_alone_as_no_one() {
        // The linear filter takes 7 dB out of the echo: it keeps a fifth of it, and all of a
        // person, whom it does not model.
        let a = 10f64.powf(-0.7);
        let heard = 1.0e6;
        // Someone speaking alone (until 2026-12-07 measured 0.8: a short "Stop!" over the voice
        // came out four frames at 0.8 and opened nothing).
        let alone = near_end_share(heard, heard, 7.0);
        assert!(alone > 0.99, "{alone}");
        // Kept a little louder than heard (the filter added a little of its own), they are
        // still measured: a share of 1 is a frame nothing was measured in.
        let louder = near_end_share(heard, 1.1 * heard, 7.0);
        assert!((vad::NEAR_END_FREE..1.0).contains(&louder), "{louder}");
        // The echo alone.
        let echo = near_end_share(heard, a * heard, 7.0);
        assert!(echo < 0.01, "{echo}");
        // As much of each as was heard: of what the filter kept, the person's share.
        let kept = 0.5 * heard + a * 0.5 * heard;
        let half = near_end_share(heard, kept, 7.0);
        assert!((f64::from(half) - 1.0 / (1.0 + a)).abs() < 1e-3, "{half}");
        // Where the filter takes less out than it does of an echo it has found, it cannot tell
        // the two apart, and no one is measured in full.
        let unsure = near_end_share(heard, heard, FILTERED_DB - 1.0);
        assert!(unsure < vad::NEAR_END_FREE, "{unsure}");
    }

    #[test]
    fn the_reference_keeps_what_played_on_the_wall_clock_and_silence_around_it() {
        let reference = Reference::new();
        let t0 = Instant::now() + Duration::from_millis(100);
        let at = reference.index_of(t0);
        reference.played(&[0.5; 160], SAMPLE_RATE, t0);
        // Played on in bursts, the time line stays contiguous.
        reference.played(&[0.25; 160], SAMPLE_RATE, t0 + Duration::from_millis(2));
        let read = reference.read(at - 10, 340);
        assert!(read[..10].iter().all(|s| *s == 0.0));
        assert!(read[10..170].iter().all(|s| *s == 0.5));
        assert!(read[170..330].iter().all(|s| *s == 0.25));
        assert!(read[330..].iter().all(|s| *s == 0.0));
        // After a real gap it starts again where the clock is.
        let later = t0 + Duration::from_millis(500);
        reference.played(&[0.75; 160], SAMPLE_RATE, later);
        let at_later = reference.index_of(later);
        let read = reference.read(at_later, 160);
        assert!(read.iter().all(|s| *s == 0.75), "{read:?}");
    }

    #[test]
    fn a_reference_at_another_rate_comes_out_at_the_listening_rate() {
        let reference = Reference::new();
        let t0 = Instant::now();
        let tone: Vec<f32> = (0..22_050)
            .map(|i| (i as f32 * 440.0 * std::f32::consts::TAU / 22_050.0).sin() * 0.5)
            .collect();
        reference.played(&tone, 22_050, t0);
        let at = reference.index_of(t0);
        let read = reference.read(at, 16_000);
        let rms = (read[1000..15_000].iter().map(|s| s * s).sum::<f32>() / 14_000.0).sqrt();
        assert!((rms - 0.5 / 2f32.sqrt()).abs() < 0.05, "rms {rms}");
    }

    #[test]
    fn frames_that_come_in_a_burst_after_a_stall_keep_where_they_were_heard() {
        let f = FRAME as i64;
        let mut clock = CaptureClock::default();
        let mut placed = Vec::new();
        // Heard from sample 1000 on; each frame arrives as it ends, up to 2 ms late.
        for k in 0..50 {
            placed.push(clock.frame_start(1000 + (k + 1) * f + (k % 3) * 16));
        }
        // The reading thread gets no core for 300 ms: sixteen frames come at once.
        for _ in 50..66 {
            placed.push(clock.frame_start(1000 + 66 * f));
        }
        for k in 66..100 {
            placed.push(clock.frame_start(1000 + (k + 1) * f));
        }
        for (k, start) in placed.iter().enumerate() {
            assert_eq!(*start, 1000 + k as i64 * f, "frame {k}");
        }
    }

    #[test]
    fn frames_handed_over_together_as_a_capture_opens_are_spread_over_the_time_before() {
        let f = FRAME as i64;
        let mut clock = CaptureClock::default();
        // The device's first hand-over holds ten frames, arriving at sample 5000.
        let numbers: Vec<i64> = (0..10).map(|_| clock.arrived(5000)).collect();
        let starts: Vec<i64> = numbers.iter().map(|&k| clock.start_of(k)).collect();
        let heard: Vec<i64> = (0..10).map(|k| 5000 - (10 - k) * f).collect();
        assert_eq!(starts, heard);
    }

    #[test]
    fn after_frames_are_lost_the_capture_clock_follows_the_arrivals_again() {
        let f = FRAME as i64;
        let mut clock = CaptureClock::default();
        for k in 0..50 {
            clock.frame_start((k + 1) * f);
        }
        // The device dropped a second of frames: from frame 50 on, each arrives 50 frames later
        // than its count says.
        let mut last = 0;
        for k in 50..50 + CLOCK_WINDOW + 10 {
            last = clock.frame_start((k + 51) * f);
        }
        let k = 50 + CLOCK_WINDOW + 9;
        assert_eq!(last, (k + 50) * f);
    }

    #[test]
    fn what_was_learned_of_a_microphone_is_kept_in_the_data_folder_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("data").join(ROOMS_FILE);
        let rooms = Rooms::kept_in(file.clone());
        assert!(!rooms.echoes("Built-in Audio Analog Stereo"));
        rooms.learned("Built-in Audio Analog Stereo", true);
        rooms.learned("USB headset", false);
        // The next run.
        let next = Rooms::kept_in(file.clone());
        assert!(next.echoes("Built-in Audio Analog Stereo"));
        assert!(!next.echoes("USB headset"));
        assert!(!next.echoes("Built-in Audio Analog Stereo 2"));
        // Headphones on the same microphone's jack: given up, and kept so.
        next.learned("Built-in Audio Analog Stereo", false);
        assert!(!Rooms::kept_in(file.clone()).echoes("Built-in Audio Analog Stereo"));
        // Names only: nothing else is in the file.
        let text = std::fs::read_to_string(&file).unwrap();
        assert_eq!(text, r#"{"echoing":[]}"#);
    }

    #[test]
    fn a_microphone_remembered_starts_cancelled_and_another_one_opened_later_does_not() {
        let rooms = Rooms::in_memory();
        rooms.learned("desk", true);
        let mut canceller = Canceller::new(0);
        canceller.opened(Some("desk"), &rooms);
        assert_eq!(canceller.judge.path, EchoPath::Present);
        assert_eq!(canceller.learned(), None, "only remembered");
        // The system's default microphone changed between two openings: nothing is known of it.
        canceller.opened(Some("headset"), &rooms);
        assert_eq!(canceller.judge.path, EchoPath::Unknown);
        assert_eq!(
            canceller.settling, SETTLING_FRAMES,
            "AEC3 starts afresh too"
        );
        // Then one without a name (never taken for one remembered), then the desk again.
        rooms.learned("", true);
        canceller.opened(None, &rooms);
        assert_eq!(canceller.judge.path, EchoPath::Unknown);
        canceller.judge.path = EchoPath::Absent;
        canceller.opened(Some("desk"), &rooms);
        assert_eq!(
            canceller.judge.path,
            EchoPath::Present,
            "the desk is remembered"
        );
    }

    /// One 20 ms frame of a voice whose loudness changes from frame to frame.
    fn voice_frame(k: usize) -> Vec<f32> {
        let level = [0.5, 0.2, 0.35, 0.1, 0.45, 0.25, 0.3][k % 7];
        (0..FRAME).map(|i| level * (i as f32 * 0.3).sin()).collect()
    }

    /// A microphone's frame of faint room noise (about −64 dBFS), and `echo` over it.
    fn heard_in_a_quiet_room(k: usize, echo: Option<&[f32]>) -> Vec<i16> {
        (0..FRAME)
            .map(|i| {
                let noise = ((k * FRAME + i) * 7919 % 41) as f32 - 20.0;
                let echo = echo.map_or(0.0, |e| e[i] * 0.3 * 32768.0);
                (noise + echo).round() as i16
            })
            .collect()
    }

    #[test]
    fn a_microphone_that_hears_nothing_rise_as_the_voice_begins_is_known_to_hear_no_echo_at_once() {
        // Headphones: the voice's first 400 ms bring nothing into the microphone but the room's
        // faint noise. (Until it was known, a person who spoke half a second into the first
        // answer ever heard was not known to be someone, and the voice was not lowered for them.)
        let loud: Vec<f32> = (0..FRAME).map(|i| 0.5 * (i as f32 * 0.3).sin()).collect();
        let mut judge = PathJudge::new();
        for k in 0..20 {
            judge.push(&heard_in_a_quiet_room(k, None), &loud);
        }
        assert_eq!(judge.path, EchoPath::Absent);
        // Speakers, the voice coming back 200 ms late: not taken for headphones, and found.
        let mut judge = PathJudge::new();
        let played: Vec<Vec<f32>> = (0..120).map(voice_frame).collect();
        for k in 0..120_usize {
            let echo = k.checked_sub(10).map(|j| played[j].as_slice());
            judge.push(&heard_in_a_quiet_room(k, echo), &played[k]);
            assert_ne!(judge.path, EchoPath::Absent, "frame {k}");
        }
        assert_eq!(judge.path, EchoPath::Present);
    }

    /// Headphones, or the voice loop's rig: nothing of the voice comes back, and a person asks a
    /// question over the first seconds of the first answer, while the canceller does not yet
    /// know whether the voice comes back; their loudness must not be taken for its echo's. In
    /// espeak-ng's British voices: its American ones at about Jarvis's pace (`fixtures::said`'s
    /// 0, 2 and 4) keep its voice's timing, and one saying "…the capital of…" as its answer's
    /// opening does, half a second later, follows its loudness as its echo would (taken for it
    /// at 0 samples in) — as `voice_loop`'s rig once did, which said its questions in Jarvis's
    /// own voice.
    #[test]
    fn a_person_speaking_over_the_voice_where_none_of_it_comes_back_is_never_its_echo() {
        use super::super::fixtures;
        let answer = fixtures::speech(
            "The capital of France is Paris. It lies on the river Seine in the north of the \
             country. Paris has been a centre of art, fashion and science for centuries.",
        )
        .unwrap()
        .samples;
        let mut taken = Vec::new();
        for question in [
            "And what is the capital of Spain?",
            "How many people live in Berlin?",
            "What time is it?",
            "Tell me more about its museums.",
            "Could you say that again, please?",
        ] {
            for variant in [1, 3] {
                let said = fixtures::said(question, variant).unwrap();
                for at in (0..13).map(|k| k * FRAME * 8) {
                    let mut heard = fixtures::quiet_room(8);
                    heard.truncate(answer.len());
                    for (h, s) in heard.iter_mut().skip(at).zip(&said) {
                        *h = h.saturating_add(super::super::audio::to_i16(*s));
                    }
                    let mut judge = PathJudge::new();
                    let frames = heard.chunks_exact(FRAME).zip(answer.chunks_exact(FRAME));
                    if frames
                        .map(|(heard, played)| judge.push(heard, played))
                        .any(|path| path == EchoPath::Present)
                    {
                        taken.push(format!("{question} (voice {variant}, {at} samples in)"));
                    }
                }
            }
        }
        assert!(taken.is_empty(), "taken for its echo: {taken:#?}");
    }

    #[test]
    fn a_remembered_echo_is_given_up_after_three_judgements_with_new_voice_none_in_a_pause() {
        let silent = vec![0_i16; FRAME];
        let quiet = vec![0.0_f32; FRAME];
        let mut judge = PathJudge::new();
        judge.path = EchoPath::Present;
        judge.recalled = true;
        // A microphone that hears nothing of the voice (headphones): the first judgement comes
        // once every delay compares a second of it (75 frames), one every 100 ms after.
        for k in 0..80 {
            judge.push(&silent, &voice_frame(k));
        }
        assert_eq!(
            judge.path,
            EchoPath::Present,
            "two judgements are not enough"
        );
        // A pause of 400 ms: its judgements hear nothing new, and do not count.
        for _ in 0..20 {
            judge.push(&silent, &quiet);
        }
        assert_eq!(judge.path, EchoPath::Present, "a pause is not a judgement");
        for k in 0..5 {
            judge.push(&silent, &voice_frame(k));
        }
        assert_eq!(
            judge.path,
            EchoPath::Absent,
            "the third with new voice gives it up"
        );
        assert!(!judge.recalled);
    }

    #[test]
    fn a_remembered_echo_heard_again_is_confirmed_and_no_longer_only_remembered() {
        let mut judge = PathJudge::new();
        judge.path = EchoPath::Present;
        judge.recalled = true;
        // The microphone hears the voice 40 ms late, 10 dB down.
        let played: Vec<Vec<f32>> = (0..120).map(voice_frame).collect();
        for k in 0..120_usize {
            let heard: Vec<i16> = match k.checked_sub(2) {
                Some(j) => played[j]
                    .iter()
                    .map(|s| super::super::audio::to_i16(s * 0.3))
                    .collect(),
                None => vec![0; FRAME],
            };
            judge.push(&heard, &played[k]);
        }
        assert_eq!(judge.path, EchoPath::Present);
        assert!(!judge.recalled, "found for itself");
    }

    #[test]
    fn a_damaged_or_unwritable_rooms_file_is_learned_again_and_loses_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(ROOMS_FILE);
        std::fs::write(&file, b"{\"echoing\": [1, 2").unwrap();
        let rooms = Rooms::kept_in(file.clone());
        assert!(!rooms.echoes("desk"));
        rooms.learned("desk", true);
        assert!(Rooms::kept_in(file.clone()).echoes("desk"));
        // A data folder that cannot be made (a file stands where it would be): kept for the run.
        let blocked = dir.path().join("blocker");
        std::fs::write(&blocked, b"").unwrap();
        let rooms = Rooms::kept_in(blocked.join(ROOMS_FILE));
        rooms.learned("desk", true);
        assert!(rooms.echoes("desk"));
        assert!(blocked.is_file(), "the file in the way is left as it was");
        assert_eq!(std::fs::read(&blocked).unwrap(), b"");
    }

    #[test]
    fn echo_cancelled_sources_are_known_by_name() {
        assert!(is_echo_cancelled_source("Echo-Cancel Source"));
        assert!(is_echo_cancelled_source("echo-cancel-source"));
        assert!(is_echo_cancelled_source(
            "alsa_input.pci.analog-stereo.echo-cancel"
        ));
        assert!(!is_echo_cancelled_source("Built-in Audio Analog Stereo"));
        assert!(!is_echo_cancelled_source("jarvis_in"));
        assert!(is_echo_cancelled_source("USB mic (AEC)"));
        assert!(!is_echo_cancelled_source("Maecenas Audio"));
    }
}
