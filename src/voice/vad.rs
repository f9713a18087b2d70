//! Cutting the microphone's frames into utterances with the WebRTC voice activity detector: an
//! onset of a few voiced frames opens one (with the frames just before it, so the first word is
//! not clipped), a hangover of unvoiced frames closes it (so a pause between words does not), and
//! a burst with too few voiced frames never leaves this stage — except over Jarvis's voice, where
//! it may be a one-word stop ([`Segment::Brief`]).

use std::collections::VecDeque;

use webrtc_vad::{SampleRate, Vad, VadMode};

use super::audio::EchoJudged;
use super::{FRAME, FRAME_MS};

/// How utterances are cut.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SegmenterSettings {
    /// Frames kept from before the onset.
    pub pre_roll_frames: usize,
    /// Voiced frames among the last `onset_window` that open an utterance.
    pub onset_frames: usize,
    /// The window the onset is counted over.
    pub onset_window: usize,
    /// Voiced frames among the last `strict_onset_window` that open an utterance while Jarvis's
    /// voice plays: what the echo canceller leaves of it comes in short bursts, a person in a
    /// sustained run.
    pub strict_onset_frames: usize,
    /// The window the strict onset is counted over.
    pub strict_onset_window: usize,
    /// Voiced frames of the strict window that the echo canceller measured as mostly someone
    /// else (at least [`NEAR_END_FREE`] of what its linear filter kept is not the voice's
    /// expected echo), with which one voiced frame fewer than `strict_onset_frames` opens an
    /// utterance: a short "Stop." said over a loud stretch of the voice is held back to its
    /// vowel — five frames, clear of the voice — by the suppressor.
    pub strict_near_end_frames: usize,
    /// Voiced frames of the strict window the canceller measured as all but wholly someone
    /// else (at least [`NEAR_END_SURE`]), with which two voiced frames fewer than
    /// `strict_onset_frames` open an utterance: a stop whose vowel came 100 ms before the
    /// voice's loudest syllable keeps four such frames, and the echo swamps the rest.
    pub strict_sure_frames: usize,
    /// Frames kept from before a strict onset. Behind the echo canceller a person speaking over
    /// the voice is held back until it judges them the dominant near end, so the onset comes
    /// late, after their first syllable: the utterance reaches further back for it (in the
    /// canceller's linear output, where it is whole).
    pub strict_pre_roll_frames: usize,
    /// Unvoiced frames in a row after which the segmenter asks whether the person has finished
    /// ([`Segment::Paused`]); the listener ends the utterance at once when they have
    /// ([`Segmenter::finish`]). `None` never asks.
    pub pause_frames: Option<usize>,
    /// Unvoiced frames in a row that close it whatever was judged at the pause; `None` closes
    /// only on [`Segmenter::finish`] (push to talk: the release ends the utterance).
    pub hangover_frames: Option<usize>,
    /// Fewer voiced frames than this is noise, not speech — or, in an utterance opened on the
    /// strict onset (while Jarvis's voice plays), a [`Segment::Brief`]: a short word said over
    /// the voice ("Stop."), which the echo canceller's suppressor holds back to a few voiced
    /// frames, whose words decide whether it was a stop.
    pub min_voiced_frames: usize,
    /// An utterance is cut after this many frames.
    pub max_frames: usize,
    /// A frame quieter than this (RMS, in i16 units) is never voiced. WebRTC's detector keeps
    /// saying "speech" for a few frames after a sound ends (its own hangover); counting those
    /// would turn a cough into "speech".
    pub floor_rms: f32,
}

impl Default for SegmenterSettings {
    fn default() -> Self {
        SegmenterSettings {
            pre_roll_frames: 15, // 300 ms
            onset_frames: 3,
            onset_window: 5,
            strict_onset_frames: 6,
            strict_onset_window: 8,
            strict_near_end_frames: 4,
            strict_sure_frames: 4,
            strict_pre_roll_frames: 25, // 500 ms
            pause_frames: Some(15),     // 300 ms
            hangover_frames: Some(75),  // 1.5 s
            min_voiced_frames: 12,      // 240 ms of voice
            max_frames: 30 * 50,        // 30 s
            floor_rms: 180.0,           // about -45 dBFS
        }
    }
}

