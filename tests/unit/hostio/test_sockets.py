# ruff: noqa: E501  (lines as the kernel prints them)
"""/proc/net/tcp{,6} as the kernel prints it: who made each socket.

net/ipv4/tcp_ipv4.c, tcp4_seq_show() prints the header
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode"
and get_tcp4_sock() each socket as
    "%4d: %08X:%04X %08X:%04X %02X %08X:%08X %02X:%08lX %08X %5u %8d %lu %d %pK ..."
    i, src, srcp, dest, destp, state, ..., from_kuid_munged(seq_user_ns(f), sock_i_uid(sk)),
    icsk->icsk_probes_out, sock_i_ino(sk), ...
(src and dest the __be32 address printed as a native integer, the ports in host order);
net/ipv6/tcp_ipv6.c prints the address as four such words. Lines below are this format
on little-endian x86."""

from __future__ import annotations

import ipaddress

from guardian.hostio.sockets import LISTEN, parse_tcp_table

V4 = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:24D8 00000000:0000 0A 00000000:00000000 00:00000000 00000000 65534        0 81234 1 0000000000000000 100 0 0 10 0
   1: 0100007F:24D8 0100007F:A1B2 01 00000000:00000000 00:00000000 00000000     0        0 0 1 0000000000000000 20 4 30 10 -1
"""
V6 = """  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:2A1F 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0000000000000000 100 0 0 10 0
   1: 0000000000000000FFFF00000100007F:0050 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 4243 1 0000000000000000 100 0 0 10 0
"""


def test_addresses_ports_states_and_owners() -> None:
    listen, accepted = parse_tcp_table(V4)
    assert listen.local == (ipaddress.ip_address("127.0.0.1"), 9432)
    assert (listen.state, listen.uid, listen.inode) == (LISTEN, 65534, 81234)
    assert accepted.remote == (ipaddress.ip_address("127.0.0.1"), 0xA1B2)
    assert (accepted.state, accepted.uid) == (1, 0)
    v6, mapped = parse_tcp_table(V6)
    assert v6.local == (ipaddress.ip_address("::1"), 10783) and v6.uid == 0
    # a v4-mapped address is the IPv4 address it maps
    assert mapped.local == (ipaddress.ip_address("127.0.0.1"), 80) and mapped.uid == 1000


def test_a_line_that_does_not_parse_is_skipped() -> None:
    assert parse_tcp_table(V4.splitlines()[0] + "\n   0: garbage\n") == []
