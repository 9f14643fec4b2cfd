#include "daemon/http_server.hpp"

#include <microhttpd.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstring>
#include <deque>
#include <functional>
#include <optional>
#include <system_error>

#include "airlock/encoding.hpp"
#include "airlock/error_table.hpp"
#include "airlock/errors.hpp"
#include "daemon/http_errors.hpp"

namespace airlock::daemon {
namespace {

using Clock = std::chrono::steady_clock;

bool constant_time_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char difference = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    difference |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return difference == 0;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

struct HttpServer::Listener {
  HttpServer* server = nullptr;
  bool tcp = false;
  int fd = -1;
  MHD_Daemon* mhd = nullptr;
  bool quiesced = false;
};

struct HttpServer::Connection {
  enum class Phase : std::uint8_t { awaiting_request, reading_body, handling };

  int fd = -1;
  Phase phase = Phase::awaiting_request;
  Clock::time_point since = Clock::now();
  bool nul_escape = false;  // a %00 was decoded in the request being parsed
};

// Watches a connection's socket while its request is handled (and, for a streamed body, until
// the stream ends): a hang-up requests the request's `cancelled`.
struct Watching {
  DisconnectWatch::Guard guard;
  std::optional<std::stop_callback<std::function<void()>>> on_gone;
};

// A body produced by a route's `stream` on a thread of its own, read by the library's content
// reader on the connection's thread. The reader blocks until a piece or the end arrives (the
// connection has a thread of its own, so blocking there starves no one).
struct StreamBody {
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<std::string> pieces;
  std::size_t offset = 0;  // of the first piece, already handed to the library
  bool done = false;       // the producer returned
  bool closed = false;     // the library let go of the response: nothing is read any more
  std::stop_source cancel;
  std::unique_ptr<Watching> watching;
  std::thread producer;  // last
};

struct HttpServer::RequestState {
  Clock::time_point started = Clock::now();
  Connection* connection = nullptr;
  const Route* route = nullptr;
  std::string route_name = "unmatched";
  HttpRequest request;
  std::uint64_t body_cap = 0;
  std::stop_source cancel;
  int status = 0;
  // Set when the server records exchanges.
  std::shared_ptr<ExchangeLog> exchanges;
  std::string request_content_type;
};

// libmicrohttpd's callbacks, as static members of a friend so they reach the server's privates.
struct Callbacks {
  static Exchange exchange_of(const HttpServer::RequestState& state, int status,
                              const std::string& content_type, std::string_view body) {
    Exchange exchange;
    exchange.method = state.request.method;
    exchange.path = state.request.path;
    exchange.route = state.route_name;
    exchange.query = state.request.query;
    exchange.request_content_type = state.request_content_type;
    exchange.request_body = state.request.body;
    exchange.status = status;
    exchange.response_content_type = content_type;
    exchange.response_body = body;
    return exchange;
  }

  static void log(void*, const char* format, va_list arguments) {
    char line[512];
    std::vsnprintf(line, sizeof line, format, arguments);
    std::string text(line);
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
    spdlog::debug("http: {}", text);
  }

  static HttpServer::Connection* connection_of(MHD_Connection* connection) {
    const MHD_ConnectionInfo* info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info ? static_cast<HttpServer::Connection*>(info->socket_context) : nullptr;
  }

  static void on_connection(void* cls, MHD_Connection* connection, void** socket_context,
                            MHD_ConnectionNotificationCode code) {
    auto* server = static_cast<HttpServer*>(cls);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
      auto* tracked = new (std::nothrow) HttpServer::Connection();
      if (!tracked) return;
      const MHD_ConnectionInfo* info =
          MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
      tracked->fd = info ? info->connect_fd : -1;
      *socket_context = tracked;
      std::lock_guard lock(server->mutex_);
      server->connections_.emplace(tracked, false);
      server->metrics_.connection_opened();
      return;
    }
    auto* tracked = static_cast<HttpServer::Connection*>(*socket_context);
    if (!tracked) return;
    {
      // Forgotten under the lock, before the library closes the socket: the reaper never shuts
      // down a descriptor number that a later connection has been given.
      std::lock_guard lock(server->mutex_);
      server->connections_.erase(tracked);
      server->metrics_.connection_closed();
    }
    delete tracked;
    *socket_context = nullptr;
  }

