// References, source kinds and the state directory: the names an operator types.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include "airlock/errors.hpp"
#include "airlock/images.hpp"
#include "airlock/state_dir.hpp"

namespace airlock::images {
namespace {

TEST(Reference, NameAloneMeansLatest) {
  EXPECT_EQ(parse_reference("busybox").to_string(), "busybox:latest");
  EXPECT_EQ(parse_reference("library/python:3.11-slim").name, "library/python");
  EXPECT_EQ(parse_reference("library/python:3.11-slim").tag, "3.11-slim");
  EXPECT_EQ(parse_reference("a.b_c-d:V_1.0").tag, "V_1.0");
}

TEST(Reference, EveryRefusalQuotesTheReferenceAndNamesTheRule) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "empty"},
      {"/abs", "starts with '/'"},
      {"name/", "ends with '/'"},
      {"a/../b", "'..'"},
      {"a..b", "'..'"},
      {"has space", "whitespace"},
      {"tab\there", "whitespace"},
      {std::string("nul\0byte", 8), "NUL"},
      {"Upper", "lowercase"},
      {"a//b", "'//'"},
      {"a:b:c", "more than one ':'"},
      {"name:", "tag after ':' is empty"},
      {"name:-bad", "tag must start"},
      {"name:t/x", "registry"},
      {"host", "reserved"},
      {"host:latest", "reserved"},
      {"weird$char", "may contain only"},
      {std::string(256, 'a'), "longer than 255"},
      {"n:" + std::string(129, 't'), "longer than 128"},
  };
  for (const auto& [text, why] : cases) {
    try {
      parse_reference(text);
      ADD_FAILURE() << "accepted " << text;
    } catch (const InvalidArgument& error) {
      const std::string message = error.what();
      EXPECT_EQ(error.check(), "reference");
      EXPECT_NE(message.find(why), std::string::npos) << message;
      EXPECT_EQ(message.find('\0'), std::string::npos) << "a NUL reached the message";
      EXPECT_EQ(message.find('\t'), std::string::npos) << "a control byte reached the message";
    }
  }
}

TEST(Reference, NameIsDerivedFromTheFileName) {
  EXPECT_EQ(reference_from_path("/x/busybox.tar"), "busybox");
  EXPECT_EQ(reference_from_path("/x/Python.tar.gz"), "python");
  EXPECT_EQ(reference_from_path("/x/deb.tar.zst"), "deb");
  EXPECT_EQ(reference_from_path("/x/rootfs/"), "rootfs");
  EXPECT_EQ(reference_from_path("/x/my image.tar"), std::nullopt);
  EXPECT_EQ(reference_from_path("/x/host.tar"), std::nullopt);
}

TEST(SourceKindNames, ParseAndPrint) {
  EXPECT_EQ(parse_source_kind("dir"), SourceKind::directory);
  EXPECT_EQ(parse_source_kind("oci"), SourceKind::oci_layout);
  EXPECT_EQ(to_string(SourceKind::oci_layout), "oci-layout");
  try {
    parse_source_kind("zip");
    FAIL();
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("directory, tar, oci-layout"), std::string::npos);
  }
}

// Restores an environment variable when the test ends.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(StateDir, OverrideWinsAndMustBeAbsolute) {
  ScopedEnv state("AIRLOCK_STATE_DIR", "/srv/airlock//state/");
  EXPECT_EQ(default_state_dir(), "/srv/airlock/state/");
  EXPECT_EQ(default_image_store_root(), "/srv/airlock/state/images");
  ScopedEnv relative("AIRLOCK_STATE_DIR", "relative");
  EXPECT_THROW(default_state_dir(), InvalidArgument);
}

TEST(StateDir, DefaultsFollowTheEffectiveUser) {
  ScopedEnv state("AIRLOCK_STATE_DIR", nullptr);
  ScopedEnv xdg("XDG_STATE_HOME", "/home/u/.state");
  ScopedEnv home("HOME", "/home/u");
  if (::geteuid() == 0) {
    EXPECT_EQ(default_state_dir(), "/var/lib/airlock");
  } else {
    EXPECT_EQ(default_state_dir(), "/home/u/.state/airlock");
    ScopedEnv relative_xdg("XDG_STATE_HOME", "not/absolute");
    EXPECT_EQ(default_state_dir(), "/home/u/.local/state/airlock");
  }
}

}  // namespace
}  // namespace airlock::images
