//! Kernel presets and knobs by their kernel names.
//!
//! A *kernel* in an experiment is a preset (the behaviour of one kernel
//! release) plus knobs set by their sysctl/sysfs names, e.g.
//! `"vm.percpu_pagelist_high_fraction" = 8`. Each knob validates its value as
//! the kernel's handler does and rejects what the kernel would reject.

use crate::page_alloc::VmSysctl;
use crate::pcp::{PcpPolicy, MIN_PERCPU_PAGELIST_HIGH_FRACTION};
use std::fmt;

/// The full configuration of a simulated kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelConfig {
    /// The preset it started from.
    pub preset: Preset,
    /// `vm.*` sysctls.
    pub sysctl: VmSysctl,
    /// PCP behaviour.
    pub pcp: PcpPolicy,
    /// Fault path: THP knob, THP copy-on-write, mmap placement.
    pub mm: crate::memory::MmConfig,
    /// The per-task VMA cache in front of `find_vma()` (Linux 3.15–6.0), or
    /// none (Linux 6.1+).
    pub vmacache: crate::vmacache::VmacachePolicy,
    /// Page migration: flow, copy engine and the seed's sysctls.
    pub migrate: crate::migrate::MigrateConfig,
}

/// A kernel release whose behaviour the model can follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Preset {
    /// Linux 6.6: PCP `high` from the low watermark, no auto-tuning.
    Linux6_6,
    /// Linux 4.18: THP copy-on-write copies the whole 2 MiB; no THP
    /// alignment of anonymous mappings; the VMA cache hashes by page
    /// number. PCP as in 6.6 (deviation).
    Linux4_18,
    /// Linux 4.19: as 4.18, but the VMA cache hashes by PMD (seed 002,
    /// merged for 4.19).
    Linux4_19,
    /// Linux 6.18: THP copy-on-write splits the PMD; anonymous mappings of
    /// 2 MiB multiples are 2 MiB-aligned; multi-size THP (per-size knobs,
    /// defaults: PMD size `inherit`, others `never`); PCP auto-tuning with
    /// today's growth rule (`ZONE_BELOW_HIGH`), `free_high` threshold and
    /// chunked drains.
    Linux6_18,
    /// Linux 6.7: the PCP auto-tuning series as merged; no mTHP.
    Linux6_7,
    /// Linux 6.8: the first release with multi-size THP (the
    /// `transparent_hugepage/hugepages-<size>kB/enabled` knobs); PCP as in
    /// 6.7; mmap alignment as in 6.18 (deviation).
    Linux6_8,
}

