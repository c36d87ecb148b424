//! etcd's server feature gates (`--feature-gates=Name=bool,...`): the
//! registry, the flag's syntax and the rules etcd takes from Kubernetes'
//! component-base feature gates.
//!
//! Design. [`FEATURE_GATES`] is data: each gate's name, stage, default,
//! whether it is locked to its default (a GA gate that can no longer be
//! turned off), and whether oxetcd acts on it. [`parse_gates`] checks a
//! flag value against a registry with etcd's error words (unknown gate,
//! missing or malformed bool, locked gate); [`FeatureGates`] resolves the
//! values given (with the built-in `AllAlpha` and `AllBeta`) into one
//! answer per gate, which the server asks and `/metrics` shows.
//! [`gate_warnings`] says what setting a gate means: etcd's warnings for
//! GA and deprecated gates, oxetcd's for alpha and beta ones and for gates
//! it does not act on yet.

use std::collections::BTreeMap;

/// A gate's maturity, as etcd prints it in `etcd_server_feature_enabled`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Off by default; may change or go away.
    Alpha,
    /// Usually on by default; well tested.
    Beta,
    /// Generally available; usually locked to on.
    Ga,
    /// To be removed.
    Deprecated,
}

impl Stage {
    /// etcd's label: `ALPHA`, `BETA`, empty for GA, `DEPRECATED`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Alpha => "ALPHA",
            Self::Beta => "BETA",
            Self::Ga => "",
            Self::Deprecated => "DEPRECATED",
        }
    }
}

/// One feature gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gate {
    /// As given in `--feature-gates`.
    pub name: &'static str,
    /// Its maturity.
    pub stage: Stage,
    /// Its value when not set.
    pub default: bool,
    /// It cannot be set to anything but its default.
    pub locked: bool,
    /// oxetcd does what the gate says (or already behaves as it asks);
    /// a gate it does not act on is logged when set off its default.
    pub acted_on: bool,
}

const fn gate(name: &'static str, stage: Stage, default: bool, acted_on: bool) -> Gate {
    Gate {
        name,
        stage,
        default,
        locked: false,
        acted_on,
    }
}

/// Sets every alpha gate not named explicitly.
pub(super) const ALL_ALPHA: &str = "AllAlpha";
/// Sets every beta gate not named explicitly.
pub(super) const ALL_BETA: &str = "AllBeta";

/// etcd 3.6's gates, 3.7's two new ones, and oxetcd's own. oxetcd always
/// checkpoints lease TTLs, so `LeaseCheckpoint` counts as acted on; it
/// persists them from cluster version 3.6 on, or before with
/// `LeaseCheckpointPersist` (see `oxetcd_core::version::capability`).
pub const FEATURE_GATES: &[Gate] = &[
    gate("StopGRPCServiceOnDefrag", Stage::Alpha, false, false),
    gate("InitialCorruptCheck", Stage::Alpha, false, true),
    gate("CompactHashCheck", Stage::Alpha, false, true),
    gate("TxnModeWriteWithSharedBuffer", Stage::Beta, true, false),
    gate("LeaseCheckpoint", Stage::Alpha, false, true),
    gate("LeaseCheckpointPersist", Stage::Alpha, false, true),
    gate("SetMemberLocalAddr", Stage::Alpha, false, false),
    gate("FastLeaseKeepAlive", Stage::Beta, true, true),
    gate("PriorityRequest", Stage::Alpha, false, true),
    // oxetcd's: a learner in sync with the leader is promoted without
    // `member promote`.
    gate("LearnerAutoPromote", Stage::Alpha, false, true),
    gate(ALL_ALPHA, Stage::Alpha, false, true),
    gate(ALL_BETA, Stage::Beta, false, true),
];

/// Parses `Name=bool,...` against `registry`, with the error words of
/// etcd's feature gates (without the flag's name, which the caller adds).
pub(super) fn parse_gates(
    registry: &[Gate],
    value: &str,
) -> Result<BTreeMap<String, bool>, String> {
    let mut given = Vec::new();
    for pair in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((name, on)) = pair.split_once('=') else {
            return Err(format!("missing bool value for {}", pair.trim()));
        };
        let (name, on) = (name.trim(), on.trim());
        let Some(on) = go_bool(on) else {
            return Err(format!(
                "invalid value of {name}={on}, err: strconv.ParseBool: parsing \"{on}\": \
                 invalid syntax"
            ));
        };
        given.push((name, on));
    }
    let mut gates = BTreeMap::new();
    for (name, on) in given {
        let Some(known) = registry.iter().find(|g| g.name == name) else {
            return Err(format!("unrecognized feature gate: {name}"));
        };
        if known.locked && known.default != on {
            return Err(format!(
                "cannot set feature gate {name} to {on}, feature is locked to {}",
                known.default
            ));
        }
        gates.insert(name.to_owned(), on);
    }
    Ok(gates)
}

