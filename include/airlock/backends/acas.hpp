// The `acas` backend: Azure Container Apps Sandboxes, driven over the service's data-plane API
// with libcurl. Each sandbox is a microVM the service runs; airlock never sees its kernel, so
// what holds inside the guest is the service's to keep, and what airlock adds is kept on the
// wire: labels, lifecycle timers, guest-authority writes and removals, byte-exact capture.
//
//   config      {"type": "acas", "endpoint": "https://management.<region>.azuredevcompute.io",
//                "subscription_id": …, "resource_group": …, "sandbox_group": …, "registry": …}
//   declares    microvm, posix; exec files_in files_out files_list files_delete host_tools
//               (each confirmed per image at acquire by the probes below); egress closed and
//               allowlist; transfers of 32 MiB per file, 128 MiB and 128 files each way
//   identity    one sandbox per (key, kind), found again by its labels (airlock.scope/thread/
//               agent/kind, values hashed past 63 characters); its egress posture is a label too,
//               and a warm sandbox asked for another posture raises EgressPolicyConflict
//   lifetime    auto-suspend and auto-delete set on every new sandbox (timers that back up the
//               host's own cleanup, never replace it)
//
// Hazards a host should know (docs/backends/acas.md has each in full):
//   - Reads, stat and listing use the service's file API with the service's authority. The
//     confinement walk refuses links it observes, but a guest that swaps a checked directory
//     for a link between the walk and the request wins: a read can return bytes outside the
//     checked directory (including bytes the guest itself cannot read), a stat or listing
//     another directory's metadata. The file API cannot tell a FIFO from an empty regular file.
//   - A timed-out, cancelled or incompletely captured command invalidates the sandbox and it is
//     disposed: nothing establishes that the command stopped. The exception is a deadline that
//     falls during an HTTP 429 Retry-After wait of the command's own request, which never
//     reached the guest.
//   - Managed identity configured on the sandbox group is the deployment's authority, not
//     airlock's; deleting a sandbox revokes no token a guest obtained.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "airlock/backend.hpp"

namespace airlock::acas {

// The data-plane API version every request names (api-version=…). The service rejects versions
// it does not serve; override with `api_version` only for a service that has moved on.
inline constexpr const char* kDefaultApiVersion = "2026-02-01-preview";
// The token scope the service's SDK asks for. Some tenants mint for
// "https://management.azuredevcompute.io/.default" instead: see `token_scope`.
inline constexpr const char* kDefaultTokenScope = "https://dynamicsessions.io/.default";

// ---- credentials ----------------------------------------------------------------------------

struct AccessToken {
  std::string token;  // never logged
  std::chrono::system_clock::time_point expires_on;
};

// This credential has nothing to offer on this host (no environment variables, no IMDS, no az):
// a chain moves on to the next. Any other exception from get_token is a failure of a credential
// that *was* configured, and a chain stops there rather than trying another identity.
class CredentialUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class TokenCredential {
 public:
  virtual ~TokenCredential() = default;
  // A token for `scope`, obtained before `deadline`. Thread-safe.
  virtual AccessToken get_token(std::string_view scope,
                                std::chrono::steady_clock::time_point deadline) = 0;
  // What this credential is, for logs ("environment client secret", "managed identity", …).
  virtual std::string name() const = 0;
};

// The host-selected credential resolver: the host decides, per operation, whose authority a
// request carries. Acquire may use the caller's grant; disposal and purges are resolved on their
// own (they run on other replicas, after the caller is gone). A resolver that throws fails the
// operation; the backend never falls back to another identity.
enum class CredentialPurpose : std::uint8_t { acquire, dispose, purge };
struct CredentialRequest {
  CredentialPurpose purpose = CredentialPurpose::acquire;
  std::string scope;                     // the conversation's trusted scope ("" for purge_all)
  std::optional<std::string> thread_id;  // unset: every thread of the scope
};
struct CredentialBinding {
  // Equal (authority, generation) pairs assert equivalent grants: the backend keeps one
  // credential per pair and asks `create_credential` again only for a new pair. Use a new
  // generation whenever the grant changes.
  std::string authority;
  std::string generation;
  std::function<std::shared_ptr<TokenCredential>()> create_credential;
};
using CredentialResolver = std::function<CredentialBinding(const CredentialRequest&)>;

// ---- configuration --------------------------------------------------------------------------

struct AcasConfig {
  // https://management.<region>.azuredevcompute.io (https only; a trailing '/' is dropped).
  std::string endpoint;
  std::string subscription_id;
  std::string resource_group;
  std::string sandbox_group;
  // Qualifies a short tagged image reference ("bicep-sandbox:0.46.1" → "<registry>/bicep-…").
  std::string registry;
  // The image of a spec that names none.
  std::string default_image;

