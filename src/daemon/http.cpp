#include "daemon/http.hpp"

#include <algorithm>

namespace airlock::daemon {
namespace {

std::vector<std::string_view> segments(std::string_view path) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  if (!path.empty() && path.front() == '/') start = 1;
  while (start <= path.size()) {
    const std::size_t slash = path.find('/', start);
    const std::size_t end = slash == std::string_view::npos ? path.size() : slash;
    out.push_back(path.substr(start, end - start));
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return out;
}

bool is_placeholder(std::string_view segment) {
  return segment.size() > 2 && segment.front() == '{' && segment.back() == '}';
}

// Whether `path` fits `pattern`; fills `params` when it does.
bool fits(std::string_view pattern, std::string_view path,
          std::map<std::string, std::string>* params) {
  const auto want = segments(pattern);
  const auto have = segments(path);
  if (want.size() != have.size()) return false;
  std::map<std::string, std::string> found;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (is_placeholder(want[i])) {
      // An empty segment never names anything ("/v1/sandboxes//exec").
      if (have[i].empty()) return false;
      found.emplace(std::string(want[i].substr(1, want[i].size() - 2)), std::string(have[i]));
    } else if (want[i] != have[i]) {
      return false;
    }
  }
  if (params) *params = std::move(found);
  return true;
}

}  // namespace

std::optional<std::string_view> HttpRequest::query_value(std::string_view name) const {
  auto found = query.find(std::string(name));
  if (found == query.end()) return std::nullopt;
  return std::string_view(found->second);
}

HttpResponse HttpResponse::json(int status, const json::Json& body) {
  HttpResponse response;
  response.status = status;
  response.content_type = "application/json";
  // Replacement keeps the daemon answering even if a guest's bytes ever reached a string field
  // unvalidated; the JSON layer carries non-UTF-8 streams as base64 before this point.
  response.body = body.dump(-1, ' ', false, json::Json::error_handler_t::replace);
  response.body.push_back('\n');
  return response;
}

HttpResponse HttpResponse::bytes(int status, std::string body) {
  HttpResponse response;
  response.status = status;
  response.content_type = "application/octet-stream";
  response.body = std::move(body);
  return response;
}

HttpResponse HttpResponse::streaming(int status, std::string content_type,
                                     std::function<void(const BodyWriter& write)> produce) {
  HttpResponse response;
  response.status = status;
  response.content_type = std::move(content_type);
  response.stream = std::move(produce);
  return response;
}

void RouteTable::add(Route route) {
  routes_.push_back(std::move(route));
}

RouteTable::Match RouteTable::match(std::string_view method, std::string_view path) const {
  Match match;
  for (const auto& route : routes_) {
    std::map<std::string, std::string> params;
    if (!fits(route.pattern, path, &params)) continue;
    if (route.method == method) {
      match.route = &route;
      match.params = std::move(params);
      match.allowed.clear();
      return match;
    }
    if (std::find(match.allowed.begin(), match.allowed.end(), route.method) ==
        match.allowed.end()) {
      match.allowed.push_back(route.method);
    }
  }
  return match;
}

}  // namespace airlock::daemon
