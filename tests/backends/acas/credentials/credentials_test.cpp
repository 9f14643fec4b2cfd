// The acas backend's credential chain against endpoints served in this process: the AAD token
// endpoint over TLS, IMDS and the platform's managed identity endpoint over plain http, and a
// fake `az` first on PATH.
#include "backends/acas/credentials.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <signal.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "airlock/backends/acas.hpp"
#include "airlock/errors.hpp"
#include "backends/acas/http.hpp"

namespace airlock::acas::internal {
// Defined in credentials.cpp, declared only here.
std::shared_ptr<TokenCredential> environment_client_secret_credential_allowing_http(
    CredentialEnvironment env);
}  // namespace airlock::acas::internal

namespace {

namespace fs = std::filesystem;
using namespace airlock::acas;
using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;
using json = nlohmann::json;

constexpr const char* kScope = "https://dynamicsessions.io/.default";
// Characters a form encodes, so that an echo of the encoded request is caught as well.
constexpr const char* kSecret = "s3cr3t+client/secret=value";
constexpr const char* kAssertion = "eyJhbGciOi.federated-assertion.sig";

SteadyClock::time_point in(std::chrono::milliseconds span) {
  return SteadyClock::now() + span;
}

std::string read_text(const fs::path& path) {
  std::ifstream file(path);
  std::ostringstream out;
  out << file.rdbuf();
  return out.str();
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::trunc) << text;
}

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "acas-cred-XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// ---- a small HTTP(S) server ------------------------------------------------------------------

struct Seen {
  std::string method;
  std::string path;
  std::map<std::string, std::string> query;    // decoded
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
};

struct Reply {
  unsigned status = 200;
  std::string body;
};

// Decodes an application/x-www-form-urlencoded body.
std::map<std::string, std::string> parse_form(const std::string& body) {
  const auto decode = [](std::string_view text) {
    std::string out;
    for (std::size_t i = 0; i < text.size(); ++i) {
      if (text[i] == '+') {
        out += ' ';
      } else if (text[i] == '%' && i + 2 < text.size()) {
        out += static_cast<char>(std::stoi(std::string(text.substr(i + 1, 2)), nullptr, 16));
        i += 2;
      } else {
        out += text[i];
      }
    }
    return out;
  };
  std::map<std::string, std::string> fields;
  std::string_view rest = body;
  while (!rest.empty()) {
    const std::size_t amp = rest.find('&');
    const std::string_view pair = rest.substr(0, amp);
    const std::size_t eq = pair.find('=');
    fields[decode(pair.substr(0, eq))] =
        eq == std::string_view::npos ? "" : decode(pair.substr(eq + 1));
    if (amp == std::string_view::npos) break;
    rest.remove_prefix(amp + 1);
  }
  return fields;
}

class TestServer {
 public:
  using Handler = std::function<Reply(const Seen&)>;

  // Plain http, or TLS with the PEM certificate and key given.
  explicit TestServer(Handler handler, std::string cert = {}, std::string key = {})
      : handler_(std::move(handler)), cert_(std::move(cert)), key_(std::move(key)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = 0;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    unsigned flags =
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ERROR_LOG;
    if (!cert_.empty()) flags |= MHD_USE_TLS;
    if (cert_.empty()) {
      daemon_ = MHD_start_daemon(flags, 0, nullptr, nullptr, &TestServer::dispatch, this,
                                 MHD_OPTION_SOCK_ADDR, &address, MHD_OPTION_NOTIFY_COMPLETED,
                                 &TestServer::completed, this, MHD_OPTION_END);
    } else {
      daemon_ = MHD_start_daemon(
          flags, 0, nullptr, nullptr, &TestServer::dispatch, this, MHD_OPTION_SOCK_ADDR, &address,
          MHD_OPTION_NOTIFY_COMPLETED, &TestServer::completed, this, MHD_OPTION_HTTPS_MEM_CERT,
          cert_.c_str(), MHD_OPTION_HTTPS_MEM_KEY, key_.c_str(), MHD_OPTION_END);
    }
    if (daemon_ == nullptr) throw std::runtime_error("MHD_start_daemon failed");
    port_ = MHD_get_daemon_info(daemon_, MHD_DAEMON_INFO_BIND_PORT)->port;
  }
  ~TestServer() {
    stopping_ = true;
    MHD_stop_daemon(daemon_);
  }

  std::string base() const {
    return std::string(cert_.empty() ? "http" : "https") + "://127.0.0.1:" + std::to_string(port_);
  }
  std::vector<Seen> seen() const {
    std::lock_guard lock(mutex_);
    return seen_;
  }
  std::size_t count() const {
    std::lock_guard lock(mutex_);
    return seen_.size();
  }
  // For a handler that plays a hung endpoint: true once the server is being torn down.
  bool stopping() const { return stopping_; }

 private:
  struct Upload {
    std::string body;
  };

  static MHD_Result collect(void* into, MHD_ValueKind, const char* key, const char* value) {
    auto* map = static_cast<std::map<std::string, std::string>*>(into);
    std::string name(key);
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    (*map)[name] = value == nullptr ? "" : value;
    return MHD_YES;
  }
  static MHD_Result collect_raw(void* into, MHD_ValueKind, const char* key, const char* value) {
    auto* map = static_cast<std::map<std::string, std::string>*>(into);
    (*map)[key] = value == nullptr ? "" : value;
    return MHD_YES;
  }

