#include <spdlog/spdlog.h>

#include <set>
#include <thread>

#include "airlock/backends/acas.hpp"
#include "airlock/encoding.hpp"
#include "airlock/errors.hpp"
#include "airlock/paths.hpp"
#include "backends/acas/acas_sandbox.hpp"
#include "backends/acas/service.hpp"
#include "backends/kit/contained.hpp"

namespace airlock::acas {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;

constexpr TransferLimits kTransferLimits{32ull << 20, 128ull << 20, 128};

// The labels a sandbox carries on the service. Reserved keys first; a spec label may not take one.
constexpr const char* kReservedLabels[] = {"scope", "thread", "agent", "kind", "egress", "airlock"};
constexpr const char* kMarker = "airlock";  // "airlock": "sandbox" — what purge_all may delete

using Labels = std::map<std::string, std::string>;

Labels key_labels(const SandboxKey& key) {
  return {{kMarker, "sandbox"},
          {"scope", map_label_value(key.scope)},
          {"thread", map_label_value(key.thread_id)},
          {"agent", map_label_value(key.agent_dir)}};
}

Labels kind_labels(const SandboxKey& key, std::string_view kind) {
  Labels labels = key_labels(key);
  labels.emplace("kind", map_label_value(kind));
  return labels;
}

Labels scope_labels(std::string_view scope, std::optional<std::string_view> thread) {
  Labels labels{{kMarker, "sandbox"}, {"scope", map_label_value(scope)}};
  if (thread) labels.emplace("thread", map_label_value(*thread));
  return labels;
}

std::string label_selector(const Labels& labels) {
  std::string selector;
  for (const auto& [name, value] : labels) {
    selector += (selector.empty() ? "" : ",") + name + "=" + value;
  }
  return selector;
}

struct Listed {
  std::string id;
  std::string state;
  Labels labels;
  std::string created_at;
};

std::string lower(std::string text) { return ascii_lower(text); }

std::string text_field(const json& object, const char* name) {
  if (object.is_object() && object.contains(name) && object[name].is_string()) {
    return object[name].get<std::string>();
  }
  return {};
}

// One (key, kind) as the labels store it: what a failed deletion is retained under, whether the
// sandbox was found by this process or by a listing.
std::string identity_from_labels(const Labels& labels) {
  std::string joined;
  for (const char* name : {"scope", "thread", "agent", "kind"}) {
    const auto found = labels.find(name);
    const std::string value = found == labels.end() ? "" : found->second;
    joined += std::to_string(value.size()) + ":" + value;
  }
  return sha256_hex(joined).substr(0, 32);
}

std::string identity_of(const SandboxKey& key, std::string_view kind) {
  return identity_from_labels(kind_labels(key, kind));
}

// A spec's image as the service names it: a catalogue name, an imported disk image, or an id.
struct ImageChoice {
  json disk;            // sourcesRef.diskImage
  std::string display;  // for messages and the probe cache
};

}  // namespace

struct AcasBackend::State {
  explicit State(AcasConfig config) : service(std::make_shared<Service>(std::move(config))) {}

  std::shared_ptr<Service> service;
  std::mutex mutex;
  std::map<std::string, std::shared_ptr<std::mutex>> locks;        // per (key, kind)
  std::map<std::string, std::weak_ptr<AcasSandbox>> live;          // per (key, kind)
  // Deletions that failed, per (key, kind): the ids still to go. Acquisition of that identity is
  // refused until they are gone.
  std::map<std::string, std::set<std::string>> retained;
  struct Verdict {
    Clock::time_point at;
    bool tools = false;
    bool host_tool_tools = false;
    bool removal = false;
  };
  std::map<std::string, Verdict> probes;  // per image and work dir

  const AcasConfig& config() const { return service->config; }
  const DataPlane& plane() const { return *service->plane; }