/// Go's `strconv.ParseBool`.
fn go_bool(text: &str) -> Option<bool> {
    match text {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

/// What setting the gates in `given` (`--feature-gates` itself, not the
/// old switches that map onto gates) is worth a warning for.
pub(super) fn gate_warnings(registry: &[Gate], given: &BTreeMap<String, bool>) -> Vec<String> {
    let mut warnings = Vec::new();
    for (name, on) in given {
        let Some(known) = registry.iter().find(|g| g.name == *name) else {
            continue;
        };
        match known.stage {
            Stage::Deprecated => warnings.push(format!(
                "Setting deprecated feature gate {name}={on}. It will be removed in a future \
                 release."
            )),
            Stage::Ga => warnings.push(format!(
                "Setting GA feature gate {name}={on}. It will be removed in a future release."
            )),
            Stage::Alpha | Stage::Beta => warnings.push(format!(
                "Setting {} feature gate {name}={on}: it may change or be removed in a future \
                 release.",
                known.stage.label()
            )),
        }
    }
    warnings
}

/// Every gate's value: given, set by `AllAlpha`/`AllBeta`, or its
/// default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeatureGates {
    gates: Vec<(Gate, bool)>,
}

impl FeatureGates {
    /// Resolves `given` (names from `registry`) into a value per gate.
    pub fn resolve(registry: &[Gate], given: &BTreeMap<String, bool>) -> Self {
        let all = |name| given.get(name).copied();
        let gates = registry
            .iter()
            .map(|gate| {
                let by_all = match gate.stage {
                    Stage::Alpha if gate.name != ALL_ALPHA => all(ALL_ALPHA),
                    Stage::Beta if gate.name != ALL_BETA => all(ALL_BETA),
                    _ => None,
                };
                let on = given
                    .get(gate.name)
                    .copied()
                    .or(by_all)
                    .unwrap_or(gate.default);
                (*gate, on)
            })
            .collect();
        Self { gates }
    }

    /// Whether gate `name` is on (an unknown name is off).
    pub fn enabled(&self, name: &str) -> bool {
        self.gates.iter().any(|(gate, on)| gate.name == name && *on)
    }

    /// Every gate with its value, in registry order.
    pub fn iter(&self) -> impl Iterator<Item = (&Gate, bool)> {
        self.gates.iter().map(|(gate, on)| (gate, *on))
    }

    /// The gates set off their default that oxetcd does not act on, as
    /// `--feature-gates=Name=value` words.
    pub fn not_acted_on(&self) -> Vec<String> {
        self.iter()
            .filter(|(gate, on)| *on != gate.default && !gate.acted_on)
            .map(|(gate, on)| format!("--feature-gates={}={on}", gate.name))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOCKED: Gate = Gate {
        name: "Done",
        stage: Stage::Ga,
        default: true,
        locked: true,
        acted_on: true,
    };

    fn registry() -> Vec<Gate> {
        let mut gates = FEATURE_GATES.to_vec();
        gates.push(LOCKED);
        gates.push(gate("Old", Stage::Deprecated, false, true));
        gates
    }

    #[test]
    fn the_registry_has_etcds_stages_and_defaults() {
        let find = |name| FEATURE_GATES.iter().find(|g| g.name == name).copied();
        let expect = [
            ("StopGRPCServiceOnDefrag", Stage::Alpha, false),
            ("InitialCorruptCheck", Stage::Alpha, false),
            ("CompactHashCheck", Stage::Alpha, false),
            ("TxnModeWriteWithSharedBuffer", Stage::Beta, true),
            ("LeaseCheckpoint", Stage::Alpha, false),
            ("LeaseCheckpointPersist", Stage::Alpha, false),
            ("SetMemberLocalAddr", Stage::Alpha, false),
            ("FastLeaseKeepAlive", Stage::Beta, true),
            ("PriorityRequest", Stage::Alpha, false),
            ("LearnerAutoPromote", Stage::Alpha, false),
            ("AllAlpha", Stage::Alpha, false),
            ("AllBeta", Stage::Beta, false),
        ];
        assert_eq!(FEATURE_GATES.len(), expect.len());
        for (name, stage, default) in expect {
            let gate = find(name).unwrap_or_else(|| panic!("{name} missing"));
            assert_eq!(
                (gate.stage, gate.default, gate.locked),
                (stage, default, false)
            );
        }
        assert_eq!(Stage::Alpha.label(), "ALPHA");
        assert_eq!(Stage::Beta.label(), "BETA");
        assert_eq!(Stage::Ga.label(), "");
        assert_eq!(Stage::Deprecated.label(), "DEPRECATED");
    }

    #[test]
    fn parsing_takes_gos_bools_and_gives_etcds_errors() {
        let gates = parse_gates(
            FEATURE_GATES,
            " InitialCorruptCheck=true, TxnModeWriteWithSharedBuffer=f,,",
        )
        .unwrap();
        assert_eq!(gates.get("InitialCorruptCheck"), Some(&true));
        assert_eq!(gates.get("TxnModeWriteWithSharedBuffer"), Some(&false));
        assert_eq!(gates.len(), 2);
        assert_eq!(
            parse_gates(FEATURE_GATES, "NoSuchGate=true"),
            Err("unrecognized feature gate: NoSuchGate".to_owned())
        );
        assert_eq!(
            parse_gates(FEATURE_GATES, "InitialCorruptCheck"),
            Err("missing bool value for InitialCorruptCheck".to_owned())
        );
        assert_eq!(
            parse_gates(FEATURE_GATES, "InitialCorruptCheck=yes"),
            Err(
                "invalid value of InitialCorruptCheck=yes, err: strconv.ParseBool: parsing \
                 \"yes\": invalid syntax"
                    .to_owned()
            )
        );
        assert!(parse_gates(FEATURE_GATES, "").unwrap().is_empty());
    }

    #[test]
    fn a_locked_gate_takes_only_its_default() {
        let registry = registry();
        assert_eq!(
            parse_gates(&registry, "Done=false"),
            Err("cannot set feature gate Done to false, feature is locked to true".to_owned())
        );
        assert_eq!(
            parse_gates(&registry, "Done=true").unwrap().get("Done"),
            Some(&true)
        );
    }

    #[test]
    fn setting_a_gate_warns_by_stage() {
        let registry = registry();
        let given = parse_gates(
            &registry,
            "Done=true,Old=true,InitialCorruptCheck=true,FastLeaseKeepAlive=false",
        )
        .unwrap();
        let warnings = gate_warnings(&registry, &given);
        assert_eq!(
            warnings,
            vec![
                "Setting GA feature gate Done=true. It will be removed in a future release.",
                "Setting BETA feature gate FastLeaseKeepAlive=false: it may change or be \
                 removed in a future release.",
                "Setting ALPHA feature gate InitialCorruptCheck=true: it may change or be \
                 removed in a future release.",
                "Setting deprecated feature gate Old=true. It will be removed in a future \
                 release.",
            ]
        );
    }

    #[test]
    fn values_resolve_with_all_alpha_and_all_beta() {
        let none = FeatureGates::resolve(FEATURE_GATES, &BTreeMap::new());
        assert!(!none.enabled("InitialCorruptCheck"));
        assert!(none.enabled("TxnModeWriteWithSharedBuffer"));
        assert!(!none.enabled("NoSuchGate"));
        assert!(none.not_acted_on().is_empty());
        let given = parse_gates(FEATURE_GATES, "AllAlpha=true,CompactHashCheck=false").unwrap();
        let gates = FeatureGates::resolve(FEATURE_GATES, &given);
        assert!(gates.enabled("InitialCorruptCheck"), "AllAlpha sets it");
        assert!(!gates.enabled("CompactHashCheck"), "named explicitly");
        assert!(
            gates.enabled("TxnModeWriteWithSharedBuffer"),
            "beta keeps its default"
        );
        assert!(gates
            .not_acted_on()
            .contains(&"--feature-gates=StopGRPCServiceOnDefrag=true".to_owned()));
        let given = parse_gates(FEATURE_GATES, "AllBeta=false").unwrap();
        let gates = FeatureGates::resolve(FEATURE_GATES, &given);
        assert!(!gates.enabled("FastLeaseKeepAlive"));
        assert!(!gates.enabled("TxnModeWriteWithSharedBuffer"));
        assert_eq!(gates.iter().count(), FEATURE_GATES.len());
    }
}
