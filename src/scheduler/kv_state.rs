//! One sequence's state out of a context and back (`llama_state_seq_*`): what the prompt cache
//! keeps of a conversation that leaves the context.

use crate::sys;

/// What one state transfer moved: its bytes, and the tensor copies it took for its pieces (one
/// per piece on llama.cpp's path; one or two per tensor where native/state.cpp groups them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Moved {
    pub copies: usize,
    pub pieces: usize,
}

/// The state of sequence `seq` (its KV cells and positions), or None when llama.cpp gives none.
///
/// # Safety
/// `ctx` is a live context used by no other thread during the call.
pub(super) unsafe fn read(ctx: *mut sys::llama_context, seq: usize) -> Option<(Vec<u8>, Moved)> {
    // SAFETY: the caller's live context; `seq` is one of its sequences.
    let size = unsafe { sys::llama_state_seq_get_size_ext(ctx, seq as i32, 0) };
    if size == 0 {
        return None;
    }
    let mut buf = vec![0u8; size];
    let mut m = Moved::default();
    // SAFETY: `buf` holds `size` bytes; the shim writes at most that many and catches every
    // exception (0).
    let n = unsafe {
        sys::llb_shim_state_seq_get(
            ctx,
            seq as i32,
            buf.as_mut_ptr(),
            size,
            crate::fault::state_grouping(),
            &mut m.copies,
            &mut m.pieces,
        )
    };
    (n > 0).then(|| {
        buf.truncate(n);
        (buf, m)
    })
}

/// Puts `state` (from [`read`]) into sequence `seq`, which llama.cpp empties first. None when
/// it refuses: another model's or layout's state, malformed bytes, or no room in the cache (the
/// sequence is then empty).
///
/// # Safety
/// As for [`read`].
pub(super) unsafe fn write(ctx: *mut sys::llama_context, seq: usize, state: &[u8]) -> Option<Moved> {
    let mut m = Moved::default();
    // SAFETY: the caller's live context; the shim reads at most `state.len()` bytes and catches
    // every exception (0).
    let n = unsafe {
        sys::llb_shim_state_seq_set(
            ctx,
            seq as i32,
            state.as_ptr(),
            state.len(),
            crate::fault::state_grouping(),
            &mut m.copies,
            &mut m.pieces,
        )
    };
    (n > 0).then_some(m)
}

/// llama.cpp's magic at the start of a sequence's state (llama-context.cpp, `io_magic`).
const IO_MAGIC: u32 = 0xaf14_3cd8;
/// ggml's type ids whose K and V values are checked for NaN and infinities.
const GGML_F32: i32 = 0;
const GGML_F16: i32 = 1;
const GGML_BF16: i32 = 30;

/// Checks a KV cache's sequence state (from the pinned llama.cpp's `llama_kv_cache::state_write`,
/// one block per cache: two for a sliding-window model) against the `n` tokens it claims, before
/// llama.cpp takes it: the first cache holds exactly one cell for each position 0..n−1, any other
/// only positions below n, each once; every K and V value of a float type is finite. A state
/// that passed its MAC can still be wrong (made from a failed decode, by a bug): this keeps such
/// a state from failing every request that shares its prefix, or from spreading NaN through a
/// unified KV cache (masked cells still meet the softmax's zeros).
pub(super) fn check(state: &[u8], n: usize) -> Result<(), String> {
    let mut r = Reader { b: state, at: 0 };
    if r.u32()? != IO_MAGIC {
        return Err("not a sequence state (magic)".into());
    }
    r.skip(4)?; // the sequence id it was read from
    if r.at == state.len() {
        return Err("no KV cache in the state".into());
    }
    check_blocks(r.at, state, n, true)
}

