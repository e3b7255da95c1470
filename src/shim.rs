//! Safe wrappers over native/shim.h, and the one place a shim status becomes an llb error
//! ([`check`] for calls on the host's inputs, [`check_llb`] for calls on what llb built).
//! Templates, probes, parsers, sampler apply/accept and the test switches call the shim only
//! through this module; llama.cpp's grammar sampler (src/grammar/llama.rs) makes its own
//! construction and forced-text calls, mapped by `check`/`check_llb` (docs/STYLE.md §4).

use crate::error::{Error, ErrorCode, Result};
use crate::gguf::GgufHeader;
use crate::sys;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::ffi::{CStr, CString};
use std::os::raw::c_char;
use std::ptr;

/// Whose inputs a failed shim call was given, which decides the error code it becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Inputs {
    /// The host's: a file, a template, a request's messages or tools. The status names the code
    /// (`io_error`, `not_a_gguf`, `template_error`, `invalid_argument`; `internal` otherwise).
    Host,
    /// llb's own: a sampler chain or grammar it built, a token it sampled. Any failure is llb's
    /// bug or llama.cpp's, `internal`, whatever the status.
    Llb,
}

/// The error code of a failed shim call: the one mapping of shim statuses to llb's codes.
fn error_code(status: sys::llb_shim_status, inputs: Inputs) -> ErrorCode {
    match (inputs, status) {
        (Inputs::Llb, _) => ErrorCode::Internal,
        (Inputs::Host, sys::LLB_SHIM_IO) => ErrorCode::IoError,
        (Inputs::Host, sys::LLB_SHIM_NOT_GGUF) => ErrorCode::NotAGguf,
        (Inputs::Host, sys::LLB_SHIM_TEMPLATE | sys::LLB_SHIM_PARSE) => ErrorCode::TemplateError,
        (Inputs::Host, sys::LLB_SHIM_INVALID) => ErrorCode::InvalidArgument,
        (Inputs::Host, _) => ErrorCode::Internal,
    }
}

fn status_result(status: sys::llb_shim_status, err: *mut c_char, what: &str, inputs: Inputs) -> Result<()> {
    if status == sys::LLB_SHIM_OK {
        return Ok(());
    }
    let msg = take_string(err).unwrap_or_else(|| format!("{what} failed"));
    Err(Error::new(error_code(status, inputs), msg))
}

/// A shim status and message as an llb error, for a call on the host's inputs (templates,
/// files, requests): the status names the code. `err` (the shim's message, or NULL) is released.
pub(crate) fn check(status: sys::llb_shim_status, err: *mut c_char, what: &str) -> Result<()> {
    status_result(status, err, what, Inputs::Host)
}

/// As [`check`], for a call on what llb built itself (sampler chains, grammars, sampled tokens):
/// every failure is `internal`.
pub(crate) fn check_llb(status: sys::llb_shim_status, err: *mut c_char, what: &str) -> Result<()> {
    status_result(status, err, what, Inputs::Llb)
}

/// `llama_sampler_apply` on `cur`, exceptions caught by the shim; a failure is `internal`.
///
/// # Safety
/// `sampler` is a live sampler; `cur.data` points to `cur.size` candidates alive for the call.
pub(crate) unsafe fn sampler_apply(
    sampler: *mut sys::llama_sampler,
    cur: &mut sys::llama_token_data_array,
    what: &str,
) -> Result<()> {
    let mut err: *mut c_char = ptr::null_mut();
    // SAFETY: the caller's sampler and candidates; err is a valid out-pointer.
    let st = unsafe { sys::llb_shim_sampler_apply(sampler, cur, &mut err) };
    check_llb(st, err, what)
}

/// `llama_sampler_accept` of `token`, exceptions caught by the shim; a failure is `internal`.
///
/// # Safety
/// `sampler` is a live sampler.
pub(crate) unsafe fn sampler_accept(sampler: *mut sys::llama_sampler, token: sys::llama_token, what: &str) -> Result<()> {
    let mut err: *mut c_char = ptr::null_mut();
    // SAFETY: the caller's sampler; err is a valid out-pointer.
    let st = unsafe { sys::llb_shim_sampler_accept(sampler, token, &mut err) };
    check_llb(st, err, what)
}

