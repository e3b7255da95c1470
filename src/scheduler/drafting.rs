//! Speculative decoding's drafter joins the scheduler: the scheduler makes it and owns it. The
//! n-gram types read the conversation only; a draft model (`draft-simple`) gets its context here,
//! through the same path as the scheduler's own (its parameters, the guarded init that turns a
//! lost RPC server into an error, compute threads that sleep while idle and a draft that takes its
//! threads from the process's budget), and llama.cpp's vocabulary check reads this scheduler's
//! context without its pointer leaving the scheduler.

use super::shared::SchedConfig;
use crate::backend;
use crate::cost::Costs;
use crate::error::{Error, ErrorCode, Result};
use crate::model::Model;
use crate::shim::SpecDrafter;
use crate::speculate::Drafters;
use crate::sys;
use crate::threads::ComputePool;
use std::sync::Arc;

/// What drafts for a scheduler's requests.
pub enum Proposer {
    /// One of llama.cpp's n-gram types, over n-grams of `ngram_size` tokens (0: its default).
    SelfDrafting { kind: String, ngram_size: u16 },
    /// A smaller model of the same vocabulary, loaded by the caller.
    Model(Arc<Model>),
}

/// A scheduler's drafter: who proposes, for how many requests at once, and the draft lengths.
pub struct DraftPlan {
    pub proposer: Proposer,
    pub lanes: usize,
    pub draft_max: usize,
    pub draft_min: usize,
    /// Draft lengths chosen by the scheduler's cost model (false: every draft verified whole).
    pub costed: bool,
}

/// The drafter of `plan` for a scheduler of `config` whose context is `ctx_tgt`. Refused
/// (`invalid_argument`) for a draft model whose vocabulary is not the target's.
///
/// # Safety
/// `ctx_tgt` is the scheduler's live context (read for its model during the call only).
pub(super) unsafe fn open(
    plan: DraftPlan,
    config: &SchedConfig,
    ctx_tgt: *const sys::llama_context,
    costs: Arc<Costs>,
) -> Result<Drafters> {
    let lanes = plan.lanes.max(1);
    let d = match plan.proposer {
        Proposer::SelfDrafting { kind, ngram_size } => {
            Drafters::new(&kind, ngram_size, lanes, plan.draft_max, plan.draft_min)?
        }
        Proposer::Model(model) => {
            let context = DraftContext::new(model, config, lanes)?;
            // SAFETY: the live target context (caller), read for its model; the draft context is
            // live and is kept by the drafters after the drafter.
            let drafter = unsafe { SpecDrafter::new_draft(ctx_tgt, context.ctx, lanes, plan.draft_max)? };
            let threads = config.n_threads;
            Drafters::with_model(drafter, Box::new(context), threads, lanes, plan.draft_max, plan.draft_min)
        }
    };
    Ok(if plan.costed { d.costed(costs) } else { d })
}

/// A draft model's context: `lanes` sequences over the scheduler's cells and batch, the KV types
/// and flash attention of the scheduler's, and its own compute threads (sleeping when idle: the
/// target's decode needs the cores between drafts).
struct DraftContext {
    ctx: *mut sys::llama_context,
    pool: Option<ComputePool>,
    uses_rpc: bool,
    /// The draft model, alive until its context is freed (declared last: dropped after it).
    _model: Arc<Model>,
}

// SAFETY: the context is only used by the drafter that decodes in it, under the drafter's lock;
// the handle itself is only moved and dropped.
unsafe impl Send for DraftContext {}
// SAFETY: as above: nothing reads the handle through a shared reference.
unsafe impl Sync for DraftContext {}

impl DraftContext {
    fn new(model: Arc<Model>, config: &SchedConfig, lanes: usize) -> Result<DraftContext> {
        // SAFETY: default params adjusted; a live model.
        let ctx = unsafe {
            let mut cp = sys::llama_context_default_params();
            cp.n_ctx = config.n_ctx;
            cp.n_batch = config.n_batch;
            cp.n_ubatch = config.n_batch.min(512);
            cp.n_seq_max = lanes as u32;
            cp.kv_unified = true;
            cp.n_threads = config.n_threads as i32;
            cp.n_threads_batch = config.n_threads as i32;
            cp.no_perf = true;
            config.backend.apply(&mut cp);
            backend::init_context(model.raw(), cp)?
        };
        if ctx.is_null() {
            return Err(Error::new(
                ErrorCode::ContextCreateFailed,
                format!(
                    "llama.cpp could not create the draft model's context (n_ctx={}, {lanes} sequences)",
                    config.n_ctx
                ),
            ));
        }
        // SAFETY: a live context; the pool is freed after it (Drop).
        let pool = unsafe { ComputePool::attach(ctx, config.n_threads, 0) };
        Ok(DraftContext { ctx, pool, uses_rpc: model.uses_rpc, _model: model })
    }
}

impl Drop for DraftContext {
    fn drop(&mut self) {
        // A context with layers on RPC servers is leaked as the scheduler's is (backend::must_leak).
        if backend::must_leak(self.uses_rpc) {
            return;
        }
        // SAFETY: made in DraftContext::new, freed once, after the drafter that used it (the
        // drafters drop their drafter first) and before its model and its threads.
        unsafe { sys::llama_free(self.ctx) };
        if let Some(pool) = self.pool.take() {
            pool.free();
        }
    }
}
