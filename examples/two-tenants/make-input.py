#!/usr/bin/env python3
"""Writes in-down.pcap: traffic from the hosts of two tenants, red (VLAN 10) and
blue (VLAN 20), which use the same addresses. Standard library only.

Frames: per tenant an ARP request for the router, a ping to the router, UDP to
a routed destination, UDP with TTL 1, UDP to a destination with no route, and an
IPv6 UDP datagram to a routed destination."""
import struct

ROUTER_MAC = bytes.fromhex("020000000001")
HOST_MAC = bytes.fromhex("02aa00000002")


def csum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def eth(vlan: int, ethertype: int, payload: bytes, dst: bytes = ROUTER_MAC) -> bytes:
    return dst + HOST_MAC + struct.pack("!HHH", 0x8100, vlan, ethertype) + payload


def ipv4(src: str, dst: str, proto: int, ttl: int, payload: bytes) -> bytes:
    a = bytes(map(int, src.split(".")))
    b = bytes(map(int, dst.split(".")))
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), 1, 0, ttl, proto, 0, a, b)
    return hdr[:10] + struct.pack("!H", csum(hdr)) + hdr[12:] + payload


def udp(payload: bytes = b"vrhost example") -> bytes:
    return struct.pack("!HHHH", 4000, 9, 8 + len(payload), 0) + payload


def icmp_echo(seq: int) -> bytes:
    body = struct.pack("!BBHHH", 8, 0, 0, 0x1234, seq) + b"ping"
    return body[:2] + struct.pack("!H", csum(body)) + body[4:]


def arp_request(sender: str, target: str) -> bytes:
    return struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1) + HOST_MAC + bytes(map(int, sender.split("."))) \
        + b"\0" * 6 + bytes(map(int, target.split(".")))


def ipv6_udp(src: bytes, dst: bytes) -> bytes:
    payload = udp()
    return struct.pack("!IHBB", 6 << 28, len(payload), 17, 64) + src + dst + payload


def v6(s: str) -> bytes:
    import ipaddress
    return ipaddress.IPv6Address(s).packed


frames = []
for vlan in (10, 20):
    frames += [
        eth(vlan, 0x0806, arp_request("10.0.0.2", "10.0.0.1"), dst=b"\xff" * 6),
        eth(vlan, 0x0800, ipv4("10.0.0.2", "10.0.0.1", 1, 64, icmp_echo(vlan))),
        eth(vlan, 0x0800, ipv4("10.0.0.2", "192.0.2.10", 17, 64, udp())),
        eth(vlan, 0x0800, ipv4("10.0.0.2", "192.0.2.11", 17, 1, udp())),
        eth(vlan, 0x0800, ipv4("10.0.0.2", "8.8.8.8", 17, 64, udp())),
        eth(vlan, 0x86DD, ipv6_udp(v6("2001:db8::2"), v6("2001:db8:ff::10"))),
    ]

with open("in-down.pcap", "wb") as f:
    f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
    for i, frame in enumerate(frames):
        f.write(struct.pack("<IIII", 1_700_000_000, i * 1000, len(frame), len(frame)))
        f.write(frame)
print(f"wrote in-down.pcap ({len(frames)} frames)")
