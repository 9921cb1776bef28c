//! One loaded policy component, ready to call under the sandbox: the cached
//! `InstancePre`, a warm instance reused between calls, and the checks that run
//! before the first compile (digest pin, zero imports, the expected world).
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

use super::WIT_PACKAGE;
use super::World;
use super::answer;
use super::bindings::{ClassifierPre, EvaluatorPre, IntoModel, ToGuest, classifier, evaluator};
use super::cache::CompileCache;
use super::error::{PolicyCall, PolicyError};
use super::inspect::inspect;
use super::sandbox::{self, SandboxLimits, StoreState};

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

impl WorldPre for ClassifierPre<StoreState> {
    type Bindings = classifier::Classifier;
    fn new(pre: InstancePre<StoreState>) -> wasmtime::Result<Self> {
        ClassifierPre::new(pre)
    }
    fn instantiate(&self, store: &mut Store<StoreState>) -> wasmtime::Result<Self::Bindings> {
        ClassifierPre::instantiate(self, store)
    }
}

impl WorldPre for EvaluatorPre<StoreState> {
    type Bindings = evaluator::Evaluator;
    fn new(pre: InstancePre<StoreState>) -> wasmtime::Result<Self> {
        EvaluatorPre::new(pre)
    }
    fn instantiate(&self, store: &mut Store<StoreState>) -> wasmtime::Result<Self::Bindings> {
        EvaluatorPre::instantiate(self, store)
    }
}

