// The docker backend's pieces that need no engine: framing, stat decoding, version negotiation,
// endpoint and configuration parsing, the container body, and tar building.
#include <archive.h>
#include <archive_entry.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "airlock/backend_factory.hpp"
#include "airlock/backends/docker.hpp"
#include "airlock/encoding.hpp"
#include "airlock/errors.hpp"
#include "backends/docker/containers.hpp"
#include "backends/docker/engine_client.hpp"
#include "backends/docker/multiplexed.hpp"
#include "backends/docker/path_stat.hpp"
#include "backends/docker/seccomp_profile.hpp"
#include "backends/docker/tar_io.hpp"
#include "backends/kit/guest_seccomp_policy.hpp"

namespace airlock::docker {
namespace {

using nlohmann::json;

std::string frame(std::uint8_t stream, std::string_view payload) {
  std::string out(8, '\0');
  out[0] = static_cast<char>(stream);
  const auto size = static_cast<std::uint32_t>(payload.size());
  out[4] = static_cast<char>((size >> 24) & 0xff);
  out[5] = static_cast<char>((size >> 16) & 0xff);
  out[6] = static_cast<char>((size >> 8) & 0xff);
  out[7] = static_cast<char>(size & 0xff);
  return out + std::string(payload);
}

TEST(MultiplexedDecoder, FramesSplitAtEveryByteDemultiplexExactly) {
  std::string stream = frame(1, "out-1\n") + frame(2, std::string("err\0bin", 7)) + frame(1, "") +
                       frame(1, std::string(70000, 'x'));
  for (std::size_t step : {1u, 3u, 7u, 8u, 9u, 4096u, 1u << 20}) {
    std::string out;
    std::string err;
    MultiplexedDecoder decoder([&](StreamType type, std::string_view payload) {
      (type == StreamType::stdout_stream ? out : err).append(payload);
    });
    for (std::size_t at = 0; at < stream.size(); at += step) {
      decoder.feed(std::string_view(stream).substr(at, step));
    }
    EXPECT_EQ(out, "out-1\n" + std::string(70000, 'x')) << "step " << step;
    EXPECT_EQ(err, std::string("err\0bin", 7)) << "step " << step;
    EXPECT_TRUE(decoder.at_frame_boundary());
  }
}

TEST(MultiplexedDecoder, AStreamThatIsNotFramedIsRefused) {
  MultiplexedDecoder decoder([](StreamType, std::string_view) {});
  EXPECT_THROW(decoder.feed("hello, world"), BackendError);
}

TEST(MultiplexedDecoder, APartialFrameIsNotABoundary) {
  MultiplexedDecoder decoder([](StreamType, std::string_view) {});
  decoder.feed(frame(1, "abcdef").substr(0, 10));
  EXPECT_FALSE(decoder.at_frame_boundary());
}

std::string stat_header(const json& value) {
  return base64_encode(value.dump());
}

TEST(PathStat, TheLinkBitWinsOverTheDirectoryBit) {
  // What Podman answers for a link to a directory: both bits, and the target's name.
  const auto stat = decode_path_stat(
      stat_header({{"name", "w-outside"}, {"size", 14}, {"mode", 134218239}, {"isDir", true}}));
  ASSERT_TRUE(stat);
  EXPECT_EQ(stat->kind, EntryKind::symlink);
  EXPECT_EQ(kind_from_file_mode((1ull << 31) | (1ull << 27) | 0777), EntryKind::symlink);
}

TEST(PathStat, KindsFromGoFileModes) {
  EXPECT_EQ(kind_from_file_mode(420), EntryKind::file);
  EXPECT_EQ(kind_from_file_mode(2147484141ull), EntryKind::directory);
  EXPECT_EQ(kind_from_file_mode(33554852ull), EntryKind::other);          // a FIFO
  EXPECT_EQ(kind_from_file_mode((1ull << 24) | 0600), EntryKind::other);  // a socket
  EXPECT_EQ(kind_from_file_mode((1ull << 26) | (1ull << 21) | 0600), EntryKind::other);
  const auto file = decode_path_stat(stat_header({{"name", "f"}, {"size", 3}, {"mode", 420}}));
  ASSERT_TRUE(file);
  EXPECT_EQ(file->kind, EntryKind::file);
  EXPECT_EQ(file->size, 3u);
}

TEST(PathStat, GarbageIsRefusedNotGuessed) {
  EXPECT_FALSE(decode_path_stat("not base64!"));
  EXPECT_FALSE(decode_path_stat(base64_encode("[1,2]")));
  EXPECT_FALSE(decode_path_stat(stat_header({{"name", "f"}, {"mode", "420"}})));
  // A file without a size cannot be held to a cap.
  EXPECT_FALSE(decode_path_stat(stat_header({{"name", "f"}, {"mode", 420}})));
}

TEST(ApiVersion, NegotiatesTheLowerOfTheTwo) {
  EXPECT_EQ(negotiate_api_version("1.43", "1.24", "1.41"), "1.41");
  EXPECT_EQ(negotiate_api_version("1.40", "1.12", "1.41"), "1.40");
  EXPECT_EQ(negotiate_api_version("1.41", "", "1.41"), "1.41");
}

TEST(ApiVersion, AnEngineBelowOurMinimumIsRefused) {
  try {
    negotiate_api_version("1.39", "1.12", "1.41");
    FAIL() << "an old engine was accepted";
  } catch (const BackendError& error) {
    EXPECT_NE(std::string(error.what()).find("1.39"), std::string::npos) << error.what();
  }
  EXPECT_THROW(negotiate_api_version("1.41", "1.42", "1.41"), BackendError);
  EXPECT_THROW(negotiate_api_version("one.forty", "", "1.41"), BackendError);
  EXPECT_THROW(negotiate_api_version("1.41", "", "latest"), InvalidArgument);
}

TEST(EngineHost, UnixAndTcpAreUnderstoodAndEverythingElseRefused) {
  const auto unix_endpoint = parse_engine_host("unix:///run/x.sock", false, "docker.host");
  EXPECT_TRUE(unix_endpoint.unix_socket);
  EXPECT_EQ(unix_endpoint.socket_path, "/run/x.sock");
  EXPECT_EQ(unix_endpoint.base_url(), "http://docker");
  const auto tcp = parse_engine_host("tcp://10.0.0.5:2376", true, "docker.host");
  EXPECT_FALSE(tcp.unix_socket);
  EXPECT_EQ(tcp.base_url(), "https://10.0.0.5:2376");
  for (const char* bad : {"unix://relative.sock", "tcp://host", "tcp://host:port", "ssh://x",
                          "http://h:1", "tcp://user@h:1", ""}) {
    EXPECT_THROW(parse_engine_host(bad, false, "docker.host"), InvalidArgument) << bad;
  }
  EXPECT_THROW(parse_engine_host("unix:///run/x.sock", true, "docker.host"), InvalidArgument);
}

TEST(DockerConfig, UnknownKeysAreRefusedNamingThem) {
  try {
    parse_docker_config(json{{"hots", "unix:///x"}}, "backends[0]");
    FAIL() << "a misspelt key was accepted";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("backends[0].hots"), std::string::npos);
  }
  EXPECT_THROW(make_backend("docker", json{{"pids_limit", -1}}), InvalidArgument);
  EXPECT_THROW(make_backend("docker", json{{"pids_limit", "512"}}), InvalidArgument);
  EXPECT_THROW(make_backend("docker", json{{"memory", "lots"}}), InvalidArgument);
  EXPECT_THROW(make_backend("docker", json{{"cpus", 0}}), InvalidArgument);
  EXPECT_THROW(make_backend("docker", json{{"env", {{"A=B", "c"}}}}), InvalidArgument);
  EXPECT_THROW(make_backend("docker", json{{"host", "ftp://x"}}), InvalidArgument);
  EXPECT_THROW(make_backend("docker", json{{"proxy_image", "p"}}), InvalidArgument)
      << "a proxy without an outbound network would be an allowlist that reaches nothing";
}

TEST(DockerConfig, ValuesAreParsed) {
  const auto config = parse_docker_config(json{{"host", "unix:///x.sock"},
                                               {"memory", "512m"},
                                               {"cpus", 1.5},
                                               {"pids_limit", 64},
                                               {"env", {{"LANG", "C.UTF-8"}}},
                                               {"request_timeout_seconds", 2.5},
                                               {"run_code_interpreter", "python3"}},
                                          "docker");
  EXPECT_EQ(config.memory_bytes, 512ull << 20);
  EXPECT_EQ(config.cpu_millis, 1500u);
  EXPECT_EQ(config.pids_limit, 64u);
  EXPECT_EQ(config.environment.at("LANG"), "C.UTF-8");
  EXPECT_EQ(config.request_timeout, std::chrono::milliseconds(2500));
  // The storage bound and the read-only root are on unless configured off.
  EXPECT_TRUE(config.read_only_rootfs);
  EXPECT_EQ(config.disk_bytes, 1ull << 30);
  EXPECT_TRUE(config.ptys);
  const auto bounded = parse_docker_config(json{{"disk_bytes", "64m"}, {"ptys", false}}, "docker");
  EXPECT_EQ(bounded.disk_bytes, 64ull << 20);
  EXPECT_FALSE(bounded.ptys);
  EXPECT_THROW(parse_docker_config(json{{"disk_bytes", "8m"}}, "docker"), InvalidArgument);
}

TEST(DockerDeclarations, AllowlistIsDeclaredOnlyWithAProxyImage) {
  // The proxy container is what serves allowlist: without an image to run it from, only closed.
  DockerConfig config;
  config.host = "unix:///nonexistent/docker.sock";
  EXPECT_EQ(DockerBackend(config).egress_modes(), (EgressSet{Egress::closed}));
  config.proxy_image = "airlock-test/egress-proxy:latest";
  config.proxy_outbound_network = "outbound";
  EXPECT_EQ(DockerBackend(config).egress_modes(), (EgressSet{Egress::closed, Egress::allowlist}));
  const auto parsed =
      make_backend("docker", json{{"proxy_image", "p"}, {"proxy_outbound_network", "o"}});
  EXPECT_TRUE(parsed->egress_modes()->contains(Egress::allowlist));
  // Proven under runc only: another runtime (runsc runs with --network=none) keeps it closed.
  config.runtime = "runc";
  EXPECT_EQ(DockerBackend(config).egress_modes(), (EgressSet{Egress::closed, Egress::allowlist}));
  config.runtime = "runsc";
  EXPECT_EQ(DockerBackend(config).egress_modes(), (EgressSet{Egress::closed}));
}

TEST(DockerDeclarations, WhatIsDeclaredFollowsTheConfiguration) {
  DockerConfig config;
  config.host = "unix:///nonexistent/docker.sock";
  DockerBackend closed_only(config);
  // runc shares the host's kernel as host root, with host root's per-user pools: the isolation
  // suite proves a separate process, not a container (docs/backends/docker.md).
  EXPECT_EQ(closed_only.isolation(), Isolation::os_process);
  EXPECT_EQ(closed_only.egress_modes(), (EgressSet{Egress::closed}));
  EXPECT_FALSE(closed_only.capabilities()->contains(Capability::run_code));
  EXPECT_TRUE(closed_only.capabilities()->contains(Capability::files_list));
  EXPECT_EQ(closed_only.os_families(), (OsFamilySet{OsFamily::posix}));
  EXPECT_EQ(closed_only.limits()->files_in.max_bytes_per_file, 64ull << 20);

  config.run_code_interpreter = "python3";
  config.runtime = "runsc";
  DockerBackend configured(config);
  EXPECT_EQ(configured.egress_modes(), (EgressSet{Egress::closed}));
  EXPECT_TRUE(configured.capabilities()->contains(Capability::run_code));
  // Under runsc too: the isolation suite did not prove more there (docs/backends/docker.md).
  EXPECT_EQ(configured.isolation(), Isolation::os_process);
  config.runtime = "runc";
  EXPECT_EQ(DockerBackend(config).isolation(), Isolation::os_process);
}

TEST(ContainerBody, HardeningIsAlwaysThereAndNothingOfTheHostIsMounted) {
  ContainerRequest request;
  request.name = "airlock-x";
  request.image = "busybox";
  request.entrypoint = {"sleep", "infinity"};
  request.labels = {{"airlock.backend", "docker"}};
  request.memory_bytes = 64ull << 20;
  request.cpu_millis = 500;
  request.read_only_rootfs = true;
  const auto body = json::parse(container_create_body(request));
  const auto& host = body["HostConfig"];
  EXPECT_EQ(host["NetworkMode"], "none");
  EXPECT_EQ(host["CapDrop"], json::array({"ALL"}));
  EXPECT_EQ(host["SecurityOpt"], json::array({"no-new-privileges"}));
  EXPECT_EQ(host["PidsLimit"], 512);
  EXPECT_EQ(host["Memory"], 64ll << 20);
  EXPECT_EQ(host["MemorySwap"], 64ll << 20);
  EXPECT_EQ(host["NanoCpus"], 500'000'000ll);
  EXPECT_EQ(host["Privileged"], false);
  EXPECT_TRUE(host["Binds"].empty());
  EXPECT_FALSE(host.contains("Mounts"));
  EXPECT_FALSE(host.contains("Volumes"));
  EXPECT_EQ(host["Init"], true);
  EXPECT_EQ(body["Entrypoint"], json::array({"sleep", "infinity"}));
  EXPECT_EQ(body["Labels"]["airlock.backend"], "docker");
  EXPECT_EQ(body["NetworkDisabled"], true);
  EXPECT_EQ(body.dump().find("docker.sock"), std::string::npos);
}

ContainerRequest sandbox_request(EngineFlavour flavour) {
  ContainerRequest request;
  request.name = "airlock-x";
  request.image = "busybox";
  request.entrypoint = {"/bin/sh", "-c", kKeeperScript};
  request.read_only_rootfs = true;
  request.flavour = flavour;
  request.sandbox = true;
  request.seccomp = flavour == EngineFlavour::docker ? guest_seccomp_profile() : "/tmp/profile";
  const StorageLayout layout = plan_storage(kDefaultWorkDir, 64ull << 20, flavour);
  request.storage = layout.mounts;
  request.shm_bytes = layout.shm_bytes;
  request.storage_labels = {{"airlock.backend", "docker"}, {"airlock.role", "storage"}};
  return request;
}

TEST(ContainerBody, ASandboxOnDockerIsReadOnlyBesideItsBoundedVolumes) {
  const auto body = json::parse(container_create_body(sandbox_request(EngineFlavour::docker)));
  const auto& host = body["HostConfig"];
  EXPECT_EQ(host["ReadonlyRootfs"], true);
  EXPECT_EQ(host["SecurityOpt"][0], "no-new-privileges");
  EXPECT_EQ(host["SecurityOpt"][1], "seccomp=" + guest_seccomp_profile());
  EXPECT_EQ(host["SecurityOpt"].size(), 2u);
  // The engine's defaults stay read-only, and the cgroup tree and /dev join them.
  for (const char* path : {"/proc/sys", "/proc/sysrq-trigger", "/proc/bus", "/proc/fs", "/proc/irq",
                           "/sys/fs/cgroup", "/dev"}) {
    EXPECT_NE(std::find(host["ReadonlyPaths"].begin(), host["ReadonlyPaths"].end(), path),
              host["ReadonlyPaths"].end())
        << path;
  }
  // What the guest can write: tmpfs volumes (the archive endpoints write to volumes of a
  // read-only container) of a bounded size and inode count, and /dev/shm.
  ASSERT_EQ(host["Mounts"].size(), 2u);
  std::map<std::string, std::string> options;
  for (const auto& mount : host["Mounts"]) {
    EXPECT_EQ(mount["Type"], "volume");
    EXPECT_FALSE(mount.contains("Source")) << "a named volume would outlive the container";
    EXPECT_EQ(mount["VolumeOptions"]["Labels"]["airlock.role"], "storage");
    const auto& driver = mount["VolumeOptions"]["DriverConfig"];
    EXPECT_EQ(driver["Name"], "local");
    EXPECT_EQ(driver["Options"]["type"], "tmpfs");
    options[mount["Target"].get<std::string>()] = driver["Options"]["o"].get<std::string>();
  }
  EXPECT_EQ(options.at("/maf-sandbox"), "size=33554432,nr_inodes=8192,mode=0755,nosuid,nodev");
  EXPECT_EQ(options.at("/tmp"), "size=16777216,nr_inodes=4096,mode=1777,nosuid,nodev");
  EXPECT_EQ(host["ShmSize"], 8ll << 20);
  EXPECT_FALSE(host.contains("Tmpfs")) << "ptys are on by default";
  // PID 1's output would land in the engine's log on the host's disk.
  EXPECT_EQ(host["LogConfig"]["Type"], "none");
  EXPECT_EQ(body["Entrypoint"], json::array({"/bin/sh", "-c", kKeeperScript}));
}

TEST(ContainerBody, ASandboxOnPodmanMasksTheCgroupTreeAndMountsSizedTmpfs) {
  ContainerRequest request = sandbox_request(EngineFlavour::podman);
  request.ptys = false;
  const auto body = json::parse(container_create_body(request));
  const auto& host = body["HostConfig"];
  // Podman ignores ReadonlyPaths and takes a profile only as a file; it masks on request.
  EXPECT_FALSE(host.contains("ReadonlyPaths"));
  EXPECT_FALSE(host.contains("Mounts"));
  EXPECT_EQ(host["SecurityOpt"],
            json::array({"no-new-privileges", "seccomp=/tmp/profile", "mask=/sys/fs/cgroup"}));
  // Its own unbounded tmpfs on /run and /var/tmp of a read-only root are replaced by ours.
  EXPECT_EQ(host["Tmpfs"]["/maf-sandbox"], "rw,exec,nosuid,nodev,size=33554432,mode=0755");
  EXPECT_EQ(host["Tmpfs"]["/tmp"], "rw,exec,nosuid,nodev,size=16777216,mode=1777");
  EXPECT_EQ(host["Tmpfs"]["/run"], "rw,exec,nosuid,nodev,size=4194304,mode=1777");
  EXPECT_EQ(host["Tmpfs"]["/var/tmp"], "rw,exec,nosuid,nodev,size=4194304,mode=1777");
  EXPECT_EQ(host["Tmpfs"]["/dev/pts"], "ro,nosuid,nodev,noexec,size=4k") << "ptys: false";
  EXPECT_EQ(host["LogConfig"]["Type"], "none");
}

std::uint64_t total(const StorageLayout& layout) {
  std::uint64_t sum = layout.shm_bytes;
  for (const auto& mount : layout.mounts) sum += mount.bytes;
  return sum;
}

TEST(StoragePlan, EveryWritablePlaceSharesOneBudget) {
  for (EngineFlavour flavour : {EngineFlavour::docker, EngineFlavour::podman}) {
    for (const char* work : {"/maf-sandbox/work", "/tmp/work", "/tmp", "/srv", "/usr/src/app",
                             "/a/b/c/d", "/var/tmp/w"}) {
      const auto layout = plan_storage(work, 1ull << 30, flavour);
      EXPECT_LE(total(layout), 1ull << 30) << work;
      std::set<std::string> targets;
      for (const auto& mount : layout.mounts) {
        EXPECT_TRUE(targets.insert(mount.target).second) << work << ": " << mount.target;
        EXPECT_GE(mount.inodes, 1024u);
      }
      EXPECT_TRUE(targets.contains(layout.work_base)) << work;
      EXPECT_LE(total(layout), 1ull << 30) << work;
    }
  }
}

TEST(StoragePlan, TheWorkDirAndItsNeighboursShareTheParentsPlace) {
  auto layout = plan_storage("/maf-sandbox/work", 1ull << 30, EngineFlavour::docker);
  EXPECT_EQ(layout.work_base, "/maf-sandbox");
  EXPECT_EQ(layout.work_directories, std::vector<std::string>{"work"});
  EXPECT_EQ(layout.mounts[0].bytes, 512ull << 20);
  EXPECT_EQ(layout.mounts[1].target, "/tmp");
  EXPECT_EQ(layout.mounts[1].bytes, 256ull << 20);
  EXPECT_EQ(layout.shm_bytes, 128ull << 20);
  // In a standard place: made inside it, which takes the work dir's share.
  layout = plan_storage("/tmp/a/work", 1ull << 30, EngineFlavour::docker);
  EXPECT_EQ(layout.work_base, "/tmp");
  EXPECT_EQ(layout.work_directories, (std::vector<std::string>{"a", "a/work"}));
  ASSERT_EQ(layout.mounts.size(), 1u);
  EXPECT_EQ(layout.mounts[0].bytes, 512ull << 20);
  // Beneath a system directory or at the top: a place of its own (never the image's /usr).
  layout = plan_storage("/usr/src/app", 1ull << 30, EngineFlavour::docker);
  EXPECT_EQ(layout.work_base, "/usr/src/app");
  EXPECT_TRUE(layout.work_directories.empty());
  layout = plan_storage("/srv", 1ull << 30, EngineFlavour::podman);
  EXPECT_EQ(layout.work_base, "/srv");
  // Podman's own tmpfs places are bounded too.
  EXPECT_EQ(layout.mounts.size(), 4u);
}

TEST(StoragePlan, AWorkDirAtTheRootOrInTheKernelsPlacesGetsNoPlaceOfItsOwn) {
  for (const char* work : {"/", "/proc", "/proc/self", "/sys/fs", "/dev", "/dev/shm/w"}) {
    const auto layout = plan_storage(work, 1ull << 30, EngineFlavour::docker);
    EXPECT_EQ(layout.work_base, "") << work;
    EXPECT_TRUE(layout.work_directories.empty()) << work;
    ASSERT_EQ(layout.mounts.size(), 1u) << work;
    EXPECT_EQ(layout.mounts[0].target, "/tmp");
  }
}

TEST(SeccompProfile, IsTheLinuxBackendsPolicyInTheEnginesFormat) {
  namespace policy = airlock::guest_seccomp;
  const auto profile = json::parse(guest_seccomp_profile());
  EXPECT_EQ(profile["defaultAction"], "SCMP_ACT_ERRNO");
  EXPECT_EQ(profile["defaultErrnoRet"], ENOSYS);
  std::map<std::string, std::string> unconditional;  // name → action/errno
  std::map<std::string, int> conditional;            // name → entries
  for (const auto& entry : profile["syscalls"]) {
    const std::string verdict = entry["action"].get<std::string>() +
                                (entry.contains("errnoRet") ? "/" + entry["errnoRet"].dump() : "");
    for (const auto& name : entry["names"]) {
      if (entry.contains("args")) {
        ASSERT_EQ(entry["names"].size(), 1u) << "one syscall per argument rule";
        EXPECT_FALSE(entry["args"].empty());
        ++conditional[name.get<std::string>()];
      } else {
        EXPECT_TRUE(unconditional.emplace(name.get<std::string>(), verdict).second)
            << name << " is listed twice";
      }
    }
  }
  for (std::span<const char* const> family : policy::kAllowedFamilies) {
    for (const char* name : family) EXPECT_EQ(unconditional[name], "SCMP_ACT_ALLOW") << name;
  }
  for (const char* name : policy::kDenied) {
    EXPECT_EQ(unconditional[name], "SCMP_ACT_ERRNO/" + std::to_string(EPERM)) << name;
  }
  // Left out on purpose, spelled out for engines that ignore defaultErrnoRet (Docker 20.10
  // answers EPERM by default, and glibc falls back from clone3 to clone on ENOSYS only).
  for (const char* name : {"clone3", "get_mempolicy", "process_madvise", "modify_ldt"}) {
    EXPECT_EQ(unconditional[name], "SCMP_ACT_ERRNO/" + std::to_string(ENOSYS)) << name;
  }
  // Every argument rule, and nothing unconditional for a syscall that has them (libseccomp
  // drops the conditional rules of such a syscall).
  std::map<std::string, int> rules;
  for (const auto& rule : policy::argument_rules()) ++rules[rule.syscall];
  for (const auto& [name, count] : rules) {
    EXPECT_FALSE(unconditional.contains(name)) << name;
    if (name == "personality") {
      EXPECT_GT(conditional[name], count) << "the other personalities answer ENOSYS explicitly";
    } else {
      EXPECT_EQ(conditional[name], count) << name;
    }
  }
  EXPECT_EQ(conditional.size(), rules.size());
}

TEST(ContainerNames, NamesAreHashedFromKeyKindAndPosture) {
  const SandboxKey key{"scope", "thread", "agent"};
  const SandboxSpec closed({.kind = "codeact"});
  const SandboxSpec other_kind({.kind = "bicep"});
  const SandboxSpec allowlist(
      {.kind = "codeact", .egress_allow = {"pypi.org"}, .egress = Egress::allowlist});
  const std::string name = DockerBackend::container_name(key, closed);
  EXPECT_TRUE(name.starts_with("airlock-"));
  EXPECT_EQ(name.size(), 8u + 24u);
  EXPECT_NE(name, DockerBackend::container_name(key, other_kind));
  EXPECT_NE(name, DockerBackend::container_name(key, allowlist));
  // Length-prefixed: moving a character between parts gives another name.
  EXPECT_NE(DockerBackend::container_name({"ab", "c", "d"}, closed),
            DockerBackend::container_name({"a", "bc", "d"}, closed));
}

TEST(LabelFilter, IsUrlEncodedJson) {
  const std::string filter =
      label_filter({{"airlock.scope", "a b"}, {"airlock.backend", "docker"}});
  EXPECT_EQ(filter.find(' '), std::string::npos);
  EXPECT_EQ(filter.find('"'), std::string::npos);
  EXPECT_NE(filter.find("airlock.scope%3Da%20b"), std::string::npos) << filter;
}

TEST(FileArchive, CarriesTheMissingParentsThenTheFileVerbatim) {
  const std::string content = std::string("\0\x01\xff binary", 10) + std::string(5000, 'z');
  const std::string long_name = std::string(150, 'n') + ".txt";  // needs a PAX name
  const std::string tar = build_file_archive({"a", "a/b"}, "a/b/" + long_name, content);

  archive* reader = archive_read_new();
  archive_read_support_format_tar(reader);
  ASSERT_EQ(archive_read_open_memory(reader, tar.data(), tar.size()), ARCHIVE_OK);
  archive_entry* entry = nullptr;
  std::vector<std::pair<std::string, unsigned>> seen;
  std::string data;
  while (archive_read_next_header(reader, &entry) == ARCHIVE_OK) {
    seen.emplace_back(archive_entry_pathname(entry), archive_entry_filetype(entry));
    if (archive_entry_filetype(entry) == AE_IFREG) {
      data.resize(static_cast<std::size_t>(archive_entry_size(entry)));
      archive_read_data(reader, data.data(), data.size());
      EXPECT_EQ(archive_entry_uid(entry), 0);
      EXPECT_EQ(archive_entry_perm(entry), 0644u);
    }
  }
  archive_read_free(reader);
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0].second, static_cast<unsigned>(AE_IFDIR));
  EXPECT_EQ(seen[1].first, "a/b/");  // libarchive marks directories
  EXPECT_EQ(seen[2].first, "a/b/" + long_name);
  EXPECT_EQ(data, content);
}

}  // namespace
}  // namespace airlock::docker

namespace airlock::docker {
namespace {

TEST(DockerResiduals, TheArchivePlanesPathRaceIsStatedUnlessTheHostPlaneIsRequired) {
  DockerConfig host;
  host.host = "unix:///nonexistent/docker.sock";
  host.file_plane = "host";
  EXPECT_TRUE(DockerBackend(host).stated_residuals().empty());
  for (const char* plane : {"archive", "auto"}) {
    DockerConfig config = host;
    config.file_plane = plane;
    const auto residuals = DockerBackend(config).stated_residuals();
    ASSERT_EQ(residuals.size(), 1u) << plane;
    EXPECT_NE(residuals[0].find("wins the race"), std::string::npos) << residuals[0];
  }
}

}  // namespace
}  // namespace airlock::docker
