//! A bounded parser for the `text/event-stream` format (the WHATWG HTML standard, §9.2).
//!
//! Hand-written rather than taken from `eventsource-stream`: that crate keeps every byte after an
//! invalid UTF-8 one and reports it only when the stream ends, and its line buffer has no limit,
//! so one bad byte or one giant `data:` line from a server froze a reply while memory grew. This
//! parser fails at the first byte that cannot be UTF-8 and as soon as one event outgrows its
//! limit; it holds at most one event's bytes.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Event {
    /// The `event:` field; "message" when the event named none.
    pub event: String,
    /// Its `data:` lines joined by "\n".
    pub data: String,
    /// The last `id:` the stream gave (it carries over to later events, as the format says).
    pub id: String,
}

/// Why a stream cannot be read further.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// A byte that cannot be UTF-8 (or a character cut by a line end).
    #[error("invalid UTF-8 at byte {at} of the stream")]
    Utf8 {
        /// Where, counted from the stream's first byte.
        at: u64,
    },
    /// One event (its lines so far) passed the limit.
    #[error("the server sent an event larger than {limit} bytes")]
    TooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
}

/// Reads an event stream fed in pieces of any size.
#[derive(Debug)]
pub struct Parser {
    limit: usize,
    /// The line being read, without its terminator.
    line: Vec<u8>,
    /// How much of `line` is known to be valid UTF-8.
    checked: usize,
    /// Where `line` starts in the stream.
    line_at: u64,
    /// Bytes fed so far.
    fed: u64,
    /// The last piece ended in CR: an LF starting the next one ends no second line.
    after_cr: bool,
    /// No line has ended yet (a byte-order mark may open the stream).
    first_line: bool,
    kind: String,
    data: String,
    has_data: bool,
    id: String,
}

impl Parser {
    /// A parser that refuses an event of more than `limit` bytes.
    pub fn new(limit: usize) -> Parser {
        Parser {
            limit,
            line: Vec::new(),
            checked: 0,
            line_at: 0,
            fed: 0,
            after_cr: false,
            first_line: true,
            kind: String::new(),
            data: String::new(),
            has_data: false,
            id: String::new(),
        }
    }

    /// Reads `bytes`, appending the events they complete to `out`. After an error the parser
    /// must not be fed again.
    pub fn feed(&mut self, mut bytes: &[u8], out: &mut Vec<Event>) -> Result<(), ParseError> {
        while !bytes.is_empty() {
            if std::mem::take(&mut self.after_cr) && bytes[0] == b'\n' {
                bytes = &bytes[1..];
                self.fed += 1;
                self.line_at = self.fed;
                continue;
            }
            match bytes.iter().position(|&b| b == b'\n' || b == b'\r') {
                Some(end) => {
                    self.push(&bytes[..end])?;
                    self.after_cr = bytes[end] == b'\r';
                    bytes = &bytes[end + 1..];
                    self.fed += 1;
                    self.end_line(out)?;
                    self.line_at = self.fed;
                }
                None => {
                    self.push(bytes)?;
                    bytes = &[];
                }
            }
        }
        Ok(())
    }

    /// Adds part of a line, checking the event's size and the bytes' UTF-8 as they come. The
    /// bytes up to the limit are checked before the limit is: the first fault in the stream is
    /// the one named, however it arrives in pieces.
    fn push(&mut self, part: &[u8]) -> Result<(), ParseError> {
        let room = self
            .limit
            .saturating_sub(self.line.len() + self.data.len() + self.kind.len());
        let fits = &part[..part.len().min(room)];
        self.line.extend_from_slice(fits);
        self.fed += fits.len() as u64;
        match std::str::from_utf8(&self.line[self.checked..]) {
            Ok(_) => self.checked = self.line.len(),
            // A character cut by the piece's end: its rest comes with the next piece.
            Err(e) if e.error_len().is_none() => self.checked += e.valid_up_to(),
            Err(e) => {
                return Err(ParseError::Utf8 {
                    at: self.line_at + (self.checked + e.valid_up_to()) as u64,
                })
            }
        }
        if fits.len() < part.len() {
            return Err(ParseError::TooLarge { limit: self.limit });
        }
        Ok(())
    }

