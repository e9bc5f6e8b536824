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

    /// Whether the packed products use AMX tiles ([`Isa::tiles_supported`], unless
    /// `KESTREL_ISA` caps the ISA: `avx512` keeps the AVX-512 VNNI kernels, as do the lower caps).
    pub fn tiles() -> bool {
        static TILES: OnceLock<bool> = OnceLock::new();
        *TILES.get_or_init(|| {
            let capped = std::env::var("KESTREL_ISA").is_ok_and(|v| v == "avx512");
            Self::detected() == Isa::Avx512Vnni && !capped && Self::tiles_supported()
        })
    }

    /// Whether this CPU has AMX with 8-bit tile products and the kernel granted this process
    /// the tile state (asked once); not capped by `KESTREL_ISA`.
    pub fn tiles_supported() -> bool {
        static SUPPORTED: OnceLock<bool> = OnceLock::new();
        *SUPPORTED.get_or_init(|| Self::supported() == Isa::Avx512Vnni && amx::granted())
    }

    /// Whether products of BF16 weights use AMX-BF16 tile products (`tdpbf16ps`): the CPU has
    /// AMX-BF16 as well as the 8-bit tiles of [`Isa::tiles`], and `KESTREL_ISA` does not cap
    /// the ISA (as for [`Isa::tiles`]).
    pub fn bf16_tiles() -> bool {
        static BF16: OnceLock<bool> = OnceLock::new();
        *BF16.get_or_init(|| Self::tiles() && Self::bf16_tiles_supported())
    }

    /// Whether this CPU has AMX-BF16 tile products and the process was granted the tile state;
    /// not capped by `KESTREL_ISA`.
    pub fn bf16_tiles_supported() -> bool {
        Self::tiles_supported() && amx::bf16()
    }

    /// Whether products of BF16 weights without AMX-BF16 use AVX512-BF16 `vdpbf16ps`
    /// ([`Isa::bf16_dot_supported`]): the detected ISA is AVX-512 (`KESTREL_ISA=avx2` or
    /// `scalar` turns it off).
    pub fn bf16_dot() -> bool {
        static DOT: OnceLock<bool> = OnceLock::new();
        *DOT.get_or_init(|| Self::detected() == Isa::Avx512Vnni && Self::bf16_dot_supported())
    }

    /// Whether this CPU runs AVX512-BF16 (`vdpbf16ps`) on top of [`Isa::Avx512Vnni`]; not
    /// capped by `KESTREL_ISA`.
    pub fn bf16_dot_supported() -> bool {
        static SUPPORTED: OnceLock<bool> = OnceLock::new();
        *SUPPORTED.get_or_init(|| {
            #[cfg(target_arch = "x86_64")]
            {
                Self::supported() == Isa::Avx512Vnni && is_x86_feature_detected!("avx512bf16")
            }
            #[cfg(not(target_arch = "x86_64"))]
            {
                false
            }
        })
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

/// AMX detection: the CPU reports AMX-TILE and AMX-INT8, the OS saves the tile state (XCR0),
/// and Linux grants this process its use (`arch_prctl(ARCH_REQ_XCOMP_PERM)`).
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod amx {
    use std::arch::x86_64::{__cpuid_count, _xgetbv};

    const SYS_ARCH_PRCTL: i64 = 158;
    const ARCH_REQ_XCOMP_PERM: i64 = 0x1023;
    const XFEATURE_XTILEDATA: i64 = 18;
    /// XCR0 bits 17 (TILECFG) and 18 (TILEDATA).
    const XCR0_TILES: u64 = 0b11 << 17;

    pub(super) fn granted() -> bool {
        // CPUID leaf 7 exists on every x86-64 CPU with AVX-512, which the caller checked.
        let leaf7 = __cpuid_count(7, 0);
        let (tile, int8) = (leaf7.edx & (1 << 24) != 0, leaf7.edx & (1 << 25) != 0);
        // CPUID.1:ECX.OSXSAVE (bit 27) says `xgetbv` may run.
        let osxsave = __cpuid_count(1, 0).ecx & (1 << 27) != 0;
        if !(tile && int8 && osxsave) {
            return false;
        }
        // SAFETY: OSXSAVE is set (checked above).
        let xcr0 = unsafe { xgetbv0() };
        xcr0 & XCR0_TILES == XCR0_TILES && request_tile_data()
    }

    /// Whether CPUID reports AMX-BF16 (leaf 7, EDX bit 22).
    pub(super) fn bf16() -> bool {
        __cpuid_count(7, 0).edx & (1 << 22) != 0
    }

    /// XCR0.
    ///
    /// # Safety
    /// CPUID reports OSXSAVE.
    #[target_feature(enable = "xsave")]
    unsafe fn xgetbv0() -> u64 {
        // SAFETY: the caller's contract (OSXSAVE), under which `xgetbv` reads XCR0.
        unsafe { _xgetbv(0) }
    }

    /// Asks Linux for the tile data state; without it the first tile instruction faults.
    fn request_tile_data() -> bool {
        let ret: i64;
        // SAFETY: the `arch_prctl` system call reads its two integer arguments and changes only
        // this process's permitted extended state; the registers the `syscall` instruction
        // clobbers (rcx, r11) are declared.
        unsafe {
            std::arch::asm!(
                "syscall",
                inlateout("rax") SYS_ARCH_PRCTL => ret,
                in("rdi") ARCH_REQ_XCOMP_PERM,
                in("rsi") XFEATURE_XTILEDATA,
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack),
            );
        }
        ret == 0
    }
}

/// No AMX off x86-64 Linux.
#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
mod amx {
    pub(super) fn granted() -> bool {
        false
    }

    pub(super) fn bf16() -> bool {
        false
    }
}
