// A small HTTP client for airlockd: node's own http module over the daemon's unix socket (or TCP
// with a bearer token). One connection per request: the daemon closes idle connections after
// its header deadline, and a fresh unix-socket connection costs microseconds, so there is no
// keep-alive pool whose sockets could be closed underneath a request.
import http from "node:http";

/** What came back: the status, the headers, the body as bytes. */
export class AirlockReply {
  constructor(status, headers, body) {
    this.status = status;
    this.headers = headers;
    this.body = body;
  }

  /** The body as JSON, or null when it is not JSON. */
  json() {
    try {
      return JSON.parse(this.body.toString("utf8"));
    } catch {
      return null;
    }
  }

  /** The daemon's error object ({type, message, check, refusal, …}), or null. */
  error() {
    const parsed = this.json();
    return parsed && typeof parsed === "object" && parsed.error ? parsed.error : null;
  }
}

/** The request never got an answer: the daemon is unreachable, or the wait was given up. */
export class AirlockTransportError extends Error {
  constructor(message, { timedOut = false, cause } = {}) {
    super(message, { cause });
    this.name = "AirlockTransportError";
    this.timedOut = timedOut;
  }
}

export class AirlockClient {
  #socketPath;
  #host;
  #port;
  #token;

  /**
   * @param {object} options
   * @param {string} [options.socketPath] the daemon's unix socket (the usual way)
   * @param {string} [options.host] TCP host, with `port` and `token`
   * @param {number} [options.port]
   * @param {string} [options.token] the bearer token the daemon's TCP listener requires
   */
  constructor({ socketPath, host, port, token } = {}) {
    if (!socketPath && !(host && port)) {
      throw new TypeError("AirlockClient needs socketPath, or host and port");
    }
    this.#socketPath = socketPath;
    this.#host = host;
    this.#port = port;
    this.#token = token;
  }

  #options(method, path, { query, json, body }) {
    let target = path;
    if (query) {
      const search = new URLSearchParams();
      for (const [name, value] of Object.entries(query)) {
        if (value !== undefined && value !== null) search.append(name, String(value));
      }
      const text = search.toString();
      if (text) target += `?${text}`;
    }
    let payload = null;
    const headers = { Host: "airlockd", Connection: "close" };
    if (json !== undefined) {
      payload = Buffer.from(JSON.stringify(json), "utf8");
      headers["Content-Type"] = "application/json";
    } else if (body !== undefined) {
      payload = Buffer.from(body.buffer, body.byteOffset, body.byteLength);
      headers["Content-Type"] = "application/octet-stream";
    }
    if (payload !== null) headers["Content-Length"] = String(payload.length);
    if (this.#token) headers.Authorization = `Bearer ${this.#token}`;
    const http = this.#socketPath
      ? { socketPath: this.#socketPath, path: target, method, headers, agent: false }
      : { host: this.#host, port: this.#port, path: target, method, headers, agent: false };
    return { http, payload };
  }

  /**
   * A streaming exec (POST /v1/sandboxes/{handle}/exec/stream): an async iterator over what the
   * daemon sends, as it arrives —
   *   {type: "output", stream: "stdout" | "stderr", data: Buffer}   as the command prints
   *   {type: "result", status: 200, result, instance_id, duration_ms}
   *   {type: "error", status, error}   the daemon's error object (sandbox_reset, sandbox_message)
   * one of the last two, last. A refusal before the command ran (an unknown handle, a bad body)
   * is that single error event, with its HTTP status. Leaving the loop early, or `timeoutMs`
   * passing, closes the connection: the daemon stops the command. Throws only
   * AirlockTransportError (the daemon unreachable, the wait given up, the stream cut off before
   * its last line).
   *
   * @param {string} handle
   * @param {object} body as for POST …/exec ({argv | shell, timeout_ms, max_output_bytes, …})
   * @param {{timeoutMs?: number}} [options]
   */
  async *execStream(handle, body, { timeoutMs = 60_000 } = {}) {
    const options = this.#options("POST", `/v1/sandboxes/${encodeURIComponent(handle)}/exec/stream`, { json: body });
    let request;
    let response;
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      request?.destroy();
      response?.destroy();
    }, timeoutMs);
    try {
      response = await new Promise((resolve, reject) => {
        request = http.request(options.http, resolve);
        request.on("error", (error) =>
          reject(
            timedOut
              ? new AirlockTransportError(`no answer within ${timeoutMs} ms`, { timedOut: true })
              : new AirlockTransportError(`the daemon could not be reached: ${error.message}`, { cause: error }),
          ),
        );
        request.end(options.payload);
      });
    } catch (error) {
      clearTimeout(timer);
      throw error;
    }
    let ended = false;
    try {
      if (response.statusCode !== 200 || !String(response.headers["content-type"] ?? "").startsWith("application/x-ndjson")) {
        const chunks = [];
        for await (const chunk of response) chunks.push(chunk);
        const reply = new AirlockReply(response.statusCode, response.headers, Buffer.concat(chunks));
        ended = true;
        yield {
          type: "error",
          status: response.statusCode,
          error: reply.error() ?? { type: "HTTP", message: `status ${response.statusCode}` },
        };
        return;
      }
      let pending = "";
      const decoder = new TextDecoder();
      for await (const chunk of response) {
        pending += decoder.decode(chunk, { stream: true });
        let newline;
        while ((newline = pending.indexOf("\n")) >= 0) {
          const line = pending.slice(0, newline);
          pending = pending.slice(newline + 1);
          if (line.trim() === "") continue;
          const event = JSON.parse(line);
          if (event.type === "output") {
            yield { type: "output", stream: event.stream, data: Buffer.from(event.data_base64 ?? "", "base64") };
          } else {
            ended = true;
            yield event;
          }
        }
      }
      if (!ended) throw new AirlockTransportError("the stream ended before its last line: the result was lost");
    } catch (error) {
      if (error instanceof AirlockTransportError) throw error;
      if (timedOut) throw new AirlockTransportError(`no answer within ${timeoutMs} ms`, { timedOut: true });
      throw new AirlockTransportError(`reading the stream failed: ${error.message}`, { cause: error });
    } finally {
      clearTimeout(timer);
      // A consumer that left early closes the connection, which stops the command.
      if (!ended) request.destroy();
    }
  }

