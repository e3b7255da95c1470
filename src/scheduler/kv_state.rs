//! One sequence's state out of a context and back (`llama_state_seq_*`): what the prompt cache
//! keeps of a conversation that leaves the context.

use crate::sys;

/// The state of sequence `seq` (its KV cells and positions), or None when llama.cpp gives none.
///
/// # Safety
/// `ctx` is a live context used by no other thread during the call.
pub(super) unsafe fn read(ctx: *mut sys::llama_context, seq: usize) -> Option<Vec<u8>> {
    // SAFETY: the caller's live context; `seq` is one of its sequences.
    let size = unsafe { sys::llama_state_seq_get_size_ext(ctx, seq as i32, 0) };
    if size == 0 {
        return None;
    }
    let mut buf = vec![0u8; size];
    // SAFETY: `buf` holds `size` bytes; llama.cpp writes at most that many (errors caught
    // inside llama_context::state_seq_get_data: 0).
    let n = unsafe { sys::llama_state_seq_get_data_ext(ctx, buf.as_mut_ptr(), size, seq as i32, 0) };
    (n > 0).then(|| {
        buf.truncate(n);
        buf
    })
}

/// Puts `state` (from [`read`]) into sequence `seq`, which llama.cpp empties first. False when
/// it refuses: another model's or layout's state, malformed bytes, or no room in the cache (the
/// sequence is then empty).
///
/// # Safety
/// As for [`read`].
pub(super) unsafe fn write(ctx: *mut sys::llama_context, seq: usize, state: &[u8]) -> bool {
    // SAFETY: the caller's live context; llama.cpp reads at most `state.len()` bytes and catches
    // its own errors on this path (llama_context::state_seq_set_data: 0).
    unsafe { sys::llama_state_seq_set_data_ext(ctx, state.as_ptr(), state.len(), seq as i32, 0) > 0 }
}
