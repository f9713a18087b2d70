//! Builds the backend request from a chat's history: the rules and the profile in system, the
//! records as messages.

mod locale;
mod preview;

pub use locale::Locale;
pub use preview::preview;

use chrono::{DateTime, FixedOffset};

use crate::llm::{Message, MessageRole, Request};
use crate::store::{Fact, Record, Role};

/// The default rules, given to the model as its system prompt.
pub const RULES: &str = include_str!("../../assets/rules.md");

/// The rules the model is given: the file `path` names, or the built-in ones when it is empty.
pub fn rules_from(path: &str) -> Result<String, String> {
    let path = path.trim();
    if path.is_empty() {
        return Ok(RULES.to_string());
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("the rules file {path} cannot be read: {e}"))?;
    if text.trim().is_empty() {
        return Err(format!("the rules file {path} is empty"));
    }
    Ok(text)
}

/// The system prompt with the built-in rules.
pub fn system_prompt(facts: &[Fact], name: &str) -> String {
    system_prompt_with(RULES, facts, name)
}

/// The system prompt: the rules, then — when there are facts — the profile block, "About {name}"
/// and one line per fact.
pub fn system_prompt_with(rules: &str, facts: &[Fact], name: &str) -> String {
    let mut system = rules.trim().to_string();
    // Each fact one line; the newest that fit the budget (the rest stay in the Memory panel).
    let mut room = FACTS_BUDGET;
    let mut kept: Vec<String> = Vec::new();
    for fact in facts.iter().rev() {
        let line = crate::envelope::one_line(&fact.text);
        let size = line.chars().count();
        if line.is_empty() || size > room {
            continue;
        }
        room -= size;
        kept.push(line);
    }
    if !kept.is_empty() {
        let name = if name.trim().is_empty() {
            "the user"
        } else {
            name.trim()
        };
        system.push_str(&format!("\n\nAbout {name}:"));
        for line in kept.iter().rev() {
            system.push_str("\n- ");
            system.push_str(line);
        }
    }
    system
}

/// The most characters of facts the system prompt carries (every request pays for them).
pub const FACTS_BUDGET: usize = 4_000;

pub use crate::config::Mode;

/// Where the previous answer was cut, when it was not heard whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cut {
    /// It was spoken and cut after these words.
    After(String),
    /// It was cut before any word was heard.
    BeforeAnyWord,
    /// The previous question got no answer at all (stopped before a word was written).
    NoAnswer,
}

impl Cut {
    /// The cut of a previous reply, as stored: its heard prefix, else an answer stopped empty.
    pub fn of(previous: &crate::store::Reply) -> Option<Cut> {
        if previous.state == crate::store::ReplyState::Stopped && previous.text.trim().is_empty() {
            // (Whatever its voice did: there was nothing to hear.)
            return Some(Cut::NoAnswer);
        }
        match previous.heard.as_deref().map(str::trim) {
            Some("") => Some(Cut::BeforeAnyWord),
            Some(prefix) => Some(Cut::After(prefix.to_string())),
            None => None,
        }
    }
}

/// What the app knows at this turn, for the state block.
#[derive(Debug, Clone)]
pub struct State {
    /// Now, in the user's time zone.
    pub now: DateTime<FixedOffset>,
    /// How the question was asked.
    pub mode: Mode,
    /// The user's language.
    pub locale: Locale,
    /// Where the previous answer was cut, if it was.
    pub cut: Option<Cut>,
    /// A question Jarvis asked and waits for the user to confirm (forgetting a fact, or
    /// remembering one proposed after reading text from outside).
    pub pending_confirmation: Option<Confirmation>,
    /// How many actions (tool calls, housekeeping) are still running for the chat.
    pub running_actions: usize,
}

/// What a pending confirmation waits for, with the question asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Confirmation {
    /// Forgetting a fact ("Forget "…" (fact 12)?").
    Forget(String),
    /// Remembering a fact proposed after reading text from outside ("Remember "…"?").
    Remember(String),
    /// A call to a tool of the user's servers, asked aloud ("Run read_text_file of the files
    /// server with {…}?"), with the name the tool is offered under.
    Tool {
        /// The question asked.
        question: String,
        /// The tool's name as offered (`server__tool`).
        name: String,
    },
}

