//! The chat engine behind `llb_chat_create` / `llb_chat_infer` / `llb_chat_destroy`.
//!
//! One engine = one llama context (KV cache) over a shared model. A request flows:
//! typed request → plan (llama.cpp's chat templates: prompt, grammar, parser) → tokens (with KV
//! reuse and splicing of this engine's own previous reply) → decode + sample → parse → response.

use crate::error::{bail, Error, ErrorCode, Result};
use crate::model::{self, Model};
use crate::model_info;
use crate::request::{self, ChatRequest, Choice, EngineConfig, ReasoningFormat, Role};
use crate::sampler::{self, GrammarSpec, Sampler, SamplingParams};
use crate::shim::{ChatParams, ParsedMsg, Parser, Probe, Templates};
use crate::sys;
use serde_json::{json, Map, Value};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock, TryLockError};
use std::time::Instant;

/// Receives events (JSON); returns false to cancel the running operation.
pub type EventSink = Box<dyn Fn(&Value) -> bool + Send + Sync>;

/// Emit a progress event (a cancellation point) at least this often while generating.
const PROGRESS_EVERY: usize = 16;

struct Context(*mut sys::llama_context);

// SAFETY: the context is only used under the engine's mutex.
unsafe impl Send for Context {}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: created by llama_init_from_model, freed once, before the model (field order).
        unsafe { sys::llama_free(self.0) }
    }
}

/// What this engine generated last: used to splice its exact tokens back into the next prompt.
#[derive(Debug, Clone)]
struct LastTurn {
    /// The prompt text of that turn and its tokens.
    prompt: String,
    prompt_tokens: Vec<sys::llama_token>,
    /// The generated tokens that are in the KV cache, and the reply's identity.
    gen_tokens: Vec<sys::llama_token>,
    tool_call_ids: Vec<String>,
    content: String,
    /// Text of the end-of-generation token the model stopped on.
    eog_piece: String,
}

struct Inner {
    ctx: Context,
    /// The tokens whose keys/values are in the KV cache, in order.
    cached: Vec<sys::llama_token>,
    last: Option<LastTurn>,
}

pub struct Engine {
    // Field order matters for Drop: the context goes before the model.
    inner: Mutex<Inner>,
    model: Arc<Model>,
    templates: Templates,
    probe: Probe,
    config: EngineConfig,
    events: Option<EventSink>,
    model_name: String,
    n_ctx: u32,
    n_batch: u32,
    /// piece text → token, built on first need (exact prefill of a grammar).
    pieces: OnceLock<HashMap<Vec<u8>, sys::llama_token>>,
}

fn unix_time() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// A random alphanumeric id (not cryptographic: ids only need to be unique and unguessable
/// enough not to collide across engines and processes).
pub fn random_id(prefix: &str, len: usize) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static STATE: AtomicU64 = AtomicU64::new(0);
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
    let mut x =
        STATE.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed) ^ nanos ^ ((std::process::id() as u64) << 40) | 1;
    const ALPHA: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut s = String::from(prefix);
    for _ in 0..len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.push(ALPHA[((x >> 11) % ALPHA.len() as u64) as usize] as char);
    }
    s
}

/// llama.cpp's buffer protocol: `call(buf)` returns the count written, or minus the size it needs.
/// Calls once, and once more with the size asked for; None when it still fails.
fn with_growing_buffer<T: Clone + Default>(initial: usize, mut call: impl FnMut(&mut [T]) -> i32) -> Option<Vec<T>> {
    let mut buf = vec![T::default(); initial];
    let mut n = call(&mut buf);
    if n < 0 {
        buf.resize((-n) as usize, T::default());
        n = call(&mut buf);
    }
    (n >= 0).then(|| {
        buf.truncate(n as usize);
        buf
    })
}

/// Tokenizes `text` (special tokens parsed when `parse_special`), without adding BOS/EOS.
///
/// # Safety
/// `vocab` must be a valid llama vocabulary for the duration of the call.
pub unsafe fn tokenize(
    vocab: *const sys::llama_vocab,
    text: &str,
    parse_special: bool,
) -> Result<Vec<sys::llama_token>> {
    let len =
        i32::try_from(text.len()).map_err(|_| Error::new(ErrorCode::ContextOverflow, "prompt larger than 2 GB"))?;
    with_growing_buffer(text.len() + 4, |buf: &mut [sys::llama_token]| {
        // SAFETY: buf holds buf.len() tokens; text is valid for len bytes; vocab per the contract.
        unsafe {
            sys::llama_tokenize(
                vocab,
                text.as_ptr() as *const _,
                len,
                buf.as_mut_ptr(),
                buf.len() as i32,
                false,
                parse_special,
            )
        }
    })
    .ok_or_else(|| Error::new(ErrorCode::Internal, "tokenization failed"))
}

/// The bytes of one token (special tokens rendered when `special`).
///
/// # Safety
/// `vocab` must be a valid llama vocabulary for the duration of the call.
pub unsafe fn piece(vocab: *const sys::llama_vocab, token: sys::llama_token, special: bool) -> Vec<u8> {
    with_growing_buffer(64, |buf: &mut [u8]| {
        // SAFETY: buf holds buf.len() bytes; vocab per the contract.
        unsafe { sys::llama_token_to_piece(vocab, token, buf.as_mut_ptr() as *mut _, buf.len() as i32, 0, special) }
    })
    .unwrap_or_default()
}

/// Length of the longest prefix of `bytes` that is complete UTF-8: an incomplete multi-byte
/// sequence at the very end is held back (it may complete with the next token).
fn complete_utf8_len(bytes: &[u8]) -> usize {
    let n = bytes.len();
    for back in 1..=3.min(n) {
        let b = bytes[n - back];
        if b & 0xC0 == 0x80 {
            continue; // continuation byte: look further back
        }
        let need = if b >= 0xF0 {
            4
        } else if b >= 0xE0 {
            3
        } else if b >= 0xC0 {
            2
        } else {
            1
        };
        return if need > back { n - back } else { n };
    }
    n
}

/// Everything derived from the request and the templates before any token is evaluated.
struct Plan {
    prompt: String,
    parser: Parser,
    grammar: Option<GrammarSpec>,
    /// Tokens fed to a non-lazy grammar that starts with the generation prompt.
    grammar_prefill: Option<String>,
    stops: Vec<String>,
    preserved: HashSet<sys::llama_token>,
    parse_tool_calls: bool,
    /// `parallel_tool_calls` is false (or unsupported): at most one call. llama.cpp's grammars
    /// do not always enforce it, so generation stops when a second call begins.
    single_call: bool,
    /// The grammar is llb's strict tool-call grammar (required or named choice).
    strict: bool,
}