impl Preset {
    /// Every preset.
    pub const ALL: &'static [Preset] = &[
        Preset::Linux4_18,
        Preset::Linux4_19,
        Preset::Linux6_6,
        Preset::Linux6_7,
        Preset::Linux6_8,
        Preset::Linux6_18,
    ];

    /// The preset's name in experiment files.
    pub fn name(self) -> &'static str {
        match self {
            Preset::Linux6_6 => "linux-6.6",
            Preset::Linux4_18 => "linux-4.18",
            Preset::Linux4_19 => "linux-4.19",
            Preset::Linux6_18 => "linux-6.18",
            Preset::Linux6_7 => "linux-6.7",
            Preset::Linux6_8 => "linux-6.8",
        }
    }

    /// The preset called `name`.
    pub fn from_name(name: &str) -> Option<Preset> {
        Preset::ALL.iter().copied().find(|p| p.name() == name)
    }

    /// The configuration of this release with default knobs.
    pub fn config(self) -> KernelConfig {
        use crate::memory::{AnonFolioPolicy, MmConfig, ThpCow};
        use crate::vma::MmapLayout;
        use crate::vmacache::VmacachePolicy;
        let mm = match self {
            Preset::Linux4_18 | Preset::Linux4_19 => MmConfig {
                thp_cow: ThpCow::CopyHuge,
                mmap_layout: MmapLayout::PageAligned,
                anon_folio: AnonFolioPolicy::Off,
                // PAGEVEC_SIZE of the 4.9-4.14 kernels the 4.x presets
                // stand for (seed 001 ran 4.9); see MmConfig.
                lru_batch_size: 14,
                map_stack_nohugepage: false,
                ..MmConfig::default()
            },
            // No large anonymous folios below PMD size before 6.8.
            Preset::Linux6_6 => MmConfig {
                anon_folio: AnonFolioPolicy::Off,
                map_stack_nohugepage: false,
                ..MmConfig::default()
            },
            Preset::Linux6_7 => MmConfig {
                anon_folio: AnonFolioPolicy::Off,
                ..MmConfig::default()
            },
            Preset::Linux6_8 | Preset::Linux6_18 => MmConfig::default(),
        };
        let pcp = match self {
            Preset::Linux4_18 | Preset::Linux4_19 | Preset::Linux6_6 => PcpPolicy::default(),
            Preset::Linux6_7 | Preset::Linux6_8 => PcpPolicy::linux_6_7(),
            Preset::Linux6_18 => PcpPolicy::linux_6_18(),
        };
        KernelConfig {
            preset: self,
            sysctl: VmSysctl::default(),
            pcp,
            mm,
            vmacache: match self {
                Preset::Linux4_18 => VmacachePolicy::Pfn,
                Preset::Linux4_19 => VmacachePolicy::Pmd,
                Preset::Linux6_6 | Preset::Linux6_7 | Preset::Linux6_8 | Preset::Linux6_18 => {
                    VmacachePolicy::None
                }
            },
            // Batched migration since 6.3; lru_cache_disable() in
            // move_pages() since 5.13.
            migrate: match self {
                Preset::Linux4_18 | Preset::Linux4_19 => crate::migrate::MigrateConfig {
                    flow: crate::migrate::MigrateFlow::PerFolio,
                    lru_cache_disable: false,
                    ..crate::migrate::MigrateConfig::default()
                },
                _ => crate::migrate::MigrateConfig::default(),
            },
        }
    }
}

/// A knob value as written in an experiment file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KnobValue {
    /// An integer.
    Int(i64),
    /// A string (sysfs choices such as `always`).
    Str(String),
}

impl fmt::Display for KnobValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KnobValue::Int(v) => write!(f, "{v}"),
            KnobValue::Str(s) => write!(f, "\"{s}\""),
        }
    }
}

/// Why a knob could not be set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KnobError {
    /// No knob of that name exists in the model.
    Unknown {
        /// The name given.
        name: String,
    },
    /// The value is of the wrong kind or outside the kernel's range.
    Invalid {
        /// The knob.
        name: &'static str,
        /// The value given.
        value: KnobValue,
        /// What the kernel accepts.
        expected: &'static str,
    },
}

impl fmt::Display for KnobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KnobError::Unknown { name } => {
                write!(f, "unknown knob \"{name}\"; valid knobs: ")?;
                for (i, k) in all_knobs().enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{}", k.name)?;
                }
                Ok(())
            }
            KnobError::Invalid {
                name,
                value,
                expected,
            } => write!(
                f,
                "invalid value {value} for {name}: the kernel accepts {expected} (EINVAL)"
            ),
        }
    }
}

impl std::error::Error for KnobError {}

/// The description of one knob.
pub struct Knob {
    /// The knob's kernel name.
    pub name: &'static str,
    /// What values it accepts, in words.
    pub accepts: &'static str,
    /// What it does.
    pub help: &'static str,
    set: fn(&mut KernelConfig, i64) -> bool,
    set_str: Option<fn(&mut KernelConfig, &str) -> bool>,
}

