//! What an utterance was, once transcribed: a question, or something to ignore (noise, a filler,
//! Jarvis's own voice), or one of the few things said alone that steer the conversation.

use super::script::{comparable, is_cjk_punctuation, is_unspaced};
use crate::config::Language;
use serde::{Deserialize, Serialize};

/// The classifier's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Heard {
    /// A question (or anything else meant for Jarvis): queued or answered.
    Question,
    /// Too little voice, nothing transcribed, or only sound labels: ignored.
    Noise,
    /// Only fillers ("um", "uh"): ignored.
    Filler,
    /// Jarvis's own voice coming back through the microphone: ignored.
    Echo,
    /// "Stop" (or the like) said alone: stops the reply and every waiting question.
    Stop,
    /// A goodbye in a wake conversation: ends it after the reply in progress.
    Goodbye,
    /// The wake word.
    Wake,
}

impl Heard {
    /// Whether the utterance is dropped without touching the conversation.
    pub fn ignored(self) -> bool {
        matches!(self, Heard::Noise | Heard::Filler | Heard::Echo)
    }
}

/// What the classifier needs to know besides the words.
#[derive(Debug, Clone, Default)]
pub struct HeardContext<'a> {
    /// The utterance began while Jarvis's voice was playing.
    pub began_while_speaking: bool,
    /// What Jarvis said recently (the answers being or just spoken).
    pub recent_answers: &'a [String],
    /// A wake conversation is open (so a goodbye ends it).
    pub wake_conversation: bool,
}

// Each list holds every language's phrases (English, German, Chinese): a phrase of one is
// never a sentence of another, and a user who mixes them is heard either way. Chinese is
// compared character by character (see [`words`]), in simplified characters: words written in
// traditional ones are compared as the same words in simplified.

const FILLERS: &[&str] = &[
    "um", "umm", "uh", "uhh", "uhm", "er", "erm", "ah", "ahh", "hmm", "hm", "mm", "mmm", "mhm",
    "uh-huh", "uhhuh", "huh", "oh", "eh", // English
    "äh", "ähm", "öh", "öhm", "äh-hm", // German
    "嗯", "呃", "啊", "额", "唔", "哦", "噢", // Chinese
];

/// Every language's stop phrases.
const STOPS: [&[&str]; 3] = [STOPS_EN, STOPS_DE, STOPS_ZH];

const STOPS_EN: &[&str] = &[
    "stop",
    "stop it",
    "stop that",
    "stop now",
    "stop talking",
    "stop please",
    "please stop",
    "cancel",
    "cancel that",
    "cancel it",
    "never mind",
    "nevermind",
    "be quiet",
    "quiet",
    "shut up",
    "hush",
    "silence",
    "enough",
    "that's enough",
    "that is enough",
    "okay stop",
    "ok stop",
    "jarvis stop",
    "stop jarvis",
    "abort",
];

const STOPS_DE: &[&str] = &[
    "stopp",
    "stopp stopp",
    "halt",
    "hör auf",
    "hör jetzt auf",
    "hören sie auf",
    "aufhören",
    "sei still",
    "sei ruhig",
    "ruhe",
    "schon gut",
    "vergiss es",
    "egal",
    "abbrechen",
    "genug",
    "es reicht",
    "das reicht",
    "jarvis stopp",
    "stopp jarvis",
];

const STOPS_ZH: &[&str] = &[
    "停",
    "停下",
    "停止",
    "停一下",
    "别说了",
    "不要说了",
    "不用说了",
    "算了",
    "取消",
    "安静",
    "闭嘴",
    "够了",
    "好了别说了",
    "别讲了",
    "不要讲了",
];

