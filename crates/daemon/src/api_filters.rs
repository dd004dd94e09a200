//! The API's rule lists ([`vrhost_api::types::Filters`]) and the data
//! plane's ([`vrhost_dataplane::FilterSpec`]), both ways.

use std::sync::Arc;

use vrhost_api::types::{
    Filter as ApiFilter, FilterAction, FilterRule, Filters, InterfaceFilters, PortsValue, Prefix,
    ProtocolValue,
};
use vrhost_api::ApiError;
use vrhost_dataplane::filter::{protocol_name, protocol_number};
use vrhost_dataplane::{Action, Filter, FilterSpec, IfaceFilters, PortRange, Rule};
use vrhost_fib::IpPrefix;

/// A VR's lists, and the interfaces named with the lists they apply.
pub(crate) type Specs = (Vec<FilterSpec>, Vec<(String, IfaceFilters)>);

fn bad(field: String, message: impl Into<String>) -> ApiError {
    ApiError::BadRequest {
        field,
        message: message.into(),
    }
}

/// The data plane's lists and interface assignments for `f`; each error
/// names its field (`filter[0].rule[2].dst_port`). Counters in the body
/// (`hits`, `default_hits`, as `GET` lists them) are ignored.
pub(crate) fn specs(f: &Filters) -> Result<Specs, ApiError> {
    // The limits first: the checks below cost the lists squared.
    let rules: usize = f.filter.iter().map(|l| l.rule.len()).sum();
    if !vrhost_dataplane::filter::within_limits(f.filter.len(), rules) {
        return Err(bad(
            "filter".into(),
            vrhost_dataplane::filter::limits_message(f.filter.len(), rules),
        ));
    }
    let mut lists = Vec::with_capacity(f.filter.len());
    for (k, list) in f.filter.iter().enumerate() {
        if list.name.is_empty() {
            return Err(bad(format!("filter[{k}].name"), "must not be empty"));
        }
        if let Some(j) = f.filter[..k].iter().position(|o| o.name == list.name) {
            return Err(bad(
                format!("filter[{k}].name"),
                format!("{:?} is filter[{j}]'s name too", list.name),
            ));
        }
        let mut rules = Vec::with_capacity(list.rule.len());
        for (i, r) in list.rule.iter().enumerate() {
            rules.push(rule(r, &format!("filter[{k}].rule[{i}]"))?);
        }
        let spec = FilterSpec {
            name: list.name.clone(),
            default: action(list.default),
            rules,
        };
        spec.check()
            .map_err(|e| bad(format!("filter[{k}]"), e.to_string()))?;
        lists.push(spec);
    }
    let applied = f
        .interface
        .iter()
        .map(|i| {
            (
                i.name.clone(),
                IfaceFilters {
                    input: i.filter_in.clone(),
                    output: i.filter_out.clone(),
                },
            )
        })
        .collect();
    Ok((lists, applied))
}

fn action(a: FilterAction) -> Action {
    match a {
        FilterAction::Permit => Action::Permit,
        FilterAction::Deny => Action::Deny,
    }
}

fn rule(r: &FilterRule, at: &str) -> Result<Rule, ApiError> {
    let field = |f: &str| format!("{at}.{f}");
    let prefix = |p: Option<Prefix>, f: &str| -> Result<Option<IpPrefix>, ApiError> {
        p.map(|p| IpPrefix::new(p.addr(), p.prefix_len()).map_err(|e| bad(field(f), e.to_string())))
            .transpose()
    };
    let ports = |p: &Option<PortsValue>, f: &str| -> Result<Option<PortRange>, ApiError> {
        match p {
            None => Ok(None),
            Some(PortsValue::One(n)) => Ok(Some(PortRange::one(*n))),
            Some(PortsValue::Range(s)) => s
                .parse()
                .map(Some)
                .map_err(|e: &str| bad(field(f), format!("{s:?}: {e}"))),
        }
    };
    let protocol = match &r.protocol {
        None => None,
        Some(ProtocolValue::Number(n)) => Some(*n),
        Some(ProtocolValue::Name(name)) => Some(protocol_number(name).ok_or_else(|| {
            bad(
                field("protocol"),
                format!("{name:?} is not a protocol name or number (0-255)"),
            )
        })?),
    };
    let rule = Rule {
        action: action(r.action),
        src: prefix(r.src, "src")?,
        dst: prefix(r.dst, "dst")?,
        protocol,
        src_port: ports(&r.src_port, "src_port")?,
        dst_port: ports(&r.dst_port, "dst_port")?,
        icmp_type: r.icmp_type,
        icmp_code: r.icmp_code,
        pcp: r.pcp,
    };
    if let Some(reason) = rule.problem() {
        return Err(bad(at.to_string(), reason));
    }
    Ok(rule)
}