  std::shared_ptr<std::mutex> lock_for(const std::string& identity) {
    std::lock_guard guard(mutex);
    auto& slot = locks[identity];
    if (!slot) slot = std::make_shared<std::mutex>();
    return slot;
  }

  Call call_for(CredentialPurpose purpose, std::string_view scope,
                std::optional<std::string_view> thread, milliseconds budget) {
    CredentialRequest request;
    request.purpose = purpose;
    request.scope = std::string(scope);
    if (thread) request.thread_id = std::string(*thread);
    return Call{service->credential_for(request), Clock::now() + budget, {}};
  }

  // ---- the service's sandboxes ----------------------------------------------------------------

  std::vector<Listed> list(const Call& call, const Labels& labels) {
    std::vector<Listed> found;
    const std::string route = plane().group_path() + "/sandboxes";
    Query query;
    if (!labels.empty()) query.emplace_back("labels", label_selector(labels));
    http::Response response = plane().request(call, "GET", route, query);
    for (int page = 0;; ++page) {
      if (response.status != 200) DataPlane::fail("list sandboxes", "GET", route, response);
      const json parsed = json::parse(response.body, nullptr, false);
      const json* items = nullptr;
      std::string next;
      if (parsed.is_array()) {
        items = &parsed;
      } else if (parsed.is_object() && parsed.contains("value") && parsed["value"].is_array()) {
        items = &parsed["value"];
        next = text_field(parsed, "nextLink");
      } else {
        throw BackendError("the sandbox service listed sandboxes in a form airlock cannot read",
                           "GET " + route + ": " + response.body.substr(0, 200));
      }
      for (const auto& item : *items) {
        Listed listed;
        listed.id = text_field(item, "id");
        listed.state = lower(text_field(item, "state"));
        listed.created_at = text_field(item, "createdAt");
        if (item.contains("labels") && item["labels"].is_object()) {
          for (const auto& [name, value] : item["labels"].items()) {
            if (value.is_string()) listed.labels[name] = value.get<std::string>();
          }
        }
        // The filter is the service's; it is checked again here, because deleting a sandbox a
        // lax filter let through would end another conversation's.
        bool matches = !listed.id.empty();
        for (const auto& [name, value] : labels) {
          const auto have = listed.labels.find(name);
          if (have == listed.labels.end() || have->second != value) matches = false;
        }
        if (matches) found.push_back(std::move(listed));
      }
      if (next.empty()) return found;
      // A next page is fetched only from the endpoint's own host, over https.
      const std::string base = checked_endpoint(config().endpoint, "acas");
      if (!next.starts_with(base + "/") || page > 1000) {
        throw BackendError("the sandbox service's next page points elsewhere; airlock stops there",
                           "nextLink " + next.substr(0, 200));
      }
      http::Request request;
      request.url = next;
      request.deadline = call.deadline;
      request.headers.emplace_back(
          "Authorization", "Bearer " + call.credential->get_token(config().token_scope, call.deadline).token);
      response = service->client->perform(request);
    }
  }

  json get(const Call& call, const std::string& id, long* status) {
    const std::string route = plane().sandbox_path(id);
    const http::Response response = plane().request(call, "GET", route);
    *status = response.status;
    if (response.status == 404) return nullptr;
    if (response.status != 200) DataPlane::fail("describe a sandbox", "GET", route, response);
    return json::parse(response.body, nullptr, false);
  }

  // Waits until GET shows `state` Running. 404s are tolerated (the service's index lags a
  // create); Failed and Deleting end the wait.
  void wait_running(const Call& call, const std::string& id) {
    while (true) {
      long status = 0;
      const json sandbox = get(call, id, &status);
      const std::string state = lower(text_field(sandbox, "state"));
      if (state == "running") return;
      if (state == "failed" || state == "deleting") {
        throw BackendError("the sandbox service could not start the sandbox (state " + state + ")",
                           "sandbox " + id);
      }
      if (Clock::now() + config().poll_interval >= call.deadline) {
        throw BackendError("the sandbox service did not start the sandbox in time",
                           "sandbox " + id + " still " + (state.empty() ? "absent" : state));
      }
      std::this_thread::sleep_for(config().poll_interval);
    }
  }

