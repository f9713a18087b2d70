//! The request's envelopes in the user's language (ADR 0044): the state block's heading and
//! lines, the day lines, the summary's heading and the marks of content from outside — in
//! English, German or Chinese (simplified or traditional characters). Tool names and arguments
//! the model is told to use stay as they are in every language.

use chrono::{DateTime, Datelike, FixedOffset, NaiveDate};

use super::{Confirmation, Cut, Mode};
use crate::config::Language;
use crate::envelope as e;

/// The user's language, for everything the app writes around their words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Locale {
    /// English (the default).
    #[default]
    English,
    /// German.
    German,
    /// Chinese, in simplified characters.
    Chinese,
    /// Chinese, in traditional characters and Taiwan's words for the app's things (程式,
    /// 使用者, 訊息), its quotes 「」.
    ChineseTraditional,
}

impl Locale {
    /// From `LC_ALL`, `LC_MESSAGES` or `LANG`, the first one set (`de_DE.UTF-8`, `zh_CN`…);
    /// English for any other.
    pub fn from_env() -> Locale {
        Locale::of(Language::Auto)
    }

    /// The language the settings choose (`auto`: the environment's).
    pub fn of(language: Language) -> Locale {
        match language.resolved() {
            Language::De => Locale::German,
            Language::Zh => Locale::Chinese,
            Language::ZhHant => Locale::ChineseTraditional,
            _ => Locale::English,
        }
    }

    /// The state block's opening and end.
    pub fn state_marks(self) -> (&'static str, &'static str) {
        match self {
            Locale::English => (e::STATE_OPEN, e::STATE_CLOSE),
            Locale::German => (e::STATE_OPEN_DE, e::STATE_CLOSE_DE),
            Locale::Chinese => (e::STATE_OPEN_ZH, e::STATE_CLOSE_ZH),
            Locale::ChineseTraditional => (e::STATE_OPEN_ZH_HANT, e::STATE_CLOSE_ZH_HANT),
        }
    }