impl SegmenterSettings {
    /// Push to talk: nothing but the release closes an utterance.
    pub fn push_to_talk() -> Self {
        SegmenterSettings {
            pause_frames: None,
            hangover_frames: None,
            ..SegmenterSettings::default()
        }
    }

    /// A fixed hangover of `frames`: every pause that long ends the utterance, and nothing is
    /// asked.
    pub fn fixed_hangover(frames: usize) -> Self {
        SegmenterSettings {
            pause_frames: None,
            hangover_frames: Some(frames),
            ..SegmenterSettings::default()
        }
    }
}

/// An utterance: voiced audio with its pre-roll and hangover.
#[derive(Debug, Clone, PartialEq)]
pub struct Utterance {
    /// 16 kHz mono samples.
    pub samples: Vec<i16>,
    /// Where it starts, in ms since the capture opened (pre-roll included).
    pub start_ms: u64,
    /// Where it ends.
    pub end_ms: u64,
    /// Where the last voiced frame ended.
    pub last_voiced_ms: u64,
    /// How many of its frames were voiced.
    pub voiced_frames: usize,
    /// For each 20 ms frame of `samples`, the share of it that is not Jarvis's voice's residue
    /// (see [`EchoJudged::voice_free`]): 1 where nothing of the voice was left.
    pub voice_free: Vec<f32>,
}

impl Utterance {
    /// Whether the echo canceller was taking Jarvis's voice out of any of it (where it was not —
    /// headphones, or before the canceller knows the room — the person was heard as they spoke).
    pub fn held_back(&self) -> bool {
        self.voice_free.iter().any(|share| *share < 1.0)
    }

    /// Its samples with what the echo canceller left of Jarvis's voice gated out, frame by
    /// frame (each frame scaled by its [`Utterance::voice_free`], as measured: an energy share
    /// applied as an amplitude gain, which gates harder); `None` where nothing was left of it.
    pub fn without_the_voice(&self) -> Option<Vec<i16>> {
        if !self.held_back() {
            return None;
        }
        Some(
            self.samples
                .chunks(FRAME)
                .zip(self.voice_free.iter().chain(std::iter::repeat(&1.0)))
                .flat_map(|(frame, gain)| frame.iter().map(move |s| (f32::from(*s) * gain) as i16))
                .collect(),
        )
    }
}

/// The share of a frame that is not the voice's expected echo above which the canceller
/// measured someone else in it (see [`SegmenterSettings::strict_near_end_frames`]): the vowel of
/// a stop said over the voice measured 0.8–0.86 while the share was measured short (see
/// `echo::near_end_share`), 0.97–0.99 since; of the voice's own frames that came through its
/// suppressor, four in a window did once in the echo benchmark's 100 answers (a loud syllable
/// its linear filter missed), either way.
pub const NEAR_END_FREE: f32 = 0.75;

/// The share of a frame that is not the voice's expected echo from which the canceller is all
/// but sure someone else is in it (see [`SegmenterSettings::strict_sure_frames`]): a person
/// over the voice, measured in full, 0.97–0.99. The room's reverberation in a pause of the
/// voice, which the canceller's filter leaves whole, measured 0.76–0.96, some of it over this:
/// it only fades, and a window that only fades opens nothing (`Segmenter::fading`); in the
/// echo benchmark the rule opened no more of the voice's own answers than before (0 utterances
/// in 50 answers and in 50 remembered first answers).
pub const NEAR_END_SURE: f32 = 0.95;

/// How much louder than the frame before it a frame of a strict onset's window may be and still
/// be fading (dB): two frames of one dying sound differ by a few tenths either way.
const FADE_RISE_DB: f64 = 1.0;

/// How fast the frames of a strict onset's window fall, at least, on average, to be fading (dB
/// a frame): a room's reverberation dies away 60 dB in its RT60, 1.2 dB every 20 ms at 1 s, 2–4
/// dB at the 0.3–0.5 s of a room with a desk in it. A steady sound does not fall.
const FADE_FALL_DB: f64 = 1.0;