  std::chrono::seconds auto_suspend{60};
  std::chrono::seconds auto_delete{600};
  // Bounds a whole file transfer (a read, or every command of a staged write).
  std::chrono::milliseconds read_timeout{120'000};
  std::string api_version = kDefaultApiVersion;
  std::string token_scope = kDefaultTokenScope;
  // A PEM bundle to trust instead of the system's (a TLS-inspecting proxy; the test double).
  std::string tls_ca_file;

  // The SDK's polling: create and resume until Running, delete until 404.
  std::chrono::milliseconds poll_interval{3'000};
  std::chrono::milliseconds create_timeout{300'000};
  std::chrono::milliseconds delete_timeout{300'000};
  // Retries as the SDK's pipeline does them: 408, 429, 500, 502, 503, 504 up to `max_retries`
  // times, with exponential backoff from `retry_backoff` capped at `retry_backoff_max` unless the
  // service says Retry-After; 403 up to `max_forbidden_retries` times (role assignments take a
  // minute or two to reach the data plane). Every wait is cut by the caller's deadline.
  int max_retries = 10;
  int max_forbidden_retries = 10;
  std::chrono::milliseconds retry_backoff{800};
  std::chrono::milliseconds retry_backoff_max{120'000};

  // Sizes of a new sandbox when the spec names none ("1000m", "2048Mi").
  std::string cpu = "1000m";
  std::string memory = "2048Mi";

  // Bytes per guest command when a write is staged (raw bytes; base64 makes 4/3 of that), and
  // per chunk when a command's output is captured.
  std::uint32_t write_chunk_bytes = 48u << 10;
  std::uint32_t capture_chunk_bytes = 48u << 10;
  // The capture ceiling of one command's stdout and of its stderr when the caller sets none.
  std::uint64_t max_exec_output_bytes = 32ull << 20;
  // How long the acquire-time probes' verdict for an image is reused.
  std::chrono::seconds probe_cache{60};

  // C++ hosts only. An explicit credential (used for every request), or a resolver (see above);
  // neither: the default chain (environment client secret, workload identity, managed identity,
  // the Azure CLI).
  std::shared_ptr<TokenCredential> credential;
  CredentialResolver credential_resolver;
};

// The backend. Thread-safe; construction checks the configuration and contacts nothing.
class AcasBackend : public SandboxBackend {
 public:
  explicit AcasBackend(AcasConfig config);
  ~AcasBackend() override;

  std::string name() const override { return "acas"; }
  Isolation isolation() const override { return Isolation::microvm; }
  std::optional<EgressSet> egress_modes() const override;
  std::optional<CapabilitySet> capabilities() const override;
  std::optional<SandboxLimits> limits() const override;
  std::optional<OsFamilySet> os_families() const override;

  std::shared_ptr<Sandbox> acquire(const SandboxKey& key, const SandboxSpec& spec) override;
  void dispose(const SandboxKey& key) noexcept override;
  bool dispose_kind(const SandboxKey& key, std::string_view kind,
                    std::optional<std::string_view> instance_id) noexcept override;
  int dispose_scope(std::string_view scope,
                    std::optional<std::string_view> thread_id) noexcept override;
  std::vector<SandboxRecord> list_sandboxes() override;
  int purge_all() noexcept override;

  // The native-read path race, word for word as docs/backends/acas.md states it.
  std::vector<std::string> stated_residuals() const override;

  const AcasConfig& config() const noexcept;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

// Parse the factory configuration (the object of {"type": "acas", …} without "type"). Unknown
// keys and ill-typed values are refused with an InvalidArgument naming `where`.key.
AcasConfig parse_acas_config(const nlohmann::json& config, std::string_view where);

}  // namespace airlock::acas
