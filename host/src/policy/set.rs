//! A policy set: every component of one manifest, loaded and routed (POL-5): a
//! classifier per tool (or the `*` fallback) and at most one evaluator.

use std::collections::BTreeMap;

use wasmtime::Engine;

use super::cache::{CompileCache, EntryState};
use super::component::{ClassifierComponent, EvaluatorComponent, InstanceReuse, LoadContext};
use super::error::PolicyError;
use super::sandbox::{self, SandboxLimits};
use super::source::PolicySource;
use super::{ComponentEntry, Contract, Manifest, World};

/// How to load a policy set.
#[derive(Default)]
pub struct PolicyOptions {
    /// Limits for every call.
    pub limits: SandboxLimits,
    /// Compiled-component cache; `None` compiles every time.
    pub cache: Option<CompileCache>,
    /// Keep instances warm between calls, or instantiate per call.
    pub reuse: InstanceReuse,
    /// Where to write every call's argument, if anywhere (`trace.rs`).
    pub trace: Option<super::Trace>,
}

/// Either kind of loaded component.
pub enum LoadedComponent {
    /// A classifier.
    Classifier(ClassifierComponent),
    /// An evaluator.
    Evaluator(EvaluatorComponent),
}

/// One manifest entry and whether it loaded (`PolicySet::verify`).
pub type ComponentCheck = (ComponentEntry, Result<(), PolicyError>);

/// One manifest entry and what the cache holds for it (`PolicySet::check_cache`).
pub type CacheCheck = (ComponentEntry, EntryState);

/// The loaded components of one manifest.
pub struct PolicySet {
    manifest: Manifest,
    classifiers: BTreeMap<String, ClassifierComponent>,
    evaluator: Option<EvaluatorComponent>,
    /// What loads the rest on first use, for a set loaded lazily.
    deferred: Option<Deferred>,
}

/// A lazily loaded set's source, engine and options.
struct Deferred {
    source: PolicySource,
    engine: Engine,
    options: PolicyOptions,
}

/// Builds the engine for `options`, mapping a configuration failure to an error
/// that names it.
fn policy_engine(options: &PolicyOptions) -> Result<Engine, PolicyError> {
    sandbox::engine(&options.limits).map_err(|error| PolicyError::Compile {
        component: "(engine)".to_owned(),
        message: format!("{error:#}"),
    })
}

fn load_context<'a>(engine: &'a Engine, options: &'a PolicyOptions) -> LoadContext<'a> {
    LoadContext {
        engine,
        limits: options.limits,
        cache: options.cache.as_ref(),
        reuse: options.reuse,
        trace: options.trace.as_ref(),
    }
}

/// Loads component `bytes` as `world`, checking `pinned` when there is one,
/// and that it exports `contract` when a manifest says which it was built for.
fn load_component(
    context: &LoadContext<'_>,
    world: World,
    contract: Option<Contract>,
    name: &str,
    pinned: Option<crate::digest::Sha256Digest>,
    file: &str,
    bytes: &[u8],
) -> Result<LoadedComponent, PolicyError> {
    Ok(match world {
        World::Classifier => LoadedComponent::Classifier(ClassifierComponent::load(
            context, name, contract, pinned, file, bytes,
        )?),
        World::Evaluator => LoadedComponent::Evaluator(EvaluatorComponent::load(
            context, name, contract, pinned, file, bytes,
        )?),
    })
}

/// Loads one entry of `manifest` from `source`, checking its pin, imports,
/// world and contract version (the manifest's `wit`).
fn load_entry(
    context: &LoadContext<'_>,
    source: &PolicySource,
    manifest: &Manifest,
    entry: &ComponentEntry,
) -> Result<LoadedComponent, PolicyError> {
    let bytes = source.component_bytes(entry)?;
    let contract = manifest.contract();
    load_component(context, entry.world, contract, &entry.name, Some(entry.sha256), &entry.file, &bytes)
}

impl PolicySet {
    /// Loads every component of `source`'s manifest; the first failure stops it.
    pub fn load(source: &PolicySource, options: &PolicyOptions) -> Result<Self, PolicyError> {
        let manifest = source.manifest()?;
        let engine = policy_engine(options)?;
        let context = load_context(&engine, options);
        let mut classifiers = BTreeMap::new();
        let mut evaluator = None;
        for entry in &manifest.components {
            match load_entry(&context, source, &manifest, entry)? {
                LoadedComponent::Classifier(component) => {
                    classifiers.insert(entry.name.clone(), component);
                }
                LoadedComponent::Evaluator(component) => evaluator = Some(component),
            }
        }
        Ok(Self { manifest, classifiers, evaluator, deferred: None })
    }