  // A warm sandbox may have been suspended by the service's own timer: resume it.
  void ensure_running(const Call& call, const std::string& id) {
    long status = 0;
    const json sandbox = get(call, id, &status);
    if (status == 404) throw NotFound("the sandbox is gone", id);
    const std::string state = lower(text_field(sandbox, "state"));
    if (state == "running") return;
    if (state == "stopped" || state == "suspended" || state == "idle") {
      const json details = sandbox.is_object() && sandbox.contains("stateDetails")
                               ? sandbox["stateDetails"]
                               : json::object();
      if (text_field(details, "stoppedReason") == "Disabled") {
        throw BackendError("the sandbox is disabled on the service and will not resume",
                           "sandbox " + id);
      }
      const std::string route = plane().sandbox_path(id) + "/resume";
      (void)plane().request(call, "POST", route, {}, Body{"{}"});
      wait_running(call, id);
      return;
    }
    if (state == "creating" || state == "resuming") {
      wait_running(call, id);
      return;
    }
    throw BackendError("the sandbox is not usable (state " + (state.empty() ? "unknown" : state) + ")",
                       "sandbox " + id);
  }

  // DELETE, then (unless `confirm` is false) GET until 404. True when the sandbox is gone, or —
  // unconfirmed — when the service accepted its deletion (404 on DELETE included).
  bool delete_sandbox(const Call& call, const std::string& id, bool confirm = true) {
    const std::string route = plane().sandbox_path(id);
    const http::Response response = plane().request(call, "DELETE", route);
    if (response.status == 404) return true;
    if (response.status != 200 && response.status != 202 && response.status != 204) {
      DataPlane::fail("delete a sandbox", "DELETE", route, response);
    }
    if (!confirm) return true;
    while (true) {
      long status = 0;
      (void)get(call, id, &status);
      if (status == 404) return true;
      if (Clock::now() + config().poll_interval >= call.deadline) {
        throw BackendError("the sandbox service did not finish deleting the sandbox in time",
                           "sandbox " + id);
      }
      std::this_thread::sleep_for(config().poll_interval);
    }
  }

  // Deletes `ids` of `identity`; what could not be deleted is retained (and refuses acquisition
  // of that identity). Returns how many went.
  int delete_all(const Call& call, const std::string& identity, const std::vector<std::string>& ids,
                 bool confirm = true) {
    int gone = 0;
    for (const auto& id : ids) {
      bool deleted = false;
      try {
        deleted = delete_sandbox(call, id, confirm);
      } catch (const std::exception& failure) {
        spdlog::warn("acas: deleting sandbox {} failed (retained; acquisition of its conversation "
                     "is refused until it goes): {}",
                     id, error_detail(failure));
      }
      std::lock_guard guard(mutex);
      if (deleted) {
        ++gone;
        if (auto found = retained.find(identity); found != retained.end()) {
          found->second.erase(id);
          if (found->second.empty()) retained.erase(found);
        }
        if (auto held = live.find(identity); held != live.end()) {
          if (auto sandbox = held->second.lock(); !sandbox || sandbox->instance_id() == id) {
            if (sandbox) sandbox->mark_gone();
            live.erase(held);
          }
        }
      } else {
        retained[identity].insert(id);
      }
    }
    return gone;
  }

  // ---- images and probes --------------------------------------------------------------------

