// airlock image: the local image store — build, import, ls, inspect, rm.
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <iostream>

#include "airlock/errors.hpp"
#include "airlock/images.hpp"
#include "cli/command.hpp"
#include "cli/common.hpp"
#include "cli/image_build.hpp"

namespace airlock::cli {
namespace {

using images::ImageInfo;
using images::ImageStore;

struct StoreOptions {
  std::string store;  // empty: default_image_store_root()
  std::uint32_t uid_base = images::OwnershipMap::kDefaultUidBase;

  void add_to(CLI::App& app) {
    app.add_option("--store", store,
                   "image store directory (default: <state dir>/images; the state dir is "
                   "$AIRLOCK_STATE_DIR, else /var/lib/airlock as root, else "
                   "$XDG_STATE_HOME/airlock)");
    app.add_option("--uid-base", uid_base,
                   "as root: guest uid/gid g is stored as host id uid-base + g")
        ->capture_default_str();
  }

  ImageStore open() const {
    const std::filesystem::path root =
        store.empty() ? images::default_image_store_root()
                      : std::filesystem::absolute(std::filesystem::path(store));
    return ImageStore(root, images::OwnershipMap::for_current_process(uid_base));
  }
};

json::Json to_json(const ImageInfo& image) {
  return {{"reference", image.reference},
          {"id", image.id},
          {"rootfs", image.rootfs.string()},
          {"created_at",
           std::chrono::duration_cast<std::chrono::seconds>(image.created_at.time_since_epoch())
               .count()},
          {"source_kind", std::string(images::to_string(image.source_kind))},
          {"source_digest", image.source_digest},
          {"entries", image.entries},
          {"bytes", image.bytes},
          {"config",
           {{"env", image.config.env},
            {"entrypoint", image.config.entrypoint},
            {"cmd", image.config.cmd},
            {"working_dir", image.config.working_dir},
            {"user", image.config.user}}}};
}

std::string human_bytes(std::uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  std::size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(units)) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.1f %s", value, units[unit]);
  return text;
}

std::string local_time(std::chrono::system_clock::time_point when) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(when);
  std::tm parts{};
  localtime_r(&seconds, &parts);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", &parts);
  return text;
}

struct ImportOptions {
  StoreOptions store;
  std::string path;
  std::string name;
  std::string format;
  std::string tag;
};

int run_import(const ImportOptions& options, const Context& context) {
  std::string reference = options.name;
  if (reference.empty()) {
    const std::optional<std::string> derived = images::reference_from_path(options.path);
    if (!derived) {
      throw InvalidArgument(
          "cannot derive an image name from '" + options.path + "'; give one with --name", "name");
    }
    reference = *derived;
  }
  std::optional<images::SourceKind> kind;
  if (!options.format.empty()) kind = images::parse_source_kind(options.format);
  std::optional<std::string> tag;
  if (!options.tag.empty()) tag = options.tag;

  ImageStore store = options.store.open();
  const images::ImportResult result = store.import_path(options.path, reference, kind, tag);
  if (context.json) {
    print_json(
        {{"image", to_json(result.image)}, {"replaced", result.replaced}, {"notes", result.notes}});
    return 0;
  }
  std::cout << "imported " << result.image.reference << " (" << result.image.id << ")\n"
            << "  from " << images::to_string(result.image.source_kind) << " " << options.path
            << ": " << result.image.entries << " entries, " << human_bytes(result.image.bytes)
            << "\n"
            << "  rootfs " << result.image.rootfs.string() << "\n";
  if (result.replaced) std::cout << "  the reference existed and now names this image\n";
  for (const auto& note : result.notes) std::cout << "  skipped " << note << "\n";
  return 0;
}

int run_ls(const StoreOptions& options, const Context& context) {
  const ImageStore store = options.open();
  const std::vector<ImageInfo> images = store.list();
  if (context.json) {
    json::Json list = json::Json::array();
    for (const auto& image : images) list.push_back(to_json(image));
    print_json({{"store", store.root().string()}, {"images", list}});
    return 0;
  }
  if (images.empty()) {
    std::cout << "no images in " << store.root().string()
              << "; build one offline with `airlock image build busybox` (or python), or add "
                 "one with `airlock image import PATH`\n";
    return 0;
  }
  std::printf("%-32s %-19s %10s %8s %-10s %s\n", "REFERENCE", "ID", "SIZE", "ENTRIES", "SOURCE",
              "CREATED");
  for (const auto& image : images) {
    std::printf("%-32s %-19s %10s %8llu %-10s %s\n", image.reference.c_str(),
                image.id.substr(0, 19).c_str(), human_bytes(image.bytes).c_str(),
                static_cast<unsigned long long>(image.entries),
                std::string(images::to_string(image.source_kind)).c_str(),
                local_time(image.created_at).c_str());
  }
  return 0;
}

struct BuildOptions {
  StoreOptions store;
  std::string recipe;
  std::string name;
  bool docker = false;
  std::string docker_host;
  std::string tag;
};

// The engine `--docker` imports into: --docker-host, else the docker backend's "host" in the
// settings file's backend_config, else $DOCKER_HOST, else the default socket — where the docker
// backend itself would look.
std::string engine_host(const BuildOptions& options) {
  if (!options.docker_host.empty()) return options.docker_host;
  const Settings& file = settings();
  if (file.backend_config && file.backend_config->contains("docker")) {
    const json::Json& docker = (*file.backend_config)["docker"];
    if (docker.is_object() && docker.contains("host") && docker["host"].is_string()) {
      return docker["host"].get<std::string>();
    }
  }
  if (const char* host = std::getenv("DOCKER_HOST"); host != nullptr && *host != '\0') return host;
  return "unix:///var/run/docker.sock";
}