/// A component of world `P` with its warm instance.
struct Sandboxed<P: WorldPre> {
    name: String,
    sha256: Sha256Digest,
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
    /// Checks, compiles and pre-instantiates `bytes` as world `world`.
    /// `pinned` is the manifest's digest; `None` only for a file an author runs
    /// directly (`effects policy run`), which has no pin to check.
    fn load(
        context: &LoadContext<'_>,
        name: &str,
        world: World,
        pinned: Option<Sha256Digest>,
        file: &str,
        bytes: &[u8],
    ) -> Result<Self, PolicyError> {
        let LoadContext { engine, limits, cache, reuse, trace } = *context;
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
        if shape.world != Some(world) {
            return Err(PolicyError::WrongWorld {
                component,
                expected: world,
                exports: shape.exports,
                detail: None,
            });
        }
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
            return Err(PolicyError::ContractMismatch { component, world, detail: format!("{error:#}") });
        }
        let trace = trace.cloned();
        Ok(Self { name: component, sha256, engine: engine.clone(), limits, reuse, pre, warm: None, trace })
    }

    /// Writes `argument` of `call` to the trace, if there is one.
    fn trace(&self, call: PolicyCall, argument: &impl serde::Serialize) {
        if let Some(trace) = &self.trace {
            trace.record(call, &self.name, argument);
        }
    }

    /// One call under the limits. `invoke` converts the guest's answer into the
    /// model; `check` applies the contract rules to it.
    fn call<R: WireSize>(
        &mut self,
        call: PolicyCall,
        invoke: impl FnOnce(&P::Bindings, &mut Store<StoreState>) -> wasmtime::Result<Result<R, String>>,
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
        let value =
            answer.map_err(|message| PolicyError::Guest { component: component.clone(), call, message })?;
        let bytes = value.wire_size();
        if bytes > self.limits.answer_bytes {
            return Err(PolicyError::AnswerTooLarge {
                component,
                call,
                bytes,
                limit: self.limits.answer_bytes,
            });
        }
        check(&value).map_err(|message| PolicyError::MalformedAnswer {
            component: component.clone(),
            call,
            message,
        })?;
        if self.reuse == InstanceReuse::Warm {
            self.warm = Some((store, bindings));
        }
        let report =
            CallReport { component, sha256: self.sha256, wit: WIT_PACKAGE, fuel_used, fresh_instance };
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
    ($(#[$doc:meta])* $name:ident, $pre:ty, $world:expr) => {
        $(#[$doc])*
        pub struct $name(Sandboxed<$pre>);

        impl $name {
            pub(crate) fn load(
                context: &LoadContext<'_>,
                name: &str,
                pinned: Option<Sha256Digest>,
                file: &str,
                bytes: &[u8],
            ) -> Result<Self, PolicyError> {
                Sandboxed::load(context, name, $world, pinned, file, bytes).map(Self)
            }

            /// Component name.
            pub fn name(&self) -> &str {
                &self.0.name
            }

            /// Component digest.
            pub fn sha256(&self) -> Sha256Digest {
                self.0.sha256
            }

            /// Drops the warm instance, so the next call instantiates afresh.
            pub fn discard_instance(&mut self) {
                self.0.warm = None;
            }
        }
    };
}

component_api!(
    /// A loaded classifier component.
    ClassifierComponent, ClassifierPre<StoreState>, World::Classifier
);
component_api!(
    /// A loaded evaluator component.
    EvaluatorComponent, EvaluatorPre<StoreState>, World::Evaluator
);

impl ClassifierComponent {
    /// `classify`: the claim plan for one bound operation.
    pub fn classify(&mut self, operation: &BoundOperation) -> Result<Called<Classification>, PolicyError> {
        self.0.trace(PolicyCall::Classify, operation);
        let argument = operation.to_guest();
        self.0.call(
            PolicyCall::Classify,
            |bindings, store| {
                let answer = bindings.effects_policy_classify().call_classify(store, &argument)?;
                Ok(answer.map(IntoModel::into_model))
            },
            |answer| answer::check_classification(operation, answer),
        )
    }

    /// `settle`: the outcome from typed producer facts.
    pub fn settle(&mut self, request: &SettleRequest) -> Result<Called<Outcome>, PolicyError> {
        self.0.trace(PolicyCall::Settle, request);
        let argument = request.to_guest();
        self.0.call(
            PolicyCall::Settle,
            |bindings, store| {
                let answer = bindings.effects_policy_classify().call_settle(store, &argument)?;
                Ok(answer.map(IntoModel::into_model))
            },
            |answer| answer::check_outcome(request, answer),
        )
    }

    /// `readbacks`: which bound resources to read back after settlement.
    pub fn readbacks(
        &mut self,
        context: &ReadbackContext,
    ) -> Result<Called<Vec<ReadbackRequest>>, PolicyError> {
        self.0.trace(PolicyCall::Readbacks, context);
        let argument = context.to_guest();
        self.0.call(
            PolicyCall::Readbacks,
            |bindings, store| {
                let answer = bindings.effects_policy_classify().call_readbacks(store, &argument)?;
                Ok(answer.map(IntoModel::into_model))
            },
            |answer| answer::check_readbacks(&context.operation, answer),
        )
    }
}

impl EvaluatorComponent {
    /// `evaluate`: the completion decision over a ledger, always on a fresh
    /// instance that is dropped afterwards. Decisions are rare (one per run),
    /// so the ~20 µs instantiation is nothing, no state can pass from one
    /// decision to the next (POL-3), and the memory a large ledger took is
    /// returned at once. The records must be in log order
    /// ([`EvidenceLedger::check_order`]): the contract carries that order as
    /// positions alone.
    pub fn evaluate(&mut self, ledger: &EvidenceLedger) -> Result<Called<Decision>, PolicyError> {
        self.0.trace(PolicyCall::Evaluate, ledger);
        let argument = ledger.to_guest();
        self.0.warm = None;
        // The answer is the decision, or why its columns could not be read
        // back, which is a malformed answer like any the check refuses.
        let called = self.0.call(
            PolicyCall::Evaluate,
            |bindings, store| {
                let answer = bindings.effects_policy_evaluate().call_evaluate(store, &argument)?;
                Ok(answer.map(IntoModel::into_model))
            },
            |answer: &Result<Decision, String>| {
                answer.as_ref().map_or(Ok(()), |decision| answer::check_decision(ledger, decision))
            },
        );
        self.0.warm = None;
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