/// The state of a response being streamed: what has been sent for each field.
#[derive(Default)]
struct Emitted {
    role_sent: bool,
    content: String,
    reasoning: String,
    /// (id, name, arguments) per tool call index, for calls whose header was sent.
    calls: Vec<(String, String, String)>,
}

enum Finish {
    Stop,
    Length,
    Cancelled,
}

/// `n_ctx` when the config gives none (capped by the model's training context).
const DEFAULT_N_CTX: u32 = 4096;
/// ggml's thread limit (`GGML_MAX_N_THREADS`): more makes ggml allocate and spawn per thread.
const MAX_THREADS: i32 = 512;
/// The physical batch (`n_ubatch`) is `n_batch` up to this.
const MAX_UBATCH: u32 = 512;

/// Refuses an `n_ctx` whose KV cache alone (f16 keys and values for every layer, the usual
/// layout; an estimate) would not fit in the machine's memory, instead of letting llama.cpp
/// try to allocate and clear it.
fn check_context_memory(model: &Model, n_ctx: u32) -> Result<()> {
    // SAFETY: the model is alive for the calls.
    let (n_layer, n_embd, n_head, n_head_kv) = unsafe {
        let m = model.raw();
        (
            sys::llama_model_n_layer(m).max(0) as u64,
            sys::llama_model_n_embd(m).max(0) as u64,
            sys::llama_model_n_head(m).max(1) as u64,
            sys::llama_model_n_head_kv(m).max(0) as u64,
        )
    };
    let per_token = 2 * 2 * n_layer * (n_embd / n_head) * n_head_kv;
    let need = per_token.saturating_mul(n_ctx as u64);
    // SAFETY: sysconf has no preconditions.
    let (pages, page) = unsafe { (libc::sysconf(libc::_SC_PHYS_PAGES), libc::sysconf(libc::_SC_PAGESIZE)) };
    let have = (pages.max(0) as u64).saturating_mul(page.max(0) as u64);
    if have > 0 && need > have {
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        bail!(
            InvalidArgument,
            "field `n_ctx`: a context of {n_ctx} tokens needs about {:.1} GiB of KV cache for this model, more than \
             this machine's {:.1} GiB of memory",
            gib(need),
            gib(have)
        );
    }
    Ok(())
}

impl Engine {
    /// Opens an engine. Refuses non-tool models (`tools_unsupported`) before loading weights or
    /// allocating a KV cache.
    pub fn create(config: EngineConfig, events: Option<EventSink>) -> Result<Engine> {
        crate::init_backend();
        let path = Path::new(&config.model_path).to_path_buf();
        if config.n_ctx == Some(0) || config.n_batch == Some(0) {
            bail!(InvalidArgument, "n_ctx and n_batch must be positive");
        }
        if config.n_threads.is_some_and(|t| t <= 0) {
            bail!(InvalidArgument, "field `n_threads`: must be positive");
        }
        if let Some(t) = config.n_threads.filter(|t| *t > MAX_THREADS) {
            bail!(InvalidArgument, "field `n_threads`: {t} is more than ggml's limit of {MAX_THREADS} threads");
        }
        let ins = model_info::inspect(&path)?;
        if !ins.probe.supports_tools() {
            return Err(model_info::tools_unsupported(&path, &ins.probe));
        }
        // The KV cache grows with n_ctx: past the context the model was trained for it buys
        // nothing (llb sets no RoPE scaling) and costs memory, up to terabytes for a u32.
        let n_ctx_train = ins.header.n_ctx_train.filter(|n| *n > 0).map(|n| n.min(u32::MAX as i64) as u32);
        let n_ctx = match (config.n_ctx, n_ctx_train) {
            (Some(n), Some(train)) if n > train => bail!(
                InvalidArgument,
                "field `n_ctx`: {n} is more than the {train} tokens of context the model was trained for"
            ),
            (Some(n), _) => n,
            (None, train) => DEFAULT_N_CTX.min(train.unwrap_or(DEFAULT_N_CTX)),
        };
        let n_batch = config.n_batch.unwrap_or(512).min(n_ctx);
        let model = model::acquire(&path)?;
        check_context_memory(&model, n_ctx)?;
        // SAFETY: the model is alive for the call.
        let templates = unsafe { Templates::from_model(model.raw()) }?;
        crate::fault::site("create");
        // More threads than CPUs only spin: 512 threads on 2 CPUs made a 2-token request take minutes.
        let cpus = std::thread::available_parallelism().map(|n| n.get() as i32).unwrap_or(4);
        let threads = config.n_threads.map_or(cpus, |t| t.min(cpus));
        // SAFETY: default params adjusted; a NULL context is handled.
        let ctx = unsafe {
            let mut cp = sys::llama_context_default_params();
            cp.n_ctx = n_ctx;
            cp.n_batch = n_batch;
            // llama.cpp reserves logits for a whole physical batch (n_vocab × n_ubatch × 4 bytes:
            // 5 GB for a 152k vocabulary at 8192); larger physical batches gain nothing on a CPU.
            cp.n_ubatch = n_batch.min(MAX_UBATCH);
            cp.n_seq_max = 1;
            cp.n_threads = threads;
            cp.n_threads_batch = threads;
            cp.no_perf = true;
            sys::llama_init_from_model(model.raw(), cp)
        };
        if ctx.is_null() {
            bail!(ContextCreateFailed, "llama.cpp could not create a context with n_ctx={n_ctx}, n_batch={n_batch}");
        }
        let model_name = path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
        Ok(Engine {
            inner: Mutex::new(Inner { ctx: Context(ctx), cached: Vec::new(), last: None }),
            model,
            templates,
            probe: ins.probe,
            config,
            events,
            model_name,
            n_ctx,
            n_batch,
            pieces: OnceLock::new(),
        })
    }

    pub fn probe(&self) -> &Probe {
        &self.probe
    }

    fn emit(&self, ev: Value) -> bool {
        self.events.as_ref().is_none_or(|f| f(&ev))
    }

    fn vocab(&self) -> *const sys::llama_vocab {
        self.model.vocab()
    }