  static MHD_Result dispatch(void* self, MHD_Connection* connection, const char* url,
                             const char* method, const char*, const char* upload_data,
                             size_t* upload_size, void** state) {
    auto* server = static_cast<TestServer*>(self);
    if (*state == nullptr) {
      *state = new Upload;
      return MHD_YES;
    }
    auto* upload = static_cast<Upload*>(*state);
    if (*upload_size != 0) {
      upload->body.append(upload_data, *upload_size);
      *upload_size = 0;
      return MHD_YES;
    }
    Seen seen;
    seen.method = method;
    seen.path = url;
    seen.body = upload->body;
    MHD_get_connection_values(connection, MHD_GET_ARGUMENT_KIND, &TestServer::collect_raw,
                              &seen.query);
    MHD_get_connection_values(connection, MHD_HEADER_KIND, &TestServer::collect, &seen.headers);
    {
      std::lock_guard lock(server->mutex_);
      server->seen_.push_back(seen);
    }
    const Reply reply = server->handler_(seen);
    MHD_Response* response = MHD_create_response_from_buffer(
        reply.body.size(), const_cast<char*>(reply.body.data()), MHD_RESPMEM_MUST_COPY);
    MHD_add_response_header(response, "Content-Type", "application/json");
    const MHD_Result queued = MHD_queue_response(connection, reply.status, response);
    MHD_destroy_response(response);
    return queued;
  }

  static void completed(void*, MHD_Connection*, void** state, MHD_RequestTerminationCode) {
    delete static_cast<Upload*>(*state);
    *state = nullptr;
  }

  Handler handler_;
  std::string cert_;
  std::string key_;
  MHD_Daemon* daemon_ = nullptr;
  unsigned short port_ = 0;
  std::atomic<bool> stopping_{false};
  mutable std::mutex mutex_;
  std::vector<Seen> seen_;
};

// A self-signed certificate for 127.0.0.1, made once for the whole run.
struct Certificate {
  std::string cert_pem;
  std::string key_pem;
  fs::path cert_file;
};

const Certificate& certificate() {
  static TempDir dir;
  static const Certificate made = [] {
    Certificate c;
    c.cert_file = dir.path() / "cert.pem";
    const fs::path key = dir.path() / "key.pem";
    const std::string command = std::string(AIRLOCK_OPENSSL) +
                                " req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1"
                                " -nodes -days 2 -subj /CN=127.0.0.1"
                                " -addext subjectAltName=IP:127.0.0.1 -keyout " +
                                key.string() + " -out " + c.cert_file.string() + " >/dev/null 2>&1";
    if (std::system(command.c_str()) != 0) throw std::runtime_error("openssl req failed");
    c.cert_pem = read_text(c.cert_file);
    c.key_pem = read_text(key);
    return c;
  }();
  return made;
}

// A port nothing listens on: IMDS "absent" answers a connect with a refusal at once.
std::string closed_endpoint() {
  return "http://127.0.0.1:9";
}

// ---- the environment a credential sees ---------------------------------------------------

class FakeEnvironment {
 public:
  FakeEnvironment() {
    // Unless a test says otherwise, IMDS is absent and az is not on PATH.
    set("AZURE_POD_IDENTITY_AUTHORITY_HOST", closed_endpoint());
    set("PATH", empty_dir_.path().string());
  }
  void set(const std::string& name, const std::string& value) {
    std::lock_guard lock(values_->mutex);
    values_->map[name] = value;
  }
  void unset(const std::string& name) {
    std::lock_guard lock(values_->mutex);
    values_->map.erase(name);
  }
  CredentialEnvironment environment() const {
    CredentialEnvironment env;
    env.variable = [values = values_](std::string_view name) -> std::optional<std::string> {
      std::lock_guard lock(values->mutex);
      const auto it = values->map.find(std::string(name));
      if (it == values->map.end()) return std::nullopt;
      return it->second;
    };
    env.client =
        std::make_shared<http::Client>(http::ClientOptions{certificate().cert_file.string(), true});
    return env;
  }

 private:
  struct Values {
    std::mutex mutex;
    std::map<std::string, std::string> map;
  };
  std::shared_ptr<Values> values_ = std::make_shared<Values>();
  TempDir empty_dir_;
};

std::string token_answer(const std::string& token, long long expires_in = 3600,
                         bool as_string = false) {
  json answer = {{"token_type", "Bearer"}, {"access_token", token}};
  if (as_string) {
    answer["expires_in"] = std::to_string(expires_in);
  } else {
    answer["expires_in"] = expires_in;
  }
  return answer.dump();
}

long long epoch_in(std::chrono::seconds span) {
  return std::chrono::duration_cast<std::chrono::seconds>(
             (std::chrono::system_clock::now() + span).time_since_epoch())
      .count();
}

// A fake `az`: records its arguments one a line, then runs `body`.
fs::path fake_az(const fs::path& dir, const std::string& body) {
  const fs::path script = dir / "az";
  write_text(script, "#!/bin/sh\nfor a in \"$@\"; do echo \"$a\"; done > '" +
                         (dir / "argv").string() + "'\n" + body + "\n");
  fs::permissions(script, fs::perms::owner_all);
  return script;
}

// Captures everything logged through spdlog's default logger for a test's life.
class LogCapture {
 public:
  LogCapture() : previous_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(stream_);
    auto logger = std::make_shared<spdlog::logger>("capture", sink);
    logger->set_level(spdlog::level::trace);
    spdlog::set_default_logger(logger);
  }
  ~LogCapture() { spdlog::set_default_logger(previous_); }
  std::string text() {
    spdlog::default_logger()->flush();
    return stream_.str();
  }

 private:
  std::shared_ptr<spdlog::logger> previous_;
  std::ostringstream stream_;
};

// Everything a failure says: its message and, for a BackendError, its detail and response body.
std::string everything_said(const std::exception& error) {
  std::string text = error.what();
  if (const auto* backend = dynamic_cast<const airlock::BackendError*>(&error)) {
    text += " | " + backend->detail();
    if (backend->response()) text += " | " + backend->response()->body;
  }
  return text;
}