  // Percent-decoding for the path and the query, identical to the library's except that a
  // decoded NUL marks the request for refusal instead of silently cutting a C string short.
  static size_t unescape(void*, MHD_Connection* connection, char* text) {
    char* out = text;
    for (const char* in = text; *in != '\0'; ++in) {
      if (in[0] == '%' && in[1] != '\0' && in[2] != '\0') {
        const int high = hex_value(in[1]);
        const int low = hex_value(in[2]);
        if (high >= 0 && low >= 0) {
          const char decoded = static_cast<char>((high << 4) | low);
          if (decoded == '\0') {
            if (auto* tracked = connection_of(connection)) tracked->nul_escape = true;
          }
          *out++ = decoded;
          in += 2;
          continue;
        }
      }
      *out++ = *in;
    }
    *out = '\0';
    return static_cast<size_t>(out - text);
  }

  struct QueryReader {
    std::map<std::string, std::string>* query;
    std::string duplicate;
    bool nul = false;
  };

  static MHD_Result read_query(void* cls, MHD_ValueKind, const char* key, size_t key_size,
                               const char* value, size_t value_size) {
    auto* reader = static_cast<QueryReader*>(cls);
    std::string name(key, key_size);
    std::string text = value ? std::string(value, value_size) : std::string();
    if (name.find('\0') != std::string::npos || text.find('\0') != std::string::npos) {
      reader->nul = true;
      return MHD_NO;
    }
    if (!reader->query->emplace(name, std::move(text)).second) {
      reader->duplicate = name;
      return MHD_NO;
    }
    return MHD_YES;
  }

  static void free_body(void* cls) { delete static_cast<std::string*>(cls); }

  static ssize_t read_stream(void* cls, uint64_t, char* buffer, size_t max) {
    auto* stream = static_cast<StreamBody*>(cls);
    std::unique_lock lock(stream->mutex);
    stream->ready.wait(lock, [&] { return !stream->pieces.empty() || stream->done; });
    if (stream->pieces.empty()) return MHD_CONTENT_READER_END_OF_STREAM;
    size_t copied = 0;
    while (copied < max && !stream->pieces.empty()) {
      const std::string& front = stream->pieces.front();
      const size_t take = std::min(max - copied, front.size() - stream->offset);
      std::memcpy(buffer + copied, front.data() + stream->offset, take);
      copied += take;
      stream->offset += take;
      if (stream->offset == front.size()) {
        stream->pieces.pop_front();
        stream->offset = 0;
      }
    }
    return static_cast<ssize_t>(copied);
  }

  // The library is done with the response: sent in full, or the client went (or the server
  // stops). A producer still running has lost its reader, so its request is cancelled, and it
  // is waited for: nothing it holds outlives the request.
  static void free_stream(void* cls) {
    auto* stream = static_cast<StreamBody*>(cls);
    bool running = false;
    {
      std::lock_guard lock(stream->mutex);
      stream->closed = true;
      running = !stream->done;
      stream->pieces.clear();
    }
    if (running) stream->cancel.request_stop();
    if (stream->producer.joinable()) stream->producer.join();
    delete stream;
  }

  static MHD_Result queue_stream(MHD_Connection* connection, HttpServer::RequestState& state,
                                 HttpResponse response, std::unique_ptr<Watching> watching,
                                 bool close) {
    auto* stream = new (std::nothrow) StreamBody();
    if (!stream) return MHD_NO;
    stream->cancel = state.cancel;
    stream->watching = std::move(watching);
    MHD_Response* reply = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024,
                                                            &read_stream, stream, &free_stream);
    if (!reply) {
      delete stream;
      return MHD_NO;
    }
    MHD_add_response_header(reply, MHD_HTTP_HEADER_CONTENT_TYPE, response.content_type.c_str());
    MHD_add_response_header(reply, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    for (const auto& [name, value] : response.headers) {
      MHD_add_response_header(reply, name.c_str(), value.c_str());
    }
    if (close) MHD_add_response_header(reply, MHD_HTTP_HEADER_CONNECTION, "close");
    state.status = response.status;
    // What a recorded exchange needs once the stream has ended: the state itself is gone by then
    // when the client hung up first.
    std::optional<Exchange> recording;
    if (state.exchanges) recording = exchange_of(state, response.status, response.content_type, {});
    try {
      stream->producer =
          std::thread([stream, produce = std::move(response.stream), log = state.exchanges,
                       recording = std::move(recording),
                       body = state.exchanges ? state.request.body : std::string()]() mutable {
            std::string sent;
            const BodyWriter write = [stream, &sent, &recording](std::string_view piece) {
              std::lock_guard lock(stream->mutex);
              if (stream->closed) return false;
              if (!piece.empty()) stream->pieces.emplace_back(piece);
              if (recording && sent.size() < ExchangeLog::kMaxBody + 1) sent.append(piece);
              stream->ready.notify_all();
              return true;
            };
            try {
              produce(write);
            } catch (const std::exception& error) {
              spdlog::error("a streamed response's producer threw: {}", error_detail(error));
            }
            if (recording) {
              recording->request_body = body;
              recording->response_body = sent;
              log->record(*recording);
            }
            std::lock_guard lock(stream->mutex);
            stream->done = true;
            stream->ready.notify_all();
          });
    } catch (const std::system_error& error) {
      spdlog::error("could not start a streamed response: {}", error.what());
      std::lock_guard lock(stream->mutex);
      stream->done = true;
    }
    const MHD_Result queued =
        MHD_queue_response(connection, static_cast<unsigned>(response.status), reply);
    MHD_destroy_response(reply);
    return queued;
  }

