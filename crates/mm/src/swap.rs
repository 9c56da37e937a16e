//! The per-CPU LRU add batches of `mm/swap.c`: how many new folios each CPU
//! holds back from the LRU lists.
//!
//! A new anonymous folio is not put on its LRU list at once: `folio_add_lru()`
//! (4.x: `lru_cache_add()` → `__lru_cache_add()`) parks it in the faulting
//! CPU's batch (4.x: the `lru_add_pvec` pagevec; 5.x+: `cpu_fbatches.lru_add`)
//! and moves the whole batch under the LRU lock when it is full, or at once
//! for a large folio (`PageCompound()` since 4.7; `folio_test_large()` now).
//! `lru_add_drain()` empties the running CPU's batch (`exit_mmap()` and
//! `unmap_region()` call it); `lru_add_drain_all()` empties every CPU's that
//! holds pages, through a work item on each.
//!
//! The model keeps only each CPU's count, which is what decides whether
//! `lru_add_drain_all()` must queue work there (see
//! [`crate::migrate::MigrateCtx`]). It charges nothing for the LRU insertion
//! itself (deviation: the LRU lists are not modelled), and the other batches
//! (`lru_rotate`, `lru_deactivate*`, `activate`) are taken to be empty.

use crate::types::VcpuId;

/// Each CPU's number of folios waiting in its LRU add batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LruAddBatches {
    size: u8,
    nr: Vec<u8>,
}

impl Default for LruAddBatches {
    /// 6.18's batches (`FOLIO_BATCH_SIZE` 31).
    fn default() -> Self {
        LruAddBatches::new(31)
    }
}

impl LruAddBatches {
    /// Empty batches of `size` folios each (`PAGEVEC_SIZE`,
    /// `FOLIO_BATCH_SIZE`; see [`crate::memory::MmConfig::lru_batch_size`]).
    pub fn new(size: u8) -> LruAddBatches {
        LruAddBatches {
            size: size.max(1),
            nr: Vec::new(),
        }
    }

    /// Models `folio_add_lru()` on `cpu` (4.x `lru_cache_add()`): the batch
    /// takes the folio and is moved to the LRU when full or when the folio
    /// is large.
    pub fn folio_add_lru(&mut self, cpu: VcpuId, large: bool) {
        let i = cpu.0 as usize;
        if self.nr.len() <= i {
            self.nr.resize(i + 1, 0);
        }
        self.nr[i] += 1;
        if self.nr[i] >= self.size || large {
            self.nr[i] = 0;
        }
    }

    /// Models `lru_add_drain_cpu()`: `cpu`'s batch goes to the LRU.
    pub fn lru_add_drain_cpu(&mut self, cpu: VcpuId) {
        if let Some(n) = self.nr.get_mut(cpu.0 as usize) {
            *n = 0;
        }
    }

    /// Every CPU's batch goes to the LRU (`lru_add_drain_all()` once its
    /// work items have run, or `lru_cache_disable()`).
    pub fn drain_all(&mut self) {
        self.nr.iter_mut().for_each(|n| *n = 0);
    }

    /// The CPUs whose batch holds folios, in CPU order (the `has_work`
    /// mask of 4.x `lru_add_drain_all()`).
    pub fn cpus_with_folios(&self) -> Vec<u32> {
        (0..self.nr.len() as u32)
            .filter(|&c| self.nr[c as usize] > 0)
            .collect()
    }

    /// The folios waiting in `cpu`'s batch (`pagevec_count()`).
    pub fn count(&self, cpu: VcpuId) -> u8 {
        self.nr.get(cpu.0 as usize).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_moved_when_full_or_for_a_large_folio() {
        let mut b = LruAddBatches::new(14);
        for _ in 0..13 {
            b.folio_add_lru(VcpuId(2), false);
        }
        assert_eq!(b.count(VcpuId(2)), 13);
        assert_eq!(b.cpus_with_folios(), vec![2]);
        b.folio_add_lru(VcpuId(2), false);
        assert_eq!(b.count(VcpuId(2)), 0, "the 14th folio fills the pagevec");
        b.folio_add_lru(VcpuId(0), false);
        b.folio_add_lru(VcpuId(0), true);
        assert_eq!(b.count(VcpuId(0)), 0, "a THP drains the batch with it");
        b.folio_add_lru(VcpuId(1), false);
        b.folio_add_lru(VcpuId(3), false);
        assert_eq!(b.cpus_with_folios(), vec![1, 3]);
        b.lru_add_drain_cpu(VcpuId(1));
        assert_eq!(b.cpus_with_folios(), vec![3]);
        b.drain_all();
        assert!(b.cpus_with_folios().is_empty());
    }
}