// ---- the chain picks the credential the host has -----------------------------------------

TEST(AcasCredentials, ChainPicksEnvironmentClientSecretWhenSet) {
  TestServer authority(
      [](const Seen&) {
        return Reply{200, token_answer("tok-env")};
      },
      certificate().cert_pem, certificate().key_pem);
  FakeEnvironment fake;
  fake.set("AZURE_TENANT_ID", "tenant-1");
  fake.set("AZURE_CLIENT_ID", "client-1");
  fake.set("AZURE_CLIENT_SECRET", kSecret);
  fake.set("AZURE_AUTHORITY_HOST", authority.base() + "/");

  const auto chain = default_credential_chain(fake.environment());
  const AccessToken token = chain->get_token(kScope, in(10s));
  EXPECT_EQ(token.token, "tok-env");
  EXPECT_GT(token.expires_on, std::chrono::system_clock::now() + 3500s);
  EXPECT_EQ(chain->name(), "environment client secret");

  const std::vector<Seen> seen = authority.seen();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].method, "POST");
  EXPECT_EQ(seen[0].path, "/tenant-1/oauth2/v2.0/token");
  EXPECT_EQ(seen[0].headers.at("content-type"), "application/x-www-form-urlencoded");
  const auto form = parse_form(seen[0].body);
  EXPECT_EQ(form.at("client_id"), "client-1");
  EXPECT_EQ(form.at("client_secret"), kSecret);
  EXPECT_EQ(form.at("scope"), kScope);
  EXPECT_EQ(form.at("grant_type"), "client_credentials");
}

TEST(AcasCredentials, TokenEndpointExpiresInMayBeAString) {
  TestServer authority(
      [](const Seen&) {
        return Reply{200, token_answer("tok", 1800, true)};
      },
      certificate().cert_pem, certificate().key_pem);
  FakeEnvironment fake;
  fake.set("AZURE_TENANT_ID", "t");
  fake.set("AZURE_CLIENT_ID", "c");
  fake.set("AZURE_CLIENT_SECRET", kSecret);
  fake.set("AZURE_AUTHORITY_HOST", authority.base());
  const AccessToken token =
      environment_client_secret_credential(fake.environment())->get_token(kScope, in(10s));
  const auto left = token.expires_on - std::chrono::system_clock::now();
  EXPECT_GT(left, 1790s);
  EXPECT_LT(left, 1801s);
}

TEST(AcasCredentials, ChainPicksWorkloadIdentityWhenTokenFileSet) {
  TestServer authority(
      [](const Seen&) {
        return Reply{200, token_answer("tok-wi")};
      },
      certificate().cert_pem, certificate().key_pem);
  TempDir dir;
  write_text(dir.path() / "token", std::string("  ") + kAssertion + "\n");
  FakeEnvironment fake;
  fake.set("AZURE_TENANT_ID", "tenant-2");
  fake.set("AZURE_CLIENT_ID", "client-2");
  fake.set("AZURE_FEDERATED_TOKEN_FILE", (dir.path() / "token").string());
  fake.set("AZURE_AUTHORITY_HOST", authority.base());

  const auto chain = default_credential_chain(fake.environment());
  EXPECT_EQ(chain->get_token(kScope, in(10s)).token, "tok-wi");
  EXPECT_EQ(chain->name(), "workload identity");
  const std::vector<Seen> seen = authority.seen();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].path, "/tenant-2/oauth2/v2.0/token");
  const auto form = parse_form(seen[0].body);
  EXPECT_EQ(form.at("client_assertion_type"),
            "urn:ietf:params:oauth:client-assertion-type:jwt-bearer");
  EXPECT_EQ(form.at("client_assertion"), kAssertion);
  EXPECT_EQ(form.at("client_id"), "client-2");
  EXPECT_EQ(form.at("scope"), kScope);
  EXPECT_EQ(form.at("grant_type"), "client_credentials");
  EXPECT_EQ(form.count("client_secret"), 0u);
}

TEST(AcasCredentials, ChainPicksManagedIdentityViaIdentityEndpoint) {
  const long long expires = epoch_in(3600s);
  TestServer msi([&](const Seen&) {
    return Reply{200, json{{"access_token", "tok-msi"},
                           {"expires_on", std::to_string(expires)},
                           {"resource", "https://dynamicsessions.io"}}
                          .dump()};
  });
  FakeEnvironment fake;
  fake.set("IDENTITY_ENDPOINT", msi.base() + "/msi/token");
  fake.set("IDENTITY_HEADER", "identity-header-value");
  fake.set("AZURE_CLIENT_ID", "user-assigned-1");

  const auto chain = default_credential_chain(fake.environment());
  const AccessToken token = chain->get_token(kScope, in(10s));
  EXPECT_EQ(token.token, "tok-msi");
  EXPECT_EQ(std::chrono::system_clock::to_time_t(token.expires_on), expires);
  EXPECT_EQ(chain->name(), "managed identity");
  const std::vector<Seen> seen = msi.seen();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].method, "GET");
  EXPECT_EQ(seen[0].path, "/msi/token");
  EXPECT_EQ(seen[0].query.at("api-version"), "2019-08-01");
  EXPECT_EQ(seen[0].query.at("resource"), "https://dynamicsessions.io");
  EXPECT_EQ(seen[0].query.at("client_id"), "user-assigned-1");
  EXPECT_EQ(seen[0].headers.at("x-identity-header"), "identity-header-value");
}

// IMDS as it behaves: a request without the Metadata header is refused at once (the probe), the
// real one answered.
Reply imds_answer(const Seen& seen, long long expires, bool identity_assigned = true) {
  if (seen.headers.count("metadata") == 0) {
    return Reply{
        400,
        R"({"error":"invalid_request","error_description":"Required metadata header not specified"})"};
  }
  if (!identity_assigned) {
    return Reply{400, R"({"error":"invalid_request","error_description":"Identity not found"})"};
  }
  return Reply{200, json{{"access_token", "tok-imds"}, {"expires_on", expires}}.dump()};
}

