#!/usr/bin/python3
"""Holds recorded daemon exchanges against docs/api/openapi.yaml.

    check_exchanges.py OPENAPI_YAML LOG.jsonl [LOG.jsonl ...]

Each log line is one exchange as the daemon answered it (src/daemon/exchange_log.hpp). For every
exchange:

  * the operation (the route's pattern and the method) must be in the document;
  * the status must be one the operation documents (or its `default`);
  * the response's media type must be one that status documents, and a JSON body (each line of
    an NDJSON one) must match its schema, read closed: a field the document does not list for
    that object is a disagreement too;
  * a request the document refuses (a JSON body that breaks the request schema, a required query
    parameter missing, a typed one that does not parse) must not be answered with a 2xx: the
    server accepting what the document forbids is drift just as much as a response that breaks
    the schema.

OpenAPI 3.0 schemas are read as JSON Schema draft 4 with `nullable` translated. Exits 1 listing
the violations (the first of each kind in full), 0 with a count per operation otherwise.
"""

import base64
import collections
import copy
import json
import sys

import jsonschema
import yaml

METHODS = ("get", "put", "post", "delete", "patch")


def translate(node, closed=False):
    """OpenAPI 3.0's schema dialect to draft 4: `nullable: true` allows null.

    `closed`: an object schema that lists its properties and says nothing of others allows no
    others — how responses are read, so that a field the server sends and the document never
    mentions is drift too (requests keep the document's own reading)."""
    if isinstance(node, list):
        return [translate(item, closed) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: translate(value, closed) for key, value in node.items()
           if key not in ("nullable", "example", "deprecated", "readOnly", "writeOnly", "xml",
                          "externalDocs", "discriminator")}
    if closed and "properties" in node and "additionalProperties" not in node:
        out["additionalProperties"] = False
    if node.get("nullable") is True:
        return {"anyOf": [{"type": "null"}, out]}
    return out


class Document:
    def __init__(self, path):
        with open(path, encoding="utf-8") as handle:
            raw = yaml.safe_load(handle)
        self.raw = raw
        self.resolvers = {
            closed: jsonschema.RefResolver.from_schema(translate(copy.deepcopy(raw), closed))
            for closed in (False, True)}
        self.validators = {}

    def resolve(self, node):
        while isinstance(node, dict) and "$ref" in node:
            pointer = node["$ref"]
            if not pointer.startswith("#/"):
                raise ValueError(f"only local references are read: {pointer}")
            node = self.raw
            for part in pointer[2:].split("/"):
                node = node[part.replace("~1", "/").replace("~0", "~")]
        return node

    def operation(self, route, method):
        item = self.raw.get("paths", {}).get(route)
        if item is None or method not in item:
            return None, []
        parameters = [self.resolve(p) for p in item.get("parameters", [])]
        parameters += [self.resolve(p) for p in item[method].get("parameters", [])]
        return item[method], parameters

    def errors(self, schema, instance, closed=False):
        key = (closed, json.dumps(schema, sort_keys=True))
        validator = self.validators.get(key)
        if validator is None:
            validator = jsonschema.Draft4Validator(translate(schema, closed),
                                                   resolver=self.resolvers[closed])
            self.validators[key] = validator
        return sorted(validator.iter_errors(instance), key=lambda e: list(e.absolute_path))


def body(exchange, field):
    return base64.b64decode(exchange.get(field + "_base64", ""))


def media(content_type):
    return content_type.split(";")[0].strip().lower()


def describe(error):
    where = "/".join(str(p) for p in error.absolute_path) or "(root)"
    return f"at {where}: {error.message[:300]}"


def check_query(parameters, query):
    """Why the request's query breaks the document, or None."""
    for parameter in parameters:
        if parameter.get("in") != "query":
            continue
        name = parameter["name"]
        if name not in query:
            if parameter.get("required"):
                return f"query parameter {name} is required"
            continue
        schema = parameter.get("schema", {})
        value = query[name]
        kind = schema.get("type")
        try:
            if kind == "integer":
                parsed = int(value)
                if "minimum" in schema and parsed < schema["minimum"]:
                    return f"query parameter {name}={value} is below {schema['minimum']}"
            elif kind == "boolean" and value not in ("true", "false"):
                return f"query parameter {name}={value} is not a boolean"
        except ValueError:
            return f"query parameter {name}={value} is not an integer"
        if "enum" in schema and value not in schema["enum"]:
            return f"query parameter {name}={value} is not one of {schema['enum']}"
    return None


