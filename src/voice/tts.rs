//! Text-to-speech: the [`Synthesizer`] port, espeak-ng run as a program (GPL, so never linked),
//! and the sentence splitter that lets a reply be spoken as it streams.

use std::io::Write;
use std::process::{Command, Stdio};

use super::{Clip, VoiceError};

/// Turns text into speech.
pub trait Synthesizer: Send + Sync {
    /// Speaks `text` into a clip (blocking: call it off the async threads).
    fn synthesize(&self, text: &str) -> Result<Clip, VoiceError>;

    /// Lets go of the working memory kept from one sentence to the next; called once the voice
    /// has fallen quiet (blocking, like [`Synthesizer::synthesize`]).
    fn release(&self) {}
}

/// espeak-ng, through its command-line program; the audio comes back on a pipe, never a file.
#[derive(Debug, Clone)]
pub struct Espeak {
    program: String,
    voice: String,
    words_per_minute: u32,
}

impl Default for Espeak {
    fn default() -> Self {
        Espeak {
            program: "espeak-ng".into(),
            voice: "en-us".into(),
            words_per_minute: 175,
        }
    }
}

/// The espeak-ng voice to run for `voice`: itself, but Mandarin's plain `cmn` (or `zh`) is
/// `cmn-latn-pinyin` (a variant after `+` kept). Both have the same phonemes and dictionary; the
/// plain one reads Latin letters as English, and espeak-ng's Mandarin dictionary as Debian ships
/// it turns characters into Latin pinyin first — so the plain voice read "明天" as "mink two
/// tee one".
pub fn espeak_voice_named(voice: &str) -> String {
    let (base, variant) = voice.split_once('+').unwrap_or((voice, ""));
    let base = match base {
        "cmn" | "zh" | "zh-cmn" => "cmn-latn-pinyin",
        other => other,
    };
    match variant {
        "" => base.to_string(),
        variant => format!("{base}+{variant}"),
    }
}

impl Espeak {
    /// espeak-ng with a voice (e.g. `en-us`; see [`espeak_voice_named`]) and speed.
    pub fn new(voice: &str, words_per_minute: u32) -> Espeak {
        Espeak::exactly(&espeak_voice_named(voice), words_per_minute)
    }

    /// espeak-ng with exactly the voice named, Mandarin's plain `cmn` too (the benchmark's
    /// baseline).
    pub fn exactly(voice: &str, words_per_minute: u32) -> Espeak {
        Espeak {
            voice: voice.into(),
            words_per_minute,
            ..Espeak::default()
        }
    }

    /// Whether the program can be run.
    pub fn available(&self) -> bool {
        crate::config::without_keys(&mut Command::new(&self.program))
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }
}

/// espeak-ng's `--stdout` WAV is written as a stream, with its sizes set to "unknown"
/// (0x7fffffff); put in the real ones so a strict reader takes it.
fn fix_streamed_sizes(bytes: &mut [u8]) {
    if bytes.len() < 12 || &bytes[0..4] != b"RIFF" || &bytes[8..12] != b"WAVE" {
        return;
    }
    let total = bytes.len();
    let riff = (total - 8) as u32;
    bytes[4..8].copy_from_slice(&riff.to_le_bytes());
    let mut at = 12;
    while at + 8 <= total {
        let id = [bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]];
        let len = u32::from_le_bytes([bytes[at + 4], bytes[at + 5], bytes[at + 6], bytes[at + 7]])
            as usize;
        if &id == b"data" {
            let real = ((total - at - 8) & !1) as u32;
            bytes[at + 4..at + 8].copy_from_slice(&real.to_le_bytes());
            return;
        }
        at += 8 + len + (len & 1);
    }
}

impl Synthesizer for Espeak {
    fn synthesize(&self, text: &str) -> Result<Clip, VoiceError> {
        let words_per_minute = self.words_per_minute.to_string();
        let mut wav = run_espeak(
            &self.program,
            &["--stdout", "-v", &self.voice, "-s", &words_per_minute],
            text,
            "",
        )?;
        fix_streamed_sizes(&mut wav);
        Clip::from_wav_bytes(&wav, &self.program)
    }
}

