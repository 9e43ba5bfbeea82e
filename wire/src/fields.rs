//! How request bodies read their fields, so that every body the API's
//! JSON Schema (`agent/openapi.yaml`) accepts is read as the schema means
//! it, whatever client generated it:
//!
//! - `null` means absent, for every optional field: the field's default
//!   (a required field sent as `null` is refused as missing a value);
//! - a whole number may be written as a float (`10000.0`, `1e4`): JSON
//!   Schema's `integer` is any number with a zero fractional part, and
//!   some JSON encoders write every number so. Fractions, negatives and
//!   numbers past the field's range are refused.
//!
//! Used through `#[serde(deserialize_with = ...)]`; serializing is
//! untouched (the agent and the Rust client write plain integers and leave
//! absent fields out).

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, Unexpected, Visitor};

/// 2^64: the first float past `u64::MAX` (which a float cannot hold).
const TWO_POW_64: f64 = 18_446_744_073_709_551_616.0;

/// A whole number of 0 or more, written as an integer or as a float with
/// no fractional part.
struct Whole(u64);

impl<'de> Deserialize<'de> for Whole {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Whole, D::Error> {
        deserializer.deserialize_any(WholeVisitor).map(Whole)
    }
}

struct WholeVisitor;

impl Visitor<'_> for WholeVisitor {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a whole number of 0 or more")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
        Ok(v)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
        u64::try_from(v).map_err(|_| E::invalid_value(Unexpected::Signed(v), &self))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<u64, E> {
        // NaN has no zero fraction; -0.0 is 0.
        if v.fract() == 0.0 && (0.0..TWO_POW_64).contains(&v) {
            // Exact: a whole float below 2^64.
            Ok(v as u64)
        } else {
            Err(E::invalid_value(Unexpected::Float(v), &self))
        }
    }
}

/// An optional `u64`: absent or `null` is `None`; `10000` and `10000.0`
/// are both 10000.
///
/// # Errors
/// Anything else: a fraction, a negative number, one past `u64::MAX`, a
/// string, a boolean, an array or an object.
pub fn optional_whole<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Ok(Option::<Whole>::deserialize(d)?.map(|w| w.0))
}

/// A required `u32`, written as an integer or as a whole float.
///
/// # Errors
/// As [`optional_whole`], `null`, or a number past `u32::MAX`.
pub fn whole_u32<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let Whole(v) = Whole::deserialize(d)?;
    u32::try_from(v).map_err(|_| {
        de::Error::invalid_value(Unexpected::Unsigned(v), &"a whole number up to 4294967295")
    })
}

/// An optional `u32`: absent or `null` is `None`, else as [`whole_u32`].
///
/// # Errors
/// As [`whole_u32`], but for `null`.
pub fn optional_whole_u32<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    Option::<Whole>::deserialize(d)?
        .map(|Whole(v)| {
            u32::try_from(v).map_err(|_| {
                de::Error::invalid_value(
                    Unexpected::Unsigned(v),
                    &"a whole number up to 4294967295",
                )
            })
        })
        .transpose()
}

/// An optional field that is not an `Option` (a flag, an enum with a
/// default): `null` is its default, as absent is.
///
/// # Errors
/// What `T` refuses.
pub fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use crate::*;

    #[derive(Debug, Deserialize)]
    struct Limit {
        #[serde(deserialize_with = "super::whole_u32")]
        limit: u32,
    }

    #[test]
    fn whole_numbers_may_be_written_as_floats() {
        for text in [
            r#"{"ttl_ms": 10000}"#,
            r#"{"ttl_ms": 10000.0}"#,
            r#"{"ttl_ms": 1e4}"#,
            r#"{"ttl_ms": 1.0E4}"#,
        ] {
            let r: AcquireRequest = serde_json::from_str(text).unwrap();
            assert_eq!(r.ttl_ms, Some(10000), "{text}");
        }
        let r: AcquireRequest = serde_json::from_str(r#"{"wait_ms": -0.0}"#).unwrap();
        assert_eq!(r.wait_ms, Some(0));
        let r: AcquireRequest =
            serde_json::from_str(r#"{"wait_ms": 18446744073709551615}"#).unwrap();
        assert_eq!(r.wait_ms, Some(u64::MAX));
        let l: Limit = serde_json::from_str(r#"{"limit": 3.0}"#).unwrap();
        assert_eq!(l.limit, 3);
    }

    #[test]
    fn fractions_negatives_and_numbers_out_of_range_are_refused() {
        for text in [
            r#"{"ttl_ms": 1.5}"#,
            r#"{"ttl_ms": -1}"#,
            r#"{"ttl_ms": -1.0}"#,
            r#"{"ttl_ms": 18446744073709551616}"#,
            r#"{"ttl_ms": 1e300}"#,
            r#"{"ttl_ms": "10"}"#,
            r#"{"ttl_ms": true}"#,
            r#"{"ttl_ms": []}"#,
            r#"{"ttl_ms": {}}"#,
        ] {
            let e = serde_json::from_str::<AcquireRequest>(text).unwrap_err();
            assert!(e.to_string().contains("whole number"), "{text}: {e}");
        }
        assert!(serde_json::from_str::<Limit>(r#"{"limit": 4294967296}"#).is_err());
        assert!(serde_json::from_str::<Limit>(r#"{"limit": null}"#).is_err());
    }

    #[test]
    fn null_means_absent_for_every_optional_field() {
        let r: AcquireRequest = serde_json::from_str(
            r#"{"ttl_ms": null, "wait_ms": null, "owner": null, "fence": null, "token": null}"#,
        )
        .unwrap();
        assert_eq!(r, AcquireRequest::default());
        let r: HoldRequest = serde_json::from_str(
            r#"{"ttl_ms": null, "wait_ms": null, "owner": null, "fence": null,
                "max_hold_ms": null, "on_disconnect": null}"#,
        )
        .unwrap();
        assert_eq!(r, HoldRequest::default());
        let r: ExtendRequest = serde_json::from_str(r#"{"token": "t", "ttl_ms": null}"#).unwrap();
        assert_eq!(r.ttl_ms, None);
        // A required field has no default: null is refused.
        assert!(serde_json::from_str::<ReleaseRequest>(r#"{"token": null}"#).is_err());
    }
}
