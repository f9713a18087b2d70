//! Sounds for tests and benchmarks, made in memory: speech by espeak-ng at the listening rate,
//! and noises a microphone meets — a cough, a knock on a door, a quiet room, silence.

use std::time::Duration;

use super::{Clip, Espeak, Synthesizer, VoiceError, SAMPLE_RATE};

/// `text` spoken by espeak-ng, at 16 kHz.
pub fn speech(text: &str) -> Result<Clip, VoiceError> {
    Espeak::default().synthesize(text)?.resampled(SAMPLE_RATE)
}

/// Silence.
pub fn silence(ms: u64) -> Clip {
    Clip::silence(Duration::from_millis(ms), SAMPLE_RATE)
}

/// A cough-like burst: 200 ms of loud noise that dies away.
pub fn cough() -> Clip {
    let mut seed: u32 = 7;
    let n = SAMPLE_RATE as usize / 5;
    let samples = (0..n)
        .map(|i| {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let noise = (seed >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0;
            noise * 0.6 * (1.0 - i as f32 / n as f32).powi(2)
        })
        .collect();
    Clip {
        samples,
        rate: SAMPLE_RATE,
    }
}

/// Three knocks on a door: short low thumps 180 ms apart.
pub fn knock() -> Clip {
    let mut samples = Vec::new();
    for _ in 0..3 {
        for i in 0..480 {
            let t = i as f32 / SAMPLE_RATE as f32;
            samples.push((t * 2.0 * std::f32::consts::PI * 90.0).sin() * 0.8 * (-t * 60.0).exp());
        }
        samples.extend(std::iter::repeat_n(0.0, 2400));
    }
    Clip {
        samples,
        rate: SAMPLE_RATE,
    }
}

/// The kinds of short noise a microphone meets that are not a voice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Burst {
    /// Broadband noise: a hiss, a rustle, air from a fan or a sigh into the microphone.
    Hiss,
    /// Low thumps: a knock, a footstep, the desk hit, one after another.
    Thump,
    /// A tone: a phone's beep, a kettle, a notification.
    Beep,
}

/// A noise burst of `kind`, `ms` long, peaking near `level` (0–1); `seed` varies it.
pub fn burst(kind: Burst, ms: u64, level: f32, seed: u32) -> Clip {
    let n = (SAMPLE_RATE as u64 * ms / 1000) as usize;
    let mut state = seed.wrapping_mul(2_654_435_761).max(1);
    let mut noise = move || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        state as f32 / u32::MAX as f32 * 2.0 - 1.0
    };
    let rate = SAMPLE_RATE as f32;
    // 10 ms ramps at each end, as a real sound has.
    let ramp = |i: usize| {
        let edge = (SAMPLE_RATE / 100) as usize;
        (i.min(n - 1 - i.min(n - 1)) as f32 / edge as f32).min(1.0)
    };
    let samples = match kind {
        Burst::Hiss => {
            // White noise, darker for odd seeds (a one-pole low-pass: a rustle rather than air).
            let mut low = 0.0_f32;
            let pole = if seed % 2 == 1 { 0.85 } else { 0.0 };
            (0..n)
                .map(|i| {
                    low = pole * low + (1.0 - pole) * noise();
                    let gain = if pole > 0.0 { 2.5 } else { 1.0 };
                    (low * gain).clamp(-1.0, 1.0) * level * 0.7 * ramp(i)
                })
                .collect()
        }
        Burst::Thump => {
            let every = SAMPLE_RATE as usize * (120 + (seed as usize % 4) * 30) / 1000;
            let pitch = 60.0 + (seed % 5) as f32 * 15.0;
            (0..n)
                .map(|i| {
                    let t = (i % every) as f32 / rate;
                    let body = (t * 2.0 * std::f32::consts::PI * pitch).sin() * (-t * 35.0).exp();
                    let click = noise() * (-t * 400.0).exp() * 0.5;
                    (body + click) * level
                })
                .collect()
        }
        Burst::Beep => {
            let pitch = [880.0, 1000.0, 1600.0, 2400.0, 660.0][seed as usize % 5];
            (0..n)
                .map(|i| {
                    let t = i as f32 / rate;
                    (t * 2.0 * std::f32::consts::PI * pitch).sin() * level * ramp(i)
                })
                .collect()
        }
    };
    Clip {
        samples,
        rate: SAMPLE_RATE,
    }
}

