#include "http_server.hpp"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <stdexcept>

namespace airlock::acas_double {

std::optional<std::string> Request::header(const std::string& lower_name) const {
  const auto found = headers.find(lower_name);
  if (found == headers.end()) return std::nullopt;
  return found->second;
}

std::optional<std::string> Request::query_value(const std::string& name) const {
  const auto found = query.find(name);
  if (found == query.end()) return std::nullopt;
  return found->second;
}

struct HttpServer::Impl {
  // One request while its body arrives.
  struct Pending {
    Request request;
    bool too_large = false;
  };

  // A body read from a descriptor as the client takes it.
  struct Stream {
    std::shared_ptr<base::UniqueFd> fd;
    int client_socket = -1;
    const std::atomic<bool>* stopping = nullptr;
  };

  static MHD_Result collect(void* cls, MHD_ValueKind, const char* key, const char* value) {
    auto* into = static_cast<std::map<std::string, std::string>*>(cls);
    into->emplace(key, value != nullptr ? value : "");
    return MHD_YES;
  }

  static MHD_Result collect_header(void* cls, MHD_ValueKind, const char* key, const char* value) {
    auto* into = static_cast<std::map<std::string, std::string>*>(cls);
    std::string name(key);
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    into->emplace(std::move(name), value != nullptr ? value : "");
    return MHD_YES;
  }

  // Blocks until the descriptor has bytes, the client hangs up or the server stops: a FIFO with
  // no writer therefore holds its reader exactly as long as the client waits.
  static ssize_t read_stream(void* cls, std::uint64_t, char* buffer, std::size_t max) {
    auto* stream = static_cast<Stream*>(cls);
    for (;;) {
      if (stream->stopping->load()) return MHD_CONTENT_READER_END_WITH_ERROR;
      pollfd fds[2] = {{stream->fd->get(), POLLIN, 0},
                       {stream->client_socket, POLLRDHUP, 0}};
      const int ready = ::poll(fds, stream->client_socket >= 0 ? 2 : 1, 200);
      if (ready < 0 && errno != EINTR) return MHD_CONTENT_READER_END_WITH_ERROR;
      if (ready <= 0) continue;
      if ((fds[1].revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0) {
        return MHD_CONTENT_READER_END_WITH_ERROR;
      }
      if (fds[0].revents == 0) continue;
      const ssize_t got = ::read(stream->fd->get(), buffer, max);
      if (got > 0) return got;
      if (got == 0) return MHD_CONTENT_READER_END_OF_STREAM;
      if (errno == EAGAIN || errno == EINTR) continue;
      return MHD_CONTENT_READER_END_WITH_ERROR;
    }
  }

  static void free_stream(void* cls) { delete static_cast<Stream*>(cls); }

  static MHD_Result queue(HttpServer& server, MHD_Connection* connection, Response& response) {
    MHD_Response* reply = nullptr;
    if (response.stream) {
      auto* stream = new Stream{response.stream, -1, &server.stopping_};
      if (const MHD_ConnectionInfo* info =
              MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD)) {
        stream->client_socket = info->connect_fd;
      }
      reply = MHD_create_response_from_callback(
          response.stream_size ? *response.stream_size : MHD_SIZE_UNKNOWN, 64 * 1024,
          &read_stream, stream, &free_stream);
      if (reply == nullptr) delete stream;
    } else {
      reply = MHD_create_response_from_buffer(response.body.size(), response.body.data(), MHD_RESPMEM_MUST_COPY);
    }
    if (reply == nullptr) return MHD_NO;
    MHD_add_response_header(reply, MHD_HTTP_HEADER_CONTENT_TYPE, response.content_type.c_str());
    for (const auto& [name, value] : response.headers) {
      MHD_add_response_header(reply, name.c_str(), value.c_str());
    }
    const MHD_Result queued =
        MHD_queue_response(connection, static_cast<unsigned>(response.status), reply);
    MHD_destroy_response(reply);
    return queued;
  }

