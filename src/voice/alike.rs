//! A stop said over Jarvis's voice, known by its sound where whisper wrote other words for it.
//!
//! Over the voice, the echo canceller holds back the first moments of what a person says until
//! it judges them louder than the echo, so a word's first consonants are lost: whisper writes
//! "Stop talking." as "Top talking." and "Quiet." as "Wyatt". And whisper tiny.en seldom spells
//! the name it is called by: "Jarvis, stop." comes back "Jaram is stop" or "Darn this, stop!".
//! So a short transcript of something said over the voice is compared with the language's stop
//! phrases as they sound — espeak-ng's phonemes of both, espeak-ng run as a program as for
//! Piper's phonemes (never linked) — allowing what the room takes: a stop phrase whose first
//! one or two consonants are missing, or whose first sound whisper wrote onto a word it made
//! of the voice's residue just before ("It's top talking."), after an address that sounds like
//! "Jarvis".
//!
//! Nothing else is allowed: no sound added or changed inside the phrase ("Don't stop." ends as
//! "stop" sounds, but "don't" is no name); nothing whisper wrote as a question; a lost first
//! sound only where the canceller was at work on the utterance (with headphones, or in a quiet
//! room, a "Top." is what whisper wrote); and never a stretch of what the voice said ("laptop"
//! come back as "Top.").

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use crate::config::Language;

/// The most words a stop said with an address runs to ("Jarvis, stop talking now" misheard as
/// five).
const AT_MOST_WORDS: usize = 5;

/// The most words an address that sounds like the name is written as ("Jar of his").
const ADDRESS_AT_MOST_WORDS: usize = 3;

/// How many first consonants of a stop phrase the canceller may have held back: "st" of "stop".
const ONSET_LOST_AT_MOST: usize = 2;

/// What a stop phrase must still sound like with its onset lost: three phonemes ("top"), so
/// that no lone vowel or syllable stands for one.
const REST_AT_LEAST: usize = 3;

/// How far (in edits, see [`distance`]) an address may sound from the name, per phoneme of the
/// name: half ("Darn this" and "Jaram is" from "Jarvis": 3 of 7).
const ADDRESS_AT_MOST_PER_PHONEME: f32 = 0.5;

/// The name, as the address is compared with it.
const NAME: &str = "jarvis";

/// The stop phrases of one language and the name, by their sound.
pub struct SoundAlike {
    program: String,
    voice: &'static str,
    phrases: &'static [&'static str],
    /// Made on first use (until espeak-ng can say them, nothing is heard by its sound).
    known: OnceLock<Known>,
    /// Whether it was told, once, that espeak-ng cannot be run.
    warned: AtomicBool,
}

struct Known {
    phrases: Vec<(&'static str, Vec<char>)>,
    name: Vec<char>,
}

impl std::fmt::Debug for SoundAlike {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SoundAlike")
            .field("voice", &self.voice)
            .finish_non_exhaustive()
    }
}

impl SoundAlike {
    /// The stop phrases of `language` by their sound; `None` for Chinese, whose transcripts are
    /// characters, each a syllable whisper writes whole or not at all.
    pub fn new(language: Language) -> Option<SoundAlike> {
        let language = language.resolved();
        if matches!(language, Language::Zh | Language::ZhHant) {
            return None;
        }
        Some(SoundAlike {
            program: "espeak-ng".into(),
            voice: language.espeak_voice(),
            phrases: super::heard::stop_phrases(language),
            known: OnceLock::new(),
            warned: AtomicBool::new(false),
        })
    }

