// The host-tool registry and the one dispatch door: every refusal, and caps checked before a
// body with side effects runs.
#include "airlock/host_tools.hpp"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <sstream>
#include <thread>

#include "airlock/errors.hpp"

namespace airlock {
namespace {

using json::Json;

HostTool tool(std::string name, std::function<Json(const Json&)> body,
              std::optional<HostToolDeclaration> declaration =
                  HostToolDeclaration(SourceIntegrity::trusted, std::nullopt, Identity::app),
              std::vector<ToolParameter> parameters = {}) {
  return HostTool{std::move(name), "a test tool", std::move(parameters), std::move(body),
                  std::move(declaration)};
}

Json echo(const Json& arguments) { return arguments; }

std::shared_ptr<HostToolRegistry> registry_with(std::vector<HostTool> tools,
                                                HostToolRegistryOptions options = {}) {
  auto registry = std::make_shared<HostToolRegistry>(std::move(options));
  for (auto& t : tools) registry->register_tool(std::move(t));
  return registry;
}

// ---- registration ---------------------------------------------------------------------------

TEST(HostToolRegistry, ADispatchCapOfZeroIsRefused) {
  EXPECT_THROW(HostToolRegistry({.max_dispatches_per_run = 0}), InvalidArgument);
  EXPECT_THROW(HostToolRegistry({.response_limits = {0, 10, 10}}), InvalidArgument);
}

TEST(HostToolRegistry, ANameIsNeverReplaced) {
  HostToolRegistry registry;
  registry.register_tool(tool("lookup", echo));
  EXPECT_THROW(registry.register_tool(tool("lookup", echo)), InvalidArgument);
  EXPECT_THROW(registry.register_tool(tool("", echo)), InvalidArgument);
  EXPECT_THROW(registry.register_tool(tool("nobody", nullptr)), InvalidArgument);
  EXPECT_EQ(registry.size(), 1u);
}

TEST(HostToolRegistry, RequireDeclaredRefusesAnUnstampedToolNamingTheDeclaration) {
  HostToolRegistry registry({.require_declared = true});
  try {
    registry.register_tool(tool("bare", echo, std::nullopt));
    ADD_FAILURE() << "an unstamped tool was registered";
  } catch (const HostToolNotDeclared& refused) {
    EXPECT_NE(refused.message().find("'bare'"), std::string::npos) << refused.message();
    EXPECT_NE(refused.message().find("HostToolDeclaration"), std::string::npos)
        << refused.message();
  }
  // …which is a kind of bad input.
  EXPECT_THROW(registry.register_tool(tool("bare", echo, std::nullopt)), InvalidArgument);
}

TEST(HostToolRegistry, AnIdentityOutsideTheAllowedSetIsRefused) {
  HostToolRegistry registry;  // allows app only
  EXPECT_THROW(registry.register_tool(tool(
                   "on_behalf", echo, HostToolDeclaration(std::nullopt, std::nullopt,
                                                          Identity::user))),
               HostToolIdentityNotAllowed);
  // nullopt is an answer ("not that role"), always allowed.
  EXPECT_NO_THROW(registry.register_tool(
      tool("pure", echo, HostToolDeclaration(std::nullopt, std::nullopt, std::nullopt))));
  // An unstamped tool is read as app.
  HostToolRegistry user_only({.allowed_identities = {Identity::user}});
  EXPECT_THROW(user_only.register_tool(tool("bare", echo, std::nullopt)),
               HostToolIdentityNotAllowed);
}

TEST(HostToolRegistry, TheAggregateSealsTheRegistry) {
  HostToolRegistry registry;
  registry.register_tool(tool("a", echo));
  (void)registry.aggregate();
  EXPECT_TRUE(registry.sealed());
  EXPECT_THROW(registry.register_tool(tool("b", echo)), InvalidArgument);
}

TEST(HostToolRegistry, ReadingADeclarationSealsTheRegistry) {
  HostToolRegistry registry;
  registry.register_tool(tool("a", echo));
  const auto declaration = registry.declaration_for("a");
  ASSERT_TRUE(declaration.has_value());
  EXPECT_EQ(declaration->source, SourceIntegrity::trusted);
  EXPECT_TRUE(registry.sealed());
  EXPECT_THROW(registry.register_tool(tool("b", echo)), InvalidArgument);
  EXPECT_FALSE(registry.declaration_for("unknown").has_value());
}

TEST(HostToolRegistry, AToolNeedsExactlyOneBody) {
  HostToolRegistry registry;
  HostTool both = tool("both", echo);
  both.encoded_body = [](const Json&, const HostToolRun&) { return std::string("1"); };
  EXPECT_THROW(registry.register_tool(std::move(both)), InvalidArgument);
  HostTool encoded = tool("encoded", nullptr);
  encoded.encoded_body = [](const Json&, const HostToolRun&) { return std::string("1"); };
  EXPECT_NO_THROW(registry.register_tool(std::move(encoded)));
}

TEST(HostToolRegistry, TheAggregateIsTheWeakestSourceAndEveryDeclaredLeg) {
  HostToolRegistry registry({.allowed_identities = {Identity::app, Identity::user}});
  registry.register_tool(
      tool("trusted", echo, HostToolDeclaration(SourceIntegrity::trusted, "internal", Identity::app)));
  registry.register_tool(
      tool("web", echo, HostToolDeclaration(SourceIntegrity::untrusted, "public", std::nullopt)));
  registry.register_tool(
      tool("mail", echo, HostToolDeclaration(std::nullopt, "internal", Identity::user)));
  const auto aggregate = registry.aggregate();
  EXPECT_EQ(aggregate.result_integrity, SourceIntegrity::untrusted);
  EXPECT_EQ(aggregate.outbound_caps, (std::vector<std::string>{"internal", "public"}));
  EXPECT_EQ(aggregate.identities, (IdentitySet{Identity::app, Identity::user}));
  EXPECT_TRUE(aggregate.requires_approval);
  EXPECT_FALSE(aggregate.has_undeclared);
}

TEST(HostToolRegistry, AnUnstampedToolMakesTheResultUntrustedAndTheIdentityApp) {
  HostToolRegistry registry;
  registry.register_tool(tool("bare", echo, std::nullopt));
  const auto aggregate = registry.aggregate();
  EXPECT_EQ(aggregate.result_integrity, SourceIntegrity::untrusted);
  EXPECT_EQ(aggregate.identities, IdentitySet{Identity::app});
  EXPECT_TRUE(aggregate.has_undeclared);
  EXPECT_FALSE(aggregate.requires_approval);
}

// ---- dispatch ---------------------------------------------------------------------------------

TEST(HostToolDispatch, AValueComesBackAsJson) {
  auto registry = registry_with({tool("add", [](const Json& a) {
    return Json(a["x"].get<int>() + a["y"].get<int>());
  }, HostToolDeclaration(SourceIntegrity::trusted, std::nullopt, Identity::app),
  {{"x", ToolParameter::Type::integer}, {"y", ToolParameter::Type::integer}})});
  HostToolRun run(registry);
  const auto result = run.dispatch("add", Json{{"x", 2}, {"y", 3}});
  ASSERT_TRUE(result.ok()) << *result.refusal;
  EXPECT_EQ(*result.value_json, "5");
}

TEST(HostToolDispatch, RefusedDispatchesCountAgainstTheCap) {
  auto registry = registry_with({tool("a", echo)}, {.max_dispatches_per_run = 2});
  HostToolRun run(registry);
  EXPECT_FALSE(run.dispatch("missing", nullptr).ok());
  EXPECT_TRUE(run.dispatch("a", nullptr).ok());
  const auto third = run.dispatch("a", nullptr);
  ASSERT_FALSE(third.ok());
  EXPECT_NE(third.refusal->find("dispatch cap (2) is exhausted"), std::string::npos);
  EXPECT_EQ(run.dispatched(), 3u);
}

TEST(HostToolDispatch, ANameThatIsNotAStringIsRefused) {
  HostToolRun run(registry_with({tool("a", echo)}));
  const auto result = run.dispatch(Json(7), nullptr);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(*result.refusal, "Error: a host tool name must be a string, not int");
}

TEST(HostToolText, NamesAreQuotedAsPythonQuotesThem) {
  EXPECT_EQ(python_repr("lookup"), "'lookup'");
  EXPECT_EQ(python_repr("it's"), "\"it's\"");
  EXPECT_EQ(python_repr("both ' and \""), "'both \\' and \"'");
  EXPECT_EQ(python_repr("a\\b\n\t\x01\x7f"), "'a\\\\b\\n\\t\\x01\\x7f'");
  EXPECT_EQ(python_repr("über"), "'über'");
  EXPECT_EQ(python_repr("\u00a0\u200b\U0001F600"), "'\\xa0\\u200b\U0001F600'");
  EXPECT_EQ(python_repr(std::string("\xff", 1)), "'\\xff'");
}

TEST(HostToolText, ABoundedNameCountsCharactersNotBytes) {
  std::string umlauts;
  for (int i = 0; i < 130; ++i) umlauts += "ü";
  std::string expected;
  for (int i = 0; i < 120; ++i) expected += "ü";
  EXPECT_EQ(bounded_tool_name(umlauts), expected + " (truncated)");
  EXPECT_EQ(bounded_tool_name(expected), expected);
}

TEST(HostToolDispatch, AnUnknownNameIsEchoedBounded) {
  HostToolRun run(registry_with({tool("a", echo)}));
  const std::string long_name(500, 'x');
  const auto result = run.dispatch(long_name, nullptr);
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.refusal->find(" (truncated)' is not a registered host tool"), std::string::npos);
  EXPECT_LT(result.refusal->size(), 200u);
}

TEST(HostToolDispatch, AUserIdentityToolIsDeclarableButNeverServed) {
  std::atomic<int> ran{0};
  auto registry = registry_with(
      {tool("mail", [&](const Json&) { ++ran; return Json(true); },
            HostToolDeclaration(std::nullopt, std::nullopt, Identity::user))},
      {.allowed_identities = {Identity::app, Identity::user}});
  HostToolRun run(registry);
  const auto result = run.dispatch("mail", nullptr);
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.refusal->find("exercises the user's identity"), std::string::npos);
  EXPECT_EQ(ran.load(), 0);
}

