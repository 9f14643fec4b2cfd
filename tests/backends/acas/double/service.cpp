#include "service.hpp"

#include <algorithm>
#include <cctype>
#include <ctime>
#include <fstream>
#include <sstream>

#include "airlock/errors.hpp"
#include "airlock/sandbox.hpp"
#include "backends/linux/linux_sandbox.hpp"
#include "backends/linux/state_store.hpp"
#include "file_api.hpp"

namespace airlock::acas_double {

using json::Json;

namespace {

// Every body the double writes: text that came from a guest or a client may be invalid UTF-8.
std::string dump(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

Response json_response(int status, const Json& body) {
  Response response;
  response.status = status;
  response.body = dump(body);
  return response;
}

// The Azure error envelope (see README: both it and problem+json exist in the wild).
Response error(int status, const std::string& code, const std::string& message) {
  return json_response(status, {{"error", {{"code", code}, {"message", message}}}});
}

// An AAD/IMDS style error: {"error": "...", "error_description": "..."}.
Response oauth_error(int status, const std::string& code, const std::string& description) {
  return json_response(status, {{"error", code}, {"error_description", description}});
}

std::vector<std::string> segments(const std::string& path) {
  std::vector<std::string> parts;
  std::stringstream stream(path);
  std::string part;
  while (std::getline(stream, part, '/')) {
    if (!part.empty()) parts.push_back(part);
  }
  return parts;
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](unsigned char x, unsigned char y) {
           return std::tolower(x) == std::tolower(y);
         });
}

std::string percent_decode(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '+') {
      out += ' ';
    } else if (text[i] == '%' && i + 2 < text.size() &&
               std::isxdigit(static_cast<unsigned char>(text[i + 1])) &&
               std::isxdigit(static_cast<unsigned char>(text[i + 2]))) {
      out += static_cast<char>(std::stoi(std::string(text.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      out += text[i];
    }
  }
  return out;
}

std::map<std::string, std::string> parse_form(const std::string& body) {
  std::map<std::string, std::string> form;
  std::stringstream stream(body);
  std::string pair;
  while (std::getline(stream, pair, '&')) {
    const std::size_t equals = pair.find('=');
    if (equals == std::string::npos) {
      form.emplace(percent_decode(pair), "");
    } else {
      form.emplace(percent_decode(pair.substr(0, equals)), percent_decode(pair.substr(equals + 1)));
    }
  }
  return form;
}

std::string iso_time(std::chrono::system_clock::time_point when) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(when);
  std::tm utc{};
  ::gmtime_r(&seconds, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

std::int64_t epoch_seconds(std::chrono::system_clock::time_point when) {
  return std::chrono::duration_cast<std::chrono::seconds>(when.time_since_epoch()).count();
}

std::string trim(std::string text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  std::size_t start = 0;
  while (start < text.size() && std::isspace(static_cast<unsigned char>(text[start]))) ++start;
  return text.substr(start);
}

std::optional<Json> parse_body(const Request& request) {
  Json body = Json::parse(request.body, nullptr, false);
  if (body.is_discarded()) return std::nullopt;
  return body;
}

// "k1=v1,k2=v2" → pairs, each value taken up to the next comma (the SDK does not escape).
std::vector<std::pair<std::string, std::string>> parse_selector(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> pairs;
  std::stringstream stream(text);
  std::string term;
  while (std::getline(stream, term, ',')) {
    if (term.empty()) continue;
    const std::size_t equals = term.find('=');
    if (equals == std::string::npos) {
      pairs.emplace_back(term, "");
    } else {
      pairs.emplace_back(term.substr(0, equals), term.substr(equals + 1));
    }
  }
  return pairs;
}

// The create body's egressPolicy as the linux sandbox's egress: deny by default with only host
// Allow rules is all the linux backend can enforce, so anything else is refused.
std::optional<std::string> read_egress(const Json& policy, Egress& mode,
                                       std::vector<std::string>& hosts) {
  if (!policy.is_object()) {
    return "egressPolicy is required: the double runs deny-by-default policies only";
  }
  const auto action = policy.find("defaultAction");
  if (action == policy.end() || !action->is_string() || !iequals(action->get<std::string>(), "Deny")) {
    return "egressPolicy.defaultAction must be Deny (the double emulates no open egress)";
  }
  if (const auto rules = policy.find("rules"); rules != policy.end() && !rules->is_null() &&
                                               !(rules->is_array() && rules->empty())) {
    return "egressPolicy.rules is not emulated; use hostRules with action Allow";
  }
  if (const auto rules = policy.find("hostRules"); rules != policy.end() && !rules->is_null()) {
    if (!rules->is_array()) return "egressPolicy.hostRules must be an array";
    for (const auto& rule : *rules) {
      if (!rule.is_object() || !rule.contains("pattern") || !rule["pattern"].is_string() ||
          !rule.contains("action") || !rule["action"].is_string() ||
          !iequals(rule["action"].get<std::string>(), "Allow")) {
        return "egressPolicy.hostRules: each rule must be {pattern, action: Allow}";
      }
      hosts.push_back(rule["pattern"].get<std::string>());
    }
  }
  mode = hosts.empty() ? Egress::closed : Egress::allowlist;
  return std::nullopt;
}

// The guest work dir each linux sandbox is made with: the linux backend refuses "/" itself.
constexpr const char* kLinuxWorkDir = "/maf-sandbox/work";
constexpr const char* kKind = "acas-double";

}  // namespace

ImageEntry parse_image_flag(const std::string& text) {
  const std::size_t equals = text.find('=');
  if (equals == std::string::npos || equals == 0) {
    throw std::invalid_argument("--image '" + text + "': expected NAME=LINUX_REF[,options]");
  }
  ImageEntry entry;
  entry.name = text.substr(0, equals);
  std::stringstream rest(text.substr(equals + 1));
  std::string part;
  bool first = true;
  while (std::getline(rest, part, ',')) {
    if (first) {
      entry.linux_image = part;
      first = false;
    } else if (part == "public") {
      entry.is_public = true;
    } else if (part.rfind("id=", 0) == 0) {
      entry.id = part.substr(3);
    } else if (part.rfind("base=", 0) == 0) {
      entry.base = part.substr(5);
    } else if (part == "file_owner=unmapped") {
      entry.unmapped_owner = true;
    } else {
      throw std::invalid_argument("--image '" + text + "': unknown option '" + part + "'");
    }
  }
  if (entry.linux_image.empty()) {
    throw std::invalid_argument("--image '" + text + "': the linux image reference is empty");
  }
  return entry;
}

struct Service::Sandbox {
  std::string id;
  std::string state = "Creating";
  Json labels = Json::object();
  Json sources_ref;
  Json resources;
  Json lifecycle = Json::object();
  Json egress_policy;
  Json state_details = Json::object();
  std::string created_at;
  ImageEntry image;
  int transient_left = 0;
  int creating_left = 0;
  int deleting_left = 0;
  SandboxKey key;
  std::shared_ptr<airlock::Sandbox> linux;
  std::string failure;  // why the linux acquire failed ("" = it did not)
};

struct Service::Fault {
  std::string method;  // "" = any
  std::string route;
  int status = 0;      // 0: no substitute answer (a delay alone)
  int times = 1;
  int skip = 0;
  std::optional<std::string> retry_after;
  std::optional<std::string> retry_after_ms;
  int delay_ms = 0;
  std::optional<std::string> body;
  bool drop = false;
};

Service::Service(ServiceConfig config, std::shared_ptr<SandboxBackend> backend)
    : config_(std::move(config)), backend_(std::move(backend)) {
  group_path_ = "/subscriptions/" + config_.subscription + "/resourceGroups/" +
                config_.resource_group + "/sandboxGroups/" + config_.sandbox_group;
}

Service::~Service() { shut_down(); }

void Service::shut_down() {
  stop_.request_stop();
  wake_.notify_all();
  std::vector<std::shared_ptr<Sandbox>> all;
  {
    std::lock_guard lock(mutex_);
    for (auto& [id, sandbox] : sandboxes_) all.push_back(sandbox);
  }
  for (auto& sandbox : all) dispose_linux(*sandbox);
}

void Service::pause(std::chrono::milliseconds duration) {
  std::unique_lock lock(mutex_);
  wake_.wait_for(lock, duration, [this] { return stop_.stop_requested(); });
}

// ---- routing -----------------------------------------------------------------------------

Service::Route Service::classify(const Request& request) const {
  Route route;
  const auto parts = segments(request.path);
  const std::string& method = request.method;
  auto pick = [&](std::initializer_list<std::pair<const char*, const char*>> choices) {
    for (const auto& [wanted, name] : choices) {
      if (method == wanted) {
        route.name = name;
        return;
      }
    }
    route.name = choices.begin()->second;
    route.method_allowed = false;
  };
  if (parts.size() == 4 && parts[1] == "oauth2" && parts[2] == "v2.0" && parts[3] == "token") {
    pick({{"POST", "token"}});
    return route;
  }
  if (parts.size() < 7 || parts[0] != "subscriptions" || !iequals(parts[2], "resourceGroups") ||
      !iequals(parts[4], "sandboxGroups")) {
    return route;
  }
  route.in_group = parts[1] == config_.subscription && parts[3] == config_.resource_group &&
                   parts[5] == config_.sandbox_group;
  const std::vector<std::string> rest(parts.begin() + 6, parts.end());
  if (rest[0] == "sandboxes") {
    if (rest.size() == 1) {
      pick({{"PUT", "create"}, {"GET", "list"}});
      return route;
    }
    route.sandbox_id = rest[1];
    if (rest.size() == 2) {
      pick({{"GET", "get"}, {"DELETE", "delete"}});
    } else if (rest.size() == 3 && rest[2] == "lifecycle") {
      pick({{"POST", "lifecycle"}});
    } else if (rest.size() == 3 && rest[2] == "resume") {
      pick({{"POST", "resume"}});
    } else if (rest.size() == 3 && rest[2] == "executeShellCommand") {
      pick({{"POST", "exec"}});
    } else if (rest.size() == 3 && rest[2] == "files") {
      pick({{"PUT", "files_write"}, {"GET", "files_read"}, {"DELETE", "files_delete"}});
    } else if (rest.size() == 4 && rest[2] == "files" && rest[3] == "stat") {
      pick({{"GET", "files_stat"}});
    } else if (rest.size() == 4 && rest[2] == "files" && rest[3] == "list") {
      pick({{"GET", "files_list"}});
    } else if (rest.size() == 4 && rest[2] == "files" && rest[3] == "mkdir") {
      pick({{"POST", "files_mkdir"}});
    }
    return route;
  }
  if (rest[0] == "diskimages" && rest.size() == 2 && rest[1] == "public") {
    pick({{"GET", "images_public"}});
  } else if (rest[0] == "diskimages" && rest.size() == 1) {
    pick({{"GET", "images"}});
  }
  return route;
}

std::string Service::authorization_kind(const Request& request) {
  const auto header = request.header("authorization");
  if (!header) return "none";
  if (header->size() < 7 || !iequals(header->substr(0, 7), "Bearer ")) return "invalid";
  const std::string token = trim(header->substr(7));
  if (std::find(config_.accept_tokens.begin(), config_.accept_tokens.end(), token) !=
      config_.accept_tokens.end()) {
    return "bearer";
  }
  std::lock_guard lock(mutex_);
  const auto found = tokens_.find(token);
  if (found != tokens_.end() && found->second > std::chrono::system_clock::now()) return "bearer";
  return "invalid";
}

Response Service::handle_https(const Request& request) {
  if (request.path.rfind("/_double/", 0) == 0) return control(request);
  const Route route = classify(request);
  const std::string auth = authorization_kind(request);
  Response response;
  if (auto faulted = apply_fault(request, route.name)) {
    response = std::move(*faulted);
  } else if (route.name == "token") {
    response = route.method_allowed ? token(request, segments(request.path)[0])
                                    : error(405, "MethodNotAllowed", "use POST");
  } else if (route.name.empty()) {
    response = error(404, "NotFound", "no such route: " + request.method + " " + request.path);
  } else if (auth != "bearer") {
    response = error(401, auth == "none" ? "AuthenticationRequired" : "InvalidAuthenticationToken",
                     auth == "none" ? "an Authorization: Bearer header is required"
                                    : "the bearer token is not valid or has expired");
    response.headers.emplace_back(
        "WWW-Authenticate", "Bearer authorization_uri=\"https://login.microsoftonline.com/" +
                                config_.tenant + "\", error=\"invalid_token\"");
  } else if (request.query_value("api-version") != std::string(kApiVersion)) {
    const auto given = request.query_value("api-version");
    response = given ? error(400, "UnsupportedApiVersion",
                             "The api-version '" + *given + "' is not supported; use '" +
                                 kApiVersion + "'")
                     : error(400, "MissingApiVersionParameter",
                             "The api-version query parameter (?api-version=) is required");
  } else if (!route.in_group) {
    response = error(404, "SandboxGroupNotFound", "no such sandbox group: " + request.path);
  } else if (!route.method_allowed) {
    response = error(405, "MethodNotAllowed", request.method + " is not allowed here");
  } else {
    response = dispatch(request, route);
  }
  log_request(request, route.name, response);
  return response;
}

Response Service::handle_identity_http(const Request& request) {
  std::string name;
  if (request.path == "/metadata/identity/oauth2/token") name = "imds";
  if (request.path == "/msi/token") name = "msi";
  Response response;
  if (auto faulted = apply_fault(request, name)) {
    response = std::move(*faulted);
  } else if (name.empty()) {
    response = oauth_error(404, "not_found", "no such route: " + request.path);
  } else if (request.method != "GET") {
    response = oauth_error(405, "invalid_request", "use GET");
  } else {
    response = name == "imds" ? imds(request) : msi(request);
  }
  log_request(request, name, response);
  return response;
}

Response Service::dispatch(const Request& request, const Route& route) {
  const std::string& name = route.name;
  const std::string& id = route.sandbox_id;
  if (name == "create") return create(request);
  if (name == "list") return list(request);
  if (name == "get") return get(id);
  if (name == "delete") return remove(id);
  if (name == "lifecycle") return lifecycle(request, id);
  if (name == "resume") return resume(id);
  if (name == "exec") return exec(request, id);
  if (name.rfind("files_", 0) == 0) return files(request, route);
  if (name == "images_public") return images_public();
  if (name == "images") return images();
  return error(404, "NotFound", "no such route");
}

// ---- faults and the request log -------------------------------------------------------------

std::optional<Response> Service::apply_fault(const Request& request, const std::string& route) {
  Fault chosen;
  {
    std::lock_guard lock(mutex_);
    auto match = std::find_if(faults_.begin(), faults_.end(), [&](const Fault& fault) {
      return fault.route == route && (fault.method.empty() || iequals(fault.method, request.method));
    });
    if (match == faults_.end()) return std::nullopt;
    if (match->skip > 0) {
      --match->skip;
      return std::nullopt;
    }
    chosen = *match;
    if (--match->times <= 0) faults_.erase(match);
  }
  if (chosen.delay_ms > 0) pause(std::chrono::milliseconds(chosen.delay_ms));
  if (chosen.drop) {
    Response dropped;
    dropped.drop = true;
    dropped.status = 0;
    return dropped;
  }
  if (chosen.status == 0) return std::nullopt;
  Response response;
  response.status = chosen.status;
  response.body = chosen.body ? *chosen.body
                              : dump({{"error",
                                       {{"code", "InjectedFault"},
                                        {"message", "fault injected by the double (status " +
                                                        std::to_string(chosen.status) + ")"}}}});
  if (chosen.retry_after) response.headers.emplace_back("Retry-After", *chosen.retry_after);
  if (chosen.retry_after_ms) response.headers.emplace_back("retry-after-ms", *chosen.retry_after_ms);
  return response;
}

void Service::log_request(const Request& request, const std::string& route,
                          const Response& response) {
  Json query = Json::object();
  for (const auto& [name, value] : request.query) query[name] = value;
  const auto header = request.header("authorization");
  std::string auth = "none";
  if (header) auth = authorization_kind(request);
  Json entry = {{"method", request.method},
                {"route", route},
                {"path", request.path},
                {"query", query},
                {"status", response.drop ? 0 : response.status},
                {"authorization", auth},
                {"body", request.body.substr(0, 4096)}};
  if (response.drop) entry["dropped"] = true;
  std::lock_guard lock(mutex_);
  requests_.push_back(std::move(entry));
}

// ---- sandboxes ----------------------------------------------------------------------------

Json Service::sandbox_json(const Sandbox& sandbox) const {
  return {{"id", sandbox.id},
          {"state", sandbox.state},
          {"labels", sandbox.labels},
          {"sourcesRef", sandbox.sources_ref},
          {"resources", sandbox.resources},
          {"lifecycle", sandbox.lifecycle},
          {"egressPolicy", sandbox.egress_policy},
          {"stateDetails", sandbox.state_details},
          {"createdAt", sandbox.created_at},
          {"region", config_.region}};
}

Response Service::create(const Request& request) {
  const auto body = parse_body(request);
  if (!body || !body->is_object()) return error(400, "InvalidRequestBody", "the body must be a JSON object");
  // The image: a public catalogue name, or an imported disk image's id.
  const Json disk = body->value("/sourcesRef/diskImage"_json_pointer, Json());
  if (!disk.is_object()) {
    return error(400, "InvalidSourcesRef", "sourcesRef.diskImage {name, isPublic} or {id} is required");
  }
  const ImageEntry* image = nullptr;
  if (disk.contains("id") && disk["id"].is_string()) {
    const std::string id = disk["id"];
    for (const auto& entry : config_.images) {
      if (!entry.id.empty() && entry.id == id) image = &entry;
    }
    if (image == nullptr) return error(400, "DiskImageNotFound", "no disk image with id '" + id + "'");
  } else if (disk.contains("name") && disk["name"].is_string()) {
    const std::string name = disk["name"];
    const bool is_public = disk.value("isPublic", false);
    for (const auto& entry : config_.images) {
      if (entry.name == name && (is_public ? entry.is_public : !entry.id.empty())) image = &entry;
    }
    if (image == nullptr) {
      return error(400, "DiskImageNotFound",
                   std::string("no ") + (is_public ? "public " : "") + "disk image named '" + name + "'");
    }
  } else {
    return error(400, "InvalidSourcesRef", "sourcesRef.diskImage needs a name or an id");
  }
  Json labels = body->value("labels", Json::object());
  if (labels.is_null()) labels = Json::object();
  if (!labels.is_object()) return error(400, "InvalidLabels", "labels must be an object");
  for (const auto& [key, value] : labels.items()) {
    if (!value.is_string()) return error(400, "InvalidLabels", "label '" + key + "' must be a string");
    if (value.get<std::string>().size() > 63) {
      return error(400, "InvalidLabelValue",
                   "Label value for key '" + key + "' exceeds 63 characters");
    }
  }
  Egress mode = Egress::closed;
  std::vector<std::string> hosts;
  const Json policy = body->value("egressPolicy", Json());
  if (auto refusal = read_egress(policy, mode, hosts)) return error(400, "InvalidEgressPolicy", *refusal);

  auto sandbox = std::make_shared<Sandbox>();
  sandbox->id = "sbx-" + linux_backend::random_hex(8);
  sandbox->labels = labels;
  sandbox->sources_ref = body->at("sourcesRef");
  sandbox->resources = body->value("resources", Json({{"cpu", "1000m"}, {"memory", "2048Mi"}}));
  sandbox->lifecycle = body->value("lifecycle", Json::object());
  sandbox->egress_policy = policy;
  sandbox->created_at = iso_time(std::chrono::system_clock::now());
  sandbox->image = *image;
  sandbox->transient_left = config_.transient_404_polls;
  sandbox->creating_left = config_.creating_polls;
  sandbox->key = SandboxKey{kKind, sandbox->id, "acas"};

  // A spec the linux backend refuses (say, a host pattern it cannot parse) is the client's
  // error: 400. A failure of the acquire itself is the service's: the sandbox shows state Failed
  // once the Creating polls are over. The linux sandbox is made now, while the client is told
  // "Creating".
  std::optional<SandboxSpec> spec;
  try {
    SandboxSpec::Fields fields;
    fields.kind = kKind;
    fields.image = image->linux_image;
    fields.work_dir = kLinuxWorkDir;
    fields.egress = mode;
    fields.egress_allow = hosts;
    spec.emplace(std::move(fields));
  } catch (const InvalidArgument& refused) {
    return error(400, "InvalidSandboxSpec", refused.message());
  }
  try {
    sandbox->linux = backend_->acquire(sandbox->key, *spec);
  } catch (const std::exception& failed) {
    sandbox->failure = failed.what();
    ::dprintf(2, "acas-double: sandbox %s failed: %s\n", sandbox->id.c_str(), failed.what());
  }
  Json answer = sandbox_json(*sandbox);
  {
    std::lock_guard lock(mutex_);
    sandboxes_[sandbox->id] = sandbox;
    order_.push_back(sandbox->id);
  }
  return json_response(201, answer);
}

Response Service::get(const std::string& id) {
  std::lock_guard lock(mutex_);
  const auto found = sandboxes_.find(id);
  if (found == sandboxes_.end()) return error(404, "SandboxNotFound", "no sandbox '" + id + "'");
  Sandbox& sandbox = *found->second;
  if (sandbox.state == "Creating") {
    if (sandbox.transient_left > 0) {
      --sandbox.transient_left;
      return error(404, "SandboxNotFound", "no sandbox '" + id + "'");
    }
    if (sandbox.creating_left > 0) {
      --sandbox.creating_left;
    } else {
      sandbox.state = sandbox.failure.empty() ? "Running" : "Failed";
      if (!sandbox.failure.empty()) sandbox.state_details = {{"message", sandbox.failure}};
    }
  } else if (sandbox.state == "Deleting") {
    if (sandbox.deleting_left > 0) {
      --sandbox.deleting_left;
    } else {
      sandboxes_.erase(found);
      order_.erase(std::remove(order_.begin(), order_.end(), id), order_.end());
      return error(404, "SandboxNotFound", "no sandbox '" + id + "'");
    }
  }
  return json_response(200, sandbox_json(sandbox));
}

Response Service::list(const Request& request) {
  const auto selector = parse_selector(request.query_value("labels").value_or(""));
  Json items = Json::array();
  {
    std::lock_guard lock(mutex_);
    for (const auto& id : order_) {
      const Sandbox& sandbox = *sandboxes_.at(id);
      const bool matches = std::all_of(selector.begin(), selector.end(), [&](const auto& term) {
        const auto value = sandbox.labels.find(term.first);
        return value != sandbox.labels.end() && *value == term.second;
      });
      if (matches) items.push_back(sandbox_json(sandbox));
    }
  }
  if (config_.page_size <= 0) return json_response(200, items);
  std::size_t skip = 0;
  try {
    skip = std::stoul(request.query_value("skipToken").value_or("0"));
  } catch (const std::exception&) {
    return error(400, "InvalidSkipToken", "skipToken must be a number");
  }
  const std::size_t size = static_cast<std::size_t>(config_.page_size);
  Json page = Json::array();
  for (std::size_t i = skip; i < items.size() && i < skip + size; ++i) page.push_back(items[i]);
  Json body = {{"value", page}};
  if (skip + size < items.size()) {
    std::string link = endpoint_ + group_path_ + "/sandboxes?api-version=" + kApiVersion +
                       "&skipToken=" + std::to_string(skip + size);
    if (const auto labels = request.query_value("labels")) {
      std::string escaped;
      for (const unsigned char c : *labels) {
        if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
          escaped += static_cast<char>(c);
        } else {
          char hex[4];
          std::snprintf(hex, sizeof hex, "%%%02X", c);
          escaped += hex;
        }
      }
      link += "&labels=" + escaped;
    }
    body["nextLink"] = link;
  } else {
    body["nextLink"] = nullptr;
  }
  return json_response(200, body);
}

void Service::dispose_linux(Sandbox& sandbox) {
  std::shared_ptr<airlock::Sandbox> linux;
  {
    std::lock_guard lock(mutex_);
    linux = std::move(sandbox.linux);
  }
  if (!linux) return;
  if (!backend_->dispose_kind(sandbox.key, linux->kind(), linux->instance_id())) {
    ::dprintf(2, "acas-double: disposing the linux sandbox of %s left something behind\n",
              sandbox.id.c_str());
  }
}

Response Service::remove(const std::string& id) {
  std::shared_ptr<Sandbox> sandbox;
  {
    std::lock_guard lock(mutex_);
    const auto found = sandboxes_.find(id);
    if (found == sandboxes_.end()) return error(404, "SandboxNotFound", "no sandbox '" + id + "'");
    sandbox = found->second;
    if (sandbox->state != "Deleting") {
      sandbox->state = "Deleting";
      sandbox->deleting_left = config_.deleting_polls;
    }
  }
  dispose_linux(*sandbox);
  if (config_.deleting_polls <= 0) {
    std::lock_guard lock(mutex_);
    sandboxes_.erase(id);
    order_.erase(std::remove(order_.begin(), order_.end(), id), order_.end());
  }
  Response response;
  response.status = 202;
  return response;
}

Response Service::lifecycle(const Request& request, const std::string& id) {
  const auto body = parse_body(request);
  if (!body || !body->is_object()) return error(400, "InvalidRequestBody", "the body must be a JSON object");
  std::lock_guard lock(mutex_);
  const auto found = sandboxes_.find(id);
  if (found == sandboxes_.end()) return error(404, "SandboxNotFound", "no sandbox '" + id + "'");
  found->second->lifecycle = *body;
  return json_response(200, sandbox_json(*found->second));
}

Response Service::resume(const std::string& id) {
  std::lock_guard lock(mutex_);
  const auto found = sandboxes_.find(id);
  if (found == sandboxes_.end()) return error(404, "SandboxNotFound", "no sandbox '" + id + "'");
  Sandbox& sandbox = *found->second;
  if (sandbox.state == "Running") return json_response(200, sandbox_json(sandbox));
  if (sandbox.state != "Stopped" && sandbox.state != "Suspended" && sandbox.state != "Idle") {
    return error(409, "InvalidSandboxState", "cannot resume a sandbox in state " + sandbox.state);
  }
  if (sandbox.state_details.value("stoppedReason", Json()) == "Disabled") {
    return error(409, "SandboxDisabled", "the sandbox is disabled; enable it before resuming");
  }
  sandbox.state = "Running";
  sandbox.state_details = Json::object();
  return json_response(200, sandbox_json(sandbox));
}

std::shared_ptr<Service::Sandbox> Service::running_sandbox(const std::string& id,
                                                           Response& refusal) {
  std::lock_guard lock(mutex_);
  const auto found = sandboxes_.find(id);
  if (found == sandboxes_.end() || found->second->state == "Deleting") {
    refusal = error(404, "SandboxNotFound", "no sandbox '" + id + "'");
    return nullptr;
  }
  if (found->second->state != "Running" || !found->second->linux) {
    refusal = error(409, "SandboxNotRunning",
                    "sandbox '" + id + "' is " + found->second->state + ", not Running");
    return nullptr;
  }
  return found->second;
}

Response Service::exec(const Request& request, const std::string& id) {
  Response refusal;
  const auto sandbox = running_sandbox(id, refusal);
  if (!sandbox) return refusal;
  std::shared_ptr<airlock::Sandbox> linux;
  {
    std::lock_guard lock(mutex_);
    linux = sandbox->linux;
  }
  if (!linux) return error(409, "SandboxNotRunning", "sandbox '" + id + "' is gone");
  const auto body = parse_body(request);
  if (!body || !body->is_object() || !body->contains("command") || !(*body)["command"].is_string()) {
    return error(400, "InvalidRequestBody", "executeShellCommand needs {\"command\": string}");
  }
  ExecOptions options;
  options.working_directory = body->value("workingDirectory", std::string("/"));
  if (options.working_directory.empty()) options.working_directory = "/";
  options.timeout = std::chrono::duration_cast<Milliseconds>(config_.exec_timeout);
  options.stop = stop_.get_token();
  const auto started = std::chrono::steady_clock::now();
  auto elapsed_ms = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                 started)
        .count();
  };
  try {
    const ExecResult result = linux->exec(Command::shell((*body)["command"].get<std::string>()), options);
    return json_response(200, {{"exitCode", result.exit_code},
                               {"stdout", result.stdout_text()},
                               {"stderr", result.stderr_text()},
                               {"executionTimeMs", elapsed_ms()}});
  } catch (const Timeout& timeout) {
    if (stop_.stop_requested()) return error(503, "ServiceUnavailable", "the double is stopping");
    // The server-side limit: answered as a finished command (exit 124, as timeout(1) does), so
    // that no client retry policy re-runs it.
    ExecResult partial;
    partial.stdout_bytes = timeout.partial_stdout();
    partial.stderr_bytes = timeout.partial_stderr();
    return json_response(200, {{"exitCode", 124},
                               {"stdout", partial.stdout_text()},
                               {"stderr", partial.stderr_text() + "command timed out after " +
                                              std::to_string(config_.exec_timeout.count()) + " s\n"},
                               {"executionTimeMs", elapsed_ms()}});
  } catch (const Error& failed) {
    return error(400, "ExecutionFailed", failed.message());
  }
}

