// The error table (airlock/error_table.hpp) against everything it speaks for: the classes of
// errors.hpp, the daemon's statuses and bodies, and the error types docs/api/openapi.yaml
// lists. A class added to one of them and not to the table, or the other way round, fails here.
// (bindings/python/tests/test_error_table.py holds airlock/errors.py to the same table.)
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "airlock/error_table.hpp"
#include "daemon/http_errors.hpp"

#ifndef AIRLOCK_SOURCE_DIR
#error "AIRLOCK_SOURCE_DIR must name the source tree"
#endif

namespace airlock::daemon::test {
namespace {

std::string read_source(const std::string& relative) {
  std::ifstream file(std::string(AIRLOCK_SOURCE_DIR) + "/" + relative);
  EXPECT_TRUE(file) << relative << " is missing";
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

// Runs `check` on the example of `kind` as the object actually thrown (no slicing).
template <typename Check>
void with_example(const ErrorKind& kind, Check check) {
  try {
    kind.raise_example("an example");
    ADD_FAILURE() << kind.type << ": the example raised nothing";
  } catch (const Error& error) {
    check(error);
  } catch (...) {
    ADD_FAILURE() << kind.type << ": the example raised something that is not an airlock error";
  }
}

bool is_ancestor_or_self(const ErrorKind& ancestor, const ErrorKind& of) {
  for (const ErrorKind* at = &of; at;
       at = at->parent.empty() ? nullptr : find_error_kind(at->parent)) {
    if (at == &ancestor) return true;
  }
  return false;
}

TEST(ErrorTable, EveryParentIsAKindListedBeforeItsChildren) {
  std::set<std::string_view> seen;
  for (const auto& kind : error_kinds()) {
    EXPECT_TRUE(seen.insert(kind.type).second) << kind.type << " is listed twice";
    if (kind.parent.empty()) {
      EXPECT_EQ(kind.type, "Error") << "only the root has no parent";
      continue;
    }
    EXPECT_TRUE(seen.count(kind.parent)) << kind.type << ": its parent " << kind.parent
                                         << " is not listed before it";
  }
}

TEST(ErrorTable, EveryExampleIsOfItsKindAndOfItsAncestorsOnly) {
  int raised = 0;
  for (const auto& kind : error_kinds()) {
    if (!kind.raise_example) {
      EXPECT_FALSE(kind.concrete && kind.is) << kind.type << ": a concrete class needs an example";
      continue;
    }
    ++raised;
    with_example(kind, [&](const Error& error) {
      EXPECT_EQ(error.type(), kind.type);
      EXPECT_EQ(&error_kind_of(error), &kind);
      // The table's family tree is the classes' own: every ancestor's class catches it, no
      // other kind's does.
      for (const auto& other : error_kinds()) {
        if (!other.is) continue;
        EXPECT_EQ(other.is(error), is_ancestor_or_self(other, kind))
            << kind.type << " as " << other.type;
      }
    });
  }
  EXPECT_GE(raised, 35);
}

TEST(ErrorTable, EveryErrorClassOfTheHeaderIsAKindWithItsParent) {
  const std::string header = read_source("include/airlock/errors.hpp");
  // class Name : public Base, and the two macros that declare the router's and the outputs' kinds.
  std::map<std::string, std::string> parents;
  const std::regex declared(R"(class (\w+) : public (\w+))");
  for (std::sregex_iterator at(header.begin(), header.end(), declared), end; at != end; ++at) {
    parents[(*at)[1]] = (*at)[2];
  }
  const std::regex by_macro(R"(AIRLOCK_(ROUTER_REFUSAL|OUTPUT_ERROR)\((\w+), ")");
  for (std::sregex_iterator at(header.begin(), header.end(), by_macro), end; at != end; ++at) {
    parents[(*at)[2]] = (*at)[1] == "ROUTER_REFUSAL" ? "RouterRefusal" : "OutputError";
  }
  parents.erase("Name");  // the macros' own bodies
  ASSERT_GT(parents.size(), 35u) << "the header's classes were not found";

  std::map<std::string, const ErrorKind*> by_class;
  for (const auto& kind : error_kinds()) by_class[std::string(kind.cpp_class)] = &kind;
  for (const auto& [name, parent] : parents) {
    if (parent == "std") continue;
    const auto kind = by_class.find("airlock::" + name);
    ASSERT_NE(kind, by_class.end()) << "errors.hpp declares " << name << ", the table lacks it";
    const auto parent_kind = by_class.find("airlock::" + parent);
    ASSERT_NE(parent_kind, by_class.end()) << name << "'s base " << parent;
    EXPECT_EQ(kind->second->parent, parent_kind->second->type) << name;
  }
  EXPECT_TRUE(by_class.count("airlock::Error"));
}

TEST(ErrorTable, TheDaemonAnswersEachKindWithTheTablesStatusAndType) {
  for (const auto& kind : error_kinds()) {
    if (!kind.raise_example) continue;
    with_example(kind, [&](const Error& error) {
      const HttpResponse response = error_response(error);
      const auto body = json::Json::parse(response.body);
      EXPECT_EQ(body["error"]["type"], std::string(kind.type));
      // The two kinds whose status their fields refine, as the examples carry them.
      if (kind.type == "SandboxFileRefused") {
        EXPECT_EQ(response.status, 404) << "a not-found refusal";
      } else if (kind.type == "SystemError") {
        EXPECT_EQ(response.status, 500) << "EIO";
      } else {
        EXPECT_EQ(response.status, kind.http_status) << kind.type;
      }
    });
  }
  for (const auto& kind : error_kinds()) {
    if (kind.cpp_class != "airlock::daemon::HttpError") continue;
    EXPECT_EQ(HttpError(std::string(kind.type), "refused").status(), kind.http_status);
  }
  EXPECT_EQ(http_status_for(std::runtime_error("not ours")),
            find_error_kind("InternalError")->http_status);
}

TEST(ErrorTable, TimeoutsEndTheCliWith124AndEverythingElseWith125) {
  for (const auto& kind : error_kinds()) {
    const bool timeout = is_ancestor_or_self(*find_error_kind("Timeout"), kind);
    EXPECT_EQ(kind.exit_code, timeout ? 124 : 125) << kind.type;
  }
}

// The names under components.schemas.ErrorType.enum, one `- Name` a line.
std::set<std::string> documented_error_types(const std::string& yaml) {
  std::set<std::string> types;
  std::istringstream lines(yaml);
  std::string line;
  bool in_schema = false;
  bool in_enum = false;
  while (std::getline(lines, line)) {
    if (line == "    ErrorType:") {
      in_schema = true;
      continue;
    }
    if (!in_schema) continue;
    if (line.rfind("    ", 0) == 0 && line.size() > 4 && line[4] != ' ') break;  // next schema
    if (line == "      enum:") {
      in_enum = true;
      continue;
    }
    if (in_enum && line.rfind("        - ", 0) == 0) {
      types.insert(line.substr(10));
    } else if (in_enum) {
      in_enum = false;
    }
  }
  return types;
}

TEST(ErrorTable, TheOpenApiDocumentListsExactlyTheKindsThatReachTheWire) {
  const auto documented = documented_error_types(read_source("docs/api/openapi.yaml"));
  ASSERT_FALSE(documented.empty()) << "components.schemas.ErrorType.enum not found";
  std::set<std::string> wire;
  for (const auto& kind : error_kinds()) {
    if (kind.concrete) wire.insert(std::string(kind.type));
  }
  for (const auto& type : wire) {
    EXPECT_TRUE(documented.count(type)) << type << " reaches the wire and the document lacks it";
  }
  for (const auto& type : documented) {
    EXPECT_TRUE(wire.count(type)) << "the document lists " << type << ", which no kind is";
  }
}

}  // namespace
}  // namespace airlock::daemon::test