    fn tokenize(&self, text: &str) -> Result<Vec<sys::llama_token>> {
        // SAFETY: the vocabulary lives as long as the model this engine holds.
        unsafe { tokenize(self.vocab(), text, true) }
    }

    fn piece(&self, token: sys::llama_token, special: bool) -> Vec<u8> {
        // SAFETY: as above.
        unsafe { piece(self.vocab(), token, special) }
    }

    /// Runs one chat completion. Returns `busy` at once if another thread is inside.
    pub fn infer(&self, request_json: &str) -> Result<Value> {
        let mut inner = match self.inner.try_lock() {
            Ok(g) => g,
            Err(TryLockError::WouldBlock) => bail!(Busy, "this engine is running another request"),
            Err(TryLockError::Poisoned(p)) => {
                // A request panicked half way (caught at the C boundary): its KV cache and
                // bookkeeping may disagree, so start over from an empty cache.
                self.inner.clear_poison();
                let mut inner = p.into_inner();
                inner.cached.clear();
                inner.last = None;
                // SAFETY: ctx is live and owned by this engine, which we hold locked.
                unsafe { sys::llama_memory_clear(sys::llama_get_memory(inner.ctx.0), true) };
                inner
            }
        };
        let req: ChatRequest = request::parse(request_json, "request")?;
        req.validate()?;
        self.run(&mut inner, &req)
    }

    // ---- planning -------------------------------------------------------------------------

    fn kwargs(&self, req: &ChatRequest) -> Map<String, Value> {
        let mut kw = self.config.chat_template_kwargs.clone().unwrap_or_default();
        if let Some(r) = &req.chat_template_kwargs {
            kw.extend(r.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        kw
    }

    fn apply_inputs(
        &self,
        req: &ChatRequest,
        messages: &Value,
        tools: Option<Value>,
        mode: &str,
        add_gen: bool,
    ) -> Value {
        let kw = self.kwargs(req);
        let enable_thinking = kw.get("enable_thinking").and_then(Value::as_bool).unwrap_or(true);
        json!({
            "messages": messages,
            "tools": tools,
            "tool_choice": mode,
            "parallel_tool_calls": self.parallel(req),
            "reasoning_format": self.reasoning_format(req),
            "enable_thinking": enable_thinking,
            "chat_template_kwargs": kw,
            "json_schema": req.json_schema(),
            "add_generation_prompt": add_gen,
        })
    }

    fn parallel(&self, req: &ChatRequest) -> bool {
        req.parallel_tool_calls.unwrap_or(true) && self.probe.supports_parallel_tool_calls()
    }

    fn reasoning_format(&self, req: &ChatRequest) -> &'static str {
        match req.reasoning_format {
            Some(ReasoningFormat::None) => "none",
            _ => "auto",
        }
    }

    /// Applies the template; a template that rejects an OpenAI-legal sequence gets the messages
    /// adapted (system merged into the first user message, same-role runs merged) and a retry.
    fn apply(
        &self,
        req: &ChatRequest,
        messages: &[request::Message],
        tools: Option<Value>,
        mode: &str,
        add_gen: bool,
    ) -> Result<ChatParams> {
        let msgs = serde_json::to_value(messages).map_err(|e| Error::new(ErrorCode::Internal, e.to_string()))?;
        match self.templates.apply(&self.apply_inputs(req, &msgs, tools.clone(), mode, add_gen)) {
            Ok(p) => Ok(p),
            Err(e) if e.code == ErrorCode::TemplateError => {
                let adapted = adapt_messages(
                    messages,
                    self.probe.caps.get("supports_system_role").and_then(Value::as_bool).unwrap_or(true),
                );
                if adapted.as_slice() == messages {
                    return Err(e);
                }
                let msgs =
                    serde_json::to_value(&adapted).map_err(|e| Error::new(ErrorCode::Internal, e.to_string()))?;
                self.templates.apply(&self.apply_inputs(req, &msgs, tools, mode, add_gen)).map_err(|_| e)
            }
            Err(e) => Err(e),
        }
    }

    fn plan(&self, req: &ChatRequest) -> Result<Plan> {
        let tools_all = req.tools.as_ref().filter(|t| !t.is_empty());
        let tools_json = tools_all.map(|t| serde_json::to_value(t).unwrap_or(Value::Null));
        let choice = if tools_all.is_none() { Choice::None } else { req.choice() };
        let thinking = self.kwargs(req).get("enable_thinking").and_then(Value::as_bool).unwrap_or(true);

        let mut strict = false;
        let (prompt, params, grammar, prefill) = match &choice {
            Choice::Auto | Choice::None => {
                let mode = if choice == Choice::Auto { "auto" } else { "none" };
                let p = self.apply(req, &req.messages, tools_json.clone(), mode, true)?;
                let (grammar, prefill) = self.grammar_of(&p)?;
                (p.prompt.clone(), p, grammar, prefill)
            }
            Choice::Required | Choice::Named(_) => {
                // The prompt always lists every tool (a stable KV prefix); a named choice narrows
                // only the constraint and the parser.
                let all = self.apply(req, &req.messages, tools_json.clone(), "required", true)?;
                let typed: Vec<request::Tool> = match &choice {
                    Choice::Named(name) => {
                        tools_all.unwrap().iter().filter(|t| &t.function.name == name).cloned().collect()
                    }
                    _ => tools_all.unwrap().clone(),
                };
                let section_tools = serde_json::to_value(&typed).unwrap_or(Value::Null);
                let p = if matches!(choice, Choice::Named(_)) {
                    self.apply(req, &req.messages, Some(section_tools.clone()), "required", true)?
                } else {
                    all.clone()
                };
                let section = crate::constrain::strict_section(&p.parser, &typed)?;
                let (grammar, prefill) = if section.is_empty() {
                    self.grammar_of(&p)?
                } else {
                    strict = true;
                    let single = !self.parallel(req);
                    (
                        Some(GrammarSpec {
                            gbnf: strict_grammar(&section, &p, thinking, single),
                            ..Default::default()
                        }),
                        None,
                    )
                };
                (all.prompt.clone(), p, grammar, prefill)
            }
        };
        let parser = Parser::new(&params, self.reasoning_format(req), choice != Choice::None)?;
        let mut stops = params.additional_stops.clone();
        stops.extend(req.stop_strings());
        let preserved = params
            .preserved_tokens
            .iter()
            .filter_map(|t| match self.tokenize(t) {
                Ok(ids) if ids.len() == 1 => Some(ids[0]),
                _ => None,
            })
            .collect();
        let single_call = choice != Choice::None && !self.parallel(req);
        Ok(Plan {
            prompt,
            parser,
            grammar,
            grammar_prefill: prefill,
            stops,
            preserved,
            parse_tool_calls: choice != Choice::None,
            single_call,
            strict,
        })
    }

    /// The grammar llama.cpp derived (lazy with triggers, or non-lazy starting with the generation
    /// prompt, which is then prefilled exactly).
    fn grammar_of(&self, p: &ChatParams) -> Result<(Option<GrammarSpec>, Option<String>)> {
        if p.grammar.is_empty() {
            return Ok((None, None));
        }
        if !p.grammar_lazy {
            let prefill = (!p.generation_prompt.is_empty()).then(|| p.generation_prompt.clone());
            return Ok((Some(GrammarSpec { gbnf: p.grammar.clone(), ..Default::default() }), prefill));
        }
        let mut g = GrammarSpec { gbnf: p.grammar.clone(), lazy: true, ..Default::default() };
        let preserved: HashSet<sys::llama_token> = p
            .preserved_tokens
            .iter()
            .filter_map(|t| self.tokenize(t).ok().filter(|ids| ids.len() == 1).map(|ids| ids[0]))
            .collect();
        for t in &p.grammar_triggers {
            match t.kind {
                crate::shim::TRIGGER_WORD => {
                    let ids = self.tokenize(&t.value)?;
                    if ids.len() == 1 && preserved.contains(&ids[0]) {
                        g.trigger_tokens.push(ids[0]);
                    } else {
                        g.trigger_patterns.push(sampler::regex_escape(&t.value));
                    }
                }
                crate::shim::TRIGGER_PATTERN => g.trigger_patterns.push(t.value.clone()),
                crate::shim::TRIGGER_PATTERN_FULL => {
                    let v = &t.value;
                    let mut a = String::new();
                    if !v.starts_with('^') {
                        a.push('^');
                    }
                    a.push_str(v);
                    if !v.ends_with('$') {
                        a.push('$');
                    }
                    g.trigger_patterns.push(a);
                }
                _ => {}
            }
        }
        Ok((Some(g), None))
    }

    /// Tokens whose pieces spell `text` exactly (greedy longest match over the vocabulary), so a
    /// grammar can be advanced past text the tokenizer would split differently (SPM's space
    /// prefix makes the tokenized generation prompt start with a space the grammar rejects).
    fn exact_tokens(&self, text: &str) -> Option<Vec<sys::llama_token>> {
        let pieces = self.pieces.get_or_init(|| {
            let vocab = self.vocab();
            // SAFETY: vocab is valid while the model lives.
            let n = unsafe { sys::llama_vocab_n_tokens(vocab) };
            let mut m = HashMap::with_capacity(n as usize);
            for t in 0..n {
                let p = self.piece(t, true);
                if !p.is_empty() {
                    m.entry(p).or_insert(t);
                }
            }
            m
        });
        let bytes = text.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            let max = (bytes.len() - i).min(128);
            let (len, tok) = (1..=max).rev().find_map(|l| pieces.get(&bytes[i..i + l]).map(|t| (l, *t)))?;
            out.push(tok);
            i += len;
        }
        Some(out)
    }