int run_build(const BuildOptions& options, const Context& context) {
  const std::string reference =
      options.name.empty() ? default_store_reference(options.recipe) : options.name;
  const std::string tag = options.tag.empty() ? default_engine_tag(options.recipe) : options.tag;
  if (!options.tag.empty() && !options.docker) {
    throw InvalidArgument("--tag names the engine's image: it goes with --docker", "tag");
  }
  ImageStore store = options.store.open();  // refused before minutes are spent building
  BuiltRootfs built;
  build_rootfs(options.recipe, built, [&](const std::string& line) {
    if (!context.json) std::cerr << "airlock: " << line << "\n";
  });
  const images::ImportResult result =
      store.import_path(built.rootfs(), reference, images::SourceKind::directory, std::nullopt);
  std::string engine_id;
  const std::string host = options.docker ? engine_host(options) : std::string();
  if (options.docker) engine_id = import_into_engine(built.rootfs(), host, tag, built);
  if (context.json) {
    json::Json document{{"image", to_json(result.image)}, {"replaced", result.replaced}};
    if (options.docker) document["engine"] = {{"host", host}, {"tag", tag}, {"id", engine_id}};
    print_json(document);
    return 0;
  }
  std::cout << "built " << result.image.reference << " (" << result.image.id << ")\n"
            << "  " << result.image.entries << " entries, " << human_bytes(result.image.bytes)
            << ", in " << store.root().string() << "\n";
  if (options.docker) std::cout << "  imported into " << host << " as " << tag << "\n";
  return 0;
}

struct ReferenceOptions {
  StoreOptions store;
  std::string reference;
};

int run_inspect(const ReferenceOptions& options) {
  print_json(to_json(options.store.open().resolve(options.reference)));
  return 0;
}

int run_rm(const ReferenceOptions& options, const Context& context) {
  ImageStore store = options.store.open();
  const std::string shown = store.resolve(options.reference).reference;
  store.remove(shown);
  if (context.json) {
    print_json({{"removed", shown}});
  } else {
    std::cout << "removed " << shown << "\n";
  }
  return 0;
}

const bool kImageCommand = register_command("image", [](CLI::App& app, Context& context) {
  CLI::App* image =
      app.add_subcommand("image", "the local image store: build, import, ls, inspect, rm");
  image->require_subcommand(1);
  auto configure = [&context] { spdlog::set_level(spdlog::level::from_str(context.log_level)); };

  auto build_options = std::make_shared<BuildOptions>();
  CLI::App* build = image->add_subcommand(
      "build",
      "make a usable image offline from this Debian host: busybox (from busybox-static, "
      "seconds) or python (debootstrap from this host's apt mirror, minutes, root)");
  build->add_option("IMAGE", build_options->recipe, "busybox or python")
      ->required()
      ->check(CLI::IsMember({"busybox", "python"}));
  build->add_option("--name", build_options->name,
                    "reference to publish as in the store (default: IMAGE:latest)");
  build->add_flag("--docker", build_options->docker,
                  "also import it into the container engine (docker or podman) under --tag");
  build->add_option("--docker-host", build_options->docker_host,
                    "the engine, unix://PATH (default: the docker backend's host in the config "
                    "file, else $DOCKER_HOST, else unix:///var/run/docker.sock)");
  build->add_option("--tag", build_options->tag,
                    "the engine's tag (default airlock/IMAGE:latest; airlock/busybox:latest is "
                    "the docker backend's default image)");
  build_options->store.add_to(*build);
  build->callback([build_options, &context, configure] {
    configure();
    context.exit_code = run_build(*build_options, context);
  });

  auto import_options = std::make_shared<ImportOptions>();
  CLI::App* import = image->add_subcommand(
      "import", "add a rootfs directory, a tar (plain/gzip/xz/zstd/bzip2) or an OCI layout");
  import->add_option("PATH", import_options->path, "what to import")->required();
  import->add_option("--name", import_options->name,
                     "reference to publish as, name[:tag] (default: from the file name)");
  import->add_option("--format", import_options->format,
                     "directory, tar or oci-layout (default: detected)");
  import->add_option("--tag", import_options->tag,
                     "OCI layouts: the manifest whose ref.name annotation is this tag");
  import_options->store.add_to(*import);
  import->callback([import_options, &context, configure] {
    configure();
  context.exit_code = run_import(*import_options, context);
});

auto ls_options = std::make_shared<StoreOptions>();
CLI::App* ls = image->add_subcommand("ls", "list the images in the store");
ls_options->add_to(*ls);
ls->callback([ls_options, &context, configure] {
  configure();
  context.exit_code = run_ls(*ls_options, context);
});

auto inspect_options = std::make_shared<ReferenceOptions>();
CLI::App* inspect = image->add_subcommand("inspect", "print one image as JSON");
inspect->add_option("REF", inspect_options->reference, "name[:tag] or sha256:<id>")->required();
inspect_options->store.add_to(*inspect);
inspect->callback([inspect_options, &context, configure] {
  configure();
  context.exit_code = run_inspect(*inspect_options);
});

auto rm_options = std::make_shared<ReferenceOptions>();
CLI::App* rm = image->add_subcommand(
    "rm", "remove a reference (and its content when nothing else names or pins it)");
rm->add_option("REF", rm_options->reference, "name[:tag]")->required();
rm_options->store.add_to(*rm);
rm->callback([rm_options, &context, configure] {
  configure();
  context.exit_code = run_rm(*rm_options, context);
});
});

}  // namespace
}  // namespace airlock::cli
