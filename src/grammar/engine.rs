//! The constraint engine: llguidance's token masks over a model's vocabulary.
//!
//! One [`Engine`] per model holds the token trie (every token's bytes as llama.cpp's grammar
//! sees them: special tokens by their text, end-of-generation tokens apart) and a bounded cache
//! of compiled grammars, so a tool set seen before is not compiled again. One [`Constraint`] per
//! request walks a compiled grammar as tokens are accepted; a lazy grammar (tool calls in `auto`)
//! waits for its trigger as llama.cpp's does, then constrains from the trigger's text on.

use super::gbnf;
use super::lark;
use crate::error::{Error, ErrorCode, Result};
use crate::sys;
use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{self, SimpleVob, TokEnv, TokRxInfo, TokTrie, TokenizerEnv};
use llguidance::{Matcher, ParserFactory, TokenParser};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

/// Compiled grammars kept per model (least recently used dropped first).
const CACHE_SIZE: usize = 32;

/// The vocabulary as llguidance sees it: the trie and an exact (greedy) tokenizer over it.
struct Vocab {
    trie: TokTrie,
}

impl TokenizerEnv for Vocab {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<toktrie::TokenId> {
        self.trie.greedy_tokenize(s)
    }

    /// Greedy is not the model's own tokenization: llguidance must not force its spelling of
    /// forced text as single-token masks (a real model would then see tokens it never writes,
    /// and a sampled spelling, as with llama.cpp's grammar, is the model's choice). Masks list
    /// every token that fits; jump-forward spells forced text with the model's tokenizer.
    fn tokenize_is_canonical(&self) -> bool {
        false
    }
}

/// llguidance's words for a vocabulary's tokens (bytes and end-of-generation flag, from
/// [`crate::tokens::Vocab::prepare`]), and the end-of-generation tokens. Tokens that are never
/// text — end-of-generation tokens (allowed where the grammar may end), and pieces llama.cpp's
/// grammar refuses (empty, or starting with NUL) — become llguidance special tokens by id.
fn words(pieces: Vec<(Vec<u8>, bool)>) -> (Vec<Vec<u8>>, Vec<u32>) {
    let mut eog = Vec::new();
    let words = pieces
        .into_iter()
        .enumerate()
        .map(|(id, (piece, is_eog))| {
            if !is_eog && piece.first().is_some_and(|&b| b != 0) {
                return piece;
            }
            eog.extend(is_eog.then_some(id as u32));
            let mut w = vec![TokTrie::SPECIAL_TOKEN_MARKER];
            w.extend(format!("<[{id}]>").bytes());
            w
        })
        .collect();
    (words, eog)
}

/// Constraint engines kept per vocabulary, most recently used last: a process that reloads a
/// model, or opens several models on one tokenizer, builds each engine once.
const ENGINES_KEPT: usize = 4;

/// How many engines this process built (tests count them: a request never builds one).
static BUILDS: AtomicUsize = AtomicUsize::new(0);

/// How many grammars this process compiled (a tool set seen before on a vocabulary is not).
static COMPILES: AtomicUsize = AtomicUsize::new(0);

/// Constraint engines built so far in this process.
pub fn builds() -> usize {
    BUILDS.load(Ordering::Relaxed)
}

/// Grammars compiled so far in this process (cache misses).
pub fn compiles() -> usize {
    COMPILES.load(Ordering::Relaxed)
}

type Slot = Arc<OnceLock<Option<Arc<Engine>>>>;

/// The constraint engine of `vocab`'s model: built here, when the model's engine or pool opens,
/// once per distinct vocabulary in the process (issue 31: a first constrained request used to
/// wait ~0.4-0.75 s for it), and shared by every engine and pool on it. Concurrent opens on one
/// vocabulary wait for the one build. None when it cannot be built: grammars then run on
/// llama.cpp's sampler.
pub fn for_vocab(vocab: &crate::tokens::Vocab) -> Option<Arc<Engine>> {
    let t = Instant::now();
    let pieces = vocab.prepare();
    let key = {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        std::hash::Hash::hash(&pieces, &mut h);
        std::hash::Hasher::finish(&h)
    };
    let slot = slot(key);
    let engine = slot.get_or_init(|| {
        BUILDS.fetch_add(1, Ordering::Relaxed);
        let (words, eog) = words(pieces);
        let e = Engine::from_words(words, eog).ok().map(Arc::new);
        if crate::debug::enabled() {
            eprintln!("[llb] grammar engine built in {:?}", t.elapsed());
        }
        e
    });
    engine.clone()
}

