//! Scripts: the characters written without spaces between words, and Chinese in one script —
//! what whisper heard written in the user's characters, and text in either script compared as one
//! (OpenCC's tables, through `ferrous-opencc`, loaded on first use: ~3 ms and a few MiB).

use std::borrow::Cow;
use std::sync::LazyLock;

use ferrous_opencc::{config::BuiltinConfig, OpenCC};

/// Characters whisper wrote that stay as written in traditional text, though OpenCC would change
/// them: surnames (范 as 範, 余 as 餘) that no phrase of OpenCC's tables tells apart from the
/// words they also stand in ("打電話給范先生" must not become "範先生"), and 台, which Taiwan
/// writes beside the standard's 臺 ("台北"). The cost: a simplified word leaked with one of them
/// in it ("范围", "其余") keeps that character.
const KEPT_IN_TRADITIONAL: &str = "范余台";

/// A character of a script written without spaces between words (CJK ideographs, kana).
pub(crate) fn is_unspaced(c: char) -> bool {
    matches!(c,
        '\u{3040}'..='\u{30ff}'   // hiragana, katakana
        | '\u{3400}'..='\u{4dbf}' // CJK extension A
        | '\u{4e00}'..='\u{9fff}' // CJK unified ideographs
        | '\u{f900}'..='\u{faff}' // CJK compatibility ideographs
    )
}

/// Full-width punctuation: 。！？，、；：「」『』（）and the like.
pub(crate) fn is_cjk_punctuation(c: char) -> bool {
    matches!(c, '\u{3000}'..='\u{303f}' | '\u{ff01}'..='\u{ff0f}' | '\u{ff1a}'..='\u{ff20}')
}

fn load(config: BuiltinConfig) -> Option<OpenCC> {
    OpenCC::from_config(config)
        .inspect_err(|e| tracing::warn!("Chinese characters are left as they were written: {e}"))
        .ok()
}

static TO_SIMPLIFIED: LazyLock<Option<OpenCC>> = LazyLock::new(|| load(BuiltinConfig::T2s));
static TO_TRADITIONAL: LazyLock<Option<OpenCC>> = LazyLock::new(|| load(BuiltinConfig::S2tw));

fn has_chinese(text: &str) -> bool {
    text.chars().any(is_unspaced)
}

/// `text` with its Chinese in the user's characters: simplified, or traditional as Taiwan writes
/// them. Prompted in one script, whisper still writes words of a clip it is unsure of in the
/// other ("你恩貪我寫一份有天馬。" under the simplified prompt, from espeak-ng's "你能帮我写一
/// 封邮件吗？"). OpenCC's tables convert them, phrases first: to simplified as they are; to
/// traditional by way of simplified, so that a word whisper wrote half in each script is found
/// in the phrase tables whole ("干擾" is 干扰's traditional, not "幹擾"; "哪里" is "哪裡", "里長"
/// stays). A character whisper wrote in traditional only is kept as written, and so are
/// [`KEPT_IN_TRADITIONAL`]. Where the tables cannot load, the text is left as it was.
pub fn in_script(text: &str, traditional: bool) -> String {
    if !has_chinese(text) {
        return text.to_string();
    }
    let Some(to_simplified) = TO_SIMPLIFIED.as_ref() else {
        return text.to_string();
    };
    let simplified = to_simplified.convert(text);
    if !traditional {
        return simplified;
    }
    let Some(to_traditional) = TO_TRADITIONAL.as_ref() else {
        return text.to_string();
    };
    let converted = to_traditional.convert(&simplified);
    let same_length = |t: &str| t.chars().count() == text.chars().count();
    if !same_length(&simplified) || !same_length(&converted) {
        return converted;
    }
    text.chars()
        .zip(simplified.chars())
        .zip(converted.chars())
        .map(|((was, plain), now)| {
            let traditional_only = was != plain;
            if traditional_only || KEPT_IN_TRADITIONAL.contains(was) {
                was
            } else {
                now
            }
        })
        .collect()
}

/// `text` with its Chinese in simplified characters, for comparing (a stop phrase, the voice's
/// own words): the same words in either script compare equal.
pub fn comparable(text: &str) -> Cow<'_, str> {
    if !has_chinese(text) {
        return Cow::Borrowed(text);
    }
    match TO_SIMPLIFIED.as_ref() {
        Some(opencc) => Cow::Owned(opencc.convert(text)),
        None => Cow::Borrowed(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chinese_is_written_in_the_users_characters_whatever_whisper_mixed() {
        assert_eq!(
            in_script("你恩貪我寫一份有天馬。", false),
            "你恩贪我写一份有天马。"
        );
        assert_eq!(in_script("这里的天气怎么样？", true), "這裡的天氣怎麼樣？");
        assert_eq!(
            in_script("當我查一下明天的日程。", false),
            "当我查一下明天的日程。"
        );
        // What is not Chinese is left as it is.
        assert_eq!(
            in_script("打开 Wi-Fi 设置，OK?", true),
            "打開 Wi-Fi 設置，OK?"
        );
        assert_eq!(in_script("Hör auf.", false), "Hör auf.");
    }

    #[test]
    fn a_character_already_right_in_the_users_script_is_kept() {
        // Traditional characters that OpenCC, reading them as simplified, would change.
        assert_eq!(in_script("打電話給范先生", true), "打電話給范先生");
        assert_eq!(in_script("請問余老師在嗎", true), "請問余老師在嗎");
        assert_eq!(in_script("干擾到我了", true), "干擾到我了");
        assert_eq!(in_script("里長說台北下雨", true), "里長說台北下雨");
        assert_eq!(in_script("皇后和公里", true), "皇后和公里");
        // Simplified words among them are converted whole, by OpenCC's phrases.
        for (mixed, traditional) in [
            ("以后再說", "以後再說"),
            ("你在哪里？", "你在哪裡？"),
            ("麵包里面", "麵包裡面"),
            ("後台的几天", "後台的幾天"),
            ("去广州的价格", "去廣州的價格"),
        ] {
            assert_eq!(in_script(mixed, true), traditional, "{mixed}");
        }
        // And to simplified, every traditional character.
        assert_eq!(in_script("由於什麽", false), "由于什么");
        assert_eq!(in_script("乾隆年间", false), "乾隆年间");
    }

    #[test]
    fn the_same_words_in_either_script_compare_alike() {
        assert_eq!(comparable("別說了"), comparable("别说了"));
        assert_eq!(comparable("明天台北的天氣"), "明天台北的天气");
        assert!(matches!(comparable("stop it"), Cow::Borrowed("stop it")));
    }
}
