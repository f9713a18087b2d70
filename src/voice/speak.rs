//! Speaking a reply: its text is cut into sentences as it streams, each spoken and queued on the
//! sink while the next is made; the voice is lowered while the user talks over it; and when it is
//! cut, what had been played is worked out — the heard prefix.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::listen::Shared;
use super::tts::{Sentences, Synthesizer};
use super::{AudioSink, VoiceError};
use crate::store::ReplyId;

/// The volume while the user speaks over Jarvis: a fifth, never silence.
pub const DUCKED: f32 = 0.2;

/// A sentence queued on the sink, and where it sits in the sink's playing time.
#[derive(Debug, Clone)]
struct Spoken {
    text: String,
    start: Duration,
    end: Duration,
    /// Its loudness (0–1), one value per [`ENVELOPE_STEP`], for the orb's ring.
    envelope: Vec<f32>,
}

/// How finely a spoken clip's loudness is kept.
const ENVELOPE_STEP: Duration = Duration::from_millis(40);

fn envelope(clip: &super::Clip) -> Vec<f32> {
    let step = (ENVELOPE_STEP.as_secs_f64() * f64::from(clip.rate)).max(1.0) as usize;
    clip.samples
        .chunks(step)
        .map(super::audio::loudness)
        .collect()
}

/// The answer being spoken.
struct Answer {
    reply: ReplyId,
    sentences: Sentences,
    spoken: Vec<Spoken>,
    /// Audio was made for it (a window watched at some point).
    voiced: bool,
    /// It was cut already (its heard prefix is kept).
    cut: bool,
    /// Its whole text has been handed to the speech (the reply ended); until then more is to
    /// come, and a cut between two sentences is still a cut.
    complete: bool,
    /// Played again from the store (Play answer): cutting it changes no history.
    replay: bool,
    /// Cut because its window went away: a window that comes back before its text has ended
    /// hears it again from the next sentence.
    left: bool,
    /// Spoken again after its window came back: the heard prefix kept when it left stands (what
    /// was said while away was not heard), so a later cut keeps no other.
    resumed: bool,
}

/// Speaks replies onto a sink.
pub struct Speaker {
    synthesizer: Arc<dyn Synthesizer>,
    sink: Arc<dyn AudioSink>,
    shared: Shared,
    answer: Option<Answer>,
    /// Where the last queued clip ends in playing time.
    queued_until: Duration,
    ducked: bool,
    /// A sentence's sound is being made (the sink may be idle meanwhile).
    making: bool,
    /// [`Speaker::busy`], told as it changes: the moment a clip is handed to the sink, not at
    /// the loop's next tick (the loop may be busy making the next sentence by then).
    busy: watch::Sender<bool>,
}

impl Speaker {
    /// A speaker onto `sink`.
    pub fn new(
        synthesizer: Arc<dyn Synthesizer>,
        sink: Arc<dyn AudioSink>,
        shared: Shared,
    ) -> Speaker {
        Speaker {
            synthesizer,
            sink,
            shared,
            answer: None,
            queued_until: Duration::ZERO,
            ducked: false,
            making: false,
            busy: watch::Sender::new(false),
        }
    }

    /// [`Speaker::busy`] as it changes (a sink that ends playing is noticed at
    /// [`Speaker::refresh`]).
    pub fn watch_busy(&self) -> watch::Receiver<bool> {
        self.busy.subscribe()
    }

    /// Tells the watchers whether it is busy now. A cut is not told by [`Speaker::cut`]: its
    /// caller tells it once the heard prefix is kept, so that nobody sees the voice end before
    /// the store knows where it was cut.
    pub fn publish(&self) {
        let busy = self.busy();
        self.busy
            .send_if_modified(|told| std::mem::replace(told, busy) != busy);
    }

    /// The reply being spoken, if any.
    pub fn reply(&self) -> Option<ReplyId> {
        self.answer.as_ref().map(|a| a.reply)
    }

    /// Whether its voice is playing.
    pub fn playing(&self) -> bool {
        self.sink.is_playing()
    }

    /// Whether Jarvis is speaking: its voice plays, a sentence's sound is being made, or an
    /// answer it has begun to say has more to come (the sink may be idle for a moment between
    /// two sentences while the next is made).
    pub fn busy(&self) -> bool {
        self.sink.is_playing()
            || self.making
            || self
                .answer
                .as_ref()
                .is_some_and(|a| a.voiced && !a.cut && !a.complete)
    }