/// What a frame brought.
#[derive(Debug, Clone, PartialEq)]
pub enum Segment {
    /// Someone began to speak (the onset) at this time.
    SpeechStarted {
        /// ms since the capture opened.
        at_ms: u64,
    },
    /// The open utterance, with voice enough to be speech, has been quiet for the pause: has the
    /// person finished? The listener answers by ending it ([`Segmenter::finish`]) or by feeding
    /// on.
    Paused {
        /// Its voiced frames so far.
        voiced_frames: usize,
    },
    /// An utterance ended with enough voice to be speech.
    Utterance(Utterance),
    /// An utterance opened while Jarvis's voice played (on the strict onset, so with 6 voiced
    /// frames at least) ended with too little voice to be a question: a short word said over the
    /// voice, kept only if it is a stop (see [`SegmenterSettings::min_voiced_frames`]).
    Brief(Utterance),
    /// A burst ended with too few voiced frames: noise, never transcribed.
    Noise {
        /// Where it started.
        start_ms: u64,
        /// Where it ended.
        end_ms: u64,
        /// Its voiced frames.
        voiced_frames: usize,
    },
}

/// The WebRTC detector; it holds a C object with no thread affinity.
struct Detector(Vad);

// SAFETY: the fvad instance is plain heap state with no thread-local or shared data; it is only
// ever used through `&mut self`, from one thread at a time.
unsafe impl Send for Detector {}

/// Frames in, segments out.
pub struct Segmenter {
    vad: Detector,
    settings: SegmenterSettings,
    frame_index: u64,
    /// The last frames before an onset: what is kept of each, whether it was voiced, and the
    /// share of it that is not the voice's residue.
    recent: VecDeque<(Vec<i16>, bool, f32)>,
    current: Option<Open>,
}

struct Open {
    /// The frame the onset was heard on (the pre-roll reaches back from it).
    onset_frame: u64,
    /// It opened on the strict onset, while Jarvis's voice played.
    strict: bool,
    samples: Vec<i16>,
    voice_free: Vec<f32>,
    start_frame: u64,
    frames: usize,
    voiced: usize,
    unvoiced_run: usize,
    last_voiced_frame: u64,
}

impl Segmenter {
    /// A segmenter for 16 kHz, 20 ms frames.
    pub fn new(settings: SegmenterSettings) -> Segmenter {
        let vad = Vad::new_with_rate_and_mode(SampleRate::Rate16kHz, VadMode::Aggressive);
        Segmenter {
            vad: Detector(vad),
            settings,
            frame_index: 0,
            recent: VecDeque::new(),
            current: None,
        }
    }

    /// How it cuts utterances.
    pub fn settings(&self) -> SegmenterSettings {
        self.settings
    }

    /// Whether an utterance is open.
    pub fn in_speech(&self) -> bool {
        self.current.is_some()
    }

    /// Feeds one 20 ms frame.
    pub fn push(&mut self, frame: &[i16]) -> Vec<Segment> {
        self.push_judged(frame, None, false)
    }

