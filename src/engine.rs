//! Engines and pools: the handles behind `llb_chat_*` and `llb_pool_*`.
//!
//! Both are a model's chat side ([`Prompter`]) over one scheduler ([`Scheduler`]: a llama
//! context whose sequences requests share) and a book of the model's replies for exact replay.
//! An engine is one conversation: one sequence, one request at a time (`busy` otherwise), events
//! to the callback given at creation. A pool serves many requests at once on `n_parallel`
//! sequences of one batched context, sharing prompt prefixes across them; each call brings its
//! own callback. Either way a request runs on its caller's thread ([`generate`]), and its events
//! are sent from there.

use crate::error::{bail, Result};
use crate::generate::Run;
use crate::model::{self, Model};
use crate::model_info;
use crate::prompt::Prompter;
use crate::request::{self, ChatRequest, EngineConfig};
use crate::scheduler::{SchedConfig, Scheduler};
use crate::session::ReplyBook;
use crate::shim::{Probe, Templates};
use crate::sys;
use serde_json::Value;
use std::path::Path;
use std::sync::{Mutex, TryLockError};

pub use crate::response::random_id;
pub use crate::tokens::{piece, tokenize};

/// Receives events (JSON); returns false to cancel the running operation.
pub type EventSink = Box<dyn Fn(&Value) -> bool + Send + Sync>;

const DEFAULT_N_CTX: u32 = 4096;
/// ggml's thread limit (`GGML_MAX_N_THREADS`): more makes ggml allocate and spawn per thread.
const MAX_THREADS: i32 = 512;
/// The physical batch (`n_ubatch`) is `n_batch` up to this.
const MAX_UBATCH: u32 = 512;

