#!/usr/bin/env python3
"""`airlock run -t` under a real pseudo-terminal, as an operator's terminal drives it.

Checks that the guest sees a terminal of the local one's size, follows a resize, that ^C typed
into the terminal (-it: the local terminal is raw, so it reaches the guest's own terminal) ends
`sleep 30` with 130, that -it with no command is a shell, and that the local terminal's modes are
exactly as before once airlock exits, however it exits.

Usage: pty_drive.py AIRLOCK BACKEND_CONFIG
"""
import fcntl
import os
import pty
import select
import struct
import sys
import termios
import time

airlock, config = sys.argv[1:3]
BASE = [airlock, "run", "--backend-config", config, "--min-isolation", "container", "--quiet"]


def fail(message):
    print(f"FAILED: {message}", file=sys.stderr)
    sys.exit(1)


def set_size(fd, rows, columns):
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))


class Session:
    def __init__(self, args, rows=33, columns=77):
        self.master, self.slave = pty.openpty()
        set_size(self.slave, rows, columns)
        self.before = termios.tcgetattr(self.slave)
        self.output = b""
        self.pid = os.fork()
        if self.pid == 0:
            os.setsid()
            fcntl.ioctl(self.slave, termios.TIOCSCTTY, 0)
            for fd in (0, 1, 2):
                os.dup2(self.slave, fd)
            os.close(self.master)
            os.close(self.slave)
            os.execv(args[0], args)

    def read_until(self, needle, timeout=20):
        deadline = time.time() + timeout
        while needle not in self.output:
            left = deadline - time.time()
            ready, _, _ = select.select([self.master], [], [], max(0, left))
            if not ready:
                fail(f"did not see {needle!r}; the terminal showed {self.output!r}")
            try:
                chunk = os.read(self.master, 4096)
            except OSError:
                chunk = b""
            if not chunk:
                fail(f"the terminal closed before {needle!r}; it showed {self.output!r}")
            self.output += chunk

    def send(self, data):
        os.write(self.master, data)

    def wait(self, timeout=20):
        deadline = time.time() + timeout
        while time.time() < deadline:
            # Keep draining, so a full terminal buffer never blocks the writer.
            ready, _, _ = select.select([self.master], [], [], 0.1)
            if ready:
                try:
                    self.output += os.read(self.master, 4096)
                except OSError:
                    pass
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(status)
        os.kill(self.pid, 9)
        os.waitpid(self.pid, 0)
        fail(f"airlock did not exit within {timeout} s; the terminal showed {self.output!r}")

    def check_modes_restored(self, what):
        after = termios.tcgetattr(self.slave)
        if after != self.before:
            fail(f"{what}: the terminal's modes were not restored ({self.before} -> {after})")
        os.close(self.master)
        os.close(self.slave)


# -t: the guest's stdin/stdout are a terminal of the local size.
session = Session(BASE + ["-t", "--", "sh", "-c", "tty; stty size; echo done"])
code = session.wait()
text = session.output.decode(errors="replace")
if code != 0:
    fail(f"-t tty; stty size exited {code}: {text!r}")
if "/dev/pts/" not in text and "/dev/tty" not in text:
    fail(f"-t: the guest's `tty` named no terminal: {text!r}")
if "33 77" not in text:
    fail(f"-t: the guest's terminal is not the local one's size (33 77): {text!r}")
session.check_modes_restored("-t")
print("ok: -t gives the guest a terminal of the local size")

# -it: ^C typed into the terminal ends sleep 30 with 130, and raw mode is undone.
session = Session(BASE + ["-it", "--", "sh", "-c", "echo ready; exec sleep 30"])
session.read_until(b"ready")
time.sleep(0.3)
started = time.time()
session.send(b"\x03")
code = session.wait(timeout=15)
if code != 130:
    fail(f"-it: ^C during sleep 30 gave {code}, not 130: {session.output!r}")
if time.time() - started > 10:
    fail("-it: ^C took more than 10 s to end sleep 30")
session.check_modes_restored("-it after ^C")
print("ok: ^C through the terminal ends the guest's sleep 30 with 130; modes restored")

# -it with no command: a shell, which follows a resize of the local terminal.
session = Session(BASE + ["-it"], rows=33, columns=77)
session.send(b"stty size; echo mark-$((1+1))\n")
session.read_until(b"mark-2")
if b"33 77" not in session.output:
    fail(f"-it shell: stty size is not 33 77: {session.output!r}")
session.output = b""
set_size(session.master, 40, 100)  # the kernel sends SIGWINCH to airlock, its foreground group
time.sleep(0.5)
session.send(b"stty size; echo mark-$((2+1))\n")
session.read_until(b"mark-3")
if b"40 100" not in session.output:
    fail(f"-it shell: the resize to 40 100 did not reach the guest: {session.output!r}")
session.send(b"exit 3\n")
code = session.wait()
if code != 3:
    fail(f"-it shell: exit 3 gave {code}")
session.check_modes_restored("-it shell")
print("ok: -it with no command is a shell that follows resizes; modes restored")
