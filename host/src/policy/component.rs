//! One loaded policy component, ready to call under the sandbox: the cached
//! `InstancePre`, a warm instance reused between calls, and the checks that run
//! before the first compile (digest pin, zero imports, the expected world).
//!
//! Versions: a component is built against one contract version, and which one
//! is read from its export names (`inspect`: `effects:policy/classify@2.0.0`
//! or `@2.1.0`) before anything is compiled; a pinned component must export
//! the version its manifest's `wit` line says. Each version has its own
//! generated bindings, so a component is a [`Versioned`] `Sandboxed` of that
//! version's, and every call is written once over both (`each_version!`).
//!
//! Call protocol (POL-2): set the fuel budget, call, read the fuel left. Any
//! failure (trap, fuel, limit, an answer the contract refuses) drops the warm
//! store; the next call instantiates afresh from the `InstancePre`.

use serde::Serialize;
use wasmtime::Engine;
use wasmtime::Store;
use wasmtime::component::{InstancePre, Linker};

use crate::digest::Sha256Digest;
use crate::model::{
    BoundOperation, Classification, Decision, EvidenceLedger, Outcome, ReadbackContext, ReadbackRequest,
    SettleRequest, WireSize,
};

use super::answer;
use super::bindings::{Lift, ToGuest, v2_0, v2_1};
use super::cache::CompileCache;
use super::error::{PolicyCall, PolicyError};
use super::inspect::ComponentShape;
use super::inspect::inspect;
use super::sandbox::{self, SandboxLimits, StoreState};
use super::{Contract, World};

/// What every call reports alongside its answer (POL-4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CallReport {
    /// Component name.
    pub component: String,
    /// Component digest.
    pub sha256: Sha256Digest,
    /// The contract version.
    pub wit: &'static str,
    /// Fuel the call consumed.
    pub fuel_used: u64,
    /// The call instantiated a fresh instance (first call, or after a failure).
    pub fresh_instance: bool,
}

/// An answer and its report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Called<T> {
    /// The answer.
    pub value: T,
    /// The report.
    pub report: CallReport,
}

/// The generated `*Pre` types, seen through one method.
trait WorldPre {
    type Bindings;
    fn new(pre: InstancePre<StoreState>) -> wasmtime::Result<Self>
    where
        Self: Sized;
    fn instantiate(&self, store: &mut Store<StoreState>) -> wasmtime::Result<Self::Bindings>;
}

macro_rules! world_pre {
    ($($pre:ty => $bindings:ty),* $(,)?) => {$(
        impl WorldPre for $pre {
            type Bindings = $bindings;
            fn new(pre: InstancePre<StoreState>) -> wasmtime::Result<Self> {
                <$pre>::new(pre)
            }
            fn instantiate(&self, store: &mut Store<StoreState>) -> wasmtime::Result<Self::Bindings> {
                <$pre>::instantiate(self, store)
            }
        }
    )*};
}

world_pre!(
    v2_1::classifier::ClassifierPre<StoreState> => v2_1::classifier::Classifier,
    v2_1::evaluator::EvaluatorPre<StoreState> => v2_1::evaluator::Evaluator,
    v2_0::classifier::ClassifierPre<StoreState> => v2_0::classifier::Classifier,
    v2_0::evaluator::EvaluatorPre<StoreState> => v2_0::evaluator::Evaluator,
);

/// A component of one world as the contract version it was built for
/// exports it: `V2_0`'s bindings are 2.0.0's generated ones, `V2_1`'s 2.1.0's.
enum Versioned<V20: WorldPre, V21: WorldPre> {
    /// Built against `effects:policy@2.0.0`.
    V2_0(Sandboxed<V20>),
    /// Built against `effects:policy@2.1.0`.
    V2_1(Sandboxed<V21>),
}

/// `$body` with `$sandboxed` bound to the `Sandboxed` of whichever version
/// `$versioned` is: one text, type-checked against each version's bindings.
macro_rules! each_version {
    ($versioned:expr, $sandboxed:ident => $body:expr) => {
        match $versioned {
            Versioned::V2_0($sandboxed) => $body,
            Versioned::V2_1($sandboxed) => $body,
        }
    };
}

