//! What a listed resource is, read from its name alone: the agent keeps a
//! semaphore's permits and an election's leadership as locks on resources
//! with spaces (`pay permit 3`, `sched election`), which no client can
//! name.

/// What a listed resource is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind<'a> {
    /// A lock an application named.
    Lock,
    /// Permit `permit` of the semaphore `semaphore`.
    Permit { semaphore: &'a str, permit: u32 },
    /// The leadership of the election `election`.
    Leader { election: &'a str },
}

impl<'a> Kind<'a> {
    /// The kind of `resource`, from its name: `<name> permit <i>` and
    /// `<name> election`, where `<name>` has no space; anything else is a
    /// lock.
    pub fn of(resource: &'a str) -> Kind<'a> {
        if let Some((name, text)) = resource.split_once(" permit ") {
            // The agent writes the number plainly: `01` is not its form.
            if let Ok(permit) = text.parse::<u32>() {
                if !name.is_empty() && !name.contains(' ') && permit.to_string() == text {
                    return Kind::Permit {
                        semaphore: name,
                        permit,
                    };
                }
            }
        }
        if let Some(name) = resource.strip_suffix(" election") {
            if !name.is_empty() && !name.contains(' ') {
                return Kind::Leader { election: name };
            }
        }
        Kind::Lock
    }

    /// The KIND column's word: `lock`, `permit`, `leader`.
    pub fn word(self) -> &'static str {
        match self {
            Kind::Lock => "lock",
            Kind::Permit { .. } => "permit",
            Kind::Leader { .. } => "leader",
        }
    }
}
