//! Run-time CPU feature detection. The ISA is detected once and cached.

use std::sync::OnceLock;

/// Instruction-set levels Kestrel has kernels for, from weakest to strongest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Isa {
    /// Portable Rust, no explicit SIMD. Also the reference for tests.
    Scalar,
    /// x86-64 AVX2 + FMA + F16C.
    Avx2,
    /// x86-64 AVX-512 F/BW/VL with VNNI (`vpdpbusd`).
    Avx512Vnni,
}

impl Isa {
    /// The best ISA this CPU supports. `KESTREL_ISA=scalar|avx2|avx512` caps it (for testing
    /// and benchmarking the fallbacks).
    pub fn detected() -> Isa {
        static DETECTED: OnceLock<Isa> = OnceLock::new();
        *DETECTED.get_or_init(|| {
            let best = Self::probe();
            match std::env::var("KESTREL_ISA").ok().as_deref() {
                Some("scalar") => Isa::Scalar,
                Some("avx2") => best.min(Isa::Avx2),
                _ => best,
            }
        })
    }

    /// The best ISA this CPU supports, probed once (not capped by `KESTREL_ISA`): the ceiling
    /// for variants requested explicitly.
    pub fn supported() -> Isa {
        static SUPPORTED: OnceLock<Isa> = OnceLock::new();
        *SUPPORTED.get_or_init(Self::probe)
    }

    /// Every ISA this CPU can run, weakest first (tests iterate over these).
    pub fn available() -> Vec<Isa> {
        let best = Self::probe();
        [Isa::Scalar, Isa::Avx2, Isa::Avx512Vnni]
            .into_iter()
            .filter(|i| *i <= best)
            .collect()
    }

    fn probe() -> Isa {
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512bw")
                && is_x86_feature_detected!("avx512vl")
                && is_x86_feature_detected!("avx512vnni")
                && is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c")
            {
                return Isa::Avx512Vnni;
            }
            if is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c")
            {
                return Isa::Avx2;
            }
        }
        Isa::Scalar
    }

    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512Vnni => "avx512-vnni",
        }
    }
}
