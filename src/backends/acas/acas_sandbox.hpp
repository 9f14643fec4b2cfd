// One ACAS sandbox as a handle: commands through the capture script, writes and removals as
// the guest, reads, stat and listing through the service's file API (the stated residual).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "airlock/sandbox.hpp"
#include "backends/acas/service.hpp"

namespace airlock::acas {

struct SandboxIdentity {
  std::string id;            // the service's sandbox id
  SandboxKey key;
  std::string kind;
  std::string work_dir;
  std::string egress_posture;
};

class AcasSandbox final : public Sandbox {
 public:
  // `invalidate` is called once, with the reason, when a command's end is unknown: the backend
  // disposes the instance. It must not throw.
  // `revive` brings back a sandbox the service suspended (its auto-suspend timer): it resumes
  // it and waits until it runs, or throws.
  AcasSandbox(std::shared_ptr<Service> service, SandboxIdentity identity,
              std::function<void(const AcasSandbox&, const std::string&)> invalidate,
              std::function<void(const Call&)> revive);

  std::string instance_id() const override { return identity_.id; }
  const SandboxKey& key() const override { return identity_.key; }
  const std::string& kind() const override { return identity_.kind; }
  const std::string& egress_posture() const noexcept { return identity_.egress_posture; }

  void write_file(std::string_view path, std::string_view content,
                  std::string_view working_directory) override;
  ExecResult exec(const Command& command, const ExecOptions& options) override;
  ExecResult run_code(std::string_view code, Milliseconds timeout) override;
  std::optional<SandboxEntry> stat_file(std::string_view path,
                                        std::string_view working_directory) override;
  std::string read_file(std::string_view path, std::string_view working_directory,
                        std::uint64_t max_bytes) override;
  std::vector<SandboxEntry> list_dir(std::string_view path,
                                     std::string_view working_directory) override;
  void remove(std::string_view path, std::string_view working_directory, bool recursive) override;

  // Not invalidated and not disposed: may be handed out again.
  bool usable() const noexcept { return !invalid_.load(); }
  // Every later call refuses.
  void mark_gone() noexcept { invalid_.store(true); }

  // A guest shell script with the backend's capture deadline; exposed for acquire's probes.
  capture::TextReply guest(const std::string& script, Clock::time_point deadline,
                           std::string_view working_directory = "/") const;

 private:
  void refuse_when_gone() const;
  Call call(Clock::time_point deadline, std::stop_token stop = {}) const;
  GuestStat file_stat(const Call& call) const;
  // Stage `content` at `absolute` as the guest: base64 chunks into a scratch file in the same
  // directory, then one rename. `parent_missing`: the guest creates the parents first.
  void stage_as_guest(const Call& call, const std::string& absolute, std::string_view content,
                      bool parent_missing, std::string_view shown);
  void invalidate(const std::string& why);
  // The service's operations on this sandbox, each asked once more after reviving the sandbox
  // when the service answers 409 (not running): a refused request did not run, so asking again
  // runs it once.
  capture::TextReply shell(const Call& call, const std::string& script) const;
  std::optional<FileInfo> stat(const Call& call, const std::string& absolute) const;
  std::vector<FileInfo> list(const Call& call, const std::string& absolute) const;
  http::Response read(const Call& call, const std::string& absolute, std::uint64_t max_bytes) const;
  template <typename Operation>
  auto revived(const Call& call, Operation&& operation) const -> decltype(operation());
  // The guest's own word on each path's kind, where the file API's cannot be trusted: it
  // describes a FIFO, a socket or a device as an empty regular file, and never says that a file
  // is a hard link. A regular file with more than one link is `other`. nullopt: nothing there.
  std::vector<std::optional<EntryKind>> guest_kinds(const Call& call,
                                                    const std::vector<std::string>& absolute) const;

  std::shared_ptr<Service> service_;
  SandboxIdentity identity_;
  std::function<void(const AcasSandbox&, const std::string&)> invalidate_;
  std::function<void(const Call&)> revive_;
  std::shared_ptr<TokenCredential> credential_;
  std::atomic<bool> invalid_{false};
  std::atomic<bool> invalidated_once_{false};
};

}  // namespace airlock::acas
