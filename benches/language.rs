//! Issue 29's error rates: word error rate (English, German) and character error rate (Chinese)
//! of the speech model each language is heard by, on 20 generated sentences per language, each
//! said by two of espeak-ng's voices of the language (the product's own voice and a variant).
//! Baselines in the same run: English on Whisper base as well as tiny.en; Chinese as it was
//! heard before issue 29's second step (espeak-ng's plain `cmn` voice, which reads its pinyin as
//! English, and whisper unprompted) and with the voice fixed but unprompted.
//!
//! Chinese in traditional characters: the same sentences as Taiwan writes them (OpenCC's
//! tables), said by the same voices, heard by whisper set to write them.
//!
//! Run: `cargo bench --bench language` (the models of `scripts/models voice` and `scripts/models
//! base`). `-- show` prints each transcript; `-- chinese` measures Chinese only.

use std::path::PathBuf;

use jarvis::config::{Config, Language, SpeechModel};
use jarvis::voice::{
    fixtures, models, script, Espeak, Synthesizer, Transcriber, Whisper, SAMPLE_RATE,
};

const ENGLISH: [&str; 20] = [
    "What is the weather like in Berlin tomorrow?",
    "Set a timer for ten minutes.",
    "Can you write an email to my boss?",
    "Remind me to call my mother at six.",
    "How far is it from London to Paris?",
    "Turn off the lights in the kitchen.",
    "What did I say about the project yesterday?",
    "Play some quiet music while I work.",
    "Who wrote the novel Pride and Prejudice?",
    "How many days are left until Christmas?",
    "Translate good morning into Spanish.",
    "Add milk and eggs to my shopping list.",
    "What is the capital of Australia?",
    "Read me the first line of my notes.",
    "When does the next train to Munich leave?",
    "Remember that my dog is called Bruno.",
    "How do I boil an egg properly?",
    "Tell me a short story about a dragon.",
    "What time is it in Tokyo right now?",
    "Cancel my meeting on Friday afternoon.",
];

const GERMAN: [&str; 20] = [
    "Wie wird das Wetter morgen in Berlin?",
    "Stell einen Timer auf zehn Minuten.",
    "Kannst du eine E-Mail an meine Chefin schreiben?",
    "Erinnere mich daran, um sechs meine Mutter anzurufen.",
    "Wie weit ist es von Hamburg nach München?",
    "Mach das Licht in der Küche aus.",
    "Was habe ich gestern über das Projekt gesagt?",
    "Spiel ruhige Musik, während ich arbeite.",
    "Wer hat den Roman Die Blechtrommel geschrieben?",
    "Wie viele Tage sind es noch bis Weihnachten?",
    "Übersetze guten Morgen ins Spanische.",
    "Setz Milch und Eier auf meine Einkaufsliste.",
    "Was ist die Hauptstadt von Australien?",
    "Lies mir die erste Zeile meiner Notizen vor.",
    "Wann fährt der nächste Zug nach Köln?",
    "Merke dir, dass mein Hund Bruno heißt.",
    "Wie koche ich ein Ei richtig?",
    "Erzähl mir eine kurze Geschichte über einen Drachen.",
    "Wie spät ist es gerade in Tokio?",
    "Sag mein Treffen am Freitagnachmittag ab.",
];

const CHINESE: [&str; 20] = [
    "明天北京的天气怎么样？",
    "帮我设一个十分钟的计时器。",
    "你能帮我写一封邮件吗？",
    "提醒我六点给妈妈打电话。",
    "上海离北京有多远？",
    "把厨房的灯关掉。",
    "我昨天说了什么关于这个项目的事？",
    "我工作的时候放点安静的音乐。",
    "谁写了红楼梦？",
    "离春节还有几天？",
    "把早上好翻译成英语。",
    "把牛奶和鸡蛋加到购物清单里。",
    "澳大利亚的首都是哪里？",
    "给我读一下笔记的第一行。",
    "下一班去广州的火车什么时候开？",
    "记住我的狗叫布鲁诺。",
    "鸡蛋怎么煮才好吃？",
    "给我讲一个关于龙的小故事。",
    "东京现在几点？",
    "取消我星期五下午的会议。",
];

fn model_dir() -> PathBuf {
    match std::env::var("JARVIS_TEST_MODELS") {
        Ok(dir) => PathBuf::from(dir),
        Err(_) => {
            Config::installed_model_dir(&|k| std::env::var(k).ok()).expect("a home directory")
        }
    }
}

/// The units an error rate counts: words (lower case, without punctuation) or, for Chinese,
/// characters (letters and digits kept, so a transcript in Latin letters counts against it).
fn units(text: &str, characters: bool) -> Vec<String> {
    if characters {
        text.chars()
            .filter(|c| c.is_alphanumeric())
            .map(|c| c.to_string())
            .collect()
    } else {
        text.split_whitespace()
            .map(|w| {
                w.chars()
                    .filter(|c| c.is_alphanumeric() || *c == '-')
                    .collect::<String>()
                    .to_lowercase()
            })
            .filter(|w| !w.is_empty())
            .collect()
    }
}

/// The error rate of `whisper` on `sentences` said by each of `voices`, and the time it took.
fn error_rate(
    name: &str,
    whisper: &Whisper,
    voices: &[&str],
    sentences: &[&str],
    characters: bool,
    show: bool,
) {
    error_rate_in(
        name,
        whisper,
        voices,
        sentences,
        characters,
        show,
        Espeak::new,
    )
}