/// The kept slot of vocabulary `key` (a new one, the least recently used dropped, when none).
fn slot(key: u64) -> Slot {
    static KEPT: Mutex<Vec<(u64, Slot)>> = Mutex::new(Vec::new());
    let mut kept = KEPT.lock().unwrap_or_else(|p| p.into_inner());
    let slot = match kept.iter().position(|(k, _)| *k == key) {
        Some(i) => kept.remove(i).1,
        None => Slot::default(),
    };
    kept.push((key, slot.clone()));
    if kept.len() > ENGINES_KEPT {
        kept.remove(0);
    }
    slot
}

/// A compiled grammar, ready to be cloned for a request.
struct Compiled {
    parser: TokenParser,
    last_used: u64,
}

/// One model's constraint engine (shared by every request on the model).
pub struct Engine {
    factory: ParserFactory,
    eog: Vec<u32>,
    cache: Mutex<(HashMap<String, Compiled>, u64)>,
}

// SAFETY: the factory's tokenizer state is immutable after construction (llguidance shares it
// between threads itself); the cache is behind a mutex.
unsafe impl Send for Engine {}
// SAFETY: as above.
unsafe impl Sync for Engine {}

/// Timings of one grammar build (for benchmarks and the debug log).
#[derive(Debug, Clone, Copy, Default)]
pub struct BuildStats {
    pub cached: bool,
    pub convert_us: u64,
    pub compile_us: u64,
}

impl Engine {
    /// Builds the engine for `vocab`.
    pub fn new(vocab: &crate::tokens::Vocab) -> Result<Engine> {
        let (words, eog) = words(vocab.prepare());
        Engine::from_words(words, eog)
    }

    /// The engine for a vocabulary given as each token's bytes (end-of-generation tokens, and
    /// tokens that are never text, marked with llguidance's special-token byte).
    pub fn from_words(words: Vec<Vec<u8>>, eog: Vec<u32>) -> Result<Engine> {
        let n = words.len();
        let eos = eog.first().copied().unwrap_or(0);
        let info = TokRxInfo::new(n as u32, eos);
        let mut trie = TokTrie::from(&info, &words);
        if !eog.is_empty() {
            trie = trie.with_eos_tokens(&eog);
        }
        let env: TokEnv = Arc::new(Vocab { trie });
        let mut factory = ParserFactory::new_simple(&env).map_err(|e| internal("the token trie", e))?;
        factory.quiet();
        Ok(Engine { factory, eog, cache: Mutex::new((HashMap::new(), 0)) })
    }

    /// The compiled form of a GBNF grammar (from the cache when this text was compiled before).
    /// `token_id` resolves `<text>` token references. A grammar the engine cannot take is an
    /// error whose message says why; the caller falls back to llama.cpp's own grammar sampler.
    pub fn compile(&self, gbnf_text: &str, token_id: &dyn Fn(&str) -> Option<u32>) -> Result<(Matcher, BuildStats)> {
        {
            let mut guard = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            let (cache, clock) = &mut *guard;
            *clock += 1;
            if let Some(c) = cache.get_mut(gbnf_text) {
                c.last_used = *clock;
                let stats = BuildStats { cached: true, ..Default::default() };
                return Ok((Matcher::new(Ok(c.parser.deep_clone())), stats));
            }
        }
        let t0 = Instant::now();
        COMPILES.fetch_add(1, Ordering::Relaxed);
        let parsed = gbnf::parse(gbnf_text).map_err(|e| invalid(format!("the grammar does not parse: {e}")))?;
        let lark_text = lark::convert(&parsed, token_id).map_err(invalid)?;
        let t1 = Instant::now();
        let parser = self
            .factory
            .create_parser(TopLevelGrammar::from_lark(lark_text))
            .map_err(|e| invalid(format!("llguidance cannot take the grammar: {e}")))?;
        let stats = BuildStats {
            cached: false,
            convert_us: (t1 - t0).as_micros() as u64,
            compile_us: t1.elapsed().as_micros() as u64,
        };
        let matcher = Matcher::new(Ok(parser.deep_clone()));
        let mut guard = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        let (cache, clock) = &mut *guard;
        if cache.len() >= CACHE_SIZE {
            if let Some(oldest) = cache.iter().min_by_key(|(_, c)| c.last_used).map(|(k, _)| k.clone()) {
                cache.remove(&oldest);
            }
        }
        cache.insert(gbnf_text.to_string(), Compiled { parser, last_used: *clock });
        Ok((matcher, stats))
    }