TEST(AcasCredentials, ChainPicksManagedIdentityViaImds) {
  const long long expires = epoch_in(3600s);
  TestServer imds([&](const Seen& seen) { return imds_answer(seen, expires); });
  FakeEnvironment fake;
  fake.set("AZURE_POD_IDENTITY_AUTHORITY_HOST", imds.base());

  const auto chain = default_credential_chain(fake.environment());
  const AccessToken token = chain->get_token(kScope, in(10s));
  EXPECT_EQ(token.token, "tok-imds");
  EXPECT_EQ(std::chrono::system_clock::to_time_t(token.expires_on), expires);
  EXPECT_EQ(chain->name(), "managed identity");
  const std::vector<Seen> seen = imds.seen();
  ASSERT_EQ(seen.size(), 2u);  // the probe, then the token request
  const Seen& real = seen.back();
  EXPECT_EQ(real.path, "/metadata/identity/oauth2/token");
  EXPECT_EQ(real.headers.at("metadata"), "true");
  EXPECT_EQ(real.query.at("api-version"), "2018-02-01");
  EXPECT_EQ(real.query.at("resource"), "https://dynamicsessions.io");
  EXPECT_EQ(real.query.count("client_id"), 0u);

  // The probe is not repeated once IMDS has answered.
  chain->get_token(kScope, in(10s));
  EXPECT_EQ(imds.count(), 3u);
}

TEST(AcasCredentials, ImdsWithoutAnAssignedIdentityIsUnavailable) {
  TestServer imds([&](const Seen& seen) { return imds_answer(seen, 0, false); });
  FakeEnvironment fake;
  fake.set("AZURE_POD_IDENTITY_AUTHORITY_HOST", imds.base());
  const auto credential = managed_identity_credential(fake.environment());
  EXPECT_THROW(credential->get_token(kScope, in(10s)), CredentialUnavailable);
}

TEST(AcasCredentials, SomethingElseAnsweringForImdsIsNoImds) {
  // An egress filter or proxy answering for the link-local address: not IMDS, so the chain is
  // free to try the Azure CLI rather than stop on a "refusal" no identity made.
  TestServer filter([&](const Seen&) { return Reply{403, "resolve_deny: denied destination"}; });
  FakeEnvironment fake;
  fake.set("AZURE_POD_IDENTITY_AUTHORITY_HOST", filter.base());
  const auto credential = managed_identity_credential(fake.environment());
  EXPECT_THROW(credential->get_token(kScope, in(10s)), CredentialUnavailable);
  EXPECT_EQ(filter.count(), 1u) << "only the probe was sent";
}

TEST(AcasCredentials, ImdsIsAskedAgainWhileItIsUpdating) {
  const long long expires = epoch_in(3600s);
  std::atomic<int> asked{0};
  TestServer imds([&](const Seen& seen) {
    if (seen.headers.count("metadata") != 0 && ++asked <= 2) return Reply{410, "{}"};
    return imds_answer(seen, expires);
  });
  FakeEnvironment fake;
  fake.set("AZURE_POD_IDENTITY_AUTHORITY_HOST", imds.base());
  EXPECT_EQ(managed_identity_credential(fake.environment())->get_token(kScope, in(10s)).token,
            "tok-imds");
  EXPECT_EQ(imds.count(), 4u);  // the probe, two 410s, the answer

  // A status that is not transient is a failure at once.
  TestServer refusing([&](const Seen& seen) {
    if (seen.headers.count("metadata") == 0) return imds_answer(seen, expires);
    return Reply{403, R"({"error":"forbidden"})"};
  });
  fake.set("AZURE_POD_IDENTITY_AUTHORITY_HOST", refusing.base());
  EXPECT_THROW(managed_identity_credential(fake.environment())->get_token(kScope, in(10s)),
               airlock::BackendError);
  EXPECT_EQ(refusing.count(), 2u);
}

TEST(AcasCredentials, ImdsThatDoesNotAnswerIsUnavailableWithinAboutASecond) {
  std::atomic<bool> release{false};
  TestServer imds([&](const Seen&) {
    for (int i = 0; i < 100 && !release; ++i) std::this_thread::sleep_for(50ms);
    return Reply{500, "{}"};
  });
  FakeEnvironment fake;
  fake.set("AZURE_POD_IDENTITY_AUTHORITY_HOST", imds.base());
  const auto credential = managed_identity_credential(fake.environment());
  const auto start = SteadyClock::now();
  EXPECT_THROW(credential->get_token(kScope, in(30s)), CredentialUnavailable);
  EXPECT_LT(SteadyClock::now() - start, 2500ms);
  release = true;
}

TEST(AcasCredentials, ChainPicksAzureCliFromPath) {
  TempDir dir;
  fake_az(dir.path(),
          "echo '{\"accessToken\":\"tok-cli\",\"expiresOn\":\"2001-01-01 00:00:00.000000\","
          "\"expires_on\":" +
              std::to_string(epoch_in(3600s)) + ",\"tokenType\":\"Bearer\"}'");
  FakeEnvironment fake;
  fake.set("PATH", dir.path().string() + ":/usr/bin:/bin");

  const auto chain = default_credential_chain(fake.environment());
  const AccessToken token = chain->get_token(kScope, in(10s));
  EXPECT_EQ(token.token, "tok-cli");
  // expires_on (an epoch) wins over expiresOn.
  EXPECT_GT(token.expires_on, std::chrono::system_clock::now() + 3500s);
  EXPECT_EQ(chain->name(), "Azure CLI");
  const std::string argv = read_text(dir.path() / "argv");
  EXPECT_EQ(argv,
            std::string("account\nget-access-token\n--scope\n") + kScope + "\n--output\njson\n");
}