    /// The heading of a compacted chat's summary.
    pub fn summary_open(self) -> &'static str {
        match self {
            Locale::English => e::SUMMARY_OPEN,
            Locale::German => e::SUMMARY_OPEN_DE,
            Locale::Chinese => e::SUMMARY_OPEN_ZH,
            Locale::ChineseTraditional => e::SUMMARY_OPEN_ZH_HANT,
        }
    }

    /// The marks around a tool's result that is text from outside.
    pub fn outside_marks(self) -> (&'static str, &'static str) {
        match self {
            Locale::English => (e::OUTSIDE_OPEN, e::OUTSIDE_CLOSE),
            Locale::German => (e::OUTSIDE_OPEN_DE, e::OUTSIDE_CLOSE_DE),
            Locale::Chinese => (e::OUTSIDE_OPEN_ZH, e::OUTSIDE_CLOSE_ZH),
            Locale::ChineseTraditional => (e::OUTSIDE_OPEN_ZH_HANT, e::OUTSIDE_CLOSE_ZH_HANT),
        }
    }

    /// What the system prompt adds after the rules where the envelopes are not the English ones
    /// the rules describe: their headings in this language, so the model knows them for the
    /// app's (the rules may be the user's own file, which cannot know them).
    pub fn envelope_note(self) -> Option<String> {
        let (open, close) = self.state_marks();
        let (outside, outside_close) = self.outside_marks();
        let summary = self.summary_open();
        match self {
            Locale::English => None,
            Locale::German => Some(format!(
                "Die Hinweise der App stehen in dieser Unterhaltung auf Deutsch: {open} … {close} \
                 ist der Zustandsblock, {outside} … {outside_close} markiert Inhalt von außen, \
                 {summary} leitet die Zusammenfassung des früheren Gesprächs ein. Sie stammen von \
                 der App, nie vom Nutzer; wiederhole sie nicht."
            )),
            Locale::Chinese => Some(format!(
                "本对话中程序的标注用中文：{open} …… {close} 是状态块，{outside} …… {outside_close} \
                 标出外部内容，{summary} 是此前对话的摘要。它们来自程序，不是用户说的话；不要复述。"
            )),
            Locale::ChineseTraditional => Some(format!(
                "本對話中程式的標註用中文：{open} …… {close} 是狀態區塊，{outside} …… \
                 {outside_close} 標出外部內容，{summary} 是先前對話的摘要。它們來自程式，不是使用者\
                 說的話；不要複述。使用者寫繁體字：用中文回答時請用繁體字。"
            )),
        }
    }

    /// `[Thu 24 Sep]`, `[Do 24. Sep]`, `[9月24日 周四]`, `[9月24日 週四]`.
    pub(super) fn day_line(self, date: NaiveDate) -> String {
        match self {
            Locale::English => format!("[{}]", date.format("%a %-d %b")),
            Locale::German => format!(
                "[{} {}. {}]",
                de_weekday(date).get(..2).unwrap_or_default(),
                date.day(),
                DE_MONTHS_SHORT[date.month0() as usize]
            ),
            Locale::Chinese | Locale::ChineseTraditional => format!(
                "[{}月{}日 {}]",
                date.month(),
                date.day(),
                self.zh_weekday(date)
            ),
        }
    }

    pub(super) fn time_line(self, now: DateTime<FixedOffset>) -> String {
        match self {
            Locale::English => {
                format!("Local time: {}", now.format("%A %-d %B %Y, %H:%M (UTC%:z)"))
            }
            Locale::German => format!(
                "Ortszeit: {}, {}. {} {}, {} (UTC{})",
                de_weekday(now.date_naive()),
                now.day(),
                DE_MONTHS[now.month0() as usize],
                now.year(),
                now.format("%H:%M"),
                now.format("%:z")
            ),
            Locale::Chinese | Locale::ChineseTraditional => format!(
                "{}：{}年{}月{}日 {} {} (UTC{})",
                if self == Locale::Chinese {
                    "当地时间"
                } else {
                    "當地時間"
                },
                now.year(),
                now.month(),
                now.day(),
                self.zh_weekday(now.date_naive()),
                now.format("%H:%M"),
                now.format("%:z")
            ),
        }
    }

    /// "Interaction: spoken, hands-free".
    pub(super) fn mode_line(self, mode: Mode) -> String {
        match self {
            Locale::English => format!("Interaction: {}", mode.describe()),
            Locale::German => format!(
                "Interaktion: {}",
                match mode {
                    Mode::Typed => "getippt",
                    Mode::PushToTalk => "gesprochen, per Sprechtaste",
                    Mode::HandsFree => "gesprochen, freihändig",
                    Mode::Wake => "gesprochen, nach dem Aktivierungswort",
                }
            ),
            Locale::Chinese => format!(
                "交互方式：{}",
                match mode {
                    Mode::Typed => "打字",
                    Mode::PushToTalk => "语音，按键说话",
                    Mode::HandsFree => "语音，免提",
                    Mode::Wake => "语音，唤醒词之后",
                }
            ),
            Locale::ChineseTraditional => format!(
                "互動方式：{}",
                match mode {
                    Mode::Typed => "打字",
                    Mode::PushToTalk => "語音，按鍵說話",
                    Mode::HandsFree => "語音，免持",
                    Mode::Wake => "語音，喚醒詞之後",
                }
            ),
        }
    }

    /// Where the previous answer was cut, with the words the user heard.
    pub(super) fn cut_line(self, cut: &Cut) -> String {
        match (self, cut) {
            (Locale::English, Cut::After(prefix)) => format!(
                "Previous answer: cut off while spoken, after \"{prefix}\"; the user did not hear the rest"
            ),
            (Locale::English, Cut::BeforeAnyWord) => {
                "Previous answer: cut off before any of it was heard".to_string()
            }
            (Locale::English, Cut::NoAnswer) => {
                "Previous question: stopped with no answer at all".to_string()
            }
            (Locale::German, Cut::After(prefix)) => format!(
                "Vorige Antwort: beim Sprechen unterbrochen, nach „{prefix}“; den Rest hat der Nutzer nicht gehört"
            ),
            (Locale::German, Cut::BeforeAnyWord) => {
                "Vorige Antwort: unterbrochen, bevor etwas davon zu hören war".to_string()
            }
            (Locale::German, Cut::NoAnswer) => {
                "Vorige Frage: angehalten, ganz ohne Antwort".to_string()
            }
            (Locale::Chinese, Cut::After(prefix)) => {
                format!("上一个回答：朗读时在“{prefix}”之后被打断；用户没有听到其余部分")
            }
            (Locale::Chinese, Cut::BeforeAnyWord) => {
                "上一个回答：在用户听到任何内容之前被打断".to_string()
            }
            (Locale::Chinese, Cut::NoAnswer) => "上一个问题：已停止，没有任何回答".to_string(),
            (Locale::ChineseTraditional, Cut::After(prefix)) => {
                format!("上一個回答：朗讀時在「{prefix}」之後被打斷；使用者沒有聽到其餘部分")
            }
            (Locale::ChineseTraditional, Cut::BeforeAnyWord) => {
                "上一個回答：在使用者聽到任何內容之前被打斷".to_string()
            }
            (Locale::ChineseTraditional, Cut::NoAnswer) => {
                "上一個問題：已停止，沒有任何回答".to_string()
            }
        }
    }

    /// The question Jarvis waits for the user to answer, and what their yes does.
    pub(super) fn confirmation_line(self, pending: &Confirmation) -> String {
        match (self, pending) {
            (Locale::English, Confirmation::Forget(question)) => format!(
                "Waiting for the user to confirm: {question} (if this message says yes to it, call \
                 forget_fact with that id and confirm: true; otherwise the fact is kept)"
            ),
            (Locale::English, Confirmation::Remember(question)) => format!(
                "Waiting for the user to confirm: {question} (proposed after reading content from \
                 outside, not by the user; if this message says yes to it, call remember_fact with \
                 that fact and confirm: true; otherwise it is not stored)"
            ),
            (Locale::English, Confirmation::Tool { question, name }) => format!(
                "Waiting for the user to confirm: {question} (if this message says yes to it, call \
                 {name} again with the same arguments; otherwise it is not run)"
            ),
            (Locale::German, Confirmation::Forget(question)) => format!(
                "Wartet auf die Bestätigung des Nutzers: {question} (sagt diese Nachricht ja dazu, \
                 rufe forget_fact mit dieser id und confirm: true auf; sonst bleibt die Tatsache \
                 gespeichert)"
            ),
            (Locale::German, Confirmation::Remember(question)) => format!(
                "Wartet auf die Bestätigung des Nutzers: {question} (vorgeschlagen nach dem Lesen \
                 von Inhalt von außen, nicht vom Nutzer; sagt diese Nachricht ja dazu, rufe \
                 remember_fact mit dieser Tatsache und confirm: true auf; sonst wird sie nicht \
                 gespeichert)"
            ),
            (Locale::German, Confirmation::Tool { question, name }) => format!(
                "Wartet auf die Bestätigung des Nutzers: {question} (sagt diese Nachricht ja dazu, \
                 rufe {name} noch einmal mit denselben Argumenten auf; sonst läuft es nicht)"
            ),
            (Locale::Chinese, Confirmation::Forget(question)) => format!(
                "等待用户确认：{question}（如果这条消息表示同意，就用这个 id 和 confirm: true 调用 \
                 forget_fact；否则保留这条事实）"
            ),
            (Locale::Chinese, Confirmation::Remember(question)) => format!(
                "等待用户确认：{question}（这是读了外部内容之后提出的，不是用户提出的；如果这条消息\
                 表示同意，就用这条事实和 confirm: true 调用 remember_fact；否则不保存）"
            ),
            (Locale::Chinese, Confirmation::Tool { question, name }) => format!(
                "等待用户确认：{question}（如果这条消息表示同意，就用同样的参数再次调用 {name}；\
                 否则不运行）"
            ),
            (Locale::ChineseTraditional, Confirmation::Forget(question)) => format!(
                "等待使用者確認：{question}（如果這則訊息表示同意，就用這個 id 和 confirm: true \
                 呼叫 forget_fact；否則保留這條事實）"
            ),
            (Locale::ChineseTraditional, Confirmation::Remember(question)) => format!(
                "等待使用者確認：{question}（這是讀了外部內容之後提出的，不是使用者提出的；如果這則\
                 訊息表示同意，就用這條事實和 confirm: true 呼叫 remember_fact；否則不儲存）"
            ),
            (Locale::ChineseTraditional, Confirmation::Tool { question, name }) => format!(
                "等待使用者確認：{question}（如果這則訊息表示同意，就用同樣的參數再次呼叫 {name}；\
                 否則不執行）"
            ),
        }
    }

    /// The question a forget waits on, in the state block until the user answers it.
    pub fn forget_question(self, fact: &str, id: i64) -> String {
        match self {
            Locale::English => format!("Forget \"{fact}\" (fact {id})?"),
            Locale::German => format!("Vergessen: „{fact}“ (Tatsache {id})?"),
            Locale::Chinese => format!("忘记“{fact}”（事实 {id}）吗？"),
            Locale::ChineseTraditional => format!("忘記「{fact}」（事實 {id}）嗎？"),
        }
    }

    /// The question a memory proposed after reading outside text waits on.
    pub fn remember_question(self, fact: &str) -> String {
        match self {
            Locale::English => format!("Remember \"{fact}\"?"),
            Locale::German => format!("Merken: „{fact}“?"),
            Locale::Chinese => format!("记住“{fact}”吗？"),
            Locale::ChineseTraditional => format!("記住「{fact}」嗎？"),
        }
    }

    /// Jarvis's own words for a call of `tool` of the user's `server`, its arguments said as
    /// "name value" pieces (the last ones left out past `cap` characters, with "…").
    pub fn tool_question(self, tool: &str, server: &str, said: &[String], cap: usize) -> String {
        let and = match self {
            Locale::English => " and ",
            Locale::German => " und ",
            Locale::Chinese | Locale::ChineseTraditional => "和",
        };
        let comma = if self.is_chinese() { "、" } else { ", " };
        let all = match said.len() {
            0 => String::new(),
            1 => said[0].clone(),
            n => format!("{}{and}{}", said[..n - 1].join(comma), said[n - 1]),
        };
        let all = crate::llm::sse::capped_at(&all, cap);
        match (self, all.is_empty()) {
            (Locale::English, true) => format!("Shall I use {tool} of your {server} server?"),
            (Locale::English, false) => {
                format!("Shall I use {tool} of your {server} server, with {all}?")
            }
            (Locale::German, true) => format!("Soll ich {tool} deines Servers {server} benutzen?"),
            (Locale::German, false) => {
                format!("Soll ich {tool} deines Servers {server} benutzen, mit {all}?")
            }
            (Locale::Chinese, true) => format!("要我使用你的 {server} 服务器的 {tool} 吗？"),
            (Locale::Chinese, false) => {
                format!("要我使用你的 {server} 服务器的 {tool}（{all}）吗？")
            }
            (Locale::ChineseTraditional, true) => {
                format!("要我使用你的 {server} 伺服器的 {tool} 嗎？")
            }
            (Locale::ChineseTraditional, false) => {
                format!("要我使用你的 {server} 伺服器的 {tool}（{all}）嗎？")
            }
        }
    }

    /// "Actions still running: 2".
    pub(super) fn running_line(self, running: usize) -> String {
        match self {
            Locale::English => format!("Actions still running: {running}"),
            Locale::German => format!("Noch laufende Aktionen: {running}"),
            Locale::Chinese => format!("仍在进行的操作：{running}"),
            Locale::ChineseTraditional => format!("仍在進行的操作：{running}"),
        }
    }

    /// Whether it is Chinese, in either script.
    pub fn is_chinese(self) -> bool {
        matches!(self, Locale::Chinese | Locale::ChineseTraditional)
    }

    /// `周四`, or `週四` in traditional characters.
    fn zh_weekday(self, date: NaiveDate) -> String {
        let day = ["一", "二", "三", "四", "五", "六", "日"]
            [date.weekday().num_days_from_monday() as usize];
        let week = if self == Locale::ChineseTraditional {
            "週"
        } else {
            "周"
        };
        format!("{week}{day}")
    }
}