    // ---- prompt tokens ----------------------------------------------------------------------

    fn prompt_tokens(&self, inner: &Inner, req: &ChatRequest, plan: &Plan) -> Result<Vec<sys::llama_token>> {
        if let Some(spliced) = self.splice(inner, req, plan) {
            return Ok(spliced);
        }
        self.tokens_with_bos(&plan.prompt)
    }

    fn tokens_with_bos(&self, text: &str) -> Result<Vec<sys::llama_token>> {
        let vocab = self.vocab();
        let mut toks = self.tokenize(text)?;
        // SAFETY: vocab is valid.
        let (add_bos, bos) = unsafe { (sys::llama_vocab_get_add_bos(vocab), sys::llama_vocab_bos(vocab)) };
        if add_bos && bos >= 0 && toks.first() != Some(&bos) {
            toks.insert(0, bos);
        }
        Ok(toks)
    }

    /// When the history holds the reply this engine generated last (matched by tool-call ids or
    /// content), rebuild the prompt from that turn's exact tokens instead of the template's
    /// re-rendering of the reply, so the whole previous prompt and reply stay in the KV cache.
    fn splice(&self, inner: &Inner, req: &ChatRequest, plan: &Plan) -> Option<Vec<sys::llama_token>> {
        let last = inner.last.as_ref()?;
        // The remembered turn must still be in the KV cache, token for token.
        let n = last.prompt_tokens.len();
        if last.eog_piece.is_empty()
            || inner.cached.len() < n + last.gen_tokens.len()
            || inner.cached[..n] != last.prompt_tokens[..]
            || inner.cached[n..n + last.gen_tokens.len()] != last.gen_tokens[..]
        {
            return None;
        }
        let k = req.messages.iter().rposition(|m| {
            m.role == Role::Assistant
                && match &m.tool_calls {
                    Some(calls) if !last.tool_call_ids.is_empty() => {
                        calls.iter().map(|c| c.id.as_str()).eq(last.tool_call_ids.iter().map(String::as_str))
                    }
                    None => {
                        last.tool_call_ids.is_empty()
                            && m.content.as_ref().map(|c| c.text()) == Some(last.content.clone())
                    }
                    _ => false,
                }
        })?;
        let tools =
            req.tools.as_ref().filter(|t| !t.is_empty()).map(|t| serde_json::to_value(t).unwrap_or(Value::Null));
        let mode = match req.choice() {
            Choice::None => "none",
            Choice::Auto => "auto",
            _ => "required",
        };
        let why = |r: &str| {
            if debug_enabled() {
                eprintln!("[llb] no splice: {r}");
            }
        };
        let before = self.apply(req, &req.messages[..k], tools.clone(), mode, true).ok()?;
        if before.prompt != last.prompt {
            why("the history before the reply renders differently than that turn's prompt");
            return None;
        }
        let Some(through) = self.apply(req, &req.messages[..=k], tools, mode, false).ok() else {
            why("the template cannot render the history ending with the reply");
            return None;
        };
        let Some(reply) = through.prompt.strip_prefix(&last.prompt) else {
            why("the reply's rendering does not extend that turn's prompt");
            return None;
        };
        let Some(rest) = plan.prompt.strip_prefix(&through.prompt) else {
            why("the new prompt does not extend the rendered reply");
            return None;
        };
        let Some(end_of_turn) = reply.rfind(&last.eog_piece) else {
            why("the rendered reply lacks the end-of-generation token the model stopped on");
            return None;
        };
        let tail = format!("{}{}", &reply[end_of_turn..], rest);
        let mut toks = inner.cached[..n + last.gen_tokens.len()].to_vec();
        toks.extend(self.tokenize(&tail).ok()?);
        Some(toks)
    }