TEST(AcasCredentials, AzureCliExpiresOnIsLocalTime) {
  TempDir dir;
  fake_az(dir.path(),
          "echo '{\"accessToken\":\"tok-cli\",\"expiresOn\":\"2031-05-06 07:08:09.123456\"}'");
  FakeEnvironment fake;
  fake.set("PATH", dir.path().string());
  const AccessToken token = azure_cli_credential(fake.environment())->get_token(kScope, in(10s));
  std::tm parts{};
  parts.tm_year = 2031 - 1900;
  parts.tm_mon = 4;
  parts.tm_mday = 6;
  parts.tm_hour = 7;
  parts.tm_min = 8;
  parts.tm_sec = 9;
  parts.tm_isdst = -1;
  EXPECT_EQ(std::chrono::system_clock::to_time_t(token.expires_on), std::mktime(&parts));
}

TEST(AcasCredentials, AzureCliNotLoggedInIsUnavailableAndOtherFailuresAreFailures) {
  TempDir dir;
  fake_az(dir.path(), "echo \"ERROR: Please run 'az login' to setup account.\" >&2; exit 1");
  FakeEnvironment fake;
  fake.set("PATH", dir.path().string());
  EXPECT_THROW(azure_cli_credential(fake.environment())->get_token(kScope, in(10s)),
               CredentialUnavailable);

  fake_az(dir.path(), "echo 'ERROR: the subscription is disabled' >&2; exit 2");
  try {
    azure_cli_credential(fake.environment())->get_token(kScope, in(10s));
    FAIL() << "a failing az must throw";
  } catch (const airlock::BackendError& error) {
    EXPECT_STREQ(error.what(), "the Azure CLI could not get a token");
    EXPECT_NE(error.detail().find("exited 2"), std::string::npos) << error.detail();
    EXPECT_NE(error.detail().find("subscription is disabled"), std::string::npos);
  }
}

TEST(AcasCredentials, UnavailableCredentialsAreSkippedAndTheChainKeepsItsChoice) {
  // Half an environment credential, IMDS without an identity, and a logged-in az.
  TestServer imds([&](const Seen& seen) { return imds_answer(seen, 0, false); });
  TempDir dir;
  fake_az(dir.path(), "echo '{\"accessToken\":\"tok-cli\",\"expires_on\":" +
                          std::to_string(epoch_in(3600s)) + "}'");
  FakeEnvironment fake;
  fake.set("AZURE_TENANT_ID", "t");
  fake.set("AZURE_CLIENT_ID", "c");
  fake.set("AZURE_POD_IDENTITY_AUTHORITY_HOST", imds.base());
  fake.set("PATH", dir.path().string() + ":/usr/bin:/bin");

  const auto chain = default_credential_chain(fake.environment());
  EXPECT_EQ(chain->get_token(kScope, in(10s)).token, "tok-cli");
  EXPECT_EQ(chain->name(), "Azure CLI");
  const std::size_t imds_requests = imds.count();
  EXPECT_EQ(imds_requests, 2u);  // the probe and the refused token request

  // Settled: a secret appearing later does not move the chain, nor is IMDS asked again.
  fake.set("AZURE_CLIENT_SECRET", kSecret);
  EXPECT_EQ(chain->get_token(kScope, in(10s)).token, "tok-cli");
  EXPECT_EQ(imds.count(), imds_requests);
}

TEST(AcasCredentials, AzureCliOutputIsBounded) {
  TempDir dir;
  fake_az(dir.path(), "head -c 3000000 /dev/zero | tr '\\0' a");
  FakeEnvironment fake;
  fake.set("PATH", dir.path().string() + ":/usr/bin:/bin");
  try {
    azure_cli_credential(fake.environment())->get_token(kScope, in(10s));
    FAIL() << "three megabytes are not a token";
  } catch (const airlock::BackendError& error) {
    EXPECT_STREQ(error.what(), "the Azure CLI's answer is not a token");
    EXPECT_NE(error.detail().find("more than"), std::string::npos) << error.detail();
  }
}

TEST(AcasCredentials, AllUnavailableListsEachReason) {
  FakeEnvironment fake;
  const auto chain = default_credential_chain(fake.environment());
  try {
    chain->get_token(kScope, in(10s));
    FAIL() << "nothing is configured";
  } catch (const CredentialUnavailable& error) {
    const std::string text = error.what();
    for (const char* name :
         {"environment client secret", "workload identity", "managed identity", "Azure CLI"}) {
      EXPECT_NE(text.find(name), std::string::npos) << name << " missing from: " << text;
    }
    EXPECT_NE(text.find("AZURE_CLIENT_SECRET"), std::string::npos) << text;
    EXPECT_NE(text.find("not on PATH"), std::string::npos) << text;
  }
}

// ---- a configured credential that fails stops the chain ----------------------------------