const DE_MONTHS: [&str; 12] = [
    "Januar",
    "Februar",
    "März",
    "April",
    "Mai",
    "Juni",
    "Juli",
    "August",
    "September",
    "Oktober",
    "November",
    "Dezember",
];

const DE_MONTHS_SHORT: [&str; 12] = [
    "Jan", "Feb", "Mär", "Apr", "Mai", "Jun", "Jul", "Aug", "Sep", "Okt", "Nov", "Dez",
];

fn de_weekday(date: NaiveDate) -> &'static str {
    [
        "Montag",
        "Dienstag",
        "Mittwoch",
        "Donnerstag",
        "Freitag",
        "Samstag",
        "Sonntag",
    ][date.weekday().num_days_from_monday() as usize]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_questions_left_for_the_user_are_in_their_language() {
        let said = [
            "path /home/ada/plans.txt".to_string(),
            "limit 10".to_string(),
        ];
        assert_eq!(
            Locale::English.tool_question("read_text_file", "files", &said, 300),
            "Shall I use read_text_file of your files server, with path /home/ada/plans.txt and limit 10?"
        );
        assert_eq!(
            Locale::German.tool_question("read_text_file", "files", &said, 300),
            "Soll ich read_text_file deines Servers files benutzen, mit path /home/ada/plans.txt und limit 10?"
        );
        assert_eq!(
            Locale::Chinese.tool_question("read_text_file", "files", &said, 300),
            "要我使用你的 files 服务器的 read_text_file（path /home/ada/plans.txt和limit 10）吗？"
        );
        assert_eq!(
            Locale::German.tool_question("list", "files", &[], 300),
            "Soll ich list deines Servers files benutzen?"
        );
        assert_eq!(
            Locale::English.tool_question("echo", "everything", &["message hello".into()], 8),
            "Shall I use echo of your everything server, with message …?"
        );
        assert_eq!(
            Locale::Chinese.forget_question("我的狗叫布鲁诺。", 3),
            "忘记“我的狗叫布鲁诺。”（事实 3）吗？"
        );
        assert_eq!(
            Locale::German.remember_question("Ada mag Tee."),
            "Merken: „Ada mag Tee.“?"
        );
    }

    /// Every line the app writes for a user of traditional characters, in those characters only:
    /// OpenCC's conversion to Taiwan's characters leaves each as it is.
    #[test]
    fn the_traditional_lines_have_no_simplified_character_in_them() {
        use super::super::{Confirmation, Cut, Mode};
        let t = Locale::ChineseTraditional;
        let now = chrono::DateTime::parse_from_rfc3339("2026-09-24T14:05:00+02:00").unwrap();
        let mut lines = vec![
            t.envelope_note().unwrap(),
            t.day_line(now.date_naive()),
            t.time_line(now),
            t.summary_open().to_string(),
            t.running_line(2),
            t.forget_question("x", 3),
            t.remember_question("x"),
            t.tool_question("read", "files", &["path a".into(), "limit 1".into()], 300),
            t.tool_question("read", "files", &[], 300),
        ];
        let (open, close) = t.state_marks();
        let (outside, outside_close) = t.outside_marks();
        lines.extend([open, close, outside, outside_close].map(String::from));
        for mode in [Mode::Typed, Mode::PushToTalk, Mode::HandsFree, Mode::Wake] {
            lines.push(t.mode_line(mode));
        }
        for cut in [Cut::After("x".into()), Cut::BeforeAnyWord, Cut::NoAnswer] {
            lines.push(t.cut_line(&cut));
        }
        for pending in [
            Confirmation::Forget("x".into()),
            Confirmation::Remember("x".into()),
            Confirmation::Tool {
                question: "x".into(),
                name: "read".into(),
            },
        ] {
            lines.push(t.confirmation_line(&pending));
        }
        let to_traditional =
            ferrous_opencc::OpenCC::from_config(ferrous_opencc::config::BuiltinConfig::S2tw)
                .unwrap();
        for line in lines {
            assert_eq!(to_traditional.convert(&line), line);
        }
    }

    #[test]
    fn the_language_comes_from_the_setting_or_a_locale_tag() {
        assert_eq!(Language::of_tag("de_DE.UTF-8"), Some(Language::De));
        assert_eq!(Language::of_tag("zh_CN.UTF-8"), Some(Language::Zh));
        assert_eq!(Language::of_tag("zh-Hans"), Some(Language::Zh));
        assert_eq!(Language::of_tag("zh_SG.UTF-8"), Some(Language::Zh));
        assert_eq!(Language::of_tag("zh-Hans-HK"), Some(Language::Zh));
        // Where Chinese is written in traditional characters.
        for tag in [
            "zh_TW.UTF-8",
            "zh_HK",
            "zh_MO.UTF-8",
            "zh-Hant",
            "zh-Hant-TW",
        ] {
            assert_eq!(Language::of_tag(tag), Some(Language::ZhHant), "{tag}");
        }
        assert_eq!(Locale::of(Language::ZhHant), Locale::ChineseTraditional);
        assert_eq!(Language::ZhHant.whisper_code(), "zh");
        assert_eq!(Language::of_tag("en_GB"), Some(Language::En));
        assert_eq!(Language::of_tag("C.UTF-8"), None);
        assert_eq!(Language::of_tag("fr_FR"), None);
        assert_eq!(
            (Language::De.whisper_code(), Language::Zh.espeak_voice()),
            ("de", "cmn-latn-pinyin")
        );
        assert_eq!(Locale::of(Language::De), Locale::German);
        assert_eq!(Locale::of(Language::Zh), Locale::Chinese);
        assert_eq!(Locale::of(Language::En), Locale::English);
        let settings = crate::config::Settings::parse(
            "[general]\nlanguage = \"zh\"\n",
            std::path::Path::new("settings.toml"),
        )
        .unwrap();
        assert_eq!(settings.general.language, Language::Zh);
        for written in [
            "zh-hant", "zh-Hant", "zh-tw", "zh-TW", "zh_TW", "zh-hk", "zh_HK",
        ] {
            let settings = crate::config::Settings::parse(
                &format!("[general]\nlanguage = \"{written}\"\n"),
                std::path::Path::new("settings.toml"),
            )
            .unwrap();
            assert_eq!(settings.general.language, Language::ZhHant, "{written}");
        }
        assert_eq!(Language::ZhHant.key(), "zh-hant");
        let err = crate::config::Settings::parse(
            "[general]\nlanguage = \"fr\"\n",
            std::path::Path::new("settings.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("language") && err.contains("`zh`"), "{err}");
    }
}
