#!/usr/bin/env python3
"""A port P such that P .. P+N-1 are all free on 127.0.0.1 (a cluster's HAProxy, replicas and
PostgreSQL on consecutive ports), for the cluster tests. Prints P; importable as free_base(N).

The ports are drawn below the kernel's ephemeral range (net.ipv4.ip_local_port_range): a port
found free there can still be taken, before the cluster binds it, as the source port of an
outgoing connection (a replica's connection to PostgreSQL, a client of a test running beside
this one), and HAProxy then fails to bind. Below that range only listeners take ports.

  python3 scripts/free_ports.py N
"""
import random
import socket
import sys


def ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_base(count):
    low, high = 10000, min(ephemeral_low(), 65536) - count
    if high <= low:
        low, high = 1024, 65536 - count  # the ephemeral range starts low: draw from anywhere
    for _ in range(200):
        base = random.randint(low, high - 1)
        socks = []
        try:
            for p in range(base, base + count):
                s = socket.socket()
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind(("127.0.0.1", p))
                socks.append(s)
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free ports")


if __name__ == "__main__":
    print(free_base(int(sys.argv[1])))