TEST(AcasCredentials, WrongSecretStopsChainBeforeManagedIdentity) {
  TestServer authority(
      [](const Seen&) {
        return Reply{
            401,
            R"({"error":"invalid_client","error_description":"AADSTS7000215: Invalid client secret provided."})"};
      },
      certificate().cert_pem, certificate().key_pem);
  TestServer msi([](const Seen&) {
    return Reply{200, json{{"access_token", "tok-msi"}, {"expires_on", epoch_in(3600s)}}.dump()};
  });
  FakeEnvironment fake;
  fake.set("AZURE_TENANT_ID", "t");
  fake.set("AZURE_CLIENT_ID", "c");
  fake.set("AZURE_CLIENT_SECRET", kSecret);
  fake.set("AZURE_AUTHORITY_HOST", authority.base());
  fake.set("IDENTITY_ENDPOINT", msi.base() + "/msi/token");
  fake.set("IDENTITY_HEADER", "h");

  const auto chain = default_credential_chain(fake.environment());
  try {
    chain->get_token(kScope, in(10s));
    FAIL() << "a refused secret must not fall through";
  } catch (const airlock::BackendError& error) {
    EXPECT_STREQ(error.what(), "the Azure token endpoint refused the client secret");
    EXPECT_NE(error.detail().find("401"), std::string::npos) << error.detail();
    EXPECT_NE(error.detail().find("127.0.0.1"), std::string::npos) << error.detail();
    EXPECT_NE(error.detail().find("invalid_client"), std::string::npos) << error.detail();
    ASSERT_TRUE(error.response().has_value());
    EXPECT_EQ(error.response()->status, 401);
  }
  EXPECT_EQ(authority.count(), 1u);
  EXPECT_EQ(msi.count(), 0u);
}

TEST(AcasCredentials, TokenEndpointErrorBodyIsCutIntoTheDetail) {
  TestServer authority(
      [](const Seen&) {
        return Reply{
            400, json{{"error", "invalid_request"}, {"error_description", std::string(5000, 'x')}}
                     .dump()};
      },
      certificate().cert_pem, certificate().key_pem);
  FakeEnvironment fake;
  fake.set("AZURE_TENANT_ID", "t");
  fake.set("AZURE_CLIENT_ID", "c");
  fake.set("AZURE_CLIENT_SECRET", kSecret);
  fake.set("AZURE_AUTHORITY_HOST", authority.base());
  try {
    environment_client_secret_credential(fake.environment())->get_token(kScope, in(10s));
    FAIL() << "a 400 must throw";
  } catch (const airlock::BackendError& error) {
    EXPECT_NE(error.detail().find("answered 400: invalid_request: xxx"), std::string::npos)
        << error.detail();
    EXPECT_LT(error.detail().size(), 400u);
    ASSERT_TRUE(error.response().has_value());
    EXPECT_LE(error.response()->body.size(), 304u);
  }
}

TEST(AcasCredentials, AuthorityHostMustBeHttps) {
  TestServer plain([](const Seen&) { return Reply{200, token_answer("tok")}; });
  FakeEnvironment fake;
  fake.set("AZURE_TENANT_ID", "t");
  fake.set("AZURE_CLIENT_ID", "c");
  fake.set("AZURE_CLIENT_SECRET", kSecret);
  fake.set("AZURE_AUTHORITY_HOST", plain.base());
  try {
    default_credential_chain(fake.environment())->get_token(kScope, in(10s));
    FAIL() << "an http authority must be refused";
  } catch (const airlock::BackendError& error) {
    EXPECT_STREQ(error.what(), "AZURE_AUTHORITY_HOST must be an https URL");
  }
  EXPECT_EQ(plain.count(), 0u);

  // The internal hook that allows it reaches the same endpoint with the same request.
  const AccessToken token =
      internal::environment_client_secret_credential_allowing_http(fake.environment())
          ->get_token(kScope, in(10s));
  EXPECT_EQ(token.token, "tok");
  ASSERT_EQ(plain.count(), 1u);
  EXPECT_EQ(plain.seen()[0].path, "/t/oauth2/v2.0/token");
}

TEST(AcasCredentials, FederatedTokenFileIsReadAgainPerRequest) {
  TestServer authority(
      [](const Seen&) {
        return Reply{200, token_answer("tok")};
      },
      certificate().cert_pem, certificate().key_pem);
  TempDir dir;
  const fs::path file = dir.path() / "token";
  write_text(file, "assertion-one\n");
  FakeEnvironment fake;
  fake.set("AZURE_TENANT_ID", "t");
  fake.set("AZURE_CLIENT_ID", "c");
  fake.set("AZURE_FEDERATED_TOKEN_FILE", file.string());
  fake.set("AZURE_AUTHORITY_HOST", authority.base());

  const auto credential = workload_identity_credential(fake.environment());
  credential->get_token(kScope, in(10s));
  write_text(file, "assertion-two");
  credential->get_token(kScope, in(10s));
  const std::vector<Seen> seen = authority.seen();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(parse_form(seen[0].body).at("client_assertion"), "assertion-one");
  EXPECT_EQ(parse_form(seen[1].body).at("client_assertion"), "assertion-two");
}

// ---- the cache -----------------------------------------------------------------------------

TEST(AcasCredentials, TokensAreCachedAndRefreshedBeforeExpiry) {
  std::atomic<int> issued{0};
  TestServer authority(
      [&](const Seen&) {
        return Reply{200, token_answer("tok-" + std::to_string(++issued), 2)};
      },
      certificate().cert_pem, certificate().key_pem);
  FakeEnvironment fake;
  fake.set("AZURE_TENANT_ID", "t");
  fake.set("AZURE_CLIENT_ID", "c");
  fake.set("AZURE_CLIENT_SECRET", kSecret);
  fake.set("AZURE_AUTHORITY_HOST", authority.base());
  const auto cached = cached_credential(environment_client_secret_credential(fake.environment()));

  EXPECT_EQ(cached->get_token(kScope, in(10s)).token, "tok-1");
  EXPECT_EQ(cached->get_token(kScope, in(10s)).token, "tok-1");
  EXPECT_EQ(authority.count(), 1u);
  // Another scope is cached on its own.
  EXPECT_EQ(cached->get_token("https://management.azuredevcompute.io/.default", in(10s)).token,
            "tok-2");
  EXPECT_EQ(authority.count(), 2u);
  // A two-second token is refreshed at half its life, before it expires.
  std::this_thread::sleep_for(1200ms);
  EXPECT_EQ(cached->get_token(kScope, in(10s)).token, "tok-3");
  EXPECT_EQ(authority.count(), 3u);
}

