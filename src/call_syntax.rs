//! Deterministic call syntax: inside a tool-call span, is the next token part of an argument
//! value (sampled with the request's sampler) or of the wrapper — markers, function name,
//! argument keys, punctuation — (sampled greedily)? A pure decision: an incremental lexer fed
//! with each generated token's text, for the call formats llama.cpp's parsers expect:
//! JSON envelopes (`{"name": .., "arguments"|"parameters": {..}}`: Hermes/Qwen2.5 tags,
//! Llama-3.x, Mistral), gpt-oss (the arguments object after `to=functions.NAME ...<|message|>`),
//! Gemma 4 (`call:NAME{key:<|"|>text<|"|>,n:5}`) and raw-text XML (`<parameter=KEY>value
//! </parameter>`: Qwen3-Coder, GLM, MiniMax, ...).
//!
//! The span starts at the first call marker (a lazy grammar's trigger word, or a known marker
//! found in the grammar); without one, at the first output character. Before it (free text in
//! `auto` mode, reasoning) nothing changes. A value is everything from its first character to
//! its end, nested objects and arrays included: whether a list grows is the value's to decide.

/// How a template writes a call's arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// A JSON envelope whose `arguments` or `parameters` key holds the arguments object.
    JsonEnvelope,
    /// The span's first top-level JSON object is the arguments (gpt-oss).
    JsonArgs,
    /// Gemma 4's dicts: bare keys, strings between `<|"|>` delimiters.
    Gemma4,
    /// Raw-text XML parameters: a value is the text up to `</parameter>`.
    XmlRaw,
}

/// Where the next token goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    /// Outside any tool-call span: the request's sampler.
    Free,
    /// The call's wrapper: greedy.
    Wrapper,
    /// An argument value: the request's sampler.
    Value,
}

/// Markers that open a call section, as they appear in grammars of the pinned templates.
const KNOWN_MARKERS: [&str; 7] = [
    "<tool_call>",
    "[TOOL_CALLS]",
    "<|tool_call>",
    "to=functions",
    "<function=",
    "<|python_tag|>",
    "<tool▁calls▁begin>",
];
const GEMMA_QUOTE: &str = "<|\"|>";
const PARAM_OPEN: &str = "<parameter=";
const PARAM_CLOSE: &str = "</parameter>";

/// A template's call syntax: its format and what opens a call span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallSyntax {
    pub format: Format,
    /// Texts that open the span; empty: the span starts with the output.
    pub markers: Vec<String>,
}

impl CallSyntax {
    /// The syntax of a tool-call grammar (GBNF text), with a lazy grammar's trigger words. None
    /// when the grammar writes no recognisable call.
    pub fn from_grammar(gbnf: &str, trigger_words: &[String]) -> Option<CallSyntax> {
        let format = if gbnf.contains(&gbnf_text(PARAM_OPEN)) {
            Format::XmlRaw
        } else if gbnf.contains(&gbnf_text(GEMMA_QUOTE)) {
            Format::Gemma4
        } else if gbnf.contains("to=functions") {
            Format::JsonArgs
        } else if gbnf.contains("\\\"arguments\\\"") || gbnf.contains("\\\"parameters\\\"") {
            Format::JsonEnvelope
        } else {
            return None;
        };
        let mut markers: Vec<String> = trigger_words.iter().filter(|w| !w.is_empty()).cloned().collect();
        if markers.is_empty() {
            markers = KNOWN_MARKERS.iter().filter(|m| gbnf.contains(&gbnf_text(m))).map(|m| m.to_string()).collect();
        }
        Some(CallSyntax { format, markers })
    }

    /// Under a strict grammar the reply is the call section, after a reasoning block when one
    /// may open it: the span starts with the output (its marker's tokens are forced text that a
    /// sampler would only tokenize differently per seed), or after the reasoning's end tag.
    pub fn strict_section(mut self, reasoning_end: &str, may_reason: bool) -> CallSyntax {
        if may_reason {
            self.markers.push(reasoning_end.to_string());
        } else {
            self.markers.clear();
        }
        self
    }