    /// A line ended: a field, a comment, or the blank line that dispatches the event.
    fn end_line(&mut self, out: &mut Vec<Event>) -> Result<(), ParseError> {
        if self.checked < self.line.len() {
            return Err(ParseError::Utf8 {
                at: self.line_at + self.checked as u64,
            });
        }
        let line = std::mem::take(&mut self.line);
        self.checked = 0;
        let mut text = std::str::from_utf8(&line).map_err(|e| ParseError::Utf8 {
            at: self.line_at + e.valid_up_to() as u64,
        })?;
        if std::mem::take(&mut self.first_line) {
            text = text.strip_prefix('\u{feff}').unwrap_or(text);
        }
        if text.is_empty() {
            self.dispatch(out);
        } else if !text.starts_with(':') {
            let (field, value) = match text.split_once(':') {
                Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
                None => (text, ""),
            };
            match field {
                "event" => value.clone_into(&mut self.kind),
                "data" => {
                    self.data.push_str(value);
                    self.data.push('\n');
                    self.has_data = true;
                }
                "id" if !value.contains('\0') => value.clone_into(&mut self.id),
                // `retry` is for reconnecting, which a reply never does; others are ignored.
                _ => {}
            }
        }
        // Keep the buffer's room for the next line.
        self.line = line;
        self.line.clear();
        Ok(())
    }

    fn dispatch(&mut self, out: &mut Vec<Event>) {
        let kind = std::mem::take(&mut self.kind);
        if !std::mem::take(&mut self.has_data) {
            return;
        }
        let mut data = std::mem::take(&mut self.data);
        data.pop();
        out.push(Event {
            event: if kind.is_empty() {
                "message".into()
            } else {
                kind
            },
            data,
            id: self.id.clone(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(pieces: &[&[u8]]) -> Result<Vec<Event>, ParseError> {
        let mut parser = Parser::new(1024);
        let mut out = Vec::new();
        for piece in pieces {
            parser.feed(piece, &mut out)?;
        }
        Ok(out)
    }

    fn ev(event: &str, data: &str, id: &str) -> Event {
        Event {
            event: event.into(),
            data: data.into(),
            id: id.into(),
        }
    }

    #[test]
    fn fields_comments_and_line_ends_as_the_format_says() {
        let wire = b"\xEF\xBB\xBF: a comment\r\nevent: add\r\ndata: one\rdata:two\n\
                     id: 7\n\ndata\n\nretry: 10\nunknown: x\n\nevent: lonely\n\ndata:  spaced\n\n";
        assert_eq!(
            parse(&[wire]).unwrap(),
            [
                ev("add", "one\ntwo", "7"),
                ev("message", "", "7"),
                ev("message", " spaced", "7")
            ]
        );
    }

    #[test]
    fn a_crlf_split_between_pieces_ends_one_line() {
        assert_eq!(
            parse(&[b"data: a\r", b"\n\r", b"\ndata: b\n\n"]).unwrap(),
            [ev("message", "a", ""), ev("message", "b", "")]
        );
    }

    #[test]
    fn an_unfinished_event_at_the_end_is_not_dispatched() {
        assert_eq!(
            parse(&[b"data: a\n\ndata: b\n"]).unwrap(),
            [ev("message", "a", "")]
        );
    }

    #[test]
    fn a_character_split_between_pieces_is_whole() {
        let wire = "data: é🎉\n\n".as_bytes();
        let pieces: Vec<&[u8]> = wire.chunks(1).collect();
        assert_eq!(parse(&pieces).unwrap(), [ev("message", "é🎉", "")]);
    }

    #[test]
    fn a_bad_byte_fails_at_once_with_where_it_was() {
        let mut parser = Parser::new(1024);
        let mut out = Vec::new();
        parser.feed(b"data: ok\n\n", &mut out).unwrap();
        assert_eq!(
            parser.feed(b"data: \xFF and on", &mut out),
            Err(ParseError::Utf8 { at: 16 })
        );
        // A character cut by its line's end.
        assert_eq!(parse(&[b"data: \xC3\n\n"]), Err(ParseError::Utf8 { at: 6 }));
    }

    #[test]
    fn an_event_past_the_limit_fails_before_its_end() {
        let mut parser = Parser::new(1024);
        let mut out = Vec::new();
        parser.feed(b"data: ", &mut out).unwrap();
        let line = [b'x'; 100];
        let mut failed = None;
        for i in 0..20 {
            if let Err(e) = parser.feed(&line, &mut out) {
                failed = Some((i, e));
                break;
            }
        }
        assert_eq!(failed, Some((10, ParseError::TooLarge { limit: 1024 })));
        // Many data lines in one event count together.
        let many = "data: xxxxxxxxxx\n".repeat(100);
        assert_eq!(
            parse(&[many.as_bytes()]),
            Err(ParseError::TooLarge { limit: 1024 })
        );
        // The same lines as separate events are fine.
        let apart = "data: xxxxxxxxxx\n\n".repeat(100);
        assert_eq!(parse(&[apart.as_bytes()]).unwrap().len(), 100);
    }
}
