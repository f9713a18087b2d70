//! Chinese in one script: what whisper heard written in the user's characters, and text in
//! either script compared as one (OpenCC's tables, through `ferrous-opencc`, loaded on first use:
//! ~3 ms and a few MiB).

use std::borrow::Cow;
use std::sync::LazyLock;

use ferrous_opencc::{config::BuiltinConfig, OpenCC};

use super::heard::is_unspaced;

/// Characters OpenCC converts to traditional by default that are traditional characters too:
/// STCharacters lists each among its own traditional forms (范 as 範 or 范, 后 as 後 or 后, 台 as
/// 臺 or 台). Among traditional characters whisper chose them, so they stay: converted, a surname
/// (范, 余) or a word (干擾, 里長) written right would come out wrong. Beside a character that is
/// simplified only, they are part of a simplified word and are converted with it ("这里").
const TRADITIONAL_AS_THEY_ARE: &str =
    "㐹万丑丰于云亘仆价伙余佣党准几凶划占厂厘台叶吁吃后咨咸唇夸尸岩岳帘干广征愿托挂据斗朴杠杰极柜涂涌淀游熏皂确种筑胜腊腌膻苹范荐虫蚝蜡蝎跖辟适郁采里";

/// The same the other way: traditional characters TSCharacters lists among their own
/// simplified forms (於 as 于 or 於).
const SIMPLIFIED_AS_THEY_ARE: &str = "乾剋夥徵於薹麽";

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
/// 封邮件吗？"). OpenCC's tables convert them (its phrases first, then single characters), and a
/// character that is already right in the user's script is kept as written (see
/// [`TRADITIONAL_AS_THEY_ARE`]) unless the word around it is in the other script. Where the
/// tables cannot load, the text is left as it was.
pub fn in_script(text: &str, traditional: bool) -> String {
    if !has_chinese(text) {
        return text.to_string();
    }
    let (converter, kept) = if traditional {
        (&TO_TRADITIONAL, TRADITIONAL_AS_THEY_ARE)
    } else {
        (&TO_SIMPLIFIED, SIMPLIFIED_AS_THEY_ARE)
    };
    let Some(opencc) = converter.as_ref() else {
        return text.to_string();
    };
    let converted = opencc.convert(text);
    if converted.chars().count() != text.chars().count() {
        return converted;
    }
    let pairs: Vec<(char, char)> = text.chars().zip(converted.chars()).collect();
    // Whether the character at `i` was in the other script for certain.
    let other_script = |i: usize| {
        pairs
            .get(i)
            .is_some_and(|&(was, now)| was != now && !kept.contains(was))
    };
    pairs
        .iter()
        .enumerate()
        .map(|(i, &(was, now))| {
            let in_a_word_of_the_other_script =
                other_script(i + 1) || i.checked_sub(1).is_some_and(other_script);
            if kept.contains(was) && !in_a_word_of_the_other_script {
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
    match TO_SIMPLIFIED.as_ref() {
        Some(opencc) if has_chinese(text) => Cow::Owned(opencc.convert(text)),
        _ => Cow::Borrowed(text),
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
        // A simplified one written among them still is converted.
        assert_eq!(in_script("范先生说了", true), "范先生說了");
        assert_eq!(in_script("於先生说了", false), "於先生说了");
    }

    #[test]
    fn the_same_words_in_either_script_compare_alike() {
        assert_eq!(comparable("別說了"), comparable("别说了"));
        assert_eq!(comparable("明天台北的天氣"), "明天台北的天气");
        assert!(matches!(comparable("stop it"), Cow::Borrowed("stop it")));
    }
}