Response Service::files(const Request& request, const Route& route) {
  Response refusal;
  const auto sandbox = running_sandbox(route.sandbox_id, refusal);
  if (!sandbox) return refusal;
  long init_pid = 0;
  {
    std::lock_guard lock(mutex_);
    const auto* linux = dynamic_cast<const linux_backend::LinuxSandbox*>(sandbox->linux.get());
    if (linux == nullptr) return error(500, "InternalError", "not a linux sandbox");
    init_pid = linux->record().init_pid;
  }
  const std::string& name = route.name;
  try {
    const GuestFiles files = GuestFiles::of_init(init_pid, sandbox->image.unmapped_owner);
    if (name == "files_mkdir") {
      const auto body = parse_body(request);
      if (!body || !body->is_object() || !body->contains("path") || !(*body)["path"].is_string()) {
        return error(400, "InvalidRequestBody", "mkdir needs {\"path\": string}");
      }
      files.mkdir((*body)["path"]);
      return json_response(200, {{"success", true}});
    }
    const auto path = request.query_value("path");
    if (!path) return error(400, "MissingPath", "the path query parameter is required");
    if (name == "files_write") {
      std::optional<mode_t> mode;
      if (const auto text = request.query_value("mode"); text && !text->empty()) {
        mode = static_cast<mode_t>(std::stoul(*text, nullptr, 8) & 07777);
      }
      files.write(*path, request.body, request.query_value("createDirs") == "true", mode);
      return json_response(200, {{"success", true},
                                 {"bytesWritten", request.body.size()}});
    }
    if (name == "files_read") {
      auto [fd, size] = files.open_read(*path);
      Response response;
      response.content_type = "application/octet-stream";
      response.stream = fd;
      response.stream_size = size;
      return response;
    }
    if (name == "files_stat") return json_response(200, files.stat(*path));
    if (name == "files_list") return json_response(200, files.list(*path));
    if (name == "files_delete") {
      files.remove(*path, request.query_value("recursive") == "true");
      return json_response(200, {{"success", true}});
    }
  } catch (const FileApiError& refused) {
    return error(refused.status(), refused.code(), refused.what());
  } catch (const std::invalid_argument&) {
    return error(400, "InvalidMode", "mode must be octal");
  }
  return error(404, "NotFound", "no such route");
}

