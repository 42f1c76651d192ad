"""A TCP forwarder that counts what crosses it: bytes each way and round trips.

A round trip is a turn of the conversation: bytes from the client, then an answer from the server.
Put one in front of an sshd and a client's cost per poll, as the network sees it, can be read off.
"""

from __future__ import annotations

import select
import socket
import threading


class TcpMeter:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1"):
        self.target = (target_host, target_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.up = self.down = self.round_trips = 0
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def reset(self) -> None:
        with self.lock:
            self.up = self.down = self.round_trips = 0

    def snapshot(self) -> tuple[int, int, int]:
        with self.lock:
            return self.up, self.down, self.round_trips

    def close(self) -> None:
        self._closed = True
        self.listener.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()

    def _pump(self, client: socket.socket, server: socket.socket) -> None:
        asked = False  # the client spoke since the server last did
        try:
            while True:
                ready, _, _ = select.select([client, server], [], [], 1.0)
                if self._closed:
                    return
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    other = server if sock is client else client
                    other.sendall(data)
                    with self.lock:
                        if sock is client:
                            self.up += len(data)
                            asked = True
                        else:
                            self.down += len(data)
                            if asked:
                                self.round_trips += 1
                                asked = False
        except OSError:
            return
        finally:
            client.close()
            server.close()
