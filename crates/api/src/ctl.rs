//! `vrhost ctl`: the command-line client. It only talks to the API.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context as _};
use clap::{Args, Subcommand};
use serde::Serialize;

use crate::client::{Client, ClientError};
use crate::error::ApiError;
use crate::table;
use crate::types::{
    BulkRoutes, Filters, Gateway, IfaceAddr, InterfaceFilters, InterfaceSpec, MacAddr, Neighbor,
    Outcome, Prefix, Route, RouteTarget, UrpfMode, VlanTpid, VrSpec,
};

/// Where `vrhost ctl` looks for the API when neither `--socket` nor `--url` is given.
pub const DEFAULT_SOCKET: &str = "/run/vrhost/api.sock";

/// `vrhost ctl`: manage a running vrhost through its API.
#[derive(Args, Debug)]
pub struct CtlArgs {
    /// The API's Unix socket.
    #[arg(long, global = true, default_value = DEFAULT_SOCKET)]
    pub socket: PathBuf,
    /// The API's TCP address instead, as http://HOST:PORT (loopback only)
    /// or https://HOST:PORT.
    #[arg(long, global = true)]
    pub url: Option<String>,
    /// For an https URL: the PEM file of the CA that signed the server's
    /// certificate (default: the VRHOST_CACERT environment variable).
    #[arg(long, global = true)]
    pub cacert: Option<PathBuf>,
    /// Bearer token (default: the VRHOST_TOKEN environment variable).
    #[arg(long, global = true)]
    pub token: Option<String>,
    /// Print JSON instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: CtlCommand,
}

/// `vrhost ctl` subcommands.
#[derive(Subcommand, Debug)]
pub enum CtlCommand {
    /// List VRs.
    Vrs,
    /// Show, create or delete a VR.
    #[command(subcommand)]
    Vr(VrCommand),
    /// List, add or delete routes.
    #[command(subcommand)]
    Routes(RoutesCommand),
    /// Add or delete interfaces of a running VR (operator).
    #[command(subcommand)]
    Iface(IfaceCommand),
    /// List, add or delete interface addresses.
    #[command(subcommand)]
    Addr(AddrCommand),
    /// List, add or delete static neighbours.
    #[command(subcommand)]
    Neigh(NeighCommand),
    /// Show or replace a VR's rule lists (filters) and the interfaces
    /// that apply them.
    #[command(subcommand)]
    Filters(FiltersCommand),
    /// Counters of one VR, or of every VR the token may see.
    Counters {
        /// VR name.
        vr: Option<String>,
    },
    /// Live capture: write the frames an interface receives and sends as
    /// pcap (`--write -` to stdout: `| tcpdump -nn -r -`).
    Capture {
        /// VR name.
        vr: String,
        /// Interface name.
        iface: String,
        /// Stop after this many frames.
        #[arg(long)]
        count: Option<u64>,
        /// Only frames matching this expression (host, net, port, src/dst,
        /// tcp, udp, icmp, icmp6, ip, ip6, arp, vlan, proto; and, or, not).
        #[arg(long)]
        filter: Option<String>,
        /// Bytes kept of each frame (default 65535).
        #[arg(long)]
        snaplen: Option<u32>,
        /// Stop after this many seconds.
        #[arg(long)]
        seconds: Option<u64>,
        /// File to write, or `-` for standard output.
        #[arg(long)]
        write: PathBuf,
    },
    /// Packet trace: the next packets of a VR, each with every decision
    /// the data plane made about it and where it went.
    Trace {
        /// VR name.
        vr: String,
        /// Packets to trace (default 10, at most 1000).
        #[arg(long)]
        count: Option<u32>,
        /// Only packets that come in on this interface.
        #[arg(long)]
        iface: Option<String>,
        /// Answer after this many seconds with what was traced by then
        /// (default 10, at most 120).
        #[arg(long)]
        seconds: Option<u64>,
    },
    /// Ports and their counters (admin).
    Ports,
    /// Worker load (admin).
    Workers,
    /// Validate a whole new config and apply it atomically (admin).
    Reload {
        /// Config file (TOML).
        file: PathBuf,
    },
}

