// The router, built from the same configuration document as the CLI and the daemon
// (backend_factory.hpp): {"backends": [{"type": "linux", …}], "min_isolation": "container", …}.
#include "airlock/router.hpp"

#include <pybind11/stl.h>

#include "airlock/backend_factory.hpp"
#include "airlock/json.hpp"
#include "bindings.hpp"
#include "convert.hpp"
#include "records.hpp"
#include "sandbox.hpp"

namespace airlock::python {
namespace {

std::shared_ptr<SandboxRouter> router_from_config(py::handle config) {
  const json::Json document = to_json_value(config, "config");
  std::unique_ptr<SandboxRouter> router;
  {
    py::gil_scoped_release release;
    router = make_router(document, "config");
  }
  return std::shared_ptr<SandboxRouter>(std::move(router));
}

// A snapshot named by its id (str) or by its SnapshotRecord.
std::string snapshot_id_from_python(py::handle snapshot) {
  if (py::isinstance<SnapshotRecord>(snapshot)) return snapshot.cast<const SnapshotRecord&>().id;
  if (py::isinstance<py::str>(snapshot)) return snapshot.cast<std::string>();
  throw py::type_error("snapshot: expected a snapshot id (str) or a SnapshotRecord, got " +
                       type_name_of(snapshot));
}

}  // namespace

void bind_router(py::module_& module) {
  module.def("backend_types", [] {
    py::dict types;
    for (const auto& type : backend_types()) types[py::str(type.type)] = type.description;
    return types;
  });

  module.def(
      "_purge_scoped_thread",
      [](SandboxRouter& router, const std::string& scope, const std::string& thread_id) {
        py::gil_scoped_release release;
        return SandboxPurger(router).purge_scoped_thread(scope, thread_id);
      },
      py::arg("router"), py::arg("scope"), py::arg("thread_id"),
      "SandboxPurger's delete-path step: dispose_scope, logged at info when anything went.");

  py::class_<SandboxRouter, std::shared_ptr<SandboxRouter>>(
      module, "SandboxRouter",
      "Picks the backend, refuses an unsafe or unable one before anything runs, and hands out "
      "sandboxes. Built from a configuration dict: {'backends': [{'type': 'linux', …}], "
      "'min_isolation': 'container', 'selected': …, 'denied_capabilities': […], "
      "'denied_identities': […]}. The default floor is microvm.")
      .def(py::init(&router_from_config), py::arg("config"))
      .def_property_readonly("enabled", &SandboxRouter::enabled)
      .def_property_readonly("backend_name",
                             [](const SandboxRouter& router) -> std::optional<std::string> {
                               if (!router.enabled()) return std::nullopt;
                               return router.backend()->name();
                             })
      .def_property_readonly(
          "min_isolation",
          [](const SandboxRouter& router) { return to_python(router.options().min_isolation); })
      .def(
          "describe_backends",
          [](const SandboxRouter& router) {
            py::list out;
            for (const auto& backend : router.backends()) {
              out.append(from_json_value(json::describe_backend(*backend)));
            }
            return out;
          },
          "Every registered backend's declarations, silence spelled as the router reads it.")
      .def(
          "ensure_can_serve",
          [](const SandboxRouter& router, py::handle spec) {
            const SandboxSpec parsed = spec_from_python(spec);
            json::Json decision;
            {
              py::gil_scoped_release release;
              decision = json::to_json(router.ensure_can_serve(parsed));
            }
            return from_json_value(decision);
          },
          py::arg("spec"),
          "Run every check; return the decision as a dict, or raise the first refusal.")
      .def(
          "acquire",
          [](const std::shared_ptr<SandboxRouter>& router, py::handle key, py::handle spec) {
            const SandboxKey parsed_key = key_from_python(key);
            const SandboxSpec parsed_spec = spec_from_python(spec);
            std::shared_ptr<Sandbox> sandbox;
            {
              py::gil_scoped_release release;
              sandbox = router->acquire(parsed_key, parsed_spec);
            }
            remember_origin(sandbox, parsed_spec, router);
            return sandbox;
          },
          py::arg("key"), py::arg("spec"), py::keep_alive<0, 1>(),
          "Every check, then get-or-create (warm reuse per key, kind and egress posture). The "
          "sandbox's path methods default `working_directory` to this spec's work dir (the first "
          "acquire's, for a warm instance); `with` on it disposes it through this router.")
      .def(
          "dispose",
          [](SandboxRouter& router, py::handle key) {
            const SandboxKey parsed = key_from_python(key);
            py::gil_scoped_release release;
            router.dispose(parsed);
          },
          py::arg("key"), "Every kind's sandbox for key, on every backend. Never raises.")
      .def(
          "dispose_kind",
          [](SandboxRouter& router, py::handle key, const std::string& kind,
             std::optional<std::string> instance_id) {
            const SandboxKey parsed = key_from_python(key);
            py::gil_scoped_release release;
            return router.dispose_kind(
                parsed, kind,
                instance_id ? std::optional<std::string_view>(*instance_id) : std::nullopt);
          },
          py::arg("key"), py::arg("kind"), py::arg("instance_id") = py::none())
      .def(
          "dispose_scope",
          [](SandboxRouter& router, const std::string& scope,
             std::optional<std::string> thread_id) {
            py::gil_scoped_release release;
            return router.dispose_scope(
                scope, thread_id ? std::optional<std::string_view>(*thread_id) : std::nullopt);
          },
          py::arg("scope"), py::arg("thread_id") = py::none(),
          "Every sandbox of the conversation, found from durable state; returns how many went.")
      .def(
          "list_sandboxes",
          [](SandboxRouter& router) {
            json::Json records = json::Json::array();
            {
              py::gil_scoped_release release;
              for (const auto& backend : router.backends()) {
                for (const auto& record : backend->list_sandboxes()) {
                  records.push_back(json::to_json(record));
                }
              }
            }
            return from_json_value(records);
          },
          "Every sandbox the backends' durable state knows about, as dicts.")
      .def(
          "snapshot",
          [](SandboxRouter& router, py::handle key, py::handle spec, py::handle timeout) {
            const SandboxKey parsed_key = key_from_python(key);
            const SandboxSpec parsed_spec = spec_from_python(spec);
            CallOptions admission;
            admission.timeout = seconds_to_milliseconds(timeout, "timeout");
            py::gil_scoped_release release;
            return router.snapshot(parsed_key, parsed_spec, admission);
          },
          py::arg("key"), py::arg("spec"), py::kw_only(), py::arg("timeout") = 30.0,
          "Save the sandbox of (key, spec.kind): every router check on spec with `snapshot` "
          "required, then an exclusive call — it waits (at most `timeout` seconds, then "
          "SandboxQueuedTimeout) until every call over the key has left, and none starts until "
          "the state is saved. Returns the SnapshotRecord; the snapshot belongs to key's "
          "conversation (scope and thread).")
      .def(
          "resume",
          [](const std::shared_ptr<SandboxRouter>& router, py::handle key, py::handle spec,
             py::handle snapshot) {
            const SandboxKey parsed_key = key_from_python(key);
            const SandboxSpec parsed_spec = spec_from_python(spec);
            const std::string id = snapshot_id_from_python(snapshot);
            std::shared_ptr<Sandbox> sandbox;
            {
              py::gil_scoped_release release;
              sandbox = router->resume(parsed_key, parsed_spec, id);
            }
            remember_origin(sandbox, parsed_spec, router);
            return sandbox;
          },
          py::arg("key"), py::arg("spec"), py::arg("snapshot"), py::keep_alive<0, 1>(),
          "A new sandbox for (key, spec) holding the snapshot's state — a resume, or under "
          "another key of the same conversation a fork; the key's live sandbox of this kind and "
          "posture gives way to it. Every router check runs on spec with `snapshot` required. "
          "`snapshot` is its id or its SnapshotRecord. NotFound (a FileNotFoundError) when it is "
          "no snapshot of key's conversation — another conversation's is not told apart from "
          "none; InvalidArgument when it was taken of another kind.")
      .def(
          "list_snapshots",
          [](const SandboxRouter& router, const std::string& scope,
             std::optional<std::string> thread_id) {
            py::gil_scoped_release release;
            return router.list_snapshots(
                scope, thread_id ? std::optional<std::string_view>(*thread_id) : std::nullopt);
          },
          py::arg("scope"), py::arg("thread_id") = py::none(),
          "The selected backend's snapshots of a scope (of one of its threads with thread_id), "
          "oldest first; scope \"\" lists every snapshot (an operator's view).")
      .def(
          "delete_snapshot",
          [](SandboxRouter& router, py::handle key, py::handle snapshot) {
            const SandboxKey parsed_key = key_from_python(key);
            const std::string id = snapshot_id_from_python(snapshot);
            py::gil_scoped_release release;
            return router.delete_snapshot(parsed_key, id);
          },
          py::arg("key"), py::arg("snapshot"),
          "Delete a snapshot of key's conversation (its id or its SnapshotRecord): True when "
          "nothing of it is left. NotFound as resume. A sandbox resumed from it keeps its state.")
      .def(
          "purge_all",
          [](SandboxRouter& router) {
            py::gil_scoped_release release;
            int purged = 0;
            for (const auto& backend : router.backends()) purged += backend->purge_all();
            return purged;
          },
          "Delete every sandbox in every backend's durable state, whoever created it.")
      .def("__repr__", [](const SandboxRouter& router) {
        return std::string("<airlock.SandboxRouter backend=") +
               (router.enabled() ? router.backend()->name() : std::string("none")) + ">";
      });
}

}  // namespace airlock::python