/// Takes ownership of a shim-allocated string.
fn take_string(p: *mut c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: the shim returns NUL-terminated malloc'd strings, released exactly once here.
    let s = unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
    // SAFETY: p came from the shim and is not used after this.
    unsafe { sys::llb_shim_string_free(p) };
    Some(s)
}

fn take_json<T: for<'de> Deserialize<'de>>(p: *mut c_char, what: &str) -> Result<T> {
    let text = take_string(p).ok_or_else(|| Error::new(ErrorCode::Internal, format!("{what}: no output")))?;
    serde_json::from_str(&text).map_err(|e| Error::new(ErrorCode::Internal, format!("{what}: bad shim JSON: {e}")))
}

fn cstring(s: &str, what: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::new(ErrorCode::InvalidArgument, format!("{what} contains a NUL byte")))
}

/// Routes llama.cpp's own logging: on with `verbose`, else dropped.
pub fn set_logging(verbose: bool) {
    // SAFETY: no pointers; the shim catches everything.
    unsafe { sys::llb_shim_set_logging(verbose as i32) }
}

/// The result of llama.cpp's caps probe on a model's templates.
#[derive(Debug, Clone, Deserialize)]
pub struct Probe {
    pub caps: Map<String, Value>,
    pub caps_source: String,
    pub has_tool_use_template: bool,
    pub chat_template: String,
    pub chat_format: Option<String>,
    pub tool_parser_error: Option<String>,
    /// The BOS/EOS texts the templates render with.
    pub bos_token: String,
    pub eos_token: String,
}

impl Probe {
    fn cap(&self, key: &str) -> bool {
        self.caps.get(key).and_then(Value::as_bool).unwrap_or(false)
    }

    /// The gate: the template can describe tools and render tool calls.
    pub fn supports_tools(&self) -> bool {
        self.cap("supports_tools") && self.cap("supports_tool_calls")
    }

    /// The caps probe of a header's templates, run in a child process bounded by `limits`
    /// (native/isolate.cpp): a template that crashes, hangs or exhausts memory there is a
    /// `template_error`, and the host process is untouched.
    pub(crate) fn isolated(h: &GgufHeader, limits: ProbeLimits) -> Result<Probe> {
        let s = HeaderStrings::new(h)?;
        let mut out: *mut c_char = ptr::null_mut();
        let mut err: *mut c_char = ptr::null_mut();
        // SAFETY: every CString outlives the call; out/err are valid out-pointers.
        let st = unsafe {
            sys::llb_shim_probe_isolated(
                s.ptr(0),
                s.ptr(1),
                s.ptr(2),
                s.ptr(3),
                h.add_bos as i32,
                h.add_eos as i32,
                limits.timeout_ms,
                limits.mem_limit_mb,
                &mut out,
                &mut err,
            )
        };
        check(st, err, "probing the chat template")?;
        take_json(out, "caps probe")
    }

    pub fn supports_parallel_tool_calls(&self) -> bool {
        self.cap("supports_parallel_tool_calls")
    }
}

/// Bounds of the isolated caps probe. Real templates probe in 2-10 ms and a few MB.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProbeLimits {
    /// Wall time of the child process (default 10 s).
    pub timeout_ms: u32,
    /// Its address space (default 1 GiB).
    pub mem_limit_mb: u32,
}

impl Default for ProbeLimits {
    fn default() -> Self {
        ProbeLimits { timeout_ms: 10_000, mem_limit_mb: 1024 }
    }
}

impl ProbeLimits {
    /// The defaults, with `LLB_PROBE_TIMEOUT_MS` / `LLB_PROBE_MEMORY_MB` when set (tests, slow hosts).
    pub fn from_env() -> ProbeLimits {
        let var = |k: &str, d: u32| std::env::var(k).ok().and_then(|v| v.parse().ok()).filter(|v| *v > 0).unwrap_or(d);
        let d = ProbeLimits::default();
        ProbeLimits {
            timeout_ms: var("LLB_PROBE_TIMEOUT_MS", d.timeout_ms),
            mem_limit_mb: var("LLB_PROBE_MEMORY_MB", d.mem_limit_mb),
        }
    }
}

/// A header's template strings as C strings: default, tool_use, BOS, EOS.
struct HeaderStrings([Option<CString>; 4]);