TEST(HostToolDispatch, ArgumentsMustBeAnObjectOfKeywords) {
  HostToolRun run(registry_with({tool("a", echo)}));
  EXPECT_NE(run.dispatch("a", Json::array({1, 2})).refusal->find("must be a JSON object"),
            std::string::npos);
  EXPECT_NE(run.dispatch("a", Json("x")).refusal->find("must be a JSON object"),
            std::string::npos);
  EXPECT_TRUE(run.dispatch("a", nullptr).ok());
}

TEST(HostToolDispatch, ArgumentsAreValidatedAtTheDoorBeforeTheBodyRuns) {
  std::atomic<int> ran{0};
  HostToolRun run(registry_with({tool(
      "fetch", [&](const Json&) { ++ran; return Json("ok"); },
      HostToolDeclaration(SourceIntegrity::untrusted, std::nullopt, Identity::app),
      {{"url", ToolParameter::Type::string, true, ""},
       {"retries", ToolParameter::Type::integer, false, ""}})}));
  EXPECT_NE(run.dispatch("fetch", Json::object()).refusal->find("missing required argument 'url'"),
            std::string::npos);
  EXPECT_NE(run.dispatch("fetch", Json{{"url", 5}}).refusal->find("must be a string"),
            std::string::npos);
  EXPECT_NE(run.dispatch("fetch", Json{{"url", "u"}, {"shell", "rm -rf /"}})
                .refusal->find("unexpected argument 'shell'"),
            std::string::npos);
  EXPECT_EQ(ran.load(), 0);
  EXPECT_TRUE(run.dispatch("fetch", Json{{"url", "u"}}).ok());
  EXPECT_EQ(ran.load(), 1);
}