Response Service::images_public() {
  Json items = Json::array();
  for (const auto& entry : config_.images) {
    if (entry.is_public) items.push_back({{"name", entry.name}});
  }
  if (config_.page_size > 0) return json_response(200, {{"value", items}, {"nextLink", nullptr}});
  return json_response(200, items);
}

Response Service::images() {
  Json items = Json::array();
  for (const auto& entry : config_.images) {
    if (entry.id.empty()) continue;
    items.push_back({{"id", entry.id},
                     {"name", entry.name},
                     {"image", {{"base", entry.base}}},
                     {"status", {{"state", "Ready"}}}});
  }
  if (config_.page_size > 0) return json_response(200, {{"value", items}, {"nextLink", nullptr}});
  return json_response(200, items);
}

// ---- identity -----------------------------------------------------------------------------

std::string Service::mint_token() {
  const std::string token = "double." + linux_backend::random_hex(24);
  std::lock_guard lock(mutex_);
  tokens_[token] = std::chrono::system_clock::now() + config_.token_lifetime;
  return token;
}

Response Service::token(const Request& request, const std::string& tenant) {
  if (tenant != config_.tenant) {
    return oauth_error(400, "invalid_tenant", "AADSTS90002: Tenant '" + tenant + "' not found.");
  }
  const auto form = parse_form(request.body);
  auto field = [&](const char* name) {
    const auto found = form.find(name);
    return found == form.end() ? std::string() : found->second;
  };
  if (field("grant_type") != "client_credentials") {
    return oauth_error(400, "unsupported_grant_type", "only client_credentials is served");
  }
  if (field("client_id").empty() || field("scope").empty()) {
    return oauth_error(400, "invalid_request", "client_id and scope are required");
  }
  bool accepted = false;
  if (!field("client_assertion_type").empty() || !field("client_assertion").empty()) {
    std::string expected;
    if (!config_.federated_token_file.empty()) {
      std::ifstream file(config_.federated_token_file);
      std::stringstream text;
      text << file.rdbuf();
      expected = trim(text.str());
    }
    accepted = field("client_assertion_type") ==
                   "urn:ietf:params:oauth:client-assertion-type:jwt-bearer" &&
               !expected.empty() && field("client_assertion") == expected;
  } else {
    accepted = !config_.client_secret.empty() && field("client_secret") == config_.client_secret;
  }
  if (!accepted) {
    return oauth_error(401, "invalid_client",
                       "AADSTS7000215: Invalid client secret or assertion provided.");
  }
  const auto lifetime = config_.token_lifetime.count();
  return json_response(200, {{"token_type", "Bearer"},
                             {"expires_in", lifetime},
                             {"ext_expires_in", lifetime},
                             {"access_token", mint_token()}});
}