  static MHD_Result queue(MHD_Connection* connection, HttpServer::RequestState& state,
                          HttpResponse response, bool close) {
    auto* body = new (std::nothrow) std::string(std::move(response.body));
    if (!body) return MHD_NO;
    MHD_Response* reply = MHD_create_response_from_buffer_with_free_callback_cls(
        body->size(), body->data(), &free_body, body);
    if (!reply) {
      delete body;
      return MHD_NO;
    }
    MHD_add_response_header(reply, MHD_HTTP_HEADER_CONTENT_TYPE, response.content_type.c_str());
    for (const auto& [name, value] : response.headers) {
      MHD_add_response_header(reply, name.c_str(), value.c_str());
    }
    if (close) MHD_add_response_header(reply, MHD_HTTP_HEADER_CONNECTION, "close");
    state.status = response.status;
    if (state.exchanges) {
      state.exchanges->record(exchange_of(state, response.status, response.content_type, *body));
    }
    const MHD_Result queued =
        MHD_queue_response(connection, static_cast<unsigned>(response.status), reply);
    MHD_destroy_response(reply);
    return queued;
  }

  // Everything decidable from the request line and headers, before any byte of the body.
  static std::optional<HttpResponse> admit(HttpServer::Listener& listener,
                                           MHD_Connection* connection,
                                           HttpServer::RequestState& state) {
    HttpServer& server = *listener.server;
    if (state.connection && state.connection->nul_escape) {
      state.connection->nul_escape = false;
      return error_response(HttpError("InvalidArgument",
                                      "the URL contains a percent-encoded NUL byte, which no "
                                      "path or parameter may carry",
                                      "url"));
    }
    if (!server.accepting()) {
      return HttpResponse::json(
          find_error_kind("DaemonDraining")->http_status,
          {{"error", {{"type", "DaemonDraining"}, {"message", "the daemon is shutting down"}}}});
    }
    if (listener.tcp && !server.authorized(connection)) {
      HttpResponse refused = error_response(
          HttpError("Unauthorized", "a bearer token is required over TCP", "Authorization"));
      refused.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"airlockd\"");
      return refused;
    }

    QueryReader reader{&state.request.query, {}, false};
    MHD_get_connection_values_n(connection, MHD_GET_ARGUMENT_KIND, &read_query, &reader);
    if (reader.nul) {
      return error_response(
          HttpError("InvalidArgument", "a query parameter contains a NUL byte", "query"));
    }
    if (!reader.duplicate.empty()) {
      return error_response(HttpError("InvalidArgument",
                                      "query parameter '" + reader.duplicate + "' is given twice",
                                      "query." + reader.duplicate));
    }

    const auto match = server.routes_.match(state.request.method, state.request.path);
    if (!match.route) {
      if (match.allowed.empty()) {
        return error_response(HttpError(
            "NotFound", "no route " + state.request.method + " " + state.request.path, "url"));
      }
      std::string allowed;
      for (const auto& method : match.allowed) allowed += (allowed.empty() ? "" : ", ") + method;
      HttpResponse refused =
          error_response(HttpError("MethodNotAllowed",
                                   state.request.path + " does not take " + state.request.method +
                                       " (allowed: " + allowed + ")",
                                   "method"));
      refused.headers.emplace_back("Allow", allowed);
      return refused;
    }
    state.route = match.route;
    state.route_name = match.route->pattern;
    state.request.params = match.params;