TEST(HostToolDispatch, ABindingRefusalNamesEveryMissingAndEveryUnexpectedArgument) {
  std::atomic<int> ran{0};
  HostToolRun run(
      registry_with({tool("book",
                          [&](const Json&) {
                            ++ran;
                            return Json("ok");
                          },
                          HostToolDeclaration(std::nullopt, std::nullopt, Identity::app),
                          {{"room", ToolParameter::Type::string, true, ""},
                           {"day", ToolParameter::Type::string, true, ""},
                           {"nights", ToolParameter::Type::integer, false, ""}})}));
  const auto both = run.dispatch("book", Json{{"nights", "two"}, {"guest", "x"}, {"pay", 1}});
  ASSERT_FALSE(both.ok());
  EXPECT_EQ(*both.refusal,
            "Error: arguments do not bind to host tool 'book': missing required arguments "
            "'room', 'day'; unexpected arguments 'guest', 'pay'; argument 'nights' must be an "
            "integer, not a string");
  Json many = Json::object();
  for (int i = 0; i < 10; ++i) many["extra" + std::to_string(i)] = i;
  many[std::string(500, 'q')] = 1;
  many["room"] = "r";
  many["day"] = "d";
  const auto bounded = run.dispatch("book", many);
  ASSERT_FALSE(bounded.ok());
  EXPECT_NE(bounded.refusal->find("unexpected arguments 'extra0', 'extra1', 'extra2' and 8 more"),
            std::string::npos)
      << *bounded.refusal;
  EXPECT_LT(bounded.refusal->size(), 300u);
  EXPECT_EQ(ran.load(), 0);
}