/// Twenty bursts — hiss, thump and beep in turn — from 0.15 to 0.9 s long, at about −20 to
/// −4 dBFS: what a desk hears that is nobody talking.
pub fn noise_bursts() -> Vec<(Burst, u64, Clip)> {
    (0..20_u32)
        .map(|i| {
            let kind = [Burst::Hiss, Burst::Thump, Burst::Beep][i as usize % 3];
            let ms = 150 + u64::from(i) * 750 / 19;
            let level = 0.1 + 0.5 * ((i * 7) % 20) as f32 / 19.0;
            (kind, ms, burst(kind, ms, level, i + 1))
        })
        .collect()
}

/// A quiet room: faint white noise (about −50 dBFS).
pub fn quiet_room(seconds: u32) -> Vec<i16> {
    let mut seed: u32 = 1;
    (0..seconds * SAMPLE_RATE)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            (seed % 200) as i16 - 100
        })
        .collect()
}

/// A simulated room between Jarvis's speaker and its microphone: the sound arrives `delay_ms`
/// late, `gain_db` softer, with the reverberation of a room whose RT60 is `rt60_s` (a synthetic
/// impulse response: the direct sound, then exponentially decaying noise), over a little noise.
#[derive(Debug, Clone, Copy)]
pub struct Room {
    /// How late the direct sound arrives.
    pub delay_ms: u32,
    /// The reverberation time (60 dB of decay).
    pub rt60_s: f32,
    /// The level of the echo against what was played.
    pub gain_db: f32,
    /// The room's noise floor (dBFS).
    pub noise_dbfs: f32,
    /// Seeds the reverberation and the noise.
    pub seed: u32,
}

impl Default for Room {
    /// A laptop on a desk: 40 ms, RT60 0.4 s, −6 dB, −60 dBFS of noise.
    fn default() -> Self {
        Room {
            delay_ms: 40,
            rt60_s: 0.4,
            gain_db: -6.0,
            noise_dbfs: -60.0,
            seed: 11,
        }
    }
}

fn noise_source(seed: &mut u32) -> f32 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 17;
    *seed ^= *seed << 5;
    (*seed as f32 / u32::MAX as f32) * 2.0 - 1.0
}

impl Room {
    /// The impulse response at 16 kHz, the delay included.
    pub fn impulse_response(&self) -> Vec<f32> {
        let rate = SAMPLE_RATE as f32;
        let delay = (self.delay_ms as f32 / 1000.0 * rate) as usize;
        let tail = (self.rt60_s * rate) as usize;
        let mut seed = self.seed.max(1);
        let mut ir = vec![0.0_f32; delay + tail + 1];
        ir[delay] = 1.0;
        // The reverberant tail: starts 2 ms after the direct sound, about as strong in energy
        // as the direct sound (a near, hard-walled room), decaying by 60 dB over RT60.
        let start = delay + (0.002 * rate) as usize;
        let decay = -6.908 / (self.rt60_s.max(0.05) * rate);
        let mut energy = 0.0;
        for (i, slot) in ir.iter_mut().enumerate().skip(start) {
            let t = (i - start) as f32;
            *slot = noise_source(&mut seed) * (decay * t).exp();
            energy += *slot * *slot;
        }
        let scale = 0.7 / energy.max(1e-9).sqrt();
        for slot in ir.iter_mut().skip(start) {
            *slot *= scale;
        }
        let gain = 10f32.powf(self.gain_db / 20.0);
        ir.iter_mut().for_each(|s| *s *= gain);
        ir
    }

    /// What the microphone hears of `played` (16 kHz): as long as `played`.
    pub fn hear(&self, played: &[f32]) -> Vec<f32> {
        let mut out = convolve(played, &self.impulse_response());
        out.truncate(played.len());
        let noise = 10f32.powf(self.noise_dbfs / 20.0) * 3f32.sqrt();
        let mut seed = self.seed.wrapping_mul(2_654_435_761).max(1);
        for s in &mut out {
            *s += noise_source(&mut seed) * noise;
        }
        out
    }
}

