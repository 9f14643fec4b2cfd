#!/usr/bin/env python3
"""Starts `airlock run --put BIG=…` and SIGKILLs it the moment a partial file appears in the
sandbox's work directory. Prints what it caught ("<file> at <n> of <size> bytes"), or nothing when
the transfer finished (or failed) before a partial file was seen.

A write sizes its temporary file before it copies (so the storage gives it huge pages): a
partial file has its full length from the start, and what tells it apart is what it holds so
far, its allocated blocks.

The work directory lives in the sandbox's own storage, in its mount namespace only: it is looked
at through /proc/<init>/root, the init's pid read from the sandbox's record.

A shell loop forks a `stat` per poll and misses a fast disk's whole write; one process polling
with scandir does not.

Usage: kill_mid_put.py AIRLOCK CONFIG SPEC BIG STATE_DIR SIZE
"""
import glob
import json
import os
import signal
import subprocess
import sys
import time

airlock, config, spec, big, state, size = sys.argv[1:7]
size = int(size)
cli = subprocess.Popen(
    [airlock, "run", "--backend-config", config, "--min-isolation", "container", "--quiet",
     "--spec", spec, "--put", big + "=/maf-sandbox/work/big", "--", "true"],
    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
caught = None
deadline = time.monotonic() + 120
def work_directories():
    for record in glob.glob(state + "/linux/*/record.json"):
        try:
            with open(record) as handle:
                pid = json.load(handle).get("init_pid", 0)
        except (OSError, ValueError):
            continue
        if pid:
            yield "/proc/%d/root/maf-sandbox/work" % pid


while caught is None and cli.poll() is None and time.monotonic() < deadline:
    for directory in work_directories():
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            try:
                held = entry.stat(follow_symlinks=False).st_blocks * 512
            except OSError:
                continue
            length = min(held, size)
            if 0 < held < size:
                cli.send_signal(signal.SIGKILL)
                caught = "%s at %d of %d bytes" % (entry.name, length, size)
                break
        if caught:
            break
if cli.poll() is None:
    cli.kill()
cli.wait()
print(caught or "")