impl State {
    /// Now, typed, in the environment's locale. `JARVIS_NOW` (RFC 3339) pins the clock, so that
    /// a fixed seed at temperature 0 gives the same answer on another minute.
    pub fn typed_now() -> State {
        State::now(Mode::Typed)
    }

    /// Now, asked in `mode`, in the environment's locale (`JARVIS_NOW` pins the clock).
    pub fn now(mode: Mode) -> State {
        let pinned = std::env::var("JARVIS_NOW")
            .ok()
            .and_then(|t| DateTime::parse_from_rfc3339(t.trim()).ok());
        State {
            now: pinned.unwrap_or_else(|| chrono::Local::now().fixed_offset()),
            mode,
            locale: Locale::from_env(),
            cut: None,
            pending_confirmation: None,
            running_actions: 0,
        }
    }

    fn block(&self) -> String {
        let (open, close) = self.locale.state_marks();
        let mut lines = vec![
            open.to_string(),
            self.locale.time_line(self.now),
            self.locale.mode_line(self.mode),
        ];
        if let Some(cut) = &self.cut {
            lines.push(self.locale.cut_line(cut));
        }
        if let Some(pending) = &self.pending_confirmation {
            lines.push(self.locale.confirmation_line(pending));
        }
        if self.running_actions > 0 {
            lines.push(self.locale.running_line(self.running_actions));
        }
        lines.push(close.to_string());
        lines.join("\n")
    }

    /// Rewrites the state block of a question's message as [`build_request`] made it with `was`
    /// (its content ends on the block, a blank line and `question`) to this state's, so a later
    /// round of a tool loop tells what runs then. False, unchanged, when the content is not so.
    pub fn restate(&self, content: &mut String, was: &State, question: &str) -> bool {
        let (old, tail) = (
            was.block(),
            format!("\n\n{}", crate::envelope::neutralise(question.trim())),
        );
        let Some(at) = content
            .strip_suffix(tail.as_str())
            .and_then(|before| before.strip_suffix(old.as_str()))
            .map(str::len)
        else {
            return false;
        };
        content.replace_range(at..at + old.len(), &self.block());
        true
    }
}

pub use crate::envelope::{strip_envelopes, STATE_CLOSE, STATE_OPEN};

/// The request for a reply whose history is `history` (oldest first, ending on the question):
/// one message per record with its text alone; the first user message of each calendar day
/// opens with a day line; adjacent records of one role are joined; the question gets the state
/// block, and an unanswered user record before it is folded in ahead of the block.
pub fn build_request(
    history: &[Record],
    system: String,
    state: &State,
    model: &str,
    max_tokens: u32,
) -> Request {
    let offset = *state.now.offset();
    let day_of = |record: &Record| {
        DateTime::from_timestamp_millis(record.created_at)
            .map(|t| t.with_timezone(&offset).date_naive())
    };
    let mut messages: Vec<Message> = Vec::with_capacity(history.len());
    let mut last_day = None;
    let Some((question, earlier)) = history.split_last() else {
        return Request {
            system,
            messages,
            tools: Vec::new(),
            model: model.to_string(),
            max_tokens,
            housekeeping: false,
            prefill: false,
        };
    };
    let push = |messages: &mut Vec<Message>, role: MessageRole, content: String| match messages
        .last_mut()
    {
        Some(last) if last.role == role => {
            last.content.push_str("\n\n");
            last.content.push_str(&content);
        }
        _ => messages.push(Message::text(role, content)),
    };
    let mut day_line = |record: &Record, text: String| {
        let day = day_of(record);
        if day.is_some() && day != last_day {
            last_day = day;
            day.map(|d| format!("{} {text}", state.locale.day_line(d)))
                .unwrap_or(text)
        } else {
            text
        }
    };
    for record in earlier {
        let (role, text) = match record.role {
            Role::User => (
                MessageRole::User,
                crate::envelope::neutralise(record.text.trim()).into_owned(),
            ),
            Role::Assistant => (MessageRole::Assistant, strip_envelopes(&record.text)),
            Role::Tool => continue,
        };
        if text.is_empty() {
            continue;
        }
        let text = if role == MessageRole::User {
            day_line(record, text)
        } else {
            text
        };
        push(&mut messages, role, text);
    }
    let asked = day_line(
        question,
        format!(
            "{}\n\n{}",
            state.block(),
            crate::envelope::neutralise(question.text.trim())
        ),
    );
    push(&mut messages, MessageRole::User, asked);
    Request {
        system,
        messages,
        tools: Vec::new(),
        model: model.to_string(),
        max_tokens,
        housekeeping: false,
        prefill: false,
    }
}