    /// The stop phrase `text` sounds like, said over the voice, if any (see the module's
    /// comment): `held_back` where the canceller was taking the voice out of the utterance (so
    /// it may have held back its first sound: with headphones it never does), `answers` what
    /// the voice is saying or just said (a stop that is one of their words, by its sound, is the
    /// voice's own). Blocking: runs espeak-ng (~10 ms; the first time once more for the
    /// phrases, and once more for the answers where a stop is found).
    pub fn stop(&self, text: &str, held_back: bool, answers: &[String]) -> Option<String> {
        // Whisper heard a question ("Does this stop?"): a stop is a command.
        if text.trim_end().ends_with(['?', '？']) {
            return None;
        }
        let said = super::heard::words(text);
        if said.is_empty() || said.len() > AT_MOST_WORDS {
            return None;
        }
        let known = self.known()?;
        let sounds = self.phonemes(&said)?;
        for address in 0..=ADDRESS_AT_MOST_WORDS.min(said.len() - 1) {
            if address > 0 && !sounds_like_the_name(&sounds[..address].concat(), &known.name) {
                continue;
            }
            let rest = &said[address..];
            let heard = sounds[address..].concat();
            let found = known
                .phrases
                .iter()
                .find(|(_, phrase)| *phrase == heard || (held_back && onset_lost(phrase, &heard)));
            // The voice's residue before the onset written as a word that took the phrase's
            // first sound: "It's top talking.", "Let's top it." The sound goes back (not for a
            // lone "top": "It's top." is praise).
            let found = found.or_else(|| {
                if !(held_back && rest.len() >= 3 && matches!(rest[0].as_str(), "it's" | "let's")) {
                    return None;
                }
                let restored: Vec<char> = sounds[address]
                    .last()
                    .into_iter()
                    .copied()
                    .chain(sounds[address + 1..].concat())
                    .collect();
                known.phrases.iter().find(|(_, phrase)| *phrase == restored)
            });
            if let Some((phrase, _)) = found {
                // (An address is the person's, whatever the answer says: "Jaram is stop" over
                // an answer that says "press stop" is theirs.)
                let alone = (address == 0).then_some(*phrase);
                if self.said_by_the_voice(&sounds.concat(), alone, answers) {
                    return None;
                }
                return Some(phrase.to_string());
            }
        }
        None
    }

    /// Whether `heard` (the transcript's phonemes) is a stretch of what the voice said, or the
    /// stop `phrase` it was heard as alone one of its words: an answer's "laptop" whose end
    /// whisper wrote "Top.", its "quiet" come back as "Wyatt".
    fn said_by_the_voice(&self, heard: &[char], phrase: Option<&str>, answers: &[String]) -> bool {
        if let Some(phrase) = phrase {
            let phrase = super::heard::words(phrase);
            if answers.iter().any(|answer| {
                let answer = super::heard::words(answer);
                phrase.iter().all(|w| answer.contains(w))
            }) {
                return true;
            }
        }
        // (Said only where a stop was found: a rare moment, for an answer that has grown since.)
        let text = answers.join("\n");
        if text.trim().is_empty() || heard.is_empty() {
            return false;
        }
        self.phonemes_of_text(&text)
            .is_some_and(|sounds| sounds.windows(heard.len()).any(|w| w == heard))
    }

    /// The phrases' and the name's sounds, made the first time espeak-ng can say them (a
    /// failure is not kept: espeak-ng installed later, or a spawn that failed once, is tried
    /// again at the next short utterance over the voice).
    fn known(&self) -> Option<&Known> {
        if let Some(known) = self.known.get() {
            return Some(known);
        }
        let mut lines: Vec<String> = self.phrases.iter().map(|p| p.to_string()).collect();
        lines.push(NAME.into());
        let mut sounds = self.phonemes(&lines)?;
        let name = sounds.pop()?;
        let known = Known {
            phrases: self.phrases.iter().copied().zip(sounds).collect(),
            name,
        };
        Some(self.known.get_or_init(|| known))
    }

    /// The phonemes of running text, every clause's run together.
    fn phonemes_of_text(&self, text: &str) -> Option<Vec<char>> {
        let ipa = self.espeak(text)?;
        Some(phonemes_of(&String::from_utf8_lossy(&ipa)))
    }

    fn espeak(&self, input: &str) -> Option<Vec<u8>> {
        super::tts::run_espeak(
            &self.program,
            &["-q", "--ipa", "-v", self.voice],
            input,
            " to hear a stop by its sound",
        )
        .map_err(|err| {
            if !self.warned.swap(true, Ordering::Relaxed) {
                tracing::warn!(%err, "stops said over the voice are heard only as written");
            }
        })
        .ok()
    }

    /// The phonemes of each of `lines` (words or phrases without punctuation), as espeak-ng
    /// says them in this language; `None` where it cannot be run or says them in more or fewer
    /// lines than it was given.
    fn phonemes(&self, lines: &[String]) -> Option<Vec<Vec<char>>> {
        let ipa = self.espeak(&(lines.join("\n") + "\n"))?;
        let out: Vec<Vec<char>> = String::from_utf8_lossy(&ipa)
            .lines()
            .filter(|line| !line.trim().is_empty())
            .map(phonemes_of)
            .collect();
        (out.len() == lines.len()).then_some(out)
    }
}

/// The sounds of a line of espeak-ng's IPA, one `char` each, without stress, length or spaces:
/// "stˈɑːp" → s t ɑ p. (A diphthong is its two vowels, as espeak-ng writes "Wyatt" "waɪət" and
/// "quiet" "kwaɪət".)
fn phonemes_of(ipa: &str) -> Vec<char> {
    ipa.chars()
        .filter(|c| !c.is_whitespace() && !matches!(c, 'ˈ' | 'ˌ' | 'ː' | 'ˑ' | '‿' | '_' | '-'))
        .collect()
}