    /// The reply's text ended without being answered whole (failed, interrupted): nothing more
    /// of it is coming.
    pub fn text_ended(&mut self, reply: ReplyId) {
        if let Some(answer) = self.answer.as_mut().filter(|a| a.reply == reply) {
            answer.complete = true;
        }
        self.publish();
    }

    /// A new reply begins.
    pub fn begin(&mut self, reply: ReplyId) {
        if self.answer.as_ref().is_some_and(|a| a.reply == reply) {
            return;
        }
        self.answer = Some(Answer {
            reply,
            sentences: Sentences::new(),
            spoken: Vec::new(),
            voiced: false,
            cut: false,
            complete: false,
            replay: false,
            left: false,
            resumed: false,
        });
        self.shared.said(true, "");
    }

    /// Streamed text of the reply; `audible` says whether a window watches (else no audio is made).
    pub async fn text(
        &mut self,
        reply: ReplyId,
        text: &str,
        audible: bool,
    ) -> Result<(), VoiceError> {
        self.begin(reply);
        let Some(answer) = &mut self.answer else {
            return Ok(());
        };
        let sentences = answer.sentences.push(text);
        for sentence in sentences {
            self.sentence(sentence, audible).await?;
        }
        Ok(())
    }

    /// The reply ended: the rest of its text is spoken.
    pub async fn end(&mut self, reply: ReplyId, audible: bool) -> Result<(), VoiceError> {
        let Some(answer) = &mut self.answer else {
            return Ok(());
        };
        if answer.reply != reply {
            return Ok(());
        }
        let rest = answer.sentences.finish();
        answer.complete = true;
        if let Some(rest) = rest {
            self.sentence(rest, audible).await?;
        }
        self.publish();
        Ok(())
    }

    async fn sentence(&mut self, sentence: String, audible: bool) -> Result<(), VoiceError> {
        let Some(answer) = &mut self.answer else {
            return Ok(());
        };
        if answer.cut || !audible {
            // Nobody listens: the text is recorded by the service, no audio is made.
            return Ok(());
        }
        answer.voiced = true;
        self.shared.said(false, &sentence);
        let synthesizer = self.synthesizer.clone();
        let text = sentence.clone();
        // (An answer's last sentence is made after its text is complete: until it plays, Jarvis
        // is still about to speak it.)
        self.making = true;
        self.publish();
        let made = tokio::task::spawn_blocking(move || synthesizer.synthesize(&text))
            .await
            .map_err(|e| VoiceError::Synthesize(e.to_string()))
            .and_then(|made| made);
        self.making = false;
        let clip = match made {
            Ok(clip) => clip,
            Err(err) => {
                self.publish();
                return Err(err);
            }
        };
        let length = clip.duration();
        let envelope = envelope(&clip);
        let now = self.sink.played();
        let start = if self.sink.is_playing() {
            self.queued_until.max(now)
        } else {
            now
        };
        self.sink.play(clip)?;
        self.shared.set_speaking(true);
        self.queued_until = start + length;
        if let Some(answer) = &mut self.answer {
            answer.spoken.push(Spoken {
                text: sentence,
                start,
                end: start + length,
                envelope,
            });
        }
        self.publish();
        Ok(())
    }

    /// Cuts the voice now (Stop, End, or the window going away). Returns the reply and what of it
    /// had been played (empty: none of it) — unless it was heard whole, was cut already, or was
    /// an answer played again.
    pub fn cut(&mut self) -> Option<(ReplyId, String)> {
        let played = self.sink.played();
        let playing = self.sink.is_playing();
        self.sink.clear();
        self.shared.set_speaking(false);
        self.queued_until = played;
        let answer = self.answer.as_mut()?;
        if answer.cut {
            return None;
        }
        answer.cut = true;
        // Heard whole only when all of its text was spoken and has played: a sink that is idle
        // between two sentences (the next still being made) is not the end of the answer.
        let whole = answer.complete
            && answer.voiced
            && !playing
            && answer.spoken.last().is_some_and(|s| s.end <= played);
        if whole || answer.replay || answer.resumed {
            return None;
        }
        Some((answer.reply, heard_prefix(&answer.spoken, played)))
    }