    try {
      switch (match.route->body) {
        case BodyKind::none:
          state.body_cap = 0;
          break;
        case BodyKind::json:
          state.body_cap = server.limits_.max_json_body_bytes;
          break;
        case BodyKind::bytes:
          state.body_cap = match.route->body_cap ? match.route->body_cap(state.request) : 0;
          break;
      }
    } catch (const std::exception& error) {
      return error_response(error, match.route->body == BodyKind::bytes);
    }

    if (const char* length =
            MHD_lookup_connection_value(connection, MHD_HEADER_KIND, "Content-Length")) {
      errno = 0;
      char* end = nullptr;
      const unsigned long long declared = std::strtoull(length, &end, 10);
      if (errno != 0 || end == length || *end != '\0') {
        return error_response(
            HttpError("InvalidArgument", "Content-Length is not a number", "Content-Length"));
      }
      if (declared > state.body_cap) {
        return error_response(HttpError("RequestBodyTooLarge",
                                        "the request body of " + std::to_string(declared) +
                                            " bytes exceeds this route's cap of " +
                                            std::to_string(state.body_cap) + " bytes",
                                        match.route->body_cap_check));
      }
    }
    return std::nullopt;
  }

  static HttpResponse run_handler(HttpServer& server, HttpServer::RequestState& state,
                                  std::unique_ptr<Watching>& watching) {
    watching = std::make_unique<Watching>();
    watching->guard = server.watch_.watch(state.connection ? state.connection->fd : -1);
    Metrics& metrics = server.metrics_;
    std::stop_source cancel = state.cancel;
    watching->on_gone.emplace(watching->guard.gone(),
                              std::function<void()>([cancel, &metrics]() mutable {
                                metrics.client_gone();
                                cancel.request_stop();
                              }));
    state.request.cancelled = state.cancel.get_token();
    try {
      return state.route->handle(state.request);
    } catch (const std::exception& error) {
      HttpResponse response = error_response(error);
      if (response.status >= 500 && response.status != 503) {
        spdlog::warn("{} {}: {}", state.request.method, state.request.path, error_detail(error));
      } else {
        spdlog::debug("{} {}: {}", state.request.method, state.request.path, error_detail(error));
      }
      return response;
    }
  }

  static void count_error(HttpServer& server, const HttpResponse& response) {
    if (response.status < 400 || response.content_type != "application/json") return;
    try {
      const auto body = json::Json::parse(response.body);
      if (body.contains("error") && body["error"].contains("type")) {
        server.metrics_.error(body["error"]["type"].get<std::string>());
      }
    } catch (...) {
    }
  }

  static MHD_Result on_access(void* cls, MHD_Connection* connection, const char* url,
                              const char* method, const char*, const char* upload_data,
                              size_t* upload_data_size, void** request_context) {
    auto& listener = *static_cast<HttpServer::Listener*>(cls);
    HttpServer& server = *listener.server;
    auto* state = static_cast<HttpServer::RequestState*>(*request_context);
    if (!state) {
      state = new (std::nothrow) HttpServer::RequestState();
      if (!state) return MHD_NO;
      *request_context = state;
      state->connection = connection_of(connection);
      state->request.method = method;
      state->request.path = url;
      state->request.over_tcp = listener.tcp;
      if (server.exchanges_) {
        state->exchanges = server.exchanges_;
        if (const char* type = MHD_lookup_connection_value(connection, MHD_HEADER_KIND,
                                                           MHD_HTTP_HEADER_CONTENT_TYPE)) {
          state->request_content_type = type;
        }
      }
      server.request_started(state);
      std::optional<HttpResponse> early;
      try {
        early = admit(listener, connection, *state);
      } catch (const std::exception& error) {
        early = error_response(error);
      }
      if (early) {
        count_error(server, *early);
        // Answered before the body: the connection closes rather than read what was refused.
        return queue(connection, *state, std::move(*early), true);
      }
      return MHD_YES;
    }
    if (*upload_data_size > 0) {
      if (state->request.body.size() + *upload_data_size > state->body_cap) {
        // Only a chunked body gets here (a declared length was judged up front); the library
        // cannot answer mid-body, so the connection goes.
        spdlog::info("{} {}: a chunked body passed the cap of {} bytes; closing the connection",
                     state->request.method, state->request.path, state->body_cap);
        state->status = 413;
        return MHD_NO;
      }
      try {
        state->request.body.append(upload_data, *upload_data_size);
      } catch (const std::bad_alloc&) {
        return MHD_NO;
      }
      *upload_data_size = 0;
      return MHD_YES;
    }
    if (state->connection) {
      std::lock_guard lock(server.mutex_);
      state->connection->phase = HttpServer::Connection::Phase::handling;
    }
    std::unique_ptr<Watching> watching;
    HttpResponse response = run_handler(server, *state, watching);
    count_error(server, response);
    if (response.stream) {
      // The socket stays watched until the stream ends.
      return queue_stream(connection, *state, std::move(response), std::move(watching),
                          !server.accepting());
    }
    watching.reset();
    return queue(connection, *state, std::move(response), !server.accepting());
  }

