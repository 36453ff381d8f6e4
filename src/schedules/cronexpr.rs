//! Cron expressions as operators write them: 5-field crontab (`m h dom mon dow`) or 6/7-field
//! with seconds (and year). Day-of-week numbers follow crontab everywhere (0 or 7 = Sunday,
//! 1 = Monday … 6 = Saturday); the `cron` crate numbers them 1 = Sunday … 7 = Saturday, so every
//! numeric day-of-week item is expanded and translated before parsing (`0 9 * * 1-5` must fire
//! Monday–Friday). Names (`MON-FRI`) mean the same in both and pass through.

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use cron::Schedule;
use std::str::FromStr;

/// Translates one crontab day-of-week field to the `cron` crate's numbering.
pub fn translate_dow(field: &str) -> Result<String, String> {
    let mut out: Vec<String> = Vec::new();
    for item in field.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((r, s)) => (
                r,
                Some(
                    s.parse::<u32>()
                        .map_err(|_| format!("bad step in {item:?}"))?,
                ),
            ),
            None => (item, None),
        };
        let numeric = |s: &str| s.parse::<u32>().ok().filter(|n| *n <= 7);
        let (lo, hi) = if range == "*" || range == "?" {
            if step.is_none() {
                out.push(range.to_string());
                continue;
            }
            (0, 6)
        } else if let Some((a, b)) = range.split_once('-') {
            match (numeric(a), numeric(b)) {
                (Some(a), Some(b)) if a <= b => (a, b),
                (Some(_), Some(_)) => {
                    return Err(format!("day-of-week range {item:?} goes backwards"))
                }
                _ if a.chars().all(|c| c.is_ascii_alphabetic())
                    && b.chars().all(|c| c.is_ascii_alphabetic()) =>
                {
                    out.push(item.to_string());
                    continue;
                }
                _ => return Err(format!("bad day-of-week range {item:?} (0–7 or SUN–SAT)")),
            }
        } else if let Some(n) = numeric(range) {
            (n, if step.is_some() { 6 } else { n })
        } else if range.chars().all(|c| c.is_ascii_alphabetic()) && step.is_none() {
            out.push(item.to_string());
            continue;
        } else {
            return Err(format!("bad day-of-week item {item:?} (0–7 or SUN–SAT)"));
        };
        let step = step.unwrap_or(1).max(1);
        let mut d = lo;
        while d <= hi {
            // crontab 0..=7 (0 and 7 Sunday) → cron crate 1..=7 (1 Sunday).
            out.push(((d % 7) + 1).to_string());
            d += step;
        }
    }
    out.dedup();
    Ok(out.join(","))
}

/// Parses an expression into a schedule, or says what is wrong with it.
pub fn parse(expr: &str) -> Result<Schedule, String> {
    let fields: Vec<&str> = expr.split_whitespace().collect();
    let (mut fields, dow) = match fields.len() {
        5 => {
            let mut f = vec!["0"];
            f.extend(fields);
            (f, 5)
        }
        6 | 7 => (fields, 5),
        n => {
            return Err(format!(
                "{expr:?}: expected 5 fields (crontab) or 6/7 (with seconds, year), got {n}"
            ))
        }
    };
    let translated = translate_dow(fields[dow]).map_err(|e| format!("{expr:?}: {e}"))?;
    fields[dow] = &translated;
    let text = fields.join(" ");
    Schedule::from_str(&text).map_err(|e| format!("{expr:?}: {e}"))
}

/// The next firing strictly after `after`, the expression read in time zone `tz` (so `0 9 * * *`
/// in Europe/Paris is 09:00 Paris time, daylight saving included).
pub fn next_after(s: &Schedule, after: DateTime<Utc>, tz: Tz) -> Option<DateTime<Utc>> {
    s.after(&after.with_timezone(&tz))
        .next()
        .map(|t| t.with_timezone(&Utc))
}

/// Parses a configured IANA time zone name (`UTC`, `Europe/Paris`).
pub fn parse_tz(name: &str) -> Result<Tz, String> {
    name.parse::<Tz>().map_err(|_| {
        format!("unknown time zone {name:?} (an IANA name such as UTC or Europe/Paris)")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{Datelike, TimeZone, Weekday};

    fn at(y: i32, m: u32, d: u32, h: u32, mi: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, m, d, h, mi, 0).unwrap()
    }

    #[test]
    fn weekday_ranges_fire_on_the_crontab_days() {
        // 2026-11-21 is a Saturday.
        let s = parse("0 9 * * 1-5").unwrap();
        let days: Vec<Weekday> = s
            .after(&at(2026, 11, 21, 12, 0))
            .take(6)
            .map(|t| t.weekday())
            .collect();
        assert_eq!(
            days,
            vec![
                Weekday::Mon,
                Weekday::Tue,
                Weekday::Wed,
                Weekday::Thu,
                Weekday::Fri,
                Weekday::Mon
            ]
        );
        let table: &[(&str, Vec<Weekday>)] = &[
            ("0 9 * * 0", vec![Weekday::Sun]),
            ("0 9 * * 7", vec![Weekday::Sun]),
            ("0 9 * * 6,0", vec![Weekday::Sat, Weekday::Sun]),
            (
                "0 9 * * 5-7",
                vec![Weekday::Fri, Weekday::Sat, Weekday::Sun],
            ),
            (
                "0 9 * * MON-FRI",
                vec![
                    Weekday::Mon,
                    Weekday::Tue,
                    Weekday::Wed,
                    Weekday::Thu,
                    Weekday::Fri,
                ],
            ),
            (
                "0 9 * * */2",
                vec![Weekday::Sun, Weekday::Tue, Weekday::Thu, Weekday::Sat],
            ),
            (
                "0 9 * * 1-5/2",
                vec![Weekday::Mon, Weekday::Wed, Weekday::Fri],
            ),
        ];
        for (expr, want) in table {
            let s = parse(expr).unwrap();
            let mut got: Vec<Weekday> = s
                .after(&at(2026, 11, 21, 12, 0))
                .take(14)
                .map(|t| t.weekday())
                .collect();
            got.sort_by_key(|d| d.num_days_from_sunday());
            got.dedup();
            let mut want = want.clone();
            want.sort_by_key(|d| d.num_days_from_sunday());
            assert_eq!(got, want, "{expr}");
        }
    }

    #[test]
    fn time_zones_shift_the_firing_and_follow_daylight_saving() {
        let s = parse("0 9 * * *").unwrap();
        let paris = parse_tz("Europe/Paris").unwrap();
        // Winter: 09:00 Paris = 08:00 UTC; summer: 07:00 UTC.
        assert_eq!(
            next_after(&s, at(2026, 1, 10, 12, 0), paris).unwrap(),
            at(2026, 1, 11, 8, 0)
        );
        assert_eq!(
            next_after(&s, at(2026, 7, 10, 12, 0), paris).unwrap(),
            at(2026, 7, 11, 7, 0)
        );
        assert!(parse_tz("Mars/Olympus").is_err());
    }

    #[test]
    fn fields_seconds_and_errors() {
        let s = parse("*/15 * * * * *").unwrap();
        let t = next_after(&s, at(2026, 1, 1, 0, 0), Tz::UTC).unwrap();
        assert_eq!(t, Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 15).unwrap());
        let s = parse("30 4 1 * *").unwrap();
        assert_eq!(
            next_after(&s, at(2026, 1, 5, 0, 0), Tz::UTC).unwrap(),
            at(2026, 2, 1, 4, 30)
        );
        for bad in [
            "* * *",
            "61 * * * *",
            "0 9 * * 8",
            "0 9 * * 5-1",
            "0 9 * * funday",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