TEST(HostToolDispatch, NullBindsOnlyWhereTheParameterAcceptsIt) {
  HostToolRun run(registry_with(
      {tool("find", echo, HostToolDeclaration(std::nullopt, std::nullopt, Identity::app),
            {{"text", ToolParameter::Type::string, false, "", /*accepts_null=*/true},
             {"limit", ToolParameter::Type::integer, false, ""}})}));
  EXPECT_TRUE(run.dispatch("find", Json{{"text", nullptr}}).ok());
  const auto refused = run.dispatch("find", Json{{"limit", nullptr}});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.refusal->find("argument 'limit' must be an integer, not null"),
            std::string::npos)
      << *refused.refusal;
}

TEST(HostToolDispatch, AToolTakingAnyKeywordGetsTheUnlistedOnes) {
  HostTool open =
      tool("open_ended", echo, HostToolDeclaration(std::nullopt, std::nullopt, Identity::app),
           {{"first", ToolParameter::Type::string, true, ""}});
  open.accepts_any_keyword = true;
  HostToolRun run(registry_with({std::move(open)}));
  const auto result = run.dispatch("open_ended", Json{{"first", "a"}, {"second", 2}});
  ASSERT_TRUE(result.ok()) << *result.refusal;
  EXPECT_EQ(*result.value_json, R"({"first":"a","second":2})");
  EXPECT_NE(run.dispatch("open_ended", Json{{"second", 2}})
                .refusal->find("missing required argument 'first'"),
            std::string::npos);
}

TEST(HostToolDispatch, AToolThatThrowsIsRefusedWithoutItsReason) {
  HostToolRun run(registry_with({tool("boom", [](const Json&) -> Json {
    throw std::runtime_error("db password is hunter2");
  })}));
  const auto result = run.dispatch("boom", nullptr);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(*result.refusal, "Error: host tool 'boom' failed — the reason is in the host's log");
  EXPECT_EQ(result.refusal->find("hunter2"), std::string::npos);
}

TEST(HostToolDispatch, AValueThatIsNotJsonIsRefusedAsSuchNotAsAFailure) {
  HostTool encoded = tool("encoded", nullptr);
  encoded.encoded_body = [](const Json&, const HostToolRun&) {
    return std::string("{\"a\": NaN}");
  };
  HostTool refuses = tool("object", [](const Json&) -> Json {
    throw HostToolValueNotJson("an object JSON cannot spell");
  });
  HostToolRun run(
      registry_with({tool("nan", [](const Json&) { return Json(std::nan("")); }),
                     tool("inf",
                          [](const Json&) {
                            return Json{{"deep", {1.0, HUGE_VAL}}};
                          }),
                     tool("bytes", [](const Json&) { return Json(std::string("\xff\xfe", 2)); }),
                     std::move(encoded), std::move(refuses)}));
  for (const char* name : {"nan", "inf", "bytes", "encoded", "object"}) {
    const auto result = run.dispatch(name, nullptr);
    ASSERT_FALSE(result.ok()) << name;
    EXPECT_EQ(*result.refusal, std::string("Error: host tool '") + name +
                                   "' returned a value that cannot be carried as JSON");
  }
  EXPECT_EQ(run.delivered(), 0u) << "a refused answer kept its slot";
}

TEST(HostToolDispatch, ABodysOwnTypeErrorIsAFailureNotAnEncodingRefusal) {
  HostToolRun run(registry_with({tool(
      "strict",
      [](const Json& a) { return Json(a.at("x").get<int>()); },  // json::type_error for a string
      HostToolDeclaration(std::nullopt, std::nullopt, Identity::app),
      {{"x", ToolParameter::Type::any}})}));
  const auto result = run.dispatch("strict", Json{{"x", "seven"}});
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(*result.refusal, "Error: host tool 'strict' failed — the reason is in the host's log");
}