// A credential the cache tests drive directly: counts calls, answers slowly, fails on demand.
class ScriptedCredential : public TokenCredential {
 public:
  AccessToken get_token(std::string_view, SteadyClock::time_point) override {
    const int call = ++calls;
    std::this_thread::sleep_for(delay);
    if (fail_from > 0 && call >= fail_from) {
      throw airlock::BackendError("the Azure token endpoint refused the client secret",
                                  "POST https://127.0.0.1 answered 500");
    }
    return AccessToken{"tok-" + std::to_string(call), std::chrono::system_clock::now() + lifetime};
  }
  std::string name() const override { return "scripted"; }

  std::atomic<int> calls{0};
  std::chrono::milliseconds delay{0};
  std::chrono::milliseconds lifetime{3'600'000};
  int fail_from = 0;
};

TEST(AcasCredentials, OneRefreshAtATimePerScopeUnderEightThreads) {
  auto inner = std::make_shared<ScriptedCredential>();
  inner->delay = 300ms;
  const auto cached = cached_credential(inner);
  std::vector<std::string> tokens(8);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] { tokens[i] = cached->get_token(kScope, in(10s)).token; });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(inner->calls.load(), 1);
  for (const std::string& token : tokens) EXPECT_EQ(token, "tok-1");
}

TEST(AcasCredentials, FailingRefreshKeepsStillValidToken) {
  LogCapture log;
  auto inner = std::make_shared<ScriptedCredential>();
  inner->lifetime = 2000ms;
  inner->fail_from = 2;
  const auto cached = cached_credential(inner);
  EXPECT_EQ(cached->get_token(kScope, in(10s)).token, "tok-1");
  std::this_thread::sleep_for(1200ms);  // past the refresh point, before expiry
  EXPECT_EQ(cached->get_token(kScope, in(10s)).token, "tok-1");
  EXPECT_EQ(inner->calls.load(), 2);
  const std::string logged = log.text();
  EXPECT_NE(logged.find("refreshing the Azure token"), std::string::npos) << logged;
  EXPECT_EQ(logged.find("tok-1"), std::string::npos) << logged;
  // Once it has expired, the failure is the caller's.
  std::this_thread::sleep_for(1000ms);
  EXPECT_THROW(cached->get_token(kScope, in(10s)), airlock::BackendError);
}

TEST(AcasCredentials, CallersDuringARefreshGetTheStillValidTokenWithoutWaiting) {
  auto inner = std::make_shared<ScriptedCredential>();
  inner->lifetime = 4000ms;
  const auto cached = cached_credential(inner);
  EXPECT_EQ(cached->get_token(kScope, in(10s)).token, "tok-1");
  std::this_thread::sleep_for(2100ms);  // past half its life
  inner->delay = 800ms;
  std::thread refresher([&] { EXPECT_EQ(cached->get_token(kScope, in(10s)).token, "tok-2"); });
  while (inner->calls.load() < 2) std::this_thread::sleep_for(5ms);  // the refresh is running
  const auto start = SteadyClock::now();
  EXPECT_EQ(cached->get_token(kScope, in(10s)).token, "tok-1");
  EXPECT_LT(SteadyClock::now() - start, 300ms);
  refresher.join();
  EXPECT_EQ(cached->get_token(kScope, in(10s)).token, "tok-2");
  EXPECT_EQ(inner->calls.load(), 2);
}

// A refresher whose own (short) deadline passes does not fail the callers waiting with longer
// ones: one of them refreshes in turn.
class DeadlineBoundCredential : public TokenCredential {
 public:
  AccessToken get_token(std::string_view, SteadyClock::time_point deadline) override {
    ++calls;
    std::this_thread::sleep_until(std::min(deadline, SteadyClock::now() + 300ms));
    if (SteadyClock::now() >= deadline) throw airlock::Timeout("too slow");
    return AccessToken{"tok", std::chrono::system_clock::now() + 1h};
  }
  std::string name() const override { return "deadline-bound"; }
  std::atomic<int> calls{0};
};

TEST(AcasCredentials, WaitersOutliveARefresherThatMissedItsOwnDeadline) {
  auto inner = std::make_shared<DeadlineBoundCredential>();
  const auto cached = cached_credential(inner);
  std::thread hasty([&] { EXPECT_THROW(cached->get_token(kScope, in(100ms)), airlock::Timeout); });
  while (inner->calls.load() < 1) std::this_thread::sleep_for(1ms);  // the hasty one refreshes
  EXPECT_EQ(cached->get_token(kScope, in(10s)).token, "tok");
  hasty.join();
  EXPECT_EQ(inner->calls.load(), 2);
}

TEST(AcasCredentials, WaitersOfAFailedRefreshGetItsFailure) {
  auto inner = std::make_shared<ScriptedCredential>();
  inner->delay = 300ms;
  inner->fail_from = 1;
  const auto cached = cached_credential(inner);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      try {
        cached->get_token(kScope, in(10s));
      } catch (const airlock::BackendError&) {
        ++failures;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 4);
  EXPECT_EQ(inner->calls.load(), 1);
}

// ---- nothing secret in errors or logs ------------------------------------------------------

