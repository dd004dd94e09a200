//! Routes files: bulk static routes kept outside the TOML file.
//!
//! ```text
//! # PREFIX            VIA
//! 0.0.0.0/0           10.0.0.254
//! 198.51.100.0/24     10.0.0.253      # a comment may follow a route
//! 203.0.113.0/24      blackhole       # drop silently
//! 2001:db8:dead::/48  unreachable     # drop, answer ICMPv6 unreachable
//! ```
//!
//! One route per line: a prefix with its length and host bits zero, then
//! whitespace, then a next-hop address or the word `blackhole` or
//! `unreachable`. `#` starts a comment; blank lines are ignored. Lines are
//! numbered from 1 in errors.
//!
//! A full Internet table has about a million lines, so the scanner does no
//! allocation per valid line and no regex: it splits on ASCII whitespace and
//! hands the two fields to the std address parsers.

use std::net::IpAddr;

use crate::addr::{parse_ip_addr, parse_prefix, shown, IpPrefix};
use crate::config::{Route, RouteTarget};

/// One bad line of a routes file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineError {
    /// Line number, from 1.
    pub line: usize,
    /// What is wrong with it.
    pub reason: String,
}

impl std::fmt::Display for LineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.reason)
    }
}

/// Parses a routes file on its own: format, address families and duplicate
/// prefixes. Whether each next hop is on one of a router's subnets is
/// checked when the file is loaded as part of a config.
///
/// # Errors
/// Every bad line, in order.
pub fn parse_routes(text: &str) -> Result<Vec<Route>, Vec<LineError>> {
    let mut routes = Vec::new();
    let mut lines = Vec::new();
    let mut errors = Vec::new();
    scan(text, |line, parsed| match parsed {
        Ok(route) => {
            routes.push(route);
            lines.push(line);
        }
        Err(reason) => errors.push(LineError { line, reason }),
    });
    for (i, first) in duplicates(&routes) {
        errors.push(LineError {
            line: lines[i],
            reason: format!(
                "duplicate prefix {}; also at line {}",
                routes[i].prefix, lines[first]
            ),
        });
    }
    if errors.is_empty() {
        Ok(routes)
    } else {
        errors.sort_by_key(|e| e.line);
        Err(errors)
    }
}

/// Calls `each` with the 1-based line number and the parsed route, or why it
/// is not one, for every non-blank, non-comment line. The route's next hop
/// has the prefix's family.
pub(crate) fn scan(text: &str, mut each: impl FnMut(usize, Result<Route, String>)) {
    for (i, line) in text.lines().enumerate() {
        let content = match line.find('#') {
            Some(at) => &line[..at],
            None => line,
        };
        let mut fields = content.split_ascii_whitespace();
        let Some(prefix) = fields.next() else {
            continue;
        };
        each(i + 1, parse_line(prefix, fields.next(), fields.next()));
    }
}

fn parse_line(prefix: &str, via: Option<&str>, extra: Option<&str>) -> Result<Route, String> {
    let Some(via) = via else {
        return Err(format!(
            "{} has no next hop; write PREFIX VIA, VIA being an address, 'blackhole' or 'unreachable'",
            shown(prefix)
        ));
    };
    if let Some(extra) = extra {
        return Err(format!(
            "unexpected {} after the next hop; write one PREFIX VIA per line",
            shown(extra)
        ));
    }
    let prefix = parse_prefix(prefix).map_err(|e| e.to_string())?;
    let target = match via {
        "blackhole" => RouteTarget::Blackhole,
        "unreachable" => RouteTarget::Unreachable,
        addr => {
            let addr = parse_ip_addr(addr).map_err(|_| {
                format!(
                    "next hop {} is not an address, 'blackhole' or 'unreachable'",
                    shown(addr)
                )
            })?;
            if let Some(problem) = family_problem(&prefix, &addr) {
                return Err(problem);
            }
            RouteTarget::Via(addr)
        }
    };
    Ok(Route { prefix, target })
}

/// Why `via` cannot be a next hop for `prefix` on address family grounds,
/// if it cannot: this forwarding engine resolves IPv4 next hops with ARP and
/// IPv6 ones with ND, so a route's next hop has its prefix's family.
pub(crate) fn family_problem(prefix: &IpPrefix, via: &IpAddr) -> Option<String> {
    match (prefix.is_ipv4(), via.is_ipv4()) {
        (true, false) => Some(format!(
            "next hop {via} is IPv6 but prefix {prefix} is IPv4; use an IPv4 next hop"
        )),
        (false, true) => Some(format!(
            "next hop {via} is IPv4 but prefix {prefix} is IPv6; use an IPv6 next hop"
        )),
        _ => None,
    }
}

