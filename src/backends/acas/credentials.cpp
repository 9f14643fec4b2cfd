#include "backends/acas/credentials.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <fstream>
#include <iomanip>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "airlock/errors.hpp"

extern char** environ;

namespace airlock::acas {

// Tests serve the token endpoint over plain http when TLS cannot be had; never declared in a
// header, so no host reaches it.
namespace internal {
std::shared_ptr<TokenCredential> environment_client_secret_credential_allowing_http(
    CredentialEnvironment env);
std::shared_ptr<TokenCredential> workload_identity_credential_allowing_http(
    CredentialEnvironment env);
}  // namespace internal

// A namespace of its own: the backend's sources are compiled in unity batches, and these
// helpers must not meet another file's of the same name.
namespace credentials_impl {
namespace {

using SystemClock = std::chrono::system_clock;
using SteadyClock = std::chrono::steady_clock;
using json = nlohmann::json;

constexpr const char* kDefaultAuthority = "https://login.microsoftonline.com";
constexpr const char* kDefaultImdsHost = "http://169.254.169.254";
// An error answer from a token endpoint carries error/error_description only; past this many
// characters it is cut, so a misbehaving endpoint cannot fill the logs.
constexpr std::size_t kMaxLoggedBody = 300;
// Token answers are a few kilobytes; anything far larger is not a token answer.
constexpr std::uint64_t kMaxTokenAnswerBytes = 1u << 20;
// How long IMDS gets to show that it exists at all before managed identity is unavailable.
constexpr auto kImdsProbeTimeout = std::chrono::seconds(1);
constexpr int kImdsMaxAttempts = 5;
constexpr auto kImdsFirstRetryPause = std::chrono::milliseconds(200);

// ---- small helpers ---------------------------------------------------------------------------

std::optional<std::string> nonempty(const CredentialEnvironment& env, std::string_view name) {
  if (!env.variable) return std::nullopt;
  std::optional<std::string> value = env.variable(name);
  if (!value || value->empty()) return std::nullopt;
  return value;
}

std::string trim(std::string_view text) {
  const auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
  return std::string(text);
}

std::string without_trailing_slashes(std::string url) {
  while (!url.empty() && url.back() == '/') url.pop_back();
  return url;
}

// "https://host:port" of a URL, for details: never a path's secrets or a query.
std::string url_host(std::string_view url) {
  const std::size_t scheme = url.find("://");
  const std::size_t start = scheme == std::string_view::npos ? 0 : scheme + 3;
  const std::size_t end = url.find_first_of("/?#", start);
  return std::string(url.substr(0, end == std::string_view::npos ? url.size() : end));
}

bool starts_with_ci(std::string_view text, std::string_view prefix) {
  if (text.size() < prefix.size()) return false;
  for (std::size_t i = 0; i < prefix.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(text[i])) !=
        std::tolower(static_cast<unsigned char>(prefix[i]))) {
      return false;
    }
  }
  return true;
}

// Removes every occurrence of the values a credential holds from text bound for a log, in case
// an endpoint echoes what it was sent (as sent, or form-encoded as the request carried it).
std::string scrub(std::string text, const std::vector<std::string>& secrets) {
  const auto remove = [&text](const std::string& value) {
    if (value.size() < 4) return;
    for (std::size_t at = text.find(value); at != std::string::npos; at = text.find(value, at)) {
      text.replace(at, value.size(), "[redacted]");
    }
  };
  for (const std::string& secret : secrets) {
    remove(secret);
    remove(http::url_encode(secret));
  }
  return text;
}

std::string capped(std::string text) {
  if (text.size() > kMaxLoggedBody) {
    text.resize(kMaxLoggedBody);
    text += "…";
  }
  return text;
}

// What an error answer says, for a log: error and error_description when it is the usual
// JSON, else the text itself; cut and scrubbed either way.
std::string error_summary(const std::string& body, const std::vector<std::string>& secrets) {
  std::string summary;
  const json parsed = json::parse(body, nullptr, false);
  if (parsed.is_object()) {
    const auto text_of = [&](const char* key) -> std::string {
      const auto it = parsed.find(key);
      if (it == parsed.end()) return {};
      if (it->is_string()) return it->get<std::string>();
      if (it->is_object()) {  // IMDS and MSI nest {"error": {"code", "message"}} at times
        return it->dump();
      }
      return {};
    };
    const std::string error = text_of("error");
    const std::string description = text_of("error_description");
    summary = error.empty() && description.empty() ? body : error + ": " + description;
  } else {
    summary = body;
  }
  return capped(scrub(std::move(summary), secrets));
}

// A lifetime or an epoch that may arrive as a JSON number or as a string of digits.
std::optional<long long> integer_field(const json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end()) return std::nullopt;
  if (it->is_number_integer()) return it->get<long long>();
  if (it->is_number_float()) return static_cast<long long>(it->get<double>());
  if (it->is_string()) {
    const std::string text = trim(it->get<std::string>());
    if (text.empty() || text.size() > 18) return std::nullopt;
    if (!std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return std::nullopt;
    }
    return std::stoll(text);
  }
  return std::nullopt;
}