    /// Feeds one 20 ms frame heard while Jarvis's voice plays (`strict`: an utterance opens only
    /// on the strict onset), with what the echo canceller told of it, where it is behind one:
    /// a frame it judged its echo's `residue` is never voiced, and an utterance keeps the frame's
    /// `linear` output in its place (which holds nothing of a person back); the frame is only
    /// judged.
    pub fn push_judged(
        &mut self,
        frame: &[i16],
        judged: Option<&EchoJudged>,
        strict: bool,
    ) -> Vec<Segment> {
        let mut out = Vec::new();
        let whole = |frame: &[i16]| {
            let mut f = frame.to_vec();
            f.resize(FRAME, 0);
            f
        };
        let frame = whole(frame);
        let rms = (frame.iter().map(|s| f64::from(*s).powi(2)).sum::<f64>() / FRAME as f64).sqrt();
        let heard = self.vad.0.is_voice_segment(&frame).unwrap_or(false)
            && rms as f32 >= self.settings.floor_rms;
        let residue = judged.is_some_and(|j| j.residue);
        let voice_free = judged.map_or(1.0, |j| j.voice_free);
        // Residue never opens an utterance; inside one, where the canceller also holds back a
        // person talking over Jarvis's voice, it counts as what the detector says.
        let voiced = heard && (!residue || self.current.is_some());
        let frame = judged.map(|j| whole(&j.linear)).unwrap_or(frame);
        let index = self.frame_index;
        self.frame_index += 1;
        let s = self.settings;

        if let Some(open) = &mut self.current {
            open.samples.extend_from_slice(&frame);
            open.voice_free.push(voice_free);
            open.frames += 1;
            if voiced {
                open.voiced += 1;
                open.unvoiced_run = 0;
                open.last_voiced_frame = index;
            } else {
                open.unvoiced_run += 1;
            }
            let hung = s.hangover_frames.is_some_and(|h| open.unvoiced_run >= h);
            // A burst too short to be speech ends at the pause: there is no turn to judge.
            let noise_paused =
                s.pause_frames == Some(open.unvoiced_run) && open.voiced < s.min_voiced_frames;
            if hung || noise_paused || open.frames >= s.max_frames {
                out.extend(self.close());
            } else if s.pause_frames == Some(open.unvoiced_run) {
                out.push(Segment::Paused {
                    voiced_frames: open.voiced,
                });
            }
            return out;
        }

        self.recent.push_back((frame, voiced, voice_free));
        let pre_roll = if strict {
            s.strict_pre_roll_frames
        } else {
            s.pre_roll_frames
        };
        let longest = s
            .pre_roll_frames
            .max(s.strict_pre_roll_frames)
            .max(s.onset_window)
            .max(s.strict_onset_window);
        while self.recent.len() > longest {
            self.recent.pop_front();
        }
        let (window, needed) = if strict {
            (s.strict_onset_window, s.strict_onset_frames)
        } else {
            (s.onset_window, s.onset_frames)
        };
        let voiced_recent = self
            .recent
            .iter()
            .rev()
            .take(window)
            .filter(|(_, v, _)| *v)
            .count();
        // (A share of exactly 1 was not measured: the canceller does not know the echo yet.)
        let clearly_someone = self
            .recent
            .iter()
            .rev()
            .take(window)
            .filter(|(_, v, free)| *v && (NEAR_END_FREE..1.0).contains(free))
            .count();
        let surely_someone = self
            .recent
            .iter()
            .rev()
            .take(window)
            .filter(|(_, v, free)| *v && (NEAR_END_SURE..1.0).contains(free))
            .count();
        let opens = (voiced_recent >= needed
            || (strict
                && voiced_recent + 1 >= needed
                && clearly_someone >= s.strict_near_end_frames)
            || (strict && voiced_recent + 2 >= needed && surely_someone >= s.strict_sure_frames))
            && !(strict && judged.is_some() && self.fading(window));
        if voiced && opens {
            let kept = self.recent.len().min(pre_roll.max(1));
            let start_frame = index + 1 - kept as u64;
            let mut samples = Vec::with_capacity(FRAME * 100);
            let mut voice_free = Vec::with_capacity(100);
            let mut voiced_count = 0;
            for (f, v, g) in self.recent.iter().skip(self.recent.len() - kept) {
                samples.extend_from_slice(f);
                voice_free.push(*g);
                voiced_count += usize::from(*v);
            }
            self.recent.clear();
            self.current = Some(Open {
                onset_frame: index,
                strict,
                samples,
                voice_free,
                start_frame,
                frames: kept,
                voiced: voiced_count,
                unvoiced_run: 0,
                last_voiced_frame: index,
            });
            out.push(Segment::SpeechStarted {
                at_ms: start_frame * FRAME_MS,
            });
        }
        out
    }