  ImageChoice choose_image(const Call& call, const SandboxSpec& spec) {
    if (spec.image_id()) {
      return ImageChoice{json{{"id", *spec.image_id()}}, "image id " + *spec.image_id()};
    }
    const std::string image = spec.image().value_or(config().default_image);
    if (image.empty()) {
      throw InvalidArgument(
          "No sandbox image is configured: the spec names neither image nor image_id, and the "
          "acas backend has no default_image.",
          "image");
    }
    if (image.find('/') == std::string::npos && image.find(':') == std::string::npos) {
      const json catalogue = plane().json(call, "GET", plane().group_path() + "/diskimages/public",
                                          "list the prebuilt images");
      const json& items = catalogue.is_object() && catalogue.contains("value") ? catalogue["value"] : catalogue;
      if (items.is_array()) {
        for (const auto& item : items) {
          if (text_field(item, "name") == image) {
            return ImageChoice{json{{"name", image}, {"isPublic", true}}, image};
          }
        }
      }
      throw InvalidArgument("image '" + image +
                                "' is not in the sandbox service's prebuilt catalogue (a bare name "
                                "names a prebuilt image; an imported one is repo:tag)",
                            "image");
    }
    const std::string qualified = image.find('/') == std::string::npos && !config().registry.empty()
                                      ? config().registry + "/" + image
                                      : image;
    const json images =
        plane().json(call, "GET", plane().group_path() + "/diskimages", "list the imported images");
    const json& items = images.is_object() && images.contains("value") ? images["value"] : images;
    if (items.is_array()) {
      for (const auto& item : items) {
        const json spec_part = item.contains("image") ? item["image"] : json::object();
        const std::string base = text_field(spec_part, "base");
        if (base != qualified && base != image) continue;
        const std::string state =
            lower(text_field(item.contains("status") ? item["status"] : json::object(), "state"));
        if (state != "ready" && state != "succeeded") continue;
        const std::string id = text_field(item, "id");
        if (!id.empty()) return ImageChoice{json{{"id", id}}, qualified};
      }
    }
    throw InvalidArgument("image '" + qualified +
                              "' is not imported into this sandbox group (or not ready); import "
                              "it before use",
                          "image");
  }

  // The acquire-time probes, once per image per probe_cache: the capture's programs, and
  // whether the guest can remove what the file API wrote beside it.
  Verdict probe(const AcasSandbox& sandbox, const Call& call, const std::string& image,
               const std::string& work_dir) {
    {
      std::lock_guard guard(mutex);
      if (auto found = probes.find(image + "\n" + work_dir);
          found != probes.end() && Clock::now() - found->second.at < config().probe_cache) {
        return found->second;
      }
    }
    Verdict verdict;
    verdict.at = Clock::now();
    std::string script = "for c in";
    for (const char* tool : capture::kCaptureTools) script += std::string(" ") + tool;
    script += "; do command -v \"$c\" >/dev/null 2>&1 || exit 3; done\n"
              "[ -d /tmp ] && [ -w /tmp ] || exit 3\n"
              "for c in nohup; do command -v \"$c\" >/dev/null 2>&1 || exit 4; done\nexit 0\n";
    const auto tools = sandbox.guest(script, call.deadline);
    verdict.tools = tools.exit_code == 0 || tools.exit_code == 4;
    verdict.host_tool_tools = tools.exit_code == 0;

    // Beside where uploads land: a directory of the work dir, which the guest itself just made.
    const std::string directory =
        (work_dir == "/" ? "" : work_dir) + "/.airlock-authority-" + capture::fresh_token();
    const std::string file = directory + "/probe";
    const std::string base = plane().sandbox_path(sandbox.instance_id());
    const auto wrote = plane().request(call, "PUT", base + "/files",
                                       {{"path", file}, {"createDirs", "true"}},
                                       Body{"airlock removal probe", "application/octet-stream"},
                                       1u << 20, false);
    if (wrote.status >= 200 && wrote.status < 300 &&
        service->stat(call, sandbox.instance_id(), file)) {
      const auto removed = sandbox.guest("rm -f -- " + posix_quote(file) + "\n", call.deadline);
      verdict.removal = removed.exit_code == 0 && !service->stat(call, sandbox.instance_id(), file);
    }
    const auto cleaned = plane().request(call, "DELETE", base + "/files",
                                         {{"path", directory}, {"recursive", "true"}},
                                         std::nullopt, 1u << 20, false);
    if (cleaned.status >= 300 && cleaned.status != 404) {
      spdlog::warn("acas: the removal probe's directory could not be deleted (status {})",
                   cleaned.status);
    }
    std::lock_guard guard(mutex);
    probes[image + "\n" + work_dir] = verdict;
    return verdict;
  }
};