std::optional<std::string> string_field(const json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end() || !it->is_string() || it->get_ref<const std::string&>().empty()) {
    return std::nullopt;
  }
  return it->get<std::string>();
}

SystemClock::time_point from_epoch(long long seconds) {
  return SystemClock::time_point(std::chrono::seconds(seconds));
}

// The token endpoint's resource form of a scope: managed identity and IMDS speak v1
// ("https://dynamicsessions.io"), not v2 scopes.
std::string resource_of(std::string_view scope) {
  constexpr std::string_view suffix = "/.default";
  if (scope.size() >= suffix.size() && scope.substr(scope.size() - suffix.size()) == suffix) {
    scope.remove_suffix(suffix.size());
  }
  return std::string(scope);
}

// Only the characters a scope URI uses: the scope reaches an endpoint's query and the CLI's
// argument vector, and neither should see anything else.
void check_scope(std::string_view scope) {
  const bool ok =
      !scope.empty() && scope.front() != '-' && std::all_of(scope.begin(), scope.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' ||
               c == ':' || c == '/';
      });
  if (!ok) throw InvalidArgument("the token scope is not a scope URI");
}

// Converts the HTTP layer's failures into the credential's: a missed deadline is the caller's
// Timeout; anything else a BackendError naming what could not be reached.
[[noreturn]] void rethrow_transport(const http::TransportError& error, const std::string& what) {
  if (dynamic_cast<const http::DeadlineExceeded*>(&error) != nullptr) {
    throw Timeout(what + " did not answer before the deadline");
  }
  throw BackendError(what + " could not be reached", error.what());
}

http::Response perform(const CredentialEnvironment& env, const http::Request& request,
                       const std::string& what) {
  if (!env.client)
    throw BackendError(what + " has no HTTP client", "CredentialEnvironment.client is null");
  try {
    return env.client->perform(request);
  } catch (const http::TransportError& error) {
    rethrow_transport(error, what);
  } catch (const std::invalid_argument& error) {
    throw BackendError(what + " has a URL the HTTP client refuses", error.what());
  }
}

// ---- the authority -----------------------------------------------------------------------

std::string authority_host(const CredentialEnvironment& env, bool allow_http_authority) {
  const std::optional<std::string> configured = nonempty(env, "AZURE_AUTHORITY_HOST");
  std::string host = without_trailing_slashes(configured.value_or(kDefaultAuthority));
  if (!starts_with_ci(host, "https://") &&
      !(allow_http_authority && starts_with_ci(host, "http://"))) {
    throw BackendError("AZURE_AUTHORITY_HOST must be an https URL",
                       "AZURE_AUTHORITY_HOST is '" + capped(host) + "'");
  }
  return host;
}

// A tenant is a GUID or a domain name; anything else would change the token URL's path.
void check_tenant(const std::string& tenant) {
  const bool ok = std::all_of(tenant.begin(), tenant.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-';
  });
  if (!ok)
    throw BackendError("AZURE_TENANT_ID is not a tenant id",
                       "AZURE_TENANT_ID has characters a tenant id does not");
}

// ---- the AAD v2 token endpoint (client secret, client assertion) ---------------------------

struct TokenEndpointCall {
  std::string url;
  std::vector<std::pair<std::string, std::string>> form;
  std::vector<std::string> secrets;  // scrubbed from anything logged
  std::string refused_message;       // model-safe: what the endpoint refused
};