    pub fn trie(&self) -> &TokTrie {
        self.factory.tok_env().tok_trie()
    }

    fn is_eog(&self, t: u32) -> bool {
        self.eog.contains(&t)
    }
}

fn invalid(msg: String) -> Error {
    Error::new(ErrorCode::InvalidArgument, msg)
}

fn internal(what: &str, e: impl std::fmt::Display) -> Error {
    Error::new(ErrorCode::Internal, format!("{what}: {e}"))
}

/// A lazy grammar's wake-up: trigger patterns (llama.cpp's semantics, in the shim) and tokens.
pub struct Triggers {
    patterns: crate::shim::TriggerPatterns,
    tokens: Vec<sys::llama_token>,
}

impl Triggers {
    pub fn new(patterns: &[String], tokens: &[sys::llama_token]) -> Result<Triggers> {
        Ok(Triggers { patterns: crate::shim::TriggerPatterns::new(patterns)?, tokens: tokens.to_vec() })
    }

    /// Where the constrained text starts in `text`, when a pattern matches.
    fn find(&self, text: &[u8]) -> Result<Option<usize>> {
        self.patterns.find(text)
    }
}

enum State {
    /// A lazy grammar before its trigger: the text so far, and the grammar to start.
    Waiting { text: Vec<u8>, triggers: Triggers, matcher: Option<Box<Matcher>> },
    Active(Box<Matcher>),
}

/// One request's walk through a compiled grammar.
pub struct Constraint {
    engine: Arc<Engine>,
    state: State,
    /// The mask at the current position, computed at most once per position.
    mask: Option<SimpleVob>,
}


impl Constraint {
    pub fn new(engine: Arc<Engine>, matcher: Matcher, triggers: Option<Triggers>) -> Constraint {
        let state = match triggers {
            Some(triggers) => State::Waiting { text: Vec::new(), triggers, matcher: Some(Box::new(matcher)) },
            None => State::Active(Box::new(matcher)),
        };
        Constraint { engine, state, mask: None }
    }

    /// Whether the grammar constrains the next token (false while a lazy grammar waits).
    pub fn is_active(&self) -> bool {
        matches!(self.state, State::Active(_))
    }

    /// The tokens allowed next (None while a lazy grammar waits: every token is).
    pub fn mask(&mut self) -> Result<Option<&SimpleVob>> {
        let State::Active(m) = &mut self.state else { return Ok(None) };
        if self.mask.is_none() {
            // A grammar that can only end (a closed JSON value, the last call) is "stopped":
            // its mask is the end-of-generation tokens.
            self.mask = Some(m.compute_mask_or_eos().map_err(|e| stopped(m, e))?);
        }
        Ok(self.mask.as_ref())
    }

    /// Whether `token` may come next (cheaper than a mask when only one token is asked about).
    pub fn allows(&mut self, token: sys::llama_token) -> Result<bool> {
        if token < 0 {
            return Ok(false);
        }
        let t = token as u32;
        if let Some(mask) = &self.mask {
            return Ok(mask.is_allowed(t));
        }
        let State::Active(m) = &mut self.state else { return Ok(true) };
        if m.is_stopped() && !m.is_error() {
            return Ok(self.engine.is_eog(t));
        }
        if self.engine.is_eog(t) {
            return m.is_accepting().map_err(|e| stopped(m, e));
        }
        Ok(m.validate_tokens(&[t]).map_err(|e| stopped(m, e))? == 1)
    }

    /// How many leading tokens of `tokens` the grammar admits in a row, the state unchanged
    /// (all of them while a lazy grammar waits for its trigger). An end-of-generation token
    /// ends the count: nothing is checked past it.
    pub fn valid_prefix(&mut self, tokens: &[sys::llama_token]) -> Result<usize> {
        let State::Active(m) = &mut self.state else { return Ok(tokens.len()) };
        let end = tokens.iter().position(|&t| t < 0 || self.engine.is_eog(t as u32)).unwrap_or(tokens.len());
        if end == 0 || m.is_stopped() {
            return Ok(0);
        }
        let ids: Vec<u32> = tokens[..end].iter().map(|&t| t as u32).collect();
        m.validate_tokens(&ids).map_err(|e| stopped(m, e))
    }