/// [`error_rate`], each voice made by `espeak`.
fn error_rate_in(
    name: &str,
    whisper: &Whisper,
    voices: &[&str],
    sentences: &[&str],
    characters: bool,
    show: bool,
    espeak: fn(&str, u32) -> Espeak,
) {
    let (mut wrong, mut total, mut seconds, mut spoken) = (0, 0, 0.0, 0.0);
    // Characters written in one script only: traditional, simplified.
    let (mut traditional, mut simplified) = (0, 0);
    for voice in voices {
        let espeak = espeak(voice, 175);
        for sentence in sentences {
            let clip = espeak
                .synthesize(sentence)
                .and_then(|c| c.resampled(SAMPLE_RATE))
                .expect("espeak-ng");
            let started = std::time::Instant::now();
            let heard = whisper.transcribe(&clip.samples).expect("whisper");
            seconds += started.elapsed().as_secs_f64();
            spoken += clip.samples.len() as f64 / f64::from(SAMPLE_RATE);
            let (want, got) = (units(sentence, characters), units(&heard.text, characters));
            let e = fixtures::edits(&want, &got);
            wrong += e;
            total += want.len();
            for c in heard.text.chars().map(String::from) {
                traditional += usize::from(script::in_script(&c, false) != c);
                simplified += usize::from(script::in_script(&c, true) != c);
            }
            if show {
                println!(
                    "  {e:>2}/{:<2} [{voice}] {sentence} → {}",
                    want.len(),
                    heard.text
                );
            }
        }
    }
    println!(
        "| {name} | {} | **{:.1} %** ({wrong} of {total} {}) | {} | {:.3} |",
        voices.join(", "),
        100.0 * wrong as f64 / total as f64,
        if characters { "characters" } else { "words" },
        if characters {
            format!("{traditional} / {simplified}")
        } else {
            "–".to_string()
        },
        seconds / spoken
    );
}

fn main() {
    let show = std::env::args().any(|a| a == "show");
    let only_chinese = std::env::args().any(|a| a == "chinese");
    let models = model_dir();
    let load = |model: SpeechModel| {
        Whisper::load(&models::speech_model_file(&models, model), 2)
            .unwrap_or_else(|e| panic!("{e} (scripts/models voice and scripts/models base)"))
    };
    println!(
        "| language, model | voices (espeak-ng) | error rate | characters in traditional / \
         simplified only | real-time factor |"
    );
    println!("|---|---|---|---|---|");
    if !only_chinese {
        english_and_german(&load, show);
    }
    chinese(&load, show);
}

fn english_and_german(load: &dyn Fn(SpeechModel) -> Whisper, show: bool) {
    let tiny = load(SpeechModel::TinyEn);
    error_rate(
        "English, Whisper tiny.en (the English default)",
        &tiny,
        &["en-us", "en-gb+m3"],
        &ENGLISH,
        false,
        show,
    );
    drop(tiny);
    error_rate(
        "English, Whisper base",
        &load(SpeechModel::Base).hearing("en"),
        &["en-us", "en-gb+m3"],
        &ENGLISH,
        false,
        show,
    );
    let german = Language::De;
    let de = [german.espeak_voice(), "de+f3"];
    error_rate(
        "German, Whisper base (de)",
        &load(SpeechModel::Base).hearing(german.whisper_code()),
        &de,
        &GERMAN,
        false,
        show,
    );
}

fn chinese(load: &dyn Fn(SpeechModel) -> Whisper, show: bool) {
    let chinese = Language::Zh;
    let zh = [chinese.espeak_voice(), "cmn-latn-pinyin+f3"];
    error_rate_in(
        "Chinese, before: espeak-ng's plain cmn voice, whisper unprompted (baseline)",
        &load(SpeechModel::Base).hearing("zh").without_prompt(),
        &["cmn", "cmn+f3"],
        &CHINESE,
        true,
        show,
        Espeak::exactly,
    );
    error_rate(
        "Chinese, the pinyin voice, whisper unprompted",
        &load(SpeechModel::Base).hearing("zh").without_prompt(),
        &zh,
        &CHINESE,
        true,
        show,
    );
    error_rate(
        "Chinese, the pinyin voice, whisper prompted in simplified characters, not converted \
         (before 2026-12-06)",
        &load(SpeechModel::Base)
            .hearing(chinese.whisper_code())
            .without_conversion(),
        &zh,
        &CHINESE,
        true,
        show,
    );
    error_rate(
        "Chinese, the pinyin voice, whisper prompted in simplified characters, the other script \
         converted (what ships)",
        &load(SpeechModel::Base).hearing(chinese.whisper_code()),
        &zh,
        &CHINESE,
        true,
        show,
    );
    let to_traditional =
        ferrous_opencc::OpenCC::from_config(ferrous_opencc::config::BuiltinConfig::S2tw)
            .expect("OpenCC's tables");
    let traditional: Vec<String> = CHINESE.iter().map(|s| to_traditional.convert(s)).collect();
    let traditional: Vec<&str> = traditional.iter().map(String::as_str).collect();
    let hant = Language::ZhHant;
    let traditional_whisper = || {
        load(SpeechModel::Base)
            .hearing(hant.whisper_code())
            .writing_traditional(true)
    };
    error_rate(
        "Chinese in traditional characters, the same voices, whisper prompted in them, not \
         converted",
        &traditional_whisper().without_conversion(),
        &zh,
        &traditional,
        true,
        show,
    );
    error_rate(
        "Chinese in traditional characters, the other script converted (what ships for zh-hant)",
        &traditional_whisper(),
        &zh,
        &traditional,
        true,
        show,
    );
}