fn is_vowel(c: char) -> bool {
    "aeiouyæɑɒɔəɚɛɜɝɪʊʌøœɐɵɯʏᵻɤɘɨʉɞ".contains(c)
}

/// `heard` is `phrase` with its first one or two sounds lost, consonants both, and enough of it
/// left to tell ("top" for "stop", "waɪət" for "quiet").
fn onset_lost(phrase: &[char], heard: &[char]) -> bool {
    (1..=ONSET_LOST_AT_MOST).any(|lost| {
        phrase.len() >= lost + REST_AT_LEAST
            && phrase[..lost].iter().all(|c| !is_vowel(*c))
            && phrase[lost..] == *heard
    })
}

/// Whether `address` sounds like `name`: it begins as the name's stressed syllable does ("jar",
/// "dar", "char"), and is at most [`ADDRESS_AT_MOST_PER_PHONEME`] from it. ("Does this", "John
/// is", "Marcus" are not.)
fn sounds_like_the_name(address: &[char], name: &[char]) -> bool {
    let vowel = match address {
        ['d' | 't', 'ʒ' | 'ʃ', rest @ ..] => rest,
        ['d' | 'j' | 'ʒ', rest @ ..] => rest,
        _ => return false,
    };
    matches!(vowel, ['ɑ' | 'æ' | 'a', 'ɹ' | 'r' | 'ɾ' | 'ʁ' | 'ɐ', ..])
        && distance(address, name) <= ADDRESS_AT_MOST_PER_PHONEME * name.len() as f32
}

/// Edits from `a` to `b`: a sound added or dropped costs 1, one sound for another 1, but half
/// where both are vowels or the two differ in voicing only (s and z, t and d).
fn distance(a: &[char], b: &[char]) -> f32 {
    let mut row: Vec<f32> = (0..=b.len()).map(|j| j as f32).collect();
    for (i, &x) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = (i + 1) as f32;
        for (j, &y) in b.iter().enumerate() {
            let swap = diagonal + substitution(x, y);
            diagonal = row[j + 1];
            row[j + 1] = swap.min(row[j] + 1.0).min(row[j + 1] + 1.0);
        }
    }
    row[b.len()]
}