AccessToken post_for_token(const CredentialEnvironment& env, const TokenEndpointCall& call,
                           SteadyClock::time_point deadline) {
  http::Request request;
  request.method = "POST";
  request.url = call.url;
  request.headers = {{"Content-Type", "application/x-www-form-urlencoded"},
                     {"Accept", "application/json"}};
  request.body = http::query_string(call.form);
  request.deadline = deadline;
  request.max_response_bytes = kMaxTokenAnswerBytes;

  const SystemClock::time_point asked = SystemClock::now();
  const http::Response response = perform(env, request, "the Azure token endpoint");
  const std::string where = "POST " + url_host(call.url);
  if (response.status != 200) {
    const std::string summary = error_summary(response.body, call.secrets);
    throw BackendError(call.refused_message,
                       where + " answered " + std::to_string(response.status) + ": " + summary,
                       BackendError::ProviderResponse{response.status, summary});
  }
  const json answer = json::parse(response.body, nullptr, false);
  std::optional<std::string> token;
  std::optional<long long> expires_in;
  if (answer.is_object()) {
    token = string_field(answer, "access_token");
    expires_in = integer_field(answer, "expires_in");
  }
  if (!token || !expires_in) {
    // The body may hold a token beside whatever is malformed: it is never quoted.
    throw BackendError("the Azure token endpoint's answer is not a token",
                       where + " answered 200 without access_token and expires_in");
  }
  return AccessToken{std::move(*token), asked + std::chrono::seconds(*expires_in)};
}

std::string token_url(const std::string& authority, const std::string& tenant) {
  return authority + "/" + tenant + "/oauth2/v2.0/token";
}

// ---- 1. environment client secret ---------------------------------------------------------

class ClientSecretCredential final : public TokenCredential {
 public:
  ClientSecretCredential(CredentialEnvironment env, bool allow_http_authority)
      : env_(std::move(env)), allow_http_authority_(allow_http_authority) {}

  AccessToken get_token(std::string_view scope, SteadyClock::time_point deadline) override {
    const auto tenant = nonempty(env_, "AZURE_TENANT_ID");
    const auto client = nonempty(env_, "AZURE_CLIENT_ID");
    const auto secret = nonempty(env_, "AZURE_CLIENT_SECRET");
    if (!tenant || !client || !secret) {
      throw CredentialUnavailable(
          "AZURE_TENANT_ID, AZURE_CLIENT_ID and AZURE_CLIENT_SECRET are not all set");
    }
    check_scope(scope);
    check_tenant(*tenant);
    TokenEndpointCall call;
    call.url = token_url(authority_host(env_, allow_http_authority_), *tenant);
    call.form = {{"client_id", *client},
                 {"client_secret", *secret},
                 {"scope", std::string(scope)},
                 {"grant_type", "client_credentials"}};
    call.secrets = {*secret};
    call.refused_message = "the Azure token endpoint refused the client secret";
    return post_for_token(env_, call, deadline);
  }

  std::string name() const override { return "environment client secret"; }

 private:
  CredentialEnvironment env_;
  bool allow_http_authority_;
};

// ---- 2. workload identity -----------------------------------------------------------------

class WorkloadIdentityCredential final : public TokenCredential {
 public:
  WorkloadIdentityCredential(CredentialEnvironment env, bool allow_http_authority)
      : env_(std::move(env)), allow_http_authority_(allow_http_authority) {}

  AccessToken get_token(std::string_view scope, SteadyClock::time_point deadline) override {
    const auto tenant = nonempty(env_, "AZURE_TENANT_ID");
    const auto client = nonempty(env_, "AZURE_CLIENT_ID");
    const auto file = nonempty(env_, "AZURE_FEDERATED_TOKEN_FILE");
    if (!tenant || !client || !file) {
      throw CredentialUnavailable(
          "AZURE_TENANT_ID, AZURE_CLIENT_ID and AZURE_FEDERATED_TOKEN_FILE are not all set");
    }
    check_scope(scope);
    check_tenant(*tenant);
    // Read on every request: the platform rotates the projected token in place.
    const std::string assertion = read_assertion(*file);
    TokenEndpointCall call;
    call.url = token_url(authority_host(env_, allow_http_authority_), *tenant);
    call.form = {
        {"client_id", *client},
        {"scope", std::string(scope)},
        {"grant_type", "client_credentials"},
        {"client_assertion_type", "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"},
        {"client_assertion", assertion}};
    call.secrets = {assertion};
    call.refused_message = "the Azure token endpoint refused the federated token";
    return post_for_token(env_, call, deadline);
  }

  std::string name() const override { return "workload identity"; }

 private:
  static std::string read_assertion(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      throw BackendError("the federated token file cannot be read",
                         "AZURE_FEDERATED_TOKEN_FILE " + path + ": " + std::strerror(errno));
    }
    std::ostringstream content;
    content << in.rdbuf();
    std::string assertion = trim(content.str());
    if (assertion.empty()) {
      throw BackendError("the federated token file is empty",
                         "AZURE_FEDERATED_TOKEN_FILE " + path + " is empty");
    }
    return assertion;
  }

  CredentialEnvironment env_;
  bool allow_http_authority_;
};

// ---- 3. managed identity ------------------------------------------------------------------

