#include "egress/http_response.hpp"

namespace airlock::egress {
namespace {

std::string_view status_text(int status) {
  switch (status) {
    case 400:
      return "Bad Request";
    case 403:
      return "Forbidden";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 431:
      return "Request Header Fields Too Large";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    default:
      return "Error";
  }
}

std::string_view guest_text(EgressReason reason) {
  switch (reason) {
    case EgressReason::malformed_request:
      return "the request is not a well-formed 'CONNECT host:port HTTP/1.1'";
    case EgressReason::method_not_allowed:
      return "only CONNECT is supported; use the proxy as an HTTPS (tunnelling) proxy";
    case EgressReason::header_timeout:
      return "the request head did not arrive in time";
    case EgressReason::header_too_large:
      return "the request head is too large";
    case EgressReason::host_not_allowed:
      return "the host is not on this sandbox's allowlist";
    case EgressReason::port_not_allowed:
      return "the port is not allowed for this sandbox";
    case EgressReason::nonglobal_address:
      return "the host resolves to an address that is not globally routable";
    case EgressReason::over_capacity:
      return "too many open connections; try again later";
    case EgressReason::resolution_failed:
      return "the host name could not be resolved";
    case EgressReason::resolution_timeout:
      return "the host name did not resolve in time";
    case EgressReason::dial_failed:
      return "the destination could not be reached";
    case EgressReason::dial_timeout:
      return "the destination did not answer in time";
    case EgressReason::allowed:
    case EgressReason::client_closed:
    case EgressReason::listener_closed:
      break;
  }
  return "the request was refused";
}

}  // namespace

std::string error_response(int status, EgressReason reason, std::string_view detail) {
  std::string body = "airlock egress proxy: ";
  body += guest_text(reason);
  if (reason == EgressReason::malformed_request && !detail.empty()) {
    body += " (";
    body += detail;
    body += ")";
  }
  body += "\n";
  std::string response = "HTTP/1.1 " + std::to_string(status) + " ";
  response += status_text(status);
  response += "\r\n";
  if (status == 405) response += "Allow: CONNECT\r\n";
  response +=
      "Content-Type: text/plain; charset=utf-8\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\nConnection: close\r\n\r\n" + body;
  return response;
}

}  // namespace airlock::egress