impl HeaderStrings {
    fn new(h: &GgufHeader) -> Result<HeaderStrings> {
        let opt = |s: &Option<String>, what| s.as_deref().map(|s| cstring(s, what)).transpose();
        Ok(HeaderStrings([
            opt(&h.chat_template, "chat template")?,
            opt(&h.tool_use_template, "tool_use template")?,
            opt(&h.bos_text, "BOS text")?,
            opt(&h.eos_text, "EOS text")?,
        ]))
    }

    fn ptr(&self, i: usize) -> *const c_char {
        self.0[i].as_ref().map_or(ptr::null(), |c| c.as_ptr())
    }
}

/// A model's chat templates (default + optional `tool_use` variant), owned.
pub struct Templates {
    raw: *mut sys::llb_shim_templates,
}

// SAFETY: the templates are immutable after construction and the shim's functions on them take
// `const` pointers; llama.cpp's Jinja runtime keeps no global mutable state.
unsafe impl Send for Templates {}
// SAFETY: as for Send: every method takes `&self` and only reads the templates.
unsafe impl Sync for Templates {}

impl Templates {
    /// As `common_chat_templates_init(model, "")`, from header strings. In-process: only for
    /// templates already probed by [`Probe::isolated`] (or trusted ones, in tests).
    pub fn from_header(h: &GgufHeader) -> Result<Templates> {
        let s = HeaderStrings::new(h)?;
        let mut raw = ptr::null_mut();
        let mut err: *mut c_char = ptr::null_mut();
        // SAFETY: every CString outlives the call; raw/err are valid out-pointers.
        let st = unsafe {
            sys::llb_shim_templates_from_strings(
                s.ptr(0),
                s.ptr(1),
                s.ptr(2),
                s.ptr(3),
                h.add_bos as i32,
                h.add_eos as i32,
                &mut raw,
                &mut err,
            )
        };
        check(st, err, "building the chat templates")?;
        Ok(Templates { raw })
    }

    /// `common_chat_templates_init(model, "")` on a loaded model.
    ///
    /// # Safety
    /// `model` must be a valid llama_model for the duration of the call.
    pub unsafe fn from_model(model: *const sys::llama_model) -> Result<Templates> {
        let mut raw = ptr::null_mut();
        let mut err: *mut c_char = ptr::null_mut();
        // SAFETY: caller guarantees model; raw/err are valid out-pointers.
        let st = unsafe { sys::llb_shim_templates_from_model(model, &mut raw, &mut err) };
        check(st, err, "building the chat templates")?;
        Ok(Templates { raw })
    }

    pub fn probe(&self) -> Result<Probe> {
        let mut out: *mut c_char = ptr::null_mut();
        let mut err: *mut c_char = ptr::null_mut();
        // SAFETY: self.raw is a live templates object; out/err are valid out-pointers.
        let st = unsafe { sys::llb_shim_templates_probe(self.raw, &mut out, &mut err) };
        check(st, err, "probing the chat template")?;
        take_json(out, "caps probe")
    }
}

/// One grammar trigger of the apply result (common_grammar_trigger_type numbering).
#[derive(Debug, Clone, Deserialize)]
pub struct Trigger {
    #[serde(rename = "type")]
    pub kind: i32,
    pub value: String,
}

pub const TRIGGER_TOKEN: i32 = 0;
pub const TRIGGER_WORD: i32 = 1;
pub const TRIGGER_PATTERN: i32 = 2;
pub const TRIGGER_PATTERN_FULL: i32 = 3;

/// common_chat_params: what llama.cpp's chat stack derives for one request.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatParams {
    pub prompt: String,
    pub format: i32,
    pub format_name: String,
    pub grammar: String,
    pub grammar_lazy: bool,
    pub grammar_triggers: Vec<Trigger>,
    pub preserved_tokens: Vec<String>,
    pub additional_stops: Vec<String>,
    pub generation_prompt: String,
    pub parser: String,
    pub supports_thinking: bool,
    pub thinking_start_tag: String,
    pub thinking_end_tag: String,
}