// The identity endpoints' answer: access_token and expires_on (epoch seconds); expires_in is
// accepted when expires_on is not an epoch (some App Service versions send a date).
AccessToken managed_identity_token(const http::Response& response, const std::string& where,
                                   SystemClock::time_point asked) {
  const json answer = json::parse(response.body, nullptr, false);
  if (answer.is_object()) {
    std::optional<std::string> token = string_field(answer, "access_token");
    if (token) {
      if (const auto on = integer_field(answer, "expires_on")) {
        return AccessToken{std::move(*token), from_epoch(*on)};
      }
      if (const auto in = integer_field(answer, "expires_in")) {
        return AccessToken{std::move(*token), asked + std::chrono::seconds(*in)};
      }
    }
  }
  throw BackendError("the managed identity endpoint's answer is not a token",
                     where + " answered 200 without access_token and expires_on");
}

std::string with_query(const std::string& base, const std::string& query) {
  return base + (base.find('?') == std::string::npos ? "?" : "&") + query;
}

class ManagedIdentityCredential final : public TokenCredential {
 public:
  explicit ManagedIdentityCredential(CredentialEnvironment env) : env_(std::move(env)) {}

  AccessToken get_token(std::string_view scope, SteadyClock::time_point deadline) override {
    check_scope(scope);
    const auto endpoint = nonempty(env_, "IDENTITY_ENDPOINT");
    const auto header = nonempty(env_, "IDENTITY_HEADER");
    if (endpoint && header) return from_identity_endpoint(*endpoint, *header, scope, deadline);
    return from_imds(scope, deadline);
  }

  std::string name() const override { return "managed identity"; }

 private:
  std::vector<std::pair<std::string, std::string>> query(const char* api_version,
                                                         std::string_view scope) const {
    std::vector<std::pair<std::string, std::string>> pairs = {{"api-version", api_version},
                                                              {"resource", resource_of(scope)}};
    if (const auto client = nonempty(env_, "AZURE_CLIENT_ID"))
      pairs.emplace_back("client_id", *client);
    return pairs;
  }

  // App Service and Container Apps: the platform's local endpoint, authenticated by a header
  // only the process's environment knows.
  AccessToken from_identity_endpoint(const std::string& endpoint, const std::string& secret_header,
                                     std::string_view scope, SteadyClock::time_point deadline) {
    http::Request request;
    request.url = with_query(endpoint, http::query_string(query("2019-08-01", scope)));
    request.headers = {{"X-IDENTITY-HEADER", secret_header}, {"Accept", "application/json"}};
    request.deadline = deadline;
    request.max_response_bytes = kMaxTokenAnswerBytes;
    const SystemClock::time_point asked = SystemClock::now();
    const http::Response response = perform(env_, request, "the managed identity endpoint");
    const std::string where = "GET " + url_host(endpoint);
    if (response.status != 200) {
      const std::string summary = error_summary(response.body, {secret_header});
      throw BackendError("the managed identity endpoint refused the token request",
                         where + " answered " + std::to_string(response.status) + ": " + summary,
                         BackendError::ProviderResponse{response.status, summary});
    }
    return managed_identity_token(response, where, asked);
  }

  // IMDS, on a VM or an AKS node. Whether it exists is learned once by a short probe (a request
  // without the Metadata header, which IMDS answers at once with 400): a host without IMDS
  // must not cost every caller its whole deadline.
  AccessToken from_imds(std::string_view scope, SteadyClock::time_point deadline) {
    const std::string host = without_trailing_slashes(
        nonempty(env_, "AZURE_POD_IDENTITY_AUTHORITY_HOST").value_or(kDefaultImdsHost));
    const std::string url =
        host + "/metadata/identity/oauth2/token?" + http::query_string(query("2018-02-01", scope));
    probe_imds(url, deadline);

    http::Request request;
    request.url = url;
    request.headers = {{"Metadata", "true"}, {"Accept", "application/json"}};
    request.deadline = deadline;
    request.max_response_bytes = kMaxTokenAnswerBytes;
    const std::string where = "GET " + url_host(host);
    // IMDS answers 404 and 410 while it is being updated, and 429 and 5xx under load: those are
    // asked again, with a growing pause, while the deadline leaves room.
    auto pause = kImdsFirstRetryPause;
    for (int attempt = 1;; ++attempt) {
      const SystemClock::time_point asked = SystemClock::now();
      const http::Response response = perform(env_, request, "the IMDS endpoint");
      if (response.status == 200) return managed_identity_token(response, where, asked);
      if (response.status == 400 ||
          (response.status == 403 && response.body.find("unreachable") != std::string::npos)) {
        // 400: no identity (or not the one named) is assigned to this host. 403 "unreachable":
        // a local proxy (Docker Desktop) answering for an IMDS that is not there.
        throw CredentialUnavailable("IMDS at " + url_host(host) +
                                    " has no managed identity assigned (or not the one "
                                    "AZURE_CLIENT_ID names)");
      }
      const bool transient = response.status == 404 || response.status == 410 ||
                             response.status == 429 || response.status >= 500;
      if (!transient || attempt >= kImdsMaxAttempts || SteadyClock::now() + pause >= deadline) {
        const std::string summary = error_summary(response.body, {});
        throw BackendError("the IMDS endpoint refused the token request",
                           where + " answered " + std::to_string(response.status) + " (attempt " +
                               std::to_string(attempt) + "): " + summary,
                           BackendError::ProviderResponse{response.status, summary});
      }
      std::this_thread::sleep_for(pause);
      pause *= 2;
    }
  }