/// `vrhost ctl vr ...`.
#[derive(Subcommand, Debug)]
pub enum VrCommand {
    /// Show a VR.
    Show {
        /// VR name.
        name: String,
    },
    /// Create a VR from a TOML file: a `[[router]]` table of the config file,
    /// or the same keys at top level.
    Create {
        /// TOML file.
        #[arg(long)]
        file: PathBuf,
    },
    /// Delete a VR.
    Delete {
        /// VR name.
        name: String,
    },
}

/// `vrhost ctl routes ...`.
#[derive(Subcommand, Debug)]
pub enum RoutesCommand {
    /// List every route of a VR.
    List {
        /// VR name.
        vr: String,
    },
    /// Add a route.
    #[command(group(clap::ArgGroup::new("target").required(true).args(["via", "blackhole", "unreachable"])))]
    Add {
        /// VR name.
        vr: String,
        /// Destination prefix.
        prefix: Prefix,
        /// Next-hop address; repeat for a multipath route.
        #[arg(long)]
        via: Vec<IpAddr>,
        /// Multipath weights, one per --via, in order (default 1 each).
        #[arg(long, requires = "via")]
        weight: Vec<u16>,
        /// Drop silently.
        #[arg(long)]
        blackhole: bool,
        /// Drop and answer ICMP unreachable.
        #[arg(long)]
        unreachable: bool,
        /// Replace an existing route of the same prefix.
        #[arg(long)]
        replace: bool,
    },
    /// Delete a route.
    Del {
        /// VR name.
        vr: String,
        /// Destination prefix.
        prefix: Prefix,
        /// Succeed if it is not there.
        #[arg(long)]
        missing_ok: bool,
    },
    /// Add every route of a file, `PREFIX VIA` per line (VIA: an address,
    /// `blackhole` or `unreachable`; `#` comments), in one bulk request.
    Load {
        /// VR name.
        vr: String,
        /// Routes file.
        file: PathBuf,
        /// Replace existing routes of the same prefixes.
        #[arg(long)]
        replace: bool,
    },
}

/// `vrhost ctl iface ...`.
#[derive(Subcommand, Debug)]
pub enum IfaceCommand {
    /// Add an interface.
    Add {
        /// VR name.
        vr: String,
        /// Interface name.
        name: String,
        /// Port it attaches to.
        #[arg(long)]
        port: String,
        /// 802.1Q VLAN; untagged when absent (the outer tag with --inner-vlan).
        #[arg(long)]
        vlan: Option<u16>,
        /// QinQ: the inner VLAN under --vlan.
        #[arg(long, requires = "vlan")]
        inner_vlan: Option<u16>,
        /// TPID of the outer tag: 0x8100 or 0x88a8.
        #[arg(long, default_value = "0x8100", requires = "vlan")]
        vlan_tpid: VlanTpid,
        /// MAC; the port's when absent.
        #[arg(long)]
        mac: Option<MacAddr>,
        /// IP MTU; the port's when absent.
        #[arg(long)]
        mtu: Option<u16>,
        /// ADDRESS/LENGTH, repeatable.
        #[arg(long = "address")]
        addresses: Vec<IfaceAddr>,
        /// Reverse-path check (RFC 3704): off, loose or strict.
        #[arg(long, default_value = "off")]
        urpf: UrpfMode,
        /// The VR's rule list applied to what enters.
        #[arg(long)]
        filter_in: Option<String>,
        /// The VR's rule list applied to what is forwarded out.
        #[arg(long)]
        filter_out: Option<String>,
    },
    /// Delete an interface (refused while routes go through it).
    Del {
        /// VR name.
        vr: String,
        /// Interface name.
        name: String,
        /// Succeed if it is not there.
        #[arg(long)]
        missing_ok: bool,
    },
}

/// `vrhost ctl addr ...`.
#[derive(Subcommand, Debug)]
pub enum AddrCommand {
    /// List an interface's addresses.
    List {
        /// VR name.
        vr: String,
        /// Interface name.
        iface: String,
    },
    /// Add an address.
    Add {
        /// VR name.
        vr: String,
        /// Interface name.
        iface: String,
        /// ADDRESS/LENGTH.
        address: IfaceAddr,
    },
    /// Delete an address.
    Del {
        /// VR name.
        vr: String,
        /// Interface name.
        iface: String,
        /// ADDRESS/LENGTH.
        address: IfaceAddr,
        /// Succeed if it is not there.
        #[arg(long)]
        missing_ok: bool,
    },
}

