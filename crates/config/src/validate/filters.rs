//! `[[router.filter]]` and its rules, and the interfaces' `filter_in` and
//! `filter_out`.

use std::collections::HashMap;

use vrhost_dataplane::filter::{
    limits_message, protocol_number, within_limits, Action, FilterSpec, PortRange, Rule,
    ICMP_PROTOCOLS, MAX_RULES, PORT_PROTOCOLS,
};
use vrhost_fib::IpPrefix;

use super::Validator;
use crate::addr::parse_prefix;
use crate::config::{IfaceFilters, Interface};
use crate::names::{name_problem, MAX_NAME};
use crate::raw::{FilterItem, Item, Ports, Protocol, RawInterface, RawRule};

impl Validator<'_, '_> {
    /// A router's rule lists; `key` is the router's `filter` key.
    pub(super) fn filters(&mut self, items: &[FilterItem], key: &str) -> Vec<FilterSpec> {
        let rules: usize = items.iter().map(|f| f.rules.len()).sum();
        if !within_limits(items.len(), rules) {
            self.err(key, limits_message(items.len(), rules));
        }
        let mut seen: HashMap<String, String> = HashMap::new();
        let mut out = Vec::with_capacity(items.len());
        for f in items {
            let head = &f.head;
            let name = match &head.raw.name {
                None => {
                    if !head.is_bad("name") {
                        self.err(
                            head.key("name"),
                            "missing; every [[router.filter]] needs a name unique in its router, \
                             e.g. name = \"edge\"",
                        );
                    }
                    String::new()
                }
                Some(n) => {
                    if let Some(problem) = name_problem(n, MAX_NAME) {
                        self.err(head.key("name"), problem);
                    } else if let Some(first) = seen.get(n) {
                        self.err(
                            head.key("name"),
                            format!("duplicate filter name \"{n}\"; {first} has it too"),
                        );
                    } else {
                        seen.insert(n.clone(), head.label.clone());
                    }
                    n.clone()
                }
            };
            let default = match head.raw.default.as_deref() {
                None => Action::Permit,
                Some(word) => word.parse().unwrap_or_else(|()| {
                    self.err(
                        head.key("default"),
                        format!(
                            "{} is neither \"permit\" nor \"deny\": what a packet no rule \
                             matches gets",
                            crate::addr::shown(word)
                        ),
                    );
                    Action::Permit
                }),
            };
            if f.rules.len() > MAX_RULES {
                self.err(
                    head.key("rule"),
                    format!(
                        "{} rules; a filter holds at most {MAX_RULES}",
                        f.rules.len()
                    ),
                );
            }
            let rules = f.rules.iter().map(|r| self.rule(r)).collect();
            out.push(FilterSpec {
                name,
                default,
                rules,
            });
        }
        out
    }