TEST(AcasCredentials, NoSecretAssertionOrTokenInErrorsOrLogs) {
  LogCapture log;
  std::vector<std::string> said;
  // An endpoint that echoes what it was sent into its error description, and one whose
  // "success" lacks an expiry but carries a token.
  TestServer echoing(
      [](const Seen& seen) {
        return Reply{400,
                     json{{"error", "invalid_request"}, {"error_description", seen.body}}.dump()};
      },
      certificate().cert_pem, certificate().key_pem);
  TestServer malformed(
      [](const Seen&) {
        return Reply{200, R"({"access_token":"tok-leak-1"})"};
      },
      certificate().cert_pem, certificate().key_pem);
  TempDir dir;
  write_text(dir.path() / "token", kAssertion);

  FakeEnvironment secret_env;
  secret_env.set("AZURE_TENANT_ID", "t");
  secret_env.set("AZURE_CLIENT_ID", "c");
  secret_env.set("AZURE_CLIENT_SECRET", kSecret);
  secret_env.set("AZURE_AUTHORITY_HOST", echoing.base());
  FakeEnvironment wi_env;
  wi_env.set("AZURE_TENANT_ID", "t");
  wi_env.set("AZURE_CLIENT_ID", "c");
  wi_env.set("AZURE_FEDERATED_TOKEN_FILE", (dir.path() / "token").string());
  wi_env.set("AZURE_AUTHORITY_HOST", echoing.base());

  const auto attempt = [&](const std::shared_ptr<TokenCredential>& credential) {
    try {
      credential->get_token(kScope, in(10s));
      ADD_FAILURE() << credential->name() << " should have failed";
    } catch (const std::exception& error) {
      said.push_back(everything_said(error));
    }
  };
  attempt(default_credential_chain(secret_env.environment()));
  attempt(default_credential_chain(wi_env.environment()));
  secret_env.set("AZURE_AUTHORITY_HOST", malformed.base());
  attempt(environment_client_secret_credential(secret_env.environment()));

  // The az CLI that prints a token but no expiry.
  TempDir az_dir;
  fake_az(az_dir.path(), "echo '{\"accessToken\":\"tok-leak-2\"}'");
  FakeEnvironment cli_env;
  cli_env.set("PATH", az_dir.path().string());
  attempt(azure_cli_credential(cli_env.environment()));

  // A cached token whose refresh fails is logged about, never quoted.
  auto inner = std::make_shared<ScriptedCredential>();
  inner->lifetime = 1000ms;
  inner->fail_from = 2;
  const auto cached = cached_credential(inner);
  const std::string held = cached->get_token(kScope, in(10s)).token;
  std::this_thread::sleep_for(600ms);
  EXPECT_EQ(cached->get_token(kScope, in(10s)).token, held);

  ASSERT_EQ(said.size(), 4u);
  EXPECT_NE(said[0].find("refused the client secret"), std::string::npos) << said[0];
  EXPECT_NE(said[1].find("refused the federated token"), std::string::npos) << said[1];
  EXPECT_NE(said[2].find("not a token"), std::string::npos) << said[2];
  EXPECT_NE(said[3].find("not a token"), std::string::npos) << said[3];
  said.push_back(log.text());
  for (const std::string& text : said) {
    for (const std::string& secret :
         {std::string(kSecret), http::url_encode(kSecret), std::string(kAssertion),
          std::string("tok-leak-1"), std::string("tok-leak-2"), held}) {
      EXPECT_EQ(text.find(secret), std::string::npos) << "'" << secret << "' in: " << text;
    }
  }
  // Error bodies are logged at most 300 characters long.
  for (std::size_t i = 0; i < 2; ++i) EXPECT_LT(said[i].size(), 1200u) << said[i];
}

// ---- deadlines -----------------------------------------------------------------------------

TEST(AcasCredentials, HungTokenEndpointIsBoundedByDeadline) {
  std::atomic<bool> release{false};
  TestServer authority(
      [&](const Seen&) {
        for (int i = 0; i < 200 && !release; ++i) std::this_thread::sleep_for(50ms);
        return Reply{200, token_answer("late")};
      },
      certificate().cert_pem, certificate().key_pem);
  FakeEnvironment fake;
  fake.set("AZURE_TENANT_ID", "t");
  fake.set("AZURE_CLIENT_ID", "c");
  fake.set("AZURE_CLIENT_SECRET", kSecret);
  fake.set("AZURE_AUTHORITY_HOST", authority.base());
  const auto start = SteadyClock::now();
  EXPECT_THROW(default_credential_chain(fake.environment())->get_token(kScope, in(700ms)),
               airlock::Timeout);
  EXPECT_LT(SteadyClock::now() - start, 2s);
  release = true;
}

bool process_gone(pid_t pid) {
  // Gone, or a zombie waiting for a reaper other than us (a container's init may be slow).
  const fs::path stat = "/proc/" + std::to_string(pid) + "/stat";
  if (!fs::exists(stat)) return true;
  const std::string text = read_text(stat);
  const std::size_t close = text.rfind(')');
  return close != std::string::npos && close + 2 < text.size() && text[close + 2] == 'Z';
}

TEST(AcasCredentials, HungAzIsKilledAtDeadlineAndLeavesNoProcessBehind) {
  TempDir dir;
  const fs::path pids = dir.path() / "pids";
  // The script and a child of its own, as az (a shell script starting Python) has.
  fake_az(dir.path(), "sleep 300 & echo $$ $! > '" + pids.string() + "'; wait");
  FakeEnvironment fake;
  fake.set("PATH", dir.path().string() + ":/usr/bin:/bin");
  const auto start = SteadyClock::now();
  EXPECT_THROW(azure_cli_credential(fake.environment())->get_token(kScope, in(800ms)),
               airlock::Timeout);
  EXPECT_LT(SteadyClock::now() - start, 2s);

  std::istringstream recorded(read_text(pids));
  pid_t script = 0;
  pid_t child = 0;
  recorded >> script >> child;
  ASSERT_GT(script, 0);
  ASSERT_GT(child, 0);
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    gone = process_gone(script) && process_gone(child);
    if (!gone) std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(gone) << "az (" << script << ") or its child (" << child << ") is still running";
}

}  // namespace