impl<V20: WorldPre, V21: WorldPre> Versioned<V20, V21> {
    /// Checks `bytes` (pin, imports, world, contract version) and loads them
    /// with the bindings of the version they export. `contract` is what the
    /// manifest says they were built for; `None` (a file an author runs
    /// directly) accepts any version the host speaks.
    fn load(
        context: &LoadContext<'_>,
        expected: Expected<'_>,
        pinned: Option<Sha256Digest>,
        file: &str,
        bytes: &[u8],
    ) -> Result<Self, PolicyError> {
        let Expected { name, world, contract } = expected;
        let component = name.to_owned();
        let sha256 = Sha256Digest::of(bytes);
        if let Some(expected) = pinned
            && expected != sha256
        {
            return Err(PolicyError::DigestMismatch {
                component,
                file: file.to_owned(),
                expected,
                actual: sha256,
            });
        }
        let shape = inspect(bytes)
            .map_err(|message| PolicyError::Malformed { component: component.clone(), message })?;
        if !shape.imports.is_empty() {
            return Err(PolicyError::Imports { component, imports: shape.imports });
        }
        let wrong_world = |detail| PolicyError::WrongWorld {
            component: component.clone(),
            expected: world,
            contract,
            exports: shape.exports.clone(),
            detail,
        };
        let exported = match (shape.world, shape.contract) {
            (Some(found), Some(version)) if found == world => version,
            _ => return Err(wrong_world(None)),
        };
        if let Some(said) = contract.filter(|&said| said != exported) {
            return Err(wrong_world(Some(format!(
                "its manifest says it was built for {said}, but it exports {exported}'s names"
            ))));
        }
        let loaded = Loaded { name, world, contract: exported, sha256, shape: &shape, bytes };
        Ok(match exported {
            Contract::V2_0 => Versioned::V2_0(Sandboxed::load(context, loaded)?),
            Contract::V2_1 => Versioned::V2_1(Sandboxed::load(context, loaded)?),
        })
    }
}

/// What a component is loaded as: its name, world, and the contract version
/// its manifest says (`None`: any the host speaks).
#[derive(Clone, Copy)]
pub(crate) struct Expected<'a> {
    pub name: &'a str,
    pub world: World,
    pub contract: Option<Contract>,
}

/// A component whose pin, imports, world and version were checked.
struct Loaded<'a> {
    name: &'a str,
    world: World,
    contract: Contract,
    sha256: Sha256Digest,
    shape: &'a ComponentShape,
    bytes: &'a [u8],
}

/// A component of world `P` with its warm instance.
struct Sandboxed<P: WorldPre> {
    name: String,
    sha256: Sha256Digest,
    /// The contract version it was built against.
    contract: Contract,
    engine: Engine,
    limits: SandboxLimits,
    reuse: InstanceReuse,
    pre: P,
    warm: Option<(Store<StoreState>, P::Bindings)>,
    /// Where each call's argument is written, if anywhere.
    trace: Option<super::Trace>,
}

/// Whether a successful call's instance serves the next call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InstanceReuse {
    /// Keep the instance warm (about 2 µs a call instead of about 22 µs).
    /// Sound for stateless guests, which every guest built with the SDK is: a
    /// guest that kept state in globals between calls could answer differently
    /// on replay (POL-3), so untrusted third-party guests may want
    /// [`InstanceReuse::FreshPerCall`].
    #[default]
    Warm,
    /// A fresh instance from the cached `InstancePre` for every call: no state
    /// can survive from one call to the next.
    FreshPerCall,
}

impl<P: WorldPre> Sandboxed<P> {
    /// Compiles and pre-instantiates a checked component.
    fn load(context: &LoadContext<'_>, loaded: Loaded<'_>) -> Result<Self, PolicyError> {
        let LoadContext { engine, limits, cache, reuse, trace } = *context;
        let Loaded { name, world, contract, sha256, shape, bytes } = loaded;
        let component = name.to_owned();
        let compile_error = |error: wasmtime::Error| PolicyError::Compile {
            component: component.clone(),
            message: format!("{error:#}"),
        };
        let compiled = match cache {
            Some(cache) => cache.load_or_compile(engine, &sha256, bytes),
            None => wasmtime::component::Component::new(engine, bytes),
        }
        .map_err(compile_error)?;
        // The linker is empty: with zero imports there is nothing to link, and
        // a component that needed anything fails here (POL-1, second line).
        let pre = Linker::<StoreState>::new(engine).instantiate_pre(&compiled).map_err(compile_error)?;
        let pre = P::new(pre).map_err(|error| PolicyError::WrongWorld {
            component: component.clone(),
            expected: world,
            contract: Some(contract),
            exports: shape.exports.clone(),
            detail: Some(format!("{error:#}")),
        })?;
        // Wasmtime checks a typed export's signature against the contract only
        // when an instance is made, so one is made now and dropped: a
        // component built against another shape of the contract (same names,
        // other types) is refused here, naming the mismatch, instead of
        // failing every call. A probe that traps or hits a limit is left for
        // the calls to report, as they report any other trap.
        let mut probe = sandbox::store(engine, &limits);
        probe.set_fuel(limits.fuel).expect("fuel is enabled on every policy engine");
        if let Err(error) = pre.instantiate(&mut probe)
            && error.downcast_ref::<wasmtime::Trap>().is_none()
            && probe.data().refused_memory().is_none()
        {
            return Err(PolicyError::ContractMismatch {
                component,
                world,
                contract,
                detail: format!("{error:#}"),
            });
        }
        let trace = trace.cloned();
        let engine = engine.clone();
        Ok(Self { name: component, sha256, contract, engine, limits, reuse, pre, warm: None, trace })
    }

