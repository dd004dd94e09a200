//! Routes files: bulk static routes kept outside the TOML file.
//!
//! ```text
//! # PREFIX            VIA
//! 0.0.0.0/0           10.0.0.254
//! 198.51.100.0/24     10.0.0.253      # a comment may follow a route
//! 192.0.2.0/24        10.0.0.253 10.0.0.254     # multipath, equal shares
//! 100.64.0.0/10       10.0.0.253 10.0.0.254*3   # weights: 1 and 3
//! 203.0.113.0/24      blackhole       # drop silently
//! 2001:db8:dead::/48  unreachable     # drop, answer ICMPv6 unreachable
//! ```
//!
//! One route per line: a prefix with its length and host bits zero, then
//! whitespace, then one or more next-hop addresses (each optionally
//! `*WEIGHT`, 1-65535, default 1; several make a multipath route) or the
//! word `blackhole` or `unreachable`. `#` starts a comment; blank lines are
//! ignored. Lines are numbered from 1 in errors.
//!
//! A full Internet table has about a million lines, so the scanner does no
//! allocation per valid line and no regex: it splits on ASCII whitespace and
//! hands the two fields to the std address parsers.

use std::net::IpAddr;

use crate::addr::{parse_ip_addr, parse_prefix, shown, IpPrefix};
use crate::config::{Path, Paths, Route, RouteTarget};

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
        each(i + 1, parse_line(prefix, fields.next(), fields));
    }
}

fn parse_line<'a>(
    prefix: &str,
    via: Option<&'a str>,
    more: impl Iterator<Item = &'a str>,
) -> Result<Route, String> {
    let Some(via) = via else {
        return Err(format!(
            "{} has no next hop; write PREFIX VIA, VIA being an address, 'blackhole' or 'unreachable'",
            shown(prefix)
        ));
    };
    let prefix = parse_prefix(prefix).map_err(|e| e.to_string())?;
    let mut more = more.peekable();
    let target = match via {
        "blackhole" | "unreachable" => {
            if let Some(extra) = more.next() {
                return Err(format!(
                    "unexpected {} after {via}; a drop route has no next hop",
                    shown(extra)
                ));
            }
            if via == "blackhole" {
                RouteTarget::Blackhole
            } else {
                RouteTarget::Unreachable
            }
        }
        // The common line: one address, no weight, no allocation.
        addr if more.peek().is_none() && !addr.contains('*') => {
            let addr = parse_via(&prefix, addr)?;
            RouteTarget::Via(addr)
        }
        first => {
            let paths = std::iter::once(first)
                .chain(more)
                .map(|field| {
                    let (addr, weight) = match field.split_once('*') {
                        Some((a, w)) => (a, parse_weight(w)?),
                        None => (field, 1),
                    };
                    Ok(Path {
                        via: parse_via(&prefix, addr)?,
                        weight,
                    })
                })
                .collect::<Result<Vec<_>, String>>()?;
            Paths::target(paths).map_err(|e| e.to_string())?
        }
    };
    Ok(Route { prefix, target })
}

/// One next-hop address of a line, of the prefix's family.
fn parse_via(prefix: &IpPrefix, addr: &str) -> Result<IpAddr, String> {
    let addr = parse_ip_addr(addr).map_err(|_| {
        format!(
            "next hop {} is not an address, 'blackhole' or 'unreachable'",
            shown(addr)
        )
    })?;
    match family_problem(prefix, &addr) {
        Some(problem) => Err(problem),
        None => Ok(addr),
    }
}

/// The weight after `ADDR*`: 1-65535.
fn parse_weight(w: &str) -> Result<u16, String> {
    match w.parse::<u16>() {
        Ok(w) if w > 0 => Ok(w),
        _ => Err(format!(
            "weight {} is not a whole number from 1 to 65535",
            shown(w)
        )),
    }
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
            assert_eq!(
                parse_routes(&r.to_string()).unwrap(),
                std::slice::from_ref(r)
            );
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
        assert!(reason(4).contains("next hop \"extra\" is not an address"));
        assert!(reason(5).contains("did you mean 10.3.0.0/16?"));
        assert!(reason(6).contains("out of range"));
        assert!(reason(7).contains("\"nowhere\" is not an address"));
        assert!(reason(8).contains("is IPv6 but prefix 10.6.0.0/16 is IPv4"));
        assert_eq!(reason(9), "duplicate prefix 10.0.0.0/8; also at line 1");
        assert!(reason(10).contains("\"banana\" is not an IP address"));
    }

    #[test]
    fn several_next_hops_make_a_multipath_route() {
        let routes = parse_routes(
            "192.0.2.0/24 10.0.0.3 10.0.0.2\n\
             198.51.100.0/24 10.0.0.2*1 10.0.0.3*3\n\
             2001:db8::/32 fe80::2 fe80::1\n\
             203.0.113.0/24 10.0.0.2*1\n",
        )
        .unwrap();
        let path = |a: &str, weight| Path {
            via: a.parse().unwrap(),
            weight,
        };
        assert_eq!(
            routes[0].target,
            Paths::target([path("10.0.0.2", 1), path("10.0.0.3", 1)]).unwrap()
        );
        assert_eq!(
            routes[1].target.paths().collect::<Vec<_>>(),
            [path("10.0.0.2", 1), path("10.0.0.3", 3)]
        );
        assert_eq!(routes[2].target.paths().count(), 2);
        // One next hop with a weight is a plain route.
        assert_eq!(
            routes[3].target,
            RouteTarget::Via("10.0.0.2".parse().unwrap())
        );
        for r in &routes {
            assert_eq!(
                parse_routes(&r.to_string()).unwrap(),
                std::slice::from_ref(r)
            );
        }
        let errors = parse_routes(
            "10.0.0.0/8 10.0.0.2 10.0.0.2\n\
             10.1.0.0/16 10.0.0.2*0 10.0.0.3\n\
             10.2.0.0/16 10.0.0.2 2001:db8::1\n\
             10.3.0.0/16 blackhole 10.0.0.2\n\
             10.4.0.0/16 10.0.0.2*x\n",
        )
        .unwrap_err();
        let reasons: Vec<&str> = errors.iter().map(|e| e.reason.as_str()).collect();
        assert!(reasons[0].contains("given twice"), "{reasons:?}");
        assert!(reasons[1].contains("weight \"0\""), "{reasons:?}");
        assert!(reasons[2].contains("is IPv6 but prefix"), "{reasons:?}");
        assert!(
            reasons[3].contains("a drop route has no next hop"),
            "{reasons:?}"
        );
        assert!(reasons[4].contains("weight \"x\""), "{reasons:?}");
        let many: String = (1..=65).map(|i| format!(" 10.0.1.{i}")).collect();
        let errors = parse_routes(&format!("10.9.0.0/16{many}\n")).unwrap_err();
        assert!(
            errors[0].reason.contains("65 next hops; at most 64"),
            "{errors:?}"
        );
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
