//! The store's words for time and size, as a user types them: spans (`--keep 7d`,
//! `--segment 1h`), sizes (`--max-size 2G`), and points in time (`--from`, `--to`): a time
//! back from now (`-30min`), a clock time or date in the host's time zone (`03:05`,
//! `2026-12-06 03:05`), the same in UTC (`03:05Z`), or an RFC 3339 instant
//! (`2026-12-06T03:05:00+01:00`). Every point is resolved to an instant and said back with the
//! zone it was read in, so nobody has to guess which clock a report used.

use std::time::Duration;

use jiff::{Timestamp, Zoned, civil, tz::TimeZone};

/// The longest span: ten years (a bound, so no arithmetic overflows).
const MAX_SPAN_SECS: u64 = 10 * 366 * 86_400;

/// A span of time: a positive number and a unit: `s`, `min` (or `m`), `h`, `d`, `w`
/// (`90s`, `30min`, `1.5h`, `7d`).
pub fn span(text: &str) -> Result<Duration, String> {
    let bad =
        || format!("`{text}` is not a span of time: a number and s, min, h, d or w (30min, 7d)");
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(bad)?;
    let (number, unit) = trimmed.split_at(split);
    let number: f64 = number.parse().map_err(|_| bad())?;
    let unit_secs = match unit.trim() {
        "s" | "sec" | "secs" | "second" | "seconds" => 1.0,
        "m" | "min" | "mins" | "minute" | "minutes" => 60.0,
        "h" | "hour" | "hours" => 3_600.0,
        "d" | "day" | "days" => 86_400.0,
        "w" | "week" | "weeks" => 7.0 * 86_400.0,
        _ => return Err(bad()),
    };
    let secs = number * unit_secs;
    if !(secs.is_finite() && secs > 0.0 && secs <= MAX_SPAN_SECS as f64) {
        return Err(format!(
            "`{text}`: give a span above 0 and at most ten years"
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// A size in bytes: a positive number and a unit of powers of 1024: `K`, `M`, `G`, `T` (a
/// trailing `B` or `iB` allowed: `512M`, `2GiB`); a bare number is bytes.
pub fn size(text: &str) -> Result<u64, String> {
    let bad = || format!("`{text}` is not a size: a number and K, M, G or T (512M, 2G)");
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let number: f64 = number.parse().map_err(|_| bad())?;
    let unit = unit.trim();
    let unit = unit
        .strip_suffix("iB")
        .or_else(|| unit.strip_suffix('B'))
        .unwrap_or(unit);
    let shift = match unit.to_ascii_uppercase().as_str() {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => return Err(bad()),
    };
    let bytes = number * (1u64 << shift) as f64;
    if !(bytes.is_finite() && bytes >= 1.0 && bytes < u64::MAX as f64) {
        return Err(format!("`{text}`: give a size of at least one byte"));
    }
    Ok(bytes as u64)
}

/// A point in time the user gave, resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct When {
    /// The instant.
    pub at: Timestamp,
    /// How it was read: the instant in the zone it was given in, and in UTC.
    pub read_as: String,
}

/// Resolves `text` (`--from`, `--to`) against `now`, whose zone is the host's: `now`, a span
/// back from now (`-30min`), an RFC 3339 instant, a date and time (`2026-12-06 03:05`,
/// `2026-12-06T03:05:00`) or a date (midnight), or a clock time (`03:05`, `03:05:30`: today,
/// or yesterday when that is still to come) in the host's zone, or in UTC with a `Z`
/// (`03:05Z`, `2026-12-06T03:05Z` is RFC 3339).
pub fn when(text: &str, now: &Zoned) -> Result<When, String> {
    let text = text.trim();
    let bad = || {
        format!(
            "`{text}` is not a time: give -30min, 03:05 (the host's time zone), 03:05Z (UTC), \
             2026-12-06 03:05, or an RFC 3339 time such as 2026-12-06T03:05:00+01:00"
        )
    };
    if text == "now" {
        return Ok(said(now.clone(), "now"));
    }
    if let Some(back) = text.strip_prefix('-') {
        let back = span(back)?;
        let signed = jiff::SignedDuration::try_from(back).map_err(|_| bad())?;
        let at = now
            .timestamp()
            .checked_sub(signed)
            .map_err(|_| bad())?
            .to_zoned(now.time_zone().clone());
        return Ok(said(at, &format!("{text} from now")));
    }
    if let Ok(at) = text.parse::<Timestamp>() {
        return Ok(said(at.to_zoned(TimeZone::UTC), "RFC 3339"));
    }
    let (clock, zone, zone_said) = match text.strip_suffix(['Z', 'z']) {
        Some(clock) => (clock, TimeZone::UTC, "UTC".to_owned()),
        None => (text, now.time_zone().clone(), local_zone(now)),
    };
    let civil_at = if let Ok(datetime) = clock.parse::<civil::DateTime>() {
        datetime
    } else if let Ok(date) = clock.parse::<civil::Date>() {
        date.to_datetime(civil::Time::midnight())
    } else if let Ok(time) = clock.parse::<civil::Time>() {
        let today = now.with_time_zone(zone.clone()).date();
        let mut at = today.to_datetime(time);
        let later = at
            .to_zoned(zone.clone())
            .is_ok_and(|z| z.timestamp() > now.timestamp());
        if later {
            at = today.yesterday().map_err(|_| bad())?.to_datetime(time);
        }
        at
    } else {
        return Err(bad());
    };
    let at = civil_at.to_zoned(zone).map_err(|_| bad())?;
    Ok(said(at, &zone_said))
}

/// The host's zone as said in the report: its name where it has one, and its offset now.
fn local_zone(now: &Zoned) -> String {
    match now.time_zone().iana_name() {
        Some(name) => format!("the host's time zone, {name}"),
        None => "the host's time zone".to_owned(),
    }
}

fn said(at: Zoned, how: &str) -> When {
    let utc = at.timestamp();
    When {
        read_as: format!(
            "{} ({how}; {} UTC)",
            at.strftime("%Y-%m-%d %H:%M:%S %:z"),
            utc.strftime("%Y-%m-%d %H:%M:%S")
        ),
        at: utc,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-12-06 10:00:00 in Berlin (UTC+01:00): 09:00 UTC.
    fn berlin_now() -> Zoned {
        "2026-12-06T10:00:00+01:00[Europe/Berlin]"
            .parse()
            .expect("a zoned time")
    }

    fn utc(text: &str) -> Timestamp {
        text.parse().expect("an instant")
    }

    #[test]
    fn spans_and_sizes_read_as_typed_and_refuse_the_rest() {
        assert_eq!(span("30min"), Ok(Duration::from_secs(1_800)));
        assert_eq!(span("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(span("1.5h"), Ok(Duration::from_secs(5_400)));
        assert_eq!(span("90s"), Ok(Duration::from_secs(90)));
        for bad in ["", "7", "d", "0s", "-1h", "1y", "99999999w"] {
            assert!(span(bad).is_err(), "{bad}");
        }
        assert_eq!(size("2G"), Ok(2 << 30));
        assert_eq!(size("512MiB"), Ok(512 << 20));
        assert_eq!(size("100k"), Ok(100 << 10));
        assert_eq!(size("4096"), Ok(4096));
        for bad in ["", "G", "0", "2X", "1e30T"] {
            assert!(size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn points_in_time_resolve_in_the_zone_they_were_given_in() {
        let now = berlin_now();
        let at = |text: &str| when(text, &now).expect(text).at;
        assert_eq!(at("now"), utc("2026-12-06T09:00:00Z"));
        assert_eq!(at("-30min"), utc("2026-12-06T08:30:00Z"));
        assert_eq!(at("-2d"), utc("2026-12-04T09:00:00Z"));
        // A clock time is the host's zone's, today; one still to come is yesterday's.
        assert_eq!(at("03:05"), utc("2026-12-06T02:05:00Z"));
        assert_eq!(at("11:00"), utc("2026-12-05T10:00:00Z"));
        // With a Z, UTC's.
        assert_eq!(at("03:05Z"), utc("2026-12-06T03:05:00Z"));
        assert_eq!(at("2026-12-06 03:05"), utc("2026-12-06T02:05:00Z"));
        assert_eq!(at("2026-12-06T03:05:30"), utc("2026-12-06T02:05:30Z"));
        assert_eq!(at("2026-12-06"), utc("2026-12-05T23:00:00Z"));
        assert_eq!(at("2026-12-06T03:05:00+05:00"), utc("2026-12-05T22:05:00Z"));
        assert_eq!(at("2026-12-06T03:05:00Z"), utc("2026-12-06T03:05:00Z"));
        let said = when("03:05", &now).expect("03:05").read_as;
        assert!(
            said.contains("+01:00")
                && said.contains("Europe/Berlin")
                && said.contains("02:05:00 UTC"),
            "{said}"
        );
        for bad in ["yesterday", "25:00", "-", "-5", "2026-13-01", "03:05+"] {
            assert!(when(bad, &now).is_err(), "{bad}");
        }
    }
}