impl Templates {
    /// common_chat_templates_apply on `inputs` (see native/shim.h for the fields).
    pub fn apply(&self, inputs: &Value) -> Result<ChatParams> {
        let c = cstring(&inputs.to_string(), "apply inputs")?;
        let mut out: *mut c_char = ptr::null_mut();
        let mut err: *mut c_char = ptr::null_mut();
        // SAFETY: self.raw is live; c outlives the call; out/err are valid out-pointers.
        let st = unsafe { sys::llb_shim_templates_apply(self.raw, c.as_ptr(), &mut out, &mut err) };
        check(st, err, "applying the chat template")?;
        take_json(out, "apply")
    }
}

/// The tool-call section's grammar of a `required` parser (see native/shim.h); "" when the
/// parser has no trigger rule.
pub fn tool_section_grammar(parser: &str, tools: &Value) -> Result<String> {
    let p = cstring(parser, "parser")?;
    let t = cstring(&tools.to_string(), "tools")?;
    let mut out: *mut c_char = ptr::null_mut();
    let mut err: *mut c_char = ptr::null_mut();
    // SAFETY: both CStrings outlive the call; out/err are valid out-pointers.
    let st = unsafe { sys::llb_shim_tool_section_grammar(p.as_ptr(), t.as_ptr(), &mut out, &mut err) };
    check(st, err, "building the tool-call grammar")?;
    take_string(out).ok_or_else(|| Error::new(ErrorCode::Internal, "no grammar"))
}

/// A parsed assistant message.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
pub struct ParsedMsg {
    pub content: String,
    pub reasoning_content: String,
    pub tool_calls: Vec<ParsedCall>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
pub struct ParsedCall {
    pub name: String,
    pub arguments: String,
    pub id: String,
}

/// llama.cpp's output parser for one request.
pub struct Parser {
    raw: *mut sys::llb_shim_parser,
}

// SAFETY: the parser is immutable after construction; parse takes a const pointer.
unsafe impl Send for Parser {}

/// The generation prompt the parser is given. llama.cpp's DeepSeek-V3.2 parser at the pin
/// (`common_chat_params_init_deepseek_v3_2`) opens with the literal `<｜Assistant｜>`, which the
/// template's generation prompt holds only after a user message: after a tool result it is
/// `"\n\n<think>"`, and every reply of such a turn (the second turn of every agent loop) failed
/// to parse at position 0 (issue 24). That parser gets `<｜Assistant｜>` before the rest.
fn parser_generation_prompt(params: &ChatParams) -> String {
    const GEN: &str = "<｜Assistant｜>";
    let gp = &params.generation_prompt;
    if params.parser.contains("｜DSML｜") && params.parser.contains(GEN) && !gp.starts_with(GEN) {
        return format!("{GEN}{}", gp.trim_start());
    }
    gp.clone()
}

impl Parser {
    pub fn new(params: &ChatParams, reasoning_format: &str, parse_tool_calls: bool) -> Result<Parser> {
        let parser = cstring(&params.parser, "parser")?;
        let gp = cstring(&parser_generation_prompt(params), "generation prompt")?;
        let rf = cstring(reasoning_format, "reasoning_format")?;
        let mut raw = ptr::null_mut();
        let mut err: *mut c_char = ptr::null_mut();
        // SAFETY: every CString outlives the call; raw/err are valid out-pointers.
        let st = unsafe {
            sys::llb_shim_parser_new(
                params.format,
                parser.as_ptr(),
                gp.as_ptr(),
                rf.as_ptr(),
                parse_tool_calls as i32,
                &mut raw,
                &mut err,
            )
        };
        check(st, err, "building the output parser")?;
        Ok(Parser { raw })
    }

    /// Parses the generated text (`partial` while streaming).
    pub fn parse(&self, text: &str, partial: bool) -> Result<ParsedMsg> {
        let mut out: *mut c_char = ptr::null_mut();
        let mut err: *mut c_char = ptr::null_mut();
        // SAFETY: text is valid for len bytes; out/err are valid out-pointers.
        let st = unsafe {
            sys::llb_shim_parser_parse(
                self.raw,
                text.as_ptr() as *const c_char,
                text.len(),
                partial as i32,
                &mut out,
                &mut err,
            )
        };
        check(st, err, "parsing the output")?;
        take_json(out, "parse")
    }
}

impl Drop for Parser {
    fn drop(&mut self) {
        // SAFETY: raw came from the shim and is freed once.
        unsafe { sys::llb_shim_parser_free(self.raw) }
    }
}

impl Drop for Templates {
    fn drop(&mut self) {
        // SAFETY: raw came from the shim and is freed once.
        unsafe { sys::llb_shim_templates_free(self.raw) }
    }
}

/// Trigger patterns as a C array of strings, owned for the length of a shim call. The patterns
/// come from llama.cpp's own templates; one holding a NUL becomes empty.
struct CStrings {
    _owned: Vec<CString>,
    ptrs: Vec<*const c_char>,
}

impl CStrings {
    fn new(strings: &[String]) -> CStrings {
        let owned: Vec<CString> = strings.iter().map(|p| CString::new(p.as_str()).unwrap_or_default()).collect();
        let ptrs = owned.iter().map(|c| c.as_ptr()).collect();
        CStrings { _owned: owned, ptrs }
    }

