#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""gsyncd speaks the sd_notify protocol the way gsyncd.service expects.

usage: test_sd_notify.py GSYNCD_BINARY

Plays systemd's part without systemd (which is not PID 1 on test machines):
binds the AF_UNIX datagram socket named by NOTIFY_SOCKET, starts gsyncd with
a watchdog of WATCHDOG_USEC, and checks, in order:
  READY=1 within 10 s, and by then both sockets exist (Type=notify: ready
          means clients can connect);
  WATCHDOG=1 at least once (WatchdogSec=);
  after SIGTERM: STOPPING=1 and exit status 0 within 10 s.
Every message must come from gsyncd's own pid (NotifyAccess=main).
"""

import os
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import time

READY_TIMEOUT_S = 10.0
WATCHDOG_USEC = 200000
WATCHDOG_TIMEOUT_S = 5.0
STOP_TIMEOUT_S = 10.0
UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


class NotifyListener:
    """systemd's end of NOTIFY_SOCKET: datagrams of KEY=VALUE lines."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        # Ask the kernel for the sender's credentials, as systemd does, so
        # the test can check NotifyAccess=main would accept each message.
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.seen = []

    def wait_for(self, wanted, timeout_s, proc, main_pid):
        """Returns when a message contains the line `wanted`; fails on timeout or exit."""
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                fail(f"no {wanted} within {timeout_s:.0f} s; messages so far: {self.seen}")
            if proc.poll() is not None and wanted != "STOPPING=1":
                fail(f"gsyncd exited with {proc.returncode} before {wanted}; "
                     f"messages so far: {self.seen}")
            self.sock.settimeout(min(left, 0.25))
            try:
                data, ancdata, _, _ = self.sock.recvmsg(4096, socket.CMSG_SPACE(UCRED.size))
            except socket.timeout:
                continue
            sender = None
            for level, kind, payload in ancdata:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                    sender = UCRED.unpack(payload[:UCRED.size])[0]
            lines = data.decode("utf-8", "replace").splitlines()
            self.seen.append(" | ".join(lines))
            if sender != main_pid:
                fail(f"message {lines} came from pid {sender}, not gsyncd's main pid "
                     f"{main_pid}: systemd (NotifyAccess=main) would drop it")
            if wanted in lines:
                return


def fail(message):
    print(f"FAIL: {message}")
    raise SystemExit(1)


def is_socket(path):
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except FileNotFoundError:
        return False


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    gsyncd = sys.argv[1]
    # Short directory: socket paths must stay under 108 bytes.
    tmp = tempfile.mkdtemp(prefix="gsync-sdn-", dir="/tmp")
    proc = None
    log_path = os.path.join(tmp, "gsyncd.log")
    try:
        notify = NotifyListener(os.path.join(tmp, "notify"))
        client_sock = os.path.join(tmp, "d.sock")
        admin_sock = os.path.join(tmp, "a.sock")
        # An empty config file of our own, so the host's /etc/gsync/gsyncd.toml
        # (if any) cannot change what this test sees.
        config = os.path.join(tmp, "gsyncd.toml")
        with open(config, "w") as f:
            f.write("# test_sd_notify: defaults\n")

        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("NOTIFY_", "WATCHDOG_", "LISTEN_"))}
        env["NOTIFY_SOCKET"] = notify.sock.getsockname()
        env["WATCHDOG_USEC"] = str(WATCHDOG_USEC)
        args = [gsyncd, "--config", config, "--socket", client_sock, "--admin-socket", admin_sock]
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT)

        notify.wait_for("READY=1", READY_TIMEOUT_S, proc, proc.pid)
        for path in (client_sock, admin_sock):
            if not is_socket(path):
                fail(f"READY=1 was sent but {path} is not a listening socket yet")
        print("ok: READY=1, both sockets exist")

        notify.wait_for("WATCHDOG=1", WATCHDOG_TIMEOUT_S, proc, proc.pid)
        print(f"ok: WATCHDOG=1 (WATCHDOG_USEC={WATCHDOG_USEC})")

        proc.send_signal(signal.SIGTERM)
        notify.wait_for("STOPPING=1", STOP_TIMEOUT_S, proc, proc.pid)
        try:
            rc = proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            fail(f"gsyncd still running {STOP_TIMEOUT_S:.0f} s after SIGTERM")
        if rc != 0:
            fail(f"gsyncd exited with {rc} after SIGTERM, want 0")
        print("ok: STOPPING=1, exit status 0")
        return 0
    except SystemExit:
        if os.path.exists(log_path):
            with open(log_path, "rb") as f:
                tail = f.read()[-4000:].decode("utf-8", "replace")
            print(f"--- gsyncd output ({' '.join(sys.argv[1:])}) ---\n{tail}")
        raise
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