  // The probe's answer must be IMDS's own: a JSON error object. A proxy or a sandbox's egress
  // filter answering for the link-local address (403 "denied destination", an HTML page) means
  // no IMDS here, and the chain moves on to the Azure CLI.
  void probe_imds(const std::string& url, SteadyClock::time_point deadline) {
    {
      std::lock_guard lock(mutex_);
      if (imds_seen_) return;
    }
    http::Request probe;
    probe.url = url;
    probe.deadline = std::min(deadline, SteadyClock::now() + kImdsProbeTimeout);
    probe.max_response_bytes = 64u << 10;
    try {
      if (!env_.client) throw http::TransportError("no HTTP client");
      const http::Response answer = env_.client->perform(probe);
      const auto parsed = nlohmann::json::parse(answer.body, nullptr, false);
      if (answer.status != 400 || !parsed.is_object() || !parsed.contains("error")) {
        throw CredentialUnavailable("what answered at " + url_host(url) +
                                    " is not IMDS (HTTP " + std::to_string(answer.status) + ")");
      }
    } catch (const http::TransportError& error) {
      throw CredentialUnavailable("no IMDS endpoint answered at " + url_host(url) + " (" +
                                  error.what() + ")");
    } catch (const std::invalid_argument& error) {
      throw CredentialUnavailable(std::string("the IMDS URL is refused by the HTTP client (") +
                                  error.what() + ")");
    }
    std::lock_guard lock(mutex_);
    imds_seen_ = true;
  }

  CredentialEnvironment env_;
  std::mutex mutex_;
  bool imds_seen_ = false;
};

// ---- 4. the Azure CLI -----------------------------------------------------------------------

constexpr std::size_t kMaxCliStdout = 1u << 20;
constexpr std::size_t kMaxCliStderr = 64u << 10;

std::optional<std::string> find_program(const std::string& program,
                                        const std::optional<std::string>& path) {
  const auto executable = [](const std::string& file) {
    struct stat info {};
    return ::stat(file.c_str(), &info) == 0 && S_ISREG(info.st_mode) &&
           ::access(file.c_str(), X_OK) == 0;
  };
  if (program.find('/') != std::string::npos) {
    return executable(program) ? std::optional(program) : std::nullopt;
  }
  const std::string search = path.value_or("/usr/local/bin:/usr/bin:/bin");
  std::string_view dirs = search;
  while (true) {
    const std::size_t colon = dirs.find(':');
    const std::string dir(dirs.substr(0, colon));
    // An empty entry (or a relative one) would run whatever `az` the working directory holds.
    if (!dir.empty() && dir.front() == '/') {
      const std::string candidate = dir + "/" + program;
      if (executable(candidate)) return candidate;
    }
    if (colon == std::string_view::npos) break;
    dirs.remove_prefix(colon + 1);
  }
  return std::nullopt;
}

struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int value) : fd(value) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  void reset() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

struct CliRun {
  int exit_status = -1;  // the exit code, or 128+signal
  std::string out;
  std::string err;
  bool stdout_too_large = false;
};