TEST(HostToolDispatch, AnEncodedBodysTextCrossesAsWritten) {
  HostTool ordered = tool("ordered", nullptr);
  ordered.encoded_body = [](const Json&, const HostToolRun&) {
    return std::string("{\"z\": 1, \"a\": [10000000000000000000000000001]}");
  };
  HostToolRun run(registry_with({std::move(ordered)}));
  const auto result = run.dispatch("ordered", nullptr, kResponseFramingBytes);
  ASSERT_TRUE(result.ok()) << *result.refusal;
  EXPECT_EQ(*result.value_json, "{\"z\": 1, \"a\": [10000000000000000000000000001]}");
  EXPECT_EQ(run.delivered_bytes(), result.value_json->size() + kResponseFramingBytes);
}

TEST(HostToolDispatch, ABodyFailureIsLoggedWithItsTypeAndText) {
  auto stream = std::make_shared<std::ostringstream>();
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(*stream);
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", sink));
  HostToolRun run(registry_with({tool(
      "boom", [](const Json&) -> Json { throw std::out_of_range("row 12 is past the end"); })}));
  const auto result = run.dispatch("boom", nullptr);
  spdlog::set_default_logger(previous);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.refusal->find("row 12"), std::string::npos) << "the reason reached the guest";
  const std::string logged = stream->str();
  EXPECT_NE(logged.find("host tool 'boom' failed: std::out_of_range: row 12 is past the end"),
            std::string::npos)
      << logged;
}

TEST(HostToolDispatch, TheResponseCountCapIsCheckedBeforeTheBodyRuns) {
  std::atomic<int> ran{0};
  HostToolRun run(registry_with({tool("side_effect", [&](const Json&) { ++ran; return Json(1); })},
                                {.response_limits = {1024, 4096, 2}}));
  EXPECT_TRUE(run.dispatch("side_effect", nullptr).ok());
  EXPECT_TRUE(run.dispatch("side_effect", nullptr).ok());
  const auto third = run.dispatch("side_effect", nullptr);
  ASSERT_FALSE(third.ok());
  EXPECT_NE(third.refusal->find("response cap (2) is exhausted"), std::string::npos);
  EXPECT_EQ(ran.load(), 2) << "the body ran for a response that could not be delivered";
}

TEST(HostToolDispatch, FramingThatCannotFitIsRefusedBeforeTheBodyRuns) {
  std::atomic<int> ran{0};
  HostToolRun run(registry_with({tool("t", [&](const Json&) { ++ran; return Json(1); })},
                                {.response_limits = {8, 4096, 8}}));
  EXPECT_FALSE(run.dispatch("t", nullptr, kResponseFramingBytes).ok());
  // A framing at the integer's top must not wrap the arithmetic round into "it fits".
  EXPECT_FALSE(run.dispatch("t", nullptr, std::numeric_limits<std::uint64_t>::max()).ok());
  EXPECT_FALSE(run.dispatch("t", nullptr, std::numeric_limits<std::uint64_t>::max() - 1).ok());
  EXPECT_EQ(ran.load(), 0);
  EXPECT_EQ(run.delivered_bytes(), 0u);
}

TEST(HostToolDispatch, AnOversizedResponseIsRefusedAndCostsNoBudget) {
  HostToolRun run(registry_with({tool("big", [](const Json&) { return Json(std::string(100, 'a')); }),
                                 tool("small", [](const Json&) { return Json(1); })},
                                {.response_limits = {64, 4096, 8}}));
  const auto big = run.dispatch("big", nullptr, kResponseFramingBytes);
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.refusal->find("exceeds the per-response cap (64 bytes)"), std::string::npos);
  EXPECT_EQ(run.delivered(), 0u) << "a refused response kept its slot";
  EXPECT_EQ(run.delivered_bytes(), 0u);
  EXPECT_TRUE(run.dispatch("small", nullptr, kResponseFramingBytes).ok());
  EXPECT_EQ(run.delivered_bytes(), 1u + kResponseFramingBytes);
}

TEST(HostToolDispatch, TheRunBudgetCountsFramingAndRefusesTheBreach) {
  // Each answer crosses 10 bytes of JSON + 11 of framing = 21.
  HostToolRun run(registry_with({tool("ten", [](const Json&) { return Json("12345678"); })},
                                {.response_limits = {64, 40, 8}}));
  EXPECT_TRUE(run.dispatch("ten", nullptr, kResponseFramingBytes).ok());
  // 21 + the smallest possible answer (12) fits 40, so the body runs — and its 21 do not.
  const auto second = run.dispatch("ten", nullptr, kResponseFramingBytes);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.refusal->find("would exceed this run's response budget (19 bytes left)"),
            std::string::npos)
      << *second.refusal;
}

