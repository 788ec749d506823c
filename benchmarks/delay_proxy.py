"""A TCP proxy that adds round-trip time: each chunk waits half the added RTT in each
direction, in order. The latency harness's fallback (benchmarks/latency.py) where the
kernel has no ``tc netem``.

    .venv/bin/python benchmarks/delay_proxy.py --listen 7001 --target 127.0.0.1:6380 --rtt-ms 1

One thread, one ``select()`` loop (its timeout has microsecond resolution, where
epoll's and asyncio's round up to the millisecond), non-blocking sockets with an
output buffer each, so that a slow reader never blocks the other connections. A chunk
read at time t is written from t + RTT / 2 on; chunks of one direction keep their
order (their release times only grow). It prints ``ready <port>`` once it listens.
"""

from __future__ import annotations

import argparse
import ctypes
import heapq
import itertools
import select
import socket
import sys
import time

CHUNK = 65536


class Proxy:
    def __init__(self, listen: int, target: tuple[str, int], rtt: float) -> None:
        self.half = rtt / 2
        self.target = target
        self.server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.server.bind(("127.0.0.1", listen))
        self.server.listen(128)
        self.server.setblocking(False)
        self.port: int = self.server.getsockname()[1]
        self.peer: dict[socket.socket, socket.socket] = {}  # each end to the other
        self.out: dict[socket.socket, bytearray] = {}  # what is due, not yet written
        self.closing: set[socket.socket] = set()  # its peer closed: close once written
        # (release time, sequence, destination, data)
        self.pending: list[tuple[float, int, socket.socket, bytes]] = []
        self.sequence = itertools.count()

    def accept(self) -> None:
        client, _ = self.server.accept()
        upstream = socket.create_connection(self.target)
        for sock in (client, upstream):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setblocking(False)
            self.out[sock] = bytearray()
        self.peer[client], self.peer[upstream] = upstream, client

    def close(self, sock: socket.socket) -> None:
        peer = self.peer.pop(sock, None)
        self.out.pop(sock, None)
        self.closing.discard(sock)
        sock.close()
        if peer is not None and peer in self.peer:
            self.closing.add(peer)  # what it still has to write goes out first

    def read(self, sock: socket.socket) -> None:
        try:
            data = sock.recv(CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self.close(sock)
            return
        due = time.monotonic() + self.half
        heapq.heappush(self.pending, (due, next(self.sequence), self.peer[sock], data))

    def write(self, sock: socket.socket) -> None:
        buffer = self.out.get(sock)
        if not buffer:
            return
        try:
            sent = sock.send(buffer)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.close(sock)
            return
        del buffer[:sent]

    def release(self) -> None:
        now = time.monotonic()
        while self.pending and self.pending[0][0] <= now:
            _, _, sock, data = heapq.heappop(self.pending)
            if sock in self.out:
                self.out[sock] += data
                self.write(sock)

    def serve(self) -> None:
        while True:
            self.release()
            for sock in [s for s in self.closing if not self.out.get(s)]:
                if not any(p[2] is sock for p in self.pending):
                    self.close(sock)
            timeout = None
            if self.pending:
                timeout = max(0.0, self.pending[0][0] - time.monotonic())
            readers = [self.server, *self.peer]
            writers = [sock for sock, buffer in self.out.items() if buffer]
            readable, writable, _ = select.select(readers, writers, [], timeout)
            for sock in readable:
                if sock is self.server:
                    self.accept()
                elif sock in self.peer:
                    self.read(sock)
            for sock in writable:
                self.write(sock)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--listen", type=int, default=0, help="port on 127.0.0.1 (0: any free)")
    parser.add_argument("--target", required=True, help="HOST:PORT to forward to")
    parser.add_argument("--rtt-ms", type=float, required=True, help="added round-trip time")
    options = parser.parse_args()
    if sys.platform.startswith("linux"):  # wake within 1 us of a timeout, not 50 us
        ctypes.CDLL(None).prctl(29, 1000)  # PR_SET_TIMERSLACK, in nanoseconds
    host, port = options.target.rsplit(":", 1)
    proxy = Proxy(options.listen, (host, int(port)), options.rtt_ms / 1000)
    print(f"ready {proxy.port}", flush=True)
    proxy.serve()


if __name__ == "__main__":
    main()
