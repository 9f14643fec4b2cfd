"""sandboxed_tool's attach gate in the reference's order (§3.5), the information-flow
declarations (§8.2), and the caller-context helpers."""

import math

import pytest

import airlock

WORK = "/maf-sandbox/work"


def body(call, arguments):
    return "ran"


def context():
    return airlock.CallerContext(lambda: "tenant", lambda: "thread-1")


def attach(router, spec, **options):
    return airlock.sandboxed_tool(router, spec, body, context=context(), name="tool",
                                  description="d", **options)


def sink():
    return airlock.OutputSink(lambda artifact: airlock.LandedArtifact(artifact.name, "landed"))


LANDING = airlock.SandboxSpec(kind="k", requires={"exec", "files_in", "files_out"},
                              declared_outputs=[airlock.DeclaredOutput("report/b.txt"),
                                                airlock.DeclaredOutput("a.csv")])


# ---- step 1 ---------------------------------------------------------------------------------


@pytest.mark.parametrize("router", [None, airlock.SandboxRouter({"backends": []})],
                         ids=["no-router", "disabled-router"])
def test_no_router_attaches_nothing_before_any_other_check(router):
    # Every later step would refuse this call; the first one decides, silently.
    refused_everywhere = airlock.SandboxSpec(kind="k", egress="unrestricted",
                                             declared_outputs=[airlock.DeclaredOutput("a")],
                                             work_dir="/")
    assert airlock.sandboxed_tool(router, refused_everywhere, "not a body", context=None,
                                  name="t", description="d", reclaim_timeout=0,
                                  declarations={"x": "y"}, output_sink=sink()) is None
    assert attach(router, airlock.SandboxSpec(kind="k"), reclaim_timeout=0) is None


# ---- steps 2 to 8, in order -----------------------------------------------------------------


def test_explicit_declarations_with_a_sink_are_refused_before_the_sink_check(testing_router):
    with pytest.raises(ValueError, match="declarations"):
        attach(testing_router, LANDING, declarations={"source_integrity": "trusted"},
               output_sink=sink())
    # Without the sink, step 3 refuses the same spec for the missing sink.
    with pytest.raises(airlock.SandboxOutputSinkRequired):
        attach(testing_router, LANDING, declarations={"source_integrity": "trusted"})


def test_the_sink_refusal_names_the_landing_outputs(testing_router):
    with pytest.raises(airlock.SandboxOutputSinkRequired) as refused:
        attach(testing_router, LANDING)
    assert "a.csv" in str(refused.value) and "report/b.txt" in str(refused.value)
    call_time = airlock.SandboxSpec(kind="k", requires={"exec", "files_in", "files_out"},
                                    outputs_named_at_call_time=True)
    with pytest.raises(airlock.SandboxOutputSinkRequired, match="at call time"):
        attach(testing_router, call_time)


def test_outputs_without_files_out_are_refused_before_the_timeout(testing_router):
    consumed = airlock.SandboxSpec(
        kind="k", declared_outputs=[airlock.DeclaredOutput("a.json", disposition="consume")])
    with pytest.raises(ValueError) as refused:
        attach(testing_router, consumed, reclaim_timeout=0)
    assert refused.value.check == "spec.requires"


@pytest.mark.parametrize("timeout", [0, -1, math.nan, math.inf])
def test_a_reclaim_timeout_that_is_not_finite_and_positive_is_refused_before_the_router(
        testing_router, timeout):
    with pytest.raises(ValueError) as refused:
        attach(testing_router, airlock.SandboxSpec(kind="k", egress="unrestricted"),
               reclaim_timeout=timeout)
    assert refused.value.check == "reclaim_timeout"


def test_the_routers_refusal_comes_before_the_work_dir_check(testing_router):
    with pytest.raises(airlock.SandboxEgressNotEnforced):
        attach(testing_router, airlock.SandboxSpec(kind="k", egress="unrestricted", work_dir="/"))
    with pytest.raises(ValueError, match="guest root"):
        attach(testing_router, airlock.SandboxSpec(kind="k", work_dir="/"))