    /// A window went away: stop making sound, keep the heard prefix of the answer — also of one
    /// whose first sentence had not played yet (none of it was heard).
    pub fn window_left(&mut self) -> Option<(ReplyId, String)> {
        if self.sink.is_playing() || self.answer.as_ref().is_some_and(|a| !a.cut) {
            // Later text of the same reply is not spoken either, unless a window comes back.
            let heard = self.cut();
            if let Some(answer) = self.answer.as_mut() {
                answer.left = !answer.replay;
            }
            return heard;
        }
        None
    }

    /// A window came back: an answer it left whose text goes on is spoken again from its next
    /// sentence (ADR 0145). Nothing said while it was away is said.
    pub fn window_back(&mut self) {
        if let Some(answer) = self.answer.as_mut().filter(|a| a.left && !a.complete) {
            tracing::debug!(reply = %answer.reply, "a window came back: the answer is spoken again");
            answer.left = false;
            answer.cut = false;
            answer.resumed = true;
        }
    }

    /// The user started or stopped speaking over Jarvis.
    pub fn duck(&mut self, on: bool) {
        if on != self.ducked {
            self.ducked = on;
            self.sink.set_volume(if on { DUCKED } else { 1.0 });
        }
    }

    /// Reads a finished answer again (it touches no history).
    pub async fn replay(&mut self, reply: ReplyId, text: &str) -> Result<(), VoiceError> {
        self.cut();
        self.answer = None;
        self.begin(reply);
        if let Some(answer) = &mut self.answer {
            answer.replay = true;
            answer.complete = true;
        }
        let mut sentences = Sentences::new();
        let mut all = sentences.push(text);
        all.extend(sentences.finish());
        for sentence in all {
            self.sentence(sentence, true).await?;
        }
        Ok(())
    }

    /// How loud Jarvis's voice is now (0–1, the ducked volume applied), while it plays.
    pub fn level(&self) -> Option<f32> {
        if !self.sink.is_playing() {
            return None;
        }
        let played = self.sink.played();
        let answer = self.answer.as_ref()?;
        let spoken = answer
            .spoken
            .iter()
            .find(|s| s.start <= played && played < s.end)?;
        let at = ((played - spoken.start).as_secs_f64() / ENVELOPE_STEP.as_secs_f64()) as usize;
        let level = spoken.envelope.get(at).copied().unwrap_or(0.0);
        Some(if self.ducked { level * DUCKED } else { level })
    }

    /// Keeps the speaking flag true to the sink (the echo check reads it), and tells the watchers
    /// once the sink has ended playing.
    pub fn refresh(&mut self) {
        self.shared.set_speaking(self.sink.is_playing());
        self.publish();
    }
}