Response Service::imds(const Request& request) {
  if (request.header("metadata") != std::string("true")) {
    return oauth_error(400, "invalid_request", "Required metadata header not specified");
  }
  const auto resource = request.query_value("resource");
  if (!request.query_value("api-version") || !resource || resource->empty()) {
    return oauth_error(400, "invalid_request", "api-version and resource are required");
  }
  const auto expires = std::chrono::system_clock::now() + config_.token_lifetime;
  return json_response(200, {{"access_token", mint_token()},
                             {"expires_on", std::to_string(epoch_seconds(expires))},
                             {"expires_in", std::to_string(config_.token_lifetime.count())},
                             {"resource", *resource},
                             {"token_type", "Bearer"}});
}

Response Service::msi(const Request& request) {
  if (config_.identity_header.empty() ||
      request.header("x-identity-header") != config_.identity_header) {
    return oauth_error(401, "unauthorized", "X-IDENTITY-HEADER is missing or wrong");
  }
  const auto resource = request.query_value("resource");
  if (!request.query_value("api-version") || !resource || resource->empty()) {
    return oauth_error(400, "invalid_request", "api-version and resource are required");
  }
  const auto expires = std::chrono::system_clock::now() + config_.token_lifetime;
  return json_response(200, {{"access_token", mint_token()},
                             {"expires_on", std::to_string(epoch_seconds(expires))},
                             {"resource", *resource},
                             {"token_type", "Bearer"}});
}

