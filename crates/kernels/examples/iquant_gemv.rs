//! Times the decode product (one activation row against every row of a weight matrix, one
//! thread) of each low-bit GGUF type beside Q4_K and IQ4_XS, with each SIMD variant this CPU runs:
//! `cargo run --release -p kestrel-kernels --example iquant_gemv` (`ROWS=n`, `COLS=n` resize
//! the matrix, 4096 × 4096 by default; `MATS=n` cycles through n copies so the weights come
//! from memory; `REPS=n` products per timing, best of 5 shown).

use std::time::Instant;

use kestrel_kernels::cpu::Isa;
use kestrel_kernels::quant::{ActFormat, DType, TypeKernels};

/// Random blocks of `dtype` with a small finite super-scale (so no product is inf or NaN).
fn weights(dtype: DType, rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    let mut bytes: Vec<u8> = (0..dtype.row_bytes(cols).unwrap() * rows)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    let d = half::f16::from_f32(0.01).to_bits();
    for b in bytes.chunks_exact_mut(dtype.block_bytes()) {
        match dtype {
            DType::MXFP4 => b[0] = 120,
            DType::IQ1_M => {
                for k in 0..4 {
                    b[49 + 2 * k] = (b[49 + 2 * k] & 0x0F) | (((d >> (4 * k)) & 0xF) as u8) << 4;
                }
            }
            DType::Q4_K => {
                b[..2].copy_from_slice(&d.to_le_bytes());
                b[2..4].copy_from_slice(&d.to_le_bytes());
            }
            _ => b[..2].copy_from_slice(&d.to_le_bytes()),
        }
    }
    bytes
}

fn main() {
    let env = |v: &str, d: usize| std::env::var(v).map_or(d, |n| n.parse::<usize>().unwrap());
    let (rows, cols, mats, reps) = (
        env("ROWS", 4096),
        env("COLS", 4096),
        env("MATS", 1),
        env("REPS", 4),
    );
    let x: Vec<f32> = (0..cols)
        .map(|i| (i * 31 % 97) as f32 / 50.0 - 1.0)
        .collect();
    println!("{rows} x {cols}, {mats} matrices, one thread; best of 5 batches of {reps} products");
    for dtype in [
        DType::Q4_K,
        DType::IQ4_XS,
        DType::IQ3_S,
        DType::IQ3_XXS,
        DType::IQ2_S,
        DType::IQ2_XS,
        DType::IQ2_XXS,
        DType::IQ1_M,
        DType::IQ1_S,
        DType::MXFP4,
    ] {
        for isa in Isa::available().into_iter().filter(|i| *i != Isa::Scalar) {
            let k = TypeKernels::for_isa(dtype, isa);
            let rb = dtype.row_bytes(cols).unwrap();
            let ws: Vec<Vec<u8>> = (0..mats)
                .map(|m| weights(dtype, rows, cols, 7 + m as u64))
                .collect();
            let act: ActFormat = k.act;
            let mut a = vec![0u8; act.row_bytes(cols) + 64];
            let off = a.as_ptr().align_offset(4);
            let a = &mut a[off..off + act.row_bytes(cols)];
            act.quantize(&x, a);
            let mut sink = 0f32;
            let mut best = f64::INFINITY;
            for _ in 0..5 {
                let t = Instant::now();
                for r in 0..reps {
                    let w = &ws[r % mats];
                    for row in w.chunks_exact(rb) {
                        sink += (k.vec_dot)(cols, row, a);
                    }
                }
                best = best.min(t.elapsed().as_secs_f64() / reps as f64);
            }
            let gbs = (rb * rows) as f64 / best / 1e9;
            println!(
            "{:8} {:>9}  {:7.3} ms  {:6.2} GB/s of weights  {:6.2} Gweights/s  (sum {sink:.3e})",
            dtype.name(),
            format!("{:?}", k.isa),
            best * 1e3,
            gbs,
            (rows * cols) as f64 / best / 1e9,
        );
        }
    }
}