    pub fn tracker(&self) -> Tracker {
        Tracker {
            syntax: self.clone(),
            span: self.markers.is_empty().then_some(0),
            text: String::new(),
            lex: Lexer::default(),
        }
    }
}

/// How a literal reads inside a GBNF string (quotes and backslashes escaped).
fn gbnf_text(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// The decision state of one generation.
#[derive(Debug, Clone)]
pub struct Tracker {
    syntax: CallSyntax,
    /// Where the span starts in `text`, once it has.
    span: Option<usize>,
    text: String,
    lex: Lexer,
}

impl Tracker {
    /// Appends a generated token's text.
    pub fn feed(&mut self, piece: &str) {
        self.text.push_str(piece);
        if self.span.is_none() {
            self.span = self.find_start();
            if let Some(s) = self.span {
                self.lex.at = s;
            }
        }
        if self.span.is_some() && self.syntax.format != Format::XmlRaw {
            self.lex.run(&self.text, self.syntax.format);
        }
    }

    fn find_start(&self) -> Option<usize> {
        if self.syntax.markers.is_empty() {
            return Some(0);
        }
        // Only the tail can complete a marker not seen before.
        let longest = self.syntax.markers.iter().map(String::len).max().unwrap_or(0);
        let mut from = self.text.len().saturating_sub(longest + 64);
        while !self.text.is_char_boundary(from) {
            from -= 1;
        }
        // The lexer starts after the marker (Mistral's `[TOOL_CALLS]` is no list), unless the
        // marker opens the envelope itself (`{"name"`).
        let skip = |m: &str| if m.starts_with('{') { 0 } else { m.len() };
        self.syntax.markers.iter().filter_map(|m| self.text[from..].find(m.as_str()).map(|p| from + p + skip(m))).min()
    }

    /// Where the next token goes.
    pub fn position(&self) -> Position {
        match self.span {
            None => Position::Free,
            Some(_) if self.syntax.format == Format::XmlRaw => xml_position(&self.text[self.lex.at..]),
            Some(_) if self.lex.value_ctx() => Position::Value,
            Some(_) => Position::Wrapper,
        }
    }
}

/// Raw-text XML: inside an open `<parameter=KEY>` whose value has begun, until `</parameter>`
/// (a started closing tag, `</`, is the wrapper's).
fn xml_position(span: &str) -> Position {
    let Some(open) = span.rfind(PARAM_OPEN) else { return Position::Wrapper };
    let Some(gt) = span[open..].find('>') else { return Position::Wrapper };
    let value = &span[open + gt + 1..];
    if value.contains(PARAM_CLOSE) {
        return Position::Wrapper;
    }
    let closing = (2..PARAM_CLOSE.len()).any(|n| value.ends_with(&PARAM_CLOSE[..n]));
    if closing {
        Position::Wrapper
    } else {
        Position::Value
    }
}

/// What an open object or array is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Part of the call's envelope (`{"name": .., "arguments": ..}`, Mistral's list).
    Envelope,
    /// The arguments object: its keys are wrapper, its values are values.
    Args,
    /// Inside an argument value.
    Value,
}