/// What of the spoken sentences had played after `played` of playing time: whole sentences, then
/// the whole words of the one cut, in proportion to how far it got.
fn heard_prefix(spoken: &[Spoken], played: Duration) -> String {
    let mut heard: Vec<String> = Vec::new();
    for s in spoken {
        if played >= s.end {
            heard.push(s.text.clone());
        } else if played > s.start {
            let fraction =
                (played - s.start).as_secs_f64() / (s.end - s.start).as_secs_f64().max(1e-6);
            let budget = (s.text.chars().count() as f64 * fraction) as usize;
            let mut used = 0;
            let mut words = Vec::new();
            for word in s.text.split_whitespace() {
                used += word.chars().count() + 1;
                if used > budget + 1 {
                    break;
                }
                words.push(word);
            }
            if !words.is_empty() {
                heard.push(words.join(" "));
            }
            break;
        } else {
            break;
        }
    }
    heard.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spoken(text: &str, start_ms: u64, end_ms: u64) -> Spoken {
        Spoken {
            text: text.into(),
            start: Duration::from_millis(start_ms),
            end: Duration::from_millis(end_ms),
            envelope: Vec::new(),
        }
    }

    #[test]
    fn loudness_runs_from_silence_to_a_loud_voice() {
        use super::super::audio::{loudness, loudness_i16, to_f32};
        let frame: Vec<i16> = (0..320)
            .map(|i| ((i as f32 / 5.0).sin() * 9000.0) as i16)
            .collect();
        assert!((loudness_i16(&frame) - loudness(&to_f32(&frame))).abs() < 1e-4);
        assert_eq!(loudness(&[]), 0.0);
        assert_eq!(loudness(&[0.0; 320]), 0.0);
        // A quiet room's hiss reads as nothing.
        let quiet: Vec<f32> = (0..320).map(|i| (i as f32 / 5.0).sin() * 0.003).collect();
        let loud: Vec<f32> = (0..320).map(|i| (i as f32 / 5.0).sin() * 0.5).collect();
        assert_eq!(loudness(&quiet), 0.0);
        assert!(loudness(&loud) > 0.9, "{}", loudness(&loud));
    }

    #[tokio::test]
    async fn its_level_follows_what_plays_and_drops_to_a_fifth_when_ducked() {
        let (mut speaker, recorder) = speaker();
        let reply = ReplyId(10);
        assert_eq!(speaker.level(), None, "silent");
        speaker.begin(reply);
        speaker.text(reply, "One two. ", true).await.unwrap();
        let full = speaker.level().expect("it plays");
        assert!(full > 0.5, "{full}");
        speaker.duck(true);
        let ducked = speaker.level().expect("it plays");
        assert!((ducked - full * DUCKED).abs() < 1e-3, "{ducked} vs {full}");
        until_quiet(&recorder).await;
        assert_eq!(speaker.level(), None);
    }

    /// A voice that says each sentence as 100 ms of a quiet tone.
    struct Tone;

    impl Synthesizer for Tone {
        fn synthesize(&self, _text: &str) -> Result<super::super::Clip, VoiceError> {
            let samples = (0..1600).map(|i| (i as f32 / 8.0).sin() * 0.1).collect();
            Ok(super::super::Clip {
                samples,
                rate: 16_000,
            })
        }
    }

    fn speaker() -> (Speaker, super::super::Recorder) {
        let recorder = super::super::Recorder::new(16_000);
        let speaker = Speaker::new(
            Arc::new(Tone),
            Arc::new(recorder.clone()),
            Shared::default(),
        );
        (speaker, recorder)
    }

    async fn until_quiet(recorder: &super::super::Recorder) {
        while recorder.is_playing() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test]
    async fn a_stop_between_two_sentences_is_a_cut_after_the_first() {
        let (mut speaker, recorder) = speaker();
        let reply = ReplyId(7);
        speaker.begin(reply);
        speaker.text(reply, "One two. Three", true).await.unwrap();
        // The first sentence has played; the next is still being written: the sink is idle,
        // and Jarvis is still speaking.
        until_quiet(&recorder).await;
        assert!(speaker.busy(), "between two sentences it still speaks");
        assert_eq!(speaker.cut(), Some((reply, "One two.".to_string())));
        assert_eq!(speaker.cut(), None, "recorded once");
    }

    #[tokio::test]
    async fn an_answer_spoken_to_its_end_is_heard_whole_and_a_replay_changes_no_history() {
        let (mut speaker, recorder) = speaker();
        let reply = ReplyId(8);
        speaker.begin(reply);
        speaker.text(reply, "One two. Three", true).await.unwrap();
        speaker.end(reply, true).await.unwrap();
        until_quiet(&recorder).await;
        assert!(!speaker.busy(), "said to its end");
        assert_eq!(speaker.cut(), None, "heard whole");
        speaker.replay(reply, "One two. Three four.").await.unwrap();
        assert!(recorder.is_playing());
        assert_eq!(speaker.cut(), None, "cutting a replay records nothing");
    }

    #[tokio::test]
    async fn a_window_that_leaves_before_the_first_clip_records_that_nothing_was_heard() {
        let (mut speaker, _recorder) = speaker();
        let reply = ReplyId(9);
        speaker.begin(reply);
        assert_eq!(speaker.window_left(), Some((reply, String::new())));
        // The rest of the reply is written but never spoken.
        speaker.text(reply, "Later. Words.", false).await.unwrap();
        speaker.end(reply, false).await.unwrap();
        assert_eq!(speaker.window_left(), None);
    }

    #[test]
    fn the_heard_prefix_is_whole_sentences_then_the_words_played() {
        let s = [
            spoken("One two three four.", 0, 1000),
            spoken("Five six seven eight.", 1000, 2000),
        ];
        assert_eq!(heard_prefix(&s, Duration::ZERO), "");
        assert_eq!(
            heard_prefix(&s, Duration::from_millis(1000)),
            "One two three four."
        );
        assert_eq!(
            heard_prefix(&s, Duration::from_millis(1500)),
            "One two three four. Five six"
        );
        assert_eq!(
            heard_prefix(&s, Duration::from_millis(2500)),
            "One two three four. Five six seven eight."
        );
    }
}
