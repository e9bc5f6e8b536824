//! Times every panel kernel this CPU runs on one 2048 × 2048 matrix of each packed kind, for
//! 16 and 64 activation rows (or `M`), one thread: `cargo run --release -p kestrel-kernels --example
//! panel_kernels` (`ONLY=Q4_K`, `K=amx`, `M=1`, `REPS=n` narrow it; `ROWS=n`, `COLS=n` resize
//! it, past the last-level cache to read the weights from memory; `THREADS=n` shares each
//! product out as a model's layers do; `MATS=n` cycles through n copies of the matrix, so that
//! model-sized matrices come from memory as in a decode step). The best of 5 batches is shown.

use kestrel_kernels::cpu::gemm::Scratch;
use kestrel_kernels::cpu::packed::{matmul_packed_with, panel_kernels, PackedMatrix};
use kestrel_kernels::cpu::ThreadPool;
use kestrel_kernels::quant::{self, DType};
fn main() {
    let threads = std::env::var("THREADS").map_or(1, |n| n.parse::<usize>().unwrap());
    let pool = ThreadPool::new(threads);
    let dim = |v: &str| std::env::var(v).map_or(2048, |n| n.parse::<usize>().unwrap());
    let (rows, cols) = (dim("ROWS"), dim("COLS"));
    let only = std::env::var("ONLY").ok();
    for dtype in [DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q6_K] {
        if only.as_deref().is_some_and(|o| o != format!("{dtype:?}")) {
            continue;
        }
        let w: Vec<f32> = (0..rows * cols)
            .map(|i| (i * 7919 % 1000) as f32 / 500.0 - 1.0)
            .collect();
        let data: Vec<u8> = match dtype {
            DType::Q4_0 => bytemuck::cast_slice(&quant::q4_0::quantize_ref(&w)).to_vec(),
            DType::Q8_0 => bytemuck::cast_slice(&quant::q8_0::quantize_ref(&w)).to_vec(),
            DType::Q4_K => bytemuck::cast_slice(&quant::q4_k::quantize_ref(&w)).to_vec(),
            _ => bytemuck::cast_slice(&quant::q6_k::quantize_ref(&w)).to_vec(),
        };
        let mats = std::env::var("MATS").map_or(1, |n| n.parse::<usize>().unwrap());
        let ps: Vec<PackedMatrix> = (0..mats)
            .map(|_| PackedMatrix::pack(dtype, rows, cols, &data).unwrap())
            .collect();
        let ms: Vec<usize> = std::env::var("M").map_or(vec![16, 64], |m| vec![m.parse().unwrap()]);
        for m in ms {
            let x: Vec<f32> = (0..m * cols)
                .map(|i| (i * 31 % 97) as f32 / 50.0 - 1.0)
                .collect();
            let mut y = vec![0.0; m * rows];
            let mut s = Scratch::default();
            for v in panel_kernels().into_iter().filter(|v| v.name != "scalar") {
                let (name, k) = (v.name, v.kernel);
                if std::env::var("K").is_ok_and(|kk| kk != name) {
                    continue;
                }
                let mut product = || {
                    for p in &ps {
                        matmul_packed_with(&pool, k, p, &x, m, &mut y, &mut s);
                    }
                };
                product();
                let reps: usize = std::env::var("REPS").map_or(20, |r| r.parse().unwrap());
                let mut dt = f64::MAX;
                for _ in 0..5 {
                    let t = std::time::Instant::now();
                    for _ in 0..reps {
                        product();
                    }
                    dt = dt.min(t.elapsed().as_secs_f64() / reps as f64);
                }
                println!(
                    "{dtype:?} m={m} {name}: {:.2} ms, {:.1} GMAC/s",
                    dt * 1e3,
                    (rows * cols * m * mats) as f64 / dt / 1e9
                );
            }
        }
    }
}