const GOODBYES: &[&str] = &[
    "bye",
    "bye bye",
    "goodbye",
    "good bye",
    "bye jarvis",
    "goodbye jarvis",
    "thanks bye",
    "thank you bye",
    "thanks that's all",
    "thank you that's all",
    "thanks that is all",
    "thank you that is all",
    "that's all",
    "that is all",
    "that's all thanks",
    "that's it",
    "that's it thanks",
    "that will be all",
    "that'll be all",
    "see you",
    "see you later",
    "good night",
    "goodnight",
    "talk to you later",
    "i'm done",
    "i'm done thanks",
    // German
    "tschüss",
    "tschüs",
    "tschau",
    "ciao",
    "auf wiedersehen",
    "bis später",
    "bis bald",
    "danke tschüss",
    "danke das war's",
    "danke das wars",
    "das war's",
    "das wars",
    "das war alles",
    "das ist alles",
    "gute nacht",
    "tschüss jarvis",
    // Chinese
    "再见",
    "拜拜",
    "回头见",
    "晚安",
    "就这样",
    "就这些",
    "谢谢就这样",
    "好了谢谢",
    "没事了谢谢",
    "掰掰",
];

/// `text` with its first letter a capital, as whisper begins a sentence ("stop it" → "Stop it").
pub fn capitalised(text: &str) -> String {
    let mut chars = text.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

/// Lowercase words with punctuation dropped (apostrophes and hyphens inside words kept). Text
/// written without spaces (Chinese, Japanese) counts each of its characters as a word, so that
/// phrases, repetitions and echoes are compared alike in every language; Chinese in simplified
/// characters, whichever it was written in.
pub fn words(text: &str) -> Vec<String> {
    words_as_written(&comparable(text))
}

/// [`words`], Chinese left in the characters it is written in (the phrase lists', simplified).
fn words_as_written(text: &str) -> Vec<String> {
    text.split(|c: char| {
        c.is_whitespace()
            || matches!(
                c,
                ',' | '.' | '!' | '?' | ';' | ':' | '"' | '…' | '„' | '“' | '”' | '«' | '»'
            )
            || is_cjk_punctuation(c)
    })
    .flat_map(|w| {
        let w = w
            .trim_matches(|c: char| !c.is_alphanumeric())
            .to_lowercase()
            .replace('’', "'");
        if w.chars().any(is_unspaced) {
            // Each character of unspaced script on its own; a Latin run inside stays whole.
            let mut out: Vec<String> = Vec::new();
            let mut run = String::new();
            for c in w.chars() {
                if is_unspaced(c) {
                    if !run.is_empty() {
                        out.push(std::mem::take(&mut run));
                    }
                    out.push(c.to_string());
                } else if c.is_alphanumeric() || c == '\'' || c == '-' {
                    run.push(c);
                } else if !run.is_empty() {
                    out.push(std::mem::take(&mut run));
                }
            }
            if !run.is_empty() {
                out.push(run);
            }
            out
        } else {
            vec![w]
        }
    })
    .filter(|w| !w.is_empty())
    .collect()
}

/// Text with every bracketed sound label removed: `[cough]`, `(music)`, `*sighs*`, `♪`.
pub fn without_labels(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut depth: i32 = 0;
    let mut in_stars = false;
    for c in text.chars() {
        match c {
            '[' | '(' | '{' | '<' => depth += 1,
            ']' | ')' | '}' | '>' => depth = (depth - 1).max(0),
            '*' => in_stars = !in_stars,
            '♪' | '♫' => {}
            _ if depth == 0 && !in_stars => out.push(c),
            _ => {}
        }
    }
    out
}

/// The fewest word edits (substitutions, insertions, deletions) that turn `said` into some
/// contiguous stretch of `answer` — a semi-global alignment, so a word the speech-to-text misheard
/// in the middle of Jarvis's own sentence does not hide that it is its own sentence.
fn edits_to_a_stretch(said: &[String], answer: &[String]) -> usize {
    // previous[j]: edits aligning said[..i] with a stretch of answer ending at j.
    let mut previous = vec![0usize; answer.len() + 1];
    for (i, s) in said.iter().enumerate() {
        let mut row = vec![i + 1; answer.len() + 1];
        for (j, a) in answer.iter().enumerate() {
            let substitute = previous[j] + usize::from(s != a);
            let extra_said = previous[j + 1] + 1;
            let skipped_answer = row[j] + 1;
            row[j + 1] = substitute.min(extra_said).min(skipped_answer);
        }
        previous = row;
    }
    previous.into_iter().min().unwrap_or(said.len())
}

/// The fewest words the echo filter ([`is_echo`]) judges: a shorter quote of the answer is the
/// user's.
pub(super) const ECHO_LEAST_WORDS: usize = 3;

/// Whether `said` is mostly one run of a recent answer: at least [`ECHO_LEAST_WORDS`] words, at
/// least 80 % of them matching one contiguous stretch of the answer.
pub fn is_echo(said: &[String], recent_answers: &[String]) -> bool {
    // Characters of Chinese are words here, and about two make one: a short quote of the answer
    // ("二十五度？", "25 degrees?") is the user's, as it is in English.
    let least = if said.iter().all(|w| w.chars().all(is_unspaced)) {
        2 * ECHO_LEAST_WORDS
    } else {
        ECHO_LEAST_WORDS
    };
    if said.len() < least {
        return false;
    }
    let said = spelled_out(said);
    recent_answers.iter().any(|answer| {
        let edits = edits_to_a_stretch(&said, &spelled_out(&words(answer)));
        let matched = said.len().saturating_sub(edits);
        matched >= least && matched * 5 >= said.len() * 4
    })
}

/// `said` with English contractions spelled out ("i'm" → "i am", "don't" → "do not"), as
/// whisper writes either for the other: compared this way, an answer and what was heard of it
/// match word for word.
fn spelled_out(said: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(said.len());
    for word in said {
        let split = match word.as_str() {
            "can't" | "cannot" => Some(("can", "not")),
            "won't" => Some(("will", "not")),
            "let's" => Some(("let", "us")),
            _ => [
                ("n't", "not"),
                ("'m", "am"),
                ("'re", "are"),
                ("'ve", "have"),
                ("'ll", "will"),
                ("'d", "would"),
                ("'s", "is"),
            ]
            .into_iter()
            .find_map(|(ending, spelled)| {
                word.strip_suffix(ending)
                    .filter(|stem| !stem.is_empty())
                    .map(|stem| (stem, spelled))
            }),
        };
        match split {
            Some((first, second)) => {
                out.push(first.to_string());
                out.push(second.to_string());
            }
            None => out.push(word.clone()),
        }
    }
    out
}

/// The shortest run of words that `said` is made of, said over and over ("never mind never
/// mind" → "never mind"); `said` itself where it is no such repetition.
fn repeating_unit(said: &[String]) -> &[String] {
    (1..=said.len() / 2)
        .find(|&k| said.len() % k == 0 && said.chunks(k).all(|c| c == &said[..k]))
        .map_or(said, |k| &said[..k])
}

fn phrase_in(said: &[String], phrases: &[&str]) -> bool {
    let joined = said.join(" ");
    let trimmed = joined
        .trim_start_matches("okay ")
        .trim_start_matches("ok ")
        .trim_start_matches("oh ")
        .trim_start_matches("hey ")
        .trim_start_matches("jarvis ")
        .trim_end_matches(" please")
        .trim_end_matches(" bitte")
        .trim_end_matches(" jarvis")
        .trim_end_matches(" now")
        .trim_end_matches(" jetzt")
        .trim_end_matches(" 吧");
    // (A phrase is compared as its words are: "别说了" as "别 说 了"; and with the spaces
    // between them dropped, as whisper writes a short phrase run together: "Schongut.",
    // "Hörauf.", "Nevermind.")
    let unspaced = |t: &str| t.replace(' ', "");
    let (joined_close, trimmed_close) = (unspaced(&joined), unspaced(trimmed));
    phrases.iter().any(|p| {
        let p = words_as_written(p).join(" ");
        p == joined || p == trimmed || {
            let p = unspaced(&p);
            p == joined_close || p == trimmed_close
        }
    })
}

/// Whether `said` (its [`words`]) is a stop phrase of any language, said alone.
fn is_stop(said: &[String]) -> bool {
    STOPS.iter().any(|phrases| phrase_in(said, phrases))
}

/// The stop phrases of `language` alone (English's for English, and for `auto` resolved to no
/// other).
pub fn stop_phrases(language: Language) -> &'static [&'static str] {
    match language.resolved() {
        Language::De => STOPS_DE,
        Language::Zh | Language::ZhHant => STOPS_ZH,
        _ => STOPS_EN,
    }
}