TEST(HostToolDispatch, AnExhaustedBudgetIsRefusedBeforeTheBodyRuns) {
  std::atomic<int> ran{0};
  HostToolRun run(registry_with({tool("ten", [&](const Json&) { ++ran; return Json("12345678"); })},
                                {.response_limits = {64, 30, 8}}));
  EXPECT_TRUE(run.dispatch("ten", nullptr, kResponseFramingBytes).ok());
  // 21 spent; even the smallest answer (1 + 11) cannot fit the 9 bytes left.
  const auto second = run.dispatch("ten", nullptr, kResponseFramingBytes);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.refusal->find("response budget (30 bytes) is exhausted"), std::string::npos);
  EXPECT_EQ(ran.load(), 1);
}

TEST(HostToolDispatch, TheObserverSeesEveryDispatchAndItsOutcomeAndItsFailuresNeverReachIt) {
  std::vector<std::string> log;
  const HostToolRun* seen_run = nullptr;
  HostToolRegistryOptions options;
  options.observer = [&](const HostToolRun& run,
                         const Json& name) -> std::function<void(const DispatchResult&)> {
    seen_run = &run;
    log.push_back("begin " + name.dump());
    return [&log, name](const DispatchResult& outcome) {
      log.push_back("end " + name.dump() + " " +
                    (outcome.ok() ? *outcome.value_json : *outcome.refusal));
      throw std::runtime_error("observer broke");
    };
  };
  HostToolRun run(registry_with({tool("a", echo)}, options));
  EXPECT_TRUE(run.dispatch("a", nullptr).ok());
  EXPECT_FALSE(run.dispatch(Json(7), nullptr).ok());
  EXPECT_EQ(seen_run, &run);
  ASSERT_EQ(log.size(), 4u);
  EXPECT_EQ(log[0], "begin \"a\"");
  EXPECT_EQ(log[1], "end \"a\" {}");
  EXPECT_EQ(log[2], "begin 7");
  EXPECT_EQ(log[3], "end 7 Error: a host tool name must be a string, not int");
}

TEST(HostToolDispatch, AnObserverThatThrowsAsTheDispatchBeginsDoesNotStopIt) {
  HostToolRegistryOptions options;
  options.observer = [](const HostToolRun&,
                        const Json&) -> std::function<void(const DispatchResult&)> {
    throw std::runtime_error("observer broke");
  };
  HostToolRun run(registry_with({tool("a", echo)}, options));
  EXPECT_TRUE(run.dispatch("a", nullptr).ok());
}

TEST(HostToolRun, TheRunContextIsCapturedAsTheRunStartsAndReachesItsBodies) {
  int captured = 0;
  HostToolRegistryOptions options;
  options.run_context = [&]() -> std::shared_ptr<const void> {
    return std::make_shared<const int>(++captured);
  };
  HostTool reader = tool("context", nullptr);
  reader.encoded_body = [](const Json&, const HostToolRun& run) {
    return std::to_string(*std::static_pointer_cast<const int>(run.context()));
  };
  auto registry = registry_with({std::move(reader)}, options);
  HostToolRun first(registry);
  HostToolRun second(registry);
  EXPECT_EQ(captured, 2);
  EXPECT_EQ(*first.dispatch("context", nullptr).value_json, "1");
  EXPECT_EQ(*second.dispatch("context", nullptr).value_json, "2");
  EXPECT_EQ(captured, 2) << "a dispatch captured a context again";
  HostToolRun given(registry, std::make_shared<const int>(40));
  EXPECT_EQ(*given.dispatch("context", nullptr).value_json, "40");
  EXPECT_EQ(captured, 2);
}

TEST(HostToolDispatch, ConcurrentDispatchesNeverExceedTheResponseCap) {
  std::atomic<int> ran{0};
  HostToolRun run(registry_with({tool("slow", [&](const Json&) {
                                   ++ran;
                                   std::this_thread::sleep_for(std::chrono::milliseconds(5));
                                   return Json(1);
                                 })},
                                {.max_dispatches_per_run = 1000, .response_limits = {64, 4096, 10}}));
  std::atomic<int> ok{0};
  {
    std::vector<std::jthread> threads;
    for (int i = 0; i < 8; ++i) {
      threads.emplace_back([&] {
        for (int j = 0; j < 10; ++j) {
          if (run.dispatch("slow", nullptr).ok()) ++ok;
        }
      });
    }
  }
  EXPECT_EQ(ok.load(), 10);
  EXPECT_EQ(ran.load(), 10) << "a body ran beyond the response cap";
}

}  // namespace
}  // namespace airlock