// Kills the CLI's whole process group (az is a script that starts Python, which may start
// more) and reaps the leader.
void kill_and_reap(pid_t pid) {
  ::kill(-pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
}

CliRun run_cli(const std::string& program, const std::vector<std::string>& args,
               SteadyClock::time_point deadline) {
  int out_pipe[2];
  int err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) {
    throw BackendError("the Azure CLI could not be started",
                       std::system_error(errno, std::generic_category(), "pipe2"));
  }
  Fd out_read(out_pipe[0]), out_write(out_pipe[1]);
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    throw BackendError("the Azure CLI could not be started",
                       std::system_error(errno, std::generic_category(), "pipe2"));
  }
  Fd err_read(err_pipe[0]), err_write(err_pipe[1]);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_write.fd, 1);
  posix_spawn_file_actions_adddup2(&actions, err_write.fd, 2);
  // A fixed working directory: the CLI must not pick up configuration from the caller's.
  posix_spawn_file_actions_addchdir_np(&actions, "/");
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  // Its own process group, so that a deadline kills everything it started.
  posix_spawnattr_setpgroup(&attributes, 0);
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  posix_spawnattr_setsigdefault(&attributes, &defaults);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attributes, &none);
  posix_spawnattr_setflags(&attributes,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);

  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(program.c_str()));
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);

  pid_t pid = -1;
  const int spawned =
      ::posix_spawn(&pid, program.c_str(), &actions, &attributes, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  if (spawned != 0) {
    throw BackendError(
        "the Azure CLI could not be started",
        std::system_error(spawned, std::generic_category(), "posix_spawn " + program));
  }
  out_write.reset();
  err_write.reset();

  CliRun run;
  bool out_open = true;
  bool err_open = true;
  char buffer[8192];
  while (out_open || err_open) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - SteadyClock::now());
    if (left.count() <= 0) {
      kill_and_reap(pid);
      throw Timeout("the Azure CLI did not answer before the deadline", true);
    }
    pollfd fds[2] = {{out_read.fd, POLLIN, 0}, {err_read.fd, POLLIN, 0}};
    if (!out_open) fds[0].fd = -1;
    if (!err_open) fds[1].fd = -1;
    const int ready = ::poll(fds, 2, static_cast<int>(std::min<long long>(left.count(), 1000)));
    if (ready < 0 && errno != EINTR) {
      const int error = errno;
      kill_and_reap(pid);
      throw BackendError("the Azure CLI could not be read",
                         std::system_error(error, std::generic_category(), "poll"));
    }
    for (int i = 0; i < 2 && ready > 0; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      const ssize_t got = ::read(fds[i].fd, buffer, sizeof buffer);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        (i == 0 ? out_open : err_open) = false;
        continue;
      }
      std::string& sink = i == 0 ? run.out : run.err;
      const std::size_t cap = i == 0 ? kMaxCliStdout : kMaxCliStderr;
      if (sink.size() + static_cast<std::size_t>(got) > cap) {
        if (i == 0) {
          kill_and_reap(pid);
          run.stdout_too_large = true;
          return run;
        }
        continue;  // stderr past its cap is read and dropped, so the CLI never blocks on it
      }
      sink.append(buffer, static_cast<std::size_t>(got));
    }
  }

  // Both pipes closed: the CLI is exiting; wait for it within the deadline.
  while (true) {
    int status = 0;
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) {
      run.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return run;
    }
    if (done < 0 && errno != EINTR) {
      throw BackendError("the Azure CLI could not be waited for",
                         std::system_error(errno, std::generic_category(), "waitpid"));
    }
    if (SteadyClock::now() >= deadline) {
      kill_and_reap(pid);
      throw Timeout("the Azure CLI did not answer before the deadline", true);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// "2026-12-02 03:04:05.123456" in the host's local time, as older CLIs write expiresOn.
std::optional<SystemClock::time_point> parse_local_time(const std::string& text) {
  std::tm parts{};
  std::istringstream in(text);
  in >> std::get_time(&parts, "%Y-%m-%d %H:%M:%S");
  if (in.fail()) return std::nullopt;
  parts.tm_isdst = -1;
  const std::time_t seconds = std::mktime(&parts);
  if (seconds == static_cast<std::time_t>(-1)) return std::nullopt;
  return SystemClock::from_time_t(seconds);
}

class AzureCliCredential final : public TokenCredential {
 public:
  explicit AzureCliCredential(CredentialEnvironment env) : env_(std::move(env)) {}

  AccessToken get_token(std::string_view scope, SteadyClock::time_point deadline) override {
    check_scope(scope);
    const std::optional<std::string> program =
        find_program(env_.az_program, env_.variable ? env_.variable("PATH") : std::nullopt);
    if (!program)
      throw CredentialUnavailable("the Azure CLI (" + env_.az_program + ") is not on PATH");

    const CliRun run =
        run_cli(*program,
                {"account", "get-access-token", "--scope", std::string(scope), "--output", "json"},
                deadline);
    if (run.stdout_too_large) {
      throw BackendError("the Azure CLI's answer is not a token",
                         "az account get-access-token wrote more than " +
                             std::to_string(kMaxCliStdout) + " bytes");
    }
    if (run.exit_status != 0) {
      if (run.err.find("az login") != std::string::npos) {
        throw CredentialUnavailable("the Azure CLI is not logged in (run az login)");
      }
      throw BackendError("the Azure CLI could not get a token",
                         "az account get-access-token exited " + std::to_string(run.exit_status) +
                             ": " + capped(trim(run.err)));
    }
    return parse_answer(run.out);
  }

  std::string name() const override { return "Azure CLI"; }

 private:
  static AccessToken parse_answer(const std::string& out) {
    const json answer = json::parse(out, nullptr, false);
    if (answer.is_object()) {
      std::optional<std::string> token = string_field(answer, "accessToken");
      if (token) {
        // expires_on is an epoch and has no time-zone question: preferred when present.
        if (const auto on = integer_field(answer, "expires_on")) {
          return AccessToken{std::move(*token), from_epoch(*on)};
        }
        if (const auto text = string_field(answer, "expiresOn")) {
          if (const auto on = parse_local_time(*text)) return AccessToken{std::move(*token), *on};
        }
      }
    }
    throw BackendError(
        "the Azure CLI's answer is not a token",
        "az account get-access-token printed no accessToken with expires_on or expiresOn");
  }

  CredentialEnvironment env_;
};

// ---- the chain ------------------------------------------------------------------------------

class ChainCredential final : public TokenCredential {
 public:
  explicit ChainCredential(std::vector<std::shared_ptr<TokenCredential>> members)
      : members_(std::move(members)) {}

  AccessToken get_token(std::string_view scope, SteadyClock::time_point deadline) override {
    if (std::shared_ptr<TokenCredential> chosen = settled()) {
      return chosen->get_token(scope, deadline);
    }
    std::string reasons;
    for (const std::shared_ptr<TokenCredential>& member : members_) {
      try {
        AccessToken token = member->get_token(scope, deadline);
        settle(member);
        return token;
      } catch (const CredentialUnavailable& unavailable) {
        reasons += (reasons.empty() ? "" : "; ") + member->name() + ": " + unavailable.what();
      }
      // Anything else is a configured credential failing: it propagates and the chain stops.
    }
    throw CredentialUnavailable("no Azure credential is available on this host (" + reasons + ")");
  }

  std::string name() const override {
    if (std::shared_ptr<TokenCredential> chosen = settled()) return chosen->name();
    return "default Azure credential chain";
  }

 private:
  std::shared_ptr<TokenCredential> settled() const {
    std::lock_guard lock(mutex_);
    return settled_;
  }
  void settle(const std::shared_ptr<TokenCredential>& member) {
    std::lock_guard lock(mutex_);
    if (!settled_) {
      settled_ = member;
      spdlog::info("acas: Azure credentials from {}", member->name());
    }
  }

  std::vector<std::shared_ptr<TokenCredential>> members_;
  mutable std::mutex mutex_;
  std::shared_ptr<TokenCredential> settled_;
};

// ---- the cache ------------------------------------------------------------------------------

class CachedCredential final : public TokenCredential {
 public:
  explicit CachedCredential(std::shared_ptr<TokenCredential> inner) : inner_(std::move(inner)) {}

  AccessToken get_token(std::string_view scope, SteadyClock::time_point deadline) override {
    std::unique_lock lock(mutex_);
    Entry& entry = entries_[std::string(scope)];
    while (true) {
      if (entry.token && SystemClock::now() < entry.refresh_at) return *entry.token;
      if (!entry.refreshing) break;
      // Someone is already refreshing and the token in hand has not expired: no need to wait.
      if (still_valid(entry)) return *entry.token;
      // Another caller is refreshing this scope: its answer (or its failure) is ours too.
      const std::uint64_t generation = entry.generation;
      const bool finished =
          entry.done.wait_until(lock, deadline, [&] { return entry.generation != generation; });
      if (!finished) {
        if (still_valid(entry)) return *entry.token;
        throw Timeout("no Azure token was obtained before the deadline");
      }
      if (still_valid(entry)) return *entry.token;
      // The refresher ran out of its own deadline, which says nothing about ours: try again.
      if (entry.failure_was_timeout) continue;
      if (entry.failure) std::rethrow_exception(entry.failure);
    }

    entry.refreshing = true;
    lock.unlock();
    std::exception_ptr failure;
    std::optional<AccessToken> fresh;
    const SystemClock::time_point asked = SystemClock::now();
    try {
      fresh = inner_->get_token(scope, deadline);
    } catch (...) {
      failure = std::current_exception();
    }
    lock.lock();
    entry.refreshing = false;
    ++entry.generation;
    entry.failure = failure;
    entry.failure_was_timeout = is_timeout(failure);
    if (fresh) {
      entry.refresh_at = refresh_time(asked, fresh->expires_on);
      entry.token = std::move(fresh);
    }
    entry.done.notify_all();
    if (!failure) return *entry.token;
    if (still_valid(entry)) {
      spdlog::warn(
          "acas: refreshing the Azure token for {} failed; the cached token is used until "
          "it expires: {}",
          scope, describe(failure));
      return *entry.token;
    }
    std::rethrow_exception(failure);
  }

  std::string name() const override { return inner_->name(); }

 private:
  struct Entry {
    std::optional<AccessToken> token;
    SystemClock::time_point refresh_at{};
    bool refreshing = false;
    std::uint64_t generation = 0;
    std::exception_ptr failure;  // the last refresh's, for the callers that waited on it
    bool failure_was_timeout = false;
    std::condition_variable done;
  };

  static bool still_valid(const Entry& entry) {
    return entry.token && SystemClock::now() < entry.token->expires_on;
  }

  // Five minutes before expiry; a token living less than ten minutes at half its life.
  static SystemClock::time_point refresh_time(SystemClock::time_point obtained,
                                              SystemClock::time_point expires) {
    const auto lifetime = expires - obtained;
    if (lifetime < std::chrono::minutes(10)) return obtained + lifetime / 2;
    return expires - std::chrono::minutes(5);
  }

  static bool is_timeout(const std::exception_ptr& failure) {
    if (!failure) return false;
    try {
      std::rethrow_exception(failure);
    } catch (const Timeout&) {
      return true;
    } catch (...) {
      return false;
    }
  }

  static std::string describe(const std::exception_ptr& failure) {
    try {
      std::rethrow_exception(failure);
    } catch (const BackendError& error) {
      return std::string(error.what()) +
             (error.detail().empty() ? "" : " (" + error.detail() + ")");
    } catch (const std::exception& error) {
      return error.what();
    } catch (...) {
      return "an unknown failure";
    }
  }

  std::shared_ptr<TokenCredential> inner_;
  std::mutex mutex_;
  std::map<std::string, Entry, std::less<>> entries_;
};

}  // namespace
}  // namespace credentials_impl