/// `vrhost ctl filters ...`.
#[derive(Subcommand, Debug)]
pub enum FiltersCommand {
    /// Every list with its rules and what each matched, and the lists
    /// each interface applies.
    Show {
        /// VR name.
        vr: String,
    },
    /// Replace the VR's lists with those of a file, all or nothing: a TOML
    /// file of `[[filter]]` tables (the keys of the config's
    /// `[[router.filter]]`) and optional `[[interface]]` tables (`name`,
    /// `filter_in`, `filter_out`), or the same as JSON.
    Set {
        /// VR name.
        vr: String,
        /// TOML or JSON file.
        file: PathBuf,
    },
    /// Set the lists one interface applies (keeping the VR's lists).
    Apply {
        /// VR name.
        vr: String,
        /// Interface name.
        iface: String,
        /// The list for what enters; none when absent.
        #[arg(long = "in")]
        input: Option<String>,
        /// The list for what is forwarded out; none when absent.
        #[arg(long = "out")]
        output: Option<String>,
    },
}

/// Reads a filters file: JSON when it starts with `{`, else TOML.
pub fn parse_filters_file(text: &str) -> anyhow::Result<Filters> {
    if text.trim_start().starts_with('{') {
        Ok(serde_json::from_str(text)?)
    } else {
        Ok(toml::from_str(text)?)
    }
}

/// `vrhost ctl neigh ...`.
#[derive(Subcommand, Debug)]
pub enum NeighCommand {
    /// List static neighbours.
    List {
        /// VR name.
        vr: String,
    },
    /// Add or replace a static neighbour.
    Add {
        /// VR name.
        vr: String,
        /// IP address.
        address: IpAddr,
        /// MAC address.
        mac: MacAddr,
    },
    /// Delete a static neighbour.
    Del {
        /// VR name.
        vr: String,
        /// IP address.
        address: IpAddr,
        /// Succeed if it is not there.
        #[arg(long)]
        missing_ok: bool,
    },
}

/// Parses a routes file: `PREFIX VIA` per line, VIA an address, `blackhole`
/// or `unreachable`; `#` starts a comment. Errors name the line.
pub fn parse_routes_file(text: &str) -> Result<Vec<Route>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let fail = |m: String| format!("line {}: {m}", n + 1);
        let mut words = line.split_whitespace();
        let (Some(prefix), Some(via)) = (words.next(), words.next()) else {
            return Err(fail(format!("expected 'PREFIX VIA', got '{line}'")));
        };
        let prefix: Prefix = prefix.parse().map_err(fail)?;
        let target = match via {
            "blackhole" | "unreachable" => {
                if let Some(extra) = words.next() {
                    return Err(fail(format!("unexpected '{extra}' after {via}")));
                }
                if via == "blackhole" {
                    RouteTarget::Blackhole
                } else {
                    RouteTarget::Unreachable
                }
            }
            first => {
                let g = std::iter::once(first)
                    .chain(words)
                    .map(|w| {
                        let (addr, weight) = match w.split_once('*') {
                            Some((a, w)) => (a, w.parse().ok().filter(|&w: &u16| w > 0)),
                            None => (w, Some(1)),
                        };
                        let bad = || fail(format!("'{w}' is not an address (optionally ADDRESS*WEIGHT, 1-65535), 'blackhole' or 'unreachable'"));
                        let via: IpAddr = addr.parse().map_err(|_| bad())?;
                        if via.is_ipv4() != prefix.is_ipv4() {
                            return Err(fail(format!("via {via} is not of {prefix}'s family")));
                        }
                        Ok(Gateway { via, weight: weight.ok_or_else(bad)? })
                    })
                    .collect::<Result<Vec<_>, String>>()?;
                RouteTarget::gateways(g).map_err(fail)?
            }
        };
        out.push(Route { prefix, target });
    }
    Ok(out)
}

/// Reads a VR description: a file with exactly one `[[router]]`, or the
/// router's keys at top level.
pub fn parse_vr_file(text: &str) -> anyhow::Result<VrSpec> {
    let mut doc: toml::Table = toml::from_str(text)?;
    match doc.remove("router") {
        Some(toml::Value::Array(mut routers)) if routers.len() == 1 && doc.is_empty() => {
            Ok(routers.remove(0).try_into()?)
        }
        Some(_) => bail!("the file must hold exactly one [[router]] table and nothing else"),
        None => Ok(toml::Value::Table(doc).try_into()?),
    }
}