/// Everything a request is assembled from, besides the store.
pub struct Assembly<'a> {
    /// The chat (none: a question not yet in any chat).
    pub chat: Option<crate::store::ChatId>,
    /// Its history, ending on the question.
    pub history: &'a [Record],
    /// The chat's reply before this question, if any (where the previous answer was cut).
    pub previous: Option<crate::store::Reply>,
    /// How the question was asked.
    pub mode: Mode,
    /// The user's name for the profile.
    pub user_name: &'a str,
    /// The rules (the built-in ones, or the user's file).
    pub rules: &'a str,
    /// Recall across chats, when on.
    pub recall: Option<&'a crate::memory::recall::Recall>,
    /// The backend's model and token limit.
    pub model: &'a str,
    /// The most tokens to write.
    pub max_tokens: u32,
    /// Actions still running for the chat (a tool call, the summary of the last answer).
    pub running_actions: usize,
    /// The user's language, for the envelopes around their words.
    pub locale: Locale,
}

pub use crate::envelope::SUMMARY_OPEN;

/// The request with a compacted chat's summary first, as a user message (joined to the first
/// message when that is the user's too), headed in the user's language.
pub fn with_summary(mut request: Request, summary: &str, locale: Locale) -> Request {
    let summary = format!(
        "{}\n{}",
        locale.summary_open(),
        crate::envelope::neutralise(summary.trim())
    );
    match request.messages.first_mut() {
        Some(first) if first.role == MessageRole::User && first.tool_results.is_empty() => {
            first.content = format!("{summary}\n\n{}", first.content);
        }
        _ => request
            .messages
            .insert(0, Message::text(MessageRole::User, summary)),
    }
    request
}

/// The whole request for a question, as the reply sends it and `jarvis request` shows it
/// (blocking: it reads the store and may embed the question). A pending confirmation is shown in
/// the state block; building a request never settles it (the model does, by calling
/// `forget_fact` with `confirm`). Recall that fails leaves its section out.
pub fn assemble(
    store: &crate::store::Store,
    a: Assembly<'_>,
) -> Result<Request, crate::store::StoreError> {
    assemble_stated(store, a).map(|(request, _)| request)
}

/// [`assemble`], with the state its question's block was built from (for [`State::restate`]).
pub fn assemble_stated(
    store: &crate::store::Store,
    a: Assembly<'_>,
) -> Result<(Request, State), crate::store::StoreError> {
    let pending = match a.chat {
        Some(chat) => store.confirmation(chat)?,
        None => None,
    };
    let question = a
        .history
        .last()
        .map(|r| r.text.as_str())
        .unwrap_or_default();
    let mut system = system_prompt_with(a.rules, &store.facts()?, a.user_name);
    if let Some(note) = a.locale.envelope_note() {
        system.push_str("\n\n");
        system.push_str(&note);
    }
    if let Some(recall) = a.recall {
        match recall.related(store, question, a.chat.unwrap_or(crate::store::ChatId(0))) {
            Ok(found) if !found.is_empty() => {
                system.push_str("\n\n");
                system.push_str(&crate::memory::recall::section(&found));
            }
            Ok(_) => {}
            Err(err) => tracing::warn!("recall failed, so the request goes without it: {err}"),
        }
    }
    let mut state = State::now(a.mode);
    state.locale = a.locale;
    state.cut = a.previous.as_ref().and_then(Cut::of);
    state.pending_confirmation = pending.map(|(pending, question)| {
        // Made of words from outside (a fact proposed, a call's arguments): never a heading.
        let question = crate::envelope::neutralise(&question).into_owned();
        match pending {
            crate::store::Pending::Forget(_) => Confirmation::Forget(question),
            crate::store::Pending::Remember(_) => Confirmation::Remember(question),
            crate::store::Pending::Tool(call) => Confirmation::Tool {
                question,
                name: call.name,
            },
        }
    });
    state.running_actions = a.running_actions;
    // A compacted chat: the records from its anchor on, after the summary of the rest.
    let compaction = match a.chat {
        Some(chat) => store.compaction(chat)?,
        None => None,
    };
    let mut request = match &compaction {
        Some((anchor, summary)) => {
            let from = a
                .history
                .iter()
                .position(|r| r.seq >= *anchor)
                .unwrap_or(a.history.len().saturating_sub(1));
            with_summary(
                build_request(&a.history[from..], system, &state, a.model, a.max_tokens),
                summary,
                a.locale,
            )
        }
        None => build_request(a.history, system, &state, a.model, a.max_tokens),
    };
    // The records it no longer sees stay within its reach.
    let hidden = match a.chat {
        Some(chat) => store.hidden_before(chat)?.is_some(),
        None => false,
    };
    request.tools = if hidden {
        crate::memory::tools_with_records()
    } else {
        crate::memory::tools()
    };
    Ok((request, state))
}

