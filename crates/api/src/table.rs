//! Human-readable tables of API results, for `vrhost ctl`.

use std::fmt::Write as _;

use crate::types::{
    BulkResult, CounterSet, FilterAction, Filters, IfaceAddr, InterfaceInfo, Neighbor, PortInfo,
    PortsValue, ProtocolValue, ReloadReport, Route, VrCounters, VrInfo, VrPolicy, WorkerInfo,
};

/// A text table: left-aligned words, right-aligned numbers.
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column headers.
    pub fn new(headers: &[&str]) -> Table {
        Table {
            headers: headers.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (missing cells are blank, extra cells ignored).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as text, one line per row, header first.
    pub fn render(&self) -> String {
        let n = self.headers.len();
        let cell = |row: &[String], i: usize| row.get(i).cloned().unwrap_or_default();
        let width: Vec<usize> = (0..n)
            .map(|i| {
                self.rows
                    .iter()
                    .map(|r| cell(r, i).chars().count())
                    .chain([self.headers[i].len()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let numeric: Vec<bool> = (0..n)
            .map(|i| {
                !self.rows.is_empty()
                    && self
                        .rows
                        .iter()
                        .all(|r| cell(r, i).parse::<f64>().is_ok() || cell(r, i) == "-")
            })
            .collect();
        let mut out = String::new();
        let mut line = |cells: Vec<String>| {
            let parts: Vec<String> = (0..n)
                .map(|i| {
                    let c = cells.get(i).cloned().unwrap_or_default();
                    if numeric[i] {
                        format!("{c:>w$}", w = width[i])
                    } else {
                        format!("{c:<w$}", w = width[i])
                    }
                })
                .collect();
            let _ = writeln!(out, "{}", parts.join("  ").trim_end());
        };
        line(self.headers.clone());
        for r in &self.rows {
            line(r.clone());
        }
        out
    }
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}

fn join(addrs: &[IfaceAddr]) -> String {
    if addrs.is_empty() {
        return "-".into();
    }
    addrs
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// `vrhost ctl vrs`.
pub fn vrs(list: &[VrInfo]) -> String {
    let mut t = Table::new(&[
        "NAME",
        "INTERFACES",
        "ROUTES4",
        "ROUTES6",
        "FIB_BYTES",
        "WEIGHT",
    ]);
    for v in list {
        t.row(vec![
            v.name.clone(),
            v.interfaces.len().to_string(),
            v.routes_v4.to_string(),
            v.routes_v6.to_string(),
            v.fib_bytes.to_string(),
            opt(v.policy.weight),
        ]);
    }
    t.render()
}

/// Interfaces of a VR.
pub fn interfaces(list: &[InterfaceInfo]) -> String {
    let mut t = Table::new(&["INTERFACE", "PORT", "VLAN", "MAC", "MTU", "ADDRESSES"]);
    for i in list {
        t.row(vec![
            i.name.clone(),
            i.port.clone(),
            // QinQ as OUTER.INNER, an 802.1ad outer tag marked.
            match (i.vlan, i.inner_vlan) {
                (Some(o), Some(n)) => format!("{o}.{n}"),
                _ => opt(i.vlan),
            } + if i.vlan_tpid.is_default() {
                ""
            } else {
                " (0x88a8)"
            },
            i.mac.to_string(),
            i.mtu.to_string(),
            join(&i.addresses),
        ]);
    }
    t.render()
}

fn policy(p: &VrPolicy) -> String {
    let v = serde_json::to_value(p).unwrap_or_default();
    let pairs: Vec<String> = v
        .as_object()
        .map(|m| m.iter().map(|(k, v)| format!("{k}={v}")).collect())
        .unwrap_or_default();
    if pairs.is_empty() {
        "-".into()
    } else {
        pairs.join(" ")
    }
}

/// `vrhost ctl vr show NAME`.
pub fn vr_detail(v: &VrInfo) -> String {
    let mut out = format!(
        "VR {}\n  routes: {} IPv4, {} IPv6, FIB {} bytes\n  policy: {}\n",
        v.name,
        v.routes_v4,
        v.routes_v6,
        v.fib_bytes,
        policy(&v.policy)
    );
    if let Some(netns) = v.control.as_ref().and_then(|c| c.netns.as_ref()) {
        let _ = writeln!(out, "  control namespace: {netns}");
    }
    out.push('\n');
    out.push_str(&interfaces(&v.interfaces));
    out
}

/// Routes.
pub fn routes(list: &[Route]) -> String {
    let mut t = Table::new(&["PREFIX", "TARGET"]);
    for r in list {
        t.row(vec![r.prefix.to_string(), r.target.to_string()]);
    }
    t.render()
}

/// An interface's addresses.
pub fn addresses(list: &[IfaceAddr]) -> String {
    let mut t = Table::new(&["ADDRESS", "SUBNET"]);
    for a in list {
        t.row(vec![a.to_string(), a.subnet().to_string()]);
    }
    t.render()
}

/// A VR's rule lists, rule by rule with what each matched, then the
/// interfaces and the lists they apply.
pub fn filters(f: &Filters) -> String {
    let mut out = String::new();
    for list in &f.filter {
        let word = |a: FilterAction| match a {
            FilterAction::Permit => "permit",
            FilterAction::Deny => "deny",
        };
        out += &format!("filter {} (default {})\n", list.name, word(list.default));
        let mut t = Table::new(&[
            "#", "ACTION", "SRC", "DST", "PROTO", "SPORT", "DPORT", "ICMP", "PCP", "HITS",
        ]);
        let any = || "-".to_string();
        let ports = |p: &Option<PortsValue>| match p {
            Some(PortsValue::One(n)) => n.to_string(),
            Some(PortsValue::Range(r)) => r.clone(),
            None => any(),
        };
        for (i, r) in list.rule.iter().enumerate() {
            let icmp = match (r.icmp_type, r.icmp_code) {
                (Some(t), Some(c)) => format!("{t}/{c}"),
                (Some(t), None) => t.to_string(),
                _ => any(),
            };
            t.row(vec![
                (i + 1).to_string(),
                word(r.action).to_string(),
                r.src.map_or_else(any, |p| p.to_string()),
                r.dst.map_or_else(any, |p| p.to_string()),
                match &r.protocol {
                    Some(ProtocolValue::Number(n)) => n.to_string(),
                    Some(ProtocolValue::Name(n)) => n.clone(),
                    None => any(),
                },
                ports(&r.src_port),
                ports(&r.dst_port),
                icmp,
                r.pcp.map_or_else(any, |p| p.to_string()),
                r.hits.map_or_else(any, |h| h.to_string()),
            ]);
        }
        t.row(vec![
            "*".into(),
            word(list.default).into(),
            any(),
            any(),
            any(),
            any(),
            any(),
            any(),
            any(),
            list.default_hits.map_or_else(any, |h| h.to_string()),
        ]);
        out += &t.render();
        out.push('\n');
    }
    let mut t = Table::new(&["INTERFACE", "FILTER_IN", "FILTER_OUT"]);
    for i in &f.interface {
        t.row(vec![
            i.name.clone(),
            opt(i.filter_in.as_ref()),
            opt(i.filter_out.as_ref()),
        ]);
    }
    out + &t.render()
}

/// Static neighbours.
pub fn neighbors(list: &[Neighbor]) -> String {
    let mut t = Table::new(&["ADDRESS", "MAC", "INTERFACE"]);
    for n in list {
        t.row(vec![
            n.address.to_string(),
            n.mac.to_string(),
            opt(n.interface.as_ref()),
        ]);
    }
    t.render()
}

fn counter_cells(name: String, c: &CounterSet) -> Vec<String> {
    let mut cells = vec![name];
    cells.extend(
        [
            c.rx_packets,
            c.rx_bytes,
            c.tx_packets,
            c.tx_bytes,
            c.forwarded,
            c.local,
            c.punted,
            c.dropped(),
        ]
        .iter()
        .map(u64::to_string),
    );
    cells
}

const COUNTER_HEADERS: [&str; 8] = [
    "RX_PKTS",
    "RX_BYTES",
    "TX_PKTS",
    "TX_BYTES",
    "FORWARDED",
    "LOCAL",
    "PUNTED",
    "DROPPED",
];

fn with_counter_headers(first: &str) -> Table {
    let mut headers = vec![first];
    headers.extend(COUNTER_HEADERS);
    Table::new(&headers)
}

fn drop_rows(t: &mut Table, name: &str, c: &CounterSet) {
    for (reason, n) in c.drops.iter().filter(|(_, n)| **n != 0) {
        t.row(vec![name.to_string(), reason.clone(), n.to_string()]);
    }
}

/// `vrhost ctl counters [VR]`: VRs and their interfaces, then each VR's
/// worker time, then drop reasons.
pub fn counters(list: &[VrCounters]) -> String {
    let mut t = with_counter_headers("VR/INTERFACE");
    let mut drops = Table::new(&["VR/INTERFACE", "DROP_REASON", "PACKETS"]);
    let mut busy = Table::new(&["VR", "BUSY_SECONDS"]);
    for vc in list {
        t.row(counter_cells(vc.vr.clone(), &vc.total));
        if let Some(ns) = vc.busy_ns {
            busy.row(vec![vc.vr.clone(), format!("{:.3}", ns as f64 / 1e9)]);
        }
        drop_rows(&mut drops, &vc.vr, &vc.total);
        for ic in &vc.interfaces {
            let name = format!("{}/{}", vc.vr, ic.name);
            t.row(counter_cells(name.clone(), &ic.counters));
            drop_rows(&mut drops, &name, &ic.counters);
        }
    }
    let mut out = t.render();
    for more in [busy, drops] {
        if !more.rows.is_empty() {
            out.push('\n');
            out.push_str(&more.render());
        }
    }
    out
}

/// `vrhost ctl ports`.
pub fn ports(list: &[PortInfo]) -> String {
    let mut t = Table::new(&["PORT", "DRIVER", "MAC", "MTU", "QUEUES"]);
    let mut c = with_counter_headers("PORT");
    let mut drops = Table::new(&["PORT", "DROP_REASON", "PACKETS"]);
    for p in list {
        t.row(vec![
            p.name.clone(),
            p.driver.clone(),
            opt(p.mac),
            p.mtu.to_string(),
            p.queues.to_string(),
        ]);
        c.row(counter_cells(p.name.clone(), &p.counters));
        drop_rows(&mut drops, &p.name, &p.counters);
    }
    let mut out = t.render();
    out.push('\n');
    out.push_str(&c.render());
    if !drops.rows.is_empty() {
        out.push('\n');
        out.push_str(&drops.render());
    }
    out
}

/// `vrhost ctl workers`.
pub fn workers(list: &[WorkerInfo]) -> String {
    let mut t = Table::new(&["WORKER", "CORE", "LOAD_%", "PACKETS"]);
    for w in list {
        t.row(vec![
            w.index.to_string(),
            opt(w.core),
            format!("{:.1}", w.load * 100.0),
            w.packets.to_string(),
        ]);
    }
    t.render()
}

/// A bulk route result.
pub fn bulk(r: &BulkResult) -> String {
    format!(
        "created {}, replaced {}, unchanged {}, deleted {}, missing {}\n",
        r.created, r.replaced, r.unchanged, r.deleted, r.missing
    )
}

/// A reload result.
pub fn reload(r: &ReloadReport) -> String {
    let list = |v: &[String]| {
        if v.is_empty() {
            "-".to_string()
        } else {
            v.join(", ")
        }
    };
    format!(
        "reloaded: created {}; deleted {}; changed {}\n",
        list(&r.created),
        list(&r.deleted),
        list(&r.changed)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_align_right_words_left() {
        let mut t = Table::new(&["NAME", "N"]);
        t.row(vec!["a".into(), "5".into()]);
        t.row(vec!["long".into(), "100".into()]);
        assert_eq!(t.render(), "NAME    N\na       5\nlong  100\n");
    }
}
