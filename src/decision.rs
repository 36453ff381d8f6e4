//! The decision vocabulary every layer shares (issue 53): what an override of a command or a
//! signature says — the operator's, this worker's or the fleet registry's — and the one order of
//! strictness between overrides (`never` > `always_ask` > `always_allow`). When several apply,
//! the strictest wins ([`strictest`]); nothing else ranks overrides. Uses nothing of the crate.

use serde::Serialize;

/// An override, declared in strictness order: the derived `Ord` is the order [`strictest`]
/// uses, so a new variant's place in this list is its strictness.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Override {
    AlwaysAllow,
    AlwaysAsk,
    Never,
}

impl Override {
    pub fn as_str(self) -> &'static str {
        match self {
            Override::AlwaysAllow => "always_allow",
            Override::AlwaysAsk => "always_ask",
            Override::Never => "never",
        }
    }

    /// The stored spelling back; None for anything else (an unknown value overrides nothing).
    pub fn parse(s: &str) -> Option<Override> {
        match s {
            "always_allow" => Some(Override::AlwaysAllow),
            "always_ask" => Some(Override::AlwaysAsk),
            "never" => Some(Override::Never),
            _ => None,
        }
    }
}

/// The more restrictive of two overrides; none is the least (`never` > `always_ask` >
/// `always_allow` > none).
pub fn strictest(a: Option<Override>, b: Option<Override>) -> Option<Override> {
    a.max(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use Override::*;

    #[test]
    fn the_strictest_override_wins_whichever_side_it_comes_from() {
        let all = [None, Some(AlwaysAllow), Some(AlwaysAsk), Some(Never)];
        // Each later entry of `all` is stricter than every earlier one, from either side.
        for (i, a) in all.iter().enumerate() {
            for (j, b) in all.iter().enumerate() {
                let want = all[i.max(j)];
                assert_eq!(strictest(*a, *b), want, "{a:?} vs {b:?}");
            }
        }
    }

    #[test]
    fn the_spellings_round_trip_and_nothing_else_parses() {
        for o in [AlwaysAllow, AlwaysAsk, Never] {
            assert_eq!(Override::parse(o.as_str()), Some(o));
        }
        for s in ["", "Never", "always-allow", "allow"] {
            assert_eq!(Override::parse(s), None, "{s:?}");
        }
    }
}