/// The caches' blocks from byte `at` to the end. A block's cells carry a 2D position after
/// their ids for M-RoPE models, and MLA models write no V: the layout whose reading goes through
/// to the end of the state is the one (the plain layout's error is the one reported).
fn check_blocks(at: usize, state: &[u8], n: usize, first: bool) -> Result<(), String> {
    if at == state.len() {
        return Ok(());
    }
    let mut plain = None;
    for (ext, with_v) in [(0, true), (0, false), (8, true), (8, false)] {
        let mut r = Reader { b: state, at };
        let got = check_cache(&mut r, n, first, ext, with_v).and_then(|_| check_blocks(r.at, state, n, false));
        match got {
            Ok(()) => return Ok(()),
            Err(e) => {
                plain.get_or_insert(e);
            }
        }
    }
    Err(plain.unwrap_or_default())
}

/// One cache's block: streams, each with its cells' positions then their K and V rows.
fn check_cache(r: &mut Reader, n: usize, first: bool, ext: usize, with_v: bool) -> Result<(), String> {
    let n_stream = r.u32()?;
    let mut seen = vec![false; n];
    let mut cells = 0usize;
    for _ in 0..n_stream {
        let count = r.u32()? as usize;
        if count == 0 {
            continue;
        }
        cells += count;
        check_cells(r, count, ext, &mut seen)?;
        check_data(r, count, with_v)?;
    }
    if first && (cells != n || seen.iter().any(|s| !s)) {
        return Err(format!("{cells} cells where its {n} tokens need one per position 0..{}", n.saturating_sub(1)));
    }
    Ok(())
}

fn check_cells(r: &mut Reader, count: usize, ext: usize, seen: &mut [bool]) -> Result<(), String> {
    for _ in 0..count {
        let pos = r.i32()?;
        let n_seq = r.u32()? as usize;
        r.skip(ext + 4 * n_seq)?;
        let Some(s) = usize::try_from(pos).ok().and_then(|p| seen.get_mut(p)) else {
            return Err(format!("a cell at position {pos}, outside 0..{}", seen.len()));
        };
        if std::mem::replace(s, true) {
            return Err(format!("two cells at position {pos}"));
        }
    }
    Ok(())
}

/// The K rows of every layer, then (`with_v`: a model with V tensors) the V rows, by cell or
/// transposed (by element).
fn check_data(r: &mut Reader, count: usize, with_v: bool) -> Result<(), String> {
    let v_trans = r.u32()?;
    let n_layer = r.u32()? as usize;
    for _ in 0..n_layer {
        let ty = r.i32()?;
        let row = r.u64()? as usize;
        finite(ty, r.take(row.checked_mul(count).ok_or("a K row size out of range")?)?)?;
    }
    for _ in 0..if with_v { n_layer } else { 0 } {
        let ty = r.i32()?;
        let len = if v_trans == 0 {
            (r.u64()? as usize).checked_mul(count)
        } else {
            let el = r.u32()? as usize;
            (r.u32()? as usize).checked_mul(el).and_then(|x| x.checked_mul(count))
        };
        finite(ty, r.take(len.ok_or("a V row size out of range")?)?)?;
    }
    Ok(())
}

/// Every value of `data`, of ggml type `ty`, is finite (other types are not read).
fn finite(ty: i32, data: &[u8]) -> Result<(), String> {
    let bad = match ty {
        GGML_F32 => data.chunks_exact(4).any(|c| !f32::from_le_bytes(c.try_into().unwrap()).is_finite()),
        GGML_F16 => any_all_ones(data, 0x7c00),
        GGML_BF16 => any_all_ones(data, 0x7f80),
        _ => false,
    };
    if bad {
        return Err("NaN or infinite values in its K or V".into());
    }
    Ok(())
}