// ---- construction and declarations ----------------------------------------------------------

AcasBackend::AcasBackend(AcasConfig config) : state_(std::make_shared<State>(std::move(config))) {}
AcasBackend::~AcasBackend() = default;

const AcasConfig& AcasBackend::config() const noexcept { return state_->config(); }

std::optional<EgressSet> AcasBackend::egress_modes() const {
  return EgressSet{Egress::closed, Egress::allowlist};
}

std::optional<CapabilitySet> AcasBackend::capabilities() const {
  return CapabilitySet{Capability::exec,       Capability::files_in,     Capability::files_out,
                       Capability::files_list, Capability::files_delete, Capability::host_tools};
}

std::optional<SandboxLimits> AcasBackend::limits() const {
  return SandboxLimits{kTransferLimits, kTransferLimits};
}

std::optional<OsFamilySet> AcasBackend::os_families() const { return OsFamilySet{OsFamily::posix}; }

std::vector<std::string> AcasBackend::stated_residuals() const {
  return {
      "native reads retain a path race: read_file, stat_file and list_dir use the service's file "
      "API with host authority. They reject links observed during checks, but cannot hold those "
      "paths unchanged through the operation. A concurrent replacement can expose bytes outside "
      "the checked directory, including bytes the guest cannot read (read_file), metadata outside "
      "the checked directory (stat_file), names and metadata from another directory (list_dir).",
      "the service's file flags cannot reliably distinguish a FIFO from an empty regular file; a "
      "bounded read timeout prevents an endless wait, it does not establish that the entry is "
      "regular (airlock asks the guest before reading an entry the file API calls empty).",
      "byte caps, timeouts, root images and disposal do not close the path race: select a backend "
      "with a held filesystem boundary when that guarantee is required."};
}

// ---- acquire --------------------------------------------------------------------------------