    /// Whether the last `window` frames only fade, each no more than [`FADE_RISE_DB`] louder
    /// than the one before and [`FADE_FALL_DB`] a frame quieter on average, the frames the
    /// suppressor held back among them: behind the echo canceller, while the voice plays, that
    /// is its echo dying away — the room's reverberation after a word, longer than the
    /// canceller's filter (which leaves it whole) — not someone beginning to speak, whose voice
    /// rises over whatever echo is left. What the canceller measured of the frames does not
    /// count: a tail its filter cannot model is left whole, as a person is, and measures as
    /// someone else (0.76–0.96 in a pause of the voice in the echo benchmark, once the share was
    /// measured in full).
    /// In the echo benchmark's first answers in a remembered room, two onsets such a tail opened
    /// (six voiced frames falling 1.5–2 dB a frame, measured 30–73 % someone else) lowered the
    /// voice and ended as noise. The held-back frames count: the vowel of a short "Stop" the
    /// suppressor let through only as it died away falls as a tail does (1–3 dB a frame, 55–69 %
    /// someone else), but the frames held back before it rose 16 dB. A person who speaks into a
    /// tail opens the utterance as their voice rises, its pre-roll reaching back.
    fn fading(&self, window: usize) -> bool {
        let level = |frame: &[i16]| {
            let energy = frame.iter().map(|s| f64::from(*s).powi(2)).sum::<f64>();
            10.0 * (energy / frame.len().max(1) as f64 + 1.0).log10()
        };
        let oldest_first: Vec<f64> = self
            .recent
            .iter()
            .skip(self.recent.len().saturating_sub(window))
            .map(|(frame, _, _)| level(frame))
            .collect();
        let (Some(oldest), Some(newest)) = (oldest_first.first(), oldest_first.last()) else {
            return false;
        };
        oldest_first.len() >= 2
            && oldest_first
                .windows(2)
                .all(|pair| pair[1] <= pair[0] + FADE_RISE_DB)
            && oldest - newest >= FADE_FALL_DB * (oldest_first.len() - 1) as f64
    }

    /// Where the open utterance's onset was heard, in ms since the capture opened (its pre-roll
    /// reaches back 300 or 500 ms before).
    pub fn open_onset_ms(&self) -> Option<u64> {
        self.current
            .as_ref()
            .map(|open| open.onset_frame * FRAME_MS)
    }

    /// The open utterance's voiced frames so far, and the quiet frames since its last voiced one.
    pub fn open_quiet(&self) -> Option<(usize, usize)> {
        self.current
            .as_ref()
            .map(|open| (open.voiced, open.unvoiced_run))
    }

    /// The open utterance's samples so far (pre-roll and quiet included).
    pub fn open_samples(&self) -> Option<&[i16]> {
        self.current.as_ref().map(|open| open.samples.as_slice())
    }

    /// Ends the input (or a push-to-talk release, or a turn judged finished at a pause): closes
    /// an open utterance.
    pub fn finish(&mut self) -> Vec<Segment> {
        self.recent.clear();
        self.close().into_iter().collect()
    }