    /// Reads `source`'s manifest now and loads each component on first use:
    /// for a process that serves one call (a hook), which needs one
    /// classifier or the evaluator, not all of them. Each component is
    /// checked as [`PolicySet::load`] checks it (pin, imports, world), only
    /// later: a bad one is then a failed call (POL-4: unknown scope, or a
    /// BLOCKED `POLICY_FAILURE` decision), never a skipped check.
    pub fn load_lazily(source: PolicySource, options: PolicyOptions) -> Result<Self, PolicyError> {
        let manifest = source.manifest()?;
        let engine = policy_engine(&options)?;
        Ok(Self {
            manifest,
            classifiers: BTreeMap::new(),
            evaluator: None,
            deferred: Some(Deferred { source, engine, options }),
        })
    }

    /// Loads `entry` now if this set defers it and has not loaded it yet.
    fn load_deferred(&mut self, entry: &ComponentEntry) -> Result<(), PolicyError> {
        let loaded = match entry.world {
            World::Classifier => self.classifiers.contains_key(&entry.name),
            World::Evaluator => self.evaluator.is_some(),
        };
        let Some(deferred) = self.deferred.as_ref().filter(|_| !loaded) else { return Ok(()) };
        let context = load_context(&deferred.engine, &deferred.options);
        match load_entry(&context, &deferred.source, &self.manifest, entry)? {
            LoadedComponent::Classifier(component) => {
                self.classifiers.insert(entry.name.clone(), component);
            }
            LoadedComponent::Evaluator(component) => self.evaluator = Some(component),
        }
        Ok(())
    }

    /// Checks every component of `source`'s manifest independently: one result
    /// per entry, so one bad component does not hide another.
    pub fn verify(
        source: &PolicySource,
        options: &PolicyOptions,
    ) -> Result<Vec<ComponentCheck>, PolicyError> {
        let manifest = source.manifest()?;
        let engine = policy_engine(options)?;
        let context = load_context(&engine, options);
        Ok(manifest
            .components
            .iter()
            .map(|entry| {
                let loaded = load_entry(&context, source, &manifest, entry).map(drop);
                (entry.clone(), loaded)
            })
            .collect())
    }

    /// What `cache` holds for every component of `source`'s manifest under the
    /// engine `options` make, changing nothing (POL-1: `policy verify` checks
    /// the cache too). Run it before [`PolicySet::verify`], which goes through
    /// the cache and so recompiles and replaces an entry that fails its check.
    pub fn check_cache(
        source: &PolicySource,
        options: &PolicyOptions,
        cache: &CompileCache,
    ) -> Result<Vec<CacheCheck>, PolicyError> {
        let manifest = source.manifest()?;
        let engine = policy_engine(options)?;
        Ok(manifest
            .components
            .into_iter()
            .map(|entry| {
                let state = cache.check(&engine, &entry.sha256);
                (entry, state)
            })
            .collect())
    }

    /// The manifest this set was loaded from.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The classifier that serves `tool` (its own, else the `*` fallback).
    pub fn classifier(&mut self, tool: &str) -> Result<&mut ClassifierComponent, PolicyError> {
        let entry = self
            .manifest
            .classifier_for(tool)
            .ok_or_else(|| PolicyError::NoClassifier { tool: tool.to_owned() })?
            .clone();
        self.load_deferred(&entry)?;
        Ok(self.classifiers.get_mut(&entry.name).expect("every manifest classifier is loaded"))
    }

    /// The evaluator.
    pub fn evaluator(&mut self) -> Result<&mut EvaluatorComponent, PolicyError> {
        if let Some(entry) = self.manifest.evaluator().cloned() {
            self.load_deferred(&entry)?;
        }
        self.evaluator.as_mut().ok_or(PolicyError::NoEvaluator)
    }
}

/// Loads one component file that no manifest pins, for a policy author
/// iterating on a guest (`effects policy run`). Everything but the pin is
/// checked as for a shipped component: zero imports, the expected world, of
/// any contract version the host speaks.
pub fn load_unpinned(
    name: &str,
    world: World,
    bytes: &[u8],
    options: &PolicyOptions,
) -> Result<LoadedComponent, PolicyError> {
    let engine = policy_engine(options)?;
    load_component(&load_context(&engine, options), world, None, name, None, name, bytes)
}