/// `signal` convolved with `ir` by FFT (the whole length: `signal.len() + ir.len() - 1`).
pub fn convolve(signal: &[f32], ir: &[f32]) -> Vec<f32> {
    use realfft::RealFftPlanner;
    if signal.is_empty() || ir.is_empty() {
        return Vec::new();
    }
    let n = (signal.len() + ir.len() - 1).next_power_of_two();
    let mut planner = RealFftPlanner::<f32>::new();
    let forward = planner.plan_fft_forward(n);
    let inverse = planner.plan_fft_inverse(n);
    let spectrum = |x: &[f32]| {
        let mut input = vec![0.0; n];
        input[..x.len()].copy_from_slice(x);
        let mut out = forward.make_output_vec();
        let _ = forward.process(&mut input, &mut out);
        out
    };
    let a = spectrum(signal);
    let b = spectrum(ir);
    let mut product: Vec<_> = a.iter().zip(&b).map(|(x, y)| x * y).collect();
    let mut out = inverse.make_output_vec();
    let _ = inverse.process(&mut product, &mut out);
    let scale = 1.0 / n as f32;
    out.truncate(signal.len() + ir.len() - 1);
    out.iter_mut().for_each(|s| *s *= scale);
    out
}

/// Mixes `b` into `a` from sample `at` on (`a` grows if needed).
pub fn mix_into(a: &mut Vec<f32>, b: &[f32], at: usize) {
    if a.len() < at + b.len() {
        a.resize(at + b.len(), 0.0);
    }
    for (slot, s) in a[at..].iter_mut().zip(b) {
        *slot += s;
    }
}

/// The room as a [`PlaybackTap`](super::echo::PlaybackTap): what a sink plays comes back into a
/// [`Feed`](super::Feed)'s microphone through it, on the wall clock, as it plays.
pub struct RoomEcho {
    feed: super::Feed,
    ir: Vec<f32>,
    state: std::sync::Mutex<RoomState>,
}

struct RoomState {
    placer: super::echo::Placer,
    pending: Vec<f32>,
    /// Where `pending` begins: an anchor and the samples after it.
    pending_at: Option<(std::time::Instant, u64)>,
}

impl RoomEcho {
    /// `room` between a sink and `feed`.
    pub fn new(room: &Room, feed: super::Feed) -> RoomEcho {
        RoomEcho {
            feed,
            ir: room.impulse_response(),
            state: std::sync::Mutex::new(RoomState {
                placer: super::echo::Placer::default(),
                pending: Vec::new(),
                pending_at: None,
            }),
        }
    }
}

impl super::echo::PlaybackTap for RoomEcho {
    fn played(&self, samples: &[f32], rate: u32, at: std::time::Instant) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let Some((anchor, offset, resampled)) = state.placer.place(samples, rate, at) else {
            return;
        };
        let follows = state
            .pending_at
            .is_some_and(|(a, o)| a == anchor && o + state.pending.len() as u64 == offset);
        if !follows && !state.pending.is_empty() {
            let block = std::mem::take(&mut state.pending);
            if let Some((a, o)) = state.pending_at {
                self.feed
                    .hear_at(at_offset(a, o), &convolve(&block, &self.ir));
            }
        }
        if state.pending.is_empty() {
            state.pending_at = Some((anchor, offset));
        }
        state.pending.extend(resampled);
        if state.pending.len() >= super::FRAME {
            let block = std::mem::take(&mut state.pending);
            let Some((a, o)) = state.pending_at.take() else {
                return;
            };
            drop(state);
            let at = at_offset(a, o);
            // Overlap-add on the microphone's time line: each block's echo (its reverberation
            // included) is mixed in where it sounds.
            self.feed.hear_at(at, &convolve(&block, &self.ir));
        }
    }
}

fn at_offset(anchor: std::time::Instant, samples: u64) -> std::time::Instant {
    anchor + std::time::Duration::from_secs_f64(samples as f64 / f64::from(SAMPLE_RATE))
}