// ---- the control API ------------------------------------------------------------------------

Response Service::control(const Request& request) {
  const auto parts = segments(request.path);  // "_double", …
  const std::string what = parts.size() > 1 ? parts[1] : "";
  if (what == "faults" && request.method == "POST") {
    const auto body = parse_body(request);
    if (!body || !body->is_object() || !body->contains("route")) {
      return error(400, "InvalidFault", "a fault needs at least {\"route\": name}");
    }
    Fault fault;
    fault.method = body->value("method", std::string());
    fault.route = (*body)["route"].get<std::string>();
    fault.status = body->value("status", 0);
    fault.times = body->value("times", 1);
    fault.skip = body->value("skip", 0);
    auto text_of = [](const Json& value) -> std::optional<std::string> {
      if (value.is_null()) return std::nullopt;
      if (value.is_string()) return value.get<std::string>();
      return value.dump();
    };
    fault.retry_after = text_of(body->value("retry_after", Json()));
    fault.retry_after_ms = text_of(body->value("retry_after_ms", Json()));
    fault.delay_ms = body->value("delay_ms", 0);
    if (body->contains("body") && (*body)["body"].is_string()) fault.body = (*body)["body"].get<std::string>();
    fault.drop = body->value("drop", false);
    std::lock_guard lock(mutex_);
    faults_.push_back(fault);
    return json_response(200, {{"faults", faults_.size()}});
  }
  if (what == "faults" && request.method == "DELETE") {
    std::lock_guard lock(mutex_);
    faults_.clear();
    return json_response(200, {{"faults", 0}});
  }
  if (what == "state" && request.method == "GET") {
    Json sandboxes = Json::array();
    {
      std::lock_guard lock(mutex_);
      for (const auto& id : order_) {
        const Sandbox& sandbox = *sandboxes_.at(id);
        sandboxes.push_back({{"id", sandbox.id},
                             {"state", sandbox.state},
                             {"labels", sandbox.labels},
                             {"lifecycle", sandbox.lifecycle},
                             {"egressPolicy", sandbox.egress_policy},
                             {"linux_instance_id",
                              sandbox.linux ? Json(sandbox.linux->instance_id()) : Json()}});
      }
    }
    const auto live = backend_->list_sandboxes().size();
    return json_response(200, {{"sandboxes", sandboxes}, {"linux_sandboxes", live}});
  }
  if (what == "requests" && request.method == "GET") {
    std::lock_guard lock(mutex_);
    return json_response(200, requests_);
  }
  if (what == "requests" && request.method == "DELETE") {
    std::lock_guard lock(mutex_);
    requests_ = Json::array();
    return json_response(200, {{"cleared", true}});
  }
  if (what == "reset" && request.method == "POST") {
    std::lock_guard lock(mutex_);
    faults_.clear();
    requests_ = Json::array();
    return json_response(200, {{"reset", true}});
  }
  if (what == "sandboxes" && parts.size() == 4 && parts[3] == "state" && request.method == "POST") {
    const auto body = parse_body(request);
    if (!body || !body->is_object() || !body->contains("state") || !(*body)["state"].is_string()) {
      return error(400, "InvalidState", "needs {\"state\": string, \"stoppedReason\": …}");
    }
    std::lock_guard lock(mutex_);
    const auto found = sandboxes_.find(parts[2]);
    if (found == sandboxes_.end()) return error(404, "SandboxNotFound", "no sandbox '" + parts[2] + "'");
    Sandbox& sandbox = *found->second;
    sandbox.state = (*body)["state"].get<std::string>();
    sandbox.transient_left = 0;
    sandbox.creating_left = 0;
    sandbox.state_details = Json::object();
    const Json reason = body->value("stoppedReason", Json());
    if (reason.is_string()) sandbox.state_details["stoppedReason"] = reason;
    return json_response(200, sandbox_json(sandbox));
  }
  return error(404, "NotFound", "no such control route: " + request.method + " " + request.path);
}

}  // namespace airlock::acas_double