/// A listed rule list without its counters: what a `PUT` takes back.
fn unlisted(mut f: crate::types::Filter) -> crate::types::Filter {
    f.default_hits = None;
    for r in &mut f.rule {
        r.hits = None;
    }
    f
}

fn read(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

/// What a command printed: JSON value and its table rendering.
struct Shown {
    json: serde_json::Value,
    text: String,
}

fn shown<T: Serialize>(value: &T, text: String) -> anyhow::Result<Shown> {
    Ok(Shown {
        json: serde_json::to_value(value)?,
        text,
    })
}

fn outcome_line(o: Outcome) -> String {
    let word = serde_json::to_value(o)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    format!("{word}\n")
}

fn shown_outcome(o: Outcome) -> anyhow::Result<Shown> {
    shown(&crate::types::OutcomeBody { result: o }, outcome_line(o))
}

/// Runs one command; API errors come back as `ClientError::Api`.
fn execute(client: &Client, cmd: CtlCommand) -> anyhow::Result<Result<Shown, ClientError>> {
    use CtlCommand as C;
    let r = match cmd {
        C::Vrs => client.vrs().map(|v| shown(&v, table::vrs(&v))),
        C::Vr(VrCommand::Show { name }) => {
            client.vr(&name).map(|v| shown(&v, table::vr_detail(&v)))
        }
        C::Vr(VrCommand::Create { file }) => {
            let spec =
                parse_vr_file(&read(&file)?).with_context(|| format!("{}", file.display()))?;
            client
                .create_vr(&spec)
                .map(|v| shown(&v, table::vr_detail(&v)))
        }
        C::Vr(VrCommand::Delete { name }) => client
            .delete_vr(&name)
            .map(|()| shown_outcome(Outcome::Deleted)),
        C::Routes(RoutesCommand::List { vr }) => {
            client.all_routes(&vr).map(|r| shown(&r, table::routes(&r)))
        }
        C::Routes(RoutesCommand::Add {
            vr,
            prefix,
            via,
            weight,
            blackhole,
            unreachable,
            replace,
        }) => {
            let target = match (via.is_empty(), blackhole, unreachable) {
                (false, _, _) => {
                    if !weight.is_empty() && weight.len() != via.len() {
                        bail!(
                            "{} --weight for {} --via; give one each",
                            weight.len(),
                            via.len()
                        );
                    }
                    let weights = weight.into_iter().chain(std::iter::repeat(1));
                    let g = via
                        .into_iter()
                        .zip(weights)
                        .map(|(via, weight)| Gateway { via, weight })
                        .collect();
                    RouteTarget::gateways(g).map_err(|e| anyhow::anyhow!("{prefix}: {e}"))?
                }
                (true, true, _) => RouteTarget::Blackhole,
                (true, false, true) => RouteTarget::Unreachable,
                (true, false, false) => bail!("give --via, --blackhole or --unreachable"),
            };
            client
                .add_route(&vr, &Route { prefix, target }, replace)
                .map(shown_outcome)
        }
        C::Routes(RoutesCommand::Del {
            vr,
            prefix,
            missing_ok,
        }) => client
            .delete_route(&vr, prefix, missing_ok)
            .map(shown_outcome),
        C::Routes(RoutesCommand::Load { vr, file, replace }) => {
            let add = parse_routes_file(&read(&file)?)
                .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
            let req = BulkRoutes {
                add,
                delete: Vec::new(),
                replace,
            };
            client
                .bulk_routes(&vr, &req)
                .map(|r| shown(&r, table::bulk(&r)))
        }
        C::Iface(IfaceCommand::Add {
            vr,
            name,
            port,
            vlan,
            inner_vlan,
            vlan_tpid,
            mac,
            mtu,
            addresses,
            urpf,
            filter_in,
            filter_out,
        }) => client
            .add_interface(
                &vr,
                &InterfaceSpec {
                    name,
                    port,
                    vlan,
                    inner_vlan,
                    vlan_tpid,
                    mac,
                    mtu,
                    addresses,
                    urpf,
                    filter_in,
                    filter_out,
                },
            )
            .map(shown_outcome),
        C::Filters(FiltersCommand::Show { vr }) => {
            client.filters(&vr).map(|f| shown(&f, table::filters(&f)))
        }
        C::Filters(FiltersCommand::Set { vr, file }) => {
            let body =
                parse_filters_file(&read(&file)?).with_context(|| format!("{}", file.display()))?;
            client.set_filters(&vr, &body).map(shown_outcome)
        }
        C::Filters(FiltersCommand::Apply {
            vr,
            iface,
            input,
            output,
        }) => match client.filters(&vr) {
            Err(e) => Err(e),
            Ok(now) => {
                let body = Filters {
                    filter: now.filter.into_iter().map(unlisted).collect(),
                    interface: vec![InterfaceFilters {
                        name: iface,
                        filter_in: input,
                        filter_out: output,
                    }],
                };
                client.set_filters(&vr, &body).map(shown_outcome)
            }
        },
        C::Iface(IfaceCommand::Del {
            vr,
            name,
            missing_ok,
        }) => client
            .delete_interface(&vr, &name, missing_ok)
            .map(shown_outcome),
        C::Addr(AddrCommand::List { vr, iface }) => client
            .addresses(&vr, &iface)
            .map(|a| shown(&a, table::addresses(&a))),
        C::Addr(AddrCommand::Add { vr, iface, address }) => {
            client.add_address(&vr, &iface, address).map(shown_outcome)
        }
        C::Addr(AddrCommand::Del {
            vr,
            iface,
            address,
            missing_ok,
        }) => client
            .delete_address(&vr, &iface, address, missing_ok)
            .map(shown_outcome),
        C::Neigh(NeighCommand::List { vr }) => client
            .neighbors(&vr)
            .map(|n| shown(&n, table::neighbors(&n))),
        C::Neigh(NeighCommand::Add { vr, address, mac }) => client
            .add_neighbor(
                &vr,
                &Neighbor {
                    address,
                    mac,
                    interface: None,
                },
            )
            .map(shown_outcome),
        C::Neigh(NeighCommand::Del {
            vr,
            address,
            missing_ok,
        }) => client
            .delete_neighbor(&vr, address, missing_ok)
            .map(shown_outcome),
        C::Counters { vr: Some(vr) } => client
            .vr_counters(&vr)
            .map(|c| shown(&c, table::counters(std::slice::from_ref(&c)))),
        C::Counters { vr: None } => client.counters().map(|c| shown(&c, table::counters(&c))),
        C::Trace {
            vr,
            count,
            iface,
            seconds,
        } => {
            let q = crate::types::TraceQuery {
                count,
                interface: iface,
                seconds,
            };
            client
                .trace(&vr, &q)
                .map(|r| shown(&r, crate::trace_text::render(&r)))
        }
        C::Ports => client.ports().map(|p| shown(&p, table::ports(&p))),
        // Streams rather than prints: handled in `ctl_main`.
        C::Capture { .. } => bail!("vrhost ctl capture streams; it is run by ctl_main"),
        C::Workers => client.workers().map(|w| shown(&w, table::workers(&w))),
        C::Reload { file } => client
            .reload(&read(&file)?)
            .map(|r| shown(&r, table::reload(&r))),
    };
    match r {
        Ok(shown) => Ok(Ok(shown?)),
        Err(e) => Ok(Err(e)),
    }
}

/// Runs `vrhost ctl`. Prints the result (a table, or JSON with `--json`);
/// an error the API answered is printed to stderr with exit status 1;
/// failures to reach the API are returned as errors.
pub fn ctl_main(args: CtlArgs) -> anyhow::Result<ExitCode> {
    let token = args
        .token
        .clone()
        .or_else(|| std::env::var("VRHOST_TOKEN").ok())
        .filter(|t| !t.is_empty());
    let client = match &args.url {
        Some(url) => {
            let ca = args
                .cacert
                .clone()
                .or_else(|| std::env::var_os("VRHOST_CACERT").map(PathBuf::from));
            Client::url_with_ca(url, token, ca.as_deref())?
        }
        None => Client::unix(&args.socket, token),
    };
    if let CtlCommand::Capture {
        vr,
        iface,
        count,
        filter,
        snaplen,
        seconds,
        write,
    } = &args.command
    {
        let q = crate::types::CaptureQuery {
            count: *count,
            filter: filter.clone(),
            snaplen: *snaplen,
            seconds: *seconds,
        };
        let mut out: Box<dyn std::io::Write> = if write.as_os_str() == "-" {
            Box::new(std::io::stdout().lock())
        } else {
            Box::new(
                std::fs::File::create(write)
                    .with_context(|| format!("--write {}", write.display()))?,
            )
        };
        return match client.capture(vr, iface, &q, &mut *out) {
            Ok(bytes) => {
                eprintln!("capture of {vr}/{iface} ended: {bytes} bytes of pcap written");
                Ok(ExitCode::SUCCESS)
            }
            Err(ClientError::Api(e)) => {
                print_api_error(&e);
                Ok(ExitCode::from(1))
            }
            Err(e) => Err(e.into()),
        };
    }
    match execute(&client, args.command)? {
        Ok(shown) => {
            if args.json {
                println!("{}", serde_json::to_string_pretty(&shown.json)?);
            } else {
                print!("{}", shown.text);
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(ClientError::Api(e)) => {
            if args.json {
                eprintln!("{}", serde_json::to_string_pretty(&e.body())?);
            } else {
                print_api_error(&e);
            }
            Ok(ExitCode::from(1))
        }
        Err(e @ ClientError::Io { .. }) => Err(anyhow::Error::new(e).context(
            "cannot reach the vrhost API (is `vrhost run` up, and is --socket or --url right?)",
        )),
        Err(e) => Err(e.into()),
    }
}

fn print_api_error(e: &ApiError) {
    match e {
        ApiError::Config(issues) => {
            eprintln!("error: config rejected, nothing changed:");
            for i in issues {
                eprintln!("  {}: {}", i.key, i.reason);
            }
        }
        ApiError::Unauthorized => {
            eprintln!("error: {e} (pass --token or set VRHOST_TOKEN)")
        }
        other => eprintln!("error: {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        ctl: CtlArgs,
    }

    #[test]
    fn routes_file() {
        let routes = parse_routes_file(
            "# comment\n198.51.100.0/24 10.0.0.253\n\n203.0.113.0/24 blackhole # why\n2001:db8:f00::/40 unreachable\n",
        )
        .unwrap();
        assert_eq!(routes.len(), 3);
        assert_eq!(routes[1].target, RouteTarget::Blackhole);
        let err = parse_routes_file("10.0.0.0/8 10.0.0.1\n10.0.0.1/8 10.0.0.1\n").unwrap_err();
        assert!(err.starts_with("line 2:"), "{err}");
        assert!(parse_routes_file("10.0.0.0/8\n").is_err());
        assert!(parse_routes_file("10.0.0.0/8 ::1\n").is_err());
    }

    #[test]
    fn vr_file_with_or_without_router_table() {
        let a = parse_vr_file(
            "[[router]]\nname = \"red\"\n[[router.interface]]\nname = \"r0\"\nport = \"p0\"\n",
        )
        .unwrap();
        let b =
            parse_vr_file("name = \"red\"\n[[interface]]\nname = \"r0\"\nport = \"p0\"\n").unwrap();
        assert_eq!(a, b);
        assert!(parse_vr_file("[[router]]\nname = \"a\"\n[[router]]\nname = \"b\"\n").is_err());
        assert!(parse_vr_file("name = \"red\"\nbogus = 1\n").is_err());
    }

    #[test]
    fn command_line_parses() {
        let cli = Cli::try_parse_from([
            "ctl",
            "--json",
            "routes",
            "add",
            "red",
            "10.0.0.0/8",
            "--via",
            "192.0.2.1",
        ])
        .unwrap();
        assert!(cli.ctl.json);
        assert!(matches!(
            cli.ctl.command,
            CtlCommand::Routes(RoutesCommand::Add { .. })
        ));
        // Exactly one target.
        assert!(Cli::try_parse_from(["ctl", "routes", "add", "red", "10.0.0.0/8"]).is_err());
        assert!(Cli::try_parse_from([
            "ctl",
            "routes",
            "add",
            "red",
            "10.0.0.0/8",
            "--via",
            "192.0.2.1",
            "--blackhole"
        ])
        .is_err());
        assert!(
            Cli::try_parse_from(["ctl", "routes", "add", "red", "10.0.0.1/8", "--blackhole"])
                .is_err()
        );
        let cli = Cli::try_parse_from(["ctl", "counters", "--socket", "/tmp/s"]).unwrap();
        assert_eq!(cli.ctl.socket, PathBuf::from("/tmp/s"));
    }
}