/// Every route whose prefix an earlier route already has, as
/// `(index, index of the first route with that prefix)`, in index order.
///
/// Sorting finds them with mostly sequential memory access: about 70 ms
/// for a million shuffled prefixes. A hash map keyed by prefix outgrows the
/// caches and pays a miss per insert: it made a million-line file load in
/// 0.4–0.8 s (by hash function), against 0.33 s this way (release build,
/// `a_million_line_routes_file_loads_fast`).
pub(crate) fn duplicates(routes: &[Route]) -> Vec<(usize, usize)> {
    let mut keys: Vec<(IpPrefix, usize)> = routes
        .iter()
        .enumerate()
        .map(|(i, r)| (r.prefix, i))
        .collect();
    keys.sort_unstable();
    let mut dups = Vec::new();
    for group in keys.chunk_by(|a, b| a.0 == b.0) {
        // Sorted by (prefix, index): the group's first is the earliest.
        let first = group[0].1;
        dups.extend(group[1..].iter().map(|&(_, i)| (i, first)));
    }
    dups.sort_unstable();
    dups
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(prefix: &str, target: RouteTarget) -> Route {
        Route {
            prefix: prefix.parse().unwrap(),
            target,
        }
    }

    #[test]
    fn parses_every_form() {
        let text = "# full-line comment\n\
                    \n\
                    0.0.0.0/0 10.0.0.254\n\
                    \t198.51.100.0/24\t\t10.0.0.253   # trailing comment\r\n\
                    203.0.113.0/24 blackhole\n\
                    2001:db8:dead::/48 unreachable\n\
                    ::/0 fe80::1\n   \n#";
        let routes = parse_routes(text).unwrap();
        assert_eq!(
            routes,
            [
                route("0.0.0.0/0", RouteTarget::Via("10.0.0.254".parse().unwrap())),
                route(
                    "198.51.100.0/24",
                    RouteTarget::Via("10.0.0.253".parse().unwrap())
                ),
                route("203.0.113.0/24", RouteTarget::Blackhole),
                route("2001:db8:dead::/48", RouteTarget::Unreachable),
                route("::/0", RouteTarget::Via("fe80::1".parse().unwrap())),
            ]
        );
        for r in &routes {
            assert_eq!(parse_routes(&r.to_string()).unwrap(), [*r]);
        }
    }

    #[test]
    fn errors_carry_line_numbers() {
        let text = "10.0.0.0/8 10.0.0.1\n\
                    # ok\n\
                    10.1.0.0/16\n\
                    10.2.0.0/16 10.0.0.1 extra\n\
                    10.3.0.1/16 10.0.0.1\n\
                    10.4.0.0/33 blackhole\n\
                    10.5.0.0/16 nowhere\n\
                    10.6.0.0/16 2001:db8::1\n\
                    10.0.0.0/8 blackhole\n\
                    banana blackhole\n";
        let errors = parse_routes(text).unwrap_err();
        let lines: Vec<_> = errors.iter().map(|e| e.line).collect();
        assert_eq!(lines, [3, 4, 5, 6, 7, 8, 9, 10]);
        let reason = |line: usize| &errors.iter().find(|e| e.line == line).unwrap().reason;
        assert!(reason(3).contains("has no next hop"));
        assert!(reason(4).contains("unexpected \"extra\""));
        assert!(reason(5).contains("did you mean 10.3.0.0/16?"));
        assert!(reason(6).contains("out of range"));
        assert!(reason(7).contains("\"nowhere\" is not an address"));
        assert!(reason(8).contains("is IPv6 but prefix 10.6.0.0/16 is IPv4"));
        assert_eq!(reason(9), "duplicate prefix 10.0.0.0/8; also at line 1");
        assert!(reason(10).contains("\"banana\" is not an IP address"));
    }

    #[test]
    fn words_are_case_sensitive_and_whole() {
        assert!(parse_routes("10.0.0.0/8 Blackhole").is_err());
        assert!(parse_routes("10.0.0.0/8 blackholes").is_err());
    }

    #[test]
    fn empty_and_comment_only_files_have_no_routes() {
        assert_eq!(parse_routes("").unwrap(), []);
        assert_eq!(parse_routes("# nothing\n\n   # here\n").unwrap(), []);
    }
}
