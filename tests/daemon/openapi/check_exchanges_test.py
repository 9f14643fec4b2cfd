#!/usr/bin/python3
"""The exchange checker must fail on each kind of drift it exists to catch, and pass a clean log.

    check_exchanges_test.py OPENAPI_YAML
"""

import base64
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKER = os.path.join(HERE, "check_exchanges.py")


def exchange(method, route, status, response, request=None, query=None,
             response_type="application/json", path=None):
    def encoded(value):
        if value is None:
            return ""
        text = value if isinstance(value, (bytes, str)) else json.dumps(value)
        return base64.b64encode(text.encode() if isinstance(text, str) else text).decode()
    return {"method": method, "path": path or route, "route": route, "query": query or {},
            "request_content_type": "application/json" if request is not None else "",
            "request_body_base64": encoded(request), "status": status,
            "response_content_type": response_type, "response_body_base64": encoded(response)}


HEALTH = {"status": "ok", "version": "0.1.0", "api": "v1", "requests_in_flight": 0}
HEALTH_OK = exchange("GET", "/v1/health", 200, HEALTH)
KEY = {"scope": "s", "thread_id": "t", "agent_dir": "a"}
ERROR = {"error": {"type": "InvalidArgument", "message": "no"}}

CASES = {
    "a clean log passes": ([HEALTH_OK], 0),
    "an undocumented status fails": (
        [exchange("GET", "/v1/health", 418, HEALTH)], 1),
    "a response missing a required field fails": (
        [exchange("GET", "/v1/health", 200, {"status": "ok"})], 1),
    "an operation the document lacks fails": (
        [exchange("GET", "/v1/nowhere", 200, {})], 1),
    "a response field the document does not list fails": (
        [exchange("GET", "/v1/health", 200, HEALTH | {"surprise": 1})], 1),
    "a response of the wrong media type fails": (
        [exchange("GET", "/v1/health", 200, "ok", response_type="text/plain")], 1),
    "an accepted request the document refuses fails": (
        [exchange("POST", "/v1/purge", 200, {"disposed": 0, "handles_forgotten": 0},
                  request={"scope": 7})], 1),
    "an accepted request the document allows passes": (
        [exchange("POST", "/v1/purge", 200, {"disposed": 0, "handles_forgotten": 0},
                  request={"scope": "s"})], 0),
    "a refused request the document refuses passes": (
        [exchange("POST", "/v1/purge", 400, ERROR, request={"scope": 7})], 0),
    "an error body that is not an Error fails": (
        [exchange("GET", "/v1/nowhere", 404, {"message": "no"}, path="/v1/nowhere")
         | {"route": "unmatched"}], 1),
}


def main(argv):
    document = argv[1]
    failures = 0
    with tempfile.TemporaryDirectory() as scratch:
        for name, (lines, expected) in CASES.items():
            log = os.path.join(scratch, "log.jsonl")
            with open(log, "w", encoding="utf-8") as handle:
                for line in lines:
                    handle.write(json.dumps(line) + "\n")
            ran = subprocess.run([sys.executable, CHECKER, document, log],
                                 capture_output=True, text=True, check=False)
            if ran.returncode != expected:
                failures += 1
                print(f"FAIL: {name}: exit {ran.returncode}, expected {expected}\n{ran.stdout}"
                      f"{ran.stderr}")
            else:
                print(f"ok: {name}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