    /// Valid while `self` lives (the shim reads the strings, never writes them).
    fn as_ptr(&self) -> *mut *const c_char {
        self.ptrs.as_ptr() as *mut *const c_char
    }

    fn len(&self) -> usize {
        self.ptrs.len()
    }
}

/// llama.cpp's grammar sampler for the GBNF text `gbnf` (lazy with its trigger patterns and
/// tokens, or strict). A grammar llama.cpp
/// cannot parse, or one holding a NUL, comes from the request: `invalid_argument`.
///
/// # Safety
/// `vocab` must be valid for the sampler's lifetime.
pub unsafe fn grammar_sampler(
    vocab: *const sys::llama_vocab,
    gbnf: &str,
    lazy: bool,
    patterns: &[String],
    tokens: &[sys::llama_token],
) -> Result<*mut sys::llama_sampler> {
    let gbnf = CString::new(gbnf).map_err(|_| {
        // Only a request's schema (a `pattern` with a raw NUL) can put one there.
        Error::new(
            ErrorCode::InvalidArgument,
            "the request's tool schemas or response_format give a grammar holding a NUL character",
        )
    })?;
    let pats = CStrings::new(patterns);
    let mut grammar = ptr::null_mut();
    let mut err: *mut c_char = ptr::null_mut();
    // SAFETY: every pointer outlives the call; `grammar` is a valid out-pointer.
    let st = unsafe {
        sys::llb_shim_grammar_new(
            vocab,
            gbnf.as_ptr(),
            lazy as i32,
            pats.as_ptr(),
            pats.len(),
            tokens.as_ptr(),
            tokens.len(),
            &mut grammar,
            &mut err,
        )
    };
    if st == sys::LLB_SHIM_INVALID {
        // The grammar comes from the request's tool schemas and response_format: one llama.cpp
        // cannot parse is the request's to fix, not an internal error.
        let e = check(st, err, "grammar").unwrap_err();
        return Err(Error::new(
            ErrorCode::InvalidArgument,
            format!("the request's tool schemas or response_format give a grammar llama.cpp cannot parse: {}", e.message),
        ));
    }
    check_llb(st, err, "building the grammar sampler")?;
    Ok(grammar)
}

/// The text a grammar sampler forces next, at most `max_bytes` (see llb_shim_grammar_forced).
///
/// # Safety
/// `sampler` must be a live grammar sampler made by [`grammar_sampler`].
pub unsafe fn grammar_forced(sampler: *mut sys::llama_sampler, max_bytes: usize) -> Result<String> {
    let mut text: *mut c_char = ptr::null_mut();
    let mut err: *mut c_char = ptr::null_mut();
    // SAFETY: per the contract; exceptions are caught by the shim.
    let st = unsafe { sys::llb_shim_grammar_forced(sampler, max_bytes, &mut text, &mut err) };
    check_llb(st, err, "forced grammar text")?;
    // SAFETY: on success the shim returns a NUL-terminated malloc'd string, freed here once.
    let out = unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned();
    // SAFETY: `text` came from the shim and is not used after this.
    unsafe { sys::llb_shim_string_free(text) };
    Ok(out)
}

/// Compiled trigger patterns of a lazy grammar (llama.cpp's trigger semantics: a pattern
/// matches at the end of the text so far, its first group marks where constrained text starts).
pub struct TriggerPatterns {
    raw: *mut sys::llb_shim_triggers,
}

// SAFETY: the compiled patterns are immutable after construction and only read by find.
unsafe impl Send for TriggerPatterns {}

impl TriggerPatterns {
    pub fn new(patterns: &[String]) -> Result<TriggerPatterns> {
        let pats = CStrings::new(patterns);
        let mut out = ptr::null_mut();
        let mut err = ptr::null_mut();
        // SAFETY: every pointer outlives the call; `out` is a valid out-pointer.
        let st = unsafe { sys::llb_shim_triggers_new(pats.as_ptr(), pats.len(), &mut out, &mut err) };
        check(st, err, "the grammar's trigger patterns")?;
        Ok(TriggerPatterns { raw: out })
    }