/// Every knob the model knows.
pub const KNOBS: &[Knob] = &[
    Knob {
        name: "vm.percpu_pagelist_high_fraction",
        accepts: "0, or an integer from 8 to 2147483647",
        help: "0 sizes each CPU's PCP high from the zone's low watermark; N >= 8 \
               sizes it as 1/N of the zone, shared among the node's CPUs",
        set: |c, v| {
            let ok =
                v == 0 || (MIN_PERCPU_PAGELIST_HIGH_FRACTION as i64..=i32::MAX as i64).contains(&v);
            if ok {
                c.sysctl.percpu_pagelist_high_fraction = v as u32;
            }
            ok
        },
        set_str: None,
    },
    Knob {
        name: "vm.min_free_kbytes",
        accepts: "an integer from 0 to 2147483647",
        help: "memory kept free below the min watermark, in KiB (default: computed at boot)",
        set: |c, v| {
            let ok = (0..=i32::MAX as i64).contains(&v);
            if ok {
                c.sysctl.min_free_kbytes = Some(v as u64);
            }
            ok
        },
        set_str: None,
    },
    Knob {
        name: "kernel.randomize_va_space",
        accepts: "an integer (0 off; 1 and 2 randomize)",
        help: "ASLR: nonzero lowers each new address space's mmap_base by a random \
               number of pages (28 bits), drawn from the run's seed; the model's default \
               is 0 (the kernel's is 2)",
        // proc_dointvec: any int; every nonzero value sets PF_RANDOMIZE.
        set: |c, v| {
            let ok = (i32::MIN as i64..=i32::MAX as i64).contains(&v);
            if ok {
                c.mm.randomize_va_space = v as i32;
            }
            ok
        },
        set_str: None,
    },
    Knob {
        name: "vm.watermark_scale_factor",
        accepts: "an integer from 1 to 3000",
        help: "distance between watermarks in 1/10000 of the zone (default 10)",
        set: |c, v| {
            let ok = (1..=3000).contains(&v);
            if ok {
                c.sysctl.watermark_scale_factor = v as u64;
            }
            ok
        },
        set_str: None,
    },
    Knob {
        name: "CONFIG_PCP_BATCH_SCALE_MAX",
        accepts: "an integer from 0 to 6",
        help: "build-time cap of the PCP batch scale factors (default 5; patch 4 of the \
               PCP auto-tuning series onwards)",
        set: |c, v| {
            let ok = (0..=6).contains(&v);
            if ok {
                c.pcp.batch_scale_max = v as u8;
            }
            ok
        },
        set_str: None,
    },
    Knob {
        name: "mmlab.pcp_autotune_patches",
        accepts: "an integer from 0 to 10",
        help: "model-only: apply the first N patches of the PCP high auto-tuning series \
               (seed 003) on top of Linux 6.6's PCP; 10 is Linux 6.7",
        set: |c, v| {
            let ok = (0..=10).contains(&v);
            if ok {
                c.pcp.patches = v as u8;
            }
            ok
        },
        set_str: None,
    },
    Knob {
        name: "transparent_hugepage/enabled",
        accepts: "always, madvise or never",
        help: "PMD-size THP for every anonymous VMA, only for MADV_HUGEPAGE ones, or none",
        set: |_, _| false,
        set_str: Some(|c, s| match crate::memory::ThpEnabled::parse(s) {
            Some(v) => {
                c.mm.thp_enabled = v;
                true
            }
            None => false,
        }),
    },
    Knob {
        name: "mmlab.vmacache",
        accepts: "pfn, pmd, lru or none",
        help: "model-only knob, no kernel has it: the per-task VMA cache hashes by page \
               (3.15-4.18), by PMD (4.19-6.0), keeps its 4 slots LRU-ordered (a review \
               proposal, never merged), or is absent (6.1+)",
        set: |_, _| false,
        set_str: Some(|c, s| match crate::vmacache::VmacachePolicy::parse(s) {
            Some(v) => {
                c.vmacache = v;
                true
            }
            None => false,
        }),
    },
    Knob {
        name: "vm.nr_hugepages",
        accepts: "an integer from 0 to 9223372036854775807",
        help: "persistent 2 MiB hugetlb pool size, set up at boot from the buddy allocator \
               (as many as memory allows; default 0)",
        set: set_nr_hugepages,
        set_str: None,
    },
    Knob {
        name: "hugepages/hugepages-2048kB/nr_hugepages",
        accepts: "an integer from 0 to 9223372036854775807",
        help: "the same as vm.nr_hugepages (the 2 MiB page size is the default hstate)",
        set: set_nr_hugepages,
        set_str: None,
    },
    Knob {
        name: "vm.nr_overcommit_hugepages",
        accepts: "an integer from 0 to 9223372036854775807",
        help: "surplus 2 MiB hugetlb pages that may be allocated beyond nr_hugepages when a \
               mapping reserves or a fault needs them (default 0)",
        set: set_nr_overcommit_hugepages,
        set_str: None,
    },
    Knob {
        name: "hugepages/hugepages-2048kB/nr_overcommit_hugepages",
        accepts: "an integer from 0 to 9223372036854775807",
        help: "the same as vm.nr_overcommit_hugepages",
        set: set_nr_overcommit_hugepages,
        set_str: None,
    },
];

