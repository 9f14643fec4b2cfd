#!/usr/bin/env python3
"""Loopback HTTP servers for the end-to-end egress stages.

Usage: http_servers.py PORTFILE BODY ADDRESS...

Serves GET on each IPv4 ADDRESS (an ephemeral port each) with 200 and BODY, writes the ports in
ADDRESS order, space-separated, to PORTFILE (atomically, newline-terminated), then serves until
killed.
"""
import http.server
import os
import sys
import threading


def main() -> None:
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    portfile, body, addresses = sys.argv[1], sys.argv[2].encode(), sys.argv[3:]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    servers = [http.server.ThreadingHTTPServer((address, 0), Handler) for address in addresses]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    with open(portfile + ".tmp", "w") as f:
        f.write(" ".join(str(server.server_address[1]) for server in servers) + "\n")
    os.rename(portfile + ".tmp", portfile)
    threading.Event().wait()


if __name__ == "__main__":
    main()
