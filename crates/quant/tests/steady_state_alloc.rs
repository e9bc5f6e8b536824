//! The decode step allocates nothing once its buffers have grown: a counting global allocator
//! (this test binary only, which is why it is not a module of `tests/it`) sees zero heap allocations, on any thread, across decode steps of
//! a batch of sequences, for F32 and quantized weights and for every KV-cache type.

#[path = "../../model/tests/it/common/mod.rs"]
mod common;

use common::*;
use kestrel_engine::executor::{BatchInput, BatchOutput, Executor, SeqBatch};
use kestrel_kernels::alloc_count::CountingAllocator;
use kestrel_kernels::cpu::attention::KvDtype;
use kestrel_kernels::cpu::threadpool::ThreadPool;
use kestrel_model::runner::KvSpec;
use kestrel_model::ModelRunner;
use kestrel_quant::quantize::{QuantMethod, QuantOptions};
use kestrel_quant::{load_model_with, LoadOptions};

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

const SEQS: usize = 4;
const BLOCK: usize = 16;
const BLOCKS_PER_SEQ: usize = 4;

/// `SEQS` sequences: a prompt each, then decode steps; the counter is read around the later
/// decode steps only (the first ones grow the buffers).
fn allocations_per_decode_step(mut runner: ModelRunner) -> usize {
    let table = |s: usize| {
        ((s * BLOCKS_PER_SEQ) as u32..((s + 1) * BLOCKS_PER_SEQ) as u32).collect::<Vec<u32>>()
    };
    let prompt = BatchInput {
        seqs: (0..SEQS)
            .map(|s| SeqBatch {
                request_id: 0,
                tokens: vec![3 + s as u32; 5 + s],
                start_pos: 0,
                block_table: table(s),
                num_logits: 1,
                adapter: None,
            })
            .collect(),
    };
    let mut out = BatchOutput::default();
    runner.execute_into(&prompt, &mut out).unwrap();
    let mut step = BatchInput {
        seqs: (0..SEQS)
            .map(|s| SeqBatch {
                request_id: 0,
                tokens: vec![7],
                start_pos: 5 + s,
                block_table: table(s),
                num_logits: 1,
                adapter: None,
            })
            .collect(),
    };
    let mut counted = 0;
    for i in 0..12 {
        let before = CountingAllocator::allocations();
        runner.execute_into(&step, &mut out).unwrap();
        let after = CountingAllocator::allocations();
        if i >= 4 {
            counted += after - before;
        }
        assert_eq!(out.num_rows(), SEQS);
        step.seqs.iter_mut().enumerate().for_each(|(s, q)| {
            q.tokens[0] = (10 + i + s) as u32;
            q.start_pos += 1;
        });
    }
    counted / 8
}

fn runner_for(quantize: Option<QuantMethod>, dtype: KvDtype) -> ModelRunner {
    runner_of("tiny-llama-f32", quantize, dtype)
}

fn runner_of(fixture: &str, quantize: Option<QuantMethod>, dtype: KvDtype) -> ModelRunner {
    let opts = LoadOptions {
        quantize: quantize.map(|m| (m, QuantOptions::default())),
        on_tensor: None,
    };
    let loaded = load_model_with(&fixtures().join(fixture), &opts).unwrap();
    let kv = KvSpec {
        block_size: BLOCK,
        num_blocks: SEQS * BLOCKS_PER_SEQ,
        dtype,
    };
    ModelRunner::with_kv(loaded.model, kv, ThreadPool::global())
}

#[test]
fn decode_steps_do_not_allocate() {
    let cases = [
        (None, KvDtype::F32),
        (Some(QuantMethod::Q8_0), KvDtype::F16),
        (Some(QuantMethod::Q4_0), KvDtype::Q8),
        (Some(QuantMethod::Int8), KvDtype::F32),
    ];
    for (quantize, dtype) in cases {
        let n = allocations_per_decode_step(runner_for(quantize, dtype));
        assert_eq!(
            n, 0,
            "{quantize:?} weights, {dtype:?} KV: {n} allocations per decode step"
        );
    }
    // The Llama-family features: q/k/v biases and a sliding window on some layers
    // (tiny-qwen2-swa), per-head q/k RMSNorm (tiny-qwen3, HF and GGUF), and the expert-grouped
    // MoE layers (tiny-mixtral's stacked GGUF experts; tiny-qwen2-moe's shared expert). In this
    // one test, as the allocation counter is global and tests run in parallel.
    let fixtures = [
        "tiny-qwen2-swa",
        "tiny-qwen3",
        "tiny-qwen3.gguf",
        "tiny-mixtral.gguf",
        "tiny-qwen2-moe",
    ];
    for fixture in fixtures {
        let n = allocations_per_decode_step(runner_of(fixture, None, KvDtype::F32));
        assert_eq!(n, 0, "{fixture}: {n} allocations per decode step");
    }
}