/// Whether any 16-bit value of `data` has every bit of `mask` set (a half float's exponent all
/// ones: NaN or infinity), four values at a time.
fn any_all_ones(data: &[u8], mask: u16) -> bool {
    let m = u64::from(mask) * 0x0001_0001_0001_0001;
    let mut chunks = data.chunks_exact(8);
    let hit = chunks.by_ref().any(|c| {
        let z = (u64::from_le_bytes(c.try_into().unwrap()) & m) ^ m; // a lane is 0 where all ones
        (z.wrapping_sub(0x0001_0001_0001_0001) & !z & 0x8000_8000_8000_8000) != 0
    });
    hit || chunks.remainder().chunks_exact(2).any(|c| u16::from_le_bytes([c[0], c[1]]) & mask == mask)
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len()).ok_or("shorter than its layout says")?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn skip(&mut self, n: usize) -> Result<(), String> {
        self.take(n).map(|_| ())
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn i32(&mut self) -> Result<i32, String> {
        Ok(i32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A state as the pinned llama.cpp writes it for one sequence of a unified cache: `pos` per
    /// cell, two layers of f16 K and V rows of 4 values, `ext` bytes of 2D position per cell.
    fn state(pos: &[i32], v: impl Fn(usize) -> u16, ext: usize) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend(IO_MAGIC.to_le_bytes());
        b.extend(3i32.to_le_bytes());
        b.extend(1u32.to_le_bytes()); // n_stream
        b.extend((pos.len() as u32).to_le_bytes());
        for &p in pos {
            b.extend(p.to_le_bytes());
            b.extend(1u32.to_le_bytes());
            b.extend(vec![0u8; ext]);
            b.extend(3i32.to_le_bytes());
        }
        b.extend(0u32.to_le_bytes()); // v_trans
        b.extend(2u32.to_le_bytes()); // n_layer
        let mut i = 0;
        for _ in 0..4 {
            // K of both layers, then V of both
            b.extend(GGML_F16.to_le_bytes());
            b.extend(8u64.to_le_bytes());
            for _ in 0..pos.len() * 4 {
                b.extend(v(i).to_le_bytes());
                i += 1;
            }
        }
        b
    }

    const ONE: u16 = 0x3c00;

    #[test]
    fn a_state_with_one_cell_per_position_passes() {
        assert_eq!(check(&state(&[0, 1, 2, 3], |_| ONE, 0), 4), Ok(()));
        // Cells in any order (a ring buffer), and M-RoPE's 2D positions.
        assert_eq!(check(&state(&[2, 0, 3, 1], |_| ONE, 0), 4), Ok(()));
        assert_eq!(check(&state(&[0, 1, 2], |_| ONE, 8), 3), Ok(()));
    }

    #[test]
    fn cells_that_do_not_match_the_tokens_are_refused() {
        let e = |pos: &[i32], n| check(&state(pos, |_| ONE, 0), n).unwrap_err();
        assert!(e(&[0, 1, 2], 4).contains("3 cells"), "too few cells");
        assert!(e(&[0, 0, 0, 0], 4).contains("two cells at position 0"));
        assert!(e(&[-1, 1, 2, 3], 4).contains("position -1"));
        assert!(e(&[0, 1, 2, 9], 4).contains("position 9"));
    }

    #[test]
    fn nan_or_infinity_in_k_or_v_is_refused() {
        assert!(check(&state(&[0, 1, 2, 3], |i| if i == 40 { 0x7e00 } else { ONE }, 0), 4)
            .unwrap_err()
            .contains("NaN"));
        assert!(check(&state(&[0, 1, 2, 3], |i| if i == 3 { 0xfc00 } else { ONE }, 0), 4).unwrap_err().contains("NaN"));
        // The largest finite half and negative numbers are fine.
        assert_eq!(check(&state(&[0, 1, 2, 3], |i| if i % 2 == 0 { 0x7bff } else { 0xbc00 }, 0), 4), Ok(()));
    }

    #[test]
    fn a_cut_or_foreign_state_is_refused() {
        let s = state(&[0, 1, 2, 3], |_| ONE, 0);
        assert!(check(&s[..s.len() - 3], 4).is_err());
        assert!(check(&s[4..], 4).unwrap_err().contains("magic"));
        let mut longer = s.clone();
        longer.extend([7u8; 5]);
        assert!(check(&longer, 4).is_err());
    }
}
