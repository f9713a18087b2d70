//! Speaking a reply: its text is cut into sentences as it streams, each spoken and queued on the
//! sink while the next is made; the voice is lowered while the user talks over it; and when it is
//! cut, what had been played is worked out — the heard prefix.

use std::sync::Arc;
use std::time::Duration;

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
        }
    }

    /// The reply being spoken, if any.
    pub fn reply(&self) -> Option<ReplyId> {
        self.answer.as_ref().map(|a| a.reply)
    }

    /// Whether its voice is playing.
    pub fn playing(&self) -> bool {
        self.sink.is_playing()
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
        if let Some(rest) = answer.sentences.finish() {
            self.sentence(rest, audible).await?;
        }
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
        let clip = tokio::task::spawn_blocking(move || synthesizer.synthesize(&text))
            .await
            .map_err(|e| VoiceError::Synthesize(e.to_string()))??;
        let length = clip.duration();
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
            });
        }
        Ok(())
    }

    /// Cuts the voice now (Stop, End, or the window going away). Returns the reply and what of it
    /// had been played — unless nothing of it was ever going to be heard, or it was heard whole.
    pub fn cut(&mut self) -> Option<(ReplyId, String)> {
        let played = self.sink.played();
        let playing = self.sink.is_playing();
        self.sink.clear();
        self.shared.set_speaking(false);
        self.queued_until = played;
        let answer = self.answer.as_mut()?;
        if answer.cut || !answer.voiced {
            return None;
        }
        answer.cut = true;
        let whole = !playing && answer.spoken.last().is_some_and(|s| s.end <= played);
        if whole {
            return None;
        }
        Some((answer.reply, heard_prefix(&answer.spoken, played)))
    }

    /// A window went away: stop making sound, keep the heard prefix of the answer.
    pub fn window_left(&mut self) -> Option<(ReplyId, String)> {
        if self.sink.is_playing() || self.answer.as_ref().is_some_and(|a| a.voiced && !a.cut) {
            let cut = self.cut();
            // Later text of the same reply is not spoken either.
            return cut;
        }
        None
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
        let mut sentences = Sentences::new();
        let mut all = sentences.push(text);
        all.extend(sentences.finish());
        for sentence in all {
            self.sentence(sentence, true).await?;
        }
        Ok(())
    }

    /// Keeps the speaking flag true to the sink (the echo check reads it).
    pub fn refresh(&mut self) {
        self.shared.set_speaking(self.sink.is_playing());
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
        }
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
