//! Lists read from a peer's bytes with a cap on the memory their elements take in all.
//!
//! A 4 MiB control frame of `{}` or `[0,0,0]` decodes, through derived serde, into records of
//! a hundred bytes or more each (a report's streams, a kilobyte and more): gigabytes from a
//! frame. Every list of a report is read through [`list`], which takes each element's size
//! from a per-thread allowance of bytes that the decoder sets for the whole frame
//! ([`with_allowance`]): past it, decoding fails with an error instead of allocating. The
//! visitor reads element by element and never trusts a size hint. (What an element holds on
//! the heap comes from lists of its own, which draw from the same allowance, or from strings,
//! which are no longer than the frame's bytes.)

use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{Error, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

thread_local! {
    /// Bytes the lists being decoded on this thread may still take; none set: no cap.
    static LEFT: Cell<Option<usize>> = const { Cell::new(None) };
}

/// Runs `decode` with at most `bytes` of list elements decodable in all, by every list read
/// through [`list`] (nested ones too); the allowance before is restored after.
pub fn with_allowance<T>(bytes: usize, decode: impl FnOnce() -> T) -> T {
    let before = LEFT.with(|l| l.replace(Some(bytes)));
    let out = decode();
    LEFT.with(|l| l.set(before));
    out
}

/// Takes `size` bytes (an element's, at least one) from the allowance; false when they are
/// not left.
fn take(size: usize) -> bool {
    let size = size.max(1);
    LEFT.with(|l| match l.get() {
        None => true,
        Some(n) if n < size => false,
        Some(n) => {
            l.set(Some(n - size));
            true
        }
    })
}

/// A list whose elements come out of the allowance of [`with_allowance`]: for
/// `#[serde(deserialize_with = "wirebench_stats::bounded::list")]`.
pub fn list<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct ListVisitor<T>(PhantomData<T>);

    impl<'de, T: Deserialize<'de>> Visitor<'de> for ListVisitor<T> {
        type Value = Vec<T>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a list")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let size = std::mem::size_of::<T>();
            let mut out = Vec::new();
            // One element at a time is decoded before it is counted: what it holds in lists
            // of its own was counted as it was decoded.
            while let Some(x) = seq.next_element()? {
                if !take(size) {
                    return Err(A::Error::custom(
                        "more list elements than one message may hold",
                    ));
                }
                out.push(x);
            }
            Ok(out)
        }
    }

    d.deserialize_seq(ListVisitor(PhantomData))
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize, PartialEq)]
    struct Outer {
        #[serde(deserialize_with = "list")]
        a: Vec<Inner>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Inner {
        #[serde(default, deserialize_with = "list")]
        b: Vec<u8>,
    }

    #[test]
    fn nested_lists_share_one_allowance() {
        let doc = r#"{"a":[{"b":[1,2]},{"b":[3]},{}]}"#;
        // 3 outer elements of an Inner's size, 3 inner of a byte.
        let need = 3 * std::mem::size_of::<Inner>() + 3;
        let ok: Outer = with_allowance(need, || serde_json::from_str(doc)).unwrap();
        assert_eq!(ok.a.len(), 3);
        let err = with_allowance(need - 1, || serde_json::from_str::<Outer>(doc)).unwrap_err();
        assert!(err.to_string().contains("more list elements"), "{err}");
        // Without an allowance, no cap; after one, the one before holds again.
        assert!(serde_json::from_str::<Outer>(doc).is_ok());
        with_allowance(1, || {
            assert!(with_allowance(need, || serde_json::from_str::<Outer>(doc)).is_ok());
            assert!(serde_json::from_str::<Outer>(doc).is_err());
        });
    }

    #[test]
    fn a_frame_of_empty_records_stops_at_the_allowance() {
        let doc = format!(r#"{{"a":[{}{{}}]}}"#, "{},".repeat(1_000_000));
        let err = with_allowance(1 << 20, || serde_json::from_str::<Outer>(&doc)).unwrap_err();
        assert!(err.to_string().contains("more list elements"), "{err}");
    }
}
