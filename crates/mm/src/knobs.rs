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
    /// 2 MiB multiples are 2 MiB-aligned; PCP auto-tuning with today's
    /// growth rule (`ZONE_BELOW_HIGH`), `free_high` threshold and chunked drains.
    Linux6_18,
    /// Linux 6.7: the PCP auto-tuning series as merged.
    Linux6_7,
}

impl Preset {
    /// Every preset.
    pub const ALL: &'static [Preset] = &[
        Preset::Linux4_18,
        Preset::Linux4_19,
        Preset::Linux6_6,
        Preset::Linux6_7,
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
        }
    }

    /// The preset called `name`.
    pub fn from_name(name: &str) -> Option<Preset> {
        Preset::ALL.iter().copied().find(|p| p.name() == name)
    }

    /// The configuration of this release with default knobs.
    pub fn config(self) -> KernelConfig {
        use crate::memory::{MmConfig, ThpCow};
        use crate::vma::MmapLayout;
        use crate::vmacache::VmacachePolicy;
        let mm = match self {
            Preset::Linux4_18 | Preset::Linux4_19 => MmConfig {
                thp_cow: ThpCow::CopyHuge,
                mmap_layout: MmapLayout::PageAligned,
                ..MmConfig::default()
            },
            Preset::Linux6_6 | Preset::Linux6_7 | Preset::Linux6_18 => MmConfig::default(),
        };
        let pcp = match self {
            Preset::Linux4_18 | Preset::Linux4_19 | Preset::Linux6_6 => PcpPolicy::default(),
            Preset::Linux6_7 => PcpPolicy::linux_6_7(),
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
                Preset::Linux6_6 | Preset::Linux6_7 | Preset::Linux6_18 => VmacachePolicy::None,
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
                for (i, k) in KNOBS.iter().enumerate() {
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
];

impl KernelConfig {
    /// Sets knob `name` to `value`, validating it as the kernel does.
    pub fn set_knob(&mut self, name: &str, value: &KnobValue) -> Result<(), KnobError> {
        let knob = KNOBS
            .iter()
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
    fn unknown_knob_lists_valid_ones() {
        let mut c = Preset::Linux6_6.config();
        let e = c.set_knob("vm.nope", &KnobValue::Int(1)).unwrap_err();
        let s = e.to_string();
        assert!(s.contains("unknown knob \"vm.nope\""), "{s}");
        assert!(s.contains("vm.percpu_pagelist_high_fraction"), "{s}");
    }
}