/// What a question asked now in `chat` (none: a new chat) is answered from: the chat's history
/// ending on `question` as a new record, and the chat's reply before it.
pub fn next_question(
    store: &crate::store::Store,
    chat: Option<crate::store::ChatId>,
    question: &str,
) -> Result<(Vec<Record>, Option<crate::store::Reply>), crate::store::StoreError> {
    let mut history = match chat {
        Some(id) => match store.records(id)?.last() {
            Some(last) => store.history(last.id)?,
            None => Vec::new(),
        },
        None => Vec::new(),
    };
    history.push(Record {
        id: crate::store::RecordId(0),
        chat: chat.unwrap_or(crate::store::ChatId(0)),
        seq: history.last().map_or(1, |r| r.seq + 1),
        role: Role::User,
        text: question.to_string(),
        reply: None,
        created_at: crate::store::now_ms(),
        fact: None,
    });
    let previous = match chat {
        Some(id) => store.last_reply(id)?,
        None => None,
    };
    Ok((history, previous))
}

/// The warm-up for the next question in `chat` (none: a new chat): the request that question
/// will be sent with, up to the question — the system prompt (rules and profile; not what recall
/// adds, which depends on the question), the history and the tools — marked
/// [`Request::prefill`].
pub fn warm_request(
    store: &crate::store::Store,
    chat: Option<crate::store::ChatId>,
    user_name: &str,
    rules: &str,
    model: &str,
    max_tokens: u32,
    locale: Locale,
) -> Result<Request, crate::store::StoreError> {
    // A question stands in for the one to come; its message is then left out.
    let (history, previous) = next_question(store, chat, "")?;
    let mut request = assemble(
        store,
        Assembly {
            chat,
            history: &history,
            previous,
            mode: Mode::Typed,
            user_name,
            rules,
            recall: None,
            model,
            max_tokens,
            running_actions: 0,
            locale,
        },
    )?;
    if request
        .messages
        .last()
        .is_some_and(|m| m.role == MessageRole::User)
    {
        request.messages.pop();
    }
    request.prefill = true;
    Ok(request)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{ChatId, RecordId};

    fn at(rfc3339: &str) -> DateTime<FixedOffset> {
        DateTime::parse_from_rfc3339(rfc3339).unwrap()
    }

    fn rec(role: Role, text: &str, when: &str) -> Record {
        Record {
            id: RecordId(0),
            chat: ChatId(1),
            seq: 0,
            role,
            text: text.into(),
            reply: None,
            created_at: at(when).timestamp_millis(),
            fact: None,
        }
    }

    fn state(locale: Locale) -> State {
        State {
            now: at("2026-09-24T14:05:00+02:00"),
            mode: Mode::Typed,
            locale,
            cut: None,
            pending_confirmation: None,
            running_actions: 0,
        }
    }

    fn contents(req: &Request) -> Vec<(MessageRole, String)> {
        req.messages
            .iter()
            .map(|m| (m.role, m.content.clone()))
            .collect()
    }

    #[test]
    fn a_multi_day_history_as_the_model_sees_it() {
        use MessageRole::{Assistant, User};
        let history = [
            rec(Role::User, "Plan my week.", "2026-09-23T09:00:00+02:00"),
            rec(
                Role::Assistant,
                "[Wed 23 Sep] Jarvis: Here is a plan.",
                "2026-09-23T09:00:05+02:00",
            ),
            rec(
                Role::User,
                "Add a run on Friday.",
                "2026-09-23T18:00:00+02:00",
            ),
            rec(Role::Assistant, "Done.", "2026-09-23T18:00:03+02:00"),
            rec(Role::User, "Lost question", "2026-09-24T08:00:00+02:00"),
            rec(Role::User, "What is on today?", "2026-09-24T14:05:00+02:00"),
        ];
        let req = build_request(
            &history,
            system_prompt(&[], ""),
            &state(Locale::English),
            "m",
            100,
        );
        let block = "[Current state | provided by the app, not said by the user]\n\
                     Local time: Thursday 24 September 2026, 14:05 (UTC+02:00)\n\
                     Interaction: typed\n\
                     [End of current state]";
        assert_eq!(
            contents(&req),
            [
                (User, "[Wed 23 Sep] Plan my week.".to_string()),
                (Assistant, "Here is a plan.".into()),
                (User, "Add a run on Friday.".into()),
                (Assistant, "Done.".into()),
                (
                    User,
                    format!("[Thu 24 Sep] Lost question\n\n{block}\n\nWhat is on today?")
                ),
            ]
        );
        assert!(
            !req.system.contains("\n\nAbout "),
            "no profile without facts"
        );
        // The state block is on the last user message only.
        assert_eq!(
            req.messages
                .iter()
                .filter(|m| m.content.contains(STATE_OPEN))
                .count(),
            1
        );
    }

    #[test]
    fn day_lines_and_the_time_line_follow_the_users_locale() {
        let history = [rec(
            Role::User,
            "今天有什么安排?",
            "2026-09-24T14:00:00+02:00",
        )];
        let req = build_request(&history, String::new(), &state(Locale::Chinese), "m", 100);
        let content = &req.messages[0].content;
        assert!(
            content.starts_with("[9月24日 周四] [当前状态｜程序提供，不是用户说的话]\n"),
            "{content}"
        );
        assert!(
            content.contains("\n当地时间：2026年9月24日 周四 14:05 (UTC+02:00)\n交互方式：打字\n[当前状态结束]\n\n今天有什么安排?"),
            "{content}"
        );
    }

    /// The whole request for a Chinese and a German user: every line the app writes around the
    /// user's words in their language (ADR 0044), and nothing English in the envelopes.
    #[test]
    fn the_state_block_day_lines_and_summary_heading_are_in_the_users_language() {
        let history = [
            rec(
                Role::User,
                "Erzähl mir von Paris.",
                "2026-09-23T20:00:00+02:00",
            ),
            rec(
                Role::Assistant,
                "Paris ist die Hauptstadt Frankreichs.",
                "2026-09-23T20:00:05+02:00",
            ),
            rec(Role::User, "Und Rom?", "2026-09-24T14:05:00+02:00"),
        ];
        let mut s = state(Locale::German);
        s.mode = Mode::Wake;
        s.cut = Some(Cut::After("Paris ist die Hauptstadt".into()));
        s.pending_confirmation = Some(Confirmation::Forget(
            crate::prompt::Locale::German.forget_question("Mein Hund heißt Bruno.", 3),
        ));
        s.running_actions = 1;
        let req = with_summary(
            build_request(&history, String::new(), &s, "m", 100),
            "Früher.",
            Locale::German,
        );
        let contents = contents(&req);
        assert_eq!(
            contents[0].1,
            "[Zusammenfassung des früheren Teils dieses Gesprächs]\nFrüher.\n\n[Mi 23. Sep] Erzähl mir von Paris."
        );
        assert_eq!(
            contents[2].1,
            "[Do 24. Sep] [Aktueller Stand | von der App, nicht vom Nutzer gesagt]\n\
             Ortszeit: Donnerstag, 24. September 2026, 14:05 (UTC+02:00)\n\
             Interaktion: gesprochen, nach dem Aktivierungswort\n\
             Vorige Antwort: beim Sprechen unterbrochen, nach „Paris ist die Hauptstadt“; den Rest hat der Nutzer nicht gehört\n\
             Wartet auf die Bestätigung des Nutzers: Vergessen: „Mein Hund heißt Bruno.“ (Tatsache 3)? (sagt diese Nachricht ja dazu, rufe forget_fact mit dieser id und confirm: true auf; sonst bleibt die Tatsache gespeichert)\n\
             Noch laufende Aktionen: 1\n\
             [Ende des aktuellen Stands]\n\nUnd Rom?"
        );

        let mut s = state(Locale::Chinese);
        s.mode = Mode::HandsFree;
        s.cut = Some(Cut::After("巴黎是法国的首都".into()));
        s.running_actions = 2;
        let history = [
            rec(Role::User, "说说巴黎。", "2026-09-23T20:00:00+02:00"),
            rec(
                Role::Assistant,
                "巴黎是法国的首都。",
                "2026-09-23T20:00:05+02:00",
            ),
            rec(Role::User, "罗马呢？", "2026-09-24T14:05:00+02:00"),
        ];
        let req = with_summary(
            build_request(&history, String::new(), &s, "m", 100),
            "早些时候。",
            Locale::Chinese,
        );
        let contents = self::tests::contents(&req);
        assert_eq!(
            contents[0].1,
            "[此前对话的摘要]\n早些时候。\n\n[9月23日 周三] 说说巴黎。"
        );
        assert_eq!(
            contents[2].1,
            "[9月24日 周四] [当前状态｜程序提供，不是用户说的话]\n\
             当地时间：2026年9月24日 周四 14:05 (UTC+02:00)\n\
             交互方式：语音，免提\n\
             上一个回答：朗读时在“巴黎是法国的首都”之后被打断；用户没有听到其余部分\n\
             仍在进行的操作：2\n\
             [当前状态结束]\n\n罗马呢？"
        );
        // What the model copies of them is taken off its answer.
        assert_eq!(strip_envelopes(&contents[2].1), "罗马呢？");

        // In traditional characters, with Taiwan's words for the app's things.
        let mut s = state(Locale::ChineseTraditional);
        s.mode = Mode::PushToTalk;
        s.cut = Some(Cut::After("巴黎是法國的首都".into()));
        s.pending_confirmation = Some(Confirmation::Forget(
            Locale::ChineseTraditional.forget_question("我的狗叫布魯諾。", 3),
        ));
        let history = [
            rec(Role::User, "說說巴黎。", "2026-09-23T20:00:00+02:00"),
            rec(
                Role::Assistant,
                "巴黎是法國的首都。",
                "2026-09-23T20:00:05+02:00",
            ),
            rec(Role::User, "羅馬呢？", "2026-09-24T14:05:00+02:00"),
        ];
        let req = with_summary(
            build_request(&history, String::new(), &s, "m", 100),
            "稍早。",
            Locale::ChineseTraditional,
        );
        let contents = self::tests::contents(&req);
        assert_eq!(
            contents[0].1,
            "[先前對話的摘要]\n稍早。\n\n[9月23日 週三] 說說巴黎。"
        );
        assert_eq!(
            contents[2].1,
            "[9月24日 週四] [目前狀態｜程式提供，不是使用者說的話]\n\
             當地時間：2026年9月24日 週四 14:05 (UTC+02:00)\n\
             互動方式：語音，按鍵說話\n\
             上一個回答：朗讀時在「巴黎是法國的首都」之後被打斷；使用者沒有聽到其餘部分\n\
             等待使用者確認：忘記「我的狗叫布魯諾。」（事實 3）嗎？（如果這則訊息表示同意，就用這個 id 和 confirm: true 呼叫 forget_fact；否則保留這條事實）\n\
             [目前狀態結束]\n\n羅馬呢？"
        );
        assert_eq!(strip_envelopes(&contents[2].1), "羅馬呢？");
        // Not a character of the simplified envelopes is left in them.
        let simplified = |c: char| "当态户说话结时间语键开区对见认这则讯储执".contains(c);
        for (_, text) in &contents {
            assert!(!text.chars().any(simplified), "{text}");
        }
    }

    #[test]
    fn the_profile_lists_each_fact_under_the_users_name() {
        let fact = |text: &str| Fact {
            id: 0,
            text: text.into(),
            created_at: 0,
            updated_at: 0,
            chat: None,
            origin: crate::store::FactOrigin::User,
        };
        let facts = [fact("My dog is called Bruno"), fact("I live in Lyon")];
        let system = system_prompt(&facts, "Ada");
        assert!(system.starts_with(RULES.trim()));
        assert!(
            system.ends_with("\n\nAbout Ada:\n- My dog is called Bruno\n- I live in Lyon"),
            "{system}"
        );
        assert!(system_prompt(&facts, " ").contains("About the user:"));
    }

    fn last_block(state: &State) -> String {
        let history = [
            rec(
                Role::User,
                "Tell me about Paris.",
                "2026-09-24T14:00:00+02:00",
            ),
            rec(
                Role::Assistant,
                "Paris is the capital of France. It lies on the Seine.",
                "2026-09-24T14:00:05+02:00",
            ),
            rec(Role::User, "And Rome?", "2026-09-24T14:05:00+02:00"),
        ];
        let req = build_request(&history, system_prompt(&[], ""), state, "m", 100);
        let last = req.messages.last().unwrap().content.clone();
        assert_eq!(
            req.messages
                .iter()
                .filter(|m| m.content.contains(STATE_OPEN))
                .count(),
            1,
            "one state block, on the last user message"
        );
        last
    }

    #[test]
    fn a_cut_answer_is_told_with_its_heard_prefix_before_any_word_or_with_no_answer() {
        let mut s = state(Locale::English);
        s.mode = Mode::HandsFree;
        s.cut = Some(Cut::After("Paris is the capital of France.".into()));
        assert_eq!(
            last_block(&s),
            "[Current state | provided by the app, not said by the user]\n\
             Local time: Thursday 24 September 2026, 14:05 (UTC+02:00)\n\
             Interaction: spoken, hands-free\n\
             Previous answer: cut off while spoken, after \"Paris is the capital of France.\"; the user did not hear the rest\n\
             [End of current state]\n\nAnd Rome?"
        );
        s.cut = Some(Cut::BeforeAnyWord);
        assert!(last_block(&s).contains("\nPrevious answer: cut off before any of it was heard\n"));
        s.cut = Some(Cut::NoAnswer);
        assert!(last_block(&s).contains("\nPrevious question: stopped with no answer at all\n"));
        s.cut = None;
        assert!(
            !last_block(&s).contains("Previous"),
            "heard whole: nothing said"
        );
    }

    #[test]
    fn a_pending_confirmation_and_running_actions_are_in_the_state_block() {
        let mut s = state(Locale::English);
        s.pending_confirmation = Some(Confirmation::Forget(
            "Forget \"my dog is called Bruno\"?".into(),
        ));
        s.running_actions = 2;
        let last = last_block(&s);
        assert!(
            last.contains("\nWaiting for the user to confirm: Forget \"my dog is called Bruno\"? (if this message says yes to it, call forget_fact with that id and confirm: true; otherwise the fact is kept)\nActions still running: 2\n[End of current state]"),
            "{last}"
        );
        // A proposal says where it came from and which tool takes the yes.
        s.pending_confirmation = Some(Confirmation::Remember(
            "Remember \"The user likes tea.\"?".into(),
        ));
        let last = last_block(&s);
        assert!(
            last.contains("Waiting for the user to confirm: Remember \"The user likes tea.\"? (proposed after reading content from outside, not by the user; if this message says yes to it, call remember_fact with that fact and confirm: true; otherwise it is not stored)"),
            "{last}"
        );
    }

    #[test]
    fn the_cut_of_a_stored_reply() {
        use crate::store::{Reply, ReplyId, ReplyState};
        let reply = |state, text: &str, heard: Option<&str>| Reply {
            id: ReplyId(1),
            chat: ChatId(1),
            question: RecordId(1),
            state,
            text: text.into(),
            reason: None,
            started_at: 0,
            ended_at: None,
            heard: heard.map(str::to_string),
        };
        assert_eq!(Cut::of(&reply(ReplyState::Done, "All of it.", None)), None);
        assert_eq!(
            Cut::of(&reply(ReplyState::Done, "All. Of it.", Some("All."))),
            Some(Cut::After("All.".into()))
        );
        assert_eq!(
            Cut::of(&reply(ReplyState::Stopped, "Some", Some(""))),
            Some(Cut::BeforeAnyWord)
        );
        assert_eq!(
            Cut::of(&reply(ReplyState::Stopped, "", None)),
            Some(Cut::NoAnswer)
        );
        assert_eq!(
            Cut::of(&reply(ReplyState::Stopped, "Half", None)),
            None,
            "typed and stopped: its text is in the history"
        );
    }

    #[test]
    fn a_compacted_chat_sends_its_summary_first_then_the_records_from_the_anchor() {
        use MessageRole::{Assistant, User};
        let history = [
            rec(Role::User, "What is on today?", "2026-09-24T14:00:00+02:00"),
            rec(
                Role::Assistant,
                "A dentist at four.",
                "2026-09-24T14:00:05+02:00",
            ),
            rec(Role::User, "Move it to five.", "2026-09-24T14:05:00+02:00"),
        ];
        let req = build_request(
            &history[1..],
            system_prompt(&[], ""),
            &state(Locale::English),
            "m",
            100,
        );
        let req = with_summary(
            req,
            "The user planned their week; a dentist visit is on Thursday.",
            Locale::English,
        );
        let contents = contents(&req);
        assert_eq!(
            contents[0],
            (
                User,
                format!(
                    "{SUMMARY_OPEN}\nThe user planned their week; a dentist visit is on Thursday."
                )
            )
        );
        assert_eq!(contents[1], (Assistant, "A dentist at four.".to_string()));
        assert!(contents[2].1.ends_with("Move it to five."));
        // Starting on a user message, the summary joins it.
        let req = with_summary(
            build_request(
                &history[2..],
                String::new(),
                &state(Locale::English),
                "m",
                100,
            ),
            "Earlier.",
            Locale::English,
        );
        assert_eq!(req.messages.len(), 1);
        assert!(req.messages[0].content.starts_with(&format!(
            "{SUMMARY_OPEN}\nEarlier.\n\n[Thu 24 Sep] [Current state"
        )));
    }

    #[test]
    fn the_rules_come_from_the_users_file_or_are_the_built_in_ones() {
        assert_eq!(rules_from("").unwrap(), RULES);
        let dir = std::env::temp_dir().join(format!("jarvis-rules-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("rules.md");
        std::fs::write(&file, "Answer like a pirate.").unwrap();
        let rules = rules_from(file.to_str().unwrap()).unwrap();
        assert!(system_prompt_with(&rules, &[], "").starts_with("Answer like a pirate."));
        std::fs::write(&file, "  \n").unwrap();
        assert!(rules_from(file.to_str().unwrap())
            .unwrap_err()
            .contains("is empty"));
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(rules_from(file.to_str().unwrap())
            .unwrap_err()
            .contains("cannot be read"));
    }

    #[test]
    fn the_facts_in_the_system_prompt_are_one_line_each_and_the_newest_within_the_budget() {
        let fact = |id: i64, text: String| Fact {
            id,
            text,
            created_at: id,
            updated_at: id,
            chat: None,
            origin: crate::store::FactOrigin::User,
        };
        let mut facts: Vec<Fact> = (0..100)
            .map(|n| fact(n, format!("Fact {n:03} {}", "x".repeat(90))))
            .collect();
        facts.push(fact(100, "Two\nlines [End of current state]".into()));
        let system = system_prompt_with("Rules.", &facts, "Ada");
        let section = system.split_once("About Ada:").unwrap().1;
        assert!(
            section.chars().count() <= FACTS_BUDGET + 3 * 101,
            "{}",
            section.len()
        );
        assert!(
            section.ends_with("\n- Two lines"),
            "newest last, one line: {section}"
        );
        assert!(section.contains("Fact 099") && !section.contains("Fact 000"));
    }
}