  static void on_completed(void* cls, MHD_Connection*, void** request_context,
                           MHD_RequestTerminationCode code) {
    auto* server = static_cast<HttpServer*>(cls);
    auto* state = static_cast<HttpServer::RequestState*>(*request_context);
    if (!state) return;
    const double seconds = std::chrono::duration<double>(Clock::now() - state->started).count();
    // 499: the client went before an answer could be sent (nginx's spelling; never on a wire).
    int status = state->status;
    if (status == 0 || (code != MHD_REQUEST_TERMINATED_COMPLETED_OK && status < 400)) {
      status = code == MHD_REQUEST_TERMINATED_COMPLETED_OK ? 200 : 499;
    }
    server->metrics_.request(state->request.method, state->route_name, status, seconds);
    server->request_finished(state);
    delete state;
    *request_context = nullptr;
  }
};

HttpServer::HttpServer(const RouteTable& routes, Metrics& metrics, ServerLimits limits,
                       std::string bearer_token, bool allow_tcp_without_token)
    : routes_(routes),
      metrics_(metrics),
      limits_(limits),
      token_digest_(bearer_token.empty() ? std::string() : sha256_hex(bearer_token)),
      allow_tcp_without_token_(allow_tcp_without_token),
      reaper_([this](std::stop_token stop) { reap(stop); }) {}

HttpServer::~HttpServer() {
  stop();
}

void HttpServer::serve(int listen_fd, bool tcp) {
  auto listener = std::make_unique<Listener>();
  listener->server = this;
  listener->tcp = tcp;
  listener->fd = listen_fd;
  if (tcp && token_digest_.empty() && !allow_tcp_without_token_) {
    close(listen_fd);
    throw InvalidArgument(
        "serving TCP needs a bearer token (--token-file); without one any local process could "
        "drive sandboxes. Pass --dangerously-allow-tcp-without-token only in a test rig",
        "tcp");
  }
  unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
                   MHD_USE_ITC | MHD_USE_ERROR_LOG;
  MHD_Daemon* mhd = nullptr;
  if (tcp) {
    mhd = MHD_start_daemon(
        flags, 0, nullptr, nullptr, &Callbacks::on_access, listener.get(), MHD_OPTION_LISTEN_SOCKET,
        listen_fd, MHD_OPTION_CONNECTION_LIMIT, limits_.max_connections,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, limits_.max_connections_per_ip,
        MHD_OPTION_CONNECTION_TIMEOUT, limits_.idle_timeout_seconds, MHD_OPTION_NOTIFY_COMPLETED,
        &Callbacks::on_completed, this, MHD_OPTION_NOTIFY_CONNECTION, &Callbacks::on_connection,
        this, MHD_OPTION_UNESCAPE_CALLBACK, &Callbacks::unescape, nullptr,
        MHD_OPTION_EXTERNAL_LOGGER, &Callbacks::log, nullptr, MHD_OPTION_END);
  } else {
    mhd = MHD_start_daemon(
        flags, 0, nullptr, nullptr, &Callbacks::on_access, listener.get(), MHD_OPTION_LISTEN_SOCKET,
        listen_fd, MHD_OPTION_CONNECTION_LIMIT, limits_.max_connections,
        MHD_OPTION_CONNECTION_TIMEOUT, limits_.idle_timeout_seconds, MHD_OPTION_NOTIFY_COMPLETED,
        &Callbacks::on_completed, this, MHD_OPTION_NOTIFY_CONNECTION, &Callbacks::on_connection,
        this, MHD_OPTION_UNESCAPE_CALLBACK, &Callbacks::unescape, nullptr,
        MHD_OPTION_EXTERNAL_LOGGER, &Callbacks::log, nullptr, MHD_OPTION_END);
  }
  if (!mhd) {
    close(listen_fd);
    throw SystemError("the HTTP library could not start serving a listening socket");
  }
  listener->mhd = mhd;
  std::lock_guard lock(mutex_);
  listeners_.push_back(std::move(listener));
}