/// `vm.nr_hugepages` (`hugetlb_sysctl_handler()`: an unsigned long).
fn set_nr_hugepages(c: &mut KernelConfig, v: i64) -> bool {
    let ok = v >= 0;
    if ok {
        c.mm.nr_hugepages = v as u64;
    }
    ok
}

/// `vm.nr_overcommit_hugepages` (`hugetlb_overcommit_handler()`).
fn set_nr_overcommit_hugepages(c: &mut KernelConfig, v: i64) -> bool {
    let ok = v >= 0;
    if ok {
        c.mm.nr_overcommit_hugepages = v as u64;
    }
    ok
}
/// The sysctls of the seed's parallel-copy series (seed 001 and its 2019
/// follow-up). No mainline kernel has them; they act only with a copy
/// engine other than `single`.
pub const MIGRATE_KNOBS: &[Knob] = &[
    Knob {
        name: "vm.accel_page_copy",
        accepts: "0 or 1",
        help: "seed 001's sysctl (default 1): copy every huge page with the multi-threaded \
               engine, not only on move_pages(MPOL_MF_MOVE_MT); needs \
               mmlab.migrate_copy_engine other than single",
        set: |c, v| {
            let ok = v == 0 || v == 1;
            if ok {
                c.migrate.accel_page_copy = v == 1;
            }
            ok
        },
        set_str: None,
    },
    Knob {
        name: "vm.limit_mt_num",
        accepts: "an integer from 1 to 1024",
        help: "the 2019 follow-up's sysctl: most threads one copy uses (default 4, the seed's \
               hard-coded count; copy_page_mt rounds it down to even)",
        set: |c, v| {
            let ok = (1..=1024).contains(&v);
            if ok {
                c.migrate.limit_mt_num = v as u32;
            }
            ok
        },
        set_str: None,
    },
    Knob {
        name: "mmlab.migrate_copy_engine",
        accepts: "single, mt, adaptive, batched or dma",
        help: "MODEL-ONLY: how migration copies data in the multi-threaded mode: single \
               (mainline, no such mode), mt (seed 001's copy_page_mt), adaptive (threads \
               chosen per copy, distinct cores first), batched (2025 series: one copy per \
               batch) or dma (a DMA engine, CPU fallback)",
        set: |_, _| false,
        set_str: Some(|c, s| match crate::copy_page::CopyEngine::parse(s) {
            Some(e) => {
                c.migrate.copy_engine = e;
                true
            }
            None => false,
        }),
    },
    Knob {
        name: "mmlab.migrate_flow",
        accepts: "batched or per-folio",
        help: "MODEL-ONLY: migrate_pages() in batches with one TLB flush each (6.3+) or \
               unmap_and_move() one folio at a time (<= 6.2; presets linux-4.18/4.19)",
        set: |_, _| false,
        set_str: Some(|c, s| match crate::migrate::MigrateFlow::parse(s) {
            Some(f) => {
                c.migrate.flow = f;
                true
            }
            None => false,
        }),
    },
];

