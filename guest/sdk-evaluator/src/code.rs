//! The evidence ledger's `code` columns read as their types (see the WIT's
//! `code`): an enum case from its index in the declaration, a flags value from
//! its bits. A byte that is no case, or sets a bit the type lacks, reads as
//! `None`, which an evaluator reports as a malformed ledger.

use crate::types::{
    CheckResult, ClaimFlags, CleanupState, Coverage, Execution, Impact, JobLifecycle, Mechanism,
    ObservationFlags, OutcomeFlags, PostconditionKind, ResourceFlags, ResourceRole, VerifierFlags,
};

/// A type a `code` column holds.
pub trait Code: Sized + Copy {
    /// The WIT type's name, for messages.
    const NAME: &'static str;

    /// The value `code` stands for, if it stands for one.
    fn from_code(code: u8) -> Option<Self>;
}

/// Enums: the cases in the WIT's order, so a case's index is its code.
macro_rules! enum_code {
    ($($ty:ident = $name:literal [$($case:ident),* $(,)?])*) => {$(
        impl Code for $ty {
            const NAME: &'static str = $name;

            fn from_code(code: u8) -> Option<Self> {
                const CASES: &[$ty] = &[$($ty::$case),*];
                // Never called: a case added to the WIT and not to this
                // list fails to compile here instead of reading as `None`.
                let _every_case_listed = |case: $ty| match case {
                    $($ty::$case)|* => (),
                };
                CASES.get(usize::from(code)).copied()
            }
        }
    )*};
}

enum_code! {
    ResourceRole = "resource-role" [Target, Source, SearchRoot, Dependency, Executor]
    PostconditionKind = "postcondition-kind" [ContentSha256, Absent, Exists]
    Execution = "execution" [
        NotExecuted, ReportedSuccess, Failed, TimedOut, Cancelled, Running, Interrupted, Unknown,
    ]
    Impact = "impact" [None, Possible]
    CleanupState = "cleanup-state" [NotApplicable, Clean, Failed, Unknown]
    Mechanism = "mechanism" [
        FilesystemRead, FilesystemStat, OwnedRead, RemoteReadback, JobState, ProcessOwnership,
        BrowserSession, Receipt,
    ]
    Coverage = "coverage" [Complete, Partial]
    JobLifecycle = "job-lifecycle" [Running, Exited, Killed, Lost]
    CheckResult = "check-result" [Passed, Failed, Incomplete]
}

/// Flags: the bits, refusing any the type does not have.
macro_rules! flags_code {
    ($($ty:ident = $name:literal),*) => {$(
        impl Code for $ty {
            const NAME: &'static str = $name;

            fn from_code(code: u8) -> Option<Self> {
                $ty::from_bits(code)
            }
        }
    )*};
}

flags_code!(
    ResourceFlags = "resource-flags",
    ClaimFlags = "claim-flags",
    OutcomeFlags = "outcome-flags",
    ObservationFlags = "observation-flags",
    VerifierFlags = "verifier-flags"
);

#[cfg(test)]
mod tests {
    use super::*;

    /// wit-bindgen numbers an enum's cases in the WIT's order, as the ledger
    /// does: each case's discriminant must read back as that case.
    fn round_trips<T: Code + PartialEq + std::fmt::Debug>(cases: &[T], discriminant: impl Fn(T) -> u8) {
        for &case in cases {
            assert_eq!(T::from_code(discriminant(case)), Some(case), "{}", T::NAME);
        }
        let past = u8::try_from(cases.len()).unwrap();
        assert_eq!(T::from_code(past), None, "{}: {past} is no case", T::NAME);
    }

    #[test]
    fn every_enum_case_reads_back_from_its_discriminant() {
        use Execution as E;
        round_trips(
            &[
                E::NotExecuted,
                E::ReportedSuccess,
                E::Failed,
                E::TimedOut,
                E::Cancelled,
                E::Running,
                E::Interrupted,
                E::Unknown,
            ],
            |e| e as u8,
        );
        use Mechanism as M;
        round_trips(
            &[
                M::FilesystemRead,
                M::FilesystemStat,
                M::OwnedRead,
                M::RemoteReadback,
                M::JobState,
                M::ProcessOwnership,
                M::BrowserSession,
                M::Receipt,
            ],
            |m| m as u8,
        );
        use ResourceRole as R;
        round_trips(&[R::Target, R::Source, R::SearchRoot, R::Dependency, R::Executor], |r| r as u8);
        use PostconditionKind as P;
        round_trips(&[P::ContentSha256, P::Absent, P::Exists], |p| p as u8);
        round_trips(&[Impact::None, Impact::Possible], |i| i as u8);
        use CleanupState as C;
        round_trips(&[C::NotApplicable, C::Clean, C::Failed, C::Unknown], |c| c as u8);
        round_trips(&[Coverage::Complete, Coverage::Partial], |c| c as u8);
        use JobLifecycle as J;
        round_trips(&[J::Running, J::Exited, J::Killed, J::Lost], |j| j as u8);
        use CheckResult as K;
        round_trips(&[K::Passed, K::Failed, K::Incomplete], |k| k as u8);
    }

    #[test]
    fn flags_read_their_bits_and_refuse_unknown_ones() {
        let both = ObservationFlags::EXISTS | ObservationFlags::JOB_STATE;
        assert_eq!(ObservationFlags::from_code(both.bits()), Some(both));
        assert_eq!(ObservationFlags::EXISTS.bits(), 1, "the first flag is bit 0");
        assert_eq!(ObservationFlags::from_code(1 << 4), None, "observation-flags has four flags");
        assert_eq!(ClaimFlags::PROCESSES.bits(), 1 << 3, "processes (2.0.0) follows the older bits");
        assert_eq!(ClaimFlags::from_code(ClaimFlags::all().bits()), Some(ClaimFlags::all()));
        assert_eq!(ClaimFlags::UNBOUND.bits(), 1 << 4, "unbound (2.0.0) follows processes");
        assert_eq!(ClaimFlags::UNCONFINED.bits(), 1 << 5, "unconfined (2.0.0, ID-6) follows unbound");
        assert_eq!(ClaimFlags::from_code(1 << 6), None, "claim-flags has six");
        assert_eq!(VerifierFlags::from_code(1 << 1), None, "verifier-flags has one");
        assert_eq!(OutcomeFlags::from_code(OutcomeFlags::all().bits()), Some(OutcomeFlags::all()));
        assert_eq!(ResourceFlags::from_code(1 << 2), None);
    }
}
