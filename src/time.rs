//! Clock helpers. Every timestamp brainloop stores is INTEGER unix milliseconds (the wall clock,
//! which NTP or an operator may step). Waits and ages the worker measures itself use the
//! monotonic clock ([`mono_ms`]): `CLOCK_MONOTONIC`, shared by every process of one boot
//! ([`boot_id`] tells boots apart), never stepped.

use std::time::{SystemTime, UNIX_EPOCH};

/// A span written as a number and a unit — `500ms`, `30s`, `10m` (or `10min`), `2h`, `3d`; a
/// bare number is seconds — in milliseconds. The one reading of a span the CLI takes
/// (`enqueue --not-before +30s`, `jobs --since 10m`, `reviewer eval --since 7d`, grant ages).
pub fn parse_span_ms(s: &str) -> Result<i64, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: i64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a span: a number followed by ms, s, m, h or d"))?;
    let per = match unit {
        "ms" => 1,
        "" | "s" => 1000,
        "m" | "min" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(format!("{s:?}: the unit is ms, s, m, h or d")),
    };
    Ok(n.saturating_mul(per))
}

/// Milliseconds since the Unix epoch (0 if the clock is before 1970, which never happens in practice).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// `CLOCK_MONOTONIC` in milliseconds: the same clock in every process of this boot, not moved
/// by wall-clock steps (it does not count time suspended).
pub fn mono_ms() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec * 1000 + ts.tv_nsec / 1_000_000
}

/// This boot's id (`/proc/sys/kernel/random/boot_id`): two [`mono_ms`] readings compare only
/// when taken in the same boot. Empty when unreadable.
pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// How far the wall clock moved against the monotonic clock between two readings
/// (`(wall, mono)` pairs, ms): 0 when nobody stepped it; > 0 a forward step, < 0 backward.
pub fn wall_step_ms(then: (i64, i64), now: (i64, i64)) -> i64 {
    (now.0 - then.0) - (now.1 - then.1)
}

/// A wall-clock instant (`at`, unix ms) as a [`mono_ms`] deadline, measured from now: a wait
/// armed this way lasts `at - now_ms()` whatever the wall clock does afterwards.
pub fn mono_deadline(at: i64) -> i64 {
    mono_ms().saturating_add(at.saturating_sub(now_ms()))
}

/// Below this, a difference between elapsed wall and monotonic time is the clocks' own drift
/// (NTP slews at most 0.5 ms/s), not a step.
pub const STEP_MIN_MS: i64 = 1000;

/// `step` when it is a step (at least [`STEP_MIN_MS`] either way), else 0.
pub fn significant_step(step: i64) -> i64 {
    if step.abs() >= STEP_MIN_MS {
        step
    } else {
        0
    }
}

/// A stored instant (unix ms) as the operator reads it: local time with its UTC offset
/// (`2026-11-26 23:13:08 +01:00`; the zone is `TZ`, else `/etc/localtime`). The raw value when
/// it is out of range.
pub fn local(ms: i64) -> String {
    use chrono::TimeZone;
    match chrono::Local.timestamp_millis_opt(ms) {
        chrono::LocalResult::Single(t) | chrono::LocalResult::Ambiguous(t, _) => {
            t.format("%Y-%m-%d %H:%M:%S %:z").to_string()
        }
        chrono::LocalResult::None => ms.to_string(),
    }
}

/// [`local`] without its UTC offset, for a column (`2026-11-26 23:13:08`).
pub fn local_short(ms: i64) -> String {
    use chrono::TimeZone;
    match chrono::Local.timestamp_millis_opt(ms) {
        chrono::LocalResult::Single(t) | chrono::LocalResult::Ambiguous(t, _) => {
            t.format("%Y-%m-%d %H:%M:%S").to_string()
        }
        chrono::LocalResult::None => ms.to_string(),
    }
}

/// [`local`] followed by how long ago it was (`… (3 min ago)`), measured against `now` (ms).
pub fn local_ago(ms: i64, now: i64) -> String {
    let s = (now - ms) / 1000;
    let ago = match s {
        s if s < 0 => "in the future".to_string(),
        s if s < 60 => format!("{s} s ago"),
        s if s < 3600 => format!("{} min ago", s / 60),
        s if s < 172_800 => format!("{} h ago", s / 3600),
        s => format!("{} days ago", s / 86_400),
    };
    format!("{} ({ago})", local(ms))
}

#[cfg(test)]
mod local_tests {
    #[test]
    fn a_span_is_a_number_and_a_unit_and_nothing_else() {
        for (s, ms) in [
            ("500ms", 500),
            ("45", 45_000),
            ("30s", 30_000),
            ("10m", 600_000),
            ("10min", 600_000),
            ("2h", 7_200_000),
            ("3d", 259_200_000),
            (" 7d ", 604_800_000),
        ] {
            assert_eq!(super::parse_span_ms(s), Ok(ms), "{s}");
        }
        for s in ["", "d", "7w", "-5s", "1.5h", "+30s", "2026-12-02"] {
            assert!(super::parse_span_ms(s).is_err(), "{s}");
        }
    }

    #[test]
    fn local_time_names_its_offset_and_the_age() {
        let t = super::local(1_795_730_988_062);
        assert!(t.starts_with("2026-11-"), "{t}");
        assert!(t.contains('+') || t.contains('-'), "{t}");
        assert!(super::local_ago(0, 90_000).ends_with("(1 min ago)"));
        assert!(super::local_ago(0, 3 * 86_400_000).ends_with("(3 days ago)"));
    }
}
