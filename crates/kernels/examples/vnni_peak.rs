//! The AVX-512 VNNI ceiling of one core: how many `vpdpbusd` (64 `u8 × i8` products each on a
//! 512-bit register) it retires per cycle, alone, beside each other instruction the panel
//! kernels issue (the `f32` multiply-add that scales a K-quant sub-block, the integer ways to
//! scale it, the logic of unpacking, broadcast loads) and in a Q6_K sub-block's mix, so that a
//! kernel's speed can be read as a fraction of what the core can do. `cargo run --release -p kestrel-kernels --example vnni_peak` (one thread; run it under
//! `nice -n -20` on a quiet machine). The clock is estimated from a chain of dependent `imul`
//! (3 cycles each on current x86 cores).

#[cfg(target_arch = "x86_64")]
fn main() {
    use std::arch::asm;
    use std::time::Instant;

    if !is_x86_feature_detected!("avx512vnni") || !is_x86_feature_detected!("avx512f") {
        eprintln!("this CPU has no AVX-512 VNNI");
        std::process::exit(1);
    }
    let n: u64 = 200_000_000;
    let mut x: u64 = 3;
    let t = Instant::now();
    for _ in 0..n {
        // SAFETY: a register multiply; no memory is touched.
        unsafe { asm!("imul {0}, {0}", inout(reg) x, options(nomem, nostack)) };
    }
    let ghz = 3.0 * n as f64 / t.elapsed().as_secs_f64() / 1e9;
    std::hint::black_box(x);
    println!("clock ~{ghz:.2} GHz");

    let m: u64 = 20_000_000;
    let per_cycle = |ops: u64, secs: f64| ops as f64 / (secs * ghz * 1e9);
    // Twelve independent accumulators (zmm0-11), so latency never limits the rate.
    macro_rules! twelve {
        ($($op:expr),*) => {{
            let t = Instant::now();
            for _ in 0..m {
                // SAFETY: register-only AVX-512 instructions on a CPU that has them (checked
                // above); every register written is declared clobbered.
                unsafe {
                    asm!(
                        $($op,)*
                        out("zmm0") _, out("zmm1") _, out("zmm2") _, out("zmm3") _,
                        out("zmm4") _, out("zmm5") _, out("zmm6") _, out("zmm7") _,
                        out("zmm8") _, out("zmm9") _, out("zmm10") _, out("zmm11") _,
                        out("zmm28") _, out("zmm29") _, out("zmm30") _, out("zmm31") _,
                        options(nomem, nostack),
                    )
                }
            }
            t.elapsed().as_secs_f64()
        }};
    }
    let dp = twelve!(
        "vpdpbusd zmm0, zmm30, zmm31",
        "vpdpbusd zmm1, zmm30, zmm31",
        "vpdpbusd zmm2, zmm30, zmm31",
        "vpdpbusd zmm3, zmm30, zmm31",
        "vpdpbusd zmm4, zmm30, zmm31",
        "vpdpbusd zmm5, zmm30, zmm31",
        "vpdpbusd zmm6, zmm30, zmm31",
        "vpdpbusd zmm7, zmm30, zmm31",
        "vpdpbusd zmm8, zmm30, zmm31",
        "vpdpbusd zmm9, zmm30, zmm31",
        "vpdpbusd zmm10, zmm30, zmm31",
        "vpdpbusd zmm11, zmm30, zmm31"
    );
    let r = per_cycle(12 * m, dp);
    println!(
        "vpdpbusd zmm: {r:.2} per cycle = {:.0} GMAC/s",
        r * 64.0 * ghz
    );
    let fma = twelve!(
        "vfmadd231ps zmm0, zmm30, zmm31",
        "vfmadd231ps zmm1, zmm30, zmm31",
        "vfmadd231ps zmm2, zmm30, zmm31",
        "vfmadd231ps zmm3, zmm30, zmm31",
        "vfmadd231ps zmm4, zmm30, zmm31",
        "vfmadd231ps zmm5, zmm30, zmm31",
        "vfmadd231ps zmm6, zmm30, zmm31",
        "vfmadd231ps zmm7, zmm30, zmm31",
        "vfmadd231ps zmm8, zmm30, zmm31",
        "vfmadd231ps zmm9, zmm30, zmm31",
        "vfmadd231ps zmm10, zmm30, zmm31",
        "vfmadd231ps zmm11, zmm30, zmm31"
    );
    println!("vfmadd231ps zmm: {:.2} per cycle", per_cycle(12 * m, fma));
    // vpdpbusd paired with another instruction: whether they share a slot. With vfmadd231ps
    // (the f32 scaling of a sub-block's sum) and with the integer ways to scale it.
    macro_rules! pairs_with {
        ($op:literal) => {
            pairs_with!($op, ", zmm28, zmm29")
        };
        ($op:literal, $srcs:literal) => {{
            let t = twelve!(
                "vpdpbusd zmm0, zmm30, zmm31",
                concat!($op, " zmm6", $srcs),
                "vpdpbusd zmm1, zmm30, zmm31",
                concat!($op, " zmm7", $srcs),
                "vpdpbusd zmm2, zmm30, zmm31",
                concat!($op, " zmm8", $srcs),
                "vpdpbusd zmm3, zmm30, zmm31",
                concat!($op, " zmm9", $srcs),
                "vpdpbusd zmm4, zmm30, zmm31",
                concat!($op, " zmm10", $srcs),
                "vpdpbusd zmm5, zmm30, zmm31",
                concat!($op, " zmm11", $srcs)
            );
            println!(
                "vpdpbusd + {} pairs: {:.2} cycles per pair",
                $op,
                1.0 / per_cycle(6 * m, t)
            );
        }};
    }
    pairs_with!("vfmadd231ps");
    pairs_with!("vpmulld");
    pairs_with!("vpmaddwd");
    pairs_with!("vpdpwssd");
    pairs_with!("vpaddd");
    pairs_with!("vcvtdq2ps", ", zmm28");
    pairs_with!("vpandd");
    pairs_with!("vpsrlw", ", zmm28, 4");
    pairs_with!("vpternlogd", ", zmm28, zmm29, 0xca");
    pairs_with!("vpsubb");
    pairs_with!("vpbroadcastd", ", dword ptr [rsp - 64]");
    pairs_with!("vmovdqu32", ", zmmword ptr [rsp - 128]");
    // A sub-block's four products and the step that scales their sum, in `f32` (convert,
    // multiply-add) or in `i32` (multiply, add), twice over independent registers.
    macro_rules! sub_block {
        ($name:literal, $a1:literal, $b1:literal, $a2:literal, $b2:literal) => {{
            let t = twelve!(
                "vpdpbusd zmm0, zmm30, zmm31",
                "vpdpbusd zmm1, zmm30, zmm31",
                "vpdpbusd zmm2, zmm30, zmm31",
                "vpdpbusd zmm3, zmm30, zmm31",
                $a1,
                $b1,
                "vpdpbusd zmm4, zmm30, zmm31",
                "vpdpbusd zmm5, zmm30, zmm31",
                "vpdpbusd zmm10, zmm30, zmm31",
                "vpdpbusd zmm11, zmm30, zmm31",
                $a2,
                $b2
            );
            println!("{}: {:.2} cycles", $name, 1.0 / per_cycle(2 * m, t));
        }};
    }
    sub_block!(
        "4 vpdpbusd + vcvtdq2ps + vfmadd231ps",
        "vcvtdq2ps zmm6, zmm28",
        "vfmadd231ps zmm7, zmm28, zmm6",
        "vcvtdq2ps zmm8, zmm28",
        "vfmadd231ps zmm9, zmm28, zmm8"
    );
    sub_block!(
        "4 vpdpbusd + vpmulld + vpaddd",
        "vpmulld zmm6, zmm28, zmm29",
        "vpaddd zmm7, zmm28, zmm6",
        "vpmulld zmm8, zmm28, zmm29",
        "vpaddd zmm9, zmm28, zmm8"
    );
}

#[cfg(not(target_arch = "x86_64"))]
fn main() {
    eprintln!("vnni_peak measures x86-64 AVX-512 VNNI only");
}