/// Runs the espeak-ng `program` with `args`, `input` on stdin (so nothing it says can be read as
/// an option), and returns what it wrote; `purpose` (e.g. " for Piper's phonemes") goes into the
/// message if it cannot be run. Its keys are kept from it.
pub(crate) fn run_espeak(
    program: &str,
    args: &[&str],
    input: &str,
    purpose: &str,
) -> Result<Vec<u8>, VoiceError> {
    let failed = |reason: String| VoiceError::Synthesize(reason);
    let mut child = crate::config::without_keys(&mut Command::new(program))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            failed(format!(
                "cannot run {program}{purpose}: {e} (apt-get install espeak-ng)"
            ))
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(input.as_bytes())
            .map_err(|e| failed(format!("writing to {program}: {e}")))?;
    }
    let output = child
        .wait_with_output()
        .map_err(|e| failed(format!("{program}: {e}")))?;
    if !output.status.success() {
        return Err(failed(format!(
            "{program} exited with {}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(output.stdout)
}

/// Cuts streaming text into sentences to speak: a sentence is complete at `.`, `!`, `?` or `…`
/// followed by a space or a line break, or at a blank line. A long first sentence is cut at its
/// first clause (a comma, semicolon or colon after [`FIRST_CLAUSE_WORDS`] words or more), so the
/// first audio comes early; text that runs on without an end is spoken in pieces of at most
/// [`MAX_PIECE`] characters (at a line break or a space where it has one), so no answer is ever
/// one endless synthesis. Each character is looked at a bounded number of times, however the
/// text streams. Markdown marks that should not be read aloud are dropped.
#[derive(Debug, Default)]
pub struct Sentences {
    pending: String,
    in_code: bool,
    /// Whether anything was handed out yet: only the first sentence is cut at a clause.
    started: bool,
}

/// The fewest words a first clause needs to be spoken on its own.
pub const FIRST_CLAUSE_WORDS: usize = 6;

/// The most characters spoken as one piece when the text has no sentence end.
pub const MAX_PIECE: usize = 300;

impl Sentences {
    /// A splitter with nothing pending.
    pub fn new() -> Sentences {
        Sentences::default()
    }

    /// Adds streamed text; returns the sentences it completed.
    pub fn push(&mut self, text: &str) -> Vec<String> {
        self.pending.push_str(text);
        let mut out = Vec::new();
        let mut start = 0;
        loop {
            let rest = &self.pending[start..];
            // Only the first piece's worth is looked at (and the character after it, which says
            // whether its last mark ends a sentence).
            let window = &rest[..byte_of_char(rest, MAX_PIECE + 1)];
            let end = sentence_end(window)
                .or_else(|| {
                    (!self.started && !self.in_code)
                        .then(|| first_clause_end(window))
                        .flatten()
                })
                .or_else(|| {
                    (byte_of_char(rest, MAX_PIECE) < rest.len()).then(|| piece_end(window))
                });
            let Some(end) = end else { break };
            let sentence = rest[..end].to_string();
            start += end;
            if let Some(spoken) = self.speakable(&sentence) {
                out.push(spoken);
                self.started = true;
            }
        }
        self.pending.drain(..start);
        out
    }

    /// The rest, once the reply ended.
    pub fn finish(&mut self) -> Option<String> {
        let rest = std::mem::take(&mut self.pending);
        self.speakable(&rest)
    }

    /// The words of a piece of Markdown worth speaking; code blocks are not read out.
    fn speakable(&mut self, text: &str) -> Option<String> {
        let mut spoken = Vec::new();
        for line in text.lines() {
            let trimmed = line.trim();
            if trimmed.starts_with("```") {
                self.in_code = !self.in_code;
                continue;
            }
            if self.in_code {
                continue;
            }
            let cleaned: String = trimmed
                .trim_start_matches(['#', '>', '-', '*', '+'])
                .chars()
                .filter(|c| !matches!(c, '*' | '_' | '`' | '#'))
                .collect();
            let cleaned = cleaned.trim();
            if !cleaned.is_empty() {
                spoken.push(cleaned.to_string());
            }
        }
        let joined = spoken.join(" ");
        (joined.chars().any(char::is_alphanumeric)).then_some(joined)
    }
}

/// Whether the text before a full stop ends in a bare number ("1." of a list is not a sentence).
fn ends_a_number(before: &str) -> bool {
    let word = before.rsplit(char::is_whitespace).next().unwrap_or("");
    !word.is_empty() && word.chars().all(|c| c.is_ascii_digit())
}

/// Where a first clause of [`FIRST_CLAUSE_WORDS`] words or more ends (after its `,` `;` `:` and
/// the space after it, or its full-width `，` `；` `：` `、`), on one line of prose (not a code
/// block's). In a script written without spaces each character counts as a word.
fn first_clause_end(text: &str) -> Option<usize> {
    let mut chars = text.char_indices().peekable();
    let (mut words, mut in_word) = (0, false);
    while let Some((i, c)) = chars.next() {
        match c {
            '\n' | '`' => return None,
            ',' | ';' | ':'
                if chars.peek().is_some_and(|(_, n)| *n == ' ') && words >= FIRST_CLAUSE_WORDS =>
            {
                return Some(i + 1);
            }
            '，' | '；' | '：' | '、' if words >= FIRST_CLAUSE_WORDS => {
                return Some(i + c.len_utf8());
            }
            _ => {}
        }
        if c.is_whitespace() {
            in_word = false;
        } else if unspaced(c) {
            in_word = false;
            words += 1;
        } else if !in_word {
            in_word = true;
            words += 1;
        }
    }
    None
}

/// A character of a script written without spaces between words (CJK ideographs, kana).
fn unspaced(c: char) -> bool {
    matches!(c, '\u{3040}'..='\u{30ff}' | '\u{3400}'..='\u{4dbf}' | '\u{4e00}'..='\u{9fff}')
}

/// The byte index after the first `chars` characters of `text` (its length when it has fewer).
fn byte_of_char(text: &str, chars: usize) -> usize {
    text.char_indices()
        .nth(chars)
        .map_or(text.len(), |(i, _)| i)
}

/// Where a piece of [`MAX_PIECE`] characters without a sentence end is cut: after its last line
/// break, else after its last space, else at the limit.
fn piece_end(window: &str) -> usize {
    let limit = byte_of_char(window, MAX_PIECE);
    let piece = &window[..limit];
    piece
        .rfind('\n')
        .or_else(|| piece.rfind(char::is_whitespace))
        .filter(|&at| at > 0)
        .map_or(limit, |at| {
            at + piece[at..].chars().next().map_or(1, char::len_utf8)
        })
}

/// Where the first complete sentence of `text` ends (byte index after its terminator).
fn sentence_end(text: &str) -> Option<usize> {
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let next = chars.peek().map(|(_, n)| *n);
        match c {
            '.' if ends_a_number(&text[..i]) => {}
            '.' | '!' | '?' | '…' => {
                if let Some(n) = next {
                    if n == ' ' || n == '\n' {
                        // "e.g. " and decimals are not ends: a lowercase letter must not follow.
                        return Some(i + c.len_utf8());
                    }
                }
            }
            // Full-width ends need no space after them; a closing quote goes with its sentence.
            '。' | '！' | '？' | '；' => {
                let mut end = i + c.len_utf8();
                if let Some(&(q, quote)) = chars.peek() {
                    if matches!(quote, '”' | '」' | '』' | '）') {
                        end = q + quote.len_utf8();
                    }
                }
                return Some(end);
            }
            '\n' if next == Some('\n') => return Some(i + 1),
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentences_come_out_as_the_stream_completes_them() {
        let mut s = Sentences::new();
        assert!(s.push("The capital of France").is_empty());
        assert_eq!(
            s.push(" is Paris. It lies"),
            vec!["The capital of France is Paris.".to_string()]
        );
        assert!(s.push(" on the Seine").is_empty());
        assert_eq!(s.finish(), Some("It lies on the Seine".to_string()));
    }

    #[test]
    fn a_long_first_sentence_is_spoken_from_its_first_clause_and_the_rest_whole() {
        let mut s = Sentences::new();
        assert!(s.push("Well, that is").is_empty(), "a short clause waits");
        assert_eq!(
            s.push(" a question people often ask, and the answer")
                .into_iter()
                .collect::<Vec<_>>(),
            vec!["Well, that is a question people often ask,".to_string()]
        );
        assert_eq!(
            s.push(" depends on the season, mostly. Then, in spring, it rains. "),
            vec![
                "and the answer depends on the season, mostly.".to_string(),
                "Then, in spring, it rains.".to_string()
            ]
        );
    }

    /// Issue 29 item 5: Chinese has no space after its sentence ends, and its first clause ends
    /// at a full-width comma: both are where the voice can begin.
    #[test]
    fn chinese_sentences_and_a_long_first_clause_are_split_at_full_width_marks() {
        let mut s = Sentences::new();
        assert!(s.push("北京").is_empty());
        assert_eq!(
            s.push("明天天气晴朗，最高"),
            vec!["北京明天天气晴朗，".to_string()]
        );
        assert_eq!(
            s.push("气温二十五度。后天"),
            vec!["最高气温二十五度。".to_string()]
        );
        assert_eq!(
            s.push("有雨！他说：“带伞。”然后"),
            vec!["后天有雨！".to_string(), "他说：“带伞。”".to_string()]
        );
        assert_eq!(s.finish(), Some("然后".to_string()));
        // A short first clause waits for more.
        let mut s = Sentences::new();
        assert!(s.push("好的，").is_empty());
        assert_eq!(
            s.push("我来查一下。"),
            vec!["好的，我来查一下。".to_string()]
        );
    }

    /// Issue 30 item 7: an answer with no sentence end was one synthesis of the whole text (a
    /// 100 KB answer, hours of audio made before the first sound).
    #[test]
    fn text_without_sentence_ends_is_spoken_in_bounded_pieces_at_spaces() {
        let words: Vec<String> = (0..20_000).map(|n| format!("word{n}")).collect();
        let text = words.join(" ");
        let mut s = Sentences::new();
        let mut pieces = Vec::new();
        for chunk in text.as_bytes().chunks(7) {
            pieces.extend(s.push(std::str::from_utf8(chunk).unwrap()));
        }
        pieces.extend(s.finish());
        assert!(pieces.len() > 300, "{}", pieces.len());
        assert!(pieces.iter().all(|p| p.chars().count() <= MAX_PIECE));
        // Cut between words, nothing lost.
        assert_eq!(pieces.join(" "), text);
        // One endless "word": cut at the limit.
        let mut s = Sentences::new();
        let token = "é".repeat(5 * MAX_PIECE + 10);
        let mut pieces = s.push(&token);
        pieces.extend(s.finish());
        assert_eq!(
            pieces.iter().map(|p| p.chars().count()).collect::<Vec<_>>(),
            [MAX_PIECE, MAX_PIECE, MAX_PIECE, MAX_PIECE, MAX_PIECE, 10]
        );
    }

    #[test]
    fn markdown_marks_and_code_are_not_read_out() {
        let mut s = Sentences::new();
        let got =
            s.push("# Steps\n\n1. Run **this**:\n\n```sh\nrm -rf x\n```\n\nThen you are done. ");
        let all = [got, s.finish().into_iter().collect()].concat();
        assert_eq!(
            all,
            vec![
                "Steps".to_string(),
                "1. Run this:".to_string(),
                "Then you are done.".to_string()
            ]
        );
    }

    #[test]
    fn streamed_wav_sizes_are_fixed() {
        let clip = Clip {
            samples: vec![0.5; 100],
            rate: 22_050,
        };
        let mut bytes = clip.to_wav_bytes();
        bytes[4..8].copy_from_slice(&0x7fff_ffff_u32.to_le_bytes());
        bytes[40..44].copy_from_slice(&0x7fff_ffff_u32.to_le_bytes());
        fix_streamed_sizes(&mut bytes);
        let back = Clip::from_wav_bytes(&bytes, "test").unwrap();
        assert_eq!(back.samples.len(), 100);
    }
}