    /// Writes `argument` of `call` to the trace, if there is one.
    fn trace(&self, call: PolicyCall, argument: &impl serde::Serialize) {
        if let Some(trace) = &self.trace {
            trace.record(call, &self.name, argument);
        }
    }

    /// One call under the limits. `invoke` makes the call; its answer is
    /// measured against the answer cap, lifted into the model (content the
    /// host hashes is measured before it is hashed), and `check` applies the
    /// contract rules to it.
    fn call<G: Lift<R>, R: WireSize>(
        &mut self,
        call: PolicyCall,
        invoke: impl FnOnce(&P::Bindings, &mut Store<StoreState>) -> wasmtime::Result<Result<G, String>>,
        check: impl FnOnce(&R) -> Result<(), String>,
    ) -> Result<Called<R>, PolicyError> {
        let fresh_instance = self.warm.is_none();
        let (mut store, bindings) = match self.warm.take() {
            Some(warm) => warm,
            None => {
                let mut store = sandbox::store(&self.engine, &self.limits);
                store.set_fuel(self.limits.fuel).expect("fuel is enabled on every policy engine");
                match self.pre.instantiate(&mut store) {
                    Ok(bindings) => (store, bindings),
                    Err(error) => {
                        return Err(sandbox::classify_failure(error, &store, &self.name, call, &self.limits));
                    }
                }
            }
        };
        store.set_fuel(self.limits.fuel).expect("fuel is enabled on every policy engine");
        let answer = match invoke(&bindings, &mut store) {
            Ok(answer) => answer,
            // The store is dropped here: a trapped instance is never called again.
            Err(error) => {
                return Err(sandbox::classify_failure(error, &store, &self.name, call, &self.limits));
            }
        };
        let fuel_used = self.limits.fuel - store.get_fuel().expect("fuel is enabled on every policy engine");
        let component = self.name.clone();
        let answer =
            answer.map_err(|message| PolicyError::Guest { component: component.clone(), call, message })?;
        let limit = self.limits.answer_bytes;
        let too_large =
            |bytes| PolicyError::AnswerTooLarge { component: component.clone(), call, bytes, limit };
        // Content the host hashes (2.1.0) counts towards the cap, and is
        // measured before it is hashed: no guest makes the host hash more.
        let content = answer.content_bytes();
        if content > limit {
            return Err(too_large(content));
        }
        let value = answer.lift();
        let bytes = content.saturating_add(value.wire_size());
        if bytes > limit {
            return Err(too_large(bytes));
        }
        check(&value).map_err(|message| PolicyError::MalformedAnswer {
            component: component.clone(),
            call,
            message,
        })?;
        if self.reuse == InstanceReuse::Warm {
            self.warm = Some((store, bindings));
        }
        let wit = self.contract.package();
        let report = CallReport { component, sha256: self.sha256, wit, fuel_used, fresh_instance };
        Ok(Called { value, report })
    }
}

/// Parameters shared by every component of one policy set.
#[derive(Clone, Copy)]
pub(crate) struct LoadContext<'a> {
    pub engine: &'a Engine,
    pub limits: SandboxLimits,
    pub cache: Option<&'a CompileCache>,
    pub reuse: InstanceReuse,
    pub trace: Option<&'a super::Trace>,
}

