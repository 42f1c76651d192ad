"""A real IPython kernel in a child process, and everything it sends to the frontend, counted.

The kernel is the one Jupyter starts (ipykernel, through jupyter_client); a SUB
socket of our own on its IOPub channel receives each message as the frontend
would: the wire frames are what is counted, not an estimate. Widget traffic is
its comm messages (a widget's state, each update of a trait); a display is a
display_data or update_display_data message.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass

import zmq


@dataclass
class Message:
    at: float  # time.monotonic() when it arrived
    msg_type: str
    size: int  # bytes on the wire, all frames
    parent: str  # the msg_id of the request it answers
    content: dict | None  # kept only for stream and display messages


KEPT_CONTENT = ("status", "stream", "display_data", "update_display_data", "error")


class KernelMeter:
    def __init__(self, env: dict | None = None, timeout: float = 60):
        from jupyter_client import KernelManager

        self.manager = KernelManager(kernel_name="python3")
        self.manager.start_kernel(env=dict(os.environ if env is None else env))
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=timeout)
        self.client.iopub_channel.stop()  # ours reads IOPub; the client's would only pile it up
        info = self.manager.get_connection_info()
        self.socket = zmq.Context.instance().socket(zmq.SUB)
        self.socket.setsockopt(zmq.SUBSCRIBE, b"")
        self.socket.setsockopt(zmq.RCVHWM, 0)  # never drop a message on our side
        self.socket.connect(f"{info['transport']}://{info['ip']}:{info['iopub_port']}")
        self.messages: list[Message] = []
        self._closed = threading.Event()
        self._listener = threading.Thread(target=self._listen, name="kernel-meter", daemon=True)
        self._listener.start()
        self._wait_until_subscribed(timeout)

    @property
    def pid(self) -> int:
        return self.manager.provisioner.process.pid

    def _listen(self) -> None:
        poller = zmq.Poller()
        poller.register(self.socket, zmq.POLLIN)
        while not self._closed.is_set():
            if not poller.poll(100):
                continue
            frames = self.socket.recv_multipart()
            delimiter = frames.index(b"<IDS|MSG>")
            header, parent = json.loads(frames[delimiter + 2]), json.loads(frames[delimiter + 3])
            msg_type = header.get("msg_type", "")
            content = json.loads(frames[delimiter + 5]) if msg_type in KEPT_CONTENT else None
            self.messages.append(Message(time.monotonic(), msg_type, sum(map(len, frames)), parent.get("msg_id", ""), content))

    def _wait_until_subscribed(self, timeout: float) -> None:
        """A SUB socket misses what is sent before it has joined: ask until an answer reaches it."""
        deadline = time.monotonic() + timeout
        while not self.messages:
            if time.monotonic() > deadline:
                raise RuntimeError("the kernel's IOPub messages never reached the meter")
            self.run("pass", timeout=timeout)
            time.sleep(0.2)

    def execute(self, code: str) -> str:
        """Send `code` to run; its msg_id."""
        return self.client.execute(code)

    def run(self, code: str, timeout: float = 120) -> str:
        """Run `code` and wait until it has; what it printed."""
        msg_id = self.client.execute(code)
        while True:
            reply = self.client.get_shell_msg(timeout=timeout)
            if reply["parent_header"].get("msg_id") == msg_id:
                break
        if reply["content"]["status"] != "ok":
            raise RuntimeError(f"{code!r} failed in the kernel: {reply['content'].get('evalue')}")
        deadline = time.monotonic() + 10  # its output may still be on the way: it ends with "idle"
        while time.monotonic() < deadline and not any(self._idle(m, msg_id) for m in self.messages[-50:]):
            time.sleep(0.05)
        return "".join(m.content.get("text", "") for m in list(self.messages) if m.parent == msg_id and m.msg_type == "stream")

    @staticmethod
    def _idle(message: Message, msg_id: str) -> bool:
        return message.msg_type == "status" and message.parent == msg_id and message.content.get("execution_state") == "idle"

    def memory(self) -> tuple[int, int]:
        """The kernel's resident memory now and at its peak, in bytes."""
        values = {}
        with open(f"/proc/{self.pid}/status") as status:
            for line in status:
                key, _, rest = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    values[key] = int(rest.split()[0]) * 1024
        return values["VmRSS"], values["VmHWM"]

    def close(self) -> None:
        self._closed.set()
        self._listener.join(timeout=5)
        self.socket.close(linger=0)
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)


def displayed_html(message: Message) -> str:
    """The HTML a display message shows ("" for any other message)."""
    if message.msg_type not in ("display_data", "update_display_data") or not message.content:
        return ""
    return message.content.get("data", {}).get("text/html", "")
