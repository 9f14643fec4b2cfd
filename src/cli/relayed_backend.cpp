#include "cli/relayed_backend.hpp"

#include <vector>

namespace airlock::cli {
namespace {

class RelayedSandbox final : public Sandbox {
 public:
  RelayedSandbox(std::shared_ptr<Sandbox> inner, SignalRelay& relay)
      : inner_(std::move(inner)), relay_(relay) {}

  std::string instance_id() const override { return inner_->instance_id(); }
  const SandboxKey& key() const override { return inner_->key(); }
  const std::string& kind() const override { return inner_->kind(); }
  void write_file(std::string_view path, std::string_view content,
                  std::string_view working_directory) override {
    inner_->write_file(path, content, working_directory);
  }
  ExecResult exec(const Command& command, const ExecOptions& options) override {
    return exec_relayed(*inner_, command, options, relay_);
  }
  ExecResult run_code(std::string_view code, Milliseconds timeout) override {
    return inner_->run_code(code, timeout);
  }
  std::optional<SandboxEntry> stat_file(std::string_view path,
                                        std::string_view working_directory) override {
    return inner_->stat_file(path, working_directory);
  }
  std::string read_file(std::string_view path, std::string_view working_directory,
                        std::uint64_t max_bytes) override {
    return inner_->read_file(path, working_directory, max_bytes);
  }
  std::vector<SandboxEntry> list_dir(std::string_view path,
                                     std::string_view working_directory) override {
    return inner_->list_dir(path, working_directory);
  }
  void remove(std::string_view path, std::string_view working_directory, bool recursive) override {
    inner_->remove(path, working_directory, recursive);
  }
  std::optional<SocketChannel> socket_channel() override { return inner_->socket_channel(); }
  std::vector<std::string> backend_socket_directories() const override {
    return inner_->backend_socket_directories();
  }

 private:
  std::shared_ptr<Sandbox> inner_;
  SignalRelay& relay_;
};

class RelayedBackend final : public SandboxBackend {
 public:
  RelayedBackend(std::shared_ptr<SandboxBackend> inner, SignalRelay& relay)
      : inner_(std::move(inner)), relay_(relay) {}

  std::string name() const override { return inner_->name(); }
  Isolation isolation() const override { return inner_->isolation(); }
  std::optional<EgressSet> egress_modes() const override { return inner_->egress_modes(); }
  std::optional<CapabilitySet> capabilities() const override { return inner_->capabilities(); }
  std::optional<SandboxLimits> limits() const override { return inner_->limits(); }
  std::optional<OsFamilySet> os_families() const override { return inner_->os_families(); }
  std::shared_ptr<Sandbox> acquire(const SandboxKey& key, const SandboxSpec& spec) override {
    return std::make_shared<RelayedSandbox>(inner_->acquire(key, spec), relay_);
  }
  void dispose(const SandboxKey& key) noexcept override { inner_->dispose(key); }
  bool dispose_kind(const SandboxKey& key, std::string_view kind,
                    std::optional<std::string_view> instance_id) noexcept override {
    return inner_->dispose_kind(key, kind, instance_id);
  }
  int dispose_scope(std::string_view scope,
                    std::optional<std::string_view> thread_id) noexcept override {
    return inner_->dispose_scope(scope, thread_id);
  }
  std::vector<std::string> stated_residuals() const override { return inner_->stated_residuals(); }
  std::vector<SandboxRecord> list_sandboxes() override { return inner_->list_sandboxes(); }
  int purge_all() noexcept override { return inner_->purge_all(); }

 private:
  std::shared_ptr<SandboxBackend> inner_;
  SignalRelay& relay_;
};

}  // namespace

std::unique_ptr<SandboxRouter> relayed_router(const SandboxRouter& router, SignalRelay& relay) {
  std::vector<std::shared_ptr<SandboxBackend>> wrapped;
  for (const auto& backend : router.backends()) {
    wrapped.push_back(std::make_shared<RelayedBackend>(backend, relay));
  }
  return std::make_unique<SandboxRouter>(std::move(wrapped), router.options());
}

}  // namespace airlock::cli