  static MHD_Result on_access(void* cls, MHD_Connection* connection, const char* url,
                              const char* method, const char*, const char* upload,
                              std::size_t* upload_size, void** context) {
    auto& server = *static_cast<HttpServer*>(cls);
    if (*context == nullptr) {
      auto* pending = new Pending;
      pending->request.method = method;
      pending->request.path = url;
      MHD_get_connection_values(connection, MHD_GET_ARGUMENT_KIND, &collect,
                                &pending->request.query);
      MHD_get_connection_values(connection, MHD_HEADER_KIND, &collect_header,
                                &pending->request.headers);
      *context = pending;
      return MHD_YES;
    }
    auto* pending = static_cast<Pending*>(*context);
    if (*upload_size != 0) {
      if (pending->request.body.size() + *upload_size > server.max_body_bytes_) {
        pending->too_large = true;
      } else {
        pending->request.body.append(upload, *upload_size);
      }
      *upload_size = 0;
      return MHD_YES;
    }
    Response response;
    if (pending->too_large) {
      response.status = 413;
      response.body = R"({"error":{"code":"RequestEntityTooLarge","message":"body too large"}})";
    } else {
      try {
        response = server.handler_(pending->request);
      } catch (const std::exception& error) {
        response = Response{};
        response.status = 500;
        response.body = std::string(R"({"error":{"code":"InternalError","message":"double: )") +
                        "unhandled exception\"}}";
        ::dprintf(2, "acas-double: unhandled exception in %s %s: %s\n", method, url,
                  error.what());
      }
    }
    if (response.drop) return MHD_NO;
    return queue(server, connection, response);
  }

  static void on_completed(void*, MHD_Connection*, void** context, MHD_RequestTerminationCode) {
    delete static_cast<Pending*>(*context);
    *context = nullptr;
  }
};

HttpServer::HttpServer(Handler handler, std::uint16_t port, std::optional<TlsFiles> tls,
                       std::uint64_t max_body_bytes)
    : handler_(std::move(handler)), max_body_bytes_(max_body_bytes), tls_(std::move(tls)) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                   MHD_USE_POLL | MHD_USE_ITC | MHD_USE_ERROR_LOG;
  std::vector<MHD_OptionItem> options;
  options.push_back({MHD_OPTION_SOCK_ADDR, 0, &address});
  options.push_back({MHD_OPTION_NOTIFY_COMPLETED,
                     reinterpret_cast<intptr_t>(&Impl::on_completed), nullptr});
  options.push_back({MHD_OPTION_CONNECTION_TIMEOUT, 0, nullptr});
  if (tls_) {
    if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
      throw std::runtime_error("this libmicrohttpd has no TLS support");
    }
    flags |= MHD_USE_TLS;
    options.push_back({MHD_OPTION_HTTPS_MEM_KEY, 0, const_cast<char*>(tls_->key_pem.c_str())});
    options.push_back(
        {MHD_OPTION_HTTPS_MEM_CERT, 0, const_cast<char*>(tls_->certificate_pem.c_str())});
  }
  options.push_back({MHD_OPTION_END, 0, nullptr});
  daemon_ = MHD_start_daemon(flags, port, nullptr, nullptr, &Impl::on_access, this,
                             MHD_OPTION_ARRAY, options.data(), MHD_OPTION_END);
  if (daemon_ == nullptr) {
    throw std::runtime_error("cannot listen on 127.0.0.1:" + std::to_string(port));
  }
  const MHD_DaemonInfo* info = MHD_get_daemon_info(daemon_, MHD_DAEMON_INFO_BIND_PORT);
  port_ = info != nullptr ? info->port : port;
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::stop() {
  stopping_ = true;
  if (daemon_ != nullptr) {
    MHD_stop_daemon(daemon_);
    daemon_ = nullptr;
  }
}

}  // namespace airlock::acas_double