fn substitution(x: char, y: char) -> f32 {
    const VOICING: [(char, char); 9] = [
        ('p', 'b'),
        ('t', 'd'),
        ('k', 'ɡ'),
        ('k', 'g'),
        ('f', 'v'),
        ('s', 'z'),
        ('θ', 'ð'),
        ('ʃ', 'ʒ'),
        ('t', 'ɾ'),
    ];
    if x == y {
        0.0
    } else if (is_vowel(x) && is_vowel(y))
        || VOICING
            .iter()
            .any(|&(a, b)| (a, b) == (x, y) || (b, a) == (x, y))
    {
        0.5
    } else {
        1.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn english() -> SoundAlike {
        SoundAlike::new(Language::En).unwrap()
    }

    /// What `heard` is, said over the voice where the canceller held its onset back.
    fn over_the_voice(alike: &SoundAlike, heard: &str) -> Option<String> {
        alike.stop(heard, true, &[])
    }

    #[test]
    fn a_stop_whose_first_consonants_were_lost_under_the_voice_is_heard_by_its_sound() {
        let alike = english();
        for (heard, stop) in [
            ("Top.", "stop"),
            ("top talking.", "stop talking"),
            ("Top Talking", "stop talking"),
            ("Top it!", "stop it"),
            ("Wyatt", "quiet"),
            ("Ever mind.", "never mind"),
            ("It's top talking.", "stop talking"),
            ("Let's top it.", "stop it"),
        ] {
            assert_eq!(
                over_the_voice(&alike, heard).as_deref(),
                Some(stop),
                "{heard}"
            );
            // Where nothing was held back (headphones: no canceller at work), the words are
            // what whisper wrote.
            assert_eq!(
                alike.stop(heard, false, &[]),
                None,
                "{heard}, nothing held back"
            );
        }
    }

    #[test]
    fn a_stop_after_a_name_that_sounds_like_jarvis_is_a_stop() {
        let alike = english();
        for heard in [
            "Jaram is stop",
            "Darn this, stop!",
            "Jarvis, top.",
            "Jar of his top.",
            "JARBIST STOP",
        ] {
            assert!(over_the_voice(&alike, heard).is_some(), "{heard}");
        }
        // The name misheard is whisper's doing, not the room's: heard so with headphones too.
        assert!(alike.stop("Jaram is stop", false, &[]).is_some());
    }

    #[test]
    fn words_that_only_end_like_a_stop_or_begin_like_the_name_are_not_a_stop() {
        let alike = english();
        for heard in [
            "Don't stop.",
            "Never stop.",
            "Bus stop?",
            "Non-stop.",
            "Top ten?",
            "Quite.",
            "Let's start.",
            "Why not?",
            "Wait.",
            "What time is it?",
            "Jars, top shelf.",
            "Charge it, stop.",
            "Up.",
            "Hot.",
            "It's top secret.",
            "Let's stop here.",
            "It's quiet.",
            // Questions, as whisper punctuates them, and other people's names.
            "Top?",
            "Does this stop?",
            "Did this stop.",
            "Does this cancel?",
            "Just this, stop.",
            "John is quiet.",
            "Jack is quiet.",
            "Marcus, stop it.",
            "George, quiet!",
            // "It's top." is praise: the residue's word takes the first sound only of more.
            "It's top.",
            "That's top.",
            "What's top?",
            "Let's top.",
        ] {
            assert_eq!(over_the_voice(&alike, heard), None, "{heard}");
        }
    }

    #[test]
    fn a_word_of_the_answer_come_back_is_not_a_stop_however_it_was_written() {
        let alike = english();
        let answers = ["Put the file on your laptop, then open it.".to_string()];
        assert_eq!(alike.stop("Top.", true, &answers), None, "laptop's end");
        let answers = ["The library asks you to keep quiet.".to_string()];
        assert_eq!(
            alike.stop("Wyatt.", true, &answers),
            None,
            "quiet, said by the voice"
        );
        let answers = ["Paris is the capital of France.".to_string()];
        assert_eq!(alike.stop("Top.", true, &answers).as_deref(), Some("stop"));
        // An answer that says "stop" makes a lone "Top." its own, not the person's address.
        let answers = ["To pause the video, press stop.".to_string()];
        assert_eq!(alike.stop("Top.", true, &answers), None);
        assert_eq!(
            alike.stop("Jaram is stop.", true, &answers).as_deref(),
            Some("stop")
        );
    }

    #[test]
    fn in_german_a_stopp_without_its_first_sound_is_a_stop_and_chinese_is_not_compared_by_sound() {
        let german = SoundAlike::new(Language::De).unwrap();
        assert_eq!(german.stop("Top!", true, &[]).as_deref(), Some("stopp"));
        assert_eq!(
            german.stop("Top!", false, &[]),
            None,
            "praise, where nothing was held back"
        );
        assert_eq!(
            german.stop("Hör auf.", false, &[]).as_deref(),
            Some("hör auf")
        );
        assert_eq!(german.stop("Tschüss.", true, &[]), None);
        assert_eq!(german.stop("Wo ist der Bahnhof?", true, &[]), None);
        assert!(SoundAlike::new(Language::Zh).is_none());
        assert!(SoundAlike::new(Language::ZhHant).is_none());
    }

    #[test]
    fn without_espeak_ng_nothing_is_heard_by_its_sound_until_it_can_be_run() {
        let mut alike = SoundAlike {
            program: "/nonexistent/espeak-ng".into(),
            ..english()
        };
        assert_eq!(alike.stop("Top talking.", true, &[]), None);
        // Installed since: heard at the next utterance, not once the microphone reopens.
        alike.program = "espeak-ng".into();
        assert_eq!(
            alike.stop("Top talking.", true, &[]).as_deref(),
            Some("stop talking")
        );
    }

    #[test]
    fn sounds_are_compared_with_voicing_and_vowels_half_apart() {
        let chars = |s: &str| s.chars().collect::<Vec<_>>();
        assert_eq!(distance(&chars("stɑp"), &chars("stɑp")), 0.0);
        assert_eq!(distance(&chars("dʒɑɹvɪs"), &chars("dʒɑɹvɪz")), 0.5);
        assert_eq!(distance(&chars("dʒɑɹvɪs"), &chars("dʒæɹvɪs")), 0.5);
        assert_eq!(distance(&chars("dʒɑɹvɪs"), &chars("dɑɹvɪs")), 1.0);
        assert_eq!(distance(&chars(""), &chars("abc")), 3.0);
        assert!(onset_lost(&chars("stɑp"), &chars("tɑp")));
        assert!(!onset_lost(&chars("stɑp"), &chars("ɑp")), "too little left");
        assert!(
            !onset_lost(&chars("ɪnʌf"), &chars("nʌf")),
            "a vowel is not lost"
        );
    }
}