/// What `GET /v1/vrs/{vr}/filters` answers: `lists` with their counters,
/// and each of `ifaces` (name, `filter_in`, `filter_out`).
pub(crate) fn listed(lists: &[Arc<Filter>], ifaces: Vec<(String, IfaceFilters)>) -> Filters {
    let filter = lists
        .iter()
        .map(|f| {
            let hits = f.hits();
            let spec = f.spec();
            ApiFilter {
                name: spec.name.clone(),
                default: match spec.default {
                    Action::Permit => FilterAction::Permit,
                    Action::Deny => FilterAction::Deny,
                },
                rule: spec
                    .rules
                    .iter()
                    .zip(&hits)
                    .map(|(r, &h)| FilterRule {
                        hits: Some(h),
                        ..api_rule(r)
                    })
                    .collect(),
                default_hits: hits.last().copied(),
            }
        })
        .collect();
    let interface = ifaces
        .into_iter()
        .map(|(name, f)| InterfaceFilters {
            name,
            filter_in: f.input,
            filter_out: f.output,
        })
        .collect();
    Filters { filter, interface }
}

fn api_rule(r: &Rule) -> FilterRule {
    let prefix = |p: Option<IpPrefix>| p.and_then(|p| Prefix::new(p.addr(), p.len()).ok());
    let ports = |p: Option<PortRange>| {
        p.map(|p| {
            if p.lo == p.hi {
                PortsValue::One(p.lo)
            } else {
                PortsValue::Range(p.to_string())
            }
        })
    };
    FilterRule {
        action: match r.action {
            Action::Permit => FilterAction::Permit,
            Action::Deny => FilterAction::Deny,
        },
        src: prefix(r.src),
        dst: prefix(r.dst),
        protocol: r.protocol.map(|p| match protocol_name(p) {
            Some(n) => ProtocolValue::Name(n.to_string()),
            None => ProtocolValue::Number(p),
        }),
        src_port: ports(r.src_port),
        dst_port: ports(r.dst_port),
        icmp_type: r.icmp_type,
        icmp_code: r.icmp_code,
        pcp: r.pcp,
        hits: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(name: String) -> ApiFilter {
        ApiFilter {
            name,
            default: FilterAction::Permit,
            rule: Vec::new(),
            default_hits: None,
        }
    }

    /// A body of more lists than a VR may have is refused here, by count,
    /// before anything costs their number squared: naming each list
    /// against the ones before it took minutes of CPU for the million
    /// lists a 16 MB body holds, and only then did the table writer refuse
    /// them.
    #[test]
    fn too_many_lists_are_refused_before_their_names_are_compared() {
        let many = Filters {
            filter: (0..=vrhost_dataplane::filter::MAX_LISTS)
                .map(|k| list(k.to_string()))
                .collect(),
            interface: Vec::new(),
        };
        let Err(ApiError::BadRequest { field, .. }) = specs(&many) else {
            panic!("refused");
        };
        assert_eq!(field, "filter");
        let few = Filters {
            filter: many.filter[1..].to_vec(),
            interface: Vec::new(),
        };
        assert!(specs(&few).is_ok());
    }
}
