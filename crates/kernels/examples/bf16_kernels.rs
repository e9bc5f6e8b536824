//! Times the products of BF16 weights with many activation rows on each kernel this CPU runs:
//! the `f32`-activation FMA tiles and every [`Bf16Kernel`] (hi + lo bf16 activations), on the
//! matrix shapes of SmolLM2-135M and of the 1.1B Llama shape, 512 activation rows (or `M`),
//! one thread (or `THREADS`): `cargo run --release -p kestrel-kernels --example bf16_kernels`
//! (`SHAPES=small|large` narrows it). The kernels alternate within each batch; the best of
//! 5 batches is shown, in GFLOP/s (2 · rows · cols · m per product).

use std::time::Instant;

use kestrel_kernels::cpu::bf16_tiles::{matmul_bf16_with, Bf16Kernel};
use kestrel_kernels::cpu::gemm::{matmul_with, GemmKernels, MatRef, Scratch};
use kestrel_kernels::cpu::ThreadPool;
use kestrel_kernels::quant::DType;

fn main() {
    let threads = std::env::var("THREADS").map_or(1, |n| n.parse::<usize>().unwrap());
    let m = std::env::var("M").map_or(512, |n| n.parse::<usize>().unwrap());
    let pool = ThreadPool::new(threads);
    let small = [(576, 576), (192, 576), (1536, 576), (576, 1536)];
    let large = [(2048, 2048), (256, 2048), (5632, 2048), (2048, 5632)];
    let shapes: Vec<(usize, usize)> = match std::env::var("SHAPES").as_deref() {
        Ok("small") => small.to_vec(),
        Ok("large") => large.to_vec(),
        _ => small.iter().chain(&large).copied().collect(),
    };
    let fma = GemmKernels::detected(DType::BF16);
    let kernels = Bf16Kernel::available();
    println!("| rows × cols | m | fma tiles | {} |", names(&kernels));
    for (rows, cols) in shapes {
        let data: Vec<u8> = (0..rows * cols)
            .flat_map(|i| {
                half::bf16::from_f32((i * 7919 % 1000) as f32 / 500.0 - 1.0).to_le_bytes()
            })
            .collect();
        let w = MatRef {
            dtype: DType::BF16,
            rows,
            cols,
            data: &data,
        };
        let x: Vec<f32> = (0..m * cols)
            .map(|i| (i * 31 % 97) as f32 / 50.0 - 1.0)
            .collect();
        let mut y = vec![0.0; m * rows];
        let mut s = Scratch::default();
        let reps = (2e9 / (2.0 * (rows * cols * m) as f64)).ceil() as usize;
        let mut best = vec![f64::INFINITY; 1 + kernels.len()];
        for _ in 0..5 {
            for (i, b) in best.iter_mut().enumerate() {
                let t = Instant::now();
                for _ in 0..reps {
                    match i {
                        0 => matmul_with(&pool, &fma, w, &x, m, &mut y, &mut s),
                        _ => matmul_bf16_with(&pool, kernels[i - 1], w, &x, m, &mut y, &mut s),
                    }
                }
                *b = b.min(t.elapsed().as_secs_f64() / reps as f64);
            }
        }
        let gflops: Vec<String> = best
            .iter()
            .map(|t| format!("{:.1}", 2.0 * (rows * cols * m) as f64 / t / 1e9))
            .collect();
        println!("| {rows} × {cols} | {m} | {} |", gflops.join(" | "));
    }
}

fn names(k: &[Bf16Kernel]) -> String {
    k.iter()
        .map(|k| format!("{k:?}"))
        .collect::<Vec<_>>()
        .join(" | ")
}
