//! The sandbox every policy call runs in (POL-2, POL-3): the engine
//! configuration, the per-store limits, and how a failed call is told apart
//! (fuel, memory, stack, other trap).
//!
//! Invariant: a store that saw any failure is dropped by its owner; nothing here
//! tries to reuse one.

use wasmtime::{
    Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, ResourceLimiter, Store,
    StoreLimits, StoreLimitsBuilder, Trap,
};

use super::error::{PolicyCall, PolicyError};

/// Limits for every call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SandboxLimits {
    /// Fuel per call (about one unit per wasm instruction).
    pub fuel: u64,
    /// Linear memory cap per instance, in bytes.
    pub memory_bytes: usize,
    /// Wasm stack cap, in bytes.
    pub stack_bytes: usize,
    /// Largest answer the host admits, in bytes (see `model::WireSize`).
    pub answer_bytes: usize,
}

impl Default for SandboxLimits {
    /// Room for an evaluation over a ledger of tens of thousands of effects;
    /// small enough that a runaway guest stops within a fraction of a second.
    fn default() -> Self {
        Self { fuel: 500_000_000, memory_bytes: 256 << 20, stack_bytes: 512 << 10, answer_bytes: 4 << 20 }
    }
}

/// The engine all components of one policy set share. Deterministic by
/// construction: NaN canonicalization and no relaxed SIMD are set here; threads
/// and component-model-async are not even compiled in (wasmtime's `threads` and
/// `component-model-async` features are off in Cargo.toml, so no configuration
/// can turn them on).
pub(crate) fn engine(limits: &SandboxLimits) -> wasmtime::Result<Engine> {
    let mut config = Config::new();
    config
        .wasm_component_model(true)
        .consume_fuel(true)
        .cranelift_nan_canonicalization(true)
        .wasm_relaxed_simd(false)
        .max_wasm_stack(limits.stack_bytes)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool(limits)));
    Engine::new(&config)
}

/// Live instances one engine serves at once: a warm instance per component of
/// a policy set, plus room for fresh ones while a failed store is replaced.
const POOLED_INSTANCES: u32 = 32;

/// Bytes of a memory slot kept resident when its instance is dropped: they are
/// zeroed with `memset` for the next instance instead of being returned to the
/// kernel, so a fresh evaluator does not page-fault its way through the ledger
/// it lifts (each decision runs on a fresh instance).
///
/// The `memset` covers everything the instance could reach, so the guests are
/// linked with a small shadow stack (`docs/toolchain.md`): a 1 MiB stack made
/// it most of a fresh instance's cost. Wasmtime's `PAGEMAP_SCAN` reset (only
/// the pages an instance dirtied) would cut it further, but in wasmtime 48 it
/// resets only dirty pages that are present: one swapped out or migrated at
/// that moment keeps the last instance's bytes for the next (upstream PR
/// #14357). Isolation between instances comes first (POL-3), so it stays off.
const KEEP_RESIDENT: usize = 64 << 20;

/// Bytes of a table slot reset with `memset` rather than `madvise` on drop:
/// a guest's tables are a few KiB, and the `madvise` was a system call per
/// fresh instance.
const KEEP_RESIDENT_TABLES: usize = 1 << 20;

/// The pooling allocator: slots are reserved once per engine, so a fresh
/// instance (the first call, or the call after a failure) costs a slot reuse and
/// a copy-on-write memory image instead of fresh mappings.
fn pool(limits: &SandboxLimits) -> PoolingAllocationConfig {
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(POOLED_INSTANCES)
        .total_core_instances(POOLED_INSTANCES * 4)
        .total_memories(POOLED_INSTANCES * 2)
        .total_tables(POOLED_INSTANCES * 4)
        .max_memory_size(limits.memory_bytes)
        .linear_memory_keep_resident(KEEP_RESIDENT)
        .pagemap_scan(Enabled::No)
        .table_keep_resident(KEEP_RESIDENT_TABLES);
    pool
}

/// Per-store state: the limiter, which remembers why it said no.
pub(crate) struct StoreState {
    limiter: Limiter,
}

impl StoreState {
    /// The memory request the limiter refused, if it refused one.
    pub(crate) fn refused_memory(&self) -> Option<usize> {
        self.limiter.refused_memory
    }
}

/// [`StoreLimits`] plus a record of the memory request it refused, so a memory
/// bomb is reported as one rather than as the guest's own abort.
struct Limiter {
    limits: StoreLimits,
    refused_memory: Option<usize>,
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let allowed = self.limits.memory_growing(current, desired, maximum);
        if !matches!(allowed, Ok(true)) {
            self.refused_memory = Some(desired);
        }
        allowed
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.limits.table_growing(current, desired, maximum)
    }

    fn instances(&self) -> usize {
        self.limits.instances()
    }

    fn tables(&self) -> usize {
        self.limits.tables()
    }

    fn memories(&self) -> usize {
        self.limits.memories()
    }
}

/// A fresh store under `limits`, fuel not yet set.
pub(crate) fn store(engine: &Engine, limits: &SandboxLimits) -> Store<StoreState> {
    let limits_for_store = StoreLimitsBuilder::new()
        .memory_size(limits.memory_bytes)
        .instances(16)
        .tables(16)
        .memories(4)
        .trap_on_grow_failure(true)
        .build();
    let mut store = Store::new(
        engine,
        StoreState { limiter: Limiter { limits: limits_for_store, refused_memory: None } },
    );
    store.limiter(|state| &mut state.limiter);
    store
}

/// Turns a failed call into the error that says what happened.
pub(crate) fn classify_failure(
    error: wasmtime::Error,
    store: &Store<StoreState>,
    component: &str,
    call: PolicyCall,
    limits: &SandboxLimits,
) -> PolicyError {
    let component = component.to_owned();
    if let Some(requested) = store.data().refused_memory() {
        return PolicyError::MemoryLimit { component, call, limit: limits.memory_bytes, requested };
    }
    match error.downcast_ref::<Trap>() {
        Some(Trap::OutOfFuel) => PolicyError::OutOfFuel { component, call, fuel: limits.fuel },
        Some(Trap::StackOverflow) => {
            PolicyError::StackOverflow { component, call, limit: limits.stack_bytes }
        }
        _ => PolicyError::Trap { component, call, message: format!("{error:#}") },
    }
}