    fn close(&mut self) -> Option<Segment> {
        let open = self.current.take()?;
        let start_ms = open.start_frame * FRAME_MS;
        let end_ms = start_ms + open.frames as u64 * FRAME_MS;
        if open.voiced < self.settings.min_voiced_frames && !open.strict {
            return Some(Segment::Noise {
                start_ms,
                end_ms,
                voiced_frames: open.voiced,
            });
        }
        let utterance = Utterance {
            samples: open.samples,
            start_ms,
            end_ms,
            last_voiced_ms: (open.last_voiced_frame + 1) * FRAME_MS,
            voiced_frames: open.voiced,
            voice_free: open.voice_free,
        };
        Some(if open.voiced < self.settings.min_voiced_frames {
            Segment::Brief(utterance)
        } else {
            Segment::Utterance(utterance)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::audio::EchoPath;
    use super::*;

    /// `n` 20 ms frames of a buzz with a voice's harmonics (the detector hears it as voice).
    fn voice(n: usize) -> Vec<Vec<i16>> {
        (0..n * FRAME)
            .map(|i| {
                let t = i as f32 / 16_000.0;
                let s: f32 = (1..12)
                    .map(|h| (std::f32::consts::TAU * 140.0 * h as f32 * t).sin() / h as f32)
                    .sum();
                (s * 6000.0) as i16
            })
            .collect::<Vec<_>>()
            .chunks(FRAME)
            .map(<[i16]>::to_vec)
            .collect()
    }

    fn segments(frames: usize, strict: bool) -> Vec<Segment> {
        let mut segmenter = Segmenter::new(SegmenterSettings::default());
        let mut out = Vec::new();
        for frame in voice(frames).iter().chain(&vec![vec![0; FRAME]; 100]) {
            out.extend(segmenter.push_judged(frame, None, strict));
        }
        out.extend(segmenter.finish());
        out
    }

    #[test]
    fn a_word_too_short_for_a_question_is_brief_over_the_voice_and_noise_otherwise() {
        let brief = segments(10, true);
        assert!(
            matches!(brief.as_slice(), [Segment::SpeechStarted { .. }, Segment::Brief(u)] if u.voiced_frames < 12),
            "{brief:?}"
        );
        let noise = segments(10, false);
        assert!(
            matches!(
                noise.as_slice(),
                [Segment::SpeechStarted { .. }, Segment::Noise { .. }]
            ),
            "{noise:?}"
        );
        // Long enough for speech, it is an utterance either way (its pause asked about first);
        // too short to open one over the voice, nothing.
        for strict in [true, false] {
            let long = segments(30, strict);
            assert!(
                matches!(long.last(), Some(Segment::Utterance(_))),
                "{long:?}"
            );
        }
        assert!(segments(4, true).is_empty());
    }

    /// `frames` of voice over Jarvis's voice, each measured by the canceller as `free` of it
    /// not the voice's echo, with the voice's quiet residue around them.
    fn over_the_voice(frames: usize, free: f32) -> Vec<Segment> {
        over_the_voice_at(&vec![(0.0, false); frames], free)
    }

    /// [`over_the_voice`], each frame of the voice at its own gain (dB), and judged the voice's
    /// residue or not.
    fn over_the_voice_at(frames: &[(f64, bool)], free: f32) -> Vec<Segment> {
        let mut segmenter = Segmenter::new(SegmenterSettings::default());
        let judged = |frame: &[i16], voice_free, residue| EchoJudged {
            residue,
            linear: frame.to_vec(),
            voice_free,
            path: EchoPath::Present,
        };
        let quiet = vec![0; FRAME];
        let mut out = Vec::new();
        for _ in 0..20 {
            out.extend(segmenter.push_judged(&quiet, Some(&judged(&quiet, 0.0, false)), true));
        }
        for (frame, (gain_db, residue)) in voice(frames.len()).iter().zip(frames) {
            let gain = 10f64.powf(gain_db / 20.0);
            let frame: Vec<i16> = frame
                .iter()
                .map(|s| (f64::from(*s) * gain) as i16)
                .collect();
            let judged = judged(&frame, free, *residue);
            out.extend(segmenter.push_judged(&frame, Some(&judged), true));
        }
        for _ in 0..100 {
            out.extend(segmenter.push_judged(&quiet, Some(&judged(&quiet, 0.0, false)), true));
        }
        out.extend(segmenter.finish());
        out
    }

    #[test]
    fn the_voice_dying_away_in_the_room_opens_nothing_and_a_person_rising_over_it_does() {
        // A word of the voice, its echo held back by the suppressor, and then the room's
        // reverberation after it, longer than the canceller's filter: eight voiced frames falling
        // 2 dB each (RT60 0.6 s), measured mostly the voice's.
        let word = (0..8).map(|k| (2.0 - 0.5 * f64::from(k), true));
        let tail: Vec<(f64, bool)> = word
            .chain((0..8).map(|k| (-2.0 - 2.0 * f64::from(k), false)))
            .collect();
        // However the canceller measured it: a tail longer than its filter is left whole, as a
        // person is, and measured as someone else.
        for free in [0.35, 0.7, 0.8, 0.95] {
            let heard = over_the_voice_at(&tail, free);
            assert!(heard.is_empty(), "{free}: {heard:?}");
        }
        // A short "Stop" over the voice, the suppressor holding its vowel back until it dies
        // away (measured 55–69 % someone else): it falls as a tail does, but rose before it.
        let stop: Vec<(f64, bool)> = [(-30.0, true), (-20.0, true), (-8.0, true), (-2.0, true)]
            .into_iter()
            .chain((0..6).map(|k| (-1.5 * f64::from(k), false)))
            .collect();
        assert!(
            matches!(
                over_the_voice_at(&stop, 0.65).first(),
                Some(Segment::SpeechStarted { .. })
            ),
            "a stop's dying vowel"
        );
        // Falling slower than a room's reverberation is no tail (a vowel held, dying slowly).
        let held: Vec<(f64, bool)> = (0..8).map(|k| (-0.5 * f64::from(k), false)).collect();
        assert!(
            matches!(
                over_the_voice_at(&held, 0.7).first(),
                Some(Segment::SpeechStarted { .. })
            ),
            "a vowel held"
        );
        // Someone who begins as it dies away: their voice rises over it, and opens an utterance
        // reaching back to the tail (nothing of the person is lost).
        let mut into_it = tail.clone();
        into_it.extend(
            [
                -14.0, -8.0, -3.0, 0.0, 0.0, -1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
            ]
            .map(|g| (g, false)),
        );
        let heard = over_the_voice_at(&into_it, 0.7);
        let Some(Segment::SpeechStarted { at_ms }) = heard.first() else {
            panic!("{heard:?}");
        };
        assert!(
            *at_ms <= 28 * 20,
            "the utterance reaches back to {at_ms} ms"
        );
        assert!(
            matches!(heard.last(), Some(Segment::Utterance(u)) if u.voiced_frames >= 12),
            "{heard:?}"
        );
    }

    #[test]
    fn a_vowel_over_the_voice_the_canceller_measured_as_someone_else_opens_on_one_frame_fewer() {
        // "Stop." over a loud stretch of the voice: the suppressor left its vowel, five frames,
        // which the linear filter measured as 80 % someone else (the loop's room, stop 8).
        let stop = over_the_voice(5, 0.8);
        assert!(
            matches!(
                stop.as_slice(),
                [Segment::SpeechStarted { .. }, Segment::Brief(_)]
            ),
            "{stop:?}"
        );
        // As much of the voice's own echo (measured as mostly echo), or before the canceller has
        // measured anything, or fewer frames: nothing opens, as before.
        assert!(over_the_voice(5, 0.5).is_empty());
        assert!(over_the_voice(5, 1.0).is_empty());
        assert!(over_the_voice(4, 0.8).is_empty());
        // Six frames open whatever was measured.
        assert!(!over_the_voice(6, 0.0).is_empty());
    }

    #[test]
    fn four_frames_the_canceller_is_all_but_sure_are_someone_else_open_on_two_frames_fewer() {
        // "Stop!" in the echo benchmark's room 3: its vowel came 100 ms before the voice's
        // loudest syllable, four frames measured 0.97–0.99 someone else, and the echo swamped
        // the rest.
        let stop = over_the_voice(4, 0.97);
        assert!(
            matches!(
                stop.as_slice(),
                [Segment::SpeechStarted { .. }, Segment::Brief(_)]
            ),
            "{stop:?}"
        );
        // Measured less surely (the voice's reverberation in a pause came to 0.76–0.96), not
        // measured at all, or fewer frames: nothing opens.
        assert!(over_the_voice(4, 0.9).is_empty());
        assert!(over_the_voice(4, 1.0).is_empty());
        assert!(over_the_voice(3, 0.99).is_empty());
    }

    #[test]
    fn the_voice_left_in_an_utterance_is_gated_out_frame_by_frame() {
        let samples = vec![1000_i16; FRAME * 3];
        let mut utterance = Utterance {
            samples,
            start_ms: 0,
            end_ms: 60,
            last_voiced_ms: 60,
            voiced_frames: 3,
            voice_free: vec![1.0; 3],
        };
        assert_eq!(utterance.without_the_voice(), None, "nothing to gate out");
        utterance.voice_free = vec![1.0, 0.5, 0.0];
        let gated = utterance.without_the_voice().unwrap();
        assert_eq!(gated.len(), FRAME * 3);
        assert!(gated[..FRAME].iter().all(|s| *s == 1000));
        assert!(gated[FRAME..2 * FRAME].iter().all(|s| *s == 500));
        assert!(gated[2 * FRAME..].iter().all(|s| *s == 0));
    }
}
