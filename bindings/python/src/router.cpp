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
