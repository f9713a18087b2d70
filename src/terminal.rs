//! Text from a model or a server, made safe to print to a terminal: escape sequences (colours,
//! cursor moves, OSC 52 clipboard writes, window-title changes) and other control characters are
//! taken out; line breaks and tabs stay. As `git` and `ls` do, the CLI never hands a terminal the
//! bytes a page the model read could have put in its answer.
//!
//! Hand-written rather than taken from a crate: it must work on a stream cut anywhere (a sequence
//! split between two deltas of an answer) and drop C1 controls and lone control characters too,
//! where the crates that strip ANSI colours work on whole buffers and keep the rest.

/// Where the scrubber stands in the text it has been given.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum State {
    #[default]
    Text,
    /// After ESC.
    Escape,
    /// In a control sequence (ESC [ or CSI), until its final byte.
    Control,
    /// In a string (OSC, DCS, SOS, PM, APC), until BEL or ST.
    Str,
    /// After ESC inside a string: `\` ends it.
    StrEscape,
}

/// Scrubs a stream of text piece by piece (an escape sequence may span two pieces).
#[derive(Debug, Default)]
pub struct Scrub {
    state: State,
}

impl Scrub {
    /// The printable part of `text`, given what came before it.
    pub fn push(&mut self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        for c in text.chars() {
            self.state = match (self.state, c) {
                (State::Text, '\u{1b}') => State::Escape,
                (State::Text, '\u{9b}') => State::Control,
                (State::Text, '\u{90}' | '\u{98}' | '\u{9d}' | '\u{9e}' | '\u{9f}') => State::Str,
                (State::Text, '\n' | '\t') => {
                    out.push(c);
                    State::Text
                }
                (State::Text, c) if c.is_control() => State::Text,
                (State::Text, c) => {
                    out.push(c);
                    State::Text
                }
                (State::Escape, '[') => State::Control,
                (State::Escape, ']' | 'P' | 'X' | '^' | '_') => State::Str,
                // A two-character sequence (ESC c, ESC 7…): both go.
                (State::Escape, _) => State::Text,
                (State::Control, '\u{40}'..='\u{7e}') => State::Text,
                (State::Control, _) => State::Control,
                (State::Str, '\u{7}' | '\u{9c}') => State::Text,
                (State::Str, '\u{1b}') => State::StrEscape,
                (State::Str, _) => State::Str,
                (State::StrEscape, '\\') => State::Text,
                (State::StrEscape, _) => State::Str,
            };
        }
        out
    }
}

/// The printable part of a whole text ([`Scrub`] for one piece).
pub fn scrub(text: &str) -> String {
    Scrub::default().push(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_and_control_characters_go_and_lines_and_tabs_stay() {
        let text = "Hello \u{1b}]52;c;ZXZpbA==\u{7}world\u{1b}]0;pwned\u{1b}\\!\n\
                    \u{1b}[31mred\u{1b}[0m\tcol\r\u{8}\u{9b}2Jend\u{9d}title\u{9c}.";
        assert_eq!(scrub(text), "Hello world!\nred\tcolend.");
    }

    #[test]
    fn a_sequence_split_between_two_pieces_is_taken_out_whole() {
        let mut s = Scrub::default();
        let pieces = [
            "Before \u{1b}",
            "]52;c;",
            "ZXZpbA==\u{1b}",
            "\\after",
            " and \u{1b}[",
            "1;31",
            "mmore",
        ];
        let out: String = pieces.iter().map(|p| s.push(p)).collect();
        assert_eq!(out, "Before after and more");
    }

    #[test]
    fn text_of_any_script_is_kept() {
        assert_eq!(scrub("好，我继续。 Grüße — ok"), "好，我继续。 Grüße — ok");
    }
}
