//! Repacked quantized experts run as segmented products (all experts' gate and up in one pool
//! call, all downs in another); the same block with the experts left in the GGUF layout runs
//! one expert at a time through the row-at-a-time kernels. Both quantize activations the same
//! way, so their outputs agree up to `f32` summation order, for decode (1 row), small batches
//! and a prefill batch whose busiest experts span several activation chunks.

use kestrel_kernels::cpu::gemm::Scratch;
use kestrel_kernels::cpu::packed::worth_packing;
use kestrel_kernels::cpu::threadpool::ThreadPool;
use kestrel_kernels::{quant, DType, SharedBytes};
use kestrel_model::arch::moe_block::{ExpertMlp, MoeBlock, MoeScratch};
use kestrel_model::layers::{Linear, RmsNorm};
use kestrel_model::weights::TensorView;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const HIDDEN: usize = 64;
const FFN: usize = 96;
const EXPERTS: usize = 8;
const TOP_K: usize = 2;

fn view(name: &str, dtype: DType, shape: Vec<usize>, data: SharedBytes) -> TensorView {
    TensorView {
        name: name.into(),
        dtype,
        shape,
        data,
    }
}

/// A random `rows × cols` matrix quantized to `dtype`, as a Linear (repacked or not).
fn quantized(dtype: DType, rows: usize, cols: usize, rng: &mut ChaCha8Rng) -> [Linear; 2] {
    let w: Vec<f32> = (0..rows * cols).map(|_| rng.gen_range(-0.3..0.3)).collect();
    let bytes: Vec<u8> = match dtype {
        DType::Q4_0 => bytemuck::cast_slice(&quant::q4_0::quantize_ref(&w)).to_vec(),
        DType::Q8_0 => bytemuck::cast_slice(&quant::q8_0::quantize_ref(&w)).to_vec(),
        _ => unreachable!("a packed kind"),
    };
    let v = view("w", dtype, vec![rows, cols], SharedBytes::from_vec(bytes));
    let plain = Linear::new(v, None).unwrap();
    [plain.clone().packed(), plain]
}

/// The same block twice: experts repacked, and experts in the file layout.
fn blocks(dtype: DType, seed: u64) -> [MoeBlock; 2] {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let router: Vec<f32> = (0..EXPERTS * HIDDEN)
        .map(|_| rng.gen_range(-1.0..1.0))
        .collect();
    let router = view(
        "router",
        DType::F32,
        vec![EXPERTS, HIDDEN],
        SharedBytes::from_f32(&router),
    );
    let router = Linear::new(router, None).unwrap();
    let norm = view(
        "norm",
        DType::F32,
        vec![HIDDEN],
        SharedBytes::from_f32(&[1.0; HIDDEN]),
    );
    let norm = RmsNorm::new(norm, 1e-6).unwrap();
    let (mut packed, mut plain) = (Vec::new(), Vec::new());
    for _ in 0..EXPERTS {
        let [gp, g] = quantized(dtype, FFN, HIDDEN, &mut rng);
        let [up, u] = quantized(dtype, FFN, HIDDEN, &mut rng);
        let [dp, d] = quantized(dtype, HIDDEN, FFN, &mut rng);
        packed.push(ExpertMlp {
            gate: gp,
            up,
            down: dp,
        });
        plain.push(ExpertMlp {
            gate: g,
            up: u,
            down: d,
        });
    }
    [packed, plain].map(|experts| MoeBlock {
        norm: norm.clone(),
        router: router.clone(),
        experts,
        top_k: TOP_K,
        normalize: true,
        shared: None,
        counter: None,
        activation: kestrel_model::config::ExpertActivation::SiluGated,
        rule: kestrel_model::config::RouterRule::SOFTMAX,
        score_bias: None,
    })
}

#[test]
fn segmented_experts_equal_expert_at_a_time_products() {
    let pool = ThreadPool::new(2);
    for (dtype, seed) in [(DType::Q8_0, 1), (DType::Q4_0, 2)] {
        let [packed, plain] = blocks(dtype, seed);
        let repacked = packed.experts[0].gate.plain_packed().is_some();
        assert_eq!(
            repacked,
            worth_packing(dtype, FFN),
            "{dtype}: packing as the CPU allows"
        );
        assert!(plain.experts[0].gate.plain_packed().is_none());
        let mut rng = ChaCha8Rng::seed_from_u64(seed + 10);
        let (mut s1, mut s2) = (MoeScratch::default(), MoeScratch::default());
        let mut scratch = Scratch::default();
        // 300 rows over 8 experts: the busiest experts get more than one 64-row chunk.
        for t in [1, 2, 13, 300, 1] {
            let x: Vec<f32> = (0..t * HIDDEN).map(|_| rng.gen_range(-2.0..2.0)).collect();
            packed.moe_forward(&pool, &x, t, &mut s1, &mut scratch);
            plain.moe_forward(&pool, &x, t, &mut s2, &mut scratch);
            let (got, want) = (s1.output(t * HIDDEN), s2.output(t * HIDDEN));
            let scale = want.iter().fold(0.0f32, |a, v| a.max(v.abs()));
            assert!(scale > 0.0);
            for (i, (g, w)) in got.iter().zip(want).enumerate() {
                assert!(
                    (g - w).abs() <= 1e-5 * scale,
                    "{dtype} t={t} [{i}]: segmented {g} vs per expert {w}"
                );
            }
        }
    }
}