  /** Where this client reaches the daemon, for identities and logs (never the token). */
  get endpoint() {
    return this.#socketPath ? `unix:${this.#socketPath}` : `tcp:${this.#host}:${this.#port}`;
  }

  /**
   * One request. Resolves with an AirlockReply whatever the status; rejects only with an
   * AirlockTransportError. Giving up (`timeoutMs`) closes the connection, which the daemon
   * notices: an exec whose caller left is stopped and its instance condemned.
   *
   * @param {string} method
   * @param {string} path e.g. "/v1/health"
   * @param {object} [options]
   * @param {Record<string, string|number|boolean|undefined>} [options.query]
   * @param {unknown} [options.json] a body sent as JSON
   * @param {Uint8Array} [options.body] a body sent as raw bytes
   * @param {number} [options.timeoutMs]
   */
  request(method, path, { query, json, body, timeoutMs = 60_000 } = {}) {
    const options = this.#options(method, path, { query, json, body });
    const payload = options.payload;
    return new Promise((resolve, reject) => {
      let settled = false;
      const finish = (action, value) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        action(value);
      };
      const request = http.request(options.http, (response) => {
        const chunks = [];
        response.on("data", (chunk) => chunks.push(chunk));
        response.on("end", () =>
          finish(resolve, new AirlockReply(response.statusCode, response.headers, Buffer.concat(chunks))),
        );
        response.on("error", (error) =>
          finish(reject, new AirlockTransportError(`reading the answer failed: ${error.message}`, { cause: error })),
        );
      });
      const timer = setTimeout(() => {
        finish(reject, new AirlockTransportError(`no answer within ${timeoutMs} ms`, { timedOut: true }));
        request.destroy();
      }, timeoutMs);
      request.on("error", (error) =>
        finish(reject, new AirlockTransportError(`the daemon could not be reached: ${error.message}`, { cause: error })),
      );
      if (payload !== null) request.end(payload);
      else request.end();
    });
  }
}