def test_a_body_that_is_not_callable_is_a_type_error(testing_router):
    with pytest.raises(TypeError, match="body"):
        airlock.sandboxed_tool(testing_router, airlock.SandboxSpec(kind="k"), "text",
                               context=context(), name="t", description="d")


# ---- declarations ---------------------------------------------------------------------------


def test_explicit_declarations_replace_the_derived_ones(testing_router):
    # Derived, these would carry source_integrity and the cap.
    tool = attach(testing_router, airlock.SandboxSpec(kind="k"),
                  declarations={"confidentiality_label": "secret"},
                  outbound_max_confidentiality="public", also_carries_out=True)
    assert tool.declarations() == {"confidentiality_label": "secret"}
    with pytest.raises(TypeError, match="declarations"):
        attach(testing_router, airlock.SandboxSpec(kind="k"), declarations=["not", "a", "dict"])


def test_sandbox_tool_declarations_follow_the_reference_rules():
    closed = airlock.SandboxSpec(kind="k")
    assert airlock.sandbox_tool_declarations(closed) == {"source_integrity": "trusted"}
    # A cap is written only when the tool can carry something out.
    assert airlock.sandbox_tool_declarations(
        closed, outbound_max_confidentiality="internal") == {"source_integrity": "trusted"}
    assert airlock.sandbox_tool_declarations(
        closed, source_integrity=None, outbound_max_confidentiality="internal",
        also_carries_out=True) == {"max_allowed_confidentiality": "internal"}
    allowlist = airlock.SandboxSpec(kind="k", egress="allowlist", egress_allow=["pypi.org"])
    assert airlock.sandbox_tool_declarations(
        allowlist, outbound_max_confidentiality="internal")["max_allowed_confidentiality"] == \
        "internal"
    # A sink carries out only what the spec lands.
    assert "max_allowed_confidentiality" not in airlock.sandbox_tool_declarations(
        closed, outbound_max_confidentiality="internal", output_sink=sink())
    assert airlock.sandbox_tool_declarations(
        LANDING, outbound_max_confidentiality="internal",
        output_sink=sink())["max_allowed_confidentiality"] == "internal"
    # The test is on the allowlist's hosts, not the mode: unrestricted is not capped.
    assert "max_allowed_confidentiality" not in airlock.sandbox_tool_declarations(
        airlock.SandboxSpec(kind="k", egress="unrestricted"),
        outbound_max_confidentiality="internal")


def test_a_tools_declarations_are_sandbox_tool_declarations_of_its_spec(testing_router):
    spec = airlock.SandboxSpec(kind="k")
    tool = attach(testing_router, spec, source_integrity="untrusted",
                  outbound_max_confidentiality="public", also_carries_out=True)
    assert tool.declarations() == airlock.sandbox_tool_declarations(
        spec, source_integrity="untrusted", outbound_max_confidentiality="public",
        also_carries_out=True)
    assert "approval_mode" not in tool.declarations()
    assert tool.approval_mode == "never_require"


# ---- the caller context ---------------------------------------------------------------------


def test_make_caller_context_takes_the_reference_argument_order():
    listing = airlock.list_no_files
    made = airlock.make_caller_context(listing, lambda: "scope-a", lambda: "thread-b")
    assert made.current_scope() == "scope-a"
    assert made.current_thread_id() == "thread-b"
    assert made.list_files is listing
    assert airlock.list_no_files("any store") == []


class TreeStore:
    def __init__(self, tree):
        self.tree = tree

    def list_children(self, directory):
        node = self.tree
        for part in filter(None, directory.split("/")):
            node = node[part]
        return [{"name": name, "type": "directory" if isinstance(child, dict) else "file"}
                for name, child in sorted(node.items())]


def test_list_all_files_walks_every_directory_of_a_store():
    store = TreeStore({"a.txt": "", "docs": {"b.md": "", "deep": {"c.csv": ""}}, "e": {}})
    assert airlock.list_all_files(store) == ["a.txt", "docs/b.md", "docs/deep/c.csv"]


def test_list_all_files_lets_a_stores_error_propagate():
    class Broken:
        def list_children(self, directory):
            raise ConnectionError("the store is offline")

    with pytest.raises(ConnectionError):
        airlock.list_all_files(Broken())