    // ---- generation -------------------------------------------------------------------------

    fn run(&self, inner: &mut Inner, req: &ChatRequest) -> Result<Value> {
        let t_start = Instant::now();
        let plan = self.plan(req)?;
        let prompt = self.prompt_tokens(inner, req, &plan)?;
        let n_prompt = prompt.len();
        if n_prompt as u32 >= self.n_ctx {
            bail!(
                ContextOverflow,
                "the prompt has {n_prompt} tokens and the context holds {} (n_ctx): shorten the conversation or raise n_ctx",
                self.n_ctx
            );
        }
        let ctx = inner.ctx.0;
        let vocab = self.vocab();
        let stream = req.stream.unwrap_or(false);
        let id = random_id("chatcmpl-", 24);
        let created = unix_time();

        // Reuse the longest common prefix of the KV cache; evaluate at least one token.
        let mut n_keep = inner.cached.iter().zip(&prompt).take_while(|(a, b)| a == b).count().min(n_prompt - 1);
        // SAFETY: ctx is live; removing positions [n_keep, end) of sequence 0.
        let removed = unsafe { sys::llama_memory_seq_rm(sys::llama_get_memory(ctx), 0, n_keep as i32, -1) };
        if !removed {
            // SAFETY: as above; clears everything.
            unsafe { sys::llama_memory_clear(sys::llama_get_memory(ctx), true) };
            n_keep = 0;
        }
        inner.cached.truncate(n_keep);
        let mut cancelled = false;
        for chunk in prompt[n_keep..].chunks(self.n_batch as usize) {
            let mut toks = chunk.to_vec();
            // SAFETY: toks outlives the call; the batch borrows it.
            let rc = unsafe { sys::llama_decode(ctx, sys::llama_batch_get_one(toks.as_mut_ptr(), toks.len() as i32)) };
            if rc != 0 {
                inner.cached.clear();
                // SAFETY: ctx is live.
                unsafe { sys::llama_memory_clear(sys::llama_get_memory(ctx), true) };
                bail!(Internal, "llama_decode failed on the prompt (code {rc})");
            }
            inner.cached.extend_from_slice(chunk);
            if !self.emit(json!({"type": "progress", "stage": "prompt", "prompt_tokens_done": inner.cached.len(), "prompt_tokens": n_prompt})) {
                cancelled = true;
                break;
            }
        }
        crate::fault::site("infer");
        let t_prompt = t_start.elapsed();
        let t_gen = Instant::now();

        let sp = SamplingParams {
            temperature: req.temperature.unwrap_or(0.8),
            top_k: req.top_k.unwrap_or(40),
            top_p: req.top_p.unwrap_or(0.95),
            min_p: req.min_p.unwrap_or(0.05),
            seed: req.seed.or(self.config.seed).map(|s| s as u32).unwrap_or_else(random_seed),
        };
        // SAFETY: the vocab lives as long as the model, which outlives the sampler.
        let mut smpl = unsafe { Sampler::new(vocab, &sp, plan.grammar.as_ref()) }?;
        if let Some(pre) = &plan.grammar_prefill {
            let toks = self
                .exact_tokens(pre)
                .ok_or_else(|| Error::new(ErrorCode::Internal, "cannot spell the generation prompt in tokens"))?;
            for t in toks {
                smpl.accept_grammar(t)?;
            }
        }

        let max_new = req.max_completion_tokens.or(req.max_tokens).map(|m| m as usize).unwrap_or(usize::MAX);
        let max_stop = plan.stops.iter().map(String::len).max().unwrap_or(0);
        let mut out: Vec<u8> = Vec::new();
        let mut gen_tokens: Vec<sys::llama_token> = Vec::new();
        let mut n_sampled = 0usize;
        let mut eog_piece = String::new();
        let mut finish = if cancelled { Finish::Cancelled } else { Finish::Length };
        let mut emitted = Emitted::default();
        let mut ids: Vec<String> = Vec::new();
        let mut last_parse_len = 0usize;
        let mut dropped_calls = false;
        let mut warnings: Vec<Value> = Vec::new();

        if stream && !cancelled {
            cancelled = !self.send_delta(&id, created, json!({"role": "assistant", "content": Value::Null}), None);
            emitted.role_sent = true;
            if cancelled {
                finish = Finish::Cancelled;
            }
        }

        // The model's end-of-turn token: what ends a reply once its one allowed call is complete.
        // SAFETY: vocab is valid.
        let end_of_turn = unsafe {
            let eot = sys::llama_vocab_eot(vocab);
            if eot >= 0 {
                eot
            } else {
                sys::llama_vocab_eos(vocab)
            }
        };
        loop {
            if cancelled {
                break;
            }
            if gen_tokens.len() >= max_new || inner.cached.len() >= self.n_ctx as usize {
                finish = Finish::Length;
                break;
            }
            // One call allowed and the strict grammar is complete after a call: end the turn.
            let force_end = plan.strict
                && plan.single_call
                && end_of_turn >= 0
                && !gen_tokens.is_empty()
                && smpl.grammar_allows(end_of_turn)?
                && plan.parser.parse(&String::from_utf8_lossy(&out), true).is_ok_and(|m| !m.tool_calls.is_empty());
            // SAFETY: ctx holds logits for the last evaluated token.
            let tok = if force_end { end_of_turn } else { unsafe { smpl.sample(ctx, -1) }? };
            if let Some(why) = smpl.accept(tok)? {
                warnings.push(json!({"code": "grammar_disabled", "message": format!("llama.cpp's grammar for this template failed and generation went on unconstrained: {why}")}));
            }
            n_sampled += 1;
            // SAFETY: vocab is valid.
            if unsafe { sys::llama_vocab_is_eog(vocab, tok) } {
                eog_piece = String::from_utf8_lossy(&self.piece(tok, true)).into_owned();
                finish = Finish::Stop;
                break;
            }
            let before = out.len();
            out.extend(self.piece(tok, plan.preserved.contains(&tok)));
            gen_tokens.push(tok);
            if max_stop > 0 {
                let from = before.saturating_sub(max_stop - 1);
                if let Some(pos) =
                    plan.stops.iter().filter_map(|s| find(&out[from..], s.as_bytes()).map(|p| from + p)).min()
                {
                    out.truncate(pos);
                    finish = Finish::Stop;
                    break;
                }
            }
            let mut t = tok;
            // SAFETY: t outlives the call.
            let rc = unsafe { sys::llama_decode(ctx, sys::llama_batch_get_one(&mut t, 1)) };
            if rc != 0 {
                if rc == 1 {
                    finish = Finish::Length; // no KV slot left: the context is full
                    break;
                }
                bail!(Internal, "llama_decode failed while generating (code {rc})");
            }
            inner.cached.push(tok);
            // Partial parses (for streaming, and to stop at a second call when only one is
            // allowed) run when the text grew by 1/16: linear in the output length overall.
            if stream || plan.single_call {
                let visible = visible_len(&out, &plan.stops);
                let grow = (last_parse_len / 16).max(1);
                if visible >= last_parse_len + grow {
                    last_parse_len = visible;
                    let text = String::from_utf8_lossy(&out[..visible]);
                    if let Ok(msg) = plan.parser.parse(&text, true) {
                        if plan.single_call && msg.tool_calls.len() > 1 {
                            dropped_calls = true;
                            finish = Finish::Stop;
                            break;
                        }
                        if stream && !self.stream_diffs(&id, created, &mut emitted, &msg, &mut ids, false) {
                            finish = Finish::Cancelled;
                            break;
                        }
                    }
                }
            }
            if gen_tokens.len().is_multiple_of(PROGRESS_EVERY)
                && !self.emit(json!({"type": "progress", "stage": "generate", "completion_tokens": gen_tokens.len()}))
            {
                finish = Finish::Cancelled;
                break;
            }
        }
        let t_generate = t_gen.elapsed();
        if debug_enabled() {
            eprintln!(
                "[llb] grammar (lazy={}):\n{}\n[llb] prompt tail: {:?}\n[llb] raw output ({} tokens): {:?}",
                plan.grammar.as_ref().is_some_and(|g| g.lazy),
                plan.grammar.as_ref().map(|g| g.gbnf.as_str()).unwrap_or("(none)"),
                &plan.prompt[plan.prompt.len().saturating_sub(200)..],
                gen_tokens.len(),
                String::from_utf8_lossy(&out)
            );
        }

        // The final message: parse everything (invalid UTF-8 replaced), or keep the raw text.
        let text = String::from_utf8_lossy(&out).into_owned();
        let partial = dropped_calls || matches!(finish, Finish::Length | Finish::Cancelled);
        // A call whose arguments are not a JSON object is a parse failure too: llama.cpp's
        // lenient parser returns one from a reply cut short.
        let parsed = plan.parser.parse(&text, partial).and_then(|m| {
            match m
                .tool_calls
                .iter()
                .find(|c| !serde_json::from_str::<Value>(&c.arguments).is_ok_and(|v| v.is_object()))
            {
                Some(c) if !partial => Err(Error::new(
                    ErrorCode::TemplateError,
                    format!("the call to `{}` has incomplete arguments {:?}", c.name, c.arguments),
                )),
                _ => Ok(m),
            }
        });
        let msg = match parsed {
            Ok(m) => m,
            Err(e) => {
                warnings.push(json!({"code": "tool_call_parse_failed", "message": format!("the output did not parse as this template's format: {}", e.message)}));
                ParsedMsg { content: text.clone(), ..Default::default() }
            }
        };
        let mut msg = if plan.parse_tool_calls { msg } else { ParsedMsg { tool_calls: vec![], ..msg } };
        if plan.single_call && msg.tool_calls.len() > 1 {
            msg.tool_calls.truncate(1);
            dropped_calls = true;
        }
        while ids.len() < msg.tool_calls.len() {
            ids.push(random_id("call_", 24));
        }
        let finish_reason = match finish {
            Finish::Cancelled => "cancelled",
            Finish::Length => "length",
            Finish::Stop if !msg.tool_calls.is_empty() => "tool_calls",
            Finish::Stop => "stop",
        };

        let usage = json!({
            "prompt_tokens": n_prompt,
            "completion_tokens": n_sampled,
            "total_tokens": n_prompt + n_sampled,
            "prompt_tokens_details": {"cached_tokens": n_keep},
        });
        if stream {
            if !emitted.role_sent {
                // Cancelled during the prompt: the stream still opens with the role chunk.
                self.send_delta(&id, created, json!({"role": "assistant", "content": Value::Null}), None);
                emitted.role_sent = true;
            }
            self.stream_diffs(&id, created, &mut emitted, &msg, &mut ids, true);
            self.send_delta(&id, created, json!({}), Some(finish_reason));
            if req.stream_options.is_some_and(|o| o.include_usage) {
                self.emit(json!({"type": "chunk", "data": {
                    "id": id, "object": "chat.completion.chunk", "created": created, "model": self.model_name,
                    "choices": [], "usage": usage,
                }}));
            }
        }

        // Remember the reply for splicing when it ended naturally on an end-of-generation token.
        // Otherwise the previous one stays: splice() checks its tokens are still in the cache.
        if !eog_piece.is_empty() && !dropped_calls {
            inner.last = Some(LastTurn {
                prompt: plan.prompt.clone(),
                prompt_tokens: prompt.clone(),
                gen_tokens: gen_tokens.clone(),
                tool_call_ids: ids[..msg.tool_calls.len()].to_vec(),
                content: msg.content.clone(),
                eog_piece,
            });
        }

        let tool_calls: Vec<Value> = msg
            .tool_calls
            .iter()
            .zip(&ids)
            .map(
                |(c, id)| json!({"id": id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}),
            )
            .collect();
        let mut message = json!({
            "role": "assistant",
            "content": if msg.content.is_empty() && !tool_calls.is_empty() { Value::Null } else { json!(msg.content) },
        });
        if !tool_calls.is_empty() {
            message["tool_calls"] = json!(tool_calls);
        }
        if !msg.reasoning_content.is_empty() {
            message["reasoning_content"] = json!(msg.reasoning_content);
        }
        let prompt_ms = t_prompt.as_secs_f64() * 1e3;
        let predicted_ms = t_generate.as_secs_f64() * 1e3;
        let mut resp = json!({
            "id": id,
            "object": "chat.completion",
            "created": created,
            "model": self.model_name,
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": Value::Null}],
            "usage": usage,
            "timings": {
                "prompt_n": n_prompt - n_keep,
                "prompt_ms": prompt_ms,
                "predicted_n": n_sampled,
                "predicted_ms": predicted_ms,
                "predicted_per_second": if predicted_ms > 0.0 { n_sampled as f64 * 1e3 / predicted_ms } else { 0.0 },
            },
        });
        if !warnings.is_empty() {
            resp["warnings"] = json!(warnings);
        }
        Ok(resp)
    }