    /// Advances past `token`. A token the grammar refuses is an internal error (callers only
    /// accept tokens they checked).
    pub fn accept(&mut self, token: sys::llama_token, piece: &[u8]) -> Result<()> {
        self.mask = None;
        match &mut self.state {
            State::Active(m) => {
                let t = token.max(0) as u32;
                let ended = m.is_stopped() && !m.is_error();
                if self.engine.is_eog(t) && (ended || m.is_accepting().unwrap_or(false)) {
                    return Ok(()); // the end: nothing follows
                }
                m.consume_token(t).map_err(|e| stopped(m, e))
            }
            State::Waiting { text, triggers, .. } => {
                if triggers.tokens.contains(&token) {
                    return self.wake(Wake::Token(token));
                }
                text.extend_from_slice(piece);
                match triggers.find(text)? {
                    Some(start) => {
                        let constrained = text[start..].to_vec();
                        self.wake(Wake::Text(constrained))
                    }
                    None => Ok(()),
                }
            }
        }
    }

    fn wake(&mut self, how: Wake) -> Result<()> {
        let State::Waiting { matcher, .. } = &mut self.state else { return Ok(()) };
        let Some(mut m) = matcher.take() else { return Ok(()) };
        let toks = match how {
            Wake::Token(t) => vec![t.max(0) as u32],
            Wake::Text(bytes) => self.engine.trie().greedy_tokenize(&bytes),
        };
        m.consume_tokens(&toks).map_err(|e| stopped(&m, e))?;
        self.state = State::Active(m);
        Ok(())
    }

    /// The bytes the grammar forces next (at most `max`; empty at a choice or while waiting).
    pub fn forced_bytes(&mut self, max: usize) -> Vec<u8> {
        let State::Active(m) = &mut self.state else { return Vec::new() };
        let mut b = m.compute_ff_bytes();
        b.truncate(max);
        b
    }

    /// Whether the grammar is complete here (the end of generation is allowed).
    pub fn is_accepting(&mut self) -> bool {
        match &mut self.state {
            State::Active(m) => (m.is_stopped() && !m.is_error()) || m.is_accepting().unwrap_or(false),
            State::Waiting { .. } => true,
        }
    }
}

enum Wake {
    Token(sys::llama_token),
    Text(Vec<u8>),
}

fn stopped(m: &Matcher, e: impl std::fmt::Display) -> Error {
    let why = m.get_error().unwrap_or_else(|| e.to_string());
    Error::new(ErrorCode::Internal, format!("the grammar engine stopped: {why}"))
}