/// Sets `transparent_hugepage/hugepages-<4 << ORDER>kB/enabled`; only
/// where the kernel has the file (the `mthp` policy, Linux ≥ 6.8).
fn set_mthp_enabled<const ORDER: usize>(c: &mut KernelConfig, s: &str) -> bool {
    match crate::memory::MthpEnabled::parse(s) {
        Some(v) if c.mm.anon_folio == crate::memory::AnonFolioPolicy::Mthp => {
            c.mm.mthp_enabled[ORDER] = v;
            true
        }
        _ => false,
    }
}

macro_rules! mthp_knob {
    ($order:literal, $name:literal) => {
        Knob {
            name: $name,
            accepts: "always, inherit, madvise or never (presets with multi-size THP: \
                      linux-6.8, linux-6.18, or mmlab.anon_folio_policy = \"mthp\")",
            help: "this folio size for every anonymous VMA, as the top-level \
                   transparent_hugepage/enabled says, only for MADV_HUGEPAGE ones, or never \
                   (default: inherit for 2048kB, never for the others)",
            set: |_, _| false,
            set_str: Some(set_mthp_enabled::<$order>),
        }
    };
}

/// The per-size knobs of multi-size THP (Linux 6.8+), 16 KiB to 2 MiB.
pub const MTHP_KNOBS: &[Knob] = &[
    mthp_knob!(2, "transparent_hugepage/hugepages-16kB/enabled"),
    mthp_knob!(3, "transparent_hugepage/hugepages-32kB/enabled"),
    mthp_knob!(4, "transparent_hugepage/hugepages-64kB/enabled"),
    mthp_knob!(5, "transparent_hugepage/hugepages-128kB/enabled"),
    mthp_knob!(6, "transparent_hugepage/hugepages-256kB/enabled"),
    mthp_knob!(7, "transparent_hugepage/hugepages-512kB/enabled"),
    mthp_knob!(8, "transparent_hugepage/hugepages-1024kB/enabled"),
    mthp_knob!(9, "transparent_hugepage/hugepages-2048kB/enabled"),
];

/// Model-only knobs: choices the kernel never offered (unmerged series).
pub const MODEL_KNOBS: &[Knob] = &[
    Knob {
        name: "mmlab.anon_folio_policy",
        accepts: "off, v1, v2, simple or mthp",
        help: "MODEL-ONLY (never a kernel knob): how an anonymous PTE-level fault picks its \
               folio order: off (4 KiB, <= 6.7), v1/v2 (the unmerged variable-order series, \
               seed 004), simple (preferred order or 4 KiB), mthp (6.8+ per-size knobs)",
        set: |_, _| false,
        set_str: Some(|c, s| match crate::memory::AnonFolioPolicy::parse(s) {
            Some(p) => {
                c.mm.anon_folio = p;
                true
            }
            None => false,
        }),
    },
    Knob {
        name: "mmlab.arch_wants_pte_order",
        accepts: "an integer from 0 to 8",
        help: "MODEL-ONLY: arch_wants_pte_order(), the preferred folio order of the v1/v2/simple \
               policies (default 4: 64 KiB; 0 or 1 means 4 KiB only)",
        set: |c, v| {
            let ok = (0..crate::types::HPAGE_PMD_ORDER as i64).contains(&v);
            if ok {
                c.mm.arch_pte_order = v as u8;
            }
            ok
        },
        set_str: None,
    },
    Knob {
        name: "mmlab.huge_clear_order",
        accepts: "sequential, target-last or neighbourhood",
        help: "MODEL-ONLY (no kernel knob; each value is a kernel era): the sub-page order of \
               folio_zero_user()/clear_huge_page() for THP, mTHP and hugetlb first touch: sequential \
               (before 4.14), target-last (process_huge_page(), 4.14+, the default), \
               neighbourhood (2025-26 work, unconfirmed: fringes ascending, radius-2 \
               neighbourhood of the target last)",
        set: |_, _| false,
        set_str: Some(
            |c, s| match crate::memory::huge_order::HugeOrderPolicy::from_name(s) {
                Some(p) => {
                    c.mm.clear_order = p;
                    true
                }
                None => false,
            },
        ),
    },
    Knob {
        name: "mmlab.huge_copy_order",
        accepts: "sequential, target-last or neighbourhood",
        help: "MODEL-ONLY (no kernel knob; each value is a kernel era): the sub-page order of \
               copy_user_large_folio()/copy_user_huge_page() in the 4.18-era THP COW and hugetlb COW: \
               sequential (before 4.18), target-last (seed 000, 4.18+, the default), \
               neighbourhood (the 2025-26 clearing order applied to copies)",
        set: |_, _| false,
        set_str: Some(
            |c, s| match crate::memory::huge_order::HugeOrderPolicy::from_name(s) {
                Some(p) => {
                    c.mm.copy_order = p;
                    true
                }
                None => false,
            },
        ),
    },
];