    fn send_delta(&self, id: &str, created: u64, delta: Value, finish: Option<&str>) -> bool {
        self.emit(json!({"type": "chunk", "data": {
            "id": id, "object": "chat.completion.chunk", "created": created, "model": self.model_name,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": Value::Null}],
        }}))
    }

    /// Sends what `msg` adds to what was already sent. A field that stopped extending what was
    /// sent (a parser's change of mind on partial text) waits for text that extends it again.
    fn stream_diffs(
        &self,
        id: &str,
        created: u64,
        em: &mut Emitted,
        msg: &ParsedMsg,
        ids: &mut Vec<String>,
        last: bool,
    ) -> bool {
        let mut ok = true;
        if let Some(d) = msg.reasoning_content.strip_prefix(em.reasoning.as_str()).filter(|d| !d.is_empty()) {
            ok &= self.send_delta(id, created, json!({"reasoning_content": d}), None);
            em.reasoning.push_str(d);
        }
        if let Some(d) = msg.content.strip_prefix(em.content.as_str()).filter(|d| !d.is_empty()) {
            ok &= self.send_delta(id, created, json!({"content": d}), None);
            em.content.push_str(d);
        }
        for (i, c) in msg.tool_calls.iter().enumerate() {
            // A call's name is final once its arguments started, a later call exists, or at the end.
            let settled = last || !c.arguments.is_empty() || i + 1 < msg.tool_calls.len();
            if i == em.calls.len() {
                if c.name.is_empty() || !settled {
                    break;
                }
                if ids.len() <= i {
                    ids.push(random_id("call_", 24));
                }
                ok &= self.send_delta(
                    id,
                    created,
                    json!({"tool_calls": [{
                    "index": i, "id": ids[i], "type": "function", "function": {"name": c.name, "arguments": ""}}]}),
                    None,
                );
                em.calls.push((ids[i].clone(), c.name.clone(), String::new()));
            }
            let sent = &mut em.calls[i].2;
            if let Some(d) = c.arguments.strip_prefix(sent.as_str()).filter(|d| !d.is_empty()) {
                ok &= self.send_delta(
                    id,
                    created,
                    json!({"tool_calls": [{"index": i, "function": {"arguments": d}}]}),
                    None,
                );
                sent.push_str(d);
            }
        }
        ok
    }
}