std::shared_ptr<Sandbox> AcasBackend::acquire(const SandboxKey& key, const SandboxSpec& spec) {
  State& state = *state_;
  const AcasConfig& config = state.config();
  if (spec.egress() == Egress::unrestricted) {
    throw EgressNotEnforced(
        "the acas backend applies default-deny egress with per-host allow rules; it cannot "
        "serve 'unrestricted'",
        "egress");
  }
  for (const auto& [name, value] : spec.labels()) {
    for (const char* reserved : kReservedLabels) {
      if (name == reserved) {
        throw InvalidArgument("label '" + name + "' is reserved by the acas backend (reserved: "
                                  "scope, thread, agent, kind, egress, airlock)",
                              "labels." + name);
      }
    }
  }
  const std::string identity = identity_of(key, spec.kind());
  const std::string posture = map_label_value(spec.egress_posture());
  const auto lock = state.lock_for(identity);
  std::lock_guard guard(*lock);
  Call call = state.call_for(CredentialPurpose::acquire, key.scope, key.thread_id,
                             config.create_timeout);

  // Deletions that failed earlier are retried first; while any remains, nothing new is made.
  std::vector<std::string> pending;
  {
    std::lock_guard held(state.mutex);
    if (auto found = state.retained.find(identity); found != state.retained.end()) {
      pending.assign(found->second.begin(), found->second.end());
    }
  }
  if (!pending.empty()) {
    Call cleanup = state.call_for(CredentialPurpose::dispose, key.scope, key.thread_id,
                                  config.delete_timeout);
    if (state.delete_all(cleanup, identity, pending) != static_cast<int>(pending.size())) {
      throw BackendError(
          "an earlier disposal of this conversation's sandbox failed and is retained; "
          "acquisition is refused until that cleanup succeeds");
    }
  }

  auto hand_out = [&](const std::string& id) -> std::shared_ptr<Sandbox> {
    std::weak_ptr<State> weak = state_;
    auto sandbox = std::make_shared<AcasSandbox>(
        state.service, SandboxIdentity{id, key, spec.kind(), spec.work_dir(), posture},
        [weak, identity, key](const AcasSandbox& gone, const std::string&) {
          const auto owner = weak.lock();
          if (!owner) return;
          try {
            // The deletion is asked for, not waited out: the caller's Timeout is due now, and
            // the listing never hands out a sandbox the service shows Deleting.
            Call cleanup = owner->call_for(CredentialPurpose::dispose, key.scope, key.thread_id,
                                           std::min(owner->config().delete_timeout,
                                                    milliseconds(30'000)));
            owner->delete_all(cleanup, identity, {gone.instance_id()}, /*confirm=*/false);
          } catch (const std::exception& failure) {
            std::lock_guard held(owner->mutex);
            owner->retained[identity].insert(gone.instance_id());
            spdlog::warn("acas: disposing an invalidated sandbox failed (retained): {}",
                         error_detail(failure));
          }
        },
        [weak, id](const Call& during) {
          const auto owner = weak.lock();
          if (!owner) throw BackendError("the acas backend that made this sandbox is gone");
          owner->ensure_running(during, id);
        });
    std::lock_guard held(state.mutex);
    state.live[identity] = sandbox;
    return sandbox;
  };

  // Warm: this process's handle, else one the service knows by its labels (another replica's,
  // or this conversation's from before a restart).
  std::shared_ptr<AcasSandbox> warm;
  {
    std::lock_guard held(state.mutex);
    if (auto found = state.live.find(identity); found != state.live.end()) {
      warm = found->second.lock();
      if (warm && !warm->usable()) warm.reset();
    }
  }
  if (warm) {
    if (warm->egress_posture() != posture) {
      throw EgressPolicyConflict(
          "a warm sandbox of this conversation and kind runs under another egress policy; "
          "dispose that kind (after the calls using it end) or use another key");
    }
    try {
      state.ensure_running(call, warm->instance_id());
      return warm;
    } catch (const NotFound&) {
      // Deleted behind this process's back (another replica's purge, the service's auto-delete):
      // the handle is dead, and a fresh sandbox is made below.
      warm->mark_gone();
      std::lock_guard held(state.mutex);
      state.live.erase(identity);
    }
  }
  for (const Listed& listed : state.list(call, kind_labels(key, spec.kind()))) {
    if (listed.state == "deleting" || listed.state == "failed") continue;
    if (listed.labels.contains("egress") && listed.labels.at("egress") != posture) {
      throw EgressPolicyConflict(
          "a warm sandbox of this conversation and kind runs under another egress policy; "
          "dispose that kind (after the calls using it end) or use another key",
          "sandbox " + listed.id);
    }
    try {
      state.ensure_running(call, listed.id);
    } catch (const NotFound&) {
      continue;  // gone between the listing and the look
    }
    return hand_out(listed.id);
  }

  // Cold: create, wait for Running, set the lifecycle timers, prepare the work dir as the guest,
  // probe the image. Anything failing after the create deletes what was made.
  const ImageChoice image = state.choose_image(call, spec);
  Labels labels = kind_labels(key, spec.kind());
  labels["egress"] = posture;
  for (const auto& [name, value] : spec.labels()) labels[name] = map_label_value(value);
  json egress{{"defaultAction", "Deny"}, {"hostRules", json::array()}};
  if (spec.egress() == Egress::allowlist) {
    for (const auto& host : spec.egress_allow()) {
      egress["hostRules"].push_back({{"pattern", host}, {"action", "Allow"}});
    }
  }
  json resources{{"cpu", config.cpu}, {"memory", config.memory}};
  if (spec.resources().cpu_millis) resources["cpu"] = std::to_string(*spec.resources().cpu_millis) + "m";
  if (spec.resources().memory_bytes) {
    resources["memory"] = std::to_string(*spec.resources().memory_bytes >> 20) + "Mi";
  }
  const json body{{"sourcesRef", {{"diskImage", image.disk}}},
                  {"resources", resources},
                  {"labels", labels},
                  {"egressPolicy", egress}};
  const std::string route = state.plane().group_path() + "/sandboxes";
  const http::Response created = state.plane().request(call, "PUT", route, {}, Body{body.dump()});
  if (created.status != 200 && created.status != 201) {
    DataPlane::fail("create a sandbox", "PUT", route, created);
  }
  const json answer = json::parse(created.body, nullptr, false);
  const std::string id = text_field(answer, "id");
  if (id.empty()) {
    throw BackendError("the sandbox service created a sandbox without naming it",
                       "PUT " + route + ": " + created.body.substr(0, 200));
  }
  auto discard = [&] {
    Call cleanup = state.call_for(CredentialPurpose::dispose, key.scope, key.thread_id,
                                  config.delete_timeout);
    state.delete_all(cleanup, identity, {id});
  };
  try {
    state.wait_running(call, id);
    const json lifecycle{
        {"autoSuspendPolicy",
         {{"enabled", true}, {"interval", config.auto_suspend.count()}, {"mode", "Memory"}}},
        {"autoDeletePolicy", {{"enabled", true}, {"deleteIntervalInSeconds", config.auto_delete.count()}}}};
    try {
      const auto set = state.plane().request(call, "POST", state.plane().sandbox_path(id) + "/lifecycle",
                                             {}, Body{lifecycle.dump()});
      if (set.status < 200 || set.status > 299) {
        spdlog::warn("acas: the sandbox's lifecycle timers were not set (HTTP {}); host cleanup "
                     "is all that ends it",
                     set.status);
      }
    } catch (const http::TransportError& failure) {
      spdlog::warn("acas: the sandbox's lifecycle timers were not set: {}", failure.what());
    }
    auto sandbox = std::static_pointer_cast<AcasSandbox>(hand_out(id));
    // The work dir, made by the guest's own mkdir: a parent swapped mid-way can only redirect a
    // creation to where the guest could have made one itself.
    const auto made = sandbox->guest("mkdir -p -- " + posix_quote(spec.work_dir()) + "\n", call.deadline);
    if (made.exit_code != 0) {
      throw NotSupported("the image's guest cannot create the work dir " + spec.work_dir() +
                         " (bake a guest-writable base into the image, or place work_dir under a "
                         "writable parent such as /tmp)");
    }
    const auto verdict =
        state.probe(*sandbox, call, image.display, normalize_guest_path(spec.work_dir()));
    const CapabilitySet required = spec.required_capabilities();
    if (!verdict.tools) {
      throw NotSupported("the image lacks what command capture needs (sh, mkdir, mkfifo, head, "
                         "cat, wc, dd, base64, rm, rmdir, mv and a writable /tmp)");
    }
    if (required.contains(Capability::host_tools) && !verdict.host_tool_tools) {
      throw NotSupported("the image lacks nohup, which host tools need");
    }
    for (const Capability needs_removal :
         {Capability::files_out, Capability::host_tools, Capability::files_delete}) {
      if (required.contains(needs_removal) && !verdict.removal) {
        throw NotSupported("the image's guest cannot remove a file the service's file API wrote, "
                           "which " + std::string(to_string(needs_removal)) + " needs");
      }
    }
    return sandbox;
  } catch (...) {
    discard();
    throw;
  }
}

// ---- disposal -------------------------------------------------------------------------------

void AcasBackend::dispose(const SandboxKey& key) noexcept {
  backend_kit::contained("acas", "dispose", [&] {
    Call call = state_->call_for(CredentialPurpose::dispose, key.scope, key.thread_id,
                                 state_->config().delete_timeout);
    std::map<std::string, std::vector<std::string>> by_identity;
    for (const Listed& listed : state_->list(call, key_labels(key))) {
      by_identity[identity_from_labels(listed.labels)].push_back(listed.id);
    }
    for (const auto& [identity, ids] : by_identity) state_->delete_all(call, identity, ids);
  });
}

bool AcasBackend::dispose_kind(const SandboxKey& key, std::string_view kind,
                               std::optional<std::string_view> instance_id) noexcept {
  return backend_kit::contained("acas", "dispose_kind", false, [&] {
    const std::string identity = identity_of(key, kind);
    Call call = state_->call_for(CredentialPurpose::dispose, key.scope, key.thread_id,
                                 state_->config().delete_timeout);
    std::vector<std::string> ids;
    for (const Listed& listed : state_->list(call, kind_labels(key, kind))) {
      if (!instance_id || listed.id == *instance_id) ids.push_back(listed.id);
    }
    {
      std::lock_guard held(state_->mutex);
      if (auto found = state_->retained.find(identity); found != state_->retained.end()) {
        for (const auto& id : found->second) {
          if ((!instance_id || id == *instance_id) &&
              std::find(ids.begin(), ids.end(), id) == ids.end()) {
            ids.push_back(id);
          }
        }
      }
    }
    const int gone = state_->delete_all(call, identity, ids);
    if (!instance_id) {
      std::lock_guard held(state_->mutex);
      if (auto found = state_->live.find(identity); found != state_->live.end()) {
        if (auto sandbox = found->second.lock()) sandbox->mark_gone();
        state_->live.erase(found);
      }
    }
    return gone == static_cast<int>(ids.size());
  });
}

int AcasBackend::dispose_scope(std::string_view scope,
                               std::optional<std::string_view> thread_id) noexcept {
  return backend_kit::contained("acas", "dispose_scope", 0, [&] {
    Call call = state_->call_for(CredentialPurpose::purge, scope, thread_id,
                                 state_->config().delete_timeout);
    int gone = 0;
    for (const Listed& listed : state_->list(call, scope_labels(scope, thread_id))) {
      gone += state_->delete_all(call, identity_from_labels(listed.labels), {listed.id});
    }
    return gone;
  });
}

std::vector<SandboxRecord> AcasBackend::list_sandboxes() {
  Call call = state_->call_for(CredentialPurpose::purge, "", std::nullopt, milliseconds(60'000));
  std::vector<SandboxRecord> records;
  for (const Listed& listed : state_->list(call, {{kMarker, "sandbox"}})) {
    SandboxRecord record;
    record.backend = "acas";
    record.instance_id = listed.id;
    for (const auto& [name, value] : listed.labels) record.labels["airlock." + name] = value;
    if (auto kind = listed.labels.find("kind"); kind != listed.labels.end()) record.kind = kind->second;
    if (auto egress = listed.labels.find("egress"); egress != listed.labels.end()) {
      record.egress_posture = egress->second;
    }
    record.state = listed.state;
    records.push_back(std::move(record));
  }
  return records;
}

int AcasBackend::purge_all() noexcept {
  return backend_kit::contained("acas", "purge", 0, [&] {
    Call call = state_->call_for(CredentialPurpose::purge, "", std::nullopt,
                                 state_->config().delete_timeout);
    int gone = 0;
    for (const Listed& listed : state_->list(call, {{kMarker, "sandbox"}})) {
      gone += state_->delete_all(call, identity_from_labels(listed.labels), {listed.id});
    }
    return gone;
  });
}

}  // namespace airlock::acas