/// Refuses an `n_ctx` whose KV cache alone (keys and values of the configured types for every
/// layer, the usual layout; an estimate) would not fit in the machine's memory, instead of
/// letting llama.cpp try to allocate and clear it.
fn check_context_memory(model: &Model, n_ctx: u32, cp: &crate::backend::ContextParams) -> Result<()> {
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
    let per_token = (cp.kv_bytes_per_element() * (n_layer * (n_embd / n_head) * n_head_kv) as f64) as u64;
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

/// A pool's `n_parallel` when the config gives none.
const DEFAULT_N_PARALLEL: u32 = 4;
/// Sequences per running request a pool keeps (the rest hold idle conversations for reuse).
const SLOTS_PER_PARALLEL: usize = 4;
/// llama.cpp's limit on sequences (`LLAMA_MAX_SEQ`).
const MAX_SEQ_IDS: usize = 256;
/// Waiting requests per running one a pool queues when the config gives no `max_queue`.
const DEFAULT_QUEUE_PER_PARALLEL: u32 = 16;

/// What an engine and a pool are made of. Field order matters for Drop: the scheduler (and its
/// context) goes before the prompter, which holds the model.
struct Chat {
    sched: Scheduler,
    prompter: Prompter,
    book: ReplyBook,
    model_name: String,
    seed: Option<u64>,
    deterministic_call_syntax: bool,
    jump_forward: bool,
    /// The most tokens one sequence may hold.
    max_seq: usize,
}

fn validate(config: &EngineConfig, pool: bool) -> Result<()> {
    if config.n_ctx == Some(0) || config.n_batch == Some(0) {
        bail!(InvalidArgument, "n_ctx and n_batch must be positive");
    }
    if config.reasoning_budget.is_some_and(|b| b < -1) {
        bail!(InvalidArgument, "field `reasoning_budget`: must be -1 (unlimited), 0 (no thinking) or a number of tokens");
    }
    if config.n_threads.is_some_and(|t| t <= 0) {
        bail!(InvalidArgument, "field `n_threads`: must be positive");
    }
    if let Some(t) = config.n_threads.filter(|t| *t > MAX_THREADS) {
        bail!(InvalidArgument, "field `n_threads`: {t} is more than ggml's limit of {MAX_THREADS} threads");
    }
    if config.thread_poll.is_some_and(|p| p > 100) {
        bail!(InvalidArgument, "field `thread_poll`: must be 0 to 100");
    }
    match config.n_parallel {
        Some(n) if pool && (n == 0 || n as usize > MAX_SEQ_IDS / 2) => {
            bail!(InvalidArgument, "field `n_parallel`: must be 1 to {}", MAX_SEQ_IDS / 2)
        }
        Some(n) if !pool && n != 1 => bail!(
            InvalidArgument,
            "field `n_parallel`: an engine (llb_chat_create) runs one request at a time; open a pool \
             (llb_pool_create) to serve {n} at once"
        ),
        _ => {}
    }
    if config.max_queue.is_some() && !pool {
        bail!(InvalidArgument, "field `max_queue`: only pools (llb_pool_create) queue requests");
    }
    Ok(())
}

impl Chat {
    /// Opens the model's chat side and its context. Refuses non-tool models
    /// (`tools_unsupported`) before loading weights or allocating a KV cache.
    fn open(config: &EngineConfig, pool: bool) -> Result<Chat> {
        crate::init_backend();
        validate(config, pool)?;
        let (load, ctx_params) = crate::backend::resolve(config)?;
        let path = Path::new(&config.model_path).to_path_buf();
        let ins = model_info::inspect(&path)?;
        if !ins.probe.supports_tools() {
            return Err(model_info::tools_unsupported(&path, &ins.probe));
        }
        let n_ctx_train = ins.header.n_ctx_train.filter(|n| *n > 0).map(|n| n.min(u32::MAX as i64) as u32);
        let n_parallel = if pool { config.n_parallel.unwrap_or(DEFAULT_N_PARALLEL) } else { 1 };
        let (n_ctx, max_seq) = context_size(config.n_ctx, n_ctx_train, n_parallel)?;
        let n_batch = config.n_batch.unwrap_or(512).min(n_ctx);
        let model = model::acquire_with(&path, &load)?;
        model.check_kv_types(&ctx_params)?;
        check_context_memory(&model, n_ctx, &ctx_params)?;
        // SAFETY: the model is alive for the call.
        let templates = unsafe { Templates::from_model(model.raw()) }?;
        crate::fault::site("create");
        let n_slots = if pool { (n_parallel as usize * SLOTS_PER_PARALLEL).min(MAX_SEQ_IDS) } else { 1 };
        let sched = Scheduler::start(
            &model,
            SchedConfig {
                n_ctx,
                n_batch,
                // llama.cpp reserves logits for a whole physical batch (n_vocab × n_ubatch × 4 bytes:
                // 5 GB for a 152k vocabulary at 8192); larger physical batches gain nothing on a CPU.
                n_ubatch: n_batch.min(MAX_UBATCH),
                n_slots,
                n_parallel: n_parallel as usize,
                max_queue: config.max_queue.unwrap_or(n_parallel * DEFAULT_QUEUE_PER_PARALLEL) as usize,
                n_threads: config.n_threads.map_or(crate::threads::total(), |t| t as usize),
                adaptive_threads: config.adaptive_threads.unwrap_or(true),
                thread_poll: config.thread_poll.unwrap_or(0),
                backend: ctx_params,
            },
        )?;
        Ok(Chat {
            sched,
            prompter: Prompter::new(model, templates, ins.probe, config.chat_template_kwargs.clone())
                .with_reasoning_budget(config.reasoning_budget),
            book: ReplyBook::new(n_slots * 2),
            model_name: path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default(),
            seed: config.seed,
            deterministic_call_syntax: config.deterministic_call_syntax.unwrap_or(true),
            jump_forward: config.jump_forward.unwrap_or(true),
            max_seq: max_seq as usize,
        })
    }

    fn infer(&self, request_json: &str, emit: &dyn Fn(&Value) -> bool) -> Result<Value> {
        let req: ChatRequest = request::parse(request_json, "request")?;
        req.validate()?;
        let run = Run {
            prompter: &self.prompter,
            sched: &self.sched,
            book: &self.book,
            model_name: &self.model_name,
            default_seed: self.seed,
            deterministic_call_syntax: self.deterministic_call_syntax,
            jump_forward: self.jump_forward,
            max_seq: self.max_seq,
            emit,
        };
        run.run(&req)
    }
}

/// The context's size in tokens and the most one sequence may hold. An engine's `n_ctx` is its
/// conversation's (4096 by default, at most the training context: llb sets no RoPE scaling, so
/// more buys nothing and costs memory, up to terabytes for a u32). A pool's `n_ctx` is the KV
/// budget all its sequences share (by default 4096 per parallel request); one sequence still
/// holds at most the training context.
fn context_size(n_ctx: Option<u32>, n_ctx_train: Option<u32>, n_parallel: u32) -> Result<(u32, u32)> {
    let per_seq = DEFAULT_N_CTX.min(n_ctx_train.unwrap_or(DEFAULT_N_CTX));
    let train = n_ctx_train.unwrap_or(u32::MAX);
    Ok(match n_ctx {
        Some(n) if n_parallel == 1 && n > train => bail!(
            InvalidArgument,
            "field `n_ctx`: {n} is more than the {train} tokens of context the model was trained for"
        ),
        Some(n) => (n, n.min(train)),
        None => (per_seq.saturating_mul(n_parallel), per_seq),
    })
}

/// An engine: one conversation's context over a shared model.
pub struct Engine {
    chat: Chat,
    busy: Mutex<()>,
    events: Option<EventSink>,
}

impl Engine {
    /// Opens an engine. Refuses non-tool models (`tools_unsupported`) before loading weights or
    /// allocating a KV cache.
    pub fn create(config: EngineConfig, events: Option<EventSink>) -> Result<Engine> {
        Ok(Engine { chat: Chat::open(&config, false)?, busy: Mutex::new(()), events })
    }

    pub fn probe(&self) -> &Probe {
        self.chat.prompter.probe()
    }

    /// The model's chat side (templates, vocabulary, grammars): for benchmarks and tests.
    #[doc(hidden)]
    pub fn prompter(&self) -> &Prompter {
        &self.chat.prompter
    }

    /// Runs one chat completion. Returns `busy` at once if another thread is inside.
    pub fn infer(&self, request_json: &str) -> Result<Value> {
        let _guard = match self.busy.try_lock() {
            Ok(g) => g,
            Err(TryLockError::WouldBlock) => bail!(Busy, "this engine is running another request"),
            Err(TryLockError::Poisoned(p)) => {
                // A request panicked half way (caught at the C boundary): its sequence was
                // cleared when it left the scheduler; forget its replies too.
                self.busy.clear_poison();
                self.chat.book.clear();
                p.into_inner()
            }
        };
        let emit = |ev: &Value| self.events.as_ref().is_none_or(|f| f(ev));
        self.chat.infer(request_json, &emit)
    }
}

/// A pool: many requests at once on one batched context of one model.
pub struct Pool {
    chat: Chat,
}

impl Pool {
    /// Opens a pool (same gate and config as an engine, plus `n_parallel` and `max_queue`).
    pub fn create(config: EngineConfig) -> Result<Pool> {
        Ok(Pool { chat: Chat::open(&config, true)? })
    }

    pub fn probe(&self) -> &Probe {
        self.chat.prompter.probe()
    }

    /// Runs one chat completion, concurrently with the pool's other requests; `emit` receives
    /// this request's events on the calling thread.
    pub fn infer(&self, request_json: &str, emit: &dyn Fn(&Value) -> bool) -> Result<Value> {
        self.chat.infer(request_json, emit)
    }

    /// Sequences, what they hold, running and queued requests.
    pub fn stats(&self) -> Value {
        self.chat.sched.stats()
    }
}