/// `LLB_DEBUG=1`: print each request's grammar, prompt tail and raw output to stderr.
fn debug_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("LLB_DEBUG").is_ok_and(|v| !v.is_empty() && v != "0"))
}

fn random_seed() -> u32 {
    let s = random_id("", 8);
    s.bytes().fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(b as u32))
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || needle.len() > hay.len() {
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

/// How much of the output may be shown while streaming: complete UTF-8 only, and nothing that
/// could still turn out to be the start of a stop string.
fn visible_len(out: &[u8], stops: &[String]) -> usize {
    let mut n = complete_utf8_len(out);
    for s in stops {
        let s = s.as_bytes();
        for k in (1..s.len()).rev() {
            if n >= k && out[..n].ends_with(&s[..k]) {
                n -= k;
                break;
            }
        }
    }
    n
}

/// Builds the strict grammar for `required` and named choices: the tool-call section from the
/// first output token, preceded only by the template's reasoning block when thinking is on.
fn strict_grammar(section: &str, p: &ChatParams, thinking: bool, single_call: bool) -> String {
    // With one call allowed: when llama.cpp's `tool-calls` rule is a bare repetition of
    // `tool-call` (not a section with its own markers), only `tool-call` may start the reply.
    let bare_repetition = section.lines().any(|l| {
        l.strip_prefix("tool-calls ::= ").is_some_and(|body| {
            body.split(|c: char| c.is_whitespace() || "()+*?".contains(c))
                .filter(|t| !t.is_empty())
                .all(|t| t == "tool-call" || t == "space")
        })
    });
    let mut rules: Vec<String> = section
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| match l.strip_prefix("root ::= ") {
            Some(body) if single_call && bare_repetition && body.split(" | ").any(|n| n == "tool-call") => {
                "llb-tool-section ::= tool-call".to_string()
            }
            Some(body) => format!("llb-tool-section ::= {body}"),
            None => l.to_string(),
        })
        .collect();
    let (start, end) = (p.thinking_start_tag.as_str(), p.thinking_end_tag.as_str());
    let gp = p.generation_prompt.trim_end();
    let ws = "llb-ws ::= [ \\t\\n]{0,8}";
    // Reasoning is open when the generation prompt ends with the start tag, or when the prompt's
    // last start tag sits in its final bytes with no end tag after it (Apriel's template opens
    // the block with text of its own after the tag).
    let tail_opened = p.prompt.rfind(start).is_some_and(|i| p.prompt.len() - i <= 128 && !p.prompt[i..].contains(end));
    let opened = !start.is_empty() && !end.is_empty() && (gp.ends_with(start) || tail_opened);
    let root = if opened && !thinking {
        // The prompt opened a reasoning block but thinking is off: close it at once.
        format!("root ::= {} llb-ws llb-tool-section", sampler::gbnf_literal(end))
    } else if opened {
        format!("root ::= {} {} llb-ws llb-tool-section", sampler::gbnf_until(end), sampler::gbnf_literal(end))
    } else if thinking && p.supports_thinking && !start.is_empty() && !end.is_empty() {
        format!(
            "root ::= ({} {} {} llb-ws)? llb-tool-section",
            sampler::gbnf_literal(start),
            sampler::gbnf_until(end),
            sampler::gbnf_literal(end)
        )
    } else {
        "root ::= llb-tool-section".to_string()
    };
    rules.push(ws.to_string());
    rules.insert(0, root);
    rules.join("\n") + "\n"
}

