//! Capture filters: the host / net / port / protocol part of tcpdump's
//! expression language (pcap-filter(7)), evaluated on the frame.
//!
//! No well-kept pure-Rust crate compiles full pcap-filter expressions (the
//! `pcap` crate needs libpcap), so this is the subset an operator reaches for:
//!
//! ```text
//! expr  = and ( ("or" | "||") and )*
//! and   = unary ( ("and" | "&&")? unary )*        juxtaposition is "and": `tcp port 179`
//! unary = ("not" | "!") unary | "(" expr ")" | prim
//! prim  = [dir] "host" ADDR | [dir] "net" PREFIX | [dir] "port" N
//!       | "tcp" | "udp" | "icmp" | "icmp6" | "ip" | "ip6" | "arp"
//!       | "vlan" [N] | "proto" N
//! dir   = "src" | "dst"
//! ```
//!
//! `host` and `net` match IPv4, IPv6 and the sender and target addresses of
//! ARP; `port` matches TCP and UDP of unfragmented (or first-fragment)
//! IPv4 and of IPv6 without extension headers. VLAN tags (0x8100, 0x88a8,
//! 0x9100) are skipped to reach the payload; `vlan N` matches any of them.

use std::net::IpAddr;

/// A parsed filter. [`Filter::all`] matches everything.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Filter(Option<Node>);

