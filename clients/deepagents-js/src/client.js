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
    const options = this.#socketPath
      ? { socketPath: this.#socketPath, path: target, method, headers, agent: false }
      : { host: this.#host, port: this.#port, path: target, method, headers, agent: false };

    return new Promise((resolve, reject) => {
      let settled = false;
      const finish = (action, value) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        action(value);
      };
      const request = http.request(options, (response) => {
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
