# The program `make run` hands to the codeact kind, as a model would write it: it reads a shared
# file, asks the host for exchange rates through a registered host tool (`lookup_rate`, a demo
# with fixed, made-up rates), looks at the sandbox it runs in, and writes a declared output the
# host lands afterwards.
import csv
import json
import os
import socket

import airlock_host_tools as tools

totals = {}
with open("expenses.csv", newline="") as source:
    for row in csv.DictReader(source):
        rate = tools.lookup_rate(currency=row["currency"])["rate"]
        totals[row["category"]] = totals.get(row["category"], 0.0) + float(row["amount"]) * rate

try:
    socket.create_connection(("1.1.1.1", 443), timeout=2)
    network = "reachable"
except OSError as error:
    network = f"unreachable ({error.strerror})"

report = {
    "totals_eur": {name: round(value, 2) for name, value in sorted(totals.items())},
    "rates_from": "host tool lookup_rate (demo)",
    "sandbox": {
        "uid_inside": os.getuid(),
        "pid1": open("/proc/1/comm").read().strip(),
        "processes_visible": len([p for p in os.listdir("/proc") if p.isdigit()]),
        "network": network,
    },
}
with open("report.json", "w") as out:
    json.dump(report, out, indent=2)
for name, value in report["totals_eur"].items():
    print(f"{name:>10}: {value:8.2f} EUR")
print("network:", network)
