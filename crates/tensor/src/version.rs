//! Versions of mutable values: a number no other state of any value has had in this process,
//! so a consumer that derived something costly from a value (a backend's resolved launches of
//! a graph) can keep it while the version it saw holds.

use std::sync::atomic::{AtomicU64, Ordering};

static NEXT: AtomicU64 = AtomicU64::new(1);

/// A value's version (see the module docs). Drawn afresh when the value is created, changed
/// ([`Version::bump`]) or cloned: cloning a `Version` gives a new one, since a clone is a
/// separate value that may change on its own; so equal versions mean the same unchanged value.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Version(u64);

impl Version {
    /// A version no value has had.
    pub fn fresh() -> Version {
        Version(NEXT.fetch_add(1, Ordering::Relaxed))
    }

    /// Marks a change: a fresh version.
    pub fn bump(&mut self) {
        *self = Version::fresh();
    }

    /// The number, to keep beside what was derived from the value.
    pub fn get(&self) -> u64 {
        self.0
    }
}

impl Default for Version {
    fn default() -> Version {
        Version::fresh()
    }
}

impl Clone for Version {
    fn clone(&self) -> Version {
        Version::fresh()
    }
}

#[cfg(test)]
mod tests {
    use super::Version;

    #[test]
    fn versions_are_never_shared() {
        let a = Version::fresh();
        let b = a.clone();
        assert_ne!(a.get(), b.get(), "a clone is a new value");
        let mut c = Version::default();
        let before = c.get();
        c.bump();
        assert_ne!(before, c.get());
        assert_ne!(c.get(), a.get());
    }
}