/// Adapts an OpenAI message list for templates that reject what OpenAI allows (tried only after
/// the template raised on the original list):
/// - developer messages are system messages;
/// - leading system messages are merged into one (or, without a system role, into the first user
///   message); later system messages are folded into the next user message;
/// - consecutive user/assistant messages of the same role (without tool calls) are merged;
/// - a history that opens with an assistant (or tool) message gets an empty user turn first;
/// - tool-call ids become 9 alphanumerics (Mistral's templates reject any other id), mapped
///   stably so a call and its result keep matching.
pub fn adapt_messages(messages: &[request::Message], system_role: bool) -> Vec<request::Message> {
    use request::{Content, Message};
    let short_id = |id: &str| -> String {
        let mut h: u64 = 0xcbf29ce484222325;
        for b in id.bytes() {
            h = (h ^ b as u64).wrapping_mul(0x100000001b3);
        }
        const ALPHA: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        (0..9).map(|i| ALPHA[((h >> (i * 7)) % 62) as usize] as char).collect()
    };
    let fits = |id: &str| id.len() == 9 && id.bytes().all(|b| b.is_ascii_alphanumeric());
    let text = |m: &Message| m.content.as_ref().map(|c| c.text()).unwrap_or_default();
    let plain = |role: Role, t: String| Message {
        role,
        content: Some(Content::Text(t)),
        name: None,
        tool_calls: None,
        tool_call_id: None,
        reasoning_content: None,
        refusal: None,
    };
    let mut out: Vec<Message> = Vec::new();
    let mut pending: Vec<String> = Vec::new();
    let mut leading = true;
    for m in messages {
        let mut m = m.clone();
        if m.role == Role::Developer {
            m.role = Role::System;
        }
        for c in m.tool_calls.iter_mut().flatten() {
            if !fits(&c.id) {
                c.id = short_id(&c.id);
            }
        }
        if let Some(id) = m.tool_call_id.as_mut().filter(|id| !fits(id)) {
            *id = short_id(id);
        }
        if m.role == Role::System {
            if leading && system_role {
                match out.last_mut() {
                    Some(prev) => prev.content = Some(Content::Text(format!("{}\n\n{}", text(prev), text(&m)))),
                    None => out.push(plain(Role::System, text(&m))),
                }
            } else {
                pending.push(text(&m));
            }
            continue;
        }
        leading = false;
        if out.iter().all(|x| x.role == Role::System) && m.role != Role::User {
            out.push(plain(Role::User, std::mem::take(&mut pending).join("\n\n")));
        }
        if m.role == Role::User && !pending.is_empty() {
            m.content = Some(Content::Text(format!("{}\n\n{}", pending.join("\n\n"), text(&m))));
            pending.clear();
        }
        if let Some(prev) = out.last_mut() {
            let mergeable = |x: &Message| matches!(x.role, Role::User | Role::Assistant) && x.tool_calls.is_none();
            if prev.role == m.role && mergeable(prev) && mergeable(&m) {
                prev.content = Some(Content::Text(format!("{}\n\n{}", text(prev), text(&m))));
                continue;
            }
        }
        out.push(m);
    }
    if !pending.is_empty() {
        out.push(plain(Role::User, pending.join("\n\n")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use request::{Content, Message};

    fn msg(role: Role, t: &str) -> Message {
        Message {
            role,
            content: Some(Content::Text(t.into())),
            name: None,
            tool_calls: None,
            tool_call_id: None,
            reasoning_content: None,
            refusal: None,
        }
    }

    fn roles(v: &[Message]) -> Vec<(Role, String)> {
        v.iter().map(|m| (m.role, m.content.as_ref().unwrap().text())).collect()
    }

    #[test]
    fn adaptation_merges_what_strict_templates_reject() {
        let a = adapt_messages(
            &[
                msg(Role::System, "s1"),
                msg(Role::Developer, "s2"),
                msg(Role::User, "a"),
                msg(Role::User, "b"),
                msg(Role::System, "late"),
                msg(Role::Assistant, "x"),
                msg(Role::Assistant, "y"),
                msg(Role::User, "c"),
            ],
            true,
        );
        assert_eq!(
            roles(&a),
            vec![
                (Role::System, "s1\n\ns2".into()),
                (Role::User, "a\n\nb".into()),
                (Role::Assistant, "x\n\ny".into()),
                (Role::User, "late\n\nc".into())
            ]
        );
        let b = adapt_messages(&[msg(Role::System, "s"), msg(Role::User, "a")], false);
        assert_eq!(roles(&b), vec![(Role::User, "s\n\na".into())]);
        let c = adapt_messages(&[msg(Role::Assistant, "hi"), msg(Role::User, "a")], true);
        assert_eq!(roles(&c), vec![(Role::User, "".into()), (Role::Assistant, "hi".into()), (Role::User, "a".into())]);
        // Tool-call ids: 9 alphanumerics, the same for a call and its result.
        let mut call = msg(Role::Assistant, "");
        call.tool_calls = Some(vec![request::ToolCall {
            id: "call_abc".into(),
            kind: "function".into(),
            function: request::FunctionCall { name: "f".into(), arguments: "{}".into() },
        }]);
        let mut result = msg(Role::Tool, "42");
        result.tool_call_id = Some("call_abc".into());
        let d = adapt_messages(&[msg(Role::User, "q"), call, result], true);
        let id = &d[1].tool_calls.as_ref().unwrap()[0].id;
        assert!(id.len() == 9 && id.bytes().all(|b| b.is_ascii_alphanumeric()), "{id}");
        assert_eq!(d[2].tool_call_id.as_deref(), Some(id.as_str()));
    }

    #[test]
    fn utf8_hold_back_keeps_incomplete_sequences_and_stop_prefixes() {
        assert_eq!(complete_utf8_len(b"ab"), 2);
        assert_eq!(complete_utf8_len("é".as_bytes()), 2);
        assert_eq!(complete_utf8_len(&"aé".as_bytes()[..2]), 1);
        assert_eq!(complete_utf8_len(&"a😀".as_bytes()[..4]), 1);
        assert_eq!(complete_utf8_len(b"a\x80\x80\x80\x80"), 5); // invalid, not incomplete: shown (replaced)
        assert_eq!(visible_len(b"hello END", &["ENDS".into()]), 6);
        assert_eq!(visible_len(b"hello EN", &["ENDS".into()]), 6);
        assert_eq!(visible_len(b"hello", &["ENDS".into()]), 5);
    }
}