#[derive(Clone, Debug, PartialEq, Eq)]
enum Node {
    Or(Box<Node>, Box<Node>),
    And(Box<Node>, Box<Node>),
    Not(Box<Node>),
    Host(Dir, IpAddr),
    Net(Dir, IpAddr, u8),
    Port(Dir, u16),
    Proto(Proto),
    Vlan(Option<u16>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dir {
    Either,
    Src,
    Dst,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Proto {
    Ip,
    Ip6,
    Arp,
    /// An IP protocol number (of IPv4 or IPv6): tcp 6, udp 17, icmp 1,
    /// icmp6 58.
    Number(u8),
}

/// What a frame holds, as far as the filter cares.
#[derive(Default)]
struct View {
    vlans: Vec<u16>,
    ethertype: u16,
    src: Option<IpAddr>,
    dst: Option<IpAddr>,
    proto: Option<u8>,
    sport: Option<u16>,
    dport: Option<u16>,
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    b.get(at..at + 2).map(|x| u16::from_be_bytes([x[0], x[1]]))
}

fn v4(b: &[u8], at: usize) -> Option<IpAddr> {
    let x: [u8; 4] = b.get(at..at + 4)?.try_into().ok()?;
    Some(IpAddr::from(x))
}

fn v6(b: &[u8], at: usize) -> Option<IpAddr> {
    let x: [u8; 16] = b.get(at..at + 16)?.try_into().ok()?;
    Some(IpAddr::from(x))
}

impl View {
    fn of(frame: &[u8]) -> View {
        let mut v = View::default();
        let mut at = 12;
        while let Some(t) = be16(frame, at) {
            if matches!(t, 0x8100 | 0x88a8 | 0x9100) {
                if let Some(tci) = be16(frame, at + 2) {
                    v.vlans.push(tci & 0x0fff);
                }
                at += 4;
                continue;
            }
            v.ethertype = t;
            break;
        }
        let l3 = at + 2;
        let mut l4 = None;
        match v.ethertype {
            0x0800 => {
                let ihl = frame.get(l3).map_or(0, |b| usize::from(b & 0x0f) * 4);
                v.proto = frame.get(l3 + 9).copied();
                v.src = v4(frame, l3 + 12);
                v.dst = v4(frame, l3 + 16);
                let frag_offset = be16(frame, l3 + 6).map_or(0, |f| f & 0x1fff);
                if ihl >= 20 && frag_offset == 0 {
                    l4 = Some(l3 + ihl);
                }
            }
            0x86dd => {
                v.proto = frame.get(l3 + 6).copied();
                v.src = v6(frame, l3 + 8);
                v.dst = v6(frame, l3 + 24);
                l4 = Some(l3 + 40);
            }
            0x0806 => {
                // Ethernet/IPv4 ARP: sender at 14, target at 24.
                v.src = v4(frame, l3 + 14);
                v.dst = v4(frame, l3 + 24);
            }
            _ => {}
        }
        if let (Some(l4), Some(6 | 17)) = (l4, v.proto) {
            v.sport = be16(frame, l4);
            v.dport = be16(frame, l4 + 2);
        }
        v
    }
}

fn in_net(a: IpAddr, net: IpAddr, len: u8) -> bool {
    match (a, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

fn either<T: Copy>(dir: Dir, src: Option<T>, dst: Option<T>, f: impl Fn(T) -> bool) -> bool {
    let s = || src.is_some_and(&f);
    let d = || dst.is_some_and(&f);
    match dir {
        Dir::Either => s() || d(),
        Dir::Src => s(),
        Dir::Dst => d(),
    }
}

impl Node {
    fn eval(&self, v: &View) -> bool {
        match self {
            Node::Or(a, b) => a.eval(v) || b.eval(v),
            Node::And(a, b) => a.eval(v) && b.eval(v),
            Node::Not(a) => !a.eval(v),
            Node::Host(d, h) => either(*d, v.src, v.dst, |a| a == *h),
            Node::Net(d, n, l) => either(*d, v.src, v.dst, |a| in_net(a, *n, *l)),
            Node::Port(d, p) => either(*d, v.sport, v.dport, |x| x == *p),
            Node::Proto(Proto::Ip) => v.ethertype == 0x0800,
            Node::Proto(Proto::Ip6) => v.ethertype == 0x86dd,
            Node::Proto(Proto::Arp) => v.ethertype == 0x0806,
            Node::Proto(Proto::Number(n)) => v.proto == Some(*n),
            Node::Vlan(None) => !v.vlans.is_empty(),
            Node::Vlan(Some(id)) => v.vlans.contains(id),
        }
    }
}

impl Filter {
    /// Matches every frame.
    pub fn all() -> Filter {
        Filter(None)
    }

    /// Parses `expr`; the error says what was expected where.
    pub fn parse(expr: &str) -> Result<Filter, String> {
        let spaced = expr
            .replace('(', " ( ")
            .replace(')', " ) ")
            .replace("&&", " and ")
            .replace("||", " or ")
            .replace('!', " not ");
        let tokens: Vec<&str> = spaced.split_whitespace().collect();
        if tokens.is_empty() {
            return Ok(Filter::all());
        }
        let mut p = Parser { tokens, at: 0 };
        let node = p.or()?;
        if let Some(t) = p.peek() {
            return Err(format!("unexpected '{t}' at word {}", p.at + 1));
        }
        Ok(Filter(Some(node)))
    }

    /// Whether `frame` passes.
    pub fn matches(&self, frame: &[u8]) -> bool {
        match &self.0 {
            None => true,
            Some(n) => n.eval(&View::of(frame)),
        }
    }
}

struct Parser<'a> {
    tokens: Vec<&'a str>,
    at: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<&'a str> {
        self.tokens.get(self.at).copied()
    }

    fn next(&mut self) -> Option<&'a str> {
        let t = self.peek();
        self.at += 1;
        t
    }

    fn value(&mut self, what: &str) -> Result<&'a str, String> {
        self.next()
            .ok_or_else(|| format!("'{what}' needs a value at the end"))
    }

    fn or(&mut self) -> Result<Node, String> {
        let mut left = self.and()?;
        while self.peek() == Some("or") {
            self.at += 1;
            left = Node::Or(Box::new(left), Box::new(self.and()?));
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Node, String> {
        let mut left = self.unary()?;
        loop {
            match self.peek() {
                None | Some("or" | ")") => return Ok(left),
                Some("and") => self.at += 1,
                Some(_) => {}
            }
            left = Node::And(Box::new(left), Box::new(self.unary()?));
        }
    }

    fn unary(&mut self) -> Result<Node, String> {
        match self.next() {
            Some("not") => Ok(Node::Not(Box::new(self.unary()?))),
            Some("(") => {
                let n = self.or()?;
                match self.next() {
                    Some(")") => Ok(n),
                    _ => Err("a '(' without its ')'".into()),
                }
            }
            Some(_) => {
                self.at -= 1;
                self.prim()
            }
            None => Err("an expression ends where a term was expected".into()),
        }
    }

    fn prim(&mut self) -> Result<Node, String> {
        let Some(word) = self.next() else {
            return Err("a term was expected".into());
        };
        let (dir, word) = match word {
            "src" => (Dir::Src, self.value("src")?),
            "dst" => (Dir::Dst, self.value("dst")?),
            w => (Dir::Either, w),
        };
        let node = match word {
            "host" => {
                let v = self.value("host")?;
                Node::Host(
                    dir,
                    v.parse()
                        .map_err(|_| format!("host '{v}' is not an IP address"))?,
                )
            }
            "net" => {
                let v = self.value("net")?;
                let (a, l) = v
                    .split_once('/')
                    .ok_or_else(|| format!("net '{v}': expected ADDRESS/LENGTH"))?;
                let addr: IpAddr = a.parse().map_err(|_| format!("net '{v}': bad address"))?;
                let len: u8 = l.parse().map_err(|_| format!("net '{v}': bad length"))?;
                let max = if addr.is_ipv4() { 32 } else { 128 };
                if len > max {
                    return Err(format!("net '{v}': length over {max}"));
                }
                Node::Net(dir, addr, len)
            }
            "port" => {
                let v = self.value("port")?;
                Node::Port(
                    dir,
                    v.parse()
                        .map_err(|_| format!("port '{v}' is not 0..65535"))?,
                )
            }
            _ if dir != Dir::Either => {
                return Err(format!(
                    "'src'/'dst' go before host, net or port, not '{word}'"
                ))
            }
            "tcp" => Node::Proto(Proto::Number(6)),
            "udp" => Node::Proto(Proto::Number(17)),
            "icmp" => Node::Proto(Proto::Number(1)),
            "icmp6" => Node::Proto(Proto::Number(58)),
            "ip" => Node::Proto(Proto::Ip),
            "ip6" => Node::Proto(Proto::Ip6),
            "arp" => Node::Proto(Proto::Arp),
            "proto" => {
                let v = self.value("proto")?;
                Node::Proto(Proto::Number(
                    v.parse()
                        .map_err(|_| format!("proto '{v}' is not 0..255"))?,
                ))
            }
            "vlan" => match self.peek().and_then(|t| t.parse::<u16>().ok()) {
                Some(id) if id < 4096 => {
                    self.at += 1;
                    Node::Vlan(Some(id))
                }
                _ => Node::Vlan(None),
            },
            other => {
                return Err(format!(
                    "unknown word '{other}'; expected host, net, port, src, dst, tcp, udp, icmp, \
                     icmp6, ip, ip6, arp, vlan, proto, and, or, not or parentheses"
                ))
            }
        };
        Ok(node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Ethernet frame with an IPv4 UDP packet (optionally tagged).
    fn udp4(vlan: Option<u16>, src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        if let Some(v) = vlan {
            f.extend_from_slice(&0x8100u16.to_be_bytes());
            f.extend_from_slice(&v.to_be_bytes());
        }
        f.extend_from_slice(&0x0800u16.to_be_bytes());
        let mut ip = vec![0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0];
        ip.extend_from_slice(&src);
        ip.extend_from_slice(&dst);
        f.extend_from_slice(&ip);
        f.extend_from_slice(&sport.to_be_bytes());
        f.extend_from_slice(&dport.to_be_bytes());
        f.extend_from_slice(&[0, 8, 0, 0]);
        f
    }

    fn m(expr: &str, frame: &[u8]) -> bool {
        Filter::parse(expr)
            .unwrap_or_else(|e| panic!("{expr}: {e}"))
            .matches(frame)
    }

    #[test]
    fn terms_match_what_they_name() {
        let f = udp4(None, [10, 0, 0, 2], [198, 51, 100, 1], 4000, 53);
        assert!(m("", &f));
        assert!(m("host 10.0.0.2", &f));
        assert!(m("src host 10.0.0.2", &f));
        assert!(!m("dst host 10.0.0.2", &f));
        assert!(m("net 198.51.100.0/24", &f));
        assert!(!m("net 198.51.101.0/24", &f));
        assert!(m("udp port 53", &f));
        assert!(m("dst port 53 and src port 4000", &f));
        assert!(!m("tcp", &f));
        assert!(m("ip and not ip6 and not arp", &f));
        assert!(m("proto 17", &f));
        assert!(m("tcp or (udp and port 53)", &f));
        assert!(!m("vlan", &f));
        let t = udp4(Some(7), [10, 0, 0, 2], [198, 51, 100, 1], 4000, 53);
        assert!(m("vlan 7 and udp port 53", &t));
        assert!(!m("vlan 8", &t));
        assert!(m("vlan", &t));
    }

    #[test]
    fn bad_expressions_say_what_is_wrong() {
        for (e, says) in [
            ("host", "needs a value"),
            ("host 10.0.0.300", "not an IP address"),
            ("net 10.0.0.0", "ADDRESS/LENGTH"),
            ("net 10.0.0.0/33", "over 32"),
            ("port 70000", "0..65535"),
            ("src tcp", "before host"),
            ("(tcp", "without its ')'"),
            ("tcp )", "unexpected ')'"),
            ("frobnicate", "unknown word 'frobnicate'"),
            ("tcp and", "expression ends"),
        ] {
            let err = Filter::parse(e)
                .err()
                .unwrap_or_else(|| panic!("{e} parsed"));
            assert!(err.contains(says), "{e}: {err}");
        }
    }

    #[test]
    fn garbage_frames_never_panic() {
        let f = Filter::parse("host 10.0.0.1 or port 80 or vlan 3 or arp").unwrap();
        for len in 0..80 {
            let frame: Vec<u8> = (0..len).map(|i| (i * 37 % 251) as u8).collect();
            let _ = f.matches(&frame);
            let mut tagged = frame.clone();
            if tagged.len() > 14 {
                tagged[12] = 0x81;
                tagged[13] = 0x00;
                let _ = f.matches(&tagged);
            }
        }
    }
}
