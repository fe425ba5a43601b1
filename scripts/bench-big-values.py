#!/usr/bin/env python3
"""Memory around big values: Gradus vs redis-server, in one run.

    scripts/bench-big-values.py [connections] [MiB] [gradus-binary ...]   (defaults: 8 32 target/release/gradus)

Each connection, one after the other, sets the same key to a value of MiB mebibytes and reads it
back; then all of them stay idle. Prints the server's RSS (VmRSS) at start, after each
connection's SET + GET, and after 3 s idle, with INFO `used_memory` at the end, as a Markdown
table, one column per server. Servers: Gradus `--durability none --memcached-port 0`,
redis-server `--save '' --appendonly no`.
"""

import os
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONNECTIONS = int(sys.argv[1]) if len(sys.argv) > 1 else 8
MIB = int(sys.argv[2]) if len(sys.argv) > 2 else 32
BINARIES = sys.argv[3:] or [os.path.join(ROOT, "target/release/gradus")]
PORT = 7493


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    raise RuntimeError("no VmRSS")


def command(sock, *args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    sock.sendall(out)


def read_reply(sock):
    data = b""
    while b"\r\n" not in data:
        data += sock.recv(65536)
    if data[:1] != b"$":
        return data
    head, rest = data.split(b"\r\n", 1)
    need = int(head[1:]) + 2
    while len(rest) < need:
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise RuntimeError("connection closed")
        rest += chunk
    return rest[:-2]


def measure(argv):
    with tempfile.TemporaryDirectory() as d:
        proc = subprocess.Popen(argv + ["--dir", d], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(100):
                try:
                    socket.create_connection(("127.0.0.1", PORT)).close()
                    break
                except OSError:
                    time.sleep(0.1)
            rows = [("start", rss_mib(proc.pid))]
            value = b"v" * (MIB << 20)
            conns = []
            for i in range(CONNECTIONS):
                s = socket.create_connection(("127.0.0.1", PORT), timeout=60)
                conns.append(s)
                command(s, "SET", "big", value)
                assert read_reply(s) == b"+OK\r\n"
                command(s, "GET", "big")
                assert read_reply(s) == value
                rows.append((f"after connection {i + 1}", rss_mib(proc.pid)))
            time.sleep(3)
            rows.append(("idle 3 s", rss_mib(proc.pid)))
            command(conns[0], "INFO", "memory")
            info = read_reply(conns[0]).decode()
            used = next(int(l.split(":")[1]) for l in info.split("\r\n") if l.startswith("used_memory:"))
            rows.append(("used_memory (MiB)", used >> 20))
            for s in conns:
                s.close()
            return rows
        finally:
            proc.kill()
            proc.wait()


def main():
    columns = [("redis-server", ["redis-server", "--port", str(PORT), "--save", "", "--appendonly", "no"])]
    for b in BINARIES:
        columns.append((f"Gradus ({b})", [b, "--port", str(PORT), "--memcached-port", "0",
                                          "--durability", "none", "--loglevel", "warn"]))
    results = [(name, measure(argv)) for name, argv in columns]
    print(f"{CONNECTIONS} connections, each SET + GET of one {MIB} MiB value (same key); RSS in MiB\n")
    print("| moment | " + " | ".join(name for name, _ in results) + " |")
    print("|---" * (len(results) + 1) + "|")
    for i, (moment, _) in enumerate(results[0][1]):
        print(f"| {moment} | " + " | ".join(str(rows[i][1]) for _, rows in results) + " |")


if __name__ == "__main__":
    main()