/// A test engine over every single byte, a few longer tokens, and an end-of-generation token
/// (the last).
#[cfg(test)]
pub(crate) fn byte_engine(longer: &[&str]) -> Arc<Engine> {
    let mut words: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
    words.extend(longer.iter().map(|w| w.as_bytes().to_vec()));
    let mut eos = vec![TokTrie::SPECIAL_TOKEN_MARKER];
    eos.extend(b"<eos>");
    words.push(eos);
    let eog = vec![words.len() as u32 - 1];
    Arc::new(Engine::from_words(words, eog).unwrap())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine(longer: &[&str]) -> Arc<Engine> {
        byte_engine(longer)
    }

    fn constraint(e: &Arc<Engine>, gbnf: &str) -> Constraint {
        let (m, _) = e.compile(gbnf, &|_| None).unwrap();
        Constraint::new(e.clone(), m, None)
    }

    /// Feeds `text` token by token (greedy spelling), checking each token is allowed first.
    fn feed(c: &mut Constraint, e: &Engine, text: &str) {
        for t in e.trie().greedy_tokenize(text.as_bytes()) {
            let tok = t as sys::llama_token;
            assert!(c.allows(tok).unwrap(), "{text:?}: {:?} refused", e.trie().token_str(t));
            assert!(c.mask().unwrap().unwrap().is_allowed(t), "mask disagrees on {:?}", e.trie().token_str(t));
            c.accept(tok, e.trie().token(t)).unwrap();
        }
    }

    #[test]
    fn trailing_space_before_a_closing_tag_does_not_trap_a_call() {
        // Greedy lexemes would let `space` take the newline that `\n</x>` needs.
        let g = "root ::= object \"\\n</x>\"\nvalue ::= object | \"1\" space\nobject ::= \"{\" space ( \"\\\"a\\\":\" space value )? \"}\" space\nspace ::= | \" \" | \"\\n\"{1,2} [ \\t]{0,20}\n";
        let e = engine(&["</x>", "{\""]);
        for text in ["{}\n</x>", "{\"a\": {\"a\":1}}\n</x>", "{} \n</x>"] {
            let mut c = constraint(&e, g);
            feed(&mut c, &e, text);
            let eos = e.trie().vocab_size() as sys::llama_token - 1;
            assert!(c.allows(eos).unwrap() && c.is_accepting(), "{text:?} should be complete");
        }
    }

    /// A draft is checked without moving the grammar: the tokens it admits in a row, cut at the
    /// first it refuses (speculative decoding verifies no further).
    #[test]
    fn a_draft_is_cut_at_the_first_token_the_grammar_refuses_and_the_state_stays() {
        let e = engine(&["ab"]);
        let mut c = constraint(&e, "root ::= \"ab\" [0-9]+ \"!\"\n");
        let tok = |s: &str| e.trie().greedy_tokenize(s.as_bytes()).iter().map(|&t| t as sys::llama_token).collect::<Vec<_>>();
        let mut draft = tok("ab12");
        draft.extend(tok("x!"));
        assert_eq!(c.valid_prefix(&draft).unwrap(), 3, "ab, 1, 2 admitted; x refused");
        assert_eq!(c.valid_prefix(&tok("ab9!")).unwrap(), 3);
        let eos = e.trie().vocab_size() as sys::llama_token - 1;
        assert_eq!(c.valid_prefix(&[tok("ab")[0], eos]).unwrap(), 1, "nothing past an end-of-generation token");
        feed(&mut c, &e, "ab7!");
        assert!(c.is_accepting(), "the checks did not move the grammar");
    }

    #[test]
    fn masks_allow_exactly_the_grammar() {
        let e = engine(&["ab", "ac", "abc", "b"]);
        let mut c = constraint(&e, "root ::= \"a\" [bc] | \"ab\" \"c\"\n");
        let allowed: Vec<String> = {
            let mask = c.mask().unwrap().unwrap();
            (0..e.trie().vocab_size() as u32).filter(|&t| mask.is_allowed(t)).map(|t| e.trie().token_str(t)).collect()
        };
        assert_eq!(allowed, ["a", "ab", "ac", "abc"]);
        feed(&mut c, &e, "ab");
        assert!(c.is_accepting(), "\"ab\" is complete");
        assert_eq!(c.forced_bytes(16), b"", "after \"ab\": the end or \"c\"");
        let mut c = constraint(&e, "root ::= \"xyz\" [0-9]\n");
        assert_eq!(c.forced_bytes(16), b"xyz");
        assert!(!c.allows(e.trie().vocab_size() as sys::llama_token - 1).unwrap(), "not complete yet");
    }

    #[test]
    fn forced_text_may_be_spelled_any_way_the_vocabulary_can() {
        // The model picks its own spelling of forced text, as with llama.cpp's grammar: the
        // mask is never narrowed to one (greedy) tokenization.
        let e = engine(&["xy", "xyz", "yz"]);
        let mut c = constraint(&e, "root ::= \"xyz\" [0-9]\n");
        let mask = c.mask().unwrap().unwrap();
        let allowed: Vec<String> =
            (0..e.trie().vocab_size() as u32).filter(|&t| mask.is_allowed(t)).map(|t| e.trie().token_str(t)).collect();
        assert_eq!(allowed, ["x", "xy", "xyz"]);
    }

    #[test]
    fn a_finished_grammar_allows_only_the_end() {
        // After "{}" nothing can follow: llguidance stops the parser, and the mask must be the
        // end-of-generation tokens, not an error (a response_format reply ends here).
        let e = engine(&["{}"]);
        let eos = e.trie().vocab_size() as sys::llama_token - 1;
        let mut c = constraint(&e, "root ::= \"{}\"\n");
        feed(&mut c, &e, "{}");
        let mask = c.mask().unwrap().unwrap();
        let allowed: Vec<u32> = (0..e.trie().vocab_size() as u32).filter(|&t| mask.is_allowed(t)).collect();
        assert_eq!(allowed, [eos as u32]);
        assert!(c.allows(eos).unwrap() && !c.allows(b'x' as sys::llama_token).unwrap());
        assert!(c.is_accepting());
        c.accept(eos, b"").unwrap();
    }

    #[test]
    fn a_grammar_is_compiled_once() {
        let e = engine(&[]);
        let (_, first) = e.compile("root ::= [a-z]+\n", &|_| None).unwrap();
        let (_, again) = e.compile("root ::= [a-z]+\n", &|_| None).unwrap();
        assert!(!first.cached && again.cached);
        // A grammar that does not parse is the request's error, not a panic.
        let bad = e.compile("root ::= (", &|_| None).err().unwrap();
        assert_eq!(bad.code, ErrorCode::InvalidArgument);
    }
}
