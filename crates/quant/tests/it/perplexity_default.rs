//! `perplexity` on the real default model: finite, sensible, and independent of how a
//! window is split into forward passes.

use crate::common;

use common::*;
use kestrel_model::ModelRunner;
use kestrel_quant::perplexity::{evaluate, windows, NllStats, RunnerModel};

fn ppl(batch: usize, ids: &[u32]) -> NllStats {
    let loaded = load(&default_model_path());
    let runner = ModelRunner::new(
        loaded.model,
        16,
        4,
        kestrel_kernels::cpu::threadpool::ThreadPool::global(),
    );
    let mut model = RunnerModel::new(runner, batch);
    let ws = windows(ids, 32, None, Some(2)).unwrap();
    let mut stats = NllStats::default();
    evaluate(
        &mut model,
        &ws,
        &mut |t| {
            stats.push(-(t.logprobs[t.target as usize] as f64));
            Ok(())
        },
        &mut |_, _| {},
    )
    .unwrap();
    stats
}

#[test]
fn ppl_is_sensible_and_batch_invariant() {
    let text = "The history of the city begins in the Roman era, when a small settlement grew up on the \
        banks of the river. Over the following centuries it became an important market town, and by the \
        twelfth century it had a cathedral, a castle and a charter granting the citizens the right to hold \
        a weekly market. The town suffered during the wars of the seventeenth century but recovered in the \
        eighteenth, when new industries brought wealth and a rapidly growing population to the area.";
    let ids = load(&default_model_path())
        .tokenizer
        .encode(text, true)
        .unwrap();
    assert!(ids.len() >= 64, "{} tokens", ids.len());
    let whole = ppl(32, &ids);
    let split = ppl(8, &ids);
    assert_eq!(whole.count(), 2 * 15);
    eprintln!("ppl {} +/- {:?}", whole.ppl(), whole.ppl_error());
    assert!(
        whole.ppl() > 1.5 && whole.ppl() < 60.0,
        "implausible PPL {}",
        whole.ppl()
    );
    assert!(whole.ppl_error().is_some());
    assert!(
        (whole.ppl() - split.ppl()).abs() / whole.ppl() < 1e-3,
        "{} vs {}",
        whole.ppl(),
        split.ppl()
    );
}
