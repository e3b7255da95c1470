//! Log-probabilities of one logits row, as OpenAI reports them: the model's own distribution
//! (a log-softmax over the raw logits, before penalties, biases, samplers or grammar) for the
//! chosen token and the most likely alternatives.

/// The chosen token's log-probability and the `top` most likely tokens, most likely first.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    pub token: i32,
    pub logprob: f32,
    pub top: Vec<(i32, f32)>,
}

/// Log-softmax of `logits` at `token`, and the `top` highest (ties: the lower id first).
pub fn of(logits: &[f32], token: i32, top: usize) -> TokenLogprob {
    let max = logits.iter().copied().filter(|l| l.is_finite()).fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| ((l - max) as f64).exp()).sum();
    let lse = max as f64 + sum.ln();
    // Rounding may push the most likely token a hair above 0: a log-probability never is.
    let lp = |l: f32| ((l as f64 - lse) as f32).min(0.0);
    let mut best: Vec<(i32, f32)> = Vec::with_capacity(top + 1);
    if top > 0 {
        for (i, &l) in logits.iter().enumerate() {
            if best.len() == top && l <= best[top - 1].1 {
                continue;
            }
            let at = best.partition_point(|&(_, b)| b >= l);
            best.insert(at, (i as i32, l));
            best.truncate(top);
        }
    }
    let chosen = logits.get(token as usize).copied().unwrap_or(f32::NEG_INFINITY);
    TokenLogprob { token, logprob: lp(chosen), top: best.into_iter().map(|(i, l)| (i, lp(l))).collect() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_softmax_and_top_alternatives() {
        let logits = [1.0f32, 3.0, 2.0, 3.0, -1.0];
        let r = of(&logits, 2, 3);
        let z: f64 = logits.iter().map(|&l| (l as f64).exp()).sum();
        assert!((r.logprob as f64 - (2.0 - z.ln())).abs() < 1e-5, "{r:?}");
        assert_eq!(r.top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![1, 3, 2]);
        let total: f64 = logits.iter().enumerate().map(|(i, _)| (of(&logits, i as i32, 0).logprob as f64).exp()).sum();
        assert!((total - 1.0).abs() < 1e-5, "probabilities sum to 1: {total}");
        assert!(of(&logits, 0, 0).top.is_empty());
        assert_eq!(of(&[0.0, f32::NEG_INFINITY], 1, 2).logprob, f32::NEG_INFINITY);
    }
}
