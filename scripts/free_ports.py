#!/usr/bin/env python3
"""A port P such that P .. P+N-1 are all free on 127.0.0.1 (a cluster's HAProxy, replicas and
PostgreSQL on consecutive ports), for the cluster tests. Prints P; importable as free_base(N).

  python3 scripts/free_ports.py N
"""
import random
import socket
import sys


def free_base(count):
    for _ in range(200):
        base = random.randint(20000, 50000)
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