/// Rooms a desk meets: 20–60 ms late, RT60 0.3–0.5 s, −3 to −12 dB, a little noise.
pub fn rooms() -> Vec<Room> {
    vec![
        Room::default(),
        Room {
            delay_ms: 20,
            rt60_s: 0.3,
            gain_db: -3.0,
            ..Room::default()
        },
        Room {
            delay_ms: 60,
            rt60_s: 0.5,
            gain_db: -12.0,
            ..Room::default()
        },
        Room {
            delay_ms: 35,
            rt60_s: 0.35,
            gain_db: -3.0,
            seed: 5,
            ..Room::default()
        },
        Room {
            delay_ms: 50,
            rt60_s: 0.5,
            gain_db: -6.0,
            seed: 9,
            ..Room::default()
        },
        Room {
            delay_ms: 45,
            rt60_s: 0.45,
            gain_db: -4.0,
            seed: 3,
            noise_dbfs: -50.0,
        },
    ]
}

/// What a user says, in one of several espeak-ng voices and speeds.
pub fn said(text: &str, variant: usize) -> Result<Vec<f32>, VoiceError> {
    let (voice, speed) = [
        ("en-us", 175),
        ("en-gb", 160),
        ("en-us+f3", 185),
        ("en-gb+m3", 150),
        ("en-us+f4", 170),
    ][variant % 5];
    Ok(Espeak::new(voice, speed)
        .synthesize(text)?
        .resampled(SAMPLE_RATE)?
        .samples)
}

/// `text` in many voices, each named: espeak-ng's five voices and variants ([`said`]), two more
/// at a fast and a slow speed, `piper` (loaded once by the caller: its model is 63 MB), and
/// espeak-ng's in a room with a fan running (a dark hiss about 20 dB under the voice). 16 kHz.
pub fn voices(text: &str, piper: &dyn Synthesizer) -> Result<Vec<(String, Vec<f32>)>, VoiceError> {
    let mut out = Vec::new();
    for variant in 0..5 {
        out.push((format!("espeak variant {variant}"), said(text, variant)?));
    }
    for (voice, speed) in [("en-us", 230), ("en-gb+f2", 130)] {
        let clip = Espeak::new(voice, speed).synthesize(text)?;
        out.push((
            format!("espeak {voice} at {speed} wpm"),
            clip.resampled(SAMPLE_RATE)?.samples,
        ));
    }
    out.push((
        "Piper".into(),
        piper.synthesize(text)?.resampled(SAMPLE_RATE)?.samples,
    ));
    let mut noisy = said(text, 0)?;
    let fan = burst(Burst::Hiss, noisy.len() as u64 * 1000 / 16_000, 0.025, 9);
    for (s, n) in noisy.iter_mut().zip(&fan.samples) {
        *s += n;
    }
    out.push(("espeak with a fan running".into(), noisy));
    Ok(out)
}

/// Questions a person pauses in, as people do: before the word that carries the meaning, after
/// the one that leads to it ("Book a table for … four people at eight").
pub const HESITATIONS: &[(&str, &str)] = &[
    ("Book a table for", "four people at eight."),
    ("Set an alarm for", "seven tomorrow morning."),
    ("What is the weather like in", "Lisbon this weekend?"),
    ("Can you remind me to", "call the dentist on Monday?"),
    ("Tell me something about the", "history of Rome."),
    ("Send a message to my", "sister saying I am late."),
    ("How long does it take to", "boil an egg?"),
    ("Play some music by", "Miles Davis."),
    ("What is the name of the", "tallest mountain in Africa?"),
    ("Find a good restaurant near", "the train station."),
    ("Add milk and", "eggs to my shopping list."),
    ("Remind me about the", "meeting with Anna at three."),
    ("Translate good morning into", "Italian."),
    (
        "What is the difference between",
        "a crocodile and an alligator?",
    ),
    (
        "Read me the first chapter of",
        "the book I started yesterday.",
    ),
    ("Turn the heating up in", "the living room."),
    ("Who was the president of", "France in nineteen ninety?"),
    ("Write a short poem about", "the sea in winter."),
    ("Is it going to rain in", "Paris tomorrow?"),
    ("Um, what is", "the time in Tokyo?"),
];

/// Questions with a pause where the words could end, too: only the voice can tell.
pub const HESITATIONS_AT_A_WHOLE: &[(&str, &str)] = &[
    ("Book a table for four people", "at eight tonight."),
    ("Set a timer", "for ten minutes."),
    ("What is the capital", "of Australia?"),
    ("Turn off the lights", "in the kitchen."),
    ("Call my mother", "when I get home."),
    ("Tell me a joke", "about cats."),
];

