// OCI image layouts: layer order, whiteouts, opaque directories, digests, manifest selection.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "airlock/errors.hpp"
#include "airlock/images.hpp"
#include "images/image_fixtures.hpp"

namespace airlock::images {
namespace {

using testing::Compression;
using testing::OciManifestSpec;
using testing::Scratch;
using testing::TarEntry;

class OciLayout : public ::testing::Test {
 protected:
  ImageStore store() const {
    return ImageStore(scratch_.store(), OwnershipMap::for_current_process());
  }
  std::filesystem::path layout() const { return scratch_.path("layout"); }

  void expect_refused(const std::string& check,
                      const std::optional<std::string>& tag = std::nullopt) {
    try {
      store().import_oci_layout(layout(), "refused", tag);
      ADD_FAILURE() << "the layout was accepted; expected a refusal by '" << check << "'";
    } catch (const InvalidArgument& error) {
      EXPECT_EQ(error.check(), check) << error.what();
    }
    EXPECT_FALSE(store().find("refused").has_value());
    EXPECT_TRUE(scratch_.incoming().empty());
  }

  Scratch scratch_;
};

std::vector<TarEntry> base_layer() {
  return {TarEntry::directory("a"),        TarEntry::file("a/gone", "1"),
          TarEntry::file("a/kept", "2"),   TarEntry::directory("b"),
          TarEntry::file("b/x", "3"),      TarEntry::directory("c"),
          TarEntry::file("c/old", "4"),    TarEntry::directory("c/deep"),
          TarEntry::file("c/deep/f", "5"), TarEntry::file("top", "6")};
}

TEST_F(OciLayout, LayersApplyInOrderWithWhiteouts) {
  OciManifestSpec spec;
  spec.layers = {base_layer(),
                 {TarEntry::file("a/.wh.gone", ""), TarEntry::file(".wh.b", ""),
                  TarEntry::file("top", "replaced"), TarEntry::file("a/new", "7")}};
  spec.env = {"PATH=/usr/bin:/bin", "LANG=C.UTF-8"};
  spec.cmd = {"/bin/sh"};
  const auto digests = testing::write_oci_layout(layout(), {spec});
  const ImportResult result = store().import_oci_layout(layout(), "layered");
  const auto& rootfs = result.image.rootfs;
  EXPECT_FALSE(std::filesystem::exists(rootfs / "a/gone"));
  EXPECT_FALSE(std::filesystem::exists(rootfs / "b"));
  EXPECT_EQ(testing::read_file(rootfs / "a/kept"), "2");
  EXPECT_EQ(testing::read_file(rootfs / "a/new"), "7");
  EXPECT_EQ(testing::read_file(rootfs / "top"), "replaced");
  EXPECT_EQ(result.image.source_kind, SourceKind::oci_layout);
  EXPECT_EQ(result.image.source_digest, digests.front());
  EXPECT_EQ(result.image.config.env, spec.env);
  EXPECT_EQ(result.image.config.cmd, spec.cmd);
  EXPECT_EQ(store().resolve("layered").config.env, spec.env) << "the config is not recorded";
  for (const auto& line : testing::tree_listing(rootfs)) {
    EXPECT_EQ(line.find(".wh."), std::string::npos) << "a whiteout was stored: " << line;
  }
}

TEST_F(OciLayout, OpaqueDirectoryHidesOnlyLowerLayerContent) {
  OciManifestSpec spec;
  // The same-layer entries come *before* the marker: they must survive it.
  spec.layers = {base_layer(),
                 {TarEntry::directory("c"), TarEntry::file("c/new", "8"),
                  TarEntry::file("c/deep/g", "9"), TarEntry::file("c/.wh..wh..opq", "")}};
  testing::write_oci_layout(layout(), {spec});
  const ImportResult result = store().import_oci_layout(layout(), "opaque");
  const auto& rootfs = result.image.rootfs;
  EXPECT_FALSE(std::filesystem::exists(rootfs / "c/old"));
  EXPECT_FALSE(std::filesystem::exists(rootfs / "c/deep/f")) << "lower content under a kept dir";
  EXPECT_EQ(testing::read_file(rootfs / "c/new"), "8");
  EXPECT_EQ(testing::read_file(rootfs / "c/deep/g"), "9");
  EXPECT_EQ(testing::read_file(rootfs / "a/gone"), "1") << "an opaque marker reached a sibling";
}

TEST_F(OciLayout, WhiteoutOfThisLayersOwnEntryIsIgnored) {
  OciManifestSpec spec;
  spec.layers = {{TarEntry::file("fresh", "new"), TarEntry::file(".wh.fresh", "")}};
  testing::write_oci_layout(layout(), {spec});
  EXPECT_EQ(testing::read_file(store().import_oci_layout(layout(), "same").image.rootfs / "fresh"),
            "new");
}

TEST_F(OciLayout, LateWhiteoutOfADirectoryKeepsWhatThisLayerPutInIt) {
  OciManifestSpec spec;
  // The layer writes a/fresh first and whites out "a" afterwards: a's lower content goes, the
  // layer's own file stays, whatever order the layer lists them in.
  spec.layers = {base_layer(), {TarEntry::file("a/fresh", "10"), TarEntry::file(".wh.a", "")}};
  testing::write_oci_layout(layout(), {spec});
  const auto rootfs = store().import_oci_layout(layout(), "late").image.rootfs;
  EXPECT_EQ(testing::read_file(rootfs / "a/fresh"), "10");
  EXPECT_FALSE(std::filesystem::exists(rootfs / "a/kept"));
  EXPECT_FALSE(std::filesystem::exists(rootfs / "a/gone"));
}

TEST_F(OciLayout, WhiteoutCannotDeleteThroughASymlink) {
  OciManifestSpec spec;
  spec.layers = {{TarEntry::symlink("host", scratch_.outside().string())},
                 {TarEntry::file("host/.wh.secret", "")}};
  testing::write_oci_layout(layout(), {spec});
  expect_refused("symlinks");
  EXPECT_EQ(testing::read_file(scratch_.outside() / "secret"), "the host's secret\n");
}

TEST_F(OciLayout, OpaqueMarkerCannotEmptyADirectoryThroughASymlink) {
  OciManifestSpec spec;
  spec.layers = {{TarEntry::symlink("host", scratch_.outside().string())},
                 {TarEntry::file("host/.wh..wh..opq", "")}};
  testing::write_oci_layout(layout(), {spec});
  expect_refused("symlinks");
  EXPECT_TRUE(std::filesystem::exists(scratch_.outside() / "secret"));
}

TEST_F(OciLayout, WhiteoutNamingDotDotIsRefused) {
  OciManifestSpec spec;
  spec.layers = {{TarEntry::file("a/.wh...", "")}};
  testing::write_oci_layout(layout(), {spec});
  expect_refused("paths");
}

TEST_F(OciLayout, TamperedLayerIsRefusedByDigest) {
  OciManifestSpec spec;
  spec.layers = {{TarEntry::file("f", "original")}};
  spec.layer_compression = Compression::none;
  testing::write_oci_layout(layout(), {spec});
  // Find the layer blob (the one that is a tar) and change one byte of its content.
  for (const auto& blob : std::filesystem::directory_iterator(layout() / "blobs/sha256")) {
    std::string data = testing::read_file(blob.path());
    const auto at = data.find("original");
    if (at == std::string::npos) continue;
    data[at] = 'O';
    testing::write_file(blob.path(), data);
  }
  expect_refused("digest");
}

TEST_F(OciLayout, DigestCannotNameAPathOutsideBlobs) {
  testing::write_file(layout() / "oci-layout", R"({"imageLayoutVersion": "1.0.0"})");
  const nlohmann::json index = {{"schemaVersion", 2},
                                {"manifests",
                                 {{{"mediaType", "application/vnd.oci.image.manifest.v1+json"},
                                   {"digest", "sha256:../../../outside/secret"},
                                   {"size", 18}}}}};
  testing::write_file(layout() / "index.json", index.dump());
  expect_refused("digest");
}

TEST_F(OciLayout, BlobThatIsASymlinkIsNotFollowed) {
  OciManifestSpec spec;
  spec.layers = {{TarEntry::file("f", "x")}};
  testing::write_oci_layout(layout(), {spec});
  // Replace the manifest blob with a link to an identical copy outside the layout: a layout that
  // points outside itself is refused even when the bytes would match.
  const nlohmann::json index = nlohmann::json::parse(testing::read_file(layout() / "index.json"));
  const std::string hex = index["manifests"][0]["digest"].get<std::string>().substr(7);
  const auto blob = layout() / "blobs/sha256" / hex;
  std::filesystem::copy_file(blob, scratch_.outside() / "manifest");
  std::filesystem::remove(blob);
  std::filesystem::create_symlink(scratch_.outside() / "manifest", blob);
  EXPECT_THROW(store().import_oci_layout(layout(), "linked"), SystemError);
  EXPECT_FALSE(store().find("linked").has_value());
}

TEST_F(OciLayout, TagSelectsTheManifest) {
  OciManifestSpec one;
  one.layers = {{TarEntry::file("which", "one")}};
  one.tag = "v1";
  OciManifestSpec two;
  two.layers = {{TarEntry::file("which", "two")}};
  two.tag = "v2";
  testing::write_oci_layout(layout(), {one, two});
  EXPECT_EQ(testing::read_file(store().import_oci_layout(layout(), "app:v2", "v2").image.rootfs /
                               "which"),
            "two");
  try {
    store().import_oci_layout(layout(), "app");
    FAIL() << "an ambiguous layout was imported without a tag";
  } catch (const InvalidArgument& error) {
    EXPECT_EQ(error.check(), "tag");
    EXPECT_NE(std::string(error.what()).find("v1"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("v2"), std::string::npos) << error.what();
  }
  expect_refused("tag", std::string("v3"));
}

TEST_F(OciLayout, UnknownLayerMediaTypeIsRefused) {
  OciManifestSpec spec;
  spec.layers = {{TarEntry::file("f", "x")}};
  testing::write_oci_layout(layout(), {spec});
  // Rewrite the manifest with an encrypted-layer media type, re-hashing it into the index.
  nlohmann::json index = nlohmann::json::parse(testing::read_file(layout() / "index.json"));
  const std::string old_hex = index["manifests"][0]["digest"].get<std::string>().substr(7);
  nlohmann::json manifest =
      nlohmann::json::parse(testing::read_file(layout() / "blobs/sha256" / old_hex));
  manifest["layers"][0]["mediaType"] = "application/vnd.oci.image.layer.v1.tar+gzip+encrypted";
  const std::string text = manifest.dump();
  const auto scratch_blob = layout() / "manifest.tmp";
  testing::write_file(scratch_blob, text);
  const std::string hex = testing::sha256_file_hex(scratch_blob);
  std::filesystem::rename(scratch_blob, layout() / "blobs/sha256" / hex);
  index["manifests"][0]["digest"] = "sha256:" + hex;
  index["manifests"][0]["size"] = text.size();
  testing::write_file(layout() / "index.json", index.dump());
  expect_refused("media_type");
}

TEST_F(OciLayout, OversizedMetadataIsRefusedBeforeReading) {
  OciManifestSpec spec;
  spec.layers = {{TarEntry::file("f", "x")}};
  testing::write_oci_layout(layout(), {spec});
  nlohmann::json index = nlohmann::json::parse(testing::read_file(layout() / "index.json"));
  index["manifests"][0]["size"] = 1ULL << 40;
  testing::write_file(layout() / "index.json", index.dump());
  expect_refused("max_metadata_bytes");
}

TEST_F(OciLayout, ZstdAndUncompressedLayersApply) {
  OciManifestSpec zstd;
  zstd.layers = {{TarEntry::file("z", "zstd")}, {TarEntry::file("y", "more")}};
  zstd.layer_compression = Compression::zstd;
  testing::write_oci_layout(layout(), {zstd});
  const ImportResult result = store().import_oci_layout(layout(), "zstd");
  EXPECT_EQ(testing::read_file(result.image.rootfs / "z"), "zstd");
  EXPECT_EQ(testing::read_file(result.image.rootfs / "y"), "more");
}

TEST_F(OciLayout, LayerEntriesGetTheSameHostileInputRules) {
  OciManifestSpec spec;
  spec.layers = {{TarEntry::file("ok", "1")}, {TarEntry::file("../../escape", "x")}};
  testing::write_oci_layout(layout(), {spec});
  expect_refused("paths");
}

}  // namespace
}  // namespace airlock::images
