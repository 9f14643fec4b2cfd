// OCI image layouts: index.json → (nested indexes) → manifest → config + layers.
// Every blob is named by a validated digest, opened beneath the layout with no link followed,
// and checked against its descriptor's size and digest.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "airlock/encoding.hpp"
#include "airlock/errors.hpp"
#include "images/sources.hpp"

namespace airlock::images::detail {

namespace {

using Json = nlohmann::json;

constexpr std::string_view kRefNameAnnotation = "org.opencontainers.image.ref.name";
constexpr std::string_view kContainerdNameAnnotation = "io.containerd.image.name";
constexpr int kMaxIndexDepth = 4;

#if defined(__x86_64__)
constexpr std::string_view kHostArchitecture = "amd64";
#elif defined(__aarch64__)
constexpr std::string_view kHostArchitecture = "arm64";
#elif defined(__i386__)
constexpr std::string_view kHostArchitecture = "386";
#elif defined(__riscv) && __riscv_xlen == 64
constexpr std::string_view kHostArchitecture = "riscv64";
#elif defined(__powerpc64__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
constexpr std::string_view kHostArchitecture = "ppc64le";
#elif defined(__s390x__)
constexpr std::string_view kHostArchitecture = "s390x";
#else
constexpr std::string_view kHostArchitecture = "unknown";
#endif

bool is_index(std::string_view media_type) {
  return media_type == "application/vnd.oci.image.index.v1+json" ||
         media_type == "application/vnd.docker.distribution.manifest.list.v2+json";
}

bool is_layer(std::string_view media_type) {
  static constexpr std::string_view kLayers[] = {
      "application/vnd.oci.image.layer.v1.tar",
      "application/vnd.oci.image.layer.v1.tar+gzip",
      "application/vnd.oci.image.layer.v1.tar+zstd",
      "application/vnd.oci.image.layer.nondistributable.v1.tar",
      "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
      "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd",
      "application/vnd.docker.image.rootfs.diff.tar.gzip",
      "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip",
  };
  for (const auto known : kLayers) {
    if (media_type == known) return true;
  }
  return false;
}

[[noreturn]] void refuse(std::string_view display, const std::string& why,
                         const std::string& check = "oci-layout") {
  throw InvalidArgument("OCI layout '" + std::string(display) + "': " + why, check);
}

const Json& field(const Json& object, std::string_view name, std::string_view where,
                  std::string_view display) {
  if (!object.is_object()) refuse(display, std::string(where) + " is not a JSON object");
  const auto found = object.find(name);
  if (found == object.end()) {
    refuse(display, std::string(where) + " has no \"" + std::string(name) + "\"");
  }
  return *found;
}

std::string optional_string(const Json& object, std::string_view name, std::string_view where,
                            std::string_view display) {
  if (!object.is_object()) return {};
  const auto found = object.find(name);
  if (found == object.end() || found->is_null()) return {};
  if (!found->is_string()) {
    refuse(display, std::string(where) + "." + std::string(name) + " is not a string");
  }
  return found->get<std::string>();
}

std::vector<std::string> optional_strings(const Json& object, std::string_view name,
                                          std::string_view where, std::string_view display) {
  std::vector<std::string> out;
  if (!object.is_object()) return out;
  const auto found = object.find(name);
  if (found == object.end() || found->is_null()) return out;
  if (!found->is_array()) {
    refuse(display, std::string(where) + "." + std::string(name) + " is not an array");
  }
  for (const auto& item : *found) {
    if (!item.is_string()) {
      refuse(display, std::string(where) + "." + std::string(name) + " holds a non-string");
    }
    out.push_back(item.get<std::string>());
  }
  return out;
}

struct Descriptor {
  std::string media_type;
  std::string digest_hex;
  std::uint64_t size = 0;
};

// The digest becomes a file name, so it is checked character by character before any use.
Descriptor parse_descriptor(const Json& value, std::string_view where, std::string_view display) {
  Descriptor descriptor;
  descriptor.media_type = optional_string(value, "mediaType", where, display);
  const Json& digest = field(value, "digest", where, display);
  if (!digest.is_string()) refuse(display, std::string(where) + ".digest is not a string");
  const std::string text = digest.get<std::string>();
  const bool well_formed = text.size() == 7 + 64 && text.starts_with("sha256:") &&
                           std::all_of(text.begin() + 7, text.end(), [](char c) {
                             return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
                           });
  if (!well_formed) {
    refuse(display,
           std::string(where) + ".digest " + quote_name(text) +
               " is not sha256:<64 lowercase hex digits>",
           "digest");
  }
  descriptor.digest_hex = text.substr(7);
  const Json& size = field(value, "size", where, display);
  if (!size.is_number_unsigned()) {
    refuse(display, std::string(where) + ".size is not a non-negative integer");
  }
  descriptor.size = size.get<std::uint64_t>();
  return descriptor;
}

std::string blob_path(const std::string& digest_hex) {
  return "blobs/sha256/" + digest_hex;
}

Json parse_json(const std::string& text, std::string_view what, std::string_view display) {
  try {
    return Json::parse(text);
  } catch (const Json::exception& error) {
    refuse(display, std::string(what) + " is not valid JSON: " + error.what());
  }
}

Json read_json_blob(int layout_fd, const Descriptor& descriptor, std::string_view what,
                    const ExtractionLimits& limits, std::string_view display) {
  if (descriptor.size > limits.max_metadata_bytes) {
    refuse(display,
           std::string(what) + " declares " + std::to_string(descriptor.size) +
               " bytes, over the ceiling of " + std::to_string(limits.max_metadata_bytes) +
               " (max_metadata_bytes)",
           "max_metadata_bytes");
  }
  const std::string path = blob_path(descriptor.digest_hex);
  const std::string text = read_small_file(layout_fd, path, limits.max_metadata_bytes,
                                           "max_metadata_bytes", std::string(display) + "/" + path);
  if (text.size() != descriptor.size || sha256_hex(text) != descriptor.digest_hex) {
    refuse(display,
           std::string(what) + " (" + path + ") does not match its descriptor's size and digest",
           "digest");
  }
  return parse_json(text, what, display);
}

std::string describe_candidates(const Json& manifests) {
  std::string out;
  for (const auto& manifest : manifests) {
    if (!out.empty()) out += ", ";
    std::string name = "(untagged)";
    if (manifest.contains("annotations") && manifest["annotations"].is_object()) {
      const auto& annotations = manifest["annotations"];
      const auto found = annotations.find(kRefNameAnnotation);
      if (found != annotations.end() && found->is_string()) name = found->get<std::string>();
    }
    if (manifest.contains("platform") && manifest["platform"].is_object()) {
      name += " [" + manifest["platform"].value("os", std::string("?")) + "/" +
              manifest["platform"].value("architecture", std::string("?")) + "]";
    }
    out += name;
  }
  return out.empty() ? "none" : out;
}

bool tag_matches(const Json& manifest, const std::string& tag) {
  if (!manifest.contains("annotations") || !manifest["annotations"].is_object()) return false;
  const auto& annotations = manifest["annotations"];
  const auto ref = annotations.find(kRefNameAnnotation);
  if (ref != annotations.end() && ref->is_string() && ref->get<std::string>() == tag) return true;
  const auto full = annotations.find(kContainerdNameAnnotation);
  return full != annotations.end() && full->is_string() &&
         full->get<std::string>().ends_with(":" + tag);
}

bool platform_matches(const Json& manifest) {
  if (!manifest.contains("platform")) return true;
  const Json& platform = manifest["platform"];
  if (!platform.is_object()) return false;
  return platform.value("os", std::string()) == "linux" &&
         platform.value("architecture", std::string()) == kHostArchitecture;
}

}  // namespace

OciImage read_oci_layout(int layout_fd, std::string_view display,
                         const std::optional<std::string>& tag, const ExtractionLimits& limits) {
  const std::string marker_text =
      read_small_file(layout_fd, "oci-layout", limits.max_metadata_bytes, "max_metadata_bytes",
                      std::string(display) + "/oci-layout");
  const Json marker = parse_json(marker_text, "oci-layout", display);
  const std::string version = optional_string(marker, "imageLayoutVersion", "oci-layout", display);
  if (!version.starts_with("1.")) {
    refuse(display, "oci-layout has imageLayoutVersion '" + version + "'; only 1.x is understood");
  }

  Json index =
      parse_json(read_small_file(layout_fd, "index.json", limits.max_metadata_bytes,
                                 "max_metadata_bytes", std::string(display) + "/index.json"),
                 "index.json", display);
  std::string where = "index.json";
  std::optional<std::string> wanted = tag;
  for (int depth = 0;; ++depth) {
    if (depth > kMaxIndexDepth) refuse(display, "indexes are nested too deeply");
    const Json& manifests = field(index, "manifests", where, display);
    if (!manifests.is_array()) refuse(display, where + ".manifests is not an array");
    std::vector<const Json*> candidates;
    for (const auto& manifest : manifests) {
      if (wanted && !tag_matches(manifest, *wanted)) continue;
      if (!platform_matches(manifest)) continue;
      candidates.push_back(&manifest);
    }
    if (candidates.empty()) {
      refuse(display,
             where + " has no manifest " + (wanted ? "tagged '" + *wanted + "' " : std::string()) +
                 "for linux/" + std::string(kHostArchitecture) +
                 "; it has: " + describe_candidates(manifests),
             "tag");
    }
    if (candidates.size() > 1) {
      refuse(display,
             where + " has " + std::to_string(candidates.size()) + " manifests for linux/" +
                 std::string(kHostArchitecture) +
                 "; choose one with a tag: " + describe_candidates(manifests),
             "tag");
    }
    const Descriptor chosen =
        parse_descriptor(*candidates.front(), where + ".manifests[]", display);
    Json document = read_json_blob(layout_fd, chosen, "manifest", limits, display);
    const std::string media_type = chosen.media_type.empty()
                                       ? optional_string(document, "mediaType", "manifest", display)
                                       : chosen.media_type;
    if (is_index(media_type)) {
      index = std::move(document);
      where = "index sha256:" + chosen.digest_hex.substr(0, 12);
      wanted.reset();  // a tag names the outer entry; inside, the platform chooses
      continue;
    }

    OciImage image;
    image.manifest_digest = "sha256:" + chosen.digest_hex;
    const Descriptor config = parse_descriptor(field(document, "config", "manifest", display),
                                               "manifest.config", display);
    const Json config_document = read_json_blob(layout_fd, config, "image config", limits, display);
    const Json empty = Json::object();
    const Json& runtime = config_document.is_object() && config_document.contains("config") &&
                                  config_document["config"].is_object()
                              ? config_document["config"]
                              : empty;
    image.config.env = optional_strings(runtime, "Env", "config", display);
    image.config.entrypoint = optional_strings(runtime, "Entrypoint", "config", display);
    image.config.cmd = optional_strings(runtime, "Cmd", "config", display);
    image.config.working_dir = optional_string(runtime, "WorkingDir", "config", display);
    image.config.user = optional_string(runtime, "User", "config", display);

    const Json& layers = field(document, "layers", "manifest", display);
    if (!layers.is_array()) refuse(display, "manifest.layers is not an array");
    for (std::size_t i = 0; i < layers.size(); ++i) {
      const std::string layer_where = "manifest.layers[" + std::to_string(i) + "]";
      const Descriptor layer = parse_descriptor(layers[i], layer_where, display);
      if (!is_layer(layer.media_type)) {
        refuse(display,
               layer_where + " has media type '" + layer.media_type +
                   "', which is not a layer airlock can apply",
               "media_type");
      }
      image.layers.push_back(OciLayer{layer.digest_hex, layer.size, layer.media_type});
    }
    return image;
  }
}

void apply_oci_layers(int layout_fd, const OciImage& image, RootfsWriter& writer) {
  for (std::size_t i = 0; i < image.layers.size(); ++i) {
    const OciLayer& layer = image.layers[i];
    const std::string path = blob_path(layer.digest_hex);
    const std::string what = "layer " + std::to_string(i) + " (sha256:" + layer.digest_hex + ")";
    auto opened = base::openat2(layout_fd, path.c_str(), O_RDONLY, kResolveStore);
    if (!opened) throw_errno("cannot open", path, opened.error);
    const base::UniqueFd blob = std::move(opened.fd);
    struct stat st {};
    if (::fstat(blob.get(), &st) != 0) throw_errno("cannot inspect", path);
    if (!S_ISREG(st.st_mode) || static_cast<std::uint64_t>(st.st_size) != layer.size) {
      throw InvalidArgument(what + " is not a regular file of the " + std::to_string(layer.size) +
                                " bytes its descriptor declares",
                            "digest");
    }
    StreamCheck check;
    check.max_bytes = layer.size;
    writer.begin_layer(true);
    read_tar(blob.get(), what, writer, &check);
    if (check.bytes_read != layer.size || check.digest.finish_hex() != layer.digest_hex) {
      throw InvalidArgument(what + " does not match its digest", "digest");
    }
  }
}

}  // namespace airlock::images::detail