// ---- public ---------------------------------------------------------------------------------

CredentialEnvironment CredentialEnvironment::from_process(std::string ca_file) {
  CredentialEnvironment env;
  env.variable = [](std::string_view name) -> std::optional<std::string> {
    const char* value = std::getenv(std::string(name).c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
  // Plain http is allowed for the identity endpoints (IMDS, the platform's local endpoint); the
  // token endpoint's https is the credentials' own check.
  env.client = std::make_shared<http::Client>(http::ClientOptions{std::move(ca_file), true});
  return env;
}

std::shared_ptr<TokenCredential> environment_client_secret_credential(CredentialEnvironment env) {
  return std::make_shared<credentials_impl::ClientSecretCredential>(std::move(env), false);
}
std::shared_ptr<TokenCredential> workload_identity_credential(CredentialEnvironment env) {
  return std::make_shared<credentials_impl::WorkloadIdentityCredential>(std::move(env), false);
}
std::shared_ptr<TokenCredential> managed_identity_credential(CredentialEnvironment env) {
  return std::make_shared<credentials_impl::ManagedIdentityCredential>(std::move(env));
}
std::shared_ptr<TokenCredential> azure_cli_credential(CredentialEnvironment env) {
  return std::make_shared<credentials_impl::AzureCliCredential>(std::move(env));
}

std::shared_ptr<TokenCredential> default_credential_chain(CredentialEnvironment env) {
  return std::make_shared<credentials_impl::ChainCredential>(
      std::vector<std::shared_ptr<TokenCredential>>{
          environment_client_secret_credential(env), workload_identity_credential(env),
          managed_identity_credential(env), azure_cli_credential(env)});
}

std::shared_ptr<TokenCredential> cached_credential(std::shared_ptr<TokenCredential> inner) {
  if (!inner) throw InvalidArgument("cached_credential needs a credential to wrap");
  return std::make_shared<credentials_impl::CachedCredential>(std::move(inner));
}

namespace internal {
std::shared_ptr<TokenCredential> environment_client_secret_credential_allowing_http(
    CredentialEnvironment env) {
  return std::make_shared<credentials_impl::ClientSecretCredential>(std::move(env), true);
}
std::shared_ptr<TokenCredential> workload_identity_credential_allowing_http(
    CredentialEnvironment env) {
  return std::make_shared<credentials_impl::WorkloadIdentityCredential>(std::move(env), true);
}
}  // namespace internal

}  // namespace airlock::acas
