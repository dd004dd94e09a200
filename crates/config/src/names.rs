//! Rules for the names an operator gives to things, and how error keys
//! refer to those things.

/// Longest port or router name. Names travel in API paths, log lines and
/// error keys; 64 is plenty for a tenant name and keeps those readable.
pub(crate) const MAX_NAME: usize = 64;

/// Longest Linux interface name: `IFNAMSIZ` (16) less the terminating NUL
/// (`include/uapi/linux/if.h`). Router interfaces are mirrored as TAP devices
/// of the same name, so they obey it too.
pub(crate) const MAX_IFNAME: usize = 15;

/// Why `name` is not a valid port, router or interface name, if it is not:
/// 1..=`max` characters from `A-Z a-z 0-9 _ . -`, not `.` or `..`.
///
/// The narrow alphabet keeps names safe in URLs, file names, Linux interface
/// names and in the quoted error keys, `port "p0".mac`.
pub(crate) fn name_problem(name: &str, max: usize) -> Option<String> {
    if name.is_empty() {
        return Some("must not be empty".into());
    }
    if name.len() > max {
        return Some(format!(
            "{} is {} characters long; at most {max} are allowed",
            crate::addr::shown(name),
            name.chars().count()
        ));
    }
    if name == "." || name == ".." {
        return Some(format!("{name:?} is reserved"));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
    {
        return Some(format!(
            "{} contains {c:?}; use only letters, digits, '_', '.' and '-'",
            crate::addr::shown(name)
        ));
    }
    None
}

/// Why `name` is not a valid Linux network device name, if it is not: the
/// kernel's `dev_valid_name()` (`net/core/dev.c`) rejects empty names, names
/// of `IFNAMSIZ` bytes or more, `.` and `..`, and any `/`, `:` or whitespace.
pub(crate) fn linux_ifname_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("must not be empty".into());
    }
    if name.len() > MAX_IFNAME {
        return Some(format!(
            "{} is {} bytes long; Linux interface names have at most {MAX_IFNAME}",
            crate::addr::shown(name),
            name.len()
        ));
    }
    if name == "." || name == ".." {
        return Some(format!("{name:?} is not a valid Linux interface name"));
    }
    if let Some(c) = name
        .chars()
        .find(|c| *c == '/' || *c == ':' || c.is_whitespace() || c.is_control())
    {
        return Some(format!(
            "{} contains {c:?}, which Linux does not allow in an interface name",
            crate::addr::shown(name)
        ));
    }
    None
}

/// Why `name` is not a valid network namespace name, if it is not:
/// `ip netns` keeps namespaces as files in `/run/netns`, so a name is one
/// path component of at most 255 bytes (`NAME_MAX`).
pub(crate) fn netns_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("must not be empty".into());
    }
    if name.len() > 255 {
        return Some(format!(
            "is {} bytes long; a namespace name has at most 255",
            name.len()
        ));
    }
    if name == "." || name == ".." {
        return Some(format!("{name:?} is not a valid namespace name"));
    }
    if let Some(c) = name.chars().find(|c| *c == '/' || c.is_control()) {
        return Some(format!(
            "{} contains {c:?}; a namespace name is one file name in /run/netns",
            crate::addr::shown(name)
        ));
    }
    None
}

/// Labels the elements of one `[[kind]]` array for error keys: `kind "name"`
/// where the name is valid and first of its kind, `kind[i]` otherwise, so
/// that every key points at exactly one element.
pub(crate) fn labels<'a>(
    prefix: &str,
    kind: &str,
    names: impl IntoIterator<Item = Option<&'a str>>,
    max: usize,
) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    names
        .into_iter()
        .enumerate()
        .map(|(i, name)| match name {
            Some(n) if name_problem(n, max).is_none() && seen.insert(n) => {
                format!("{prefix}{kind} \"{n}\"")
            }
            _ => format!("{prefix}{kind}[{i}]"),
        })
        .collect()
}

/// A TOML key as a path component: bare if TOML would accept it bare,
/// quoted otherwise.
pub(crate) fn key_part(key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if bare {
        key.to_string()
    } else {
        crate::addr::shown(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(name_problem("red-1.a_b", MAX_NAME).is_none());
        assert!(name_problem("", MAX_NAME).is_some());
        assert!(name_problem("..", MAX_NAME).is_some());
        assert!(name_problem("a b", MAX_NAME).unwrap().contains("' '"));
        assert!(name_problem("sixteen-chars-xx", MAX_IFNAME).is_some());
        assert!(linux_ifname_problem("veth0").is_none());
        assert!(linux_ifname_problem("eth0:1").is_some());
        assert!(netns_problem("vr-red").is_none());
        assert!(netns_problem("a/b").is_some());
    }

    #[test]
    fn labels_fall_back_to_indexes() {
        let l = labels(
            "",
            "port",
            [Some("p0"), None, Some("p0"), Some("bad name")],
            64,
        );
        assert_eq!(l, ["port \"p0\"", "port[1]", "port[2]", "port[3]"]);
    }
}
