//! Fuzzing the parsers: whatever the input, they return `Ok` or `Err`,
//! never panic.

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use vrhost_config::{
    parse_routes, Config, IfAddr, IpPrefix, EXAMPLE, EXAMPLE_ROUTES_FILE, EXAMPLE_ROUTES_FILE_NAME,
};

/// A directory holding the example's routes file, so that mutated examples
/// exercise routes-file loading too.
fn example_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vrhost-config-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(EXAMPLE_ROUTES_FILE_NAME), EXAMPLE_ROUTES_FILE).unwrap();
    dir
}

/// Fragments that are likely to reach deep into the validator when spliced
/// into a valid file.
const SNIPPETS: &[&str] = &[
    "\n",
    "\"",
    "=",
    "[[",
    "]]",
    "[",
    "]",
    "#",
    "/",
    ":",
    ".",
    ",",
    "0",
    "1",
    "-1",
    "4095",
    "65536",
    "99999999999999999999",
    "1e9",
    "true",
    "false",
    "\"\"",
    "[]",
    "{}",
    "::",
    "/33",
    "/0",
    "\n[[port]]\n",
    "\n[[router]]\n",
    "\n[[router.interface]]\n",
    "\n[[router.route]]\n",
    "\n[router.control]\n",
    "\n[router.limits]\n",
    "\n[dataplane]\n",
    "name = \"p0\"\n",
    "port = \"p0\"\n",
    "vlan = 100\n",
    "mtu = 1\n",
    "via = \"10.0.0.254\"\n",
    "blackhole = true\n",
    "workers = []\n",
    "é",
    "\u{0}",
    "\r",
    "\t",
];

#[derive(Debug, Clone)]
enum Edit {
    Delete { at: usize, len: usize },
    Insert { at: usize, snippet: usize },
    Replace { at: usize, c: char },
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), 1usize..40).prop_map(|(at, len)| Edit::Delete { at, len }),
        (any::<usize>(), 0..SNIPPETS.len()).prop_map(|(at, snippet)| Edit::Insert { at, snippet }),
        (any::<usize>(), any::<char>()).prop_map(|(at, c)| Edit::Replace { at, c }),
    ]
}

fn apply(text: &str, edits: &[Edit]) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    for e in edits {
        let n = chars.len().max(1);
        match *e {
            Edit::Delete { at, len } => {
                let at = at % n;
                let end = (at + len).min(chars.len());
                if at < end {
                    chars.drain(at..end);
                }
            }
            Edit::Insert { at, snippet } => {
                let at = at % (chars.len() + 1);
                chars.splice(at..at, SNIPPETS[snippet].chars());
            }
            Edit::Replace { at, c } => {
                if !chars.is_empty() {
                    let at = at % chars.len();
                    chars[at] = c;
                }
            }
        }
    }
    chars.into_iter().collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_strings(text in any::<String>()) {
        let _ = Config::from_toml_str(&text, Path::new("/nonexistent"));
    }

    #[test]
    fn arbitrary_tomlish_strings(text in "([a-z_\\.\\[\\]\"=#0-9:/ \n-]){0,300}") {
        let _ = Config::from_toml_str(&text, Path::new("/nonexistent"));
    }

    #[test]
    fn mutated_example(edits in prop::collection::vec(edit(), 1..6)) {
        let dir = example_dir();
        let text = apply(EXAMPLE, &edits);
        if let Err(errs) = Config::from_toml_str_with_cores(&text, &dir, 1) {
            // An error list is never empty and each one names a key.
            prop_assert!(!errs.0.is_empty());
            for e in &errs.0 {
                prop_assert!(!e.key.is_empty(), "{}", e);
            }
            prop_assert_eq!(errs.to_string().lines().count(), errs.0.len());
        }
    }

    #[test]
    fn mutated_routes_file(edits in prop::collection::vec(edit(), 1..8)) {
        let _ = parse_routes(&apply(EXAMPLE_ROUTES_FILE, &edits));
    }

    #[test]
    fn arbitrary_routes_files(text in any::<String>()) {
        let _ = parse_routes(&text);
        let _ = vrhost_config::parse_prefix(&text);
        let _ = text.parse::<IfAddr>();
        let _ = vrhost_config::parse_mac(&text);
    }

    /// Every valid prefix prints as something that parses back to it.
    #[test]
    fn prefixes_round_trip(bits in any::<u128>(), len in 0u8..=128, v4 in any::<bool>()) {
        let (addr, len) = if v4 {
            (std::net::IpAddr::V4((bits as u32).into()), len % 33)
        } else {
            (std::net::IpAddr::V6(bits.into()), len)
        };
        let net = IpPrefix::new_truncating(addr, len).unwrap();
        prop_assert!(net.contains(&addr));
        prop_assert_eq!(vrhost_config::parse_prefix(&net.to_string()).unwrap(), net);
        let routes = parse_routes(&format!("{net} blackhole\n")).unwrap();
        prop_assert_eq!(routes[0].prefix, net);
    }
}