/// Every knob of every table, in listing order.
pub fn all_knobs() -> impl Iterator<Item = &'static Knob> {
    KNOBS
        .iter()
        .chain(MTHP_KNOBS)
        .chain(MODEL_KNOBS)
        .chain(MIGRATE_KNOBS)
}

impl KernelConfig {
    /// Sets knob `name` to `value`, validating it as the kernel does.
    pub fn set_knob(&mut self, name: &str, value: &KnobValue) -> Result<(), KnobError> {
        let knob = all_knobs()
            .find(|k| k.name == name)
            .ok_or_else(|| KnobError::Unknown {
                name: name.to_string(),
            })?;
        let invalid = || KnobError::Invalid {
            name: knob.name,
            value: value.clone(),
            expected: knob.accepts,
        };
        match value {
            KnobValue::Int(v) => {
                if (knob.set)(self, *v) {
                    Ok(())
                } else {
                    Err(invalid())
                }
            }
            KnobValue::Str(s) => match knob.set_str {
                Some(f) if f(self, s) => Ok(()),
                _ => Err(invalid()),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_order_knobs() {
        let mut c = Preset::Linux4_18.config();
        assert_eq!(
            c.mm.copy_order,
            crate::memory::huge_order::HugeOrderPolicy::TargetLast
        );
        c.set_knob(
            "mmlab.huge_copy_order",
            &KnobValue::Str("sequential".into()),
        )
        .unwrap();
        c.set_knob(
            "mmlab.huge_clear_order",
            &KnobValue::Str("neighbourhood".into()),
        )
        .unwrap();
        assert_eq!(
            c.mm.copy_order,
            crate::memory::huge_order::HugeOrderPolicy::Sequential
        );
        assert_eq!(
            c.mm.clear_order,
            crate::memory::huge_order::HugeOrderPolicy::Neighbourhood
        );
        let e = c
            .set_knob("mmlab.huge_copy_order", &KnobValue::Str("random".into()))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("sequential, target-last or neighbourhood"),
            "{e}"
        );
    }

    #[test]
    fn high_fraction_range_is_the_kernels() {
        let mut c = Preset::Linux6_6.config();
        for bad in [1, 7, -1] {
            let e = c
                .set_knob("vm.percpu_pagelist_high_fraction", &KnobValue::Int(bad))
                .unwrap_err();
            assert!(e.to_string().contains("0, or an integer from 8"), "{e}");
        }
        c.set_knob("vm.percpu_pagelist_high_fraction", &KnobValue::Int(8))
            .unwrap();
        assert_eq!(c.sysctl.percpu_pagelist_high_fraction, 8);
        c.set_knob("vm.percpu_pagelist_high_fraction", &KnobValue::Int(0))
            .unwrap();
        assert_eq!(c.sysctl.percpu_pagelist_high_fraction, 0);
    }

    #[test]
    fn vmacache_presets_and_knob() {
        use crate::vmacache::VmacachePolicy;
        assert_eq!(Preset::Linux4_18.config().vmacache, VmacachePolicy::Pfn);
        assert_eq!(Preset::Linux4_19.config().vmacache, VmacachePolicy::Pmd);
        assert_eq!(Preset::Linux6_6.config().vmacache, VmacachePolicy::None);
        assert_eq!(Preset::Linux6_18.config().vmacache, VmacachePolicy::None);
        let mut c = Preset::Linux6_18.config();
        c.set_knob("mmlab.vmacache", &KnobValue::Str("lru".into()))
            .unwrap();
        assert_eq!(c.vmacache, VmacachePolicy::Lru);
        let e = c
            .set_knob("mmlab.vmacache", &KnobValue::Str("fifo".into()))
            .unwrap_err();
        assert!(e.to_string().contains("pfn, pmd, lru or none"), "{e}");
    }

    #[test]
    fn hugetlb_knobs_validate() {
        let mut c = Preset::Linux6_18.config();
        c.set_knob("vm.nr_hugepages", &KnobValue::Int(16)).unwrap();
        assert_eq!(c.mm.nr_hugepages, 16);
        c.set_knob(
            "hugepages/hugepages-2048kB/nr_overcommit_hugepages",
            &KnobValue::Int(3),
        )
        .unwrap();
        assert_eq!(c.mm.nr_overcommit_hugepages, 3);
        let e = c
            .set_knob("vm.nr_hugepages", &KnobValue::Int(-1))
            .unwrap_err();
        assert!(e.to_string().contains("an integer from 0"), "{e}");
    }

    #[test]
    fn unknown_knob_lists_valid_ones() {
        let mut c = Preset::Linux6_6.config();
        let e = c.set_knob("vm.nope", &KnobValue::Int(1)).unwrap_err();
        let s = e.to_string();
        assert!(s.contains("unknown knob \"vm.nope\""), "{s}");
        assert!(s.contains("vm.percpu_pagelist_high_fraction"), "{s}");
    }

    #[test]
    fn mthp_knobs_validate_and_list() {
        let mut c = Preset::Linux6_8.config();
        let k = "transparent_hugepage/hugepages-64kB/enabled";
        c.set_knob(k, &KnobValue::Str("always".into())).unwrap();
        assert_eq!(c.mm.mthp_enabled[4], crate::memory::MthpEnabled::Always);
        let e = c
            .set_knob(k, &KnobValue::Str("sometimes".into()))
            .unwrap_err();
        assert!(
            e.to_string().contains("always, inherit, madvise or never"),
            "{e}"
        );
        let e = c
            .set_knob(
                "transparent_hugepage/hugepages-8kB/enabled",
                &KnobValue::Str("always".into()),
            )
            .unwrap_err();
        let s = e.to_string();
        assert!(s.contains("unknown knob"), "{s}");
        assert!(
            s.contains("transparent_hugepage/hugepages-16kB/enabled"),
            "{s}"
        );
        assert!(
            s.contains("transparent_hugepage/hugepages-2048kB/enabled"),
            "{s}"
        );
        // 6.6 has no per-size knobs.
        let mut old = Preset::Linux6_6.config();
        assert!(old.set_knob(k, &KnobValue::Str("always".into())).is_err());
        old.set_knob("mmlab.anon_folio_policy", &KnobValue::Str("v2".into()))
            .unwrap();
        assert_eq!(old.mm.anon_folio, crate::memory::AnonFolioPolicy::V2);
        assert!(old
            .set_knob("mmlab.anon_folio_policy", &KnobValue::Str("v3".into()))
            .is_err());
    }
}
