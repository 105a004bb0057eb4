"""Client-side helpers for testing the services of :mod:`verl.rewards.http_server` from the side of a
misbehaving client: raw bytes on a socket (malformed requests, slow bodies, idle connections), one or many
at once. The sandbox's and verl-agent's server tests share them."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse


def raw_exchange(url: str, data: bytes, wait: float = 0.0, read_timeout: float = 6.0) -> bytes:
    """Send raw bytes to the server at ``url`` (then keep the socket open ``wait`` s) and return what it
    answers until it closes the connection, or ``read_timeout`` s pass without a byte (the answer then ends
    with ``<client gave up waiting>``): how a test sees the limits from the side of a misbehaving client."""
    u = urlparse(url)
    with socket.create_connection((u.hostname, u.port), timeout=read_timeout) as sock:
        sock.sendall(data)
        time.sleep(wait)
        chunks = []
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            except TimeoutError:  # the server neither answered nor closed: report that distinctly
                return b"".join(chunks) + b"<client gave up waiting>"
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)


def raw_exchanges_meanwhile(url: str, requests: dict[str, bytes], meanwhile: Callable[[], Any]) -> dict[str, bytes]:
    """`raw_exchange` of each of ``requests`` on a connection of its own, all at once, while this thread
    runs ``meanwhile()`` (e.g. a well-formed request that must still be answered); returns each answer by
    name once all connections ended (or 30 s passed)."""
    answers: dict[str, bytes] = {}

    def send(name: str, data: bytes) -> None:
        answers[name] = raw_exchange(url, data)

    threads = [threading.Thread(target=send, args=item) for item in requests.items()]
    for t in threads:
        t.start()
    meanwhile()
    for t in threads:
        t.join(30)
    return answers
