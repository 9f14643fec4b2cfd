#include "backends/linux/spawn_config.hpp"

#include "backends/linux/wire.hpp"

namespace airlock::linux_backend {

std::string encode_spawn_config(const SpawnConfig& config) {
  wire::Writer writer;
  writer.bytes(config.instance_id);
  writer.u32(config.flags);
  writer.bytes(config.control_secret);
  writer.bytes(config.sandbox_dir);
  writer.u32(static_cast<std::uint32_t>(config.root_kind));
  writer.bytes(config.lower_dir);
  writer.u32(config.image_uid_base);
  writer.bytes(config.guest_work_dir);
  writer.strings(config.hidden_paths);
  writer.u64(config.storage_bytes);
  writer.u64(config.storage_inodes);
  writer.u32(config.max_ptys);
  writer.u32(config.uid_base);
  writer.u32(config.gid_base);
  writer.u32(config.id_count);
  writer.bytes(config.uid_mapper);
  writer.bytes(config.gid_mapper);
  writer.u32(static_cast<std::uint32_t>(config.namespace_limits.size()));
  for (const auto& limit : config.namespace_limits) {
    writer.bytes(limit.name);
    writer.u64(limit.value);
  }
  writer.strings(config.cgroup_procs);
  writer.bytes(config.command_cgroup);
  writer.u32(config.max_commands);
  writer.bytes(config.seccomp_filter);
  writer.u32(static_cast<std::uint32_t>(config.resource_limits.size()));
  for (const auto& limit : config.resource_limits) {
    writer.u32(limit.resource);
    writer.u64(limit.soft);
    writer.u64(limit.hard);
  }
  writer.bytes(config.hostname);
  return writer.take();
}

bool decode_spawn_config(const std::string& bytes, SpawnConfig& config) {
  wire::Reader reader(bytes);
  config.instance_id = reader.bytes();
  config.flags = reader.u32();
  config.control_secret = reader.bytes();
  config.sandbox_dir = reader.bytes();
  config.root_kind = static_cast<RootKind>(reader.u32());
  config.lower_dir = reader.bytes();
  config.image_uid_base = reader.u32();
  config.guest_work_dir = reader.bytes();
  config.hidden_paths = reader.strings(256);
  config.storage_bytes = reader.u64();
  config.storage_inodes = reader.u64();
  config.max_ptys = reader.u32();
  config.uid_base = reader.u32();
  config.gid_base = reader.u32();
  config.id_count = reader.u32();
  config.uid_mapper = reader.bytes();
  config.gid_mapper = reader.bytes();
  const std::uint32_t namespace_limits = reader.u32();
  if (!reader.ok() || namespace_limits > 32) return false;
  config.namespace_limits.clear();
  for (std::uint32_t i = 0; i < namespace_limits; ++i) {
    NamespaceLimit limit;
    limit.name = reader.bytes();
    limit.value = reader.u64();
    config.namespace_limits.push_back(limit);
  }
  config.cgroup_procs = reader.strings(16);
  config.command_cgroup = reader.bytes();
  config.max_commands = reader.u32();
  config.seccomp_filter = reader.bytes();
  const std::uint32_t limits = reader.u32();
  if (!reader.ok() || limits > 32) return false;
  config.resource_limits.clear();
  for (std::uint32_t i = 0; i < limits; ++i) {
    ResourceLimit limit;
    limit.resource = reader.u32();
    limit.soft = reader.u64();
    limit.hard = reader.u64();
    config.resource_limits.push_back(limit);
  }
  config.hostname = reader.bytes();
  return reader.finished();
}

std::string encode_status(const Status& status) {
  wire::Writer body;
  body.u32(static_cast<std::uint32_t>(status.kind));
  body.i64(status.pid);
  body.u32(static_cast<std::uint32_t>(status.error_number));
  body.bytes(status.step);
  wire::Writer framed;
  framed.bytes(body.data());
  return framed.take();
}

bool decode_status(const std::string& bytes, Status& status) {
  wire::Reader reader(bytes);
  status.kind = static_cast<StatusKind>(reader.u32());
  status.pid = reader.i64();
  status.error_number = static_cast<std::int32_t>(reader.u32());
  status.step = reader.bytes();
  return reader.finished();
}

}  // namespace airlock::linux_backend