macro_rules! component_api {
    ($(#[$doc:meta])* $name:ident, $world:expr, $v20:ty, $v21:ty) => {
        $(#[$doc])*
        pub struct $name(Versioned<$v20, $v21>);

        impl $name {
            pub(crate) fn load(
                context: &LoadContext<'_>,
                name: &str,
                contract: Option<Contract>,
                pinned: Option<Sha256Digest>,
                file: &str,
                bytes: &[u8],
            ) -> Result<Self, PolicyError> {
                let expected = Expected { name, world: $world, contract };
                Versioned::load(context, expected, pinned, file, bytes).map(Self)
            }

            /// Component name.
            pub fn name(&self) -> &str {
                each_version!(&self.0, sandboxed => &sandboxed.name)
            }

            /// Component digest.
            pub fn sha256(&self) -> Sha256Digest {
                each_version!(&self.0, sandboxed => sandboxed.sha256)
            }

            /// The contract version it was built against.
            pub fn contract(&self) -> Contract {
                each_version!(&self.0, sandboxed => sandboxed.contract)
            }

            /// Drops the warm instance, so the next call instantiates afresh.
            pub fn discard_instance(&mut self) {
                each_version!(&mut self.0, sandboxed => sandboxed.warm = None)
            }
        }
    };
}

component_api!(
    /// A loaded classifier component.
    ClassifierComponent,
    World::Classifier,
    v2_0::classifier::ClassifierPre<StoreState>,
    v2_1::classifier::ClassifierPre<StoreState>
);
component_api!(
    /// A loaded evaluator component.
    EvaluatorComponent,
    World::Evaluator,
    v2_0::evaluator::EvaluatorPre<StoreState>,
    v2_1::evaluator::EvaluatorPre<StoreState>
);

impl ClassifierComponent {
    /// `classify`: the claim plan for one bound operation.
    pub fn classify(&mut self, operation: &BoundOperation) -> Result<Called<Classification>, PolicyError> {
        each_version!(&mut self.0, sandboxed => {
            sandboxed.trace(PolicyCall::Classify, operation);
            let argument = operation.to_guest();
            sandboxed.call(
                PolicyCall::Classify,
                |bindings, store| bindings.effects_policy_classify().call_classify(store, &argument),
                |answer| answer::check_classification(operation, answer),
            )
        })
    }

    /// `settle`: the outcome from typed producer facts.
    pub fn settle(&mut self, request: &SettleRequest) -> Result<Called<Outcome>, PolicyError> {
        each_version!(&mut self.0, sandboxed => {
            sandboxed.trace(PolicyCall::Settle, request);
            let argument = request.to_guest();
            sandboxed.call(
                PolicyCall::Settle,
                |bindings, store| bindings.effects_policy_classify().call_settle(store, &argument),
                |answer| answer::check_outcome(request, answer),
            )
        })
    }

    /// `readbacks`: which bound resources to read back after settlement.
    pub fn readbacks(
        &mut self,
        context: &ReadbackContext,
    ) -> Result<Called<Vec<ReadbackRequest>>, PolicyError> {
        each_version!(&mut self.0, sandboxed => {
            sandboxed.trace(PolicyCall::Readbacks, context);
            let argument = context.to_guest();
            sandboxed.call(
                PolicyCall::Readbacks,
                |bindings, store| bindings.effects_policy_classify().call_readbacks(store, &argument),
                |answer| answer::check_readbacks(&context.operation, answer),
            )
        })
    }
}

impl EvaluatorComponent {
    /// `evaluate`: the completion decision over a ledger, always on a fresh
    /// instance that is dropped afterwards. Decisions are rare (one per run),
    /// so the ~20 µs instantiation is nothing, no state can pass from one
    /// decision to the next (POL-3), and the memory a large ledger took is
    /// returned at once. The records must be in log order
    /// ([`EvidenceLedger::check_order`]): the contract carries that order as
    /// positions alone. A 2.0.0 evaluator is given the ledger without
    /// `concurrent`: it cannot see other runs (CMP-13).
    pub fn evaluate(&mut self, ledger: &EvidenceLedger) -> Result<Called<Decision>, PolicyError> {
        let called = each_version!(&mut self.0, sandboxed => {
            sandboxed.trace(PolicyCall::Evaluate, ledger);
            let argument = ledger.to_guest();
            sandboxed.warm = None;
            // The answer is the decision, or why its columns could not be read
            // back, which is a malformed answer like any the check refuses.
            let called = sandboxed.call(
                PolicyCall::Evaluate,
                |bindings, store| bindings.effects_policy_evaluate().call_evaluate(store, &argument),
                |answer: &Result<Decision, String>| {
                    answer.as_ref().map_or(Ok(()), |decision| answer::check_decision(ledger, decision))
                },
            );
            sandboxed.warm = None;
            called
        });
        let Called { value, report } = called?;
        match value {
            Ok(decision) => Ok(Called { value: decision, report }),
            Err(message) => Err(PolicyError::MalformedAnswer {
                component: report.component,
                call: PolicyCall::Evaluate,
                message,
            }),
        }
    }
}