/// Where an open object is between its tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Key,
    Colon,
    Value,
    After,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Frame {
    role: Role,
    /// Objects only (arrays: None).
    phase: Option<Phase>,
    /// The envelope key being read or just read is `arguments`/`parameters`.
    args_key: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Mode {
    #[default]
    Normal,
    /// In a string (`key`: an object key); `esc`: after a backslash.
    Str { key: bool, esc: bool },
    /// In a bare scalar value (number, literal) or a Gemma 4 bare key.
    Scalar { key: bool },
}

/// The JSON (and Gemma 4 dict) lexer: a stack of open objects and arrays.
#[derive(Debug, Clone, Default)]
struct Lexer {
    /// Bytes of the text consumed so far.
    at: usize,
    stack: Vec<Frame>,
    mode: Mode,
    /// The key being read (its first 16 characters).
    key: String,
}

impl Lexer {
    /// Consumes `text` from `self.at` on; a Gemma 4 quote cut by the token boundary waits.
    fn run(&mut self, text: &str, format: Format) {
        let gemma = format == Format::Gemma4;
        while let Some(c) = text[self.at..].chars().next() {
            let rest = &text[self.at..];
            if gemma && c == '<' && !matches!(self.mode, Mode::Normal if self.stack.is_empty()) {
                if rest.starts_with(GEMMA_QUOTE) {
                    self.gemma_quote();
                    self.at += GEMMA_QUOTE.len();
                    continue;
                }
                if GEMMA_QUOTE.starts_with(rest) {
                    return;
                }
            }
            if self.step(c, format) {
                self.at += c.len_utf8();
            }
        }
    }

    /// Gemma 4's string delimiter opens or closes a string.
    fn gemma_quote(&mut self) {
        match self.mode {
            Mode::Str { .. } => {
                self.mode = Mode::Normal;
                self.value_done();
            }
            Mode::Scalar { key } => {
                self.end_scalar(key);
                self.mode = Mode::Str { key: false, esc: false };
            }
            Mode::Normal => self.mode = Mode::Str { key: false, esc: false },
        }
    }

    /// One character; false when it must be seen again in the new mode.
    fn step(&mut self, c: char, format: Format) -> bool {
        match self.mode {
            Mode::Str { key, esc } => {
                if format == Format::Gemma4 {
                    self.push_key(key, c);
                } else if esc {
                    self.mode = Mode::Str { key, esc: false };
                } else if c == '\\' {
                    self.mode = Mode::Str { key, esc: true };
                } else if c == '"' {
                    self.mode = Mode::Normal;
                    if key {
                        self.key_done();
                    } else {
                        self.value_done();
                    }
                } else {
                    self.push_key(key, c);
                }
                true
            }
            Mode::Scalar { key } => {
                if c.is_whitespace() || ",:}]".contains(c) {
                    self.end_scalar(key);
                    return false;
                }
                self.push_key(key, c);
                true
            }
            Mode::Normal => {
                self.normal(c, format);
                true
            }
        }
    }

    fn normal(&mut self, c: char, format: Format) {
        let phase = self.stack.last().and_then(|f| f.phase);
        match c {
            '{' | '[' => self.open(c, format),
            '}' | ']' => {
                self.stack.pop();
                self.value_done();
            }
            ':' => self.set_phase(Phase::Value),
            ',' => self.set_phase(Phase::Key),
            _ if c.is_whitespace() || self.stack.is_empty() => {}
            '"' if format != Format::Gemma4 => {
                let key = phase == Some(Phase::Key);
                if key {
                    self.key.clear();
                }
                self.mode = Mode::Str { key, esc: false };
            }
            _ => {
                let key = phase == Some(Phase::Key);
                if key {
                    self.key.clear();
                    self.key.push(c);
                }
                self.mode = Mode::Scalar { key };
            }
        }
    }

    fn open(&mut self, c: char, format: Format) {
        let role = match self.stack.last() {
            _ if self.value_ctx() => Role::Value,
            None if format == Format::JsonEnvelope || c == '[' => Role::Envelope,
            None => Role::Args,
            Some(f) if f.role == Role::Envelope && f.args_key && f.phase == Some(Phase::Value) && c == '{' => {
                Role::Args
            }
            Some(_) => Role::Envelope,
        };
        let phase = (c == '{').then_some(Phase::Key);
        self.stack.push(Frame { role, phase, args_key: false });
    }

    fn push_key(&mut self, key: bool, c: char) {
        if key && self.key.len() < 16 {
            self.key.push(c);
        }
    }

    fn end_scalar(&mut self, key: bool) {
        self.mode = Mode::Normal;
        if key {
            self.key_done();
        } else {
            self.value_done();
        }
    }

    fn key_done(&mut self) {
        let args = self.key == "arguments" || self.key == "parameters";
        if let Some(f) = self.stack.last_mut() {
            f.args_key = args;
            f.phase = Some(Phase::Colon);
        }
    }

    fn value_done(&mut self) {
        self.set_phase(Phase::After);
    }

    fn set_phase(&mut self, p: Phase) {
        if let Some(f) = self.stack.last_mut().filter(|f| f.phase.is_some()) {
            f.phase = Some(p);
        }
    }

    /// A value starting (or going on) here is an argument value.
    fn value_ctx(&self) -> bool {
        self.stack
            .last()
            .is_some_and(|f| f.role == Role::Value || (f.role == Role::Args && f.phase == Some(Phase::Value)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn syntax(format: Format, markers: &[&str]) -> CallSyntax {
        CallSyntax { format, markers: markers.iter().map(|m| m.to_string()).collect() }
    }

    /// Feeds `pieces` one at a time; returns the runs of text fed while the position was Value,
    /// and how many pieces were fed while it was Free.
    fn runs(s: &CallSyntax, pieces: &[&str]) -> (Vec<String>, usize) {
        let mut t = s.tracker();
        let (mut out, mut free, mut prev) = (Vec::<String>::new(), 0, Position::Free);
        for p in pieces {
            let pos = t.position();
            free += (pos == Position::Free) as usize;
            if pos == Position::Value {
                if prev != Position::Value {
                    out.push(String::new());
                }
                out.last_mut().unwrap().push_str(p);
            }
            prev = pos;
            t.feed(p);
        }
        (out, free)
    }

    fn chars(text: &str) -> Vec<String> {
        text.chars().map(String::from).collect()
    }

    fn char_runs(s: &CallSyntax, text: &str) -> (Vec<String>, usize) {
        let c = chars(text);
        runs(s, &c.iter().map(String::as_str).collect::<Vec<_>>())
    }

    #[test]
    fn json_in_tags_values_are_sampled_and_the_envelope_is_not() {
        let s = syntax(Format::JsonEnvelope, &["<tool_call>"]);
        let text = "I'll {check}. <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa\\\"ris\", \
                    \"days\": 3, \"tags\": [\"a\", {\"k\": 1}]}}\n</tool_call>";
        let (v, free) = char_runs(&s, text);
        assert_eq!(v, [" \"Pa\\\"ris\"", " 3,", " [\"a\", {\"k\": 1}]"]);
        assert_eq!(free, "I'll {check}. <tool_call>".len());
        // A second call (parallel calls): its values too, its envelope not.
        let two = format!("{text}\n<tool_call>\n{{\"name\": \"f\", \"arguments\": {{\"x\": true}}}}\n</tool_call>");
        assert_eq!(char_runs(&s, &two).0.last().unwrap(), " true}");
    }

    #[test]
    fn token_pieces_spanning_boundaries_are_judged_by_the_state_before_them() {
        let s = syntax(Format::JsonEnvelope, &["<tool_call>"]);
        let pieces = [
            "<tool_call>",
            "\n{\"",
            "name",
            "\":",
            " \"",
            "get",
            "_weather",
            "\",",
            " \"",
            "arguments",
            "\":",
            " {\"",
            "city",
            "\":",
            " \"",
            "Par",
            "is",
            "\"}}",
            "\n</tool_call>",
        ];
        let (v, free) = runs(&s, &pieces);
        // The piece that closes the value is the value's: it could have gone on.
        assert_eq!(v, [" \"Paris\"}}"]);
        assert_eq!(free, 1);
    }

    #[test]
    fn llama3_json_without_a_marker_starts_at_the_output() {
        let s = syntax(Format::JsonEnvelope, &[]);
        let (v, free) = char_runs(&s, "{\"name\": \"f\", \"parameters\": {\"q\": \"x y\", \"n\": -1.5e3}}");
        assert_eq!(v, [" \"x y\"", " -1.5e3}"]);
        assert_eq!(free, 0);
        // A trigger that opens the envelope itself is lexed, not skipped.
        let t = syntax(Format::JsonEnvelope, &["{\"name\""]);
        assert_eq!(char_runs(&t, "ok {\"name\": \"f\", \"parameters\": {\"q\": 1}}").0, [" 1}"]);
    }

    #[test]
    fn mistral_list_and_model_written_id_are_wrapper() {
        let s = syntax(Format::JsonEnvelope, &["[TOOL_CALLS]"]);
        let text = "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"a\": \"b\"}, \"id\": \"abc123def\"}]";
        assert_eq!(char_runs(&s, text).0, [" \"b\""]);
    }

    #[test]
    fn gemma4_dicts_with_quote_tokens_split_or_whole() {
        let s = syntax(Format::Gemma4, &["<|tool_call>"]);
        let text = "<|tool_call>call:get_weather{city:<|\"|>Pa:ris,<|\"|>,days:3,opts:{a:<|\"|>x<|\"|>}}<tool_call|>";
        assert_eq!(char_runs(&s, text).0, ["<|\"|>Pa:ris,<|\"|>", "3,", "{a:<|\"|>x<|\"|>}"]);
        let pieces = ["<|tool_call>", "call", ":", "f", "{", "k", ":", "<|\"|>", "v", "<|\"|>", "}", "<tool_call|>"];
        assert_eq!(runs(&s, &pieces).0, ["<|\"|>v<|\"|>"]);
    }

    #[test]
    fn xml_raw_text_values_run_to_the_closing_tag() {
        let s = syntax(Format::XmlRaw, &["<tool_call>"]);
        let text = "hm <tool_call>\n<function=get_weather>\n<parameter=city>\nPa<b>ris\n</parameter>\n\
                    <parameter=days>\n3\n</parameter>\n</function>\n</tool_call>";
        let (v, free) = char_runs(&s, text);
        assert_eq!(v, ["\nPa<b>ris\n</", "\n3\n</"]);
        assert_eq!(free, "hm <tool_call>".len());
    }

    #[test]
    fn gpt_oss_arguments_follow_the_recipient() {
        let s = syntax(Format::JsonArgs, &["to=functions"]);
        let text = "<|channel|>analysis<|message|>think {\"a\": 1}<|end|><|start|>assistant<|channel|>commentary \
                    to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\",\"n\":[1,2]}<|call|>";
        let (v, free) = char_runs(&s, text);
        assert_eq!(v, ["\"Paris\"", "[1,2]"]);
        assert_eq!(free, text.find("to=functions").unwrap() + "to=functions".len());
    }

    #[test]
    fn formats_and_markers_come_from_the_grammar() {
        let f = |g: &str, w: &[&str]| {
            let w: Vec<String> = w.iter().map(|s| s.to_string()).collect();
            CallSyntax::from_grammar(g, &w)
        };
        let qwen = r#"tool-call ::= "<tool_call>" space "{" space "\"name\"" ":" name "," "\"arguments\"" ":" args"#;
        assert_eq!(f(qwen, &[]), Some(syntax(Format::JsonEnvelope, &["<tool_call>"])));
        assert_eq!(f(qwen, &["<tool_call>\n"]), Some(syntax(Format::JsonEnvelope, &["<tool_call>\n"])));
        let llama = r#"root ::= "{" "\"name\"" ":" x "," "\"parameters\"" ":" y "}""#;
        assert_eq!(f(llama, &[]), Some(syntax(Format::JsonEnvelope, &[])));
        let xml = r#"p ::= "<parameter=city>\n" v "\n</parameter>" f ::= "<function=" n ">""#;
        assert_eq!(f(xml, &[]), Some(syntax(Format::XmlRaw, &["<function="])));
        let gemma = r#"c ::= "<|tool_call>call:" n "{" k ":" "<|\"|>" s "<|\"|>" "}""#;
        assert_eq!(f(gemma, &[]), Some(syntax(Format::Gemma4, &["<|tool_call>"])));
        let oss = r#"c ::= "<|channel|>commentary to=functions." n " <|constrain|>json<|message|>" args"#;
        assert_eq!(f(oss, &[]), Some(syntax(Format::JsonArgs, &["to=functions"])));
        assert_eq!(f(r#"root ::= "{" "\"answer\"" ":" string "}""#, &[]), None);
    }
}