    /// Where the constrained text starts in `text`, when a pattern matches.
    pub fn find(&self, text: &[u8]) -> Result<Option<usize>> {
        let mut start = -1i64;
        let mut err = ptr::null_mut();
        // SAFETY: `raw` is live (freed in Drop); text is valid for its length.
        let st = unsafe { sys::llb_shim_triggers_find(self.raw, text.as_ptr() as *const _, text.len(), &mut start, &mut err) };
        check(st, err, "matching the grammar's trigger patterns")?;
        Ok((start >= 0).then_some(start as usize))
    }
}

impl Drop for TriggerPatterns {
    fn drop(&mut self) {
        // SAFETY: made by llb_shim_triggers_new, freed once here.
        unsafe { sys::llb_shim_triggers_free(self.raw) };
    }
}

/// llama.cpp's self-drafting speculative decoding (common_speculative, the n-gram types): drafts
/// for `lanes` requests at a time, one lane each. Not thread-safe: the caller locks.
pub struct SpecDrafter {
    raw: *mut sys::llb_shim_spec,
}

// SAFETY: the drafter's state is only touched through &mut self (its owner locks it).
unsafe impl Send for SpecDrafter {}

impl SpecDrafter {
    /// A drafter of llama.cpp's type `kind` (one of the n-gram types) for `lanes` lanes, looking
    /// up n-grams of `ngram_size` tokens (0: llama.cpp's default).
    pub fn new(kind: &str, lanes: usize, ngram_size: u16) -> Result<SpecDrafter> {
        let name = cstring(kind, "the speculative type")?;
        let mut out = ptr::null_mut();
        let mut err = ptr::null_mut();
        // SAFETY: `name` outlives the call; `out` is a valid out-pointer.
        let st = unsafe { sys::llb_shim_spec_new(name.as_ptr(), lanes as u32, ngram_size, &mut out, &mut err) };
        check(st, err, "the speculative drafter")?;
        Ok(SpecDrafter { raw: out })
    }

    /// A `draft-simple` drafter for `lanes` lanes: the model of `ctx_dft` (a context with a
    /// sequence per lane) proposes up to `n_max` tokens. Refused (`invalid_argument`) when its
    /// vocabulary is not the target's (llama.cpp's check).
    ///
    /// # Safety
    /// `ctx_tgt` is the target's live context (read for its model only, during this call);
    /// `ctx_dft` is a live context, used by nothing else, that outlives the drafter.
    pub unsafe fn new_draft(
        ctx_tgt: *const sys::llama_context,
        ctx_dft: *mut sys::llama_context,
        lanes: usize,
        n_max: usize,
    ) -> Result<SpecDrafter> {
        let mut out = ptr::null_mut();
        let mut err = ptr::null_mut();
        let n_max = n_max.min(i32::MAX as usize) as i32;
        // SAFETY: live contexts (caller); `out` is a valid out-pointer.
        let st = unsafe { sys::llb_shim_spec_new_draft(ctx_tgt, ctx_dft, lanes as u32, n_max, &mut out, &mut err) };
        check(st, err, "the draft model")?;
        Ok(SpecDrafter { raw: out })
    }

    /// Starts `lane`'s generation after `prompt`.
    pub fn begin(&mut self, lane: usize, prompt: &[sys::llama_token]) -> Result<()> {
        let mut err = ptr::null_mut();
        // SAFETY: `raw` is live; `prompt` is valid for its length.
        let st = unsafe { sys::llb_shim_spec_begin(self.raw, lane as u32, prompt.as_ptr(), prompt.len(), &mut err) };
        check_llb(st, err, "starting a speculative draft")
    }

