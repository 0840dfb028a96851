//! What the soak knows each key should hold: the "every acknowledged
//! object reads back" bookkeeping.
//!
//! Every key has one owner (a single worker task), so writes to a key are
//! serial and the owner's ledger is exact without locks. A state is
//! recorded only after the server acknowledged it (2xx). A write that got
//! an error status changed nothing. A write whose outcome is unknown (the
//! client timed out, or the connection broke) may or may not have landed,
//! possibly later than the client gave up, so the key is *frozen*: it is
//! never written again, and the final read may return any of the versions
//! it could hold.

use std::collections::BTreeMap;

/// One version of a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// No object (never written, or deleted).
    Absent,
    /// An object with these contents ([`super::blob::Blob`]).
    Object {
        /// Contents seed.
        seed: u64,
        /// Length.
        size: u64,
    },
}

/// The tags a key should have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tags {
    /// No tags (a PUT replaces the tag set with none).
    None,
    /// The one tag `v=N`.
    Value(u32),
    /// Not known (after a write of unknown outcome).
    Unknown,
}

/// What one key may hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyState {
    /// Versions it may hold: one, unless frozen.
    pub versions: Vec<Version>,
    /// Tags it should have.
    pub tags: Tags,
}

impl KeyState {
    /// The single version, if the key is not frozen.
    pub fn known(&self) -> Option<Version> {
        match self.versions.as_slice() {
            [v] => Some(*v),
            _ => None,
        }
    }

    /// Whether the key may still be written.
    pub fn writable(&self) -> bool {
        self.versions.len() == 1
    }
}

/// The keys of one owner.
#[derive(Debug, Clone, Default)]
pub struct Ledger {
    keys: BTreeMap<String, KeyState>,
}

impl Ledger {
    /// The state of `key` (absent and untagged if never touched).
    pub fn get(&self, key: &str) -> KeyState {
        self.keys.get(key).cloned().unwrap_or(KeyState {
            versions: vec![Version::Absent],
            tags: Tags::None,
        })
    }

    /// An acknowledged write of `v` (a PUT clears the tags).
    pub fn acked(&mut self, key: &str, v: Version) {
        self.keys.insert(
            key.to_owned(),
            KeyState {
                versions: vec![v],
                tags: Tags::None,
            },
        );
    }

    /// An acknowledged tag write.
    pub fn tagged(&mut self, key: &str, value: u32) {
        let mut st = self.get(key);
        st.tags = Tags::Value(value);
        self.keys.insert(key.to_owned(), st);
    }

    /// A write of `v` whose outcome is unknown: freezes the key.
    pub fn unknown(&mut self, key: &str, v: Option<Version>) {
        let mut st = self.get(key);
        if let Some(v) = v
            && !st.versions.contains(&v)
        {
            st.versions.push(v);
        }
        if st.versions.len() == 1 {
            // Only the tags were in doubt; freeze anyway: a late tag write
            // must not be mistaken for a lost one.
            st.versions.push(st.versions[0]);
        }
        st.tags = Tags::Unknown;
        self.keys.insert(key.to_owned(), st);
    }

    /// Every key touched, with its state.
    pub fn entries(&self) -> impl Iterator<Item = (&String, &KeyState)> {
        self.keys.iter()
    }

    /// Adds another owner's keys (owners never share keys).
    pub fn absorb(&mut self, other: Ledger) {
        self.keys.extend(other.keys);
    }

    /// Keys touched.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// True if no key was touched.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_and_freezes() {
        let mut l = Ledger::default();
        assert_eq!(l.get("k").known(), Some(Version::Absent));
        let v1 = Version::Object { seed: 1, size: 10 };
        l.acked("k", v1);
        l.tagged("k", 5);
        assert_eq!(l.get("k").tags, Tags::Value(5));
        l.acked("k", v1);
        assert_eq!(l.get("k").tags, Tags::None);
        let v2 = Version::Object { seed: 2, size: 10 };
        l.unknown("k", Some(v2));
        let st = l.get("k");
        assert!(!st.writable());
        assert_eq!(st.versions, vec![v1, v2]);
        assert_eq!(st.tags, Tags::Unknown);
        l.unknown("t", None);
        assert!(!l.get("t").writable());
        assert_eq!(l.len(), 2);
    }
}
