// The versioned API (`/v1/...`) over one router: the route handlers and what they share.
//
// Every operation on a sandbox goes through the router's call lifecycle: it is admitted over
// (key, kind) — waiting behind an exclusive close or a queued delete, never past its deadline —
// acquires (get-or-create, every router check again), runs, and leaves. An exec whose end is
// unknown (its timeout passed, its output broke the ceiling, its client hung up, or its result
// was lost) condemns the instance: the delete is queued and runs when the last call over the
// key leaves, on the router's background worker so the caller's answer does not wait for it.
// The next call over the key then starts cold. File reads never condemn (they change nothing);
// a write the backend neither refused nor finished does.
//
// The key always comes from the calling host (POST /v1/sandboxes), is stored with the handle,
// and is never derived from anything a model could write. docs/api/openapi.yaml documents each
// route; tests/daemon checks that every route here appears there.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>

#include "airlock/router.hpp"
#include "daemon/handle_store.hpp"
#include "daemon/http.hpp"
#include "daemon/http_errors.hpp"
#include "daemon/metrics.hpp"

namespace airlock::daemon {

struct ApiLimits {
  Milliseconds default_exec_timeout{60'000};
  Milliseconds max_exec_timeout{3'600'000};
  std::uint64_t default_max_output_bytes = 1u << 20;
  std::uint64_t max_output_bytes = 64u << 20;
  // How long a non-exec call (acquire, files, dispose) may wait for admission.
  Milliseconds admission_timeout{30'000};
};

// The fields an answer carries when a command (or a write, or a shell read) did not end
// normally: whether the sandbox was reset, and the sentence a model is shown. `condemned` is
// the older name of `sandbox_reset`, kept for the clients that read it.
json::Json sandbox_outcome(bool reset);

// A snapshot id as the protocol makes them ("snap-" and 24 hex digits); anything else is an
// InvalidArgument naming `where`, before it reaches the router.
std::string checked_snapshot_id(std::string_view id, const std::string& where);
// The 404 for an id that is no snapshot of the caller's conversation — missing, or another
// conversation's, in the same words — naming `where`.
HttpError snapshot_not_found(std::string_view id, const std::string& where);
// A snapshot as the daemon answers it: json::to_json's document, label values digested.
json::Json snapshot_document(const SnapshotRecord& record);

class Api {
 public:
  struct Admitted;

  Api(SandboxRouter& router, HandleStore& store, Metrics& metrics, ApiLimits limits);
  ~Api();
  Api(const Api&) = delete;
  Api& operator=(const Api&) = delete;

  // Adds every /v1 route to `table`. `draining` is read by the health route.
  void add_routes(RouteTable& table);

  void set_draining() noexcept { draining_ = true; }

 private:
  // Admission + acquire for the sandbox behind request.params["handle"].
  Admitted admit(const HttpRequest& request, Milliseconds timeout, bool exclusive = false);
  HandleRecord record_for(const HttpRequest& request) const;
  void condemn(Admitted& call, const char* why);

  // system
  HttpResponse health(const HttpRequest& request);
  HttpResponse metrics(const HttpRequest& request);
  HttpResponse backends(const HttpRequest& request);
  HttpResponse backend_sandboxes(const HttpRequest& request);
  HttpResponse check(const HttpRequest& request);
  HttpResponse purge(const HttpRequest& request);
  // sandboxes
  HttpResponse acquire(const HttpRequest& request);
  HttpResponse list_sandboxes(const HttpRequest& request);
  HttpResponse describe_sandbox(const HttpRequest& request);
  HttpResponse dispose(const HttpRequest& request);
  HttpResponse exec(const HttpRequest& request);
  HttpResponse exec_stream(const HttpRequest& request);
  // The admitted part of an exec: runs it and answers as POST …/exec does (200 with the result,
  // or an error response), or throws what the route answers with its own status.
  HttpResponse finish_exec(Admitted& call, const Command& command, ExecOptions& options,
                           std::chrono::steady_clock::time_point started, Milliseconds timeout,
                           const std::stop_token& cancelled);
  ExecResult run_in_work_dir(Admitted& call, const Command& command, ExecOptions& options,
                             std::chrono::steady_clock::time_point started, Milliseconds timeout);
  // snapshots (a resume is an acquire with from_snapshot)
  HttpResponse take_snapshot(const HttpRequest& request);
  HttpResponse list_snapshots(const HttpRequest& request);
  HttpResponse delete_snapshot(const HttpRequest& request);
  // files
  HttpResponse put_file(const HttpRequest& request);
  HttpResponse get_file(const HttpRequest& request);
  HttpResponse delete_file(const HttpRequest& request);
  HttpResponse stat(const HttpRequest& request);
  HttpResponse list(const HttpRequest& request);
  std::uint64_t upload_cap(const HttpRequest& request) const;
  Milliseconds road_timeout(const HttpRequest& request) const;
  // outputs
  HttpResponse outputs(const HttpRequest& request);

  SandboxRouter& router_;
  HandleStore& store_;
  Metrics& metrics_;
  ApiLimits limits_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::atomic<bool> draining_{false};
};

// An admitted call on one handle: the record, the admission, the sandbox it acquired.
struct Api::Admitted {
  HandleRecord record;
  CallAdmission admission;
  std::shared_ptr<Sandbox> sandbox;
};

}  // namespace airlock::daemon