    /// Appends `tokens` (the reply's tokens since `lane`'s last ask) to its conversation and asks
    /// for at most `n_max` tokens to follow them, drafted by the next [`SpecDrafter::run`].
    pub fn ask(&mut self, lane: usize, tokens: &[sys::llama_token], n_max: usize) -> Result<()> {
        let mut err = ptr::null_mut();
        let n_max = n_max.clamp(1, i32::MAX as usize) as i32;
        // SAFETY: `raw` is live; `tokens` is valid for its length.
        let st = unsafe { sys::llb_shim_spec_ask(self.raw, lane as u32, tokens.as_ptr(), tokens.len(), n_max, &mut err) };
        check_llb(st, err, "asking for a draft")
    }

    /// Drafts for every lane asked since the last run, at once (a draft model's decodes on
    /// `n_threads` threads; 0 keeps its context's count).
    pub fn run(&mut self, n_threads: usize) -> Result<()> {
        let mut err = ptr::null_mut();
        // SAFETY: `raw` is live.
        let st = unsafe { sys::llb_shim_spec_run(self.raw, n_threads.min(i32::MAX as usize) as i32, &mut err) };
        check_llb(st, err, "drafting tokens")
    }

    /// `lane`'s draft from the last run (at most `n_max` tokens; empty: no draft).
    pub fn take(&mut self, lane: usize, n_max: usize) -> Result<Vec<sys::llama_token>> {
        let mut out = vec![0 as sys::llama_token; n_max];
        let mut n = 0usize;
        let mut err = ptr::null_mut();
        // SAFETY: `raw` is live; `out` is valid for n_max tokens.
        let st = unsafe { sys::llb_shim_spec_take(self.raw, lane as u32, out.as_mut_ptr(), n_max, &mut n, &mut err) };
        check_llb(st, err, "reading a draft")?;
        out.truncate(n);
        Ok(out)
    }

    /// The model accepted `n` tokens of `lane`'s last draft.
    pub fn accept(&mut self, lane: usize, n: usize) -> Result<()> {
        let mut err = ptr::null_mut();
        // SAFETY: `raw` is live.
        let st = unsafe { sys::llb_shim_spec_accept(self.raw, lane as u32, n.min(u16::MAX as usize) as u16, &mut err) };
        check_llb(st, err, "accepting a draft")
    }
}

impl Drop for SpecDrafter {
    fn drop(&mut self) {
        // SAFETY: made by llb_shim_spec_new, freed once here.
        unsafe { sys::llb_shim_spec_free(self.raw) };
    }
}

/// Test switch (src/fault.rs): the next shim call on this thread throws a C++ exception inside
/// the shim's guard.
pub(crate) fn testing_throw_next() {
    // SAFETY: sets a thread-local flag in the shim; no pointers.
    unsafe { sys::llb_shim_testing_throw_next() }
}

/// Test switch (src/fault.rs): disarms [`testing_throw_next`] on this thread.
pub(crate) fn testing_clear() {
    // SAFETY: clears a thread-local flag in the shim; no pointers.
    unsafe { sys::llb_shim_testing_clear() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_maps_to_its_code_for_host_inputs_and_to_internal_for_llbs_own() {
        let host = [
            (sys::LLB_SHIM_IO, ErrorCode::IoError),
            (sys::LLB_SHIM_NOT_GGUF, ErrorCode::NotAGguf),
            (sys::LLB_SHIM_TEMPLATE, ErrorCode::TemplateError),
            (sys::LLB_SHIM_PARSE, ErrorCode::TemplateError),
            (sys::LLB_SHIM_INVALID, ErrorCode::InvalidArgument),
            (sys::LLB_SHIM_INTERNAL, ErrorCode::Internal),
        ];
        for (status, code) in host {
            assert_eq!(error_code(status, Inputs::Host), code, "status {status}");
            assert_eq!(error_code(status, Inputs::Llb), ErrorCode::Internal, "status {status}");
        }
        assert!(check(sys::LLB_SHIM_OK, ptr::null_mut(), "x").is_ok());
        let e = check_llb(sys::LLB_SHIM_INVALID, ptr::null_mut(), "sampling").unwrap_err();
        assert_eq!((e.code, e.message.as_str()), (ErrorCode::Internal, "sampling failed"));
    }
}