    fn rule(&mut self, item: &Item<RawRule>) -> Rule {
        let raw = &item.raw;
        let action = match raw.action.as_deref() {
            None => {
                if !item.is_bad("action") {
                    self.err(item.key("action"), "missing; \"permit\" or \"deny\"");
                }
                Action::Deny
            }
            Some(word) => word.parse().unwrap_or_else(|()| {
                self.err(
                    item.key("action"),
                    format!(
                        "{} is neither \"permit\" nor \"deny\"",
                        crate::addr::shown(word)
                    ),
                );
                Action::Deny
            }),
        };
        let mut prefix = |key: &str, v: &Option<String>| -> Option<IpPrefix> {
            let s = v.as_deref()?;
            parse_prefix(s)
                .map_err(|e| self.err(item.key(key), e.to_string()))
                .ok()
        };
        let src = prefix("src", &raw.src);
        let dst = prefix("dst", &raw.dst);
        let protocol = raw.protocol.as_ref().and_then(|p| {
            let n = match p {
                Protocol::Number(n) => u8::try_from(*n).ok(),
                Protocol::Name(name) => protocol_number(name),
            };
            if n.is_none() {
                let shown = match p {
                    Protocol::Number(n) => n.to_string(),
                    Protocol::Name(s) => crate::addr::shown(s),
                };
                self.err(
                    item.key("protocol"),
                    format!(
                        "{shown} is not a protocol: a number 0-255 or one of {}",
                        vrhost_dataplane::filter::PROTOCOL_NAMES
                            .iter()
                            .map(|(n, _)| *n)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                );
            }
            n
        });
        let mut ports = |key: &str, v: &Option<Ports>| -> Option<PortRange> {
            let r = match v.as_ref()? {
                Ports::One(n) => u16::try_from(*n)
                    .map(PortRange::one)
                    .map_err(|_| format!("{n} is not a port (0-65535)")),
                Ports::Range(s) => s
                    .parse::<PortRange>()
                    .map_err(|e| format!("{}: {e}", crate::addr::shown(s))),
            };
            r.map_err(|e| self.err(item.key(key), e)).ok()
        };
        let src_port = ports("src_port", &raw.src_port);
        let dst_port = ports("dst_port", &raw.dst_port);
        let mut small = |key: &str, v: Option<i64>, max: u8| -> Option<u8> {
            let n = v?;
            u8::try_from(n).ok().filter(|&b| b <= max).or_else(|| {
                self.err(item.key(key), format!("{n} is outside 0-{max}"));
                None
            })
        };
        let icmp_type = small("icmp_type", raw.icmp_type, 255);
        let icmp_code = small("icmp_code", raw.icmp_code, 255);
        let pcp = small("pcp", raw.pcp, 7);
        let rule = Rule {
            action,
            src,
            dst,
            protocol,
            src_port,
            dst_port,
            icmp_type,
            icmp_code,
            pcp,
        };
        // What the fields mean together, each named by its key.
        if let (Some(IpPrefix::V4(_)), Some(IpPrefix::V6(_)))
        | (Some(IpPrefix::V6(_)), Some(IpPrefix::V4(_))) = (src, dst)
        {
            self.err(
                item.key("dst"),
                "of the other family than src; a rule matches one family",
            );
        }
        let transport = protocol.is_some_and(|p| PORT_PROTOCOLS.contains(&p));
        for (key, set) in [("src_port", src_port), ("dst_port", dst_port)] {
            if set.is_some()
                && !transport
                && raw.protocol.is_some() == protocol.is_some()
                && !item.is_bad("protocol")
            {
                self.err(
                    item.key(key),
                    "ports need protocol = \"tcp\", \"udp\" or \"sctp\"",
                );
            }
        }
        let icmp = protocol.is_some_and(|p| ICMP_PROTOCOLS.contains(&p));
        if icmp_type.is_some()
            && !icmp
            && raw.protocol.is_some() == protocol.is_some()
            && !item.is_bad("protocol")
        {
            self.err(
                item.key("icmp_type"),
                "needs protocol = \"icmp\" or \"icmpv6\"",
            );
        }
        if icmp_code.is_some() && icmp_type.is_none() && raw.icmp_type.is_none() {
            self.err(item.key("icmp_code"), "needs icmp_type");
        }
        rule
    }

    /// An interface's `filter_in` and `filter_out`: names, checked against
    /// the router's lists by [`Validator::filter_references`].
    pub(super) fn iface_filters(&mut self, item: &Item<RawInterface>) -> IfaceFilters {
        let mut name = |key: &str, v: &Option<String>| -> Option<String> {
            let n = v.as_ref()?;
            if n.is_empty() {
                self.err(
                    item.key(key),
                    "must not be empty; the name of a [[router.filter]]",
                );
                return None;
            }
            Some(n.clone())
        };
        IfaceFilters {
            input: name("filter_in", &item.raw.filter_in),
            output: name("filter_out", &item.raw.filter_out),
        }
    }

    /// Each interface names only lists its router has.
    pub(super) fn filter_references(
        &mut self,
        interfaces: &[Interface],
        items: &[Item<RawInterface>],
        filters: &[FilterSpec],
    ) {
        let known = || {
            let names: Vec<String> = filters.iter().map(|f| format!("\"{}\"", f.name)).collect();
            if names.is_empty() {
                "the router has no [[router.filter]]".to_string()
            } else {
                format!("the router's filters are {}", names.join(", "))
            }
        };
        for (i, item) in interfaces.iter().zip(items) {
            for (key, name) in [
                ("filter_in", &i.filters.input),
                ("filter_out", &i.filters.output),
            ] {
                if let Some(n) = name {
                    if !filters.iter().any(|f| &f.name == n) {
                        self.err(item.key(key), format!("no filter \"{n}\"; {}", known()));
                    }
                }
            }
        }
    }
}
