//! The on-disk cache of compiled components, so `effects` does not recompile
//! every policy on every start.
//!
//! Layout: `<cache dir>/<engine compatibility hash>/<component sha256>.cwasm`.
//! The first segment changes whenever wasmtime's version or the engine's
//! configuration does (`Engine::precompile_compatibility_hash`), so a stale
//! artifact is never even looked at. Entries are written to a temporary name and
//! renamed into place, so a crash leaves either the old entry or none.
//!
//! Trust boundary: loading a `.cwasm` runs native code wasmtime produced, so the
//! cache directory must be as private as the effect log beside it (both live in
//! the data dir, `0700`). A file that fails to load is recompiled and replaced.
//! A cache that cannot be written is reported and otherwise ignored: it is an
//! optimisation, never a reason to refuse a call.

use std::hash::{DefaultHasher, Hash, Hasher};

use cap_std::fs::Dir;
use wasmtime::Engine;
use wasmtime::component::Component;

use crate::digest::Sha256Digest;

/// A directory of compiled components, reached only through a capability.
pub struct CompileCache {
    dir: Dir,
}

impl CompileCache {
    /// A cache rooted at `dir` (created by the caller, who holds the authority).
    pub fn new(dir: Dir) -> Self {
        Self { dir }
    }

    /// The compiled component for `bytes` (whose digest is `digest`), from the
    /// cache when a usable entry exists, else compiled now and stored.
    pub(crate) fn load_or_compile(
        &self,
        engine: &Engine,
        digest: &Sha256Digest,
        bytes: &[u8],
    ) -> wasmtime::Result<Component> {
        let mut hasher = DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let bucket = format!("{:016x}", hasher.finish());
        let entry = format!("{bucket}/{digest}.cwasm");
        if let Ok(compiled) = self.dir.read(&entry) {
            // SAFETY: the entry was written by `store` below from wasmtime's own
            // serialization, in a directory only this user can write (see the
            // module docs); a truncated or foreign-engine file is rejected by
            // wasmtime's header checks and we fall through to recompiling.
            match unsafe { Component::deserialize(engine, &compiled) } {
                Ok(component) => return Ok(component),
                Err(error) => tracing::warn!(%entry, "discarding unusable compiled component: {error:#}"),
            }
        }
        let component = Component::new(engine, bytes)?;
        if let Err(error) = self.store(&bucket, &entry, &component) {
            tracing::warn!(%entry, "could not cache the compiled component: {error:#}");
        }
        Ok(component)
    }

    fn store(&self, bucket: &str, entry: &str, component: &Component) -> anyhow::Result<()> {
        self.dir.create_dir_all(bucket)?;
        let temporary = format!("{entry}.tmp-{}", std::process::id());
        self.dir.write(&temporary, component.serialize()?)?;
        self.dir.rename(&temporary, &self.dir, entry)?;
        Ok(())
    }
}