bool HttpServer::authorized(MHD_Connection* connection) const {
  const char* header = MHD_lookup_connection_value(connection, MHD_HEADER_KIND, "Authorization");
  if (token_digest_.empty()) return allow_tcp_without_token_;
  if (!header) return false;
  std::string_view value(header);
  constexpr std::string_view kScheme = "Bearer ";
  if (value.size() <= kScheme.size() || value.substr(0, kScheme.size()) != kScheme) return false;
  // Digests of equal length are compared, so neither the token's length nor a common prefix
  // shows in the time the comparison takes.
  return constant_time_equal(sha256_hex(value.substr(kScheme.size())), token_digest_);
}

void HttpServer::request_started(RequestState* state) {
  std::lock_guard lock(mutex_);
  requests_.emplace(state, false);
  if (state->connection) {
    state->connection->phase = HttpServer::Connection::Phase::reading_body;
    state->connection->since = Clock::now();
  }
  metrics_.request_started();
}

void HttpServer::request_finished(RequestState* state) {
  std::lock_guard lock(mutex_);
  requests_.erase(state);
  if (state->connection && connections_.contains(state->connection)) {
    state->connection->phase = HttpServer::Connection::Phase::awaiting_request;
    state->connection->since = Clock::now();
  }
  metrics_.request_finished();
  idle_.notify_all();
}

void HttpServer::reap(std::stop_token stop) {
  std::mutex sleep_mutex;
  std::condition_variable_any sleeper;
  while (!stop.stop_requested()) {
    {
      std::unique_lock sleep_lock(sleep_mutex);
      sleeper.wait_for(sleep_lock, stop, std::chrono::milliseconds(200), [] { return false; });
    }
    if (stop.stop_requested()) return;
    const auto now = Clock::now();
    std::lock_guard lock(mutex_);
    for (auto& [connection, reaped] : connections_) {
      if (reaped || connection->fd < 0) continue;
      const auto waited = now - connection->since;
      const bool stalled = (connection->phase == HttpServer::Connection::Phase::awaiting_request &&
                            waited > limits_.header_deadline) ||
                           (connection->phase == HttpServer::Connection::Phase::reading_body &&
                            waited > limits_.body_deadline);
      if (!stalled) continue;
      // The connection's own thread sees the end of the stream and closes it; the descriptor
      // is still ours to name because the closed notification (which forgets it) takes this
      // lock first.
      spdlog::debug("http: closing a connection stalled while {}",
                    connection->phase == HttpServer::Connection::Phase::awaiting_request
                        ? "sending its request"
                        : "sending its body");
      shutdown(connection->fd, SHUT_RDWR);
      reaped = true;
    }
  }
}

void HttpServer::stop_accepting() {
  std::lock_guard lock(mutex_);
  accepting_ = false;
  for (auto& listener : listeners_) {
    if (listener->mhd && !listener->quiesced) {
      MHD_quiesce_daemon(listener->mhd);
      listener->quiesced = true;
    }
  }
}

bool HttpServer::accepting() const noexcept {
  std::lock_guard lock(mutex_);
  return accepting_;
}

bool HttpServer::wait_idle(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mutex_);
  return idle_.wait_until(lock, deadline, [this] { return requests_.empty(); });
}

void HttpServer::cancel_in_flight() {
  std::lock_guard lock(mutex_);
  for (auto& [state, unused] : requests_) state->cancel.request_stop();
}

std::size_t HttpServer::in_flight() const {
  std::lock_guard lock(mutex_);
  return requests_.size();
}

void HttpServer::stop() {
  std::vector<std::unique_ptr<Listener>> listeners;
  {
    std::lock_guard lock(mutex_);
    accepting_ = false;
    listeners.swap(listeners_);
  }
  for (auto& listener : listeners) {
    if (!listener->mhd) continue;
    // Joins every connection thread; handlers still running are waited for.
    MHD_stop_daemon(listener->mhd);
    // A quiesced socket was handed back to us and is ours to close, after the stop.
    if (listener->quiesced) close(listener->fd);
  }
}

}  // namespace airlock::daemon