/// Whether `said` (its [`words`]) says no: "not" (any "n't" spelled out) or "no". ("Don't
/// stop." is no stop, however whisper heard its first word.)
pub fn negated(said: &[String]) -> bool {
    spelled_out(said)
        .iter()
        .any(|w| matches!(w.as_str(), "not" | "no"))
}

/// Classifies a transcript.
pub fn classify(text: &str, context: &HeardContext<'_>) -> Heard {
    let said = words(&without_labels(text));
    if said.is_empty() {
        return Heard::Noise;
    }
    if said.iter().all(|w| FILLERS.contains(&w.as_str())) {
        return Heard::Filler;
    }
    // Whisper writes a hesitation it cannot spell as a lone vowel ("uh" as "U.", "ah" as "A.",
    // "oh" as "O."). (A lone consonant may be an answer: "B." to "A or B?".)
    if let [word] = said.as_slice() {
        if matches!(word.as_str(), "a" | "e" | "i" | "o" | "u") {
            return Heard::Filler;
        }
    }
    if context.began_while_speaking && is_echo(&said, context.recent_answers) {
        return Heard::Echo;
    }
    // A stop or a goodbye after an "um" is said alone all the same ("Um… stop."): a hesitation
    // holds an utterance open over its pause, so the filler and the words arrive together.
    let said: Vec<String> = said
        .into_iter()
        .skip_while(|w| FILLERS.contains(&w.as_str()))
        .collect();
    // "Stop, stop!" is said alone as much as "stop" is, and whisper returns a short phrase
    // twice or four times over ("Never mind Never mind"): the phrase is judged once.
    let mut once = said.clone();
    once.dedup();
    let unit = repeating_unit(&said);
    if is_stop(&said) || is_stop(&once) || is_stop(unit) {
        return Heard::Stop;
    }
    if context.wake_conversation && phrase_in(&said, GOODBYES) {
        return Heard::Goodbye;
    }
    Heard::Question
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(text: &str) -> Heard {
        classify(text, &HeardContext::default())
    }

    #[test]
    fn fillers_and_sound_labels_are_ignored() {
        assert_eq!(plain(""), Heard::Noise);
        assert_eq!(plain("[BLANK_AUDIO]"), Heard::Noise);
        assert_eq!(plain("(coughing)"), Heard::Noise);
        assert_eq!(plain("[cough] (music) ♪"), Heard::Noise);
        assert_eq!(plain("*sighs*"), Heard::Noise);
        assert_eq!(plain("Um."), Heard::Filler);
        assert_eq!(plain("Uh, um..."), Heard::Filler);
        assert_eq!(plain("Hmm?"), Heard::Filler);
        // A hesitation whisper could not spell, written as a lone vowel.
        assert_eq!(plain("U."), Heard::Filler);
        assert_eq!(plain("A..."), Heard::Filler);
        assert_eq!(plain("O!"), Heard::Filler);
        assert_eq!(plain("B."), Heard::Question, "an answer to 'A or B?'");
        assert_eq!(plain("5."), Heard::Question);
        assert_eq!(plain("A cat."), Heard::Question);
        assert_eq!(plain("Um, what time is it?"), Heard::Question);
    }

    #[test]
    fn stop_said_alone_stops_and_in_a_sentence_is_a_question() {
        for stop in [
            "Stop.",
            "stop!",
            "Cancel.",
            "Never mind.",
            "Be quiet.",
            "OK, stop.",
            "Stop, please.",
            "Jarvis, stop.",
            "Stop, stop!",
            "Stop stop stop.",
            "Never mind Never mind",
            "Stop it. Stop it. Stop it. Stop it.",
            "Um... stop.",
            "Uh, never mind.",
        ] {
            assert_eq!(plain(stop), Heard::Stop, "{stop}");
        }
        assert_eq!(
            plain("Stop the timer and tell me the time."),
            Heard::Question
        );
        assert_eq!(plain("How do I cancel a subscription?"), Heard::Question);
    }

    #[test]
    fn german_and_chinese_stops_fillers_and_goodbyes_are_heard_as_the_english_ones() {
        for stop in [
            "Stopp.",
            "Stopp!",
            "Hör auf.",
            "Hör auf, bitte.",
            "Schon gut.",
            "Sei still!",
            "Jarvis, stopp.",
            "Stopp, stopp!",
            "停。",
            "停！",
            "停停停",
            "别说了。",
            "算了算了。",
            "好了，别说了。",
            "嗯，停。",
            // Run together, as whisper writes them from a quick voice.
            "Schongut.",
            "Hörauf!",
            "Stopit.",
        ] {
            assert_eq!(plain(stop), Heard::Stop, "{stop}");
        }
        for question in [
            "Hör auf, die Musik zu spielen, und sag mir die Uhrzeit.",
            "Wie stoppe ich den Timer?",
            "停车场在哪里？",
            "明天北京的天气怎么样？",
            "别说了这些，告诉我时间。",
        ] {
            assert_eq!(plain(question), Heard::Question, "{question}");
        }
        for filler in ["Äh.", "Ähm…", "嗯。", "呃……", "嗯嗯"] {
            assert_eq!(plain(filler), Heard::Filler, "{filler}");
        }
        let wake = HeardContext {
            wake_conversation: true,
            ..HeardContext::default()
        };
        for bye in [
            "Tschüss!",
            "Danke, das war's.",
            "Auf Wiedersehen.",
            "Aufwiedersehen.",
            "再见！",
            "好了，谢谢。",
        ] {
            assert_eq!(classify(bye, &wake), Heard::Goodbye, "{bye}");
        }
        assert_eq!(
            plain("再见！"),
            Heard::Question,
            "only a wake conversation ends"
        );
    }

    #[test]
    fn chinese_in_traditional_characters_is_heard_as_in_simplified() {
        for stop in [
            "別說了。",
            "好了，別說了。",
            "不要說了！",
            "閉嘴。",
            "夠了夠了。",
            "安靜！",
        ] {
            assert_eq!(plain(stop), Heard::Stop, "{stop}");
        }
        for question in ["別說了這些，告訴我時間。", "明天台北的天氣怎麼樣？"]
        {
            assert_eq!(plain(question), Heard::Question, "{question}");
        }
        assert_eq!(plain("額……"), Heard::Filler);
        let wake = HeardContext {
            wake_conversation: true,
            ..HeardContext::default()
        };
        for bye in ["再見！", "好了，謝謝。", "沒事了，謝謝。", "就這樣。"] {
            assert_eq!(classify(bye, &wake), Heard::Goodbye, "{bye}");
        }
        assert_eq!(classify("掰掰！", &wake), Heard::Goodbye);
        assert_eq!(
            plain("掰掰"),
            Heard::Question,
            "only a wake conversation ends"
        );
        assert_eq!(plain("別講了。"), Heard::Stop);
        // The lists are written in simplified characters, as what is heard is compared.
        for phrase in FILLERS.iter().chain(STOPS.concat().iter()).chain(GOODBYES) {
            assert_eq!(comparable(phrase), *phrase);
        }
        // Its own voice is echo, written back in either script.
        let answers = vec!["台北明天晴，最高氣溫二十五度。".to_string()];
        let speaking = HeardContext {
            began_while_speaking: true,
            recent_answers: &answers,
            wake_conversation: false,
        };
        assert_eq!(classify("明天晴，最高氣溫", &speaking), Heard::Echo);
        assert_eq!(classify("明天晴，最高气温", &speaking), Heard::Echo);
        let answers = vec!["台北明天晴，最高气温二十五度。".to_string()];
        let speaking = HeardContext {
            recent_answers: &answers,
            ..speaking
        };
        assert_eq!(classify("明天晴，最高氣溫", &speaking), Heard::Echo);
    }

    #[test]
    fn chinese_is_compared_character_by_character() {
        assert_eq!(words("别说了。"), ["别", "说", "了"]);
        assert_eq!(words("打开 Wi-Fi 设置"), ["打", "开", "wi-fi", "设", "置"]);
        assert_eq!(words("Hör auf."), ["hör", "auf"]);
        let answers = vec!["北京明天晴，最高气温二十五度。".to_string()];
        let speaking = HeardContext {
            began_while_speaking: true,
            recent_answers: &answers,
            wake_conversation: false,
        };
        assert_eq!(classify("北京明天晴，最高气温", &speaking), Heard::Echo);
        assert_eq!(classify("上海明天会下雨吗？", &speaking), Heard::Question);
        assert_eq!(
            classify("二十五度？", &speaking),
            Heard::Question,
            "a short quote of the answer is the user's"
        );
    }

    #[test]
    fn goodbye_ends_only_a_wake_conversation() {
        let wake = HeardContext {
            wake_conversation: true,
            ..HeardContext::default()
        };
        assert_eq!(classify("Thanks, that's all.", &wake), Heard::Goodbye);
        assert_eq!(classify("Bye!", &wake), Heard::Goodbye);
        assert_eq!(classify("Goodbye, Jarvis.", &wake), Heard::Goodbye);
        assert_eq!(plain("Bye!"), Heard::Question);
        assert_eq!(
            classify("Say goodbye to my mother in French.", &wake),
            Heard::Question
        );
    }

    #[test]
    fn its_own_voice_while_speaking_is_echo_and_a_new_question_is_not() {
        let answers = vec![
            "The capital of France is Paris. It lies on the Seine.".to_string(),
            "It lies on the river Seine in the north of the country.".to_string(),
        ];
        let speaking = HeardContext {
            began_while_speaking: true,
            recent_answers: &answers,
            wake_conversation: false,
        };
        assert_eq!(
            classify("the capital of France is Paris", &speaking),
            Heard::Echo
        );
        // One word misheard in five still reads as its own voice.
        assert_eq!(classify("It lies on the scene.", &speaking), Heard::Echo);
        assert_eq!(
            classify("What is the capital of Spain?", &speaking),
            Heard::Question
        );
        assert_eq!(
            classify(
                "It lies on the river saying in the north of the country.",
                &speaking
            ),
            Heard::Echo
        );
        // Too short to tell.
        assert_eq!(classify("Paris.", &speaking), Heard::Question);
        // The same words when Jarvis is not speaking are the user's.
        let quiet = HeardContext {
            began_while_speaking: false,
            ..speaking.clone()
        };
        assert_eq!(
            classify("the capital of France is Paris", &quiet),
            Heard::Question
        );
    }

    #[test]
    fn its_own_voice_written_with_contractions_is_still_its_own_voice() {
        let answers = vec!["Hello. I am Jarvis, and I am listening.".to_string()];
        let speaking = HeardContext {
            began_while_speaking: true,
            recent_answers: &answers,
            wake_conversation: false,
        };
        // Whisper wrote "I am" as "I'm", and misheard the name: one word in seven.
        assert_eq!(
            classify("I'm sorry, and I'm listening.", &speaking),
            Heard::Echo
        );
        let answers = vec!["I can't say, and it won't rain today.".to_string()];
        let said = words("I cannot say, and it will not rain today.");
        assert!(is_echo(&said, &answers));
        assert_eq!(
            spelled_out(&words("Let's go, they're here; Eiffel's tower isn't.")),
            words("let us go they are here eiffel is tower is not")
        );
    }
}