/// `first`, a pause of `pause_ms` of a quiet room, and `rest`, each said by `voice` (16 kHz):
/// a person who hesitates mid-sentence. Said in two parts, the voice falls at the pause as if
/// the sentence ended there — the hard case for a judge that listens to the voice alone.
pub fn hesitant(
    first: &str,
    pause_ms: u64,
    rest: &str,
    voice: &dyn Synthesizer,
) -> Result<Vec<f32>, VoiceError> {
    let trimmed = |text: &str| -> Result<Vec<f32>, VoiceError> {
        let samples = voice.synthesize(text)?.resampled(SAMPLE_RATE)?.samples;
        // Synthesizers pad their output with silence; the pause is ours to set.
        let loud = |s: &&f32| s.abs() > 0.01;
        let start = samples.iter().position(|s| loud(&s)).unwrap_or(0);
        let end = samples.iter().rposition(|s| loud(&s)).map_or(0, |e| e + 1);
        Ok(samples[start..end.max(start)].to_vec())
    };
    let mut out = trimmed(first)?;
    let pause = (pause_ms * u64::from(SAMPLE_RATE) / 1000) as usize;
    let room = quiet_room(pause_ms.div_ceil(1000) as u32);
    out.extend(room[..pause].iter().map(|s| f32::from(*s) / 32768.0));
    out.extend(trimmed(rest)?);
    Ok(out)
}

/// `sound` (16 kHz) as a microphone in a quiet room hears it: half a second of the room before,
/// a second and a half after (so an utterance closes).
pub fn in_quiet_room(sound: &[f32]) -> Vec<i16> {
    let room = quiet_room(3);
    let mut heard: Vec<i16> = room[..SAMPLE_RATE as usize / 2].to_vec();
    heard.extend(sound.iter().map(|s| super::audio::to_i16(*s)));
    heard.extend_from_slice(&room[..SAMPLE_RATE as usize * 3 / 2]);
    heard
}

/// Every utterance a hands-free listener behind `transcriber`, its pauses judged by `turn`, hears
/// in `sound` (16 kHz) in a quiet room ([`in_quiet_room`]), with where it began and ended.
pub fn heard_in_quiet_room(
    transcriber: &std::sync::Arc<dyn super::Transcriber>,
    turn: &super::TurnJudge,
    sound: &[f32],
) -> Result<Vec<super::UtteranceReport>, VoiceError> {
    super::Listener::new(
        crate::config::ListenMode::HandsFree,
        transcriber.clone(),
        None,
        0.5,
        super::listen::Shared::default(),
    )
    .with_turn(turn.clone())
    .hear_all(&in_quiet_room(sound))
}

/// What a hands-free listener behind `transcriber`, its pauses judged by `turn`, makes of `sound`
/// (16 kHz) heard in a quiet room ([`in_quiet_room`]): each utterance's verdict and words.
pub fn judged(
    transcriber: &std::sync::Arc<dyn super::Transcriber>,
    turn: &super::TurnJudge,
    sound: &[f32],
) -> Result<Vec<(super::Heard, String)>, VoiceError> {
    Ok(heard_in_quiet_room(transcriber, turn, sound)?
        .into_iter()
        .map(|r| (r.heard, r.text))
        .collect())
}

/// `answer` as the loop plays it when the user speaks over it from `at` for `len` samples: lowered
/// to a fifth 250 ms after the onset (the strict onset while Jarvis speaks) until 300 ms after
/// the end.
pub fn ducked(answer: &[f32], at: usize, len: usize) -> Vec<f32> {
    let from = at + 4000;
    let to = (at + len + 4800).min(answer.len());
    answer
        .iter()
        .enumerate()
        .map(|(i, s)| if i >= from && i < to { s * 0.2 } else { *s })
        .collect()
}

/// The edits (insertions, deletions, substitutions) that make `a` into `b`: the Levenshtein
/// distance of words or characters, for error rates.
pub fn edits<T: PartialEq>(a: &[T], b: &[T]) -> usize {
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, x) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, y) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(x != y));
            diagonal = above;
        }
    }
    row[b.len()]
}