def check_request(document, operation, parameters, exchange):
    """Why the document refuses this request, or None."""
    why = check_query(parameters, exchange.get("query", {}))
    if why:
        return why
    request_body = operation.get("requestBody")
    if not request_body:
        return None
    request_body = document.resolve(request_body)
    sent = body(exchange, "request_body")
    if not sent:
        return "a request body is required" if request_body.get("required") else None
    content = request_body.get("content", {})
    kind = media(exchange.get("request_content_type", ""))
    if "application/json" in content and kind in ("application/json", ""):
        try:
            instance = json.loads(sent)
        except ValueError as error:
            return f"the request body is not JSON ({error})"
        found = document.errors(content["application/json"].get("schema", {}), instance)
        return f"the request body breaks the schema {describe(found[0])}" if found else None
    return None


def check_response(document, operation, exchange):
    """The ways this response breaks the document (empty when it keeps to it)."""
    status = str(exchange["status"])
    responses = operation.get("responses", {})
    response = responses.get(status) or responses.get(status[0] + "XX") or responses.get("default")
    if response is None:
        return [f"status {status} is not documented (documented: {', '.join(responses)})"]
    response = document.resolve(response)
    content = response.get("content")
    sent = body(exchange, "response_body")
    if not content:
        return [f"status {status} documents no body, but {len(sent)} bytes came"] if sent else []
    kind = media(exchange.get("response_content_type", ""))
    if kind not in content:
        return [f"status {status} answered {kind}, documented: {', '.join(content)}"]
    if exchange.get("response_body_cut"):
        return []  # counted apart: too large to have been recorded whole
    schema = content[kind].get("schema", {})
    try:
        if kind == "application/json":
            instances = [json.loads(sent)]
        elif kind == "application/x-ndjson":
            instances = [json.loads(line) for line in sent.splitlines() if line.strip()]
        else:
            return []
    except ValueError as error:
        return [f"the {kind} body does not parse ({error})"]
    problems = []
    for number, instance in enumerate(instances):
        for error in document.errors(schema, instance, closed=True)[:1]:
            line = f" (line {number + 1})" if kind == "application/x-ndjson" else ""
            problems.append(f"the response{line} breaks the schema {describe(error)}")
    return problems


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    document = Document(argv[1])
    counts = collections.Counter()
    violations = collections.defaultdict(list)
    cut = 0
    total = 0
    for log in argv[2:]:
        with open(log, encoding="utf-8") as handle:
            for number, text in enumerate(handle, 1):
                if not text.strip():
                    continue
                try:
                    exchange = json.loads(text)
                except ValueError:
                    violations["unreadable log line"].append(f"{log}:{number}")
                    continue
                total += 1
                method = exchange["method"].lower()
                route = exchange["route"]
                label = f"{exchange['method']} {route}"
                where = f"{exchange['method']} {exchange['path']} -> {exchange['status']}"
                if exchange.get("response_body_cut"):
                    cut += 1
                if route == "unmatched":
                    # Answered before any route matched: an error object, on a path the daemon
                    # does not serve (or refused before routing: draining, no token).
                    counts["(no route)"] += 1
                    if exchange["status"] < 400:
                        violations["an unmatched request was not refused"].append(where)
                        continue
                    error_schema = {"$ref": "#/components/schemas/Error"}
                    instance = json.loads(body(exchange, "response_body") or b"null")
                    for error in document.errors(error_schema, instance, closed=True)[:1]:
                        violations["an error body breaks Error"].append(f"{where}: {describe(error)}")
                    continue
                operation, parameters = document.operation(route, method)
                if operation is None:
                    violations["an operation the document does not have"].append(where)
                    continue
                counts[label] += 1
                refused = check_request(document, operation, parameters, exchange)
                if refused and 200 <= exchange["status"] < 300:
                    violations["the server accepted a request the document refuses"].append(
                        f"{where}: {refused}")
                for problem in check_response(document, operation, exchange):
                    violations[problem.split(" (")[0].split(" at ")[0]].append(f"{where}: {problem}")

    documented = {f"{method.upper()} {route}"
                  for route, item in document.raw.get("paths", {}).items()
                  for method in METHODS if method in item}
    print(f"openapi: {total} exchanges checked against {argv[1]}")
    for label, count in sorted(counts.items()):
        print(f"  {count:6d}  {label}")
    never = sorted(documented - set(counts))
    if never:
        print("  never exercised: " + "; ".join(never))
    if cut:
        print(f"  {cut} response(s) larger than the recorder keeps: status and media type checked, "
              "not the body")
    if violations:
        count = sum(len(items) for items in violations.values())
        print(f"openapi: FAILED: {count} exchange(s) disagree with the document")
        for kind, items in violations.items():
            print(f"- {kind}: {len(items)}")
            for item in items[:5]:
                print(f"    {item}")
        return 1
    print("openapi: every exchange keeps to the document")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
